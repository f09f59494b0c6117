"""The C++ client bench's load processes (tests/bench/cpp_sender.py, driven by cpp_bench.py).

A sender reports what it sent: its SEND_OK count, one latency per `send_sync`, and the broker
holds exactly its warm-up plus those sends. A sender that cannot send fails the run with its
error, and no sender process is left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "rocketmq.client",
    reason="the RocketMQ C++ client (rocketmq==0.4.4, x86_64 Linux only) cannot be imported",
    exc_type=ImportError,
)

from tests.bench.cpp_bench import (
    BROKER_OVERRIDES,
    QUEUES,
    WARMUP,
    CppSenders,
    cpp_senders,
    sender_specs,
)
from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup, free_port
from tidemq.client.api import BrokerAPI

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]


async def start_broker(
    processes: ProcessGroup, namesrv: Daemon, api: BrokerAPI, store: Path
) -> Daemon:
    """A broker whose TBW102 route the name server gives (C++ producers create topics from it)."""
    broker = processes.brokerd(namesrv.address, store, *BROKER_OVERRIDES)

    async def routed() -> bool:
        route = await api.get_route(namesrv.address, "TBW102")
        return route is not None and bool(route.queue_datas)

    await eventually(routed, "a route for TBW102", 10.0)
    return broker


async def test_senders_report_every_send_and_the_broker_holds_them(
    processes: ProcessGroup, namesrv: Daemon, api: BrokerAPI, tmp_path: Path
) -> None:
    broker = await start_broker(processes, namesrv, api, tmp_path / "store")
    specs = sender_specs(namesrv.address, "CppSenderTopic", 2, seconds=60, messages=25)
    async with cpp_senders(specs, tmp_path / "home") as senders:
        senders.go()
        reports = await senders.reports(60)
    assert [r.sent for r in reports] == [25, 25]
    assert [r.failed for r in reports] == [{}, {}]
    assert [len(r.latencies_us) for r in reports] == [25, 25]
    assert all(latency > 0 for r in reports for latency in r.latencies_us)
    assert all(r.started <= r.ended and r.cpu > 0 for r in reports)
    stored = [await api.get_max_offset(broker.address, "CppSenderTopic", q) for q in range(QUEUES)]
    assert sum(stored) == 2 * (WARMUP + 25)
    assert all(p.returncode == 0 for p in senders.processes)


async def test_a_sender_that_cannot_send_fails_the_start_and_none_is_left(
    tmp_path: Path,
) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # no name server: no route for any topic
    senders = CppSenders(sender_specs(nobody, "CppSenderTopic", 2, seconds=60), tmp_path)
    try:
        with pytest.raises(RuntimeError, match=r"C\+\+ sender 0: .*'error'.* instead of 'ready'"):
            await senders.start()
    finally:
        await senders.close()  # what cpp_senders does on the way out
    assert len(senders.processes) == 2
    assert all(p.returncode is not None for p in senders.processes)
