"""In-process tests of the HA services: GroupTransferService, HAService/HAConnection and HAClient.

Real MessageStores on tmp_path with 64 KiB CommitLog files (so files roll) and short intervals;
master, slave and `Relay` (which decodes both directions and can hold the slave's reports back)
talk over an in-memory network, no sockets (the `ha` fixture, tests/support/ha_harness.py).
Waits are conditions; the only fixed sleeps check that something does *not* happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.ha_harness import (
    BATCH,
    FILE,
    SIZE,
    TOPIC,
    Harness,
    caught_up,
    commitlog_bytes,
    copy_commitlog,
    empty_first_file,
    found,
    harness,
    holds,
    put_many,
    queue_bodies,
    read_frames,
    read_to_eof,
    reported,
    resync_callback,
    side_files,
)
from tests.support.memory_streams import MemoryNetwork
from tests.support.messages import message
from tidemq.ha.codec import (
    DEFAULT_MAX_BODY_SIZE,
    encode_ack,
    encode_heartbeat,
    encode_transfer,
    encode_transfer_header,
)
from tidemq.ha.group_transfer import GroupTransferService
from tidemq.ha.master import SlaveState
from tidemq.ha.slave import ClientState
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, encode_properties

# --- helpers ------------------------------------------------------------------------------------


@dataclass
class FakeSlave:
    known_offset: int
    address: str = "10.0.0.1:10912"


# --- 1. GroupTransferService ----------------------------------------------------------------


def test_is_slave_ok_needs_a_connected_slave_within_fallbehind_max() -> None:
    slaves: list[FakeSlave] = []
    transfer = GroupTransferService(lambda: slaves, slave_timeout_ms=100, fallbehind_max=1000)
    assert not transfer.is_slave_ok(10)

    slaves.append(FakeSlave(known_offset=500))
    assert transfer.is_slave_ok(500)
    assert transfer.is_slave_ok(1499)
    assert not transfer.is_slave_ok(1500)  # a gap of exactly haSlaveFallbehindMax is too far

    # The nearest slave counts, and so does what has been acknowledged already.
    slaves.append(FakeSlave(known_offset=2000, address="10.0.0.2:10912"))
    assert transfer.is_slave_ok(2999)
    assert not transfer.is_slave_ok(3000)
    slaves.clear()
    assert not transfer.is_slave_ok(0)


async def test_wait_for_slave_released_by_a_covering_ack() -> None:
    transfer = GroupTransferService(lambda: [], slave_timeout_ms=2000, fallbehind_max=1 << 30)
    waiter = asyncio.create_task(transfer.wait_for_slave(1000))
    await eventually(lambda: transfer.waiting == 1, "the send to wait")
    transfer.on_ack(999)
    assert transfer.waiting == 1
    transfer.on_ack(1000)
    assert transfer.waiting == 0
    assert await waiter is True  # a timeout (2 s) would answer False
    assert transfer.waiting == 0
    # Already covered: no wait at all.
    assert await asyncio.wait_for(transfer.wait_for_slave(600), 0.05) is True


async def test_wait_for_slave_times_out_at_its_deadline_whatever_the_wakeups() -> None:
    """RocketMQ <= 4.6 counted 5 wake-ups of up to 1 s, so acks cut waits short (#1244)."""
    transfer = GroupTransferService(lambda: [], slave_timeout_ms=300, fallbehind_max=1 << 30)

    async def acks_that_do_not_cover() -> None:
        for offset in range(1, 1000):
            transfer.on_ack(offset)
            await asyncio.sleep(0.01)

    pumping = asyncio.create_task(acks_that_do_not_cover())
    try:
        started = time.monotonic()
        ok = await asyncio.wait_for(transfer.wait_for_slave(1_000_000), 30)  # a bound: it ends
        elapsed = time.monotonic() - started
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
    assert ok is False
    assert elapsed >= 0.29, elapsed  # not cut short by the acks
    assert transfer.waiting == 0


async def test_each_waiter_times_out_at_its_own_deadline_with_one_timer() -> None:
    transfer = GroupTransferService(lambda: [], slave_timeout_ms=400, fallbehind_max=1 << 30)
    first = asyncio.ensure_future(transfer.wait_for_slave(100))
    await asyncio.sleep(0.2)
    second = asyncio.ensure_future(transfer.wait_for_slave(200))
    released = asyncio.ensure_future(transfer.wait_for_slave(150))  # out of offset order
    await eventually(lambda: transfer.waiting == 3, "all three to wait")
    transfer.on_ack(150)
    assert await asyncio.wait_for(released, 1) is True
    assert await asyncio.wait_for(first, 2) is True  # covered by the same ack
    assert not second.done()
    started = time.monotonic()
    assert await asyncio.wait_for(second, 2) is False  # its own deadline, not the first's
    assert time.monotonic() - started >= 0.1
    assert transfer.waiting == 0
    transfer.on_ack(200)  # late: nothing left to release
    assert transfer._expiry is None  # no timer left armed with no waiter


async def test_one_ack_releases_every_waiter_it_covers_and_no_other() -> None:
    transfer = GroupTransferService(lambda: [], slave_timeout_ms=5000, fallbehind_max=1 << 30)
    seen: list[int] = []
    transfer.ack_listeners.append(seen.append)
    ends = [300, 100, 200, 400, 250]
    waiters = {end: asyncio.create_task(transfer.wait_for_slave(end)) for end in ends}
    await eventually(lambda: transfer.waiting == len(ends), "all sends to wait")

    transfer.on_ack(250)
    assert transfer.waiting == 2  # released synchronously, by this one ack
    released = [waiters[end] for end in (100, 200, 250)]
    assert await asyncio.wait_for(asyncio.gather(*released), 1) == [True, True, True]
    assert not waiters[300].done()
    assert not waiters[400].done()

    # acked_offset never goes back, and an ack that does not advance it releases nothing.
    transfer.on_ack(120)
    transfer.on_ack(250)
    assert transfer.acked_offset == 250
    assert seen == [250]
    assert transfer.waiting == 2

    transfer.on_ack(400)
    assert list(await asyncio.gather(waiters[300], waiters[400])) == [True, True]
    assert transfer.acked_offset == 400
    assert seen == [250, 400]


async def test_fail_all_answers_every_waiter_at_once() -> None:
    transfer = GroupTransferService(lambda: [], slave_timeout_ms=60_000, fallbehind_max=1 << 30)
    waiters = [asyncio.create_task(transfer.wait_for_slave(end)) for end in (10, 20, 30)]
    await eventually(lambda: transfer.waiting == 3, "all sends to wait")
    transfer.fail_all()
    # At once: their own timeout (60 s) is past this bound.
    assert await asyncio.wait_for(asyncio.gather(*waiters), 30) == [False, False, False]
    assert transfer.waiting == 0
    transfer.on_ack(30)  # nothing left to release
    assert transfer.acked_offset == 30


# --- 2. master + slave in one event loop ----------------------------------------------------


async def test_empty_slave_starts_at_the_start_of_the_masters_last_file(ha: Harness) -> None:
    master = await ha.store("master")
    await put_many(master, 250)
    assert len(master.commitlog.segments) >= 3
    last_file = master.max_phy_offset - master.max_phy_offset % FILE
    assert last_file >= 2 * FILE
    service = await ha.service(master)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    relay = await ha.relay(service.port)
    client = await ha.client(slave, relay.port)

    await eventually(caught_up(master, slave), "the slave to catch up")
    (connection,) = service.connections
    assert connection.slave_request_offset == 0
    assert connection.state is SlaveState.TRANSFER
    assert client.state is ClientState.TRANSFER
    assert relay.reports[0] == 0
    assert relay.frames[0][0] == last_file  # no history for an empty slave (RocketMQ's rule)
    assert slave.min_phy_offset == last_file
    assert slave.max_phy_offset == master.max_phy_offset
    assert commitlog_bytes(slave, last_file, slave.max_phy_offset) == commitlog_bytes(
        master, last_file, master.max_phy_offset
    )

    # The slave's own dispatch built its ConsumeQueue: it serves the last file's messages.
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    on_slave = queue_bodies(slave)
    on_master = queue_bodies(master)
    assert on_slave
    assert min(on_slave) > 0
    assert max(on_slave) == max(on_master)
    assert on_slave == {offset: on_master[offset] for offset in on_slave}

    # New messages follow, also into the slave's queue.
    await put_many(master, 5, start=250)
    await eventually(caught_up(master, slave), "the new messages to reach the slave")
    await eventually(lambda: max(queue_bodies(slave)) == 254, "the slave to dispatch them")


async def test_slave_with_the_masters_prefix_resumes_from_its_max(ha: Harness) -> None:
    master = await ha.store("master")
    await put_many(master, 60)
    copy_commitlog(master, ha.tmp / "slave")
    prefix = master.max_phy_offset
    assert prefix % FILE != 0  # the slave resumes inside a file
    await put_many(master, 200, start=60)
    assert master.max_phy_offset > prefix + 2 * FILE
    service = await ha.service(master)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    assert slave.max_phy_offset == prefix
    relay = await ha.relay(service.port)
    await ha.client(slave, relay.port)

    await eventually(caught_up(master, slave), "the slave to catch up")
    (connection,) = service.connections
    assert connection.slave_request_offset == prefix
    assert relay.reports[0] == prefix
    assert slave.min_phy_offset == 0
    assert commitlog_bytes(slave, 0, slave.max_phy_offset) == commitlog_bytes(
        master, 0, master.max_phy_offset
    )

    # Frames: contiguous from the prefix, at most haTransferBatchSize, never across a file.
    batches = [(offset, size) for offset, size in relay.frames if size]
    assert batches[0][0] == prefix
    for (offset, size), (next_offset, _size) in itertools.pairwise(batches):
        assert next_offset == offset + size
    assert batches[-1][0] + batches[-1][1] == master.max_phy_offset
    assert max(size for _offset, size in batches) == BATCH
    for offset, size in batches:
        assert size <= BATCH
        assert offset // FILE == (offset + size - 1) // FILE, (offset, size)
    # A frame ends exactly where a file ends, and the next one starts the next file.
    ends = {offset + size for offset, size in batches}
    assert {FILE, 2 * FILE} <= ends

    # The slave acknowledged what it appended; its queue was rebuilt from the replicated bytes.
    await eventually(lambda: connection.slave_ack_offset == master.max_phy_offset, "the last ack")
    assert service.transfer.acked_offset == master.max_phy_offset
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    assert queue_bodies(slave) == queue_bodies(master)
    assert len(queue_bodies(slave)) == 260


async def test_heartbeats_keep_an_idle_link_alive_past_housekeeping(ha: Harness) -> None:
    timing: dict[str, Any] = {"ha_send_heartbeat_interval": 100, "ha_housekeeping_interval": 300}
    master = await ha.store("master")
    await put_many(master, 3)
    service = await ha.service(master, **timing)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    relay = await ha.relay(service.port)
    client = await ha.client(slave, relay.port, **timing)
    await eventually(caught_up(master, slave), "the slave to catch up")
    (connection,) = service.connections
    heartbeats, reports = relay.heartbeats(), len(relay.reports)

    await asyncio.sleep(1.0)  # over 3x haHousekeepingInterval without any data

    assert service.connections == {connection}
    assert client.connects == 1
    assert relay.accepted == 1
    assert client.state is ClientState.TRANSFER
    # ~10 each way at 100 ms; a few suffice to prove that both sides keep talking.
    assert relay.heartbeats() - heartbeats >= 5
    assert len(relay.reports) - reports >= 5
    assert all(size == 0 for _offset, size in relay.frames[-5:])
    assert relay.frames[-1][0] == master.max_phy_offset  # a heartbeat carries the next offset


async def test_new_data_wakes_the_write_service_at_once(ha: Harness) -> None:
    # Heartbeats every 5 s: only the store's data listener can explain a quick transfer.
    timing: dict[str, Any] = {
        "ha_send_heartbeat_interval": 5000,
        "ha_housekeeping_interval": 20_000,
    }
    master = await ha.store("master")
    await put_many(master, 1)
    service = await ha.service(master, **timing)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    await ha.client(slave, service.port, **timing)
    await eventually(caught_up(master, slave), "the slave to catch up")

    delays = []
    for i in range(20):
        (append,) = await put_many(master, 1, start=i + 1)
        delays.append(
            await eventually(holds(slave, append.end_offset), "replication", interval=0.001)
        )
    average = sum(delays) / len(delays)
    assert average < 0.05, delays  # RocketMQ's ASYNC_MASTER polls every 100 ms
    assert max(delays) < 1.0, delays


# --- 3. mismatches: DIVERGED and BEHIND_RETENTION --------------------------------------------


async def diverged_pair(ha: Harness) -> tuple[MessageStore, MessageStore, int]:
    """A master and a slave that holds the master's log plus a tail the master never had.

    Returns the stores and the slave's max offset.
    """
    ahead = await ha.store("ahead")
    await put_many(ahead, 100)
    copy_commitlog(ahead, ha.tmp / "master")
    await put_many(ahead, 30, start=100)
    copy_commitlog(ahead, ha.tmp / "slave")
    await ha.stop(ahead)
    master = await ha.store("master")
    slave = await ha.store("slave", BrokerRole.SLAVE)
    assert slave.max_phy_offset > master.max_phy_offset
    assert commitlog_bytes(slave, 0, master.max_phy_offset) == commitlog_bytes(
        master, 0, master.max_phy_offset
    )
    return master, slave, slave.max_phy_offset


async def test_diverged_slave_reports_both_offsets_and_stops_retrying(
    ha: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    master, slave, slave_max = await diverged_pair(ha)
    service = await ha.service(master)
    relay = await ha.relay(service.port)
    client = await ha.client(slave, relay.port, ha_reconnect_interval=20)

    await eventually(
        lambda: client.state is ClientState.DIVERGED, "the slave to see the divergence"
    )
    mismatch = client.last_mismatch
    assert mismatch is not None
    assert (mismatch.state, mismatch.local, mismatch.master) == (
        ClientState.DIVERGED,
        slave_max,
        master.max_phy_offset,
    )
    # The master answered the request above its end at once with a heartbeat at its end...
    assert relay.reports[0] == slave_max
    assert relay.frames[0] == (master.max_phy_offset, 0)
    assert any(
        "DIVERGED" in r.getMessage() and str(master.max_phy_offset) in r.getMessage()
        for r in caplog.records
        if r.name == "tidemq.ha.master"
    )
    # ...released nothing, and the slave waits for an operator: no reconnect loop.
    assert service.transfer.acked_offset == 0
    await asyncio.sleep(0.3)
    assert client.connects == 1
    assert relay.accepted == 1
    assert client.state is ClientState.DIVERGED
    info = client.runtime_info()
    assert info["mismatch"] == {
        "state": "DIVERGED",
        "slaveOffset": slave_max,
        "masterOffset": master.max_phy_offset,
    }
    assert slave.max_phy_offset == slave_max  # nothing was cut without being asked
    assert side_files(slave, "diverged") == []


async def test_diverged_slave_with_auto_truncate_keeps_its_tail_aside_and_resyncs(
    ha: Harness,
) -> None:
    master, slave, slave_max = await diverged_pair(ha)
    master_max = master.max_phy_offset
    tail = commitlog_bytes(slave, master_max, slave_max)
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    assert len(queue_bodies(slave)) == 130
    calls: list[tuple[ClientState, int, int]] = []
    service = await ha.service(master)
    client = await ha.client(
        slave, service.port, resync=resync_callback(slave, calls), ha_slave_auto_truncate=True
    )

    await eventually(
        lambda: client.state is ClientState.TRANSFER and len(service.connections) == 1,
        "the slave to resynchronise",
    )
    assert calls == [(ClientState.DIVERGED, slave_max, master_max)]
    assert slave.max_phy_offset == master_max
    # The tail spans two files: each keeps its part in `<file>.<position>.diverged`.
    kept = bytearray(len(tail))
    for aside in side_files(slave, "diverged"):
        file_name, position, _suffix = aside.name.split(".")
        at = int(file_name) + int(position) - master_max
        data = aside.read_bytes()
        kept[at : at + len(data)] = data
    assert len(side_files(slave, "diverged")) == 2
    assert kept == tail

    await put_many(master, 40, start=1000)
    await eventually(caught_up(master, slave), "the slave to catch up")
    assert client.connects == 2
    assert commitlog_bytes(slave, 0, slave.max_phy_offset) == commitlog_bytes(
        master, 0, master.max_phy_offset
    )
    # The diverged messages are gone from the slave's queue; the master's replaced them.
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    assert queue_bodies(slave) == queue_bodies(master)
    assert len(queue_bodies(slave)) == 140


async def behind_pair(ha: Harness) -> tuple[MessageStore, MessageStore]:
    """A master whose two oldest files were deleted, and a slave that holds only the first."""
    master = await ha.store("master")
    await put_many(master, 250)
    copy_commitlog(master, ha.tmp / "slave", files=1)
    assert len(master.commitlog.segments) >= 4
    assert await master.delete_expired_commitlog(0, True, 2) == 2
    assert master.min_phy_offset == 2 * FILE
    slave = await ha.store("slave", BrokerRole.SLAVE)
    assert slave.max_phy_offset == FILE
    return master, slave


async def test_slave_behind_retention_reports_and_waits(
    ha: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    master, slave = await behind_pair(ha)
    service = await ha.service(master)
    relay = await ha.relay(service.port)
    client = await ha.client(slave, relay.port, ha_reconnect_interval=20)

    await eventually(lambda: client.state is ClientState.BEHIND_RETENTION, "the slave to see it")
    mismatch = client.last_mismatch
    assert mismatch is not None
    assert (mismatch.local, mismatch.master) == (FILE, master.min_phy_offset)
    assert relay.frames[0] == (master.min_phy_offset, 0)
    assert any(
        "BEHIND_RETENTION" in r.getMessage() and str(master.min_phy_offset) in r.getMessage()
        for r in caplog.records
        if r.name == "tidemq.ha.master"
    )
    await asyncio.sleep(0.3)
    assert client.connects == 1
    assert relay.accepted == 1
    assert slave.max_phy_offset == FILE
    assert service.transfer.acked_offset == 0


async def test_slave_behind_retention_with_auto_resync_restarts_at_the_oldest_file(
    ha: Harness,
) -> None:
    master, slave = await behind_pair(ha)
    calls: list[tuple[ClientState, int, int]] = []
    service = await ha.service(master)
    client = await ha.client(
        slave, service.port, resync=resync_callback(slave, calls), ha_slave_auto_resync=True
    )

    await eventually(caught_up(master, slave), "the slave to resynchronise")
    assert calls == [(ClientState.BEHIND_RETENTION, FILE, 2 * FILE)]
    assert client.state is ClientState.TRANSFER
    assert len(list(slave.root.glob("resync-*/commitlog/*"))) == 1  # the old file, moved aside
    # From the master's oldest retained offset (Part C), not only its last file.
    assert slave.min_phy_offset == master.min_phy_offset == 2 * FILE
    assert commitlog_bytes(slave, 2 * FILE, slave.max_phy_offset) == commitlog_bytes(
        master, 2 * FILE, master.max_phy_offset
    )
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    on_slave, on_master = queue_bodies(slave), queue_bodies(master)
    assert on_slave == on_master


async def test_slave_whose_store_cannot_start_at_the_masters_offset_resyncs(ha: Harness) -> None:
    """An empty first file at 0 (a crash before any data) makes the log start at 0.

    The master starts such a slave (it reports 0) at its last file; the store refuses that
    append. The slave says so (BEHIND_RETENTION) and, with haSlaveAutoResync, starts afresh.
    """
    master = await ha.store("master")
    await put_many(master, 250)
    last_file = master.max_phy_offset - master.max_phy_offset % FILE
    empty_first_file(ha.tmp / "slave")
    slave = await ha.store("slave", BrokerRole.SLAVE)
    assert (slave.max_phy_offset, len(slave.commitlog.segments)) == (0, 1)
    calls: list[tuple[ClientState, int, int]] = []
    service = await ha.service(master)
    client = await ha.client(
        slave, service.port, resync=resync_callback(slave, calls), ha_slave_auto_resync=True
    )
    await eventually(caught_up(master, slave), "the slave to resynchronise")
    assert calls == [(ClientState.BEHIND_RETENTION, 0, last_file)]
    assert client.state is ClientState.TRANSFER
    assert slave.min_phy_offset == last_file
    assert commitlog_bytes(slave, last_file, slave.max_phy_offset) == commitlog_bytes(
        master, last_file, master.max_phy_offset
    )


async def test_an_unexpected_error_does_not_end_replication(
    ha: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    master = await ha.store("master")
    await put_many(master, 5)
    service = await ha.service(master)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    append = slave.append_to_commitlog
    failures = [RuntimeError("injected")]

    def failing_once(offset: int, data: bytes | memoryview) -> None:
        if failures:
            raise failures.pop()
        append(offset, data)

    slave.append_to_commitlog = failing_once  # type: ignore[method-assign]
    client = await ha.client(slave, service.port)
    await eventually(caught_up(master, slave), "the slave to reconnect and catch up")
    assert client.connects == 2
    assert client.state is ClientState.TRANSFER
    assert any(
        "injected" in (r.exc_text or "") for r in caplog.records if r.name == "tidemq.ha.slave"
    )


async def test_slave_store_reopens_after_a_diverged_truncation(ha: Harness) -> None:
    master, slave, _slave_max = await diverged_pair(ha)
    service = await ha.service(master)
    client = await ha.client(
        slave, service.port, resync=resync_callback(slave, []), ha_slave_auto_truncate=True
    )
    await eventually(caught_up(master, slave), "the slave to resynchronise")
    await eventually(lambda: client.state is ClientState.TRANSFER, "the transfer")
    await ha.stop(client)
    await ha.stop(slave)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    assert slave.max_phy_offset == master.max_phy_offset


class ScriptedMaster:
    """An HA master that plays a script: `plan(session, report)` gives the frames its
    `session`-th connection sends after the slave's first report, then heartbeats at `idle_at`
    every 50 ms until the slave leaves. `reports` holds each session's first report."""

    def __init__(self, plan: Callable[[int, int], list[bytes]], idle_at: int) -> None:
        self.plan = plan
        self.idle_at = idle_at
        self.reports: list[int] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            report = int.from_bytes(await reader.readexactly(8), "big", signed=True)
            self.reports.append(report)
            writer.writelines(self.plan(len(self.reports) - 1, report))
            while not reader.at_eof():
                writer.write(encode_heartbeat(self.idle_at))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await reader.read(4096)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def transfer(offset: int, body: bytes) -> bytes:
    return b"".join(encode_transfer(offset, body))


@pytest.mark.parametrize("jump", [5000, -2000], ids=["ahead", "back"])
async def test_a_jump_in_the_middle_of_the_stream_reconnects_after_the_reconnect_interval(
    ha: Harness, caplog: pytest.LogCaptureFixture, jump: int
) -> None:
    """Issue 20 item 5: a header at a wrong offset after frames that continued the log is a
    protocol error, not BEHIND_RETENTION or DIVERGED: the slave reconnects after
    haReconnectInterval (not haDivergedRetryInterval, here a minute) and reports its true end."""
    source = await ha.store("source")
    appends = await put_many(source, 30)
    end = source.max_phy_offset
    data = commitlog_bytes(source, 0, end)
    cut = appends[12].end_offset  # a record boundary: the slave's dispatch completes

    def plan(session: int, report: int) -> list[bytes]:
        if session == 0:
            return [
                transfer(0, data[:cut]),
                transfer(cut + jump, data[cut + jump : cut + jump + 100]),
            ]
        return [transfer(report, data[report:])]

    master = ScriptedMaster(plan, end)
    _listening, port = await ha.listen(master.serve, "127.0.0.1", 0)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    client = await ha.client(
        slave, port, ha_reconnect_interval=50, ha_diverged_retry_interval=60_000
    )

    await eventually(lambda: slave.max_phy_offset == end, "the slave to reconnect and catch up")
    assert master.reports == [0, cut]
    assert client.connects == 2
    assert client.state is ClientState.TRANSFER
    assert client.last_mismatch is None
    assert commitlog_bytes(slave, 0, end) == data
    assert any(
        f"master jumped from {cut} to {cut + jump} in the middle of the stream" in r.getMessage()
        for r in caplog.records
        if r.name == "tidemq.ha.slave"
    )


TOO_LARGE = DEFAULT_MAX_BODY_SIZE + 1


@pytest.mark.parametrize("network", ["memory", "tcp"])
async def test_a_bad_frame_header_ends_the_session_with_a_log_line_and_the_slave_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, network: str
) -> None:
    """A header the slave refuses (a body above its 4 MiB read bound) closes the connection
    with one log line; the frames before it are appended, or dropped with the read that carried
    the bad header, and the next session resumes from the slave's end either way. Over
    loopback TCP the slave reads into its buffer (a BufferedProtocol), in memory through the
    StreamReader."""
    caplog.set_level(logging.INFO)
    async with harness(tmp_path, MemoryNetwork() if network == "memory" else None) as ha:
        source = await ha.store("source")
        appends = await put_many(source, 30)
        end = source.max_phy_offset
        data = commitlog_bytes(source, 0, end)
        cut = appends[12].end_offset

        def plan(session: int, report: int) -> list[bytes]:
            if session == 0:
                return [transfer(0, data[:cut]), encode_transfer_header(cut, TOO_LARGE)]
            return [transfer(report, data[report:])]

        master = ScriptedMaster(plan, end)
        finished = 0

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal finished
            try:
                await master.serve(reader, writer)
            finally:
                finished += 1

        listening, port = await ha.listen(serve, "127.0.0.1", 0)
        try:
            slave = await ha.store("slave", BrokerRole.SLAVE)
            client = await ha.client(slave, port, ha_reconnect_interval=50)
            await eventually(
                lambda: slave.max_phy_offset == end, "the slave to resume and catch up"
            )
            assert master.reports in ([0, 0], [0, cut])
            assert client.connects == 2
            assert commitlog_bytes(slave, 0, end) == data
            await ha.stop(client)
            await eventually(lambda: finished == 2, "the master's sessions to end")
        finally:
            listening.close()
            await listening.wait_closed()
        ended = [
            r.getMessage()
            for r in caplog.records
            if r.name == "tidemq.ha.slave" and "ended" in r.getMessage()
        ]
        assert len(ended) == 1, ended
        assert f"bad frame header: body size {TOO_LARGE} at offset {cut} exceeds" in ended[0]


async def test_a_first_frame_ahead_of_a_later_report_is_behind_retention(ha: Harness) -> None:
    """BEHIND_RETENTION is the answer to a report: the first frame of a session, ahead of it."""
    source = await ha.store("source")
    appends = await put_many(source, 30)
    end = source.max_phy_offset
    data = commitlog_bytes(source, 0, end)
    cut = appends[12].end_offset  # a record boundary: the slave's dispatch completes

    def plan(session: int, report: int) -> list[bytes]:
        if session == 0:
            return [transfer(0, data[:cut])]
        return [transfer(report + 5000, data[report + 5000 :])]

    master = ScriptedMaster(plan, cut)
    _listening, port = await ha.listen(master.serve, "127.0.0.1", 0)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    client = await ha.client(slave, port, ha_reconnect_interval=50)
    await eventually(lambda: slave.max_phy_offset == cut, "the first session")
    master.idle_at = cut + 5000  # a heartbeat past the slave's end ends the first session
    await eventually(lambda: client.state is ClientState.BEHIND_RETENTION, "the mismatch")
    mismatch = client.last_mismatch
    assert mismatch is not None
    assert (mismatch.state, mismatch.local, mismatch.master) == (
        ClientState.BEHIND_RETENTION,
        cut,
        cut + 5000,
    )
    assert master.reports == [0, cut]
    assert slave.max_phy_offset == cut


# --- 4. SYNC_MASTER through the store -------------------------------------------------------


async def test_sync_master_put_statuses(ha: Harness) -> None:
    master = await ha.store("master", BrokerRole.SYNC_MASTER)
    service = await ha.service(master, slave_timeout=300, ha_housekeeping_interval=5000)

    result = await master.put_message(message(0, topic=TOPIC, size=SIZE))
    assert result.status is PutStatus.SLAVE_NOT_AVAILABLE  # no slave: at once...
    assert result.append is not None  # ...and stored all the same
    assert master.max_phy_offset == result.append.end_offset

    slave = await ha.store("slave", BrokerRole.SLAVE)
    relay = await ha.relay(service.port)
    client = await ha.client(slave, relay.port)
    await eventually(reported(service), "the slave to connect")

    result = await master.put_message(message(1, topic=TOPIC, size=SIZE))
    assert result.status is PutStatus.PUT_OK
    assert result.append is not None
    assert slave.max_phy_offset >= result.append.end_offset
    assert service.transfer.acked_offset >= result.append.end_offset

    # Connected but no longer acknowledging: the send waits slaveTimeout, then times out.
    relay.hold_reports()
    started = time.monotonic()
    result = await master.put_message(message(2, topic=TOPIC, size=SIZE))
    elapsed = time.monotonic() - started
    assert result.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert result.append is not None
    assert elapsed >= 0.29, elapsed  # waited its slaveTimeout
    end = result.append.end_offset
    await eventually(lambda: slave.max_phy_offset >= end, "the slave to receive it anyway")
    assert service.transfer.acked_offset < end

    relay.release_reports()
    await eventually(lambda: service.transfer.acked_offset >= end, "the held acks to arrive")
    result = await master.put_message(message(3, topic=TOPIC, size=SIZE))
    assert result.status is PutStatus.PUT_OK

    await ha.stop(client)
    await eventually(lambda: not service.connections, "the master to see the slave go")
    result = await master.put_message(message(4, topic=TOPIC, size=SIZE))
    assert result.status is PutStatus.SLAVE_NOT_AVAILABLE

    # A send that does not wait for its store (WAIT=false) is not held by replication.
    result = await master.put_message(
        MessageToStore(TOPIC, 0, b"no wait", encode_properties({"WAIT": "false"}))
    )
    assert result.status is PutStatus.PUT_OK


async def test_puts_waiting_for_the_slave_beyond_the_capacity_are_refused_busy(
    ha: Harness,
) -> None:
    """Issue 20 item 4: sends waiting for the slave hold their requests; at
    sendThreadPoolQueueCapacity of them one more is refused (SYSTEM_BUSY at the broker) before
    it is stored, and accepted again once the waits end."""
    master = await ha.store("master", BrokerRole.SYNC_MASTER, send_thread_pool_queue_capacity=3)
    service = await ha.service(master, slave_timeout=30_000, ha_housekeeping_interval=60_000)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    relay = await ha.relay(service.port)
    await ha.client(slave, relay.port)
    await eventually(reported(service), "the slave to connect")
    relay.hold_reports()  # connected, no longer acknowledging: sends wait for it

    waiting = [asyncio.create_task(master.put_message(message(i, topic=TOPIC))) for i in range(3)]
    await eventually(lambda: master.puts_waiting == 3, "three sends waiting for the slave")
    end = master.max_phy_offset
    refused = await master.put_message(message(3, topic=TOPIC))
    assert refused.status is PutStatus.TOO_MANY_REQUESTS
    assert "[TOO_MANY_REQUESTS]broker busy" in refused.remark
    assert master.max_phy_offset == end  # refused before it was stored

    relay.release_reports()
    assert [r.status for r in await asyncio.gather(*waiting)] == [PutStatus.PUT_OK] * 3
    assert master.puts_waiting == 0
    accepted = await master.put_message(message(3, topic=TOPIC))
    assert accepted.status is PutStatus.PUT_OK


async def test_read_replicated_only_dispatches_only_acknowledged_messages(ha: Harness) -> None:
    master = await ha.store("master", BrokerRole.SYNC_MASTER)
    service = await ha.service(master, slave_timeout=5000, ha_read_replicated_only=True)
    slave = await ha.store("slave", BrokerRole.SLAVE)
    relay = await ha.relay(service.port)
    await ha.client(slave, relay.port)
    await eventually(reported(service), "the slave to connect")
    relay.hold_reports()

    put = asyncio.create_task(master.put_message(message(0, topic=TOPIC, size=SIZE)))
    await eventually(lambda: master.max_phy_offset > 0, "the put to append")
    end = master.max_phy_offset
    await eventually(lambda: slave.max_phy_offset == end, "the slave to receive it")
    # Dispatch stops at what a slave acknowledged, even when asked directly.
    assert master.reput.dispatch_available(1 << 20) == 0
    assert not found(master, 0)
    assert not put.done()

    relay.release_reports()
    result = await put
    assert result.status is PutStatus.PUT_OK
    await eventually(lambda: found(master, 0), "the master to dispatch the acknowledged message")
    await eventually(lambda: found(slave, 0), "the slave to dispatch it")


# --- 5. reports that must not count as acks --------------------------------------------------


async def test_forged_ack_above_the_masters_max_closes_and_releases_nothing(ha: Harness) -> None:
    master = await ha.store("master", BrokerRole.SYNC_MASTER)
    service = await ha.service(master, slave_timeout=400, ha_housekeeping_interval=5000)
    await master.put_message(message(0, topic=TOPIC, size=SIZE))
    start = master.max_phy_offset
    async with ha.raw_slave(service.port) as (reader, writer):
        writer.write(encode_ack(start))
        await writer.drain()
        await eventually(reported(service), "the first report")

        put = asyncio.create_task(master.put_message(message(1, topic=TOPIC, size=SIZE)))
        # the send waits 400 ms at most: a loaded machine may see it time out already
        await eventually(lambda: service.transfer.waiting == 1 or put.done(), "the send to wait")
        end = master.max_phy_offset
        assert (await read_frames(reader, 1))[0] == (start, end - start)

        writer.write(encode_ack(end + 1_000_000))
        await writer.drain()
        await read_to_eof(reader)  # the master hung up

    await eventually(lambda: not service.connections, "the connection to go")
    assert service.transfer.acked_offset == 0
    assert (await put).status is PutStatus.FLUSH_SLAVE_TIMEOUT


async def test_ack_below_the_previous_report_closes_the_connection(ha: Harness) -> None:
    master = await ha.store("master", BrokerRole.SYNC_MASTER)
    service = await ha.service(master, ha_housekeeping_interval=5000)
    await master.put_message(message(0, topic=TOPIC, size=SIZE))
    end = master.max_phy_offset
    async with ha.raw_slave(service.port) as (reader, writer):
        writer.write(encode_ack(end) + encode_ack(end) + encode_ack(end - 1))
        await writer.drain()
        await read_to_eof(reader)
    assert service.transfer.acked_offset == end  # the valid ack before it counted


async def test_a_first_report_is_where_the_slave_stands_not_an_ack(ha: Harness) -> None:
    master = await ha.store("master", BrokerRole.SYNC_MASTER)
    service = await ha.service(master, slave_timeout=5000)
    await master.put_message(message(0, topic=TOPIC, size=SIZE))
    async with ha.raw_slave(service.port) as (_reader_a, writer_a):
        writer_a.write(encode_ack(master.max_phy_offset))
        await writer_a.drain()
        await eventually(reported(service), "the first slave")
        put = asyncio.create_task(master.put_message(message(1, topic=TOPIC, size=SIZE)))
        await eventually(lambda: service.transfer.waiting == 1, "the send to wait")
        end = master.max_phy_offset

        async with ha.raw_slave(service.port) as (_reader_b, writer_b):
            # A (re)connecting slave claims to hold everything: it counts as usable, no more.
            writer_b.write(encode_ack(end))
            await writer_b.drain()
            await eventually(reported(service, 2), "the second slave")
            assert service.transfer.acked_offset == 0
            assert service.transfer.waiting == 1
            assert not put.done()

            writer_b.write(encode_ack(end))  # the same value again is an ack
            await writer_b.drain()
            assert (await asyncio.wait_for(put, 2)).status is PutStatus.PUT_OK
            assert service.transfer.acked_offset == end


async def test_a_request_above_the_masters_max_gets_a_heartbeat_at_the_max(ha: Harness) -> None:
    master = await ha.store("master", BrokerRole.SYNC_MASTER)
    service = await ha.service(master, ha_housekeeping_interval=5000)
    await master.put_message(message(0, topic=TOPIC, size=SIZE))
    async with ha.raw_slave(service.port) as (reader, writer):
        writer.write(encode_ack(10**12))
        await writer.drain()
        assert await read_frames(reader, 1) == [(master.max_phy_offset, 0)]
        (connection,) = service.connections
        assert connection.state is SlaveState.DIVERGED
        assert service.transfer.acked_offset == 0
        assert not service.transfer.is_slave_ok(master.max_phy_offset)  # not usable
        info = service.runtime_info()
        assert info["inSyncSlaveNums"] == 0
        # Its next report repeats the offset above the max: an invalid ack, closed.
        writer.write(encode_ack(10**12))
        await writer.drain()
        await read_to_eof(reader)
    assert service.transfer.acked_offset == 0
