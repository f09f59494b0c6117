"""A broker restarted on a table of many topics (issue 34), real `namesrvd` and `brokerd`.

The restarted broker keeps its tables.db rows as text and registers them as they are, in parts
of splitRegistrationSize whose middle ones are pipelined with tidemq's name server: every topic
comes back routable with its own queue counts and permission (one of another shape included),
the broker's log names the parts in flight, GET_ALL_TOPIC_CONFIG answers every topic as
created, and a topic changed after the restart is read back changed after another restart
while the untouched rows stay as they were. What it cannot see: the timings (`make bench`'s
scale section), and a RocketMQ name server (tests/unit/test_registration.py: one part after
the other when the answer does not echo splitIndex).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually_sync
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.admin.api import AdminClient
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import TideMQError
from tidemq.client.protocol.models import PERM_READ, TopicConfig

TOPICS = 3000
SPLIT_SIZE = 100
PIPELINED = re.compile(
    r"full registration with name server \S+: (\d+) topics in (\d+) part\(s\), 4 in flight"
)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


def queues_of(namesrv: str, topic: str) -> tuple[int, int, int] | None:
    async def ask() -> tuple[int, int, int] | None:
        async with AdminClient(namesrv) as admin:
            try:
                route = await admin.topic_route(topic)
            except TideMQError:
                return None
            queue = route.queue_datas[0]
            return queue.read_queue_nums, queue.write_queue_nums, queue.perm

    return asyncio.run(ask())


def admin(namesrv: str, work: str, broker: str, configs: list[TopicConfig]) -> None:
    async def run() -> None:
        async with AdminClient(namesrv) as client:
            if work == "list":
                for start in range(0, len(configs), 1000):
                    await client.create_topic_list(broker, configs[start : start + 1000])
            else:
                await client.create_topic(broker, configs[0])

    asyncio.run(run())


def topic_config(broker: str, topic: str) -> TopicConfig:
    async def ask() -> TopicConfig:
        async with AdminClient(broker) as client:
            return await client.topic_config(broker, topic)

    return asyncio.run(ask())


def all_topic_config(broker: str) -> dict[str, TopicConfig]:
    async def ask() -> dict[str, TopicConfig]:
        api = BrokerAPI()
        try:
            return (await api.all_topic_config(broker)).topic_config_table
        finally:
            await api.close()

    return asyncio.run(ask())


def restart(processes: ProcessGroup, broker: Daemon) -> Daemon:
    broker.stop(timeout=60)
    again = Daemon(broker.args, port=broker.port, log_path=broker.log_path, name="brokerd-again")
    processes.daemons.append(again)
    return again.start()


def test_a_restart_registers_every_topic_from_its_rows(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    namesrv = processes.namesrvd(name="namesrvd")
    broker = processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        f"splitRegistrationSize={SPLIT_SIZE}",
        "exportConfigJsonOnShutdown=false",
        name="brokerd",
    )
    names = [f"Many{i:05d}" for i in range(TOPICS)]
    odd = TopicConfig("Odd", 3, 5, PERM_READ, "MULTI_TAG", 0, order=True)
    admin(namesrv.address, "list", broker.address, [TopicConfig(n, 2, 2) for n in names] + [odd])
    broker = restart(processes, broker)
    pipelined = lambda: [m for m in PIPELINED.findall(broker.log_text())]  # noqa: E731
    eventually_sync(lambda: len(pipelined()) >= 1, "a pipelined full registration", 60)
    topics, parts = (int(n) for n in pipelined()[-1])
    assert topics > TOPICS and parts == -(-topics // SPLIT_SIZE)
    for name in (names[0], names[len(names) // 2], names[-1]):
        assert queues_of(namesrv.address, name) == (2, 2, 6), name
    assert queues_of(namesrv.address, "Odd") == (3, 5, PERM_READ)
    assert topic_config(broker.address, "Odd") == odd
    # GET_ALL_TOPIC_CONFIG (a slave's copy) is made of the rows' texts too
    table = all_topic_config(broker.address)
    assert table["Odd"] == odd
    assert all(table[name] == TopicConfig(name, 2, 2) for name in names)

    # changed after the restart: read back changed after the next one, the others untouched
    admin(namesrv.address, "one", broker.address, [TopicConfig(names[7], 4, 4)])
    broker = restart(processes, broker)
    assert topic_config(broker.address, names[7]) == TopicConfig(names[7], 4, 4)
    assert topic_config(broker.address, names[8]) == TopicConfig(names[8], 2, 2)
    eventually_sync(
        lambda: queues_of(namesrv.address, names[7]) == (4, 4, 6), "the change routable", 60
    )
