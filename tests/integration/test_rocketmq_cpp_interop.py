"""Interop with the RocketMQ C++ client (PyPI `rocketmq==0.4.4`, rocketmq-client-cpp 1.0.1).

namesrvd and brokerd run as real processes; the C++ client runs in `cpp_peer.py` subprocesses
(one per step: a native crash fails the test instead of killing pytest, and every step gets a
fresh client) that print JSON lines of what they sent and received. What the broker stored is
read back with our own client (`client.api.BrokerAPI`).

The C++ client sends a batch as SEND_MESSAGE (10) with `batch=1` (it writes booleans as 1/0),
not as Java's SEND_BATCH_MESSAGE (320); a Java broker reads `1` as false and stores the whole
batch as one message (rocketmq-client-cpp#189, #363). tidemq splits it: the batch test checks it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

# Not installed (the dev extra has it on x86_64 Linux only), or its librocketmq.so is missing.
pytest.importorskip(
    "rocketmq.client",
    reason="the RocketMQ C++ client (rocketmq==0.4.4, x86_64 Linux only) cannot be imported",
    exc_type=ImportError,
)

from tests.support.conditions import eventually
from tests.support.cpp_peers import (
    CONSUME_TIMEOUT,
    LINGER,
    SEND_OK,
    peer,
    run_peer,
)
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from tidemq.store.record import StoredMessage, encode_properties

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]


def message(key: str, tags: str, body: str, origin: str = "cpp") -> dict[str, Any]:
    return {"keys": key, "tags": tags, "body": body, "props": {"origin": origin}}


async def cpp_send(
    tmp_path: Path, namesrv: Daemon, topic: str, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`send_sync` each message from a fresh C++ producer; every send must be SEND_OK."""
    spec = {
        "op": "produce",
        "namesrv": namesrv.address,
        "group": f"PG-{topic}",
        "topic": topic,
        "messages": messages,
    }
    sent = [e for e in await run_peer(tmp_path, spec) if e["event"] == "sent"]
    assert [e["index"] for e in sent] == list(range(len(messages)))
    assert [e["status"] for e in sent] == [SEND_OK] * len(messages)
    return sent


async def cpp_consume(
    tmp_path: Path,
    namesrv: Daemon,
    group: str,
    topic: str,
    expect: int,
    expression: str = "*",
) -> list[dict[str, Any]]:
    """Messages a fresh C++ push consumer got: it runs until `expect` arrived, plus LINGER."""
    spec = {
        "op": "consume",
        "namesrv": namesrv.address,
        "group": group,
        "topic": topic,
        "expression": expression,
        "expect": expect,
        "timeout": CONSUME_TIMEOUT,
        "linger": LINGER,
    }
    events = await run_peer(tmp_path, spec)
    return [e for e in events if e["event"] == "received"]


# --- our side -------------------------------------------------------------------------------


async def wait_route(api: BrokerAPI, namesrv: Daemon, topic: str, timeout: float = 10.0) -> int:
    """Wait until the name server routes `topic`; its read queue count."""
    queues: list[int] = []

    async def routed() -> bool:
        route = await api.get_route(namesrv.address, topic)
        if route is not None and route.queue_datas:
            queues.append(max(q.read_queue_nums for q in route.queue_datas))
        return bool(queues)

    await eventually(routed, f"a route for {topic}", timeout)
    return queues[-1]


async def start_broker(
    processes: ProcessGroup, namesrv: Daemon, api: BrokerAPI, store: Path, port: int | None = None
) -> Daemon:
    """A broker whose TBW102 route is known (a C++ producer creates topics from it)."""
    broker = processes.brokerd(namesrv.address, store, port=port)
    await wait_route(api, namesrv, "TBW102")
    return broker


async def stored_messages(api: BrokerAPI, broker: Daemon, topic: str) -> list[StoredMessage]:
    """Every message of every queue of `topic`, as the broker serves them to a pull."""
    config = (await api.all_topic_config(broker.address)).topic_config_table[topic]
    out: list[StoredMessage] = []
    for queue_id in range(config.read_queue_nums):
        offset = 0
        while True:
            header = PullMessageRequestHeader(
                consumer_group="tidemq-inspector",
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_millis=0,
                sub_version=0,
                subscription="*",
            )
            pulled = await api.pull(broker.address, header)
            if pulled.status is not PullStatus.FOUND:
                break
            out.extend(pulled.messages)
            offset = pulled.next_begin_offset
    return out


