"""HA replication under faults, with real processes: namesrvd, a master, a slave.

Every scenario ends with the strongest check there is: the slave's CommitLog is byte-identical
to the master's over the range both hold (so nothing was skipped, nothing duplicated, nothing
shifted), and where it matters, every message is read back from the slave exactly once, at
contiguous queue offsets.

- a. the slave is SIGKILLed at a random point of a large catch-up, restarted on its store, and
  resumes from its own recovered max offset;
- b. the master is SIGKILLed (sends in flight) and restarted on the same store and ports; the
  slave reconnects by itself and later sends replicate;
- c. forged acks on the HA port (above the master's max, below the previous ack, from a
  connection that was never sent the data) close that connection, are logged, and release no
  SYNC_MASTER send;
- d. a diverged slave (it holds bytes its master does not) says so with both offsets, does not
  reconnect in a loop, and with haSlaveAutoTruncate moves its tail aside and resynchronises;
- e. a slave behind the master's retention says so, and with haSlaveAutoResync restarts from
  the master's oldest retained offset;
- f. the replication stream split and coalesced at random by a proxy;
- g. a network partition (a proxy holding every byte) that heals.

The randomness (kill points, proxy chunking) comes from the `seed` fixture, printed by each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.fault_proxy import FaultProxy, rechunk_minimum
from tests.support.ha_processes import (
    FILE_SIZE,
    as_int,
    assert_identical,
    assert_read_once,
    commitlog_range,
    connect_lines,
    connections,
    first_segment,
    master_max,
    read_all,
    send_many,
    slave_max,
    start_master,
    start_slave,
    status,
    wait_caught_up,
    wait_slave_at,
    wait_state,
    wait_transfer,
)
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI, SendStatus

pytestmark = pytest.mark.asyncio

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


@pytest.fixture
def proxies() -> Iterator[list[FaultProxy]]:
    started: list[FaultProxy] = []
    try:
        yield started
    finally:
        for proxy in started:
            proxy.stop()


# --- raw HA connections ----------------------------------------------------------------------


class RawSlave:
    """A hand-made HA client: writes whatever 8-byte reports a test wants."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> RawSlave:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def report(self, offset: int) -> None:
        self.writer.write(struct.pack(">q", offset))
        await self.writer.drain()

    async def next_batch(self, timeout: float = 5.0) -> tuple[int, int]:
        """Skip heartbeats; return (offset, size) of the next frame that carries data."""
        async with asyncio.timeout(timeout):
            while True:
                offset, size = struct.unpack(">qi", await self.reader.readexactly(12))
                if size:
                    await self.reader.readexactly(size)
                    return offset, size

    async def closed_by_master(self, timeout: float = 5.0) -> bool:
        """Read (and drop) until the master closes; False if it stays open for `timeout`."""
        try:
            async with asyncio.timeout(timeout):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except ConnectionError:
            pass
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


# --- a. the slave killed during a catch-up --------------------------------------------------


