"""A brokerd stopped after sends to many new topics syncs their ConsumeQueue files with one
syncfs (store/fs_sync.py), and every message is read back after the restart.

Running flush passes are held off (flushIntervalConsumeQueue of 10 minutes), so the stop's last
pass has every new file to sync: its log line names how many one syncfs covered. What it cannot
see: durability across a power cut of ext4 (tests/fault/test_new_queues_power_cut.py cuts a
FUSE disk, where syncfs is not used).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.store.fs_sync import DURABLE_SYNCFS_TYPES, file_system_type, syncfs_available

TOPICS = 100
SYNCED = re.compile(r"(\d+) ConsumeQueue files synced by one syncfs")


def durable_syncfs(folder: Path) -> bool:
    if not syncfs_available():
        return False
    fd = os.open(folder, os.O_RDONLY)
    try:
        return file_system_type(fd) in DURABLE_SYNCFS_TYPES
    finally:
        os.close(fd)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


async def send_to_new_topics(broker: str) -> None:
    api = BrokerAPI()
    try:
        for topic in range(TOPICS):
            await api.send(broker, send_header(f"Fresh{topic}", 0), f"m{topic}".encode())
    finally:
        await api.close()


async def read_back(broker: str) -> list[bytes]:
    api = BrokerAPI()
    try:
        bodies = []
        for topic in range(TOPICS):
            pulled = await api.pull(broker, pull_header(f"Fresh{topic}", 0, 0))
            assert pulled.status is PullStatus.FOUND, topic
            bodies += [message.body for message in pulled.messages]
        return bodies
    finally:
        await api.close()


def test_a_stop_after_many_new_topics_is_one_syncfs(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    if not durable_syncfs(tmp_path):
        pytest.skip("the temporary folder's file system is not one whose syncfs is durable")
    namesrv = processes.namesrvd(name="namesrvd")
    broker = processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        "flushIntervalConsumeQueue=600000",
        name="brokerd",
    )
    asyncio.run(send_to_new_topics(broker.address))
    assert broker.stop(timeout=60) == 0
    counts = [int(n) for n in SYNCED.findall(broker.log_text())]
    assert counts and counts[-1] >= TOPICS, broker.log_tail()
    again = Daemon(broker.args, port=broker.port, log_path=broker.log_path, name="brokerd-again")
    processes.daemons.append(again)
    again.start()
    assert asyncio.run(read_back(again.address)) == [f"m{t}".encode() for t in range(TOPICS)]
