"""Timer benchmark: how late timer messages arrive, at 1,000 timers per second, through the public
client against namesrvd and brokerd processes.

A producer sends `TIDEMQ_BENCH_TIMER_SECONDS` (default 20) seconds of timers at
`TIDEMQ_BENCH_TIMER_RATE` (default 1,000) per second, paced in 10 ms ticks; each asks for a
delivery time (`Message.deliver_at_ms`) 0.5 to 3 s ahead, written in its body. A push consumer
of the topic notes when each arrives: lateness = arrival - delivery time (wall clock, ms; both
ends on this machine). Headline: p50 and p99 of the lateness (target p99 <= 100 ms), the same of
the broker's put into the topic (TIMER_DEQUEUE_MS, read by the consumer), and the timers put
before their time (target 0). Baseline of the same run: plain messages at the same rate, their
send-to-arrival time, the floor under any timer's lateness (a delivered timer is a message
stored and pulled like any other). Beside them, the store and the timer service alone in this
process at the same rate: the lateness the broker's own work adds (no network, no consumer, no
other process in between), which the shared machine's noise hides less.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path

from tests.bench import Result, env_int, one_broker, run_on_uvloop, temp_dir
from tests.bench.client_bench import _config, _create_topics
from tidemq.broker.timer import TimerMessageService
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, encode_properties
from tidemq.store.timer_store import TimerStore

TICK = 0.01


def _ms() -> int:
    return int(time.time() * 1000)


def _quantile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


async def _paced(producer: AsyncProducer, topic: str, rate: int, seconds: int, timer: bool) -> int:
    """Send `rate` per second for `seconds`; returns how many were sent."""
    per_tick = max(1, round(rate * TICK))
    ticks = round(seconds / TICK)
    started = time.monotonic()
    sends: list[asyncio.Task[object]] = []
    for tick in range(ticks):
        for _ in range(per_tick):
            at = _ms() + random.randint(500, 3000) if timer else _ms()
            msg = Message(topic, str(at).encode(), deliver_at_ms=at if timer else None)
            sends.append(asyncio.ensure_future(producer.send(msg)))
        delay = started + (tick + 1) * TICK - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.gather(*sends)
    return len(sends)


async def _lateness(
    namesrv: str, topic: str, rate: int, seconds: int, timer: bool
) -> tuple[list[int], list[int]]:
    """(arrival - due time, broker's put into the topic - due time) per message, in ms."""
    late: list[int] = []
    put_late: list[int] = []
    arrived = asyncio.Event()

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        due = int(msg.body)
        late.append(_ms() - due)
        put_late.append(int(msg.properties.get("TIMER_DEQUEUE_MS", msg.store_timestamp)) - due)
        arrived.set()
        return ConsumeResult.SUCCESS

    async def _all_arrived(late: list[int], sent: int) -> None:
        while len(late) < sent:
            arrived.clear()
            await arrived.wait()

    consumer = AsyncPushConsumer(
        f"{topic}G",
        config=_config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", listener)
    producer = AsyncProducer(f"{topic}P", config=_config(namesrv))
    await producer.start()
    await consumer.start()
    try:
        sent = await _paced(producer, topic, rate, seconds, timer)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_all_arrived(late, sent), 30)
    finally:
        await consumer.shutdown()
        await producer.shutdown()
    if len(late) < sent:
        print(f"  only {len(late)} of {sent} arrived within 30 s of the last send")
    return late, put_late


async def _run(namesrv: str, broker: str, rate: int, seconds: int) -> list[Result]:
    await _create_topics(namesrv, broker, "BenchTimer", "BenchTimerBase")
    base, _stored = await _lateness(namesrv, "BenchTimerBase", rate, seconds, timer=False)
    timers, put = await _lateness(namesrv, "BenchTimer", rate, seconds, timer=True)
    early = sum(1 for value in put if value < 0)
    b50, b99 = _quantile(base, 0.5), _quantile(base, 0.99)
    t50, t99 = _quantile(timers, 0.5), _quantile(timers, 0.99)
    p50, p99 = _quantile(put, 0.5), _quantile(put, 0.99)
    print(f"plain messages, send to arrival ({len(base)}): p50 {b50:.0f} ms, p99 {b99:.0f} ms")
    print(
        f"timers, arrival after their time ({len(timers)}): p50 {t50:.0f} ms, p99 {t99:.0f} ms, "
        f"max {max(timers, default=0)} ms",
    )
    print(
        f"timers, put into their topic after their time (TIMER_DEQUEUE_MS): p50 {p50:.0f} ms, "
        f"p99 {p99:.0f} ms, max {max(put, default=0)} ms, {early} early",
        flush=True,
    )
    note = f"{rate}/s for {seconds} s"
    return [
        Result("timer lateness at the consumer p50", t50, "ms", note=note),
        Result(
            "timer lateness at the consumer p99",
            t99,
            "ms",
            target=100,
            higher_is_better=False,
            note=note,
        ),
        Result("timer lateness of the broker's put (TIMER_DEQUEUE_MS) p99", p99, "ms", note=note),
        Result("timers put before their time", early, "msgs", 0, higher_is_better=False),
        Result("plain message send-to-arrival p99 (baseline)", b99, "ms", note=note),
    ]


async def _in_process(root: Path, rate: int, seconds: int) -> list[int]:
    """The store and the timer service alone, in this process: lateness of each put into the
    topic (what the broker adds, without the network, the consumer or other processes)."""
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024 * 1024,
        message_index_worker_enable=False,
    )
    store = MessageStore(config)
    store.load()
    timers = TimerStore(config)
    timers.load(_ms(), 0, 0)
    await store.start()
    service = TimerMessageService(store, timers, lambda: bytes(8), deliver=True)
    await service.start()
    late: list[int] = []
    put = store.put_message

    async def noting(msg: MessageToStore, *args: object) -> object:
        if msg.topic == "BenchTimer" and "TIMER_DEQUEUE_MS" in msg.properties:
            late.append(_ms() - int(msg.body))
        return await put(msg)

    store.put_message = noting  # type: ignore[method-assign, assignment]
    try:
        per_tick = max(1, round(rate * TICK))
        started = time.monotonic()
        for tick in range(round(seconds / TICK)):
            for _ in range(per_tick):
                at = _ms() + random.randint(500, 3000)
                props = encode_properties({"TIMER_DELIVER_MS": str(at)})
                await put(MessageToStore("BenchTimer", 0, str(at).encode(), props))
            delay = started + (tick + 1) * TICK - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await asyncio.sleep(3.5)
    finally:
        await service.stop()
        timers.close()
        await store.stop()
    return late


def run() -> list[Result]:
    rate = env_int("TIDEMQ_BENCH_TIMER_RATE", 1000)
    seconds = env_int("TIDEMQ_BENCH_TIMER_SECONDS", 20)
    with temp_dir("timer-store") as root:
        alone = run_on_uvloop(_in_process(root, rate, seconds))
    a50, a99 = _quantile(alone, 0.5), _quantile(alone, 0.99)
    print(
        f"store and timer service alone, put into the topic after the time ({len(alone)}): "
        f"p50 {a50:.0f} ms, p99 {a99:.0f} ms, max {max(alone, default=0)} ms",
        flush=True,
    )
    with one_broker("timer", "mappedFileSizeTimerLog=104857600") as (namesrv, broker):
        results = run_on_uvloop(_run(namesrv.address, broker.address, rate, seconds))
    note = f"{rate}/s for {seconds} s"
    return [
        Result("timer lateness, store and timer service alone, p99", a99, "ms", note=note),
        *results,
    ]
