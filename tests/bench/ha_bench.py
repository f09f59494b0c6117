"""HA benchmark: namesrvd, masters and a slave as separate processes.

- catch-up: a slave started against a master holding a backlog of 1 KiB messages (1 GiB by
  default, TIDEMQ_BENCH_HA_BACKLOG_MB to change; filled with SEND_BATCH_MESSAGE of 32, each
  message with its own UNIQ_KEY and a tag) replicates it; MB/s from the slave's first ack to its
  last, beside the raw loopback TCP rate of one asyncio event loop (uvloop) sending 32 KiB chunks
  to another process. Baseline and catch-up take turns, TIDEMQ_BENCH_HA_ROUNDS times (default
  3; a new empty slave each round), and the medians are reported (the ratio's is the median of
  each round's ratio): one baseline beside one catch-up moved 0.25-1.39 between runs. The
  slave appends and acknowledges at wire pace and its dispatch follows: printed are how far
  dispatch was behind when the slave had everything (its HA status' dispatchBehindBytes), how
  long dispatch took to finish after that, and the slave process's CPU seconds per GB
  (receiving; receiving and dispatching);
- SYNC_MASTER vs ASYNC_MASTER: 1 KiB sends with 64 in flight through the public
  `AsyncProducer.send` (routing, queue choice, message, result: the user's path; issue 36), each
  master with a slave and its own topic, in rounds alternating which goes first
  (TIDEMQ_BENCH_HA_ROUNDS), with the master's CPU per send; the same sends through `BrokerAPI`
  (the earlier figure, without the producer's work) are printed beside them from the same rounds;
- latency of single SYNC_MASTER sends at 1,000 msg/s: p50 and p99.

Targets: catch-up >= 0.6 of raw loopback TCP (issue 36; issue 4 asked >= 300 MB/s); SYNC >= 0.7
of ASYNC throughput (issues 4, 36); SYNC p99 <= 2 ms (issue 15).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from tests.bench import BROKER_SIZES, Result, env_int, run_on_uvloop, temp_dir
from tests.bench.client_bench import _create_topics
from tests.bench.cpu import user_system
from tests.bench.replicas import ha_status, master_with_slave, wait_slave
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.config import ClientConfig
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.protocol.namesrv import KVTable
from tidemq.client.remoting.codes import RequestCode
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import encode_properties

BODY_1K = os.urandom(1024)
FILL_BATCH = 32
# About what one 1 KiB message of the backlog takes in the CommitLog (body, header, properties).
RECORD_1K = 1024 + 200


def _catch_up_store(backlog: int) -> tuple[str, ...]:
    """An empty slave is sent only the master's last CommitLog file (RocketMQ's rule), so the
    catch-up pair uses files larger than the backlog (twice: the fill overshoots a little)."""
    # The pair writes gigabytes: on a shared development disk the 90% write guard would stop
    # the fill, which is not what this measures.
    return (
        f"mappedFileSizeCommitLog={max(2 * backlog, 64 << 20)}",
        "diskSpaceWarningLevelRatio=0.99",
    )


BIG_STORE = BROKER_SIZES

RAW_SINK = """
import socket, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
total = 0
while True:
    data = conn.recv(1 << 20)
    if not data:
        break
    total += len(data)
