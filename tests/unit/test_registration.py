"""The broker's registration (broker/registration.py) against the name server's real handlers
(broker/namesrv/processor.py over a RouteInfoManager), with the transport replaced by calls.

What is checked: only changes after the first full registration; a full one split in parts;
a restarted name server's request for a full one; a name server that answers increments as a
RocketMQ one does gets full registrations only. The real processes are in
tests/integration/test_registration_scale.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pytest

from tidemq.broker import registration as registration_module
from tidemq.broker.managers.config_file import compact_json
from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.processor import NamesrvProcessor
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.broker.registration import (
    PARTS_IN_FLIGHT,
    BrokerIdentity,
    NameServerRegistration,
    RegistrationShape,
    RegistrationTable,
)
from tidemq.client.protocol import models
from tidemq.client.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.protocol.namesrv import RegisterBrokerRequestHeader
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.client import RemotingClient

NAMESRV = "127.0.0.1:1"
IDENTITY = BrokerIdentity("C", "broker-a", 0, "127.0.0.1:2", "127.0.0.1:3")


@dataclass
class Peer:
    peer: str = "broker"


@dataclass
class NameServer:
    """A name server's handlers, called in place of a connection; records what came."""

    rocketmq: bool = False  # answer as a RocketMQ name server: no `incremental` echo
    routes: RouteInfoManager = field(default_factory=RouteInfoManager)
    headers: list[RegisterBrokerRequestHeader] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    held: list[DataVersion | None] = field(default_factory=list)  # after each request
    bodies: list[bytes] = field(default_factory=list)
    # Requests in flight when each arrived (itself included), and the most at any time: the
    # answer comes after a few turns of the loop, as from a connection.
    in_flight_at_arrival: list[int] = field(default_factory=list)
    in_flight: int = 0
    fail_at: int | None = None  # the request (0, 1, ...) that gets no answer

    def restart(self) -> None:
        self.routes = RouteInfoManager()

    async def invoke(self, address: str, request: RemotingCommand, timeout: float) -> Any:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        self.headers.append(header)
        index = len(self.headers) - 1  # at arrival: others arrive while this one waits
        self.sizes.append(len(request.body))
        self.bodies.append(bytes(request.body))
        self.in_flight += 1
        self.in_flight_at_arrival.append(self.in_flight)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            if index == self.fail_at:
                raise ConnectionError("no answer")
        finally:
            self.in_flight -= 1
        if self.rocketmq:  # a RocketMQ name server reads neither extension
            request.ext_fields.pop("incremental", None)
        processor = NamesrvProcessor(self.routes, KvConfigStore())
        response = processor.handlers[request.code](cast(Any, Peer()), request)
        if self.rocketmq:  # nor echoes a part's index
            response.ext_fields.pop("splitIndex", None)
        self.held.append(self.routes.query_data_version(header.broker_addr))
        return response

    def kinds(self) -> list[str]:
        return [
            "inc" if h.incremental else "full" if h.split_count is None else "part"
            for h in self.headers
        ]


@dataclass
class Table:
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    version: DataVersion = field(default_factory=lambda: DataVersion(1, 0))

    def put(self, name: str) -> None:
        self.topics[name] = TopicConfig(name, 4, 4)
        self.version.next_version()

    def view(self, texts: bool = False) -> RegistrationTable:
        """`texts`: the table gives its rows as JSON texts too (as the broker's does)."""
        return RegistrationTable(
            lambda: TopicConfigSerializeWrapper(dict(self.topics), replace(self.version)),
            self.topics.get,
            lambda: replace(self.version),
            (lambda: [(k, compact_json(c.to_dict())) for k, c in self.topics.items()])
            if texts
            else lambda: None,
            self.json_row,
            lambda: texts,
        )

    def json_row(self, name: str) -> str | None:
        config = self.topics.get(name)
        return None if config is None else compact_json(config.to_dict())


def registration(
    namesrv: NameServer, table: Table, split_size: int = 800, texts: bool = False
) -> NameServerRegistration:
    return NameServerRegistration(
        IDENTITY,
        [NAMESRV],
        cast(RemotingClient, namesrv),
        table.view(texts),
        period_ms=30_000,
        timeout_ms=1000,
        shape=RegistrationShape(split_size=split_size),
    )


