"""brokerd and namesrvd as real processes, driven through our remoting client (client.api)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.launcher import alive, index_workers_of
from tests.support.metrics import scrape_async, value_of
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.errors import TopicNotExistError
from tidemq.client.remoting.codes import SerializeType
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import StoredMessage, encode_properties

pytestmark = pytest.mark.asyncio


async def wait_route(api: BrokerAPI, namesrv: str, topic: str, timeout: float = 10.0) -> None:
    async def routed() -> bool:
        return await api.get_route(namesrv, topic) is not None

    await eventually(routed, f"a route for {topic}", timeout)


async def test_send_pull_and_route(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a")
    for i in range(10):
        result = await api.send(
            broker.address, send_header("T1", 1, TAGS="A", KEYS=f"k{i}"), b"x%d" % i
        )
        assert result.status is SendStatus.SEND_OK
        assert result.queue_offset == i
    await wait_route(api, namesrv.address, "T1")
    route = await api.get_route(namesrv.address, "T1")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]
    assert route.broker_datas[0].broker_addrs == {0: broker.address}
    pulled = await api.pull(broker.address, pull_header("T1", 1, 0))
    assert pulled.status is PullStatus.FOUND
    assert [m.body for m in pulled.messages] == [b"x%d" % i for i in range(10)]
    assert [m.queue_offset for m in pulled.messages] == list(range(10))
    assert pulled.messages[3].keys == "k3"
    assert pulled.next_begin_offset == 10
    again = await api.pull(broker.address, pull_header("T1", 1, 10))
    assert again.status is PullStatus.NO_NEW_MSG


async def test_json_and_binary_serialisations(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a")
    for kind in (SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.MSGPACK):
        client = BrokerAPI(serialize_type=kind)
        try:
            result = await client.send(broker.address, send_header("TS", 0), kind.name.encode())
            assert result.status is SendStatus.SEND_OK
            pulled = await client.pull(broker.address, pull_header("TS", 0, result.queue_offset))
            assert pulled.messages[0].body == kind.name.encode()
        finally:
            await client.close()


async def test_a_held_pull_is_answered_by_the_arrival_not_the_periodic_check(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    metrics = free_port()
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a", f"metricsPort={metrics}")
    await api.send(broker.address, send_header("TL", 0), b"first")
    pull = asyncio.create_task(
        api.pull(broker.address, pull_header("TL", 0, 1, suspend_ms=60_000), timeout=90)
    )

    async def held() -> bool:
        return value_of(await scrape_async(metrics), "tidemq_pulls_held") == 1

    await eventually(held, "the empty pull held by the broker", 20)
    await api.send(broker.address, send_header("TL", 0), b"second")
    result = await pull
    assert result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"second"]
    # Which wake-up ended the hold, as the broker counts it: the arrival, not the 5 s check
    # (the safety net for lost wake-ups) nor the suspend time.
    samples = await scrape_async(metrics)
    ended = {
        cause: value_of(samples, "tidemq_held_pulls_total", cause=cause)
        for cause in ("arrival", "check", "timeout")
    }
    assert ended == {"arrival": 1, "check": 0, "timeout": 0}, ended


async def test_held_pull_times_out_empty(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a")
    await api.send(broker.address, send_header("TE", 0), b"only")
    started = time.monotonic()
    result = await api.pull(broker.address, pull_header("TE", 0, 1, suspend_ms=700), timeout=10)
    assert result.status is PullStatus.NO_NEW_MSG
    assert time.monotonic() - started >= 0.6


async def test_offsets_persist_across_restart(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    store = tmp_path / "store-a"
    broker = processes.brokerd(namesrv.address, store)
    for _ in range(5):
        await api.send(broker.address, send_header("TO", 2), b"m")
    await api.update_consumer_offset(broker.address, "CG", "TO", 2, 3)
    # A pull with the commit flag also stores the offset (on a master).
    await api.pull(broker.address, pull_header("TO", 1, 0, commit=0))
    assert await api.query_consumer_offset(broker.address, "CG", "TO", 2) == 3
    assert broker.stop() == 0
    restarted = processes.brokerd(namesrv.address, store, port=broker.port)
    await api.remoting.close()
    api.remoting = type(api.remoting)()
    assert await api.query_consumer_offset(restarted.address, "CG", "TO", 2) == 3
    assert await api.get_max_offset(restarted.address, "TO", 2) == 5
    pulled = await api.pull(restarted.address, pull_header("TO", 2, 3))
    assert [m.queue_offset for m in pulled.messages] == [3, 4]


async def test_commit_offset_flag_on_pull(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a")
    await api.send(broker.address, send_header("TC", 0), b"m")
    await api.pull(broker.address, pull_header("TC", 0, 0, commit=7, group="G7"))
    assert await api.query_consumer_offset(broker.address, "G7", "TC", 0) == 7


async def test_topic_not_created_when_auto_create_is_off(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a", "autoCreateTopicEnable=false")
    with pytest.raises(TopicNotExistError):
        await api.send(broker.address, send_header("Nope", 0), b"m")
    assert await api.get_max_offset(broker.address, "Nope", 0) == 0


async def test_query_by_key_and_view_by_offset(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a")
    result = await api.send(broker.address, send_header("TQ", 0, KEYS="order-42"), b"payload")
    now = int(time.time() * 1000)
    found = []

    async def query() -> list[StoredMessage]:
        return await api.query_message(
            broker.address, "TQ", "order-42", 10, now - 60_000, now + 60_000
        )

    # The index is built by dispatch, right after the append.
    await eventually(query, "the key in the broker's index", 30)
    found = await query()
    assert [m.body for m in found] == [b"payload"]
    viewed = await api.view_message(broker.address, found[0].physical_offset)
    assert viewed.msg_id == result.msg_id
    assert await api.search_offset(broker.address, "TQ", 0, now - 60_000) == 0


async def test_index_worker_builds_the_index_and_exits_with_its_broker(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """The broker builds its index in a child process; queries see a send at once; a SIGKILLed
    broker's worker exits, and the restarted broker finds old and new keys."""
    store = tmp_path / "store-a"
    broker = processes.brokerd(namesrv.address, store)
    assert broker.pid is not None
    workers = index_workers_of(broker.pid)
    assert len(workers) == 1, workers
    worker = workers.pop()
    now = int(time.time() * 1000)
    for i in range(200):
        await api.send(broker.address, send_header("TW", i % 4, KEYS=f"k-{i}"), b"m%d" % i)

    async def query() -> list[StoredMessage]:
        return await api.query_message(
            broker.address, "TW", "k-199", 10, now - 60_000, now + 60_000
        )

    # A query waits up to 1 s for dispatch and the worker (read your writes on a quiet machine);
    # the worker runs at a lower priority, so a loaded one may need a second query.
    await eventually(query, "k-199 in the worker's index", 30)
    assert [m.body for m in await query()] == [b"m199"]
    # Background work: messageIndexWorkerNice (10) below the broker.
    broker_priority = os.getpriority(os.PRIO_PROCESS, broker.pid)
    assert os.getpriority(os.PRIO_PROCESS, worker) == min(19, broker_priority + 10)

    broker.kill()
    await eventually(lambda: not alive(worker), "the worker of the killed broker to exit", 10)
    assert not alive(worker), "the worker of a killed broker must exit"

    restarted = processes.brokerd(namesrv.address, store, port=broker.port)
    await api.remoting.close()
    api.remoting = type(api.remoting)()
    await api.send(restarted.address, send_header("TW", 0, KEYS="k-new"), b"new")
    for key, body in (("k-7", b"m7"), ("k-new", b"new")):

        async def query_again(key: str = key) -> list[StoredMessage]:
            return await api.query_message(
                restarted.address, "TW", key, 10, now - 60_000, int(time.time() * 1000) + 60_000
            )

        await eventually(query_again, f"{key} in the restarted broker's index", 30)
        assert [m.body for m in await query_again()] == [body], key
    assert restarted.pid is not None
    assert len(index_workers_of(restarted.pid)) == 1


