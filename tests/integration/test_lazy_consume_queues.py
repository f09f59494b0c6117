"""ConsumeQueues mapped on demand in a real `brokerd` (store/map_budget.py, queue_summary.py).

Many topics get messages in every queue, more ConsumeQueue files than maxMappedConsumeQueueFiles;
the broker stops cleanly and starts again; everything is consumed. The broker's own
/proc/<pid>/maps shows at most the bound of ConsumeQueue files mapped while it serves, and none
right after the restart (the load took every queue from the clean stop's summary). What it cannot
see: how long the restart takes (the scale section of `make bench` measures that).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tests.support.scale import create_topic_list
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.protocol.models import TopicConfig

TOPICS = 100
QUEUES = 4
PER_QUEUE = 12
BOUND = 24
CQ_UNITS = 5  # units per ConsumeQueue file: every queue spans 3 files


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


def consumequeue_maps(pid: int) -> int:
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return sum("/consumequeue/" in line for line in lines)


def body(topic: int, queue_id: int, i: int) -> bytes:
    return f"lazy/{topic}/{queue_id}/{i}".encode()


async def send_all(api: BrokerAPI, broker: str) -> None:
    async def one_topic(topic: int) -> None:
        for i in range(PER_QUEUE):
            for queue_id in range(QUEUES):
                header = send_header(f"Lazy{topic:03d}", queue_id)
                await api.send(broker, header, body(topic, queue_id, i))

    await asyncio.gather(*(one_topic(t) for t in range(TOPICS)))


async def consume_all(api: BrokerAPI, broker: Daemon) -> None:
    for topic in range(TOPICS):
        for queue_id in range(QUEUES):
            got: list[bytes] = []
            offset = 0
            while True:
                header = pull_header(f"Lazy{topic:03d}", queue_id, offset)
                pulled = await api.pull(broker.address, header)
                if pulled.status is not PullStatus.FOUND:
                    break
                got += [m.body for m in pulled.messages]
                offset = pulled.next_begin_offset
            assert got == [body(topic, queue_id, i) for i in range(PER_QUEUE)], (topic, queue_id)
        assert consumequeue_maps(broker.pid or 0) <= BOUND


def test_many_queues_stay_within_the_bound_and_a_restart_maps_none(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    namesrv = processes.namesrvd(name="namesrvd")
    broker = processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        f"mappedFileSizeConsumeQueue={CQ_UNITS * 20}",
        f"maxMappedConsumeQueueFiles={BOUND}",
        name="brokerd",
    )

    async def before_restart() -> None:
        api = BrokerAPI()
        try:
            configs = [TopicConfig(f"Lazy{t:03d}", QUEUES, QUEUES) for t in range(TOPICS)]
            await create_topic_list(api, broker.address, configs)
            await send_all(api, broker.address)
            # 1,200 files written; the broker maps at most the bound of them.
            assert consumequeue_maps(broker.pid or 0) <= BOUND
        finally:
            await api.close()

    asyncio.run(before_restart())
    assert broker.stop(timeout=60) == 0
    # Counted once stopped: dispatch makes new files in a worker thread, behind the sends.
    files = list((tmp_path / "store" / "consumequeue").rglob("0*"))
    assert len(files) >= TOPICS * QUEUES * 3
    assert (tmp_path / "store" / "consumequeue.summary").exists()

    restarted = Daemon(broker.args, port=broker.port, log_path=broker.log_path, name="restarted")
    processes.daemons.append(restarted)
    restarted.start()

    async def after_restart() -> None:
        api = BrokerAPI()
        try:
            await eventually(
                lambda: api.get_route(namesrv.address, f"Lazy{TOPICS - 1:03d}"), "routable", 30
            )
            assert consumequeue_maps(restarted.pid or 0) == 0  # the load mapped none
            # Max offsets came from the summary, right.
            assert await api.get_max_offset(restarted.address, "Lazy007", 3) == PER_QUEUE
            await consume_all(api, restarted)
        finally:
            await api.close()

    asyncio.run(after_restart())
    assert "every ConsumeQueue is checked" not in restarted.log_text()