print(total, flush=True)
"""


def _header(topic: str, queue_id: int) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="BenchPG",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties({"WAIT": "true"}),
        default_topic_queue_nums=8,
    )


async def _raw_loopback_mb_s(total: int) -> float:
    sink = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RAW_SINK, stdout=asyncio.subprocess.PIPE
    )
    assert sink.stdout is not None
    port = int(await sink.stdout.readline())
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    chunk = os.urandom(32 * 1024)
    started = time.perf_counter()
    sent = 0
    while sent < total:
        writer.write(chunk)
        sent += len(chunk)
        await writer.drain()
    writer.close()
    await writer.wait_closed()
    received = int(await sink.stdout.readline())
    elapsed = time.perf_counter() - started
    await sink.wait()
    return received / elapsed / 1e6


def _batch_header(topic: str, queue_id: int) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="BenchPG",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=None,
        default_topic_queue_nums=8,
        batch=True,
    )


def _batch_bodies(count: int) -> list[bytes]:
    """SEND_BATCH_MESSAGE bodies of FILL_BATCH 1 KiB messages, each with its own keys."""
    return [
        encode_batch_body(
            [
                (0, BODY_1K, encode_properties({"UNIQ_KEY": uuid.uuid4().hex.upper(), "TAGS": "b"}))
                for _ in range(FILL_BATCH)
            ]
        )
        for _ in range(count)
    ]


async def _fill(api: BrokerAPI, address: str, total_bytes: int) -> int:
    """Sends 1 KiB messages in batches until the master's CommitLog holds `total_bytes`;
    returns how many messages."""
    bodies = _batch_bodies(64)
    sent = 0
    stored = 0
    batches = 0

    async def worker() -> None:
        nonlocal stored, batches
        while stored < total_bytes:
            batch = batches
            batches += 1
            result = await api.send(
                address,
                _batch_header("HABacklog", batch % 8),
                bodies[batch % len(bodies)],
                batch=True,
                timeout=60,
            )
            assert result.status is SendStatus.SEND_OK, result.status
            stored += RECORD_1K * FILL_BATCH

    await asyncio.gather(*(worker() for _ in range(8)))
    sent = batches * FILL_BATCH
    return sent


@dataclass(frozen=True, slots=True)
class CatchUp:
    mb_s: float
    lag_at_end: int  # bytes received by the slave but not dispatched when it caught up
    dispatch_after: float  # seconds dispatch went on after the slave caught up
    receive_cpu: float  # the slave process's CPU seconds per GB while catching up
    total_cpu: float  # ... until dispatch finished too


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (its threads included)."""
    return 0.0 if pid is None else sum(user_system(pid)) / os.sysconf("SC_CLK_TCK")


async def _dispatch_behind(api: BrokerAPI, address: str) -> int:
    """The slave's dispatch lag as its HA status reports it (runtime info on older brokers)."""
    info = await ha_status(api, address)
    if "dispatchBehindBytes" in info:
        return int(info["dispatchBehindBytes"])  # type: ignore[call-overload]
    response = await api.call(address, api.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    return int(KVTable.decode(response.body).table["dispatchBehindBytes"])


async def _filled_master(
    group: ProcessGroup,
    namesrv: Daemon,
    folder: Path,
    backlog: int,
    *,
    tag: str = "cu",
    master_extra: tuple[str, ...] = (),
) -> tuple[Daemon, int]:
    """An ASYNC_MASTER holding `backlog` bytes of 1 KiB messages, and its CommitLog's end."""
    api = BrokerAPI(timeout=30)
    try:
        master = group.brokerd(
            namesrv.address,
            folder / f"{tag}-master",
            "brokerRole=ASYNC_MASTER",
            *BIG_STORE,
            *_catch_up_store(backlog),
            f"brokerName=broker-{tag}",
            *master_extra,
            name=f"{tag}-master",
        )
        await _fill(api, master.address, backlog)
        target = int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])  # type: ignore[call-overload]
        return master, target
    finally:
        await api.close()


