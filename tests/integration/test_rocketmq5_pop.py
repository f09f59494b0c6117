"""POP consumption with the official RocketMQ 5 Python client (`rocketmq-python-client` in
`.venv-rmq5`, driven line by line through tests/support/rmq5/consume.py) against real
namesrvd and brokerd processes: SimpleConsumer receive / ack / change of invisible duration /
redelivery after it expires, on messages sent by tidemq's 4.x producer; PushConsumer; a broker
killed (-9) and restarted with messages in flight; RocketMQ's reported failures as situations
(#3787, #7724, #9583)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.cpp_peers import SEND_OK, run_peer
from tests.support.ha_processes import start_master, start_slave, wait_transfer
from tests.support.processes import BROKER_BOOTED, Daemon, ProcessGroup, free_port
from tests.support.rmq5_clients import Rmq5Consumer, rmq5_send, start_broker
from tests.support.wire import pull_header
from tidemq.client.admin.api import AdminClient
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.errors import TopicNotExistError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.models import SubscriptionGroupConfig, TopicConfig
from tidemq.client.transport.client import RemotingClient

pytestmark = pytest.mark.asyncio

# Short invisible durations for the redelivery cases (ProxyConfig's minimum is 10 s).
SHORT = "minInvisibleTimeMillsForRecv=1000"


@pytest.fixture
async def consumers() -> AsyncIterator[list[Rmq5Consumer]]:
    """Every official consumer a test starts, closed (killed if need be) at its end."""
    started: list[Rmq5Consumer] = []
    try:
        yield started
    finally:
        for consumer in started:
            await consumer.close()


async def send_4x(namesrv: Daemon, topic: str, bodies: list[str], tag: str = "") -> None:
    producer = AsyncProducer("PG-pop", namesrv.address)
    await producer.start()
    try:
        for body in bodies:
            await producer.send(Message(topic, body.encode(), tags=tag or None))
    finally:
        await producer.stop()


def by_body(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["body"]: m for m in messages}


async def test_simple_consumer_receives_acks_changes_and_gets_redeliveries(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    topic = "POP-simple"
    _broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic, SHORT)
    consumer = await Rmq5Consumer.start(
        endpoint, mode="simple", topic=topic, group="GS", await_seconds=1
    )
    consumers.append(consumer)
    # Redelivery: a message is acknowledged as soon as its own receive answers (no handle has to
    # outlive the receives of the other queues, which take a long poll each when empty); the
    # other is left to expire and comes back with its second attempt.
    await send_4x(namesrv, topic, ["ack-me", "let-expire"], tag="T")
    received: list[dict[str, Any]] = []
    acked_at = time.monotonic()
    deadline = time.monotonic() + 60
    while not any(m["body"] == "let-expire" and m["attempt"] == 2 for m in received):
        assert time.monotonic() < deadline, received
        for message in await consumer.receive(invisible=10):
            received.append(message)
            if message["body"] == "ack-me":
                await consumer.call(op="ack", id=message["id"])
                acked_at = time.monotonic()
    firsts = by_body([m for m in received if m["attempt"] == 1])
    assert sorted(firsts) == ["ack-me", "let-expire"]
    assert {m["topic"] for m in received} == {topic} and {m["tag"] for m in received} == {"T"}
    again = received[-1]
    assert again["id"] == firsts["let-expire"]["id"]
    await consumer.call(op="ack", id=again["id"])
    # #3787 / #9583: a slow consumer extends; its old handle still acknowledges afterwards.
    # A long first invisible time: the handles need not race the clock.
    await send_4x(namesrv, topic, ["extend", "old-handle"], tag="T")
    first = by_body(await consumer.receive_until(2, invisible=60))
    assert set(first) == {"extend", "old-handle"}
    assert {m["attempt"] for m in first.values()} == {1}
    changed = await consumer.call(op="change", id=first["extend"]["id"], invisible=60)
    assert changed["handle"] != first["extend"]["handle"]
    await consumer.call(op="change", id=first["old-handle"]["id"], invisible=60)
    await consumer.call(
        op="ack_with", id=first["old-handle"]["id"], handle=first["old-handle"]["handle"]
    )
    await consumer.call(op="ack", id=first["extend"]["id"])  # with its new handle
    # Nothing more: #7724, the acknowledged one never comes back, also past its invisible time.
    late: list[dict[str, Any]] = []
    while time.monotonic() < acked_at + 10:
        late += await consumer.receive(invisible=60)
    for _ in range(4):  # each of the topic's 4 queues (the client asks them round robin)
        late += await consumer.receive(invisible=60)
    assert late == []


async def test_official_producer_and_push_consumer(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    topic = "POP-push"
    _broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    bodies = [{"body": f"push-{i}"} for i in range(5)] + [{"body": "fail-once"}]
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, bodies)
    assert all("error" not in r for r in receipts), receipts
    consumer = await Rmq5Consumer.start(endpoint, mode="push", topic=topic, group="GP")
    consumers.append(consumer)
    consumed: list[dict[str, Any]] = []
    # fail-once is answered FAILURE on attempt 1: the client's retry policy (the group's
    # backoff from delay level 3, 3 s with LEVELS) makes it visible again, then attempt 2
    # succeeds.
    while not any(m["body"] == "fail-once" and m["attempt"] == 2 for m in consumed):
        consumed.append((await consumer.answer(timeout=90))["consumed"])
    firsts = sorted(m["body"] for m in consumed if m["attempt"] == 1)
    assert firsts == sorted(b["body"] for b in bodies)
    assert {m["id"] for m in consumed} == {r["message_id"] for r in receipts}


async def test_official_python_client_and_the_cpp_4x_client_on_the_same_topic(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    """The RocketMQ C++ 4.x client (`rocketmq==0.4.4`) and the official Python 5.x client
    crossing on one topic: C++ sends, a 5.x SimpleConsumer receives (tag, the same message
    id); 5.x sends, a C++ push consumer receives (issue 33 item 8, as the Node.js test does)."""
    topic = "POP-cpp"
    _broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    base = {"namesrv": namesrv.address, "topic": topic}
    produced = await run_peer(
        tmp_path,
        {
            **base,
            "op": "produce",
            "group": "PG-cpp5",
            "messages": [{"body": f"from-cpp-{i}", "tags": "TagC"} for i in range(2)],
        },
    )
    sent = [e for e in produced if e["event"] == "sent"]
    assert [e["status"] for e in sent] == [SEND_OK, SEND_OK], produced
    consumer = await Rmq5Consumer.start(
        endpoint, mode="simple", topic=topic, group="GS-cpp", tag="TagC", await_seconds=1
    )
    consumers.append(consumer)
    got = by_body(await consumer.receive_until(2, invisible=60))
    assert set(got) == {"from-cpp-0", "from-cpp-1"}
    assert {m["tag"] for m in got.values()} == {"TagC"}
    assert {m["id"] for m in got.values()} == {e["msg_id"] for e in sent}
    for message in got.values():
        await consumer.call(op="ack", id=message["id"])
    bodies = [{"body": f"from-5x-{i}", "tag": "Tag5"} for i in range(2)]
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, bodies)
    assert all("message_id" in r for r in receipts[:2]), receipts
    events = await run_peer(
        tmp_path,
        {**base, "op": "consume", "group": "CG-cpp5", "expression": "Tag5", "expect": 2,
         "timeout": 40, "linger": 1},
    )  # fmt: skip
    received = [e for e in events if e["event"] == "received"]
    assert sorted(e["body"] for e in received) == ["from-5x-0", "from-5x-1"], events
    assert {e["msg_id"] for e in received} == {r["message_id"] for r in receipts[:2]}
    assert {e["tags"] for e in received} == {"Tag5"}


async def test_a_broker_killed_and_restarted_loses_nothing_in_flight(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    topic = "POP-restart"
    broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic, SHORT)
    bodies = [f"m{i}" for i in range(10)]
    await send_4x(namesrv, topic, bodies)
    consumer = await Rmq5Consumer.start(
        endpoint, mode="simple", topic=topic, group="GR", await_seconds=1
    )
    consumers.append(consumer)
    got = by_body(await consumer.receive_until(10, invisible=20))
    acked = {f"m{i}" for i in range(0, 10, 2)}
    for body in sorted(acked):
        await consumer.call(op="ack", id=got[body]["id"])
    await consumer.close()
    broker.kill()  # -9: the pop offsets on disk are older than the checkpoints
    again = processes.start(
        broker.args, port=broker.port, name="brokerd-restarted", ready_text=BROKER_BOOTED
    )
    assert again.running
    consumer = await Rmq5Consumer.start(
        endpoint, mode="simple", topic=topic, group="GR", await_seconds=1
    )
    consumers.append(consumer)
    back = await consumer.receive_until(5, invisible=60, timeout=60)
    assert sorted(m["body"] for m in back) == sorted(set(bodies) - acked)
    assert {m["attempt"] for m in back} == {2}
    for message in back:
        await consumer.call(op="ack", id=message["id"])
    for _ in range(4):  # every queue once
        assert await consumer.receive(invisible=60) == []


async def test_checkpoints_and_acks_reach_the_slave(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    """The revive topic's records are CommitLog records: a SYNC_MASTER's slave holds every
    checkpoint and ack before the pop and the ack are answered (what a promoted slave revives
    from). Read back from the slave's store by PULL_MESSAGE."""
    topic = "POP-ha"
    grpc_port = free_port()
    master, _ha_port = start_master(
        processes, namesrv, tmp_path / "master", f"grpcServerPort={grpc_port}"
    )
    slave = start_slave(processes, namesrv, tmp_path / "slave", "grpcServerPort=-1")
    api = BrokerAPI(RemotingClient(), timeout=5)
    try:
        await wait_transfer(api, master)
        admin = AdminClient(namesrv.address)
        try:
            await admin.create_topic(master.address, TopicConfig(topic, 1, 1))
        finally:
            await admin.close()
        await send_4x(namesrv, topic, ["h1", "h2", "h3"])
        consumer = await Rmq5Consumer.start(
            f"127.0.0.1:{grpc_port}", mode="simple", topic=topic, group="GH", await_seconds=1
        )
        consumers.append(consumer)
        got = await consumer.receive_until(3, invisible=60)
        for message in got[:2]:
            await consumer.call(op="ack", id=message["id"])
        revive = "rmq_sys_REVIVE_LOG_DefaultCluster"

        async def slave_tags() -> list[str]:
            tags: list[str] = []
            for queue in range(8):
                header = pull_header(revive, queue, 0, group="X")
                try:
                    result = await api.pull(slave.address, header)
                except TopicNotExistError:  # a queue the slave holds no record of
                    continue
                if result.status is PullStatus.FOUND:
                    tags += [m.properties["TAGS"] for m in result.messages]
            return sorted(tags)

        # SYNC_MASTER: replicated before each answer; the slave's dispatch may lag a little.
        await eventually(
            lambda: _equal(slave_tags(), ["ack", "ack", "ck"]), "the records on the slave"
        )
    finally:
        await api.remoting.close()


