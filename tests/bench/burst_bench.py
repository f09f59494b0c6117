"""Burst benchmark (issue 20 item 4): a million 1 KiB messages with the only consumer stopped.

A brokerd (production file sizes) first gets TIDEMQ_BENCH_BURST_IDLE idle connections (2000) and
as many long-polling pulls as it holds (pullThreadPoolQueueCapacity, 2000 here; one more is
answered SYSTEM_BUSY); then producers send TIDEMQ_BENCH_BURST_MESSAGES (1,000,000) 1 KiB
messages, batches of 32, 8 in flight, as fast as it answers, while nothing consumes; then the
consumer comes back and pulls all of them. Reported: the broker's resident memory (VmRSS, which
counts the mapped store files' pages, and RssAnon, its heap) at the start, with the idle
connections and held pulls, at its peak during the burst and during the drain, and the rates.
Target: the heap grows by at most 64 MiB over the burst and the drain (the page cache is the
kernel's to reclaim).

Then hostile connections (issue 30 item 4), on a fresh brokerd with its default limits:
TIDEMQ_BENCH_HOSTILE_CONNECTIONS (2000) connections each announce a 15 MiB frame and send 1 MiB
of it, 64 KiB every 0.2 s (`tests/support/trickle.py`, in a process of its own), while a
legitimate client sends single 1 KiB messages one after the other, a millisecond apart (its
messages' pages of the mapped CommitLog count in VmRSS too). Reported: the broker's peak VmRSS
and RssAnon, and the legitimate sends' p99 latency. Targets: RSS < 512 MiB, p99 < 10 ms.
TIDEMQ_BENCH_BURST_MESSAGES=0 runs the hostile part alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time

from tests.bench import Result, env_int, one_broker, run_on_uvloop
from tests.support.burst import RssSampler, burst, drain, hold_pulls, idle_connections
from tests.support.trickle import raise_fd_limit
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.remoting.codes import ResponseCode

QUEUES = 8


async def _run(address: str, pid: int, messages: int, idle: int, held: int) -> list[Result]:
    api = BrokerAPI()
    sampler = RssSampler(pid)
    start_rss, start_anon = sampler.sample()
    sockets = idle_connections(address, idle)
    try:
        await burst(api, address, "BurstParked", 32 * QUEUES, queues=QUEUES)
        pulls = await hold_pulls(
            api, address, "BurstParked", held + 1, queues=QUEUES, suspend_ms=600_000
        )
        await asyncio.wait(pulls, return_when=asyncio.FIRST_COMPLETED)  # the one refused
        refused = [task.result() for task in pulls if task.done()]
        assert refused == [ResponseCode.SYSTEM_BUSY], refused
        setup_rss, setup_anon = sampler.sample()
        print(
            f"start: {start_rss:.0f} MiB RSS, {start_anon:.0f} MiB heap; with {idle} idle "
            f"connections and {held} held pulls: {setup_rss:.0f} MiB, {setup_anon:.0f} MiB"
        )

        sampler.start()
        sent = await burst(api, address, "Burst", messages, queues=QUEUES)
        await sampler.stop()
        burst_rss, burst_anon = sampler.peak_rss, sampler.peak_anon
        print(
            f"burst, consumer stopped: {sent.sent:,} messages in {sent.seconds:.1f} s, "
            f"{sent.busy} SYSTEM_BUSY; peak {burst_rss:.0f} MiB RSS, {burst_anon:.0f} MiB heap"
        )

        drained = RssSampler(pid)
        drained.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        received = await drain(api, address, "Burst", QUEUES)
        seconds = loop.time() - started
        await drained.stop()
        assert received == sent.sent, (received, sent.sent)
        print(
            f"drain, consumer running: {received:,} messages in {seconds:.1f} s; peak "
            f"{drained.peak_rss:.0f} MiB RSS, {drained.peak_anon:.0f} MiB heap"
        )
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
    finally:
        for sock in sockets:
            sock.close()
        await api.close()
    growth = max(burst_anon, drained.peak_anon) - setup_anon
    return [
        Result("burst sends, consumer stopped", sent.sent / sent.seconds, "msg/s"),
        Result("drain pulls, consumer back", received / seconds, "msg/s"),
        Result("broker peak RSS, burst (consumer stopped)", burst_rss, "MiB"),
        Result("broker peak RSS, drain (consumer running)", drained.peak_rss, "MiB"),
        Result(
            "broker heap with idle connections and held pulls",
            setup_anon,
            "MiB",
            note=f"{start_anon:.0f} MiB at start",
        ),
        Result(
            "broker heap growth over burst and drain", growth, "MiB", 64, higher_is_better=False
        ),
    ]


async def _hostile(address: str, pid: int, connections: int) -> list[Result]:
    api = BrokerAPI()
    sampler = RssSampler(pid)
    body = os.urandom(1024)
    latencies: list[float] = []
    failed = 0
    try:
        await api.send(address, send_header("Hostile", 0), body)  # the topic, the connection
        _rss, start_anon = sampler.sample()
        sampler.start()
        attack = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tests.support.trickle", address),
            *("--connections", str(connections), "--hold", "12"),
            stdout=asyncio.subprocess.PIPE,
        )
        output = asyncio.create_task(attack.communicate())
        while not output.done():
            started = time.perf_counter()
            try:
                sent = await api.send(address, send_header("Hostile", 0), body, timeout=10)
            except Exception as exc:  # a refused or lost send is what this measures
                failed += 1
                print(f"legitimate send failed: {exc!r}")
                await asyncio.sleep(0.01)
                continue
            latencies.append(time.perf_counter() - started)
            if sent.status is not SendStatus.SEND_OK:
                failed += 1
            await asyncio.sleep(0.001)
        await sampler.stop()
        stdout, _ = await output
    finally:
        await api.close()
    attacked = json.loads(stdout.decode().strip().splitlines()[-1])
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000 if len(latencies) > 100 else 0.0
    p50 = statistics.median(latencies) * 1000 if latencies else 0.0
    print(
        f"hostile: {attacked['opened']} connections opened ({attacked['refused']} refused), "
        f"{attacked['closed_by_peer']} closed by the broker, {attacked['bytes_sent'] / 2**20:.0f}"
        f" MiB sent; broker peak {sampler.peak_rss:.0f} MiB RSS, {sampler.peak_anon:.0f} MiB "
        f"heap (from {start_anon:.0f}); {len(latencies)} legitimate sends, {failed} failed, "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    return [
        Result(
            f"hostile: broker peak RSS, {connections} trickling 15 MiB frames",
            sampler.peak_rss,
            "MiB",
            512,
            higher_is_better=False,
            note=f"heap (RssAnon) peak {sampler.peak_anon:.0f} MiB",
        ),
        Result(
            "hostile: broker peak heap (RssAnon)",
            sampler.peak_anon,
            "MiB",
            note=f"{start_anon:.0f} MiB before the attack",
        ),
        Result(
            "hostile: legitimate single send p99",
            p99,
            "ms",
            10,
            higher_is_better=False,
            note=f"p50 {p50:.2f} ms, {len(latencies)} sends, {failed} failed",
        ),
    ]


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_BURST_MESSAGES", 1_000_000)
    idle = env_int("TIDEMQ_BENCH_BURST_IDLE", 2000)
    held = env_int("TIDEMQ_BENCH_BURST_HELD", 2000)
    hostile = env_int("TIDEMQ_BENCH_HOSTILE_CONNECTIONS", 2000)
    raise_fd_limit(max(idle + held, hostile) + 1024)  # the broker and the attacker inherit it
    results: list[Result] = []
    if messages:
        with one_broker("burst", f"pullThreadPoolQueueCapacity={held}") as (_namesrv, broker):
            assert broker.pid is not None
            results += run_on_uvloop(_run(broker.address, broker.pid, messages, idle, held))
    with one_broker("hostile") as (_namesrv, broker):
        assert broker.pid is not None
        results += run_on_uvloop(_hostile(broker.address, broker.pid, hostile))
    return results