@pytest.mark.slow
async def test_slave_killed_during_catch_up_resumes_without_hole_or_duplicate(
    processes: ProcessGroup,
    namesrv: Daemon,
    tmp_path: Path,
    api: BrokerAPI,
    proxies: list[FaultProxy],
    seed: int,
) -> None:
    rng = random.Random(seed)
    master, ha_port = start_master(processes, namesrv, tmp_path / "master", role="ASYNC_MASTER")
    # Replication on loopback moves tens of MB in a fraction of a second, so the slave reaches
    # its master through a proxy, partitioned until the test is watching.
    proxy = FaultProxy("127.0.0.1", ha_port, seed=seed).start()
    proxies.append(proxy)
    via_proxy = f"haMasterAddress={proxy.address}"
    # The slave joins first (an empty slave would be sent only the master's last file) ...
    slave = start_slave(processes, namesrv, tmp_path / "slave", via_proxy, name="slave")
    placed = await send_many(api, master, "HAFA", 20)
    await wait_caught_up(api, master, slave)
    slave.stop()
    # ... and is away while ~33 MB in eight 4 MiB files arrive.
    placed |= await send_many(api, master, "HAFA", 2500, start=20, size=lambda i: 12_000 + i % 8000)
    target = await master_max(api, master)
    assert target > 7 * FILE_SIZE

    proxy.partition()
    slave = start_slave(
        processes, namesrv, tmp_path / "slave", via_proxy, port=slave.port, name="slave-2"
    )
    start = await slave_max(api, slave)
    kill_at = start + int((target - start) * rng.uniform(0.05, 0.6))
    # The catch-up on loopback outruns any polling (a busy machine once saw it end between a
    # poll and the kill): the proxy stops it at the byte aimed at, and the slave is killed there.
    proxy.partition_after(kill_at - start)
    seen = start
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = await slave_max(api, slave)
        if now >= kill_at - 64 * 1024 and now == seen:  # everything let through is stored
            break
        seen = now
        await asyncio.sleep(0.1)
    slave.kill()
    proxy.heal()
    print(f"slave killed at about {seen} of {target} (aimed at {kill_at})")
    assert kill_at - 64 * 1024 <= seen < target, "the kill did not land inside the catch-up"

    slave = start_slave(
        processes, namesrv, tmp_path / "slave", via_proxy, port=slave.port, name="slave-3"
    )
    end = await wait_caught_up(api, master, slave)
    assert end == target
    # Each time the slave asked for what its own log ends with; after the kill that is the
    # recovered end: not before the kill point but for a torn record recovery dropped.
    reported = connect_lines(master.log_text())
    assert len(reported) == 3 and reported[:2] == [0, start], (start, reported)
    assert seen - 64 * 1024 <= reported[2] < target, (seen, reported)
    assert_identical(tmp_path / "master", tmp_path / "slave", 0, target)
    await assert_read_once(api, slave, "HAFA", placed)


# --- b. the master killed and restarted -------------------------------------------------------


@pytest.mark.slow
async def test_master_killed_and_restarted_slave_reconnects_and_continues(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI, seed: int
) -> None:
    rng = random.Random(seed)
    master, ha_port = start_master(processes, namesrv, tmp_path / "master")
    slave = start_slave(processes, namesrv, tmp_path / "slave")
    await wait_transfer(api, master)
    placed = await send_many(api, master, "HAFB", 1000)

    # Kill the master while sends are in flight: once a random part of them was answered.
    answered: dict[tuple[int, int], int] = {}
    sender = asyncio.create_task(
        send_many(api, master, "HAFB", 5000, start=1000, expect=None, placed=answered)
    )
    kill_after = int(5000 * rng.uniform(0.05, 0.6))
    await eventually(lambda: len(answered) >= kill_after or sender.done(), timeout=60)
    master.kill()
    placed |= await sender
    assert len(placed) < 6000, "the kill came after every send"
    await wait_state(api, slave, "READY", 5)  # the slave sees the close and retries
    info = await status(api, slave)
    assert info["state"] == "READY", info

    master, _ = start_master(
        processes,
        namesrv,
        tmp_path / "master",
        port=master.port,
        ha_port=ha_port,
        name="master-2",
    )
    await wait_transfer(api, master)
    # The slave asked to continue from its own end, which the restarted master holds.
    restart_max = await master_max(api, master)
    (reported,) = connect_lines(master.log_text())
    assert 0 < reported <= restart_max
    placed_after = await send_many(api, master, "HAFB", 500, start=100_000)
    end = await wait_caught_up(api, master, slave)
    assert_identical(tmp_path / "master", tmp_path / "slave", 0, end)
    info = await status(api, slave)
    assert info["state"] == "TRANSFER" and as_int(info["connects"]) >= 2
    # Every send answered SEND_OK (a slave acknowledged it), before the kill or after, is
    # served by the slave at the queue offset the producer was told.
    found = await read_all(api, slave, "HAFB")
    acknowledged = placed | placed_after
    assert {key: found.get(key) for key in acknowledged} == acknowledged


# --- c. forged acks -------------------------------------------------------------------------


