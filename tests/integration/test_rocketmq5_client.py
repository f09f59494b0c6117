"""The official RocketMQ 5 Python client (`rocketmq-python-client` 5.x from PyPI, in
`.venv-rmq5`) against a real brokerd's gRPC endpoint, and tidemq's 4.x client reading what it
sent. The 5.x client runs as its own process (tests/support/rmq5/send.py): its grpcio and
protobuf are not tidemq's."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.processes import BROKER_BOOTED, Daemon, ProcessGroup, free_port
from tests.support.rmq5_clients import rmq5_send, start_broker
from tidemq.broker.recall_handle import RecallHandle
from tidemq.client.admin.api import AdminClient
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig

pytestmark = pytest.mark.asyncio


async def consume(
    namesrv: Daemon, topic: str, count: int, settle: float = 0.0
) -> list[ReceivedMessage]:
    """`count` messages of `topic`, read by tidemq's 4.x push consumer from the first offset
    (and whatever else comes in the `settle` seconds after)."""
    received: list[ReceivedMessage] = []

    async def listener(message: ReceivedMessage) -> ConsumeResult:
        received.append(message)
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(
        f"G-{topic}",
        config=ClientConfig.create(namesrv.address, poll_name_server_interval=1.0),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", listener)
    await consumer.start()
    try:
        await eventually(lambda: len(received) >= count, f"{count} messages of {topic}", 30)
        if settle:
            await asyncio.sleep(settle)  # a bounded look for what must not come
    finally:
        await consumer.shutdown()
    return received


async def test_official_producer_sends_what_a_4x_consumer_reads_intact(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    topic = "RMQ5-normal"
    _broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    sent = {
        "body": "héllo from 5.x",
        "tag": "TagA",
        "keys": ["order-1", "user-7"],
        "properties": {"region": "eu", "attempt": "1"},
    }
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, [sent, {"body": "second"}])
    assert all("error" not in r for r in receipts), receipts
    received = await consume(namesrv, topic, 2)
    by_id = {m.msg_id: m for m in received}
    first = by_id[receipts[0]["message_id"]]  # the 4.x msgId is the 5.x client's message id
    assert first.body == "héllo from 5.x".encode()
    assert first.tags == "TagA"
    assert set(first.key_list) == {"order-1", "user-7"}
    assert first.properties["region"] == "eu" and first.properties["attempt"] == "1"
    assert first.queue_offset == receipts[0]["offset"]
    assert by_id[receipts[1]["message_id"]].body == b"second"


async def test_official_producer_fifo_and_delayed_sends(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    topic = "RMQ5-kinds"
    _broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    deliver_at = int(time.time()) + 3  # the 5.x Python client takes seconds
    messages = [{"body": f"fifo-{i}", "message_group": "group-1"} for i in range(4)]
    messages.append({"body": "later", "delivery_timestamp": deliver_at})
    sent_at = time.time()
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, messages)
    assert all("error" not in r for r in receipts), receipts
    received = await consume(namesrv, topic, 5)
    fifo = [m for m in received if m.body.startswith(b"fifo-")]
    assert len({m.queue_id for m in fifo}) == 1  # one message group, one queue
    assert [m.body for m in sorted(fifo, key=lambda m: m.queue_offset)] == [
        b"fifo-0",
        b"fifo-1",
        b"fifo-2",
        b"fifo-3",
    ]
    later = next(m for m in received if m.body == b"later")
    assert later.properties["TIMER_DELIVER_MS"] == str(deliver_at * 1000)
    # Delivered by the timer wheel at its time, never before it.
    assert later.store_timestamp >= deliver_at * 1000 - 1000, (later.store_timestamp, sent_at)


async def test_official_producer_recalls_a_delay_message_across_a_broker_kill(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """`Producer.recall_message` with a delay message's recall handle: it is never delivered,
    also after the broker is killed (-9) and restarted before its time; the delay message sent
    beside it is. A forged handle (a normal message's id) and an expired one are refused."""
    topic = "RMQ5-recall"
    broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    deliver_at = int(time.time()) + 8  # the client takes seconds
    messages = [
        {"body": "kept", "delivery_timestamp": deliver_at},
        {"body": "gone", "delivery_timestamp": deliver_at, "recall": True},
        {"body": "plain"},
    ]
    kept, gone, plain = await asyncio.to_thread(rmq5_send, endpoint, topic, messages)
    assert gone.get("recalled") == gone["message_id"], gone
    assert kept["recall_handle"] and plain["recall_handle"] is None
    handle = RecallHandle.decode(kept["recall_handle"])
    forged = dataclasses.replace(handle, message_id=plain["message_id"]).encode()
    expired = dataclasses.replace(handle, deliver_ms=int(time.time() * 1000) - 1000).encode()
    refused = await asyncio.to_thread(
        rmq5_send, endpoint, topic, [], recall_handles=[forged, expired, "not a handle"]
    )
    errors = [line.get("recall_error", "") for line in refused]
    assert "no timer message" in errors[0] and "delivered" in errors[1], errors
    assert "base64" in errors[2], errors
    broker.kill()
    again = processes.start(
        broker.args, port=broker.port, name="brokerd-restarted", ready_text=BROKER_BOOTED
    )
    assert again.running
    # "gone" shares kept's millisecond: had the recall been lost, it would come with it.
    received = await consume(namesrv, topic, 2, settle=2.0)
    assert sorted(m.body for m in received) == [b"kept", b"plain"]
    kept_message = next(m for m in received if m.body == b"kept")
    assert kept_message.store_timestamp >= deliver_at * 1000


async def test_official_producer_is_told_why_a_send_is_refused(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    topic = "RMQ5-refused"
    _broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    far = int(time.time()) + 4 * 24 * 3600  # past timerMaxDelaySec (3 days)
    [receipt] = await asyncio.to_thread(
        rmq5_send, endpoint, topic, [{"body": "too far", "delivery_timestamp": far}]
    )
    assert "error" in receipt and "timerMaxDelaySec" in receipt["error"], receipt


async def test_official_producer_sends_to_every_broker_group_of_the_topic(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """One endpoint given, the whole cluster used: the route names each master at its own gRPC
    port (learnt from it), and the 5.x producer sends to both groups' queues."""
    topic = "RMQ5-cluster"
    grpc_ports = {"broker-a": free_port(), "broker-b": free_port()}
    brokers = {
        name: processes.brokerd(
            namesrv.address,
            tmp_path / name,
            f"brokerName={name}",
            f"grpcServerPort={port}",
            name=name,
        )
        for name, port in grpc_ports.items()
    }
    admin = AdminClient(namesrv.address)
    try:
        for broker in brokers.values():
            await admin.create_topic(broker.address, TopicConfig(topic, 4, 4))

        async def both_routed() -> bool:
            route = await admin.api.get_route(namesrv.address, topic)
            return route is not None and len(route.queue_datas) == 2

        await eventually(both_routed, f"both groups in the route of {topic}", 40)
    finally:
        await admin.close()
    endpoint = f"127.0.0.1:{grpc_ports['broker-a']}"
    messages = [{"body": f"m{i}"} for i in range(8)]  # one per queue: round robin over 8
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, messages)
    assert all("error" not in r for r in receipts), receipts
    received = await consume(namesrv, topic, 8)
    assert {m.broker_name for m in received} == {"broker-a", "broker-b"}
    assert sorted(m.body for m in received) == sorted(f"m{i}".encode() for i in range(8))


async def test_official_transactions_commit_and_roll_back(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    topic = "RMQ5-tx"
    broker, endpoint = await start_broker(processes, namesrv, tmp_path, topic)
    messages = [
        {"body": "committed", "transaction": "commit"},
        {"body": "rolled back", "transaction": "rollback"},
        {"body": "after"},
    ]
    receipts = await asyncio.to_thread(rmq5_send, endpoint, topic, messages)
    assert all("error" not in r for r in receipts), receipts
    received = await consume(namesrv, topic, 2)
    assert sorted(m.body for m in received) == [b"after", b"committed"]
    admin = AdminClient(namesrv.address)
    try:  # the rollback stored nothing: two messages in the topic's queues, all received
        stats = await admin.topic_stats(broker.address, topic)
    finally:
        await admin.close()
    assert sum(o.max_offset for o in stats.offset_table.values()) == 2
    committed = next(m for m in received if m.body == b"committed")
    assert committed.msg_id == receipts[0]["message_id"]


async def test_the_brokers_check_reaches_an_official_producer_over_telemetry(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """A transaction left open: the broker's check goes to the producer as
    RecoverOrphanedTransactionCommand on its Telemetry stream, the producer's checker says
    commit, and the message reaches a 4.x consumer."""
    topic = "RMQ5-check"
    _broker, endpoint = await start_broker(
        processes,
        namesrv,
        tmp_path,
        topic,
        "transactionTimeOut=1000",
        "transactionCheckInterval=1000",
    )
    lines = await asyncio.to_thread(
        rmq5_send,
        endpoint,
        topic,
        [{"body": "left open", "transaction": "leave"}],
        check="commit",
        wait_check_seconds=30,
    )
    receipt, *checked = lines
    assert "error" not in receipt, receipt
    assert checked == [{"checked": receipt["message_id"], "topic": topic}], lines
    [message] = await consume(namesrv, topic, 1)
    assert message.body == b"left open" and message.msg_id == receipt["message_id"]
