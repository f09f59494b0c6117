"""Message trace against real processes: a message sent, consumed by two groups and retried
once in one of them shows all its records through `mqadmin queryMsgTraceById`; a transaction
shows its half send and its end."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tidemq import (
    AsyncProducer,
    AsyncPushConsumer,
    AsyncTransactionProducer,
    ConsumeResult,
    LocalTransactionState,
    Message,
)
from tidemq.client.config import ClientConfig
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import ConsumeFromWhere

pytestmark = pytest.mark.asyncio

# Level 3, the first retry, is 1 s.
LEVELS = "messageDelayLevel=1s 1s 1s 2s 3s 1s 1s 4s"


def config(namesrv: Daemon) -> ClientConfig:
    return ClientConfig.create(
        namesrv.address, poll_name_server_interval=1.0, heartbeat_broker_interval=1.0
    )


def mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("mqadmin")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_message_s_whole_story_in_query_msg_trace_by_id(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    processes.brokerd(namesrv.address, tmp_path / "b", "traceTopicEnable=true", LEVELS)
    deliveries: Counter[str] = Counter()

    async def once(msg: ReceivedMessage) -> ConsumeResult:
        deliveries["G-a"] += 1
        return ConsumeResult.SUCCESS

    async def fails_first(msg: ReceivedMessage) -> ConsumeResult:
        deliveries["G-b"] += 1
        return ConsumeResult.SUCCESS if msg.reconsume_times else ConsumeResult.RECONSUME_LATER

    async with AsyncProducer("P-trace", config=config(namesrv), enable_trace=True) as producer:
        sent = await producer.send(Message("TR1", b"traced", tags="T", keys="order-1"))
    consumers = []
    for group, listener in (("G-a", once), ("G-b", fails_first)):
        consumer = AsyncPushConsumer(
            group,
            config=config(namesrv),
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            enable_trace=True,
        )
        consumer.subscribe("TR1", "*", listener)
        await consumer.start()
        consumers.append(consumer)
    try:
        await eventually(
            lambda: deliveries == Counter({"G-a": 1, "G-b": 2}), "a delivery and a retry", 30
        )
    finally:
        for consumer in consumers:
            await consumer.shutdown()  # sends the queued trace records

    want = Counter(
        {("Pub", "P-trace"): 1, ("SubBefore", "G-a"): 1, ("SubAfter", "G-a"): 1}
        | {("SubBefore", "G-b"): 2, ("SubAfter", "G-b"): 2}
    )
    data: dict[str, Any] = {}

    async def all_records() -> bool:  # the trace messages are indexed by another process
        nonlocal data
        done = await asyncio.to_thread(
            mqadmin, "queryMsgTraceById", "-n", namesrv.address, "-i", sent.msg_id, "--json"
        )
        if done.returncode != 0:
            return False
        data = json.loads(done.stdout)
        return Counter((r["type"], r["group"]) for r in data["records"]) == want

    await eventually(all_records, "every trace record", 30)
    records = data["records"]
    [pub] = [r for r in records if r["type"] == "Pub"]
    assert (pub["topic"], pub["tags"], pub["keys"]) == ("TR1", "T", "order-1")
    assert pub["offsetMsgId"] == sent.offset_msg_id and pub["success"]
    retries = sorted(r["retryTimes"] for r in records if r["type"] == "SubBefore")
    assert retries == [0, 0, 1]
    after_b = [r["success"] for r in records if r["type"] == "SubAfter" and r["group"] == "G-b"]
    assert sorted(after_b) == [False, True]
    assert data["skipped"] == []

    text = await asyncio.to_thread(
        mqadmin, "queryMsgTraceById", "-n", namesrv.address, "-i", sent.msg_id
    )
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["#Type", "#Group", "#Time"]
    assert lines[1].startswith("Pub") and "P-trace" in lines[1]
    missing = await asyncio.to_thread(
        mqadmin, "queryMsgTraceById", "-n", namesrv.address, "-i", "NOT-AN-ID"
    )
    assert missing.returncode == 1
    assert "no trace of message NOT-AN-ID" in missing.stderr


async def test_a_transaction_s_trace_has_its_half_send_and_its_end(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    processes.brokerd(namesrv.address, tmp_path / "b", "traceTopicEnable=true")

    def commit(msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    async with AsyncTransactionProducer(
        "PG-trace",
        config=config(namesrv),
        execute=commit,
        check=lambda m: LocalTransactionState.COMMIT,
        enable_trace=True,
    ) as producer:
        result = await producer.send_message_in_transaction(Message("TR2", b"tx", keys="k"))
    records: list[dict[str, Any]] = []

    async def both() -> bool:
        nonlocal records
        done = await asyncio.to_thread(
            mqadmin, "queryMsgTraceById", "-n", namesrv.address, "-i", result.msg_id, "--json"
        )
        records = json.loads(done.stdout)["records"] if done.returncode == 0 else []
        return [r["type"] for r in records] == ["Pub", "EndTransaction"]

    await eventually(both, "the Pub and EndTransaction records", 30)
    assert records[1]["transactionState"] == "COMMIT_MESSAGE"
    assert not records[1]["fromTransactionCheck"]


async def test_compressed_trace_batches_show_the_consumer_and_its_listener_s_own_cost(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """Trace messages over 4 KiB are compressed by the trace producer (a long key makes each
    record that long): queryMsgTraceById inflates them and shows SubBefore and SubAfter. One
    consume slot for four queues' batches: the batches wait for it in turn, a wait SubBefore
    reports as slotWaitTime and SubAfter's cost (the listener's time, 0.4 s) leaves out."""
    processes.brokerd(namesrv.address, tmp_path / "b", "traceTopicEnable=true")
    long_key = "order-" + "x" * 5000
    async with AsyncProducer("P-trace-z", config=config(namesrv), enable_trace=True) as producer:
        sent = [
            await producer.send(
                Message("TRZ", b"slow", keys=long_key),
                selector=lambda queues, msg, qid: next(q for q in queues if q.queue_id == qid),
                arg=qid,
            )
            for qid in range(4)
        ]
    consumed: list[str] = []

    async def slow(msg: ReceivedMessage) -> ConsumeResult:
        await asyncio.sleep(0.4)
        consumed.append(msg.msg_id)
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(
        "G-z",
        config=config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        enable_trace=True,
        max_concurrency=1,
    )
    consumer.subscribe("TRZ", "*", slow)
    await consumer.start()
    try:
        await eventually(lambda: len(consumed) == 4, "four slow deliveries", 30)
    finally:
        await consumer.shutdown()  # sends the queued trace records

    by_message: dict[str, list[dict[str, Any]]] = {}

    async def traced(msg_id: str) -> bool:
        done = await asyncio.to_thread(
            mqadmin, "queryMsgTraceById", "-n", namesrv.address, "-i", msg_id, "--json"
        )
        if done.returncode != 0:
            return False
        data = json.loads(done.stdout)
        assert data["skipped"] == [], data["skipped"]
        by_message[msg_id] = data["records"]
        return [r["type"] for r in data["records"]] == ["Pub", "SubBefore", "SubAfter"]

    for msg_id in [r.msg_id for r in sent]:
        await eventually(partial(traced, msg_id), f"the trace of {msg_id}", 30)
    befores = [r for rs in by_message.values() for r in rs if r["type"] == "SubBefore"]
    afters = [r for rs in by_message.values() for r in rs if r["type"] == "SubAfter"]
    assert {r["keys"] for r in befores} == {long_key}
    assert all(390 <= r["costTime"] < 800 for r in afters), [r["costTime"] for r in afters]
    waits = sorted(r["slotWaitTime"] for r in befores)
    assert waits[-1] >= 400, waits  # the last batch waited for the three before it
    text = await asyncio.to_thread(
        mqadmin, "queryMsgTraceById", "-n", namesrv.address, "-i", sent[0].msg_id
    )
    assert [line.split()[0] for line in text.stdout.splitlines()[1:]] == [
        "Pub",
        "SubBefore",
        "SubAfter",
    ]
    assert "slotWait=" in text.stdout