async def test_forged_acks_close_the_connection_and_release_nothing(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    # The raw "slave" is no broker of the group: the HA port is opened to it explicitly.
    master, ha_port = start_master(
        processes,
        namesrv,
        tmp_path / "master",
        "slaveTimeout=1000",
        "haAllowedSlaveAddresses=127.0.0.1",
    )
    first = await api.send(master.address, send_header("HAFC", 0), b"first")
    assert first.status is SendStatus.SLAVE_NOT_AVAILABLE  # no slave yet
    start = await master_max(api, master)

    # A "slave" that reports the master's own end, then acks far beyond it.
    forged = await RawSlave.connect(ha_port)
    try:
        await forged.report(start)
        await wait_transfer(api, master)
        send = asyncio.create_task(
            api.send(master.address, send_header("HAFC", 0), b"waiting", timeout=10)
        )
        # The master ships the new message to its only slave: the send is now waiting for it.
        offset, size = await forged.next_batch()
        assert offset == start
        await forged.report(start + 2**40)
        assert await forged.closed_by_master()
        result = await send
        assert result.status is SendStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        await forged.close()
    assert "is above the master's max offset" in master.log_text()

    # An ack below the connection's previous one closes it too.
    end = await master_max(api, master)
    assert end == start + size
    backwards = await RawSlave.connect(ha_port)
    try:
        await backwards.report(end)
        await backwards.report(end)  # an ack of what it has: fine
        await asyncio.sleep(0.3)
        assert not await backwards.closed_by_master(0.2)
        await backwards.report(end - 1)
        assert await backwards.closed_by_master()
    finally:
        await backwards.close()
    assert "is below its previous report" in master.log_text()

    # None of it released anything: with no slave, a send is refused at once.
    result = await api.send(master.address, send_header("HAFC", 0), b"after")
    assert result.status is SendStatus.SLAVE_NOT_AVAILABLE


async def test_ack_from_a_connection_never_sent_the_data_releases_nothing(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    # The real slave is stopped (so the master waits for it); a forged connection first
    # claims more than the master holds (DIVERGED: it is sent nothing) and then acks exactly
    # the waiting send's end, which is within the master's max and above its own previous
    # report. RocketMQ (and a check on those two bounds alone) would release the send.
    master, ha_port = start_master(
        processes,
        namesrv,
        tmp_path / "master",
        "slaveTimeout=1500",
        "haHousekeepingInterval=20000",
    )
    slave = start_slave(processes, namesrv, tmp_path / "slave")
    assert slave.pid is not None
    await wait_transfer(api, master)
    ok = await api.send(master.address, send_header("HAFC2", 0), b"ok")
    assert ok.status is SendStatus.SEND_OK
    start = await master_max(api, master)
    os.kill(slave.pid, signal.SIGSTOP)
    forged: RawSlave | None = None
    try:
        forged = await RawSlave.connect(ha_port)
        await forged.report(start + 1)

        async def diverged() -> bool:
            return any(c["state"] == "DIVERGED" for c in await connections(api, master))

        await eventually(diverged, "the forged connection to be DIVERGED", 5)
        send = asyncio.create_task(
            api.send(master.address, send_header("HAFC2", 0), b"waiting", timeout=10)
        )

        async def appended() -> bool:
            return await master_max(api, master) > start

        await eventually(appended, "the send to be appended", 5)
        await forged.report(await master_max(api, master))
        assert await forged.closed_by_master()
        result = await send
        assert result.status is SendStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        if forged is not None:
            await forged.close()
        os.kill(slave.pid, signal.SIGCONT)
    assert "above what the master sent it" in master.log_text()
    result = await api.send(master.address, send_header("HAFC2", 0), b"after", timeout=10)
    assert result.status is SendStatus.SEND_OK


# --- d. a diverged slave ----------------------------------------------------------------------


@pytest.mark.slow
async def test_diverged_slave_reports_waits_and_auto_truncates(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, _ = start_master(processes, namesrv, tmp_path / "master", role="ASYNC_MASTER")
    slave = start_slave(processes, namesrv, tmp_path / "slave")
    placed = await send_many(api, master, "HAFD", 300)
    common = await wait_caught_up(api, master, slave)
    slave.stop()
    # The slave's store, run as a master of its own, gets bytes its real master never had.
    rogue = processes.brokerd(
        namesrv.address,
        tmp_path / "slave",
        "brokerRole=ASYNC_MASTER",
        "brokerName=broker-rogue",
        name="rogue",
    )
    await send_many(api, rogue, "HAFD", 40, start=50_000)
    ahead = await master_max(api, rogue)
    rogue.stop()
    tail = commitlog_range(tmp_path / "slave", common, ahead)

    slave = start_slave(
        processes, namesrv, tmp_path / "slave", "haDivergedRetryInterval=30000", name="slave-2"
    )
    await wait_state(api, slave, "DIVERGED")
    info = await status(api, slave)
    assert info["mismatch"] == {
        "state": "DIVERGED",
        "slaveOffset": ahead,
        "masterOffset": common,
    }, info
    assert f"slave CommitLog ends at {ahead}, master sends {common}" in slave.log_text()
    assert re.search(
        rf"is DIVERGED: its CommitLog ends at {ahead}, beyond the master's end "
        rf"{common}",
        master.log_text(),
    )
    # No reconnect loop: one connection in a few seconds (haDivergedRetryInterval 30 s).
    await asyncio.sleep(2.5)
    info = await status(api, slave)
    assert info["connects"] == 1 and info["state"] == "DIVERGED", info
    assert len(connect_lines(master.log_text())) == 2  # the first slave's and this one
    # Nothing was cut without being asked.
    assert not list((tmp_path / "slave" / "commitlog").glob("*.diverged"))
    slave.stop()

    slave = start_slave(
        processes, namesrv, tmp_path / "slave", "haSlaveAutoTruncate=true", name="slave-3"
    )
    # The master must not grow past the slave's end before the slave has reported it: with
    # only offsets in the protocol, a diverged slave whose end the master has since passed
    # cannot be told from one that is behind (a known limit; see ha/master.py).
    await wait_state(api, slave, "TRANSFER")
    placed |= await send_many(api, master, "HAFD", 200, start=300)
    end = await wait_caught_up(api, master, slave)
    aside = list((tmp_path / "slave" / "commitlog").glob("*.diverged"))
    assert len(aside) == 1, aside
    # The side file holds the tail up to its last non-zero byte.
    assert aside[0].read_bytes() == tail.rstrip(b"\0")
    assert_identical(tmp_path / "master", tmp_path / "slave", 0, end)
    await assert_read_once(api, slave, "HAFD", placed)
    # The side file stays beside the segments, and the store still opens with it there.
    slave.stop()
    slave = start_slave(processes, namesrv, tmp_path / "slave", port=slave.port, name="slave-4")
    placed |= await send_many(api, master, "HAFD", 50, start=500)
    end = await wait_caught_up(api, master, slave)
    assert_identical(tmp_path / "master", tmp_path / "slave", 0, end)


# --- e. a slave behind the master's retention ------------------------------------------------


@pytest.mark.slow
async def test_slave_behind_retention_reports_and_auto_resyncs_from_oldest_file(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master_store, slave_store = tmp_path / "master", tmp_path / "slave"
    retention = ("fileReservedTime=0", f"deleteWhen={ALL_HOURS}", "cleanResourceInterval=200")
    master, ha_port = start_master(
        processes, namesrv, master_store, *retention, role="ASYNC_MASTER"
    )
    slave = start_slave(processes, namesrv, slave_store)
    await send_many(api, master, "HAFE", 20)
    behind = await wait_caught_up(api, master, slave)
    slave.stop()
    # Three files' worth while the slave is away: retention deletes all but the last.
    await send_many(api, master, "HAFE", 900, start=20, size=lambda i: 14_000)

    def deleted() -> bool:
        return first_segment(master_store) >= 3 * FILE_SIZE

    await eventually(deleted, "retention to delete the master's old files", 10)
    # A master that keeps its files again, with two of them: oldest retained != last file.
    to_master = await api.remoting.connection(master.address)
    master.stop()
    # The client sees its connection close before the port is reused.
    await asyncio.wait_for(to_master.closed.wait(), 5)
    master, _ = start_master(
        processes,
        namesrv,
        master_store,
        role="ASYNC_MASTER",
        port=master.port,
        ha_port=ha_port,
        name="master-2",
    )
    await send_many(api, master, "HAFE", 300, start=2000, size=lambda i: 14_000)
    oldest = first_segment(master_store)
    end = await master_max(api, master)
    assert oldest < end - end % FILE_SIZE, "the master should hold more than one file"

    slave = start_slave(processes, namesrv, slave_store, name="slave-2")
    await wait_state(api, slave, "BEHIND_RETENTION")
    info = await status(api, slave)
    assert info["mismatch"] == {
        "state": "BEHIND_RETENTION",
        "slaveOffset": behind,
        "masterOffset": oldest,
    }, info
    assert "is BEHIND_RETENTION" in master.log_text()
    await asyncio.sleep(1.5)
    assert (await status(api, slave))["connects"] == 1
    slave.stop()

    slave = start_slave(processes, namesrv, slave_store, "haSlaveAutoResync=true", name="slave-3")
    await wait_slave_at(api, slave, end)
    await wait_state(api, slave, "TRANSFER")
    assert len(list(slave_store.glob("resync-*/commitlog/*"))) == 1  # the old log, kept
    assert first_segment(slave_store) == oldest
    assert_identical(master_store, slave_store, oldest, end)


# --- f. frames split and coalesced ------------------------------------------------------------


@pytest.mark.slow
async def test_replication_through_a_rechunking_proxy_stays_identical(
    processes: ProcessGroup,
    namesrv: Daemon,
    tmp_path: Path,
    api: BrokerAPI,
    proxies: list[FaultProxy],
    seed: int,
) -> None:
    # No idle release: both ends of the HA stream send at least every heartbeat interval, so
    # held bytes wait at most that long for the next read and every planned merge is made. A
    # short interval keeps those waits (SYNC sends wait on the held acks) short.
    heartbeat = "haSendHeartbeatInterval=50"
    master, ha_port = start_master(processes, namesrv, tmp_path / "master", heartbeat)
    proxy = FaultProxy("127.0.0.1", ha_port, seed=seed, max_hold=None).start()
    proxies.append(proxy)
    proxy.rechunk()
    slave = start_slave(
        processes, namesrv, tmp_path / "slave", f"haMasterAddress={proxy.address}", heartbeat
    )
    await wait_transfer(api, master)
    placed = await send_many(api, master, "HAFF", 3000, size=lambda i: 50 + (i * 7919) % 3000)
    end = await wait_caught_up(api, master, slave)
    assert_identical(tmp_path / "master", tmp_path / "slave", 0, end)
    print(f"proxy: {proxy.splits} splits, {proxy.merges} merges")
    # The master delivered at least `end` bytes to the slave, all re-chunked.
    splits, merges = rechunk_minimum(end)
    assert splits > 100 and merges > 10, (end, splits, merges)
    assert proxy.splits >= splits and proxy.merges >= merges, (proxy.splits, proxy.merges)
    # No protocol error anywhere: one connection, kept all along.
    assert (await status(api, slave))["connects"] == 1
    assert "closing connection of slave" not in master.log_text()
    await assert_read_once(api, slave, "HAFF", placed)


# --- g. a partition that heals ----------------------------------------------------------------


@pytest.mark.slow
async def test_partition_times_out_sync_sends_and_heals(
    processes: ProcessGroup,
    namesrv: Daemon,
    tmp_path: Path,
    api: BrokerAPI,
    proxies: list[FaultProxy],
    seed: int,
) -> None:
    master, ha_port = start_master(processes, namesrv, tmp_path / "master", "slaveTimeout=1000")
    proxy = FaultProxy("127.0.0.1", ha_port, seed=seed).start()
    proxies.append(proxy)
    slave = start_slave(processes, namesrv, tmp_path / "slave", f"haMasterAddress={proxy.address}")
    await wait_transfer(api, master)
    await send_many(api, master, "HAFG", 200)

    proxy.partition()
    statuses: list[SendStatus] = []
    deadline = time.monotonic() + 10
    i = 0
    while SendStatus.SLAVE_NOT_AVAILABLE not in statuses and time.monotonic() < deadline:
        result = await api.send(master.address, send_header("HAFG", i % 4), b"p%d" % i, timeout=5)
        statuses.append(result.status)
        i += 1
    # The first wait for an ack times out; once the master's housekeeping (3 s without a
    # report) closes the link there is no slave at all.
    print("during the partition:", [s.value for s in statuses])
    assert statuses[0] is SendStatus.FLUSH_SLAVE_TIMEOUT, statuses
    assert statuses[-1] is SendStatus.SLAVE_NOT_AVAILABLE, statuses
    assert SendStatus.SEND_OK not in statuses
    assert "sent nothing for 3000 ms" in master.log_text()
    await send_many(api, master, "HAFG", 50, start=1000, expect=SendStatus.SLAVE_NOT_AVAILABLE)

    proxy.heal()
    # Held connections the slave gave up on reach the master too, briefly: wait for the live
    # one to deliver what was sent during the partition.
    await wait_caught_up(api, master, slave)
    await send_many(api, master, "HAFG", 200, start=2000)
    end = await wait_caught_up(api, master, slave)
    assert_identical(tmp_path / "master", tmp_path / "slave", 0, end)
    await wait_state(api, slave, "TRANSFER")
