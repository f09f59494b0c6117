"""A push consumer's consumption of one pulled batch (no sockets): what it calls and commits.

- offsets are committed once per batch, only up to the lowest message not consumed;
- a failed message is sent back, or, when the broker cannot take it, kept (holding the
  committed offset below it) and consumed again locally later;
- a plain listener's batch is one job of the thread pool; an async listener's runs on the loop;
- at most `max_concurrency` listener calls at once; a dropped queue stops its batch;
- a retry topic's message goes to its original topic's listener, under that topic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from tidemq.client.consumer import push as consumer_module
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult, ProcessQueue
from tidemq.client.errors import ConnectError
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.trace import TraceRecord, TraceType
from tidemq.client.transport import eager

TOPIC = "T"
MQ = MessageQueue(TOPIC, "broker-a", 0)
RETRY_TOPIC = "%RETRY%G"


def message(
    offset: int, topic: str = TOPIC, props: dict[str, str] | None = None
) -> ReceivedMessage:
    properties = props or {}
    return ReceivedMessage(
        topic=topic,
        body=b"m%d" % offset,
        tags=properties.get("TAGS"),
        keys=None,
        properties=properties,
        msg_id=f"ID{offset}",
        offset_msg_id=f"OFF{offset}",
        queue_id=MQ.queue_id,
        queue_offset=offset,
        broker_name=MQ.broker_name,
        store_timestamp=0,
        born_timestamp=0,
        reconsume_times=0,
        commit_log_offset=offset * 100,
        store_host="127.0.0.1:1",
        born_host="127.0.0.1:2",
        sys_flag=0,
        flag=0,
    )


class Offsets:
    """The offset store's part a batch uses: what was committed, in order."""

    def __init__(self) -> None:
        self.commits: list[tuple[MessageQueue, int]] = []

    async def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        assert increase_only
        self.commits.append((mq, offset))


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.jobs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.jobs += 1
        return super().submit(fn, *args, **kwargs)


def consumer_for(
    listener: Any, *, sent_back: list[ReceivedMessage] | None = None, **kwargs: Any
) -> tuple[AsyncPushConsumer, Offsets]:
    """A consumer as start() leaves it, with its broker calls replaced."""
    consumer = AsyncPushConsumer("G", "ns:9876", **kwargs)
    consumer.subscribe(TOPIC, "*", listener)
    consumer.subscribe(RETRY_TOPIC, "*", listener)  # as start() does (CLUSTERING)
    for sub in consumer._subscriptions.values():
        sub.is_async = asyncio.iscoroutinefunction(sub.listener)
    consumer._running = True
    offsets = Offsets()
    consumer.offset_store = offsets  # type: ignore[assignment]

    async def send_back(msg: ReceivedMessage) -> bool:
        if sent_back is None:
            return False
        sent_back.append(msg)
        return True

    consumer._send_back = send_back  # type: ignore[method-assign]
    return consumer, offsets


def pulled(pq: ProcessQueue, first: int, count: int) -> list[ReceivedMessage]:
    return pq.put([message(offset) for offset in range(first, first + count)])


async def test_a_batch_is_committed_once_after_its_last_message() -> None:
    seen: list[int] = []

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        seen.append(msg.queue_offset)
        return ConsumeResult.SUCCESS

    consumer, offsets = consumer_for(listener)
    pq = ProcessQueue(MQ)
    await consumer._consume_batch(pq, pulled(pq, 10, 32))
    assert seen == list(range(10, 42))
    assert offsets.commits == [(MQ, 42)]
    assert not pq.messages and pq.size_bytes == 0


async def test_failed_messages_are_sent_back_and_then_count_as_consumed() -> None:
    sent_back: list[ReceivedMessage] = []

    async def listener(msg: ReceivedMessage) -> ConsumeResult | None:
        if msg.queue_offset == 3:
            raise RuntimeError("listener bug")
        return ConsumeResult.RECONSUME_LATER if msg.queue_offset == 5 else None

    consumer, offsets = consumer_for(listener, sent_back=sent_back)
    pq = ProcessQueue(MQ)
    await consumer._consume_batch(pq, pulled(pq, 0, 8))
    assert [m.queue_offset for m in sent_back] == [3, 5]
    assert offsets.commits == [(MQ, 8)]


