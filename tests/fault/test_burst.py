"""Bursts with the consumer stopped (issue 20 item 4), short version (`make bench` has the long
one: tests/bench/burst_bench.py).

A real brokerd with a thousand idle connections and hundreds of long-polling pulls held takes a
burst of 1 KiB messages sent as fast as it answers while nothing consumes them: its heap
(RssAnon; the mapped store files' pages are page cache, reclaimable) stays within a bound, and
once a consumer comes back it reads every message. Pulls held beyond pullThreadPoolQueueCapacity
are refused with SYSTEM_BUSY, a retriable error in our client, and held again once room is back.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.support.burst import (
    RssSampler,
    burst,
    drain,
    hold_pulls,
    idle_connections,
)
from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.errors import SystemBusyError
from tidemq.client.remoting.codes import ResponseCode

MESSAGES = int(os.environ.get("BURST_TEST_MESSAGES", "64000"))
# What the idle connections and held pulls may add to the broker's heap, and the burst on top.
SETUP_BOUND_MIB = 48
BURST_BOUND_MIB = 32
CAPACITY = 600  # pullThreadPoolQueueCapacity: the pulls held at once


async def all_but_one_held(
    api: BrokerAPI, address: str, topic: str, queues: int
) -> list[asyncio.Task[int]]:
    """CAPACITY + 1 long-polling pulls: one is refused SYSTEM_BUSY, the others are held."""
    pulls = await hold_pulls(api, address, topic, CAPACITY + 1, queues=queues, suspend_ms=60_000)
    await eventually(lambda: any(task.done() for task in pulls), "a pull over the capacity")
    refused = [task for task in pulls if task.done()]
    assert [task.result() for task in refused] == [ResponseCode.SYSTEM_BUSY]
    return [task for task in pulls if not task.done()]


@pytest.fixture
def broker(tmp_path: Path, processes: ProcessGroup, namesrv: Daemon) -> Daemon:
    return processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        "mappedFileSizeCommitLog=67108864",
        f"pullThreadPoolQueueCapacity={CAPACITY}",
    )


async def test_a_burst_with_the_consumer_stopped_keeps_the_broker_heap_bounded(
    broker: Daemon, api: BrokerAPI
) -> None:
    assert broker.pid is not None
    sampler = RssSampler(broker.pid)
    _rss, start_anon = sampler.sample()
    sockets = idle_connections(broker.address, 1000)
    try:
        await burst(api, broker.address, "Parked", 32)  # the topic of the held pulls
        held = await all_but_one_held(api, broker.address, "Parked", 8)
        _rss, setup_anon = sampler.sample()
        assert setup_anon - start_anon < SETUP_BOUND_MIB, sampler.samples

        sampler.start()
        sent = await burst(api, broker.address, "Burst", MESSAGES)
        await sampler.stop()
        assert sent.sent == MESSAGES // 32 * 32
        assert sampler.peak_anon - setup_anon < BURST_BOUND_MIB, (setup_anon, sampler.peak_anon)

        assert await drain(api, broker.address, "Burst", 8) == sent.sent
        assert not any(t.done() for t in held)  # the held pulls still wait, none failed
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
    finally:
        for sock in sockets:
            sock.close()


async def test_pulls_held_beyond_the_capacity_are_answered_system_busy(
    broker: Daemon, api: BrokerAPI
) -> None:
    await burst(api, broker.address, "Held", 32, queues=1)
    held = await all_but_one_held(api, broker.address, "Held", 1)
    with pytest.raises(SystemBusyError, match=r"\[TOO_MANY_REQUESTS\]broker busy") as refused:
        await api.pull(broker.address, pull_header("Held", 0, 32, suspend_ms=60_000))
    assert refused.value.retriable

    # an arrival answers the held pulls; then a pull is held again
    await api.send(broker.address, send_header("Held", 0), b"wake")
    codes = await asyncio.gather(*held)
    assert codes == [ResponseCode.SUCCESS] * CAPACITY
    again = asyncio.create_task(
        api.pull(broker.address, pull_header("Held", 0, 33, suspend_ms=60_000))
    )
    await api.send(broker.address, send_header("Held", 0), b"next")
    result = await again
    assert result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"next"]