async def _equal(got: Any, expected: list[str]) -> bool:
    return bool(await got == expected)


async def test_official_push_consumer_of_a_fifo_group_gets_each_message_group_in_order(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    topic = "POP-fifo"
    broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    admin = AdminClient(namesrv.address)
    try:
        await admin.update_subscription_group(
            broker.address, SubscriptionGroupConfig("GF", consume_message_orderly=True)
        )
    finally:
        await admin.close()
    # ga's second message fails its first attempt: in a FIFO group nothing after it in ga
    # comes before its second attempt (a normal group hands ga-2, ga-3 out meanwhile).
    bodies = {"ga": ["ga-0", "fail-ga-1", "ga-2", "ga-3"], "gb": ["gb-0", "gb-1", "gb-2"]}
    sent = [{"body": b, "message_group": g} for g, group in bodies.items() for b in group]
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, sent)
    assert all("error" not in r for r in receipts), receipts
    consumer = await Rmq5Consumer.start(endpoint, mode="push", topic=topic, group="GF")
    consumers.append(consumer)
    consumed: list[tuple[str, int]] = []
    # The client retries a FIFO message itself (same attempt number): 8 consumptions in all.
    while len(consumed) < len(sent) + 1:
        message = (await consumer.answer(timeout=90))["consumed"]
        consumed.append((message["body"], message["attempt"]))
    ga = [body for body, _attempt in consumed if "ga-" in body]
    assert ga == ["ga-0", "fail-ga-1", "fail-ga-1", "ga-2", "ga-3"]
    assert [b for b, _a in consumed if b.startswith("gb")] == bodies["gb"]


