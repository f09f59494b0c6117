"""A full disk (issue 20 item 3): stores on a small tmpfs, filled by sends and by a filler file.

- At the configured ratio (diskSpaceWarningLevelRatio) writes are refused with
  SERVICE_NOT_AVAILABLE "the disk is full"; reads keep working; once space is freed the store
  writes again, continuing every queue without a hole.
- When the file system fills before the ratio, the append that needs the next CommitLog file
  fails in its middle (after the previous file's end blank, when the new file's blocks are
  reserved): it is refused with CREATE_MAPEDFILE_FAILED, nothing of it is written, reads keep
  working, and after the space is freed writes resume; a restart recovers every stored message.
- A slave whose disk fills while it replicates stops at a whole write, reconnects, and catches
  up byte-identical once space is freed.

Root is needed to mount the tmpfs (CI runs as root); elsewhere these tests skip saying so.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.ha_harness import (
    SIZE,
    TOPIC,
    Harness,
    caught_up,
    commitlog_bytes,
    put_many,
    queue_bodies,
)
from tests.support.messages import message
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.small_fs import NEEDS_ROOT, can_mount, fill, small_filesystem
from tests.support.wire import pull_header, send_header
from tidemq.broker.health import check_health
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.errors import ServiceNotAvailableError
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore, PutMessageResult

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_ROOT)

MiB = 1024 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs; requested before `ha`, so it is unmounted after the stores stopped."""
    with small_filesystem(tmp_path / "disk", 3 * MiB) as path:
        yield path


