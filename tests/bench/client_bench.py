"""Client benchmark: the Python client (asyncio API) against namesrvd and brokerd processes.

- producer, single sends: 1 KiB messages, the public `AsyncProducer.send`, 64 in flight, beside
  the minimal uvloop + msgpack server of the broker section (tests/bench/baseline.py) doing the
  same record work for single sends with 64 in flight. The two take turns,
  TIDEMQ_BENCH_CLIENT_ROUNDS times; reported are the medians of each round's ratio, of the
  client's CPU per send (user + system of this process over the producer's sends: everything
  between `send()` and the frame, and the answer back to the SendResult), of that CPU as a
  multiple of the minimal client's in the same round (its load generator: a msgpack header, a
  future per request, no message object, no retries) and of the broker's CPU per send.
  Targets (issue 36): ratio >= 0.6, client CPU <= 10 us, broker CPU <= 15 us;
- producer, batches: `send_batch` of 32 x 1 KiB messages, 8 batches in flight;
- push consumer, end to end: an `AsyncPushConsumer` (CLUSTERING, from the first offset) drains
  the backlog of the batched sends (1 KiB messages; 4x the single sends, so the drain lasts long
  enough to be measured): pulls, decoding, one listener call per message, offset
  commits. Rate = messages / time from start() to the last listener call. Its baseline, in the
  same run against the same broker and backlog just before it: raw pulls (PULL_MESSAGE of 32
  from every queue, records counted by walking their size fields: broker_bench's pull loop; the
  median of three passes).
  Target (issue 15): push consumer >= 0.5 of raw pulls. The client's CPU per consumed message
  (user + system of this process over the drain) is reported beside it;
- push consumer, blocking API: the same drain by a `PushConsumer` (its own group) with a plain
  counting function as listener, so listener calls are handed to the consume thread pool;
- the raw pulls and the two drains take turns, TIDEMQ_BENCH_CLIENT_ROUNDS times (default 3), each
  drain by a new group; a round's ratios divide its drains by its own raw pulls, and the figures
  reported are the medians over the rounds. On 2 cores shared with the broker, one drain (half a
  second) moves by up to 2x with what else the machine runs at that moment; rounds side by side
  measure the consumers, not the moment;
- latency: a caught-up push consumer long-polling (the broker holds its pulls and answers when a
  message arrives) while a producer sends 1 KiB messages paced at 1,000 msg/s; the latency of a
  message is the time from the `send()` call to the listener's call, both in this process.
  Target p99 <= 10 ms.

Knobs: TIDEMQ_BENCH_CLIENT_MESSAGES (single sends, default 30,000; batched sends, and so the
consumers' backlog, are 4x that), TIDEMQ_BENCH_CLIENT_ROUNDS (default 3),
TIDEMQ_BENCH_CLIENT_LATENCY_SECONDS (default 5). The client shares the 2 cores with the broker,
and every figure is client plus broker.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import struct
import sys
import threading
import time
from dataclasses import dataclass
from statistics import median

from tests.bench import Result, env_int, one_broker, run_on_uvloop, temp_dir
from tests.bench.baseline import load as baseline_load
from tests.bench.broker_bench import _pulls
from tests.bench.cpu import BrokerCpu
from tests.support.processes import ProcessGroup, free_port
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult, PushConsumer
from tidemq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.signing import SessionCredentials

BODY = os.urandom(1024)
QUEUES = 8
LATENCY_RATE = 1000
_INDEX = struct.Struct(">q")


def _config(namesrv: str) -> ClientConfig:
    return ClientConfig.create(
        namesrv, poll_name_server_interval=5.0, heartbeat_broker_interval=5.0
    )


async def _create_topics(
    namesrv: str, broker: str, *topics: str, credentials: SessionCredentials | None = None
) -> None:
    """`topics` (QUEUES queues each) created on `broker` alone and routed by the name server;
    `credentials` sign the requests when the broker checks ACL."""
    api = BrokerAPI(timeout=30, credentials=credentials)
    try:
        for topic in topics:
            await api.create_topic(broker, TopicConfig(topic, QUEUES, QUEUES))
        deadline = time.monotonic() + 30
        for topic in topics:
            while await api.get_route(namesrv, topic) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no route for {topic}")
                await asyncio.sleep(0.05)
    finally:
        await api.close()


async def _single_sends(
    producer: AsyncProducer, topic: str, messages: int, in_flight: int = 64
) -> float:
    """Single sends of `messages` 1 KiB messages through the public producer, `in_flight` at
    a time; messages per second."""
    remaining = messages

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            result = await producer.send(Message(topic, BODY))
            assert result.status is SendStatus.SEND_OK, result.status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return messages / (time.perf_counter() - started)


async def _batched_sends(producer: AsyncProducer, topic: str, messages: int) -> float:
    batches = messages // 32
    remaining = batches

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            result = await producer.send_batch([Message(topic, BODY) for _ in range(32)])
            assert result.status is SendStatus.SEND_OK

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(8)))
    return batches * 32 / (time.perf_counter() - started)


def _cpu_seconds() -> float:
    """User + system CPU of this process so far."""
    times = os.times()
    return times.user + times.system


async def _backlog(broker: str, topic: str) -> int:
    """Messages stored in `topic` (every queue starts at offset 0 here)."""
    api = BrokerAPI()
    try:
        return sum([await api.get_max_offset(broker, topic, q) for q in range(QUEUES)])
    finally:
        await api.close()


async def _raw_pulls(broker: str, topic: str, passes: int = 3) -> float:
    """Raw pull rate (msg/s) over the whole backlog of `topic` (broker_bench's pull loop): the
    median of `passes` passes, as one pass takes a tenth of a second and a busy machine's
    hiccup moves it by half."""
    api = BrokerAPI()
    try:
        per_queue = min([await api.get_max_offset(broker, topic, q) for q in range(QUEUES)])
        rates = sorted([await _pulls(api, broker, per_queue, topic) for _ in range(passes)])
        return rates[len(rates) // 2]
    finally:
        await api.close()


def _drain_blocking(namesrv: str, group: str, topic: str, messages: int) -> float:
    """`_drain` with the blocking `PushConsumer` and a plain function as listener."""
    consumed = 0
    lock = threading.Lock()
    done = threading.Event()
    last = 0.0

    def listener(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal consumed, last
        with lock:
            consumed += 1
            if consumed >= messages:
                last = time.perf_counter()
                done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        group,
        config=_config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", listener)
    started = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(120):
            raise RuntimeError(f"the blocking consumer got {consumed} of {messages} messages")
    finally:
        consumer.shutdown()
    return consumed / (last - started)


async def _drain(namesrv: str, group: str, topic: str, messages: int) -> float:
    consumed = 0
    done = asyncio.Event()
    last = 0.0

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal consumed, last
        consumed += 1
        if consumed >= messages:
            last = time.perf_counter()
            done.set()
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(
        group,
        config=_config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", listener)
    started = time.perf_counter()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 120)
    finally:
        await consumer.shutdown()
    return consumed / (last - started)


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


async def _latency(namesrv: str, producer: AsyncProducer, topic: str, seconds: int) -> list[float]:
    """Latencies in ms of `seconds` x 1,000 paced sends, after a 1 s warm-up.

    Per-message bookkeeping is two preallocated lists of floats and no retained task, so the
    bench itself adds nothing for the garbage collector to walk (a full collection over a
    large heap pauses the whole process, sender and consumer alike).
    """
    warmup = LATENCY_RATE
    expected = warmup + seconds * LATENCY_RATE
    sent_at = [0.0] * expected
    received_at = [0.0] * expected
    received = 0
    acked = 0
    failures: list[BaseException] = []
    all_in = asyncio.Event()
    all_acked = asyncio.Event()

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal received
        index = _INDEX.unpack_from(msg.body)[0]
        if not received_at[index]:
            received_at[index] = time.perf_counter()
            received += 1
            if received >= expected:
                all_in.set()
        return ConsumeResult.SUCCESS

    def on_sent(task: asyncio.Task[SendResult]) -> None:
        nonlocal acked
        acked += 1
        error = task.exception()
        if error is not None:
            failures.append(error)
        elif task.result().status is not SendStatus.SEND_OK:
            failures.append(RuntimeError(str(task.result().status)))
        if acked >= expected:
            all_acked.set()

    consumer = AsyncPushConsumer("BenchLatencyCG", config=_config(namesrv))
    consumer.subscribe(topic, "*", listener)
    await consumer.start()
    try:
        deadline = time.monotonic() + 15
        while len([mq for mq in consumer.process_queues if mq.topic == topic]) < QUEUES:
            if time.monotonic() > deadline:
                raise RuntimeError("the latency consumer got no queues")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # every queue's first pull is held by the broker now
        gc.collect()  # start clean: what earlier sections left is not this section's cost
        loop = asyncio.get_running_loop()
        began = loop.time()
        for i in range(expected):
            delay = began + i / LATENCY_RATE - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            body = _INDEX.pack(i) + BODY[_INDEX.size :]
            sent_at[i] = time.perf_counter()
            loop.create_task(producer.send(Message(topic, body))).add_done_callback(on_sent)
        await asyncio.wait_for(all_acked.wait(), 30)
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed, first: {failures[0]!r}")
        await asyncio.wait_for(all_in.wait(), 30)
    finally:
        await consumer.shutdown()
    return sorted((received_at[i] - sent_at[i]) * 1000 for i in range(warmup, expected))


@dataclass(frozen=True)
class _DrainRound:
    """One round: raw pulls (msg/s), then each consumer's drain (msg/s, client CPU us/msg)."""

    raw: float
    drained: float
    drained_cpu: float
    blocking: float
    blocking_cpu: float


async def _drain_round(namesrv: str, broker: str, backlog: int, round_number: int) -> _DrainRound:
    raw = await _raw_pulls(broker, "BenchBatch")
    cpu_before = _cpu_seconds()
    drained = await _drain(namesrv, f"BenchDrainCG{round_number}", "BenchBatch", backlog)
    drained_cpu = (_cpu_seconds() - cpu_before) / backlog * 1e6
    cpu_before = _cpu_seconds()
    blocking = await asyncio.to_thread(
        _drain_blocking, namesrv, f"BenchDrainBlockingCG{round_number}", "BenchBatch", backlog
    )
    blocking_cpu = (_cpu_seconds() - cpu_before) / backlog * 1e6
    print(
        f"round {round_number + 1}: raw pulls {raw:,.0f} msg/s; push consumer {drained:,.0f} "
        f"msg/s ({drained / raw:.2f}; client CPU {drained_cpu:.1f} us/msg); blocking API "
        f"{blocking:,.0f} msg/s ({blocking / raw:.2f}; client CPU {blocking_cpu:.1f} us/msg)",
        flush=True,
    )
    return _DrainRound(raw, drained, drained_cpu, blocking, blocking_cpu)


@dataclass(frozen=True)
class _SendRound:
    """One round: the minimal server's single sends, then the public producer's (msg/s, and the
    client's and the serving process's CPU, us per send)."""

    baseline: float
    baseline_server_cpu: float
    baseline_client_cpu: float
    producer: float
    client_cpu: float
    broker_cpu: float


def _server_cpu(before: BrokerCpu, after: BrokerCpu, messages: int) -> tuple[float, float]:
    """(server, client) CPU us per message between two snapshots."""
    cpu = after.per_message(before, messages)
    return cpu["broker_user"] + cpu["broker_system"], cpu["client"]


async def _send_round(
    producer: AsyncProducer, broker_pid: int, port: int, baseline_pid: int, messages: int, n: int
) -> _SendRound:
    before = BrokerCpu.now(baseline_pid)
    baseline = await baseline_load(port, messages, 64, 1, BODY)
    baseline_cpu, baseline_client = _server_cpu(before, BrokerCpu.now(baseline_pid), messages)
    gc.collect()
    before = BrokerCpu.now(broker_pid)
    single = await _single_sends(producer, "BenchSingle", messages)
    broker_cpu, client_cpu = _server_cpu(before, BrokerCpu.now(broker_pid), messages)
    print(
        f"round {n + 1}: minimal server {baseline:,.0f} msg/s (server CPU {baseline_cpu:.1f}, "
        f"its client's {baseline_client:.1f} us/msg); AsyncProducer.send {single:,.0f} msg/s "
        f"({single / baseline:.2f}; client CPU {client_cpu:.1f} us/send, "
        f"broker CPU {broker_cpu:.1f} us/send)",
        flush=True,
    )
    return _SendRound(baseline, baseline_cpu, baseline_client, single, client_cpu, broker_cpu)


async def _run(
    namesrv: str,
    broker: str,
    broker_pid: int,
    baseline_port: int,
    baseline_pid: int,
    messages: int,
    seconds: int,
    rounds: int,
) -> list[Result]:
    await _create_topics(namesrv, broker, "BenchSingle", "BenchBatch", "BenchLatency")
    producer = AsyncProducer("BenchPG", config=_config(namesrv))
    await producer.start()
    try:
        await _single_sends(producer, "BenchBatch", 2000)  # warm up: routes, connections
        await baseline_load(baseline_port, 2000, 64, 1, BODY)
        per_round = max(1000, messages // rounds)
        sends = [
            await _send_round(producer, broker_pid, baseline_port, baseline_pid, per_round, r)
            for r in range(rounds)
        ]
        single = median([s.producer for s in sends])
        batched = await _batched_sends(producer, "BenchBatch", messages * 4)
        print(f"batched sends (32 x 1 KiB, 8 in flight): {batched:,.0f} msg/s", flush=True)
        backlog = await _backlog(broker, "BenchBatch")
        drains = [await _drain_round(namesrv, broker, backlog, r) for r in range(rounds)]
        latencies = await _latency(namesrv, producer, "BenchLatency", seconds)
    finally:
        await producer.shutdown()
    p50, p99 = _percentile(latencies, 0.50), _percentile(latencies, 0.99)
    worst = latencies[-1]
    print(
        f"send -> listener at {LATENCY_RATE} msg/s ({len(latencies)} messages): "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms",
        flush=True,
    )
    raw = median([d.raw for d in drains])
    baseline = median([s.baseline for s in sends])
    return [
        Result("producer single sends, 1 KiB, 64 in flight", single, "msg/s"),
        Result(
            "AsyncProducer.send / minimal server's single sends",
            median([s.producer / s.baseline for s in sends]),
            "ratio",
            0.6,
            note=f"minimal server {baseline:,.0f} msg/s, server CPU "
            f"{median([s.baseline_server_cpu for s in sends]):.1f} us/msg, its client's "
            f"{median([s.baseline_client_cpu for s in sends]):.1f}",
        ),
        Result(
            "AsyncProducer.send: client CPU per send",
            median([s.client_cpu for s in sends]),
            "us",
            10,
            higher_is_better=False,
        ),
        Result(
            "AsyncProducer.send: client CPU per send / the minimal client's",
            median(
                [
                    s.client_cpu / s.baseline_client_cpu if s.baseline_client_cpu else math.nan
                    for s in sends
                ]
            ),
            "ratio",
            higher_is_better=False,
            note="each round's own pair; less moved by the machine's load than the two alone",
        ),
        Result(
            "AsyncProducer.send: broker CPU per send",
            median([s.broker_cpu for s in sends]),
            "us",
            15,
            higher_is_better=False,
        ),
        Result("producer batches of 32 x 1 KiB, 8 in flight", batched, "msg/s"),
        Result("push consumer end to end, 1 KiB", median([d.drained for d in drains]), "msg/s"),
        Result("raw pulls of the same backlog, 32 per request", raw, "msg/s"),
        Result(
            "push consumer / raw pulls", median([d.drained / d.raw for d in drains]), "ratio", 0.5
        ),
        Result(
            "push consumer: client CPU per message", median([d.drained_cpu for d in drains]), "us"
        ),
        Result(
            "push consumer, blocking API / raw pulls",
            median([d.blocking / d.raw for d in drains]),
            "ratio",
            0.5,
        ),
        Result(
            "push consumer, blocking API: client CPU per message",
            median([d.blocking_cpu for d in drains]),
            "us",
        ),
        Result("send -> listener p50 at 1,000 msg/s", p50, "ms", higher_is_better=False),
        Result("send -> listener p99 at 1,000 msg/s", p99, "ms", 10.0, higher_is_better=False),
    ]


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_CLIENT_MESSAGES", 30_000)
    seconds = env_int("TIDEMQ_BENCH_CLIENT_LATENCY_SECONDS", 5)
    rounds = env_int("TIDEMQ_BENCH_CLIENT_ROUNDS", 3)
    with one_broker("client") as (namesrv, broker), temp_dir("client-baseline") as folder:
        group = ProcessGroup(folder / "logs")
        try:
            port = free_port()
            server = group.start(
                [sys.executable, "-m", "tests.bench.baseline", str(port), str(folder / "log")],
                port=port,
                name="baseline",
                ready_text="ready",
            )
            assert server.pid is not None and broker.pid is not None
            return run_on_uvloop(
                _run(
                    namesrv.address,
                    broker.address,
                    broker.pid,
                    port,
                    server.pid,
                    messages,
                    seconds,
                    rounds,
                )
            )
        finally:
            group.stop_all()