async def test_after_the_first_full_registration_only_changes_are_sent() -> None:
    namesrv, table = NameServer(), Table()
    for i in range(3000):
        table.put(f"T{i}")
    reg = registration(namesrv, table, split_size=1000)
    await reg.register_all()
    assert namesrv.kinds() == ["part", "part", "part"]
    table.put("%RETRY%g")
    reg.note_change("%RETRY%g")
    await reg.register_all()  # the topic
    await reg.register_all()  # a heartbeat
    assert namesrv.kinds()[3:] == ["inc", "inc"]
    assert namesrv.sizes[-1] < 500 < namesrv.sizes[0]
    assert namesrv.routes.get_route("%RETRY%g") is not None
    assert namesrv.routes.get_route("T2999") is not None
    del table.topics["T0"]
    table.version.next_version()
    reg.note_change("T0")
    await reg.register_all()
    assert namesrv.routes.get_route("T0") is None


async def test_a_restarted_name_server_gets_a_full_registration_at_once() -> None:
    namesrv, table = NameServer(), Table()
    table.put("A")
    reg = registration(namesrv, table)
    await reg.register_all()
    namesrv.restart()
    table.put("B")
    reg.note_change("B")
    await reg.register_all()
    assert namesrv.kinds() == ["full", "inc", "full"]
    assert namesrv.routes.get_route("A") is not None
    assert namesrv.routes.get_route("B") is not None


async def test_a_rocketmq_name_server_gets_full_registrations_only() -> None:
    namesrv, table = NameServer(rocketmq=True), Table()
    table.put("A")
    reg = registration(namesrv, table)
    await reg.register_all()
    table.put("B")
    reg.note_change("B")
    await reg.register_all()
    await reg.register_all()
    assert namesrv.kinds() == ["full", "inc", "full", "full"]


async def test_many_pending_topics_go_in_requests_of_the_split_size() -> None:
    namesrv, table = NameServer(), Table()
    reg = registration(namesrv, table, split_size=100)
    await reg.register_all()
    for i in range(250):
        table.put(f"New{i}")
        reg.note_change(f"New{i}")
    del table.topics["New0"]  # deleted again before it was sent: its deletion is sent
    table.version.next_version()
    await reg.register_all()
    assert namesrv.kinds() == ["full", "inc", "inc", "inc"]
    sent = [h for h in namesrv.headers if h.incremental]
    assert len(sent) == 3
    # Only the last moved the name server's version: a failure before it left the base valid.
    base = namesrv.held[0]
    assert namesrv.held[1:] == [base, base, table.version]
    assert namesrv.routes.get_route("New249") is not None
    assert namesrv.routes.get_route("New0") is None
    table.put("Later")
    reg.note_change("Later")
    await reg.register_all()
    assert namesrv.kinds()[-1] == "inc" and namesrv.routes.get_route("Later") is not None


def many_topics(count: int) -> Table:
    table = Table()
    for i in range(count):
        table.put(f"T{i}")
    table.topics["Odd"] = TopicConfig("Odd", 1, 2, 4, "MULTI_TAG", 3, order=True)
    return table


async def test_middle_parts_are_pipelined_with_a_name_server_that_echoes_their_index() -> None:
    namesrv, table = NameServer(), many_topics(2999)
    reg = registration(namesrv, table, split_size=100, texts=True)
    await reg.register_all()
    arrivals = namesrv.in_flight_at_arrival
    assert len(arrivals) == 30
    # the first alone, the middle ones up to PARTS_IN_FLIGHT at once, the last once all of them
    # were answered (the name server holds the version from the last part on)
    assert arrivals[0] == 1 and arrivals[-1] == 1
    assert max(arrivals) == PARTS_IN_FLIGHT
    assert namesrv.held[-1] == table.version
    assert reg.sync[NAMESRV].held == table.version
    assert len(namesrv.routes.topic_queue_table) == 3000
    assert namesrv.routes.get_route("T2998") is not None