async def test_batches_are_queued_filtered_by_tag_and_indexed(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """SEND_BATCH_MESSAGE with a tag per message, between single sends: the broker's queue
    holds each message at its offset with its tag's code (a tag subscription gets exactly its
    messages from the broker, before any client-side check), and each key is indexed."""
    broker = processes.brokerd(namesrv.address, tmp_path / "store-a")
    tags_cycle = ["A", "B", "", "标签", "A"]
    expected: list[tuple[bytes, str]] = []
    for round_ in range(6):
        messages = []
        for j in range(7):
            n = len(expected)
            tags = tags_cycle[(round_ + j) % len(tags_cycle)]
            props = {"KEYS": f"key-{n}", "UNIQ_KEY": f"U{n:010d}"} | (
                {"TAGS": tags} if tags else {}
            )
            messages.append((0, b"b%d" % n, encode_properties(props)))
            expected.append((b"b%d" % n, tags))
        header = send_header("TB", 0)
        header.properties = None
        header.batch = True
        result = await api.send(broker.address, header, encode_batch_body(messages), batch=True)
        assert result.status is SendStatus.SEND_OK
        assert result.queue_offset == len(expected) - 7
        single = await api.send(broker.address, send_header("TB", 0, TAGS="B"), b"s%d" % round_)
        assert single.queue_offset == len(expected)
        expected.append((b"s%d" % round_, "B"))

    async def pull_all(subscription: str) -> list[tuple[int, bytes, str]]:
        offset, got = 0, []
        while offset < len(expected):
            pulled = await api.pull(
                broker.address, pull_header("TB", 0, offset, subscription=subscription)
            )
            got += [(m.queue_offset, m.body, m.tags or "") for m in pulled.messages]
            offset = pulled.next_begin_offset
        return got

    stored = [(offset, body, tags) for offset, (body, tags) in enumerate(expected)]
    assert await pull_all("*") == stored
    for subscription, wanted in (("A", {"A"}), ("标签 || B", {"标签", "B"})):
        got = await pull_all(subscription)
        assert got == [m for m in stored if m[2] in wanted], subscription

    now = int(time.time() * 1000)

    async def query() -> list[StoredMessage]:
        return await api.query_message(
            broker.address, "TB", "key-40", 10, now - 60_000, now + 60_000
        )

    await eventually(query, "key-40 in the index", 30)  # the index worker runs niced
    assert [m.body for m in await query()] == [b"b40"]