def health(port: int) -> tuple[int, str]:
    """GET /health on a broker's metrics port: (status, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def put_until_refused(
    store: MessageStore, start: int, limit: int = 5000
) -> tuple[list[PutMessageResult], PutMessageResult]:
    """Put messages until one is refused; the stored ones and the refusal."""
    stored = []
    for i in range(start, start + limit):
        result = await store.put_message(message(i, topic=TOPIC, size=SIZE))
        if result.status is not PutStatus.PUT_OK:
            return stored, result
        stored.append(result)
        await asyncio.sleep(0)  # the clean service's tick may run
    raise AssertionError(f"{limit} messages stored and none refused")


async def all_readable(store: MessageStore, count: int) -> dict[int, bytes]:
    await eventually(lambda: store.reput.behind_bytes == 0, "dispatch")
    bodies = queue_bodies(store)
    assert sorted(bodies) == list(range(count))
    assert all(bodies[i] == message(i, topic=TOPIC, size=SIZE).body for i in range(count))
    return bodies


async def test_writes_are_refused_at_the_ratio_and_resume_once_space_is_freed(
    disk: Path, ha: Harness
) -> None:
    filler = fill(disk, leave=2 * MiB)  # a third used
    store = await ha.store(
        "disk/store",
        disk_space_warning_level_ratio=0.6,
        clean_resource_interval=20,
        clean_file_forcibly_enable=False,
    )

    stored, refused = await put_until_refused(store, 0)
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "the disk is full" in refused.remark
    assert store.disk_full
    assert len(stored) > 100
    await all_readable(store, len(stored))  # reads go on while writes are refused

    filler.unlink()
    await eventually(lambda: not store.disk_full, "the clean service to see the space")
    result = await store.put_message(message(len(stored), topic=TOPIC, size=SIZE))
    assert result.status is PutStatus.PUT_OK
    assert result.append is not None
    assert result.append.queue_offset == len(stored)  # the queue goes on without a hole
    await all_readable(store, len(stored) + 1)


async def test_a_disk_full_before_the_ratio_refuses_the_append_whole(
    disk: Path, ha: Harness
) -> None:
    store = await ha.store("disk/store", disk_space_warning_level_ratio=1.0)
    await put_many(store, 1)
    filler = fill(disk, leave=200 * 1024)  # room for a few CommitLog files and queue files

    stored, refused = await put_until_refused(store, 1)
    count = 1 + len(stored)
    assert refused.status is PutStatus.CREATE_MAPEDFILE_FAILED
    assert "the disk is full" in refused.remark
    end = store.max_phy_offset
    again = await store.put_message(message(count, topic=TOPIC, size=SIZE))
    assert again.status is PutStatus.CREATE_MAPEDFILE_FAILED
    assert store.max_phy_offset == end  # nothing of either refused record was written
    # Issue 30 item 3: the broker's health says so (GET /health answers 503).
    assert any("disk refused" in p for p in check_health(store).problems)
    # Reads go on: what dispatch put in the queues is served (a full disk may keep it from
    # making the next ConsumeQueue file; it retries, and catches up once there is room).
    await eventually(lambda: store.reput.behind_bytes == 0 or store.reput.failing, "dispatch")
    served = queue_bodies(store)
    assert sorted(served) == list(range(len(served)))
    assert all(served[i] == message(i, topic=TOPIC, size=SIZE).body for i in served)

    filler.unlink()
    result = await store.put_message(message(count, topic=TOPIC, size=SIZE))
    assert result.status is PutStatus.PUT_OK
    assert result.append is not None
    assert result.append.queue_offset == count
    await all_readable(store, count + 1)

    # a restart finds every stored record whole
    await ha.stop(store)
    store = await ha.store("disk/store", disk_space_warning_level_ratio=1.0)
    await all_readable(store, count + 1)


async def test_a_slave_whose_disk_fills_catches_up_once_space_is_freed(
    disk: Path, ha: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    master = await ha.store("master")
    service = await ha.service(master)
    slave = await ha.store("disk/slave", BrokerRole.SLAVE)
    client = await ha.client(slave, service.port, ha_reconnect_interval=50)
    await put_many(master, 1)
    await eventually(caught_up(master, slave), "the slave to start")
    filler = fill(disk, leave=300 * 1024)

    await put_many(master, 700, start=1)  # about 640 KiB: more than the slave has room for
    await eventually(
        lambda: any("No space left" in (r.exc_text or r.getMessage()) for r in caplog.records),
        "the slave to run out of space",
    )
    assert slave.max_phy_offset < master.max_phy_offset
    # Issue 30 item 3: an ERROR line (not one per reconnect) and the slave's health say so.
    refusals = [r for r in caplog.records if "the disk refuses the data" in r.getMessage()]
    assert refusals and all(r.levelno == logging.ERROR for r in refusals)
    assert any("disk refused" in p for p in check_health(slave).problems)
    assert commitlog_bytes(slave, 0, slave.max_phy_offset) == commitlog_bytes(
        master, 0, slave.max_phy_offset
    )

    filler.unlink()
    await eventually(caught_up(master, slave), "the slave to catch up", timeout=20)
    assert client.connects >= 2
    # One ERROR line per REPORT_INTERVAL (30 s, longer than this test), not one per reconnect.
    refusals = [r for r in caplog.records if "the disk refuses the data" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]
    assert commitlog_bytes(slave, 0, slave.max_phy_offset) == commitlog_bytes(
        master, 0, master.max_phy_offset
    )
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    assert queue_bodies(slave) == queue_bodies(master)


async def test_a_broker_answers_service_not_available_when_full_and_sends_again_once_freed(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, api: BrokerAPI
) -> None:
    """The same through a real brokerd: SERVICE_NOT_AVAILABLE, a retriable error in our client,
    pulls answered meanwhile, sends accepted again once the filler is deleted."""
    metrics_port = free_port()
    with small_filesystem(tmp_path / "broker-disk", 12 * MiB) as disk:
        broker = processes.brokerd(
            namesrv.address,
            disk / "store",
            f"metricsPort={metrics_port}",
            "mappedFileSizeCommitLog=1048576",
            "maxMessageSize=65536",
            "diskSpaceWarningLevelRatio=0.7",
            "cleanResourceInterval=50",
            "cleanFileForciblyEnable=false",
        )
        filler = fill(disk, leave=5 * MiB)
        body = bytes(1024)
        sent = 0
        refusal: ServiceNotAvailableError | None = None
        while refusal is None and sent < 10_000:
            try:
                result = await api.send(broker.address, send_header("DiskFull", 0), body)
            except ServiceNotAvailableError as exc:
                refusal = exc
            else:
                assert result.queue_offset == sent
                sent += 1
        assert refusal is not None, f"{sent} sends and no refusal"
        assert refusal.retriable
        assert "the disk is full" in str(refusal)
        assert sent > 500
        # Issue 30 item 3: what a probe of the metrics port sees meanwhile.
        status, answer = health(metrics_port)
        assert status == 503 and "disk refused" in answer, answer

        pulled = await api.pull(broker.address, pull_header("DiskFull", 0, sent - 1))
        assert pulled.status is PullStatus.FOUND
        assert [m.queue_offset for m in pulled.messages] == [sent - 1]

        filler.unlink()

        async def accepted() -> bool:
            try:
                await api.send(broker.address, send_header("DiskFull", 0), body)
            except ServiceNotAvailableError:
                return False
            return True

        await eventually(accepted, "the broker to accept sends again")
        assert health(metrics_port) == (200, "serving\n")
        pulled = await api.pull(broker.address, pull_header("DiskFull", 0, sent))
        assert pulled.status is PullStatus.FOUND
        assert pulled.messages[0].queue_offset == sent
        assert broker.stop() == 0