async def tidemq_send(
    api: BrokerAPI, broker: Daemon, topic: str, messages: Iterable[dict[str, Any]]
) -> None:
    for i, m in enumerate(messages):
        props = {"TAGS": m["tags"], "KEYS": m["keys"], **m["props"]}
        header = SendMessageRequestHeader(
            producer_group="PG-tidemq",
            topic=topic,
            queue_id=i % 4,
            born_timestamp=int(time.time() * 1000),
            properties=encode_properties(props),
        )
        result = await api.send(broker.address, header, m["body"].encode())
        assert result.status is SendStatus.SEND_OK


def by_key(received: list[dict[str, Any]]) -> dict[str, tuple[str, str, str | None]]:
    """keys -> (tags, body, origin) of what a consumer got; every key exactly once."""
    keys = [r["keys"] for r in received]
    assert len(keys) == len(set(keys)), f"duplicate deliveries: {sorted(keys)}"
    return {r["keys"]: (r["tags"], r["body"], r["origin"]) for r in received}


def expected(messages: list[dict[str, Any]]) -> dict[str, tuple[str, str, str | None]]:
    return {m["keys"]: (m["tags"], m["body"], m["props"]["origin"]) for m in messages}


async def committed_total(api: BrokerAPI, broker: Daemon, group: str, topic: str) -> int:
    config = (await api.all_topic_config(broker.address)).topic_config_table[topic]
    total = 0
    for queue_id in range(config.read_queue_nums):
        total += max(0, await api.query_consumer_offset(broker.address, group, topic, queue_id))
    return total


# --- scenarios ------------------------------------------------------------------------------