async def test_a_message_the_broker_cannot_take_back_holds_the_offset_and_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_module, "LOCAL_RETRY_DELAY", 0.0)
    calls: list[int] = []

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        calls.append(msg.queue_offset)
        first_time = calls.count(msg.queue_offset) == 1
        if msg.queue_offset == 2 and first_time:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    consumer, offsets = consumer_for(listener)  # send-back fails
    pq = ProcessQueue(MQ)
    await consumer._consume_batch(pq, pulled(pq, 0, 4))
    assert offsets.commits[0] == (MQ, 2), "committed past a message not consumed"
    assert list(pq.messages) == [2]
    await asyncio.wait_for(asyncio.gather(*consumer._background), 2)
    assert calls == [0, 1, 2, 3, 2]
    assert offsets.commits[-1] == (MQ, 4) and not pq.messages


async def test_a_plain_listener_gets_a_batch_in_one_pool_job() -> None:
    threads: set[int] = set()
    sent_back: list[ReceivedMessage] = []

    def listener(msg: ReceivedMessage) -> ConsumeResult:
        threads.add(threading.get_ident())
        if msg.queue_offset == 1:
            raise ValueError("plain listener bug")
        return ConsumeResult.SUCCESS

    executor = CountingExecutor()
    try:
        consumer, offsets = consumer_for(listener, sent_back=sent_back, executor=executor)
        pq = ProcessQueue(MQ)
        await consumer._consume_batch(pq, pulled(pq, 0, 32))
    finally:
        executor.shutdown()
    assert executor.jobs == 1
    assert threading.get_ident() not in threads
    assert [m.queue_offset for m in sent_back] == [1]
    assert offsets.commits == [(MQ, 32)]


async def test_a_plain_listener_returning_an_awaitable_is_awaited_on_the_loop() -> None:
    async def later() -> ConsumeResult:
        return ConsumeResult.RECONSUME_LATER

    sent_back: list[ReceivedMessage] = []
    consumer, _offsets = consumer_for(lambda msg: later(), sent_back=sent_back)
    pq = ProcessQueue(MQ)
    await consumer._consume_batch(pq, pulled(pq, 0, 2))
    assert [m.queue_offset for m in sent_back] == [0, 1]


async def test_listener_calls_are_bounded_by_max_concurrency() -> None:
    running = 0
    most = 0
    release = asyncio.Event()

    async def listener(msg: ReceivedMessage) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    consumer, offsets = consumer_for(listener, max_concurrency=2)
    pq = ProcessQueue(MQ)
    batches = [
        asyncio.ensure_future(consumer._consume_batch(pq, pulled(pq, first, 4)))
        for first in (0, 4, 8)
    ]
    for _ in range(20):
        await asyncio.sleep(0)
    assert running == 2
    release.set()
    await asyncio.wait_for(asyncio.gather(*batches), 2)
    assert most == 2 and not pq.messages
    assert max(offset for _mq, offset in offsets.commits) == 12


async def test_a_dropped_queue_stops_its_batch_and_commits_nothing() -> None:
    pq = ProcessQueue(MQ)
    seen: list[int] = []

    async def listener(msg: ReceivedMessage) -> None:
        seen.append(msg.queue_offset)
        if msg.queue_offset == 1:
            pq.dropped = True

    consumer, offsets = consumer_for(listener)
    await consumer._consume_batch(pq, pulled(pq, 0, 5))
    assert seen == [0, 1]
    assert offsets.commits == []


async def test_a_retry_message_goes_to_its_topics_listener_under_that_topic() -> None:
    got: list[tuple[str, int]] = []

    async def listener(msg: ReceivedMessage) -> None:
        got.append((msg.topic, msg.queue_offset))

    consumer, offsets = consumer_for(listener)
    retry_mq = MessageQueue(RETRY_TOPIC, "broker-a", 0)
    pq = ProcessQueue(retry_mq)
    msgs = pq.put([message(7, RETRY_TOPIC, {"RETRY_TOPIC": TOPIC})])
    await consumer._consume_batch(pq, msgs)
    assert got == [(TOPIC, 7)]
    assert offsets.commits == [(retry_mq, 8)]


async def test_orderly_consumption_retries_a_failure_in_place_and_keeps_the_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_module, "ORDERLY_SUSPEND", 0.0)
    calls: list[tuple[int, int]] = []

    def listener(msg: ReceivedMessage) -> ConsumeResult:
        calls.append((msg.queue_offset, msg.reconsume_times))
        if msg.queue_offset == 2 and msg.reconsume_times < 2:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    executor = CountingExecutor()
    try:
        consumer, offsets = consumer_for(listener, orderly=True, executor=executor)
        pq = ProcessQueue(MQ)
        pulled(pq, 0, 5)
        await consumer._consume_orderly(pq)
    finally:
        executor.shutdown()
    assert calls == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0)]
    assert executor.jobs == 3, "one pool job per run, a run ending at a failure"
    assert [offset for _mq, offset in offsets.commits] == [2, 2, 5]
    assert not pq.messages