async def test_a_rocketmq_name_server_gets_the_parts_one_after_the_other() -> None:
    namesrv, table = NameServer(rocketmq=True), many_topics(999)
    await registration(namesrv, table, split_size=100, texts=True).register_all()
    assert namesrv.in_flight_at_arrival == [1] * 10
    assert len(namesrv.routes.topic_queue_table) == 1000


async def test_a_part_without_answer_leaves_nothing_held_and_the_next_round_sends_it_all() -> None:
    namesrv, table = NameServer(), many_topics(999)
    namesrv.fail_at = 4
    reg = registration(namesrv, table, split_size=100, texts=True)
    assert await reg.register_all() == []
    assert reg.sync[NAMESRV].held is None
    assert namesrv.kinds().count("part") <= 4 + PARTS_IN_FLIGHT
    sent = len(namesrv.headers)
    await reg.register_all()
    assert [h.split_index for h in namesrv.headers[sent:]] == list(range(10))
    assert reg.sync[NAMESRV].held == table.version


async def test_parts_made_of_the_rows_texts_are_the_bytes_of_the_decoded_table() -> None:
    bodies, table = [], many_topics(250)
    for texts in (False, True):
        namesrv = NameServer()
        await registration(namesrv, table, split_size=100, texts=texts).register_all()
        bodies.append(namesrv.bodies)
    assert len(bodies[1]) == 3
    assert bodies[0] == bodies[1]


