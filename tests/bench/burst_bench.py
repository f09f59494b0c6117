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
"""

from __future__ import annotations

import asyncio

from tests.bench import Result, env_int, one_broker, run_on_uvloop
from tests.support.burst import RssSampler, burst, drain, hold_pulls, idle_connections
from tidemq.client.api import BrokerAPI
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


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_BURST_MESSAGES", 1_000_000)
    idle = env_int("TIDEMQ_BENCH_BURST_IDLE", 2000)
    held = env_int("TIDEMQ_BENCH_BURST_HELD", 2000)
    with one_broker("burst", f"pullThreadPoolQueueCapacity={held}") as (_namesrv, broker):
        assert broker.pid is not None
        return run_on_uvloop(_run(broker.address, broker.pid, messages, idle, held))
