"""Registration that scales (broker/registration.py), with a real `namesrvd` and `brokerd`.

After the broker's first full registration only changes are sent: a batch of topics and an
auto-created `%RETRY%` topic reach the name server without another full one. A name server
restarted from nothing answers the next incremental registration by asking for a full one,
which the broker sends split in parts (splitRegistrationSize=100), and every topic is routable
there again. What it cannot see: the byte sizes of the requests (tests/bench's scale section
measures them); the counts come from the broker's and the name server's log lines.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually_sync
from tests.support.processes import Daemon, ProcessGroup, namesrvd_command
from tidemq.client.admin.api import AdminClient
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import ConsumeResult, PushConsumer
from tidemq.client.errors import TideMQError
from tidemq.client.protocol.models import TopicConfig

FULL = re.compile(r"full registration with name server \S+: (\d+) topics in (\d+) part")
TOPICS = 450
SPLIT_SIZE = 100


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


def full_registrations(broker: Daemon) -> list[tuple[int, int]]:
    return [(int(n), int(parts)) for n, parts in FULL.findall(broker.log_text())]


def routable(namesrv: str, topic: str) -> bool:
    async def ask() -> bool:
        async with AdminClient(namesrv) as admin:
            try:
                await admin.topic_route(topic)
            except TideMQError:  # not there (yet)
                return False
            return True

    return asyncio.run(ask())


def admin_call(namesrv: str, work: str, broker: str, configs: list[TopicConfig]) -> None:
    async def run() -> None:
        async with AdminClient(namesrv) as admin:
            if work == "list":
                await admin.create_topic_list(broker, configs)
            else:
                await admin.create_topic(broker, configs[0])

    asyncio.run(run())


def test_only_changes_are_sent_and_a_restarted_name_server_gets_everything(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    namesrv = processes.namesrvd(name="namesrvd")
    broker = processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        f"splitRegistrationSize={SPLIT_SIZE}",
        "registerNameServerPeriod=10000",
        name="brokerd",
    )
    eventually_sync(lambda: len(full_registrations(broker)) == 1, "the first registration", 30)
    system_topics = full_registrations(broker)[0][0]
    names = [f"Scale{i:04d}" for i in range(TOPICS)]
    admin_call(namesrv.address, "list", broker.address, [TopicConfig(n, 2, 2) for n in names])
    # sent in requests of SPLIT_SIZE topics taken from a set: any of them may come last
    eventually_sync(
        lambda: all(routable(namesrv.address, name) for name in (names[0], names[-1])),
        "the batch routable",
        30,
    )

    # A consumer's heartbeat auto-creates its group's %RETRY% topic: one more change, no more.
    config = ClientConfig.create(namesrv.address, heartbeat_broker_interval=1.0)
    consumer = PushConsumer("scale-group", config=config)
    consumer.subscribe(names[0], "*", lambda _msg: ConsumeResult.SUCCESS)
    consumer.start()
    try:
        eventually_sync(
            lambda: routable(namesrv.address, "%RETRY%scale-group"), "the retry topic routable", 30
        )
    finally:
        consumer.shutdown()
    assert full_registrations(broker) == [(system_topics, 1)]

    # The name server comes back empty: the next incremental registration is refused, and
    # the broker sends everything, in parts.
    port = namesrv.port
    namesrv.kill()
    restarted = processes.start(namesrvd_command(port), port=port, name="namesrvd-restarted")
    admin_call(restarted.address, "one", broker.address, [TopicConfig("AfterRestart", 1, 1)])
    eventually_sync(
        lambda: routable(restarted.address, "AfterRestart"), "the new topic routable", 30
    )
    for topic in (names[0], names[-1], "%RETRY%scale-group"):
        assert routable(restarted.address, topic), topic
    total = system_topics + TOPICS + 2  # the batch, %RETRY%scale-group, AfterRestart
    fulls = full_registrations(broker)
    assert len(fulls) == 2 and fulls[1][0] in (total - 1, total), fulls
    assert fulls[1][1] == -(-fulls[1][0] // SPLIT_SIZE)  # parts of at most SPLIT_SIZE
    assert "asking for a full one" in restarted.log_text()