async def test_orderly_failure_past_max_reconsume_times_is_sent_back_and_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_module, "ORDERLY_SUSPEND", 0.0)
    sent_back: list[ReceivedMessage] = []
    seen: list[int] = []

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        seen.append(msg.queue_offset)
        return ConsumeResult.RECONSUME_LATER if msg.queue_offset == 1 else ConsumeResult.SUCCESS

    consumer, offsets = consumer_for(
        listener, orderly=True, sent_back=sent_back, max_reconsume_times=1
    )
    pq = ProcessQueue(MQ)
    pulled(pq, 0, 3)
    await consumer._consume_orderly(pq)
    assert seen == [0, 1, 1, 2]
    assert [(m.queue_offset, m.reconsume_times) for m in sent_back] == [(1, 1)]
    assert offsets.commits[-1] == (MQ, 3)


async def test_a_flow_controlled_pull_loop_is_woken_when_consumption_makes_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_module, "FLOW_CONTROL_BACKOFF", 60.0)

    async def listener(msg: ReceivedMessage) -> None:
        pass

    consumer, _offsets = consumer_for(listener, pull_threshold_for_queue=5)
    pq = ProcessQueue(MQ)
    first = pulled(pq, 0, 8)
    second = pulled(pq, 8, 8)
    waiting = asyncio.ensure_future(consumer._may_pull(pq))
    for _ in range(5):
        await asyncio.sleep(0)  # the task runs up to its wait
    assert pq.room is not None
    await consumer._consume_batch(pq, second)  # 8 left: still over the threshold
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done(), "woken while still over the threshold"
    await consumer._consume_batch(pq, first[:4])
    assert await asyncio.wait_for(waiting, 2) is False  # looks again, well before 60 s
    assert pq.room is None
    assert await consumer._may_pull(pq) is True


async def test_a_pull_sent_ahead_and_no_longer_wanted_is_cancelled_or_its_failure_dropped() -> None:
    async def failing() -> Any:
        raise ConnectError("broker gone")

    consumer_module._discard(eager.start(failing()))  # the pull loop ends quietly, not with this
    answer = asyncio.get_running_loop().create_future()
    cleaned_up = []

    async def waiting() -> Any:
        try:
            return await answer
        finally:
            cleaned_up.append(True)

    consumer_module._discard(eager.start(waiting()))
    assert answer.cancelled() and cleaned_up == [True]
    consumer_module._discard(None)


class Clock:
    """push.py's `time`: a monotonic clock the listeners move, and the real wall clock."""

    def __init__(self) -> None:
        self.now = 100.0
        self.time = time.time

    def monotonic(self) -> float:
        return self.now


class Records:
    """The trace dispatcher's part the consumer uses: every record added, in order."""

    def __init__(self) -> None:
        self.records: list[TraceRecord] = []

    def add(self, records: Iterable[TraceRecord]) -> None:
        self.records.extend(records)


async def test_sub_after_s_cost_is_the_listener_s_time_and_the_slot_wait_is_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One slot, two batches: the second waits the first's 20 s for it. Its SubAfter costs
    its listener's 20 ms (not 20.02 s), its SubBefore says it waited 20 s, and consumeRT
    counts listener time only."""
    clock = Clock()
    monkeypatch.setattr(consumer_module, "time", clock)
    entered, release = asyncio.Event(), asyncio.Event()

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        if msg.queue_offset == 0:
            entered.set()
            await release.wait()  # holds the slot while the second batch waits for it
            clock.now += 20.0
        else:
            clock.now += 0.02
        return ConsumeResult.SUCCESS

    consumer, _ = consumer_for(listener, max_concurrency=1)
    trace = Records()
    consumer.trace = trace  # type: ignore[assignment]
    pq = ProcessQueue(MQ)
    first = asyncio.create_task(consumer._consume_batch(pq, pulled(pq, 0, 1)))
    second = asyncio.create_task(consumer._consume_batch(pq, pulled(pq, 1, 1)))
    await entered.wait()  # the second task ran first: it waits for the slot
    release.set()
    await asyncio.gather(first, second)
    by_type = {(r.type, r.msg_id): r for r in trace.records}
    assert by_type[(TraceType.SUB_AFTER, "ID0")].cost_ms == 20_000
    assert by_type[(TraceType.SUB_BEFORE, "ID0")].slot_wait_ms == 0
    assert by_type[(TraceType.SUB_AFTER, "ID1")].cost_ms == 20
    assert by_type[(TraceType.SUB_BEFORE, "ID1")].slot_wait_ms == 20_000
    assert consumer.consume_stats._totals[TOPIC].consume_ms == pytest.approx(20_020)
