"""The broker's registration (broker/registration.py) against the name server's real handlers
(broker/namesrv/processor.py over a RouteInfoManager), with the transport replaced by calls.

What is checked: only changes after the first full registration; a full one split in parts;
a restarted name server's request for a full one; a name server that answers increments as a
RocketMQ one does gets full registrations only. The real processes are in
tests/integration/test_registration_scale.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, cast

from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.processor import NamesrvProcessor
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.broker.registration import (
    BrokerIdentity,
    NameServerRegistration,
    RegistrationShape,
    RegistrationTable,
)
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

    def restart(self) -> None:
        self.routes = RouteInfoManager()

    async def invoke(self, address: str, request: RemotingCommand, timeout: float) -> Any:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        self.headers.append(header)
        self.sizes.append(len(request.body))
        if self.rocketmq:  # a RocketMQ name server reads neither extension
            request.ext_fields.pop("incremental", None)
        processor = NamesrvProcessor(self.routes, KvConfigStore())
        response = processor.handlers[request.code](cast(Any, Peer()), request)
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

    def view(self) -> RegistrationTable:
        return RegistrationTable(
            lambda: TopicConfigSerializeWrapper(dict(self.topics), replace(self.version)),
            self.topics.get,
            lambda: replace(self.version),
        )


def registration(
    namesrv: NameServer, table: Table, split_size: int = 800
) -> NameServerRegistration:
    return NameServerRegistration(
        IDENTITY,
        [NAMESRV],
        cast(RemotingClient, namesrv),
        table.view(),
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