async def test_increments_made_of_the_rows_texts_are_the_bytes_of_the_decoded_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker keeps topics created in lists as their rows' texts: its increments are made of
    them, byte for byte what the TopicConfigs would encode (the changed, a deleted one, in
    requests of the split size), and the name server routes them alike."""
    monkeypatch.setattr(models.time, "time", lambda: 1_700_000_000.0)  # equal versions
    bodies, routes = [], []
    for texts in (False, True):
        namesrv, table = NameServer(), many_topics(10)
        reg = registration(namesrv, table, split_size=100, texts=texts)
        await reg.register_all()
        for i in range(250):
            table.put(f"New{i}")
            reg.note_change(f"New{i}")
        table.topics["Odd2"] = TopicConfig("Odd2", 1, 2, 4, "MULTI_TAG", 3, order=True)
        reg.note_change("Odd2")
        del table.topics["T3"]
        table.version.next_version()
        reg.note_change("T3")
        await reg.register_all()
        assert namesrv.kinds() == ["full", "inc", "inc", "inc"]
        bodies.append(namesrv.bodies[1:])
        routes.append(
            [namesrv.routes.get_route(t) is not None for t in ("New0", "New249", "Odd2", "T3")]
        )
    assert routes == [[True, True, True, False]] * 2
    assert len(bodies[1]) == 3 and bodies[0] == bodies[1]


@pytest.mark.parametrize("split", [True, False])
async def test_many_pending_topics_go_as_increments_when_split(
    monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    """More than MAX_INCREMENT_TOPICS pending (a fast creation the registration fell behind):
    split, they go as increments in requests of the split size, not as the whole table;
    unsplit, as a full registration (an increment would be one large body)."""
    monkeypatch.setattr(registration_module, "MAX_INCREMENT_TOPICS", 300)
    namesrv, table = NameServer(), many_topics(1000)
    reg = NameServerRegistration(
        IDENTITY,
        [NAMESRV],
        cast(RemotingClient, namesrv),
        table.view(),
        period_ms=30_000,
        timeout_ms=1000,
        shape=RegistrationShape(split=split, split_size=200),
    )
    await reg.register_all()
    first = len(namesrv.headers)
    for i in range(500):
        table.put(f"New{i}")
        reg.note_change(f"New{i}")
    await reg.register_all()
    kinds = namesrv.kinds()[first:]
    assert kinds == (["inc"] * 3 if split else ["full"])
    assert namesrv.routes.get_route("New499") is not None
    assert namesrv.routes.get_route("T999") is not None


async def test_a_text_noted_with_the_change_is_sent_without_looking_the_topic_up() -> None:
    """The broker's topic manager hands each created topic's row text with its change notice:
    an increment of texts is made of those (a look-up per topic in a table of a million is a
    few cache misses; the drift note). A notice without a text (a deletion, a decoded topic)
    is looked up when sent, as before."""
    namesrv, table = NameServer(), many_topics(10)
    looked_up: list[str] = []
    view = table.view(texts=True)

    def json_row(name: str) -> str | None:
        looked_up.append(name)
        return table.json_row(name)

    reg = NameServerRegistration(
        IDENTITY,
        [NAMESRV],
        cast(RemotingClient, namesrv),
        replace(view, json_row=json_row),
        period_ms=30_000,
        timeout_ms=1000,
        shape=RegistrationShape(split_size=100),
    )
    await reg.register_all()
    for i in range(250):
        table.put(f"New{i}")
        reg.note_change(f"New{i}", table.json_row(f"New{i}"))
    del table.topics["T3"]
    table.version.next_version()
    reg.note_change("T3")
    await reg.register_all()
    assert looked_up == ["T3"]
    assert namesrv.kinds()[1:] == ["inc"] * 3
    assert namesrv.routes.get_route("New249") is not None
    assert namesrv.routes.get_route("T3") is None


async def test_an_increments_middle_requests_are_pipelined_and_the_last_moves_the_version() -> None:
    """The requests of a large increment: the first alone, the middle ones up to
    PARTS_IN_FLIGHT at once, the last (which moves the name server's version) once all the
    others were answered. One at a time, registration lagged a creation of 20,000-30,000
    topics/s by up to 100,000 topics (each answer waited behind the creation's requests)."""
    namesrv, table = NameServer(), many_topics(10)
    reg = registration(namesrv, table, split_size=100, texts=True)
    await reg.register_all()
    for i in range(1000):
        table.put(f"New{i}")
        reg.note_change(f"New{i}", table.json_row(f"New{i}"))
    await reg.register_all()
    arrivals = namesrv.in_flight_at_arrival[1:]
    assert len(arrivals) == 10 and namesrv.kinds()[1:] == ["inc"] * 10
    assert arrivals[0] == 1 and arrivals[-1] == 1 and max(arrivals) == PARTS_IN_FLIGHT
    base = namesrv.held[0]
    assert namesrv.held[1:-1] == [base] * 9 and namesrv.held[-1] == table.version
    assert reg.sync[NAMESRV].held == table.version
    assert all(namesrv.routes.get_route(f"New{i}") is not None for i in range(1000))
    assert arrivals[1] == 1  # the first alone: the name server had taken no increment yet
    between = namesrv.held[-1]
    for i in range(1000):  # now it has: the first goes with the middle ones
        table.put(f"Next{i}")
        reg.note_change(f"Next{i}", table.json_row(f"Next{i}"))
    await reg.register_all()
    arrivals = namesrv.in_flight_at_arrival[11:]
    assert len(arrivals) == 10 and arrivals[:2] == [1, 2] and arrivals[-1] == 1
    assert namesrv.held[-2] == between and namesrv.held[-1] == table.version
    assert all(namesrv.routes.get_route(f"Next{i}") is not None for i in range(1000))


async def test_a_middle_request_without_answer_leaves_the_base_and_the_next_round_sends_all() -> (
    None
):
    namesrv, table = NameServer(), many_topics(10)
    reg = registration(namesrv, table, split_size=100, texts=True)
    await reg.register_all()
    for i in range(1000):
        table.put(f"New{i}")
        reg.note_change(f"New{i}", table.json_row(f"New{i}"))
    namesrv.fail_at = 4  # the fourth request of the increment
    assert await reg.register_all() == []
    base = namesrv.held[0]
    assert reg.sync[NAMESRV].held == base and all(held == base for held in namesrv.held[1:])
    # changed again meanwhile: the newer text is the one sent, not the failed request's
    table.topics["New5"] = TopicConfig("New5", 2, 2)
    table.version.next_version()
    reg.note_change("New5", table.json_row("New5"))
    sent = len(namesrv.headers)
    namesrv.fail_at = None
    await reg.register_all()
    assert namesrv.kinds()[sent:] == ["inc"] * 10
    assert reg.sync[NAMESRV].held == table.version
    route = namesrv.routes.get_route("New5")
    assert route is not None and route.queue_datas[0].write_queue_nums == 2
    assert all(namesrv.routes.get_route(f"New{i}") is not None for i in range(1000))