async def _slave_catch_up(
    group: ProcessGroup,
    namesrv: Daemon,
    folder: Path,
    backlog: int,
    target: int,
    *,
    tag: str = "cu",
    slave_extra: tuple[str, ...] = (),
) -> CatchUp:
    """A new, empty slave of the master of `tag` copies its `target` bytes; the slave is
    stopped and its store removed afterwards (the next round starts another)."""
    api = BrokerAPI(timeout=30)
    store = folder / f"{tag}-slave"
    slave = group.brokerd(
        namesrv.address,
        store,
        "brokerRole=SLAVE",
        "brokerId=1",
        *BIG_STORE,
        *_catch_up_store(backlog),
        f"brokerName=broker-{tag}",
        *slave_extra,
        name=f"{tag}-slave",
    )
    try:
        started = time.perf_counter()
        cpu_at_start = _cpu_seconds(slave.pid)
        first = None
        cpu_start = 0.0
        while True:
            info = await ha_status(api, slave.address)
            offset = int(info.get("maxOffset", 0))  # type: ignore[call-overload]
            if first is None and offset >= target:
                # All of it before the first look (a small backlog): timed from the slave's
                # start, not from a first sample that would hold nothing to divide by.
                first = (started, 0)
                cpu_start = cpu_at_start
            elif first is None and offset > 0:
                first = (time.perf_counter(), offset)
                cpu_start = _cpu_seconds(slave.pid)
            if offset >= target:
                break
            if time.perf_counter() - started > 300:
                raise TimeoutError(f"catch-up stuck at {offset} of {target}")
            await asyncio.sleep(0.02)
        caught_up = time.perf_counter()
        cpu_caught_up = _cpu_seconds(slave.pid)
        begin_time, begin_offset = first or (started, 0)
        elapsed = caught_up - begin_time
        lag = await _dispatch_behind(api, slave.address)
        behind = lag
        while behind > 0:
            if time.perf_counter() - caught_up > 300:
                raise TimeoutError(f"slave dispatch stuck {behind} bytes behind")
            await asyncio.sleep(0.02)
            behind = await _dispatch_behind(api, slave.address)
        dispatch_after = time.perf_counter() - caught_up
        gigabytes = (target - begin_offset) / 1e9
        return CatchUp(
            (target - begin_offset) / max(elapsed, 1e-6) / 1e6,
            lag,
            dispatch_after,
            (cpu_caught_up - cpu_start) / gigabytes,
            (_cpu_seconds(slave.pid) - cpu_start) / gigabytes,
        )
    finally:
        await api.close()
        slave.stop()
        group.daemons.remove(slave)
        shutil.rmtree(store, ignore_errors=True)


async def _catch_up(
    group: ProcessGroup,
    namesrv: Daemon,
    folder: Path,
    backlog: int,
    *,
    tag: str = "cu",
    master_extra: tuple[str, ...] = (),
    slave_extra: tuple[str, ...] = (),
) -> CatchUp:
    """A slave's catch-up of a master's backlog (the pair named after `tag`; `*_extra` are
    more brokerd overrides, e.g. the security section's TLS keys)."""
    _master, target = await _filled_master(
        group, namesrv, folder, backlog, tag=tag, master_extra=master_extra
    )
    return await _slave_catch_up(
        group, namesrv, folder, backlog, target, tag=tag, slave_extra=slave_extra
    )


async def _throughput(address: str, messages: int, in_flight: int) -> float:
    api = BrokerAPI(timeout=30)
    remaining = messages
    statuses: dict[SendStatus, int] = {}

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            result = await api.send(address, _header("HAThroughput", remaining % 8), BODY_1K)
            statuses[result.status] = statuses.get(result.status, 0) + 1

    try:
        await api.send(address, _header("HAThroughput", 0), BODY_1K)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        rate = messages / (time.perf_counter() - started)
    finally:
        await api.close()
    if set(statuses) != {SendStatus.SEND_OK}:
        print(f"  statuses: {statuses}")
    return rate