async def test_official_simple_consumer_of_a_fifo_group_waits_per_message_group(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    """Three message groups in a topic of one queue: the official SimpleConsumer gets one
    message of each; acknowledging one group's lets that group's next come while the others
    still wait; after the broker is stopped and started, the unacknowledged come back with
    their second attempt (the FIFO state is kept across the restart)."""
    topic = "POP-fifo-groups"
    broker, endpoint = await start_broker(processes, namesrv, tmp_path, "POP-unused", SHORT)
    admin = AdminClient(namesrv.address)
    try:
        await admin.create_topic(broker.address, TopicConfig(topic, 1, 1))
        await admin.update_subscription_group(
            broker.address, SubscriptionGroupConfig("GFG", consume_message_orderly=True)
        )

        async def routed() -> bool:
            return bool(await admin.api.get_route(namesrv.address, topic))

        await eventually(routed, f"the route of {topic}", 15)
    finally:
        await admin.close()
    sent = [
        {"body": body, "message_group": body[:2]}
        for body in ("ga-0", "gb-0", "ga-1", "gc-0", "gb-1")
    ]
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, sent)
    assert all("error" not in r for r in receipts), receipts
    consumer = await Rmq5Consumer.start(
        endpoint, mode="simple", topic=topic, group="GFG", await_seconds=1
    )
    consumers.append(consumer)
    first = by_body(await consumer.receive_until(3, invisible=15))
    assert sorted(first) == ["ga-0", "gb-0", "gc-0"]
    assert {m["attempt"] for m in first.values()} == {1}
    await consumer.call(op="ack", id=first["gb-0"]["id"])
    second = await consumer.receive_until(1, invisible=15)
    assert [m["body"] for m in second] == ["gb-1"]  # ga-1 waits for ga-0
    await consumer.close()
    assert broker.stop() == 0
    again = processes.start(
        broker.args, port=broker.port, name="brokerd-restarted", ready_text=BROKER_BOOTED
    )
    assert again.running
    consumer = await Rmq5Consumer.start(
        endpoint, mode="simple", topic=topic, group="GFG", await_seconds=1
    )
    consumers.append(consumer)
    back = by_body(await consumer.receive_until(3, invisible=30, timeout=60))
    assert sorted(back) == ["ga-0", "gb-1", "gc-0"]
    assert {m["attempt"] for m in back.values()} == {2}
    for message in back.values():
        await consumer.call(op="ack", id=message["id"])
    last = await consumer.receive_until(1, invisible=30)
    assert [(m["body"], m["attempt"]) for m in last] == [("ga-1", 1)]


