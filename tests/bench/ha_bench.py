"""HA benchmark: namesrvd, masters and a slave as separate processes.

- catch-up: a slave started against a master holding a backlog (1 GiB by default,
  TIDEMQ_BENCH_HA_BACKLOG_MB to change) replicates it; MB/s from the slave's first ack to its
  last, beside the raw loopback TCP rate of one asyncio event loop (uvloop) sending 32 KiB chunks
  to another process;
- SYNC_MASTER vs ASYNC_MASTER: 1 KiB sends with 64 in flight, each master with a slave;
- latency of single SYNC_MASTER sends at 1,000 msg/s: p50 and p99.

Targets (issue 4): catch-up >= 300 MB/s and >= 0.25 of raw; SYNC >= 0.7 of ASYNC throughput;
SYNC p99 <= 5 ms.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from tests.bench import BROKER_SIZES, Result, env_int, run_on_uvloop, temp_dir
from tests.bench.replicas import ha_status, master_with_slave, wait_slave
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.store.record import encode_properties

BODY_1K = os.urandom(1024)
# An empty slave is sent only the master's last CommitLog file (RocketMQ's rule), so the
# catch-up pair uses files larger than the backlog.
CATCH_UP_STORE = ("mappedFileSizeCommitLog=4294967296",)
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


async def _fill(api: BrokerAPI, address: str, total_bytes: int) -> None:
    body = os.urandom(1024 * 1024 - 4096)
    count = total_bytes // len(body)
    sem = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with sem:
            await api.send(address, _header("HABacklog", i % 4), body, timeout=60)

    await asyncio.gather(*(one(i) for i in range(count)))


async def _catch_up(group: ProcessGroup, namesrv: Daemon, folder: Path, backlog: int) -> float:
    api = BrokerAPI(timeout=30)
    try:
        master = group.brokerd(
            namesrv.address,
            folder / "cu-master",
            "brokerRole=ASYNC_MASTER",
            *BIG_STORE,
            *CATCH_UP_STORE,
            "brokerName=broker-cu",
            name="cu-master",
        )
        await _fill(api, master.address, backlog)
        target = int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])  # type: ignore[call-overload]
        slave = group.brokerd(
            namesrv.address,
            folder / "cu-slave",
            "brokerRole=SLAVE",
            "brokerId=1",
            *BIG_STORE,
            *CATCH_UP_STORE,
            "brokerName=broker-cu",
            name="cu-slave",
        )
        started = time.perf_counter()
        first = None
        while True:
            info = await ha_status(api, slave.address)
            offset = int(info.get("maxOffset", 0))  # type: ignore[call-overload]
            if first is None and offset > 0:
                first = (time.perf_counter(), offset)
            if offset >= target:
                break
            if time.perf_counter() - started > 300:
                raise TimeoutError(f"catch-up stuck at {offset} of {target}")
            await asyncio.sleep(0.05)
        begin_time, begin_offset = first or (started, 0)
        elapsed = time.perf_counter() - begin_time
        return (target - begin_offset) / max(elapsed, 1e-6) / 1e6
    finally:
        await api.close()


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


async def _run(group: ProcessGroup, namesrv: Daemon, folder: Path) -> list[Result]:
    backlog = env_int("TIDEMQ_BENCH_HA_BACKLOG_MB", 1024) * 1024 * 1024
    messages = env_int("TIDEMQ_BENCH_HA_MESSAGES", 30_000)
    raw = await _raw_loopback_mb_s(min(backlog, 512 * 1024 * 1024))
    print(f"raw loopback TCP, 32 KiB chunks: {raw:,.0f} MB/s", flush=True)
    catch_up = await _catch_up(group, namesrv, folder, backlog)
    print(f"catch-up of {backlog >> 20} MiB: {catch_up:,.0f} MB/s ({catch_up / raw:.2f} of raw)")
    sync_master, _ = master_with_slave(group, namesrv, folder, "SYNC_MASTER", "broker-sync")
    async_master, _ = master_with_slave(group, namesrv, folder, "ASYNC_MASTER", "broker-async")
    await wait_slave(sync_master.address)
    await wait_slave(async_master.address)
    sync_rate = await _throughput(sync_master.address, messages, 64)
    async_rate = await _throughput(async_master.address, messages, 64)
    print(
        f"1 KiB sends, 64 in flight: SYNC_MASTER {sync_rate:,.0f} msg/s, "
        f"ASYNC_MASTER {async_rate:,.0f} msg/s"
    )
    p50, p99 = await _latency(
        sync_master.address, env_int("TIDEMQ_BENCH_HA_LATENCY_SENDS", 5000), 1000.0
    )
    print(f"SYNC_MASTER single sends at 1,000 msg/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    return [
        Result("raw loopback TCP (32 KiB chunks)", raw, "MB/s"),
        Result("HA catch-up", catch_up, "MB/s", 300),
        Result("HA catch-up / raw loopback", catch_up / raw, "ratio", 0.25),
        Result("SYNC_MASTER sends, 64 in flight", sync_rate, "msg/s"),
        Result("ASYNC_MASTER sends, 64 in flight", async_rate, "msg/s"),
        Result("SYNC / ASYNC throughput", sync_rate / async_rate, "ratio", 0.7),
        Result("SYNC_MASTER send p50 at 1,000 msg/s", p50, "ms"),
        Result("SYNC_MASTER send p99 at 1,000 msg/s", p99, "ms", 5.0, higher_is_better=False),
    ]


def run() -> list[Result]:
    with temp_dir("ha") as folder:
        group = ProcessGroup(folder / "logs")
        try:
            namesrv = group.namesrvd(name="namesrvd")
            return run_on_uvloop(_run(group, namesrv, folder))
        finally:
            group.stop_all()