async def _producer_throughput(
    producer: AsyncProducer, topic: str, messages: int, in_flight: int
) -> float:
    """1 KiB sends through the public `AsyncProducer.send` (waiting for the store: the message's
    default WAIT=true) to `topic`, `in_flight` at a time; msg/s."""
    remaining = messages
    statuses: dict[SendStatus, int] = {}

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            result = await producer.send(Message(topic, BODY_1K))
            statuses[result.status] = statuses.get(result.status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    rate = messages / (time.perf_counter() - started)
    if set(statuses) != {SendStatus.SEND_OK}:
        print(f"  statuses: {statuses}")
    return rate


async def _latency(address: str, count: int, rate: float) -> tuple[float, float]:
    api = BrokerAPI(timeout=30)
    latencies = []
    try:
        await api.send(address, _header("HALatency", 0), BODY_1K)
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for i in range(count):
            now = time.perf_counter()
            if next_at > now:
                await asyncio.sleep(next_at - now)
            next_at += interval
            started = time.perf_counter()
            result = await api.send(address, _header("HALatency", i % 8), BODY_1K)
            latencies.append(time.perf_counter() - started)
            assert result.status is SendStatus.SEND_OK, result.status
    finally:
        await api.close()
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000


@dataclass(frozen=True, slots=True)
class Sends:
    sync: float  # msg/s, AsyncProducer.send
    sync_cpu: float  # the SYNC_MASTER's CPU microseconds per send
    asynchronous: float
    async_cpu: float
    api_sync: float  # msg/s, BrokerAPI.send (no producer work)
    api_asynchronous: float


SYNC_TOPIC = "HASyncSends"
ASYNC_TOPIC = "HAAsyncSends"


async def _sends_round(
    producer: AsyncProducer, sync_master: Daemon, async_master: Daemon, messages: int, r: int
) -> Sends:
    """SYNC then ASYNC (odd rounds the other way round), 64 sends in flight each, through the
    producer and then through BrokerAPI."""
    rates: dict[str, tuple[float, float]] = {}
    api_rates: dict[str, float] = {}
    order = [("sync", sync_master, SYNC_TOPIC), ("async", async_master, ASYNC_TOPIC)]
    for kind, master, topic in order if r % 2 == 0 else order[::-1]:
        before = _cpu_seconds(master.pid)
        rate = await _producer_throughput(producer, topic, messages, 64)
        rates[kind] = rate, (_cpu_seconds(master.pid) - before) / messages * 1e6
        api_rates[kind] = await _throughput(master.address, messages, 64)
    return Sends(*rates["sync"], *rates["async"], api_rates["sync"], api_rates["async"])


async def _run(group: ProcessGroup, namesrv: Daemon, folder: Path) -> list[Result]:
    backlog = env_int("TIDEMQ_BENCH_HA_BACKLOG_MB", 1024) * 1024 * 1024
    messages = env_int("TIDEMQ_BENCH_HA_MESSAGES", 30_000)
    rounds = env_int("TIDEMQ_BENCH_HA_ROUNDS", 3)
    # The raw TCP baseline moved 986-2,369 MB/s between quiet runs: each catch-up is judged
    # against a baseline taken just before it, and the medians of the rounds are reported.
    _master, target = await _filled_master(group, namesrv, folder, backlog)
    raws: list[float] = []
    catch_ups: list[CatchUp] = []
    for r in range(rounds):
        raws.append(await _raw_loopback_mb_s(min(backlog, 512 * 1024 * 1024)))
        catch_ups.append(await _slave_catch_up(group, namesrv, folder, backlog, target))
        caught = catch_ups[-1]
        print(
            f"round {r + 1}: raw loopback TCP (32 KiB chunks) {raws[-1]:,.0f} MB/s; catch-up "
            f"of {backlog >> 20} MiB of 1 KiB messages {caught.mb_s:,.0f} MB/s "
            f"({caught.mb_s / raws[-1]:.2f} of raw); dispatch {caught.lag_at_end / 1e6:,.1f} MB "
            f"behind then, done {caught.dispatch_after:.2f} s later; slave CPU per GB: "
            f"{caught.receive_cpu:.2f} s receiving, {caught.total_cpu:.2f} s with dispatch",
            flush=True,
        )
    _master.stop()
    sync_master, _ = master_with_slave(group, namesrv, folder, "SYNC_MASTER", "broker-sync")
    async_master, _ = master_with_slave(group, namesrv, folder, "ASYNC_MASTER", "broker-async")
    await wait_slave(sync_master.address)
    await wait_slave(async_master.address)
    await _create_topics(namesrv.address, sync_master.address, SYNC_TOPIC)
    await _create_topics(namesrv.address, async_master.address, ASYNC_TOPIC)
    producer = AsyncProducer(
        "BenchHAPG",
        config=ClientConfig.create(
            namesrv.address, poll_name_server_interval=5.0, heartbeat_broker_interval=5.0
        ),
    )
    await producer.start()
    sends: list[Sends] = []
    try:
        # Warm both (connections, routes, the first CommitLog pages) before any round counts.
        for topic, master in ((SYNC_TOPIC, sync_master), (ASYNC_TOPIC, async_master)):
            await _producer_throughput(producer, topic, 2000, 64)
            await _throughput(master.address, 2000, 64)
        for r in range(rounds):
            sends.append(await _sends_round(producer, sync_master, async_master, messages, r))
            one = sends[-1]
            print(
                f"round {r + 1}: 1 KiB sends, AsyncProducer.send, 64 in flight: SYNC_MASTER "
                f"{one.sync:,.0f} msg/s ({one.sync_cpu:.1f} us of master CPU per send), "
                f"ASYNC_MASTER {one.asynchronous:,.0f} msg/s ({one.async_cpu:.1f} us): "
                f"{one.sync / one.asynchronous:.2f}; through BrokerAPI: SYNC "
                f"{one.api_sync:,.0f}, ASYNC {one.api_asynchronous:,.0f} msg/s: "
                f"{one.api_sync / one.api_asynchronous:.2f}",
                flush=True,
            )
    finally:
        await producer.shutdown()
    p50, p99 = await _latency(
        sync_master.address, env_int("TIDEMQ_BENCH_HA_LATENCY_SENDS", 5000), 1000.0
    )
    print(f"SYNC_MASTER single sends at 1,000 msg/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    note = f"median of {rounds} alternating rounds"
    return [
        Result("raw loopback TCP (32 KiB chunks)", median(raws), "MB/s", note=note),
        Result("HA catch-up", median(c.mb_s for c in catch_ups), "MB/s", 300, note=note),
        Result(
            "HA catch-up / raw loopback",
            median(c.mb_s / raw for c, raw in zip(catch_ups, raws, strict=True)),
            "ratio",
            0.6,
            note=note,
        ),
        Result(
            "slave dispatch behind at catch-up", median(c.lag_at_end for c in catch_ups) / 1e6, "MB"
        ),
        Result(
            "slave dispatch done after catch-up", median(c.dispatch_after for c in catch_ups), "s"
        ),
        Result("slave CPU per GB, receiving", median(c.receive_cpu for c in catch_ups), "s"),
        Result("slave CPU per GB, with dispatch", median(c.total_cpu for c in catch_ups), "s"),
        Result(
            "SYNC_MASTER sends (AsyncProducer), 64 in flight",
            median(x.sync for x in sends),
            "msg/s",
            note=note,
        ),
        Result(
            "ASYNC_MASTER sends (AsyncProducer), 64 in flight",
            median(x.asynchronous for x in sends),
            "msg/s",
            note=note,
        ),
        Result(
            "SYNC / ASYNC throughput (AsyncProducer)",
            median(x.sync / x.asynchronous for x in sends),
            "ratio",
            0.7,
            note=note,
        ),
        Result(
            "SYNC / ASYNC throughput (BrokerAPI, no producer work)",
            median(x.api_sync / x.api_asynchronous for x in sends),
            "ratio",
            note=f"{note}; the earlier figure",
        ),
        Result(
            "SYNC_MASTER: master CPU per send (AsyncProducer)",
            median(x.sync_cpu for x in sends),
            "us",
        ),
        Result(
            "ASYNC_MASTER: master CPU per send (AsyncProducer)",
            median(x.async_cpu for x in sends),
            "us",
        ),
        Result("SYNC_MASTER send p50 at 1,000 msg/s", p50, "ms"),
        Result("SYNC_MASTER send p99 at 1,000 msg/s", p99, "ms", 2.0, higher_is_better=False),
    ]


def run() -> list[Result]:
    with temp_dir("ha") as folder:
        group = ProcessGroup(folder / "logs")
        try:
            namesrv = group.namesrvd(name="namesrvd")
            return run_on_uvloop(_run(group, namesrv, folder))
        finally:
            group.stop_all()