async def test_sync_sends_are_stored_with_tags_keys_and_offsets(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = await start_broker(processes, namesrv, api, tmp_path / "store")
    topic = "CppSync"
    messages = [message(f"sync-key-{i}", f"Tag{'ABC'[i % 3]}", f"sync body {i}") for i in range(9)]
    sent = await cpp_send(tmp_path, namesrv, topic, messages)

    stored = {m.properties.get("UNIQ_KEY"): m for m in await stored_messages(api, broker, topic)}
    assert len(stored) == len(messages)
    last_offset: dict[int, int] = {}
    for spec, result in zip(messages, sent, strict=True):
        # The C++ client reports its UNIQ_KEY as the msg id, and the queue offset it was given.
        record = stored.get(result["msg_id"])
        assert record is not None, f"{result['msg_id']} not stored: {sorted(map(str, stored))}"
        assert record.tags == spec["tags"]
        assert record.keys == spec["keys"]
        assert record.body == spec["body"].encode()
        assert record.properties["origin"] == "cpp"
        assert record.queue_offset == result["offset"]
        # Offsets grow in send order within each queue.
        assert record.queue_offset > last_offset.get(record.queue_id, -1)
        last_offset[record.queue_id] = record.queue_offset
    assert len(last_offset) > 1, "the producer spreads sends over the topic's queues"
    max_offsets = [await api.get_max_offset(broker.address, topic, q) for q in range(4)]
    assert sum(max_offsets) == len(messages)


async def test_batch_send_is_stored_and_consumable(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = await start_broker(processes, namesrv, api, tmp_path / "store")
    topic = "CppBatch"
    messages = [message(f"batch-key-{i}", f"Tag{'AB'[i % 2]}", f"batch body {i}") for i in range(7)]
    spec = {
        "op": "batch",
        "namesrv": namesrv.address,
        "group": "PG-batch",
        "topic": topic,
        "messages": messages,
    }
    events = await run_peer(tmp_path, spec)
    [result] = [e for e in events if e["event"] == "batch_sent"]
    assert result["status"] == SEND_OK

    stored = await stored_messages(api, broker, topic)
    # One batch goes to one queue, in order, at consecutive offsets from the reported one.
    assert len({m.queue_id for m in stored}) == 1
    assert [m.queue_offset for m in stored] == list(
        range(result["offset"], result["offset"] + len(messages))
    )
    assert [(m.keys, m.tags, m.body) for m in stored] == [
        (m["keys"], m["tags"], m["body"].encode()) for m in messages
    ]
    assert len({m.properties.get("UNIQ_KEY") for m in stored}) == len(messages)

    received = await cpp_consume(tmp_path, namesrv, "CG-batch", topic, len(messages))
    assert by_key(received) == expected(messages)


async def test_push_consumer_gets_cpp_and_tidemq_messages_intact(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = await start_broker(processes, namesrv, api, tmp_path / "store")
    topic = "CppPush"
    from_cpp = [message(f"cpp-{i}", f"T{i % 2}", f"from C++ {i} \u00e9") for i in range(5)]
    from_us = [message(f"ours-{i}", f"T{i % 3}", f"from tidemq {i}", "tidemq") for i in range(5)]
    late = [message(f"late-{i}", "Late", f"sent while consuming {i}", "tidemq") for i in range(3)]
    await cpp_send(tmp_path, namesrv, topic, from_cpp)
    await tidemq_send(api, broker, topic, from_us)
    await wait_route(api, namesrv, topic)
    everything = from_cpp + from_us + late
    spec = {
        "op": "consume",
        "namesrv": namesrv.address,
        "group": "CG-push",
        "topic": topic,
        "expression": "*",
        "expect": len(everything),
        "timeout": CONSUME_TIMEOUT,
        "linger": LINGER,
    }
    async with peer(tmp_path, spec) as consumer:
        await consumer.wait_event("started")
        # These reach a consumer already polling: its held pulls are woken by the arrival.
        await tidemq_send(api, broker, topic, late)
        await consumer.finish()
    received = consumer.of("received")
    assert by_key(received) == expected(everything)
    assert all(r["topic"] == topic and r["reconsume_times"] == 0 for r in received)
    [done] = consumer.of("done")
    assert not done["timed_out"]
    # On shutdown the client commits where it got to: the whole topic.
    assert await committed_total(api, broker, "CG-push", topic) == len(everything)


async def test_tag_filtered_consumer_gets_only_its_tag(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = await start_broker(processes, namesrv, api, tmp_path / "store")
    topic = "CppTags"
    messages = [message(f"tag-key-{i}", "TagA" if i % 2 else "TagB", f"tag {i}") for i in range(12)]
    await cpp_send(tmp_path, namesrv, topic, messages)
    tag_a = [m for m in messages if m["tags"] == "TagA"]
    # It runs until every TagA message arrived and LINGER more: time for a TagB to show up.
    received = await cpp_consume(tmp_path, namesrv, "CG-tags", topic, len(tag_a), "TagA")
    assert by_key(received) == expected(tag_a)
    # The filtered-out messages are passed over, not left pending: the group is at the end.
    assert await committed_total(api, broker, "CG-tags", topic) == len(messages)


async def test_consumer_offsets_survive_broker_restart(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    store = tmp_path / "store"
    broker = await start_broker(processes, namesrv, api, store)
    topic, group = "CppRestart", "CG-restart"
    before = [message(f"before-{i}", "Before", f"before restart {i}") for i in range(6)]
    after = [message(f"after-{i}", "After", f"after restart {i}") for i in range(4)]
    await cpp_send(tmp_path, namesrv, topic, before)
    received = await cpp_consume(tmp_path, namesrv, group, topic, len(before))
    assert by_key(received) == expected(before)
    assert await committed_total(api, broker, group, topic) == len(before)

    assert broker.stop() == 0
    api.remoting.close_connection(broker.address)  # the next call connects to the new one
    restarted = processes.brokerd(namesrv.address, store, port=broker.port, name="brokerd-again")
    await wait_route(api, namesrv, topic)
    assert await committed_total(api, restarted, group, topic) == len(before)
    await cpp_send(tmp_path, namesrv, topic, after)
    received = await cpp_consume(tmp_path, namesrv, group, topic, len(after))
    # Exactly the new messages: nothing consumed before the restart comes again.
    assert by_key(received) == expected(after)
    assert await committed_total(api, restarted, group, topic) == len(before) + len(after)