async def test_official_push_consumer_keeps_a_slow_message_while_it_consumes_it(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, consumers: list[Rmq5Consumer]
) -> None:
    """The official PushConsumer receives with auto_renew and no duration: the broker chooses
    2 s here (defaultInvisibleTimeMills) and renews it while the listener takes 8 s, so the
    message is not delivered again meanwhile; the ack with the received handle ends it.
    Without the renewal it comes back after 2 s as attempt 2 (checked)."""
    topic = "POP-renew"
    broker, endpoint = await start_broker(
        processes,
        namesrv,
        tmp_path,
        topic,
        "defaultInvisibleTimeMills=2000",
        "renewAheadTimeMillis=1000",
        "renewSchedulePeriodMillis=200",
    )
    receipts = await asyncio.to_thread(
        rmq5_send, endpoint, topic, [{"body": "slow-1"}, {"body": "quick-1"}]
    )
    assert all("error" not in r for r in receipts), receipts
    consumer = await Rmq5Consumer.start(
        endpoint, mode="push", topic=topic, group="GRN", slow_seconds=8
    )
    consumers.append(consumer)
    consumed: list[tuple[str, int]] = []
    done = False
    while not done:
        answer = await consumer.answer(timeout=60)
        if "consumed" in answer:
            consumed.append((answer["consumed"]["body"], answer["consumed"]["attempt"]))
        done = "done" in answer
    # The ack follows the listener; a redelivery would come within the next invisible time.
    with contextlib.suppress(TimeoutError):
        while True:
            answer = await consumer.answer(timeout=4)
            if "consumed" in answer:
                consumed.append((answer["consumed"]["body"], answer["consumed"]["attempt"]))
    assert sorted(consumed) == [("quick-1", 1), ("slow-1", 1)]
    # Never put back for a redelivery: the group's retry topic is empty (or not even made).
    api = BrokerAPI(timeout=10)
    try:
        with contextlib.suppress(TopicNotExistError):
            assert await api.get_max_offset(broker.address, "%RETRY%GRN", 0) == 0
    finally:
        await api.close()
