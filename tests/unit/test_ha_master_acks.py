"""The master's HA connection against hand-made slaves: which reports may release a send, and a
transfer that retention overtakes.

A real MessageStore (64 KiB CommitLog files) and HAService; the "slaves" are in-memory
connections (`ha.raw_slave`) writing 8-byte reports, no sockets.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from tests.support.conditions import eventually
from tests.support.ha_harness import FILE, SIZE, Harness
from tests.support.memory_streams import write_blocked
from tests.support.messages import message
from tidemq.ha.codec import encode_ack
from tidemq.ha.master import HAConnection, HAService, SlaveState
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore


@pytest.fixture
async def master(ha: Harness) -> MessageStore:
    return await ha.store("master", BrokerRole.SYNC_MASTER)


@pytest.fixture
async def service(ha: Harness, master: MessageStore) -> HAService:
    return await ha.service(master, ha_housekeeping_interval=5000)


async def report(writer: asyncio.StreamWriter, offset: int) -> None:
    writer.write(encode_ack(offset))
    await writer.drain()


async def closed(reader: asyncio.StreamReader, timeout: float = 3.0) -> bool:
    """Read until the master hangs up; False if it is still open after `timeout`."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def state_of(connection: HAConnection) -> SlaveState:
    return connection.state  # a call: mypy must not narrow a state that changes under it


def connection(service: HAService, state: SlaveState) -> HAConnection:
    (found,) = [c for c in service.connections if c.state is state]
    return found


async def test_an_ack_above_what_the_connection_was_sent_closes_it(
    ha: Harness, master: MessageStore, service: HAService
) -> None:
    await master.put_message(message(0, size=SIZE))
    start = master.max_phy_offset
    async with (
        ha.raw_slave(service.port) as (_reader, usable),
        ha.raw_slave(service.port) as (forged_reader, forged),
    ):
        await report(usable, start)  # a slave that will never ack: the put waits for it
        await report(forged, start + 1)  # claims more than the master has: DIVERGED, sent nothing
        await eventually(lambda: len(service.connections) == 2, "both connections")
        await eventually(lambda: all(c.reported for c in service.connections), "both reports")
        assert connection(service, SlaveState.DIVERGED).sent_offset == start + 1

        put = asyncio.create_task(master.put_message(message(1, size=SIZE)))
        await eventually(lambda: service.transfer.waiting == 1, "the put to wait")
        # Within the master's max and above its previous report: only what it was sent says no.
        await report(forged, master.max_phy_offset)
        assert await closed(forged_reader)
        assert service.transfer.acked_offset == 0
        assert not put.done()
        assert (await put).status is PutStatus.FLUSH_SLAVE_TIMEOUT


async def test_reports_of_a_diverged_connection_release_nothing(
    ha: Harness, master: MessageStore, service: HAService
) -> None:
    await master.put_message(message(0, size=SIZE))
    start = master.max_phy_offset
    claim = start + 1500  # past the next message's end, short of the one after
    async with (
        ha.raw_slave(service.port) as (_reader, usable),
        ha.raw_slave(service.port) as (forged_reader, forged),
    ):
        await report(usable, start)
        await report(forged, claim)
        await eventually(
            lambda: len(service.connections) == 2 and all(c.reported for c in service.connections),
            "both reports",
        )
        assert len(service.connections) == 2
        first = asyncio.create_task(master.put_message(message(1, size=SIZE)))
        await eventually(lambda: service.transfer.waiting == 1, "the first put to wait")
        assert master.max_phy_offset < claim
        second = asyncio.create_task(master.put_message(message(2, size=SIZE)))
        await eventually(lambda: service.transfer.waiting == 2, "the second put to wait")
        assert master.max_phy_offset > claim
        # Its own request again: within every bound, but a DIVERGED slave vouches for nothing.
        await report(forged, claim)
        assert not await closed(forged_reader, 0.3)
        assert service.transfer.acked_offset == 0
        assert not first.done()
        assert (await first).status is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert (await second).status is PutStatus.FLUSH_SLAVE_TIMEOUT


async def test_retention_overtaking_a_transfer_makes_the_slave_behind_retention(
    ha: Harness, master: MessageStore, service: HAService, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(2000):  # ~60 files
        await master.put_message(message(i, size=2000))
    first_end = master.commitlog.get_record(0, 4)
    assert first_end is not None
    request = struct.unpack(">i", first_end)[0]  # the end of the first record
    async with ha.raw_slave(service.port, limit=2048) as (reader, writer):
        await report(writer, request)
        await eventually(lambda: any(c.reported for c in service.connections), "the report")
        (conn,) = service.connections
        # The slave reads nothing: the transfer stalls well before the master's end.
        await eventually(lambda: write_blocked(conn.writer), "the transfer to stall")
        assert state_of(conn) is SlaveState.TRANSFER
        assert conn.next_transfer_from < master.max_phy_offset - 2 * FILE
        await master.delete_expired_commitlog(0, True, 1000)
        oldest = master.min_phy_offset
        assert conn.next_transfer_from < oldest

        # The slave reads on: what was sent, then a heartbeat at the master's oldest offset.
        async with asyncio.timeout(10):
            while True:
                offset, size = struct.unpack(">qi", await reader.readexactly(12))
                if size:
                    await reader.readexactly(size)
                elif offset == oldest:
                    break
        assert state_of(conn) is SlaveState.BEHIND_RETENTION
        assert service.runtime_info()["inSyncSlaveNums"] == 0
    assert "retention deleted it" in caplog.text
