"""The master's HA connection against hand-made slaves: which reports may release a send, and a
transfer that retention overtakes.

A real MessageStore (64 KiB CommitLog files) and HAService on 127.0.0.1 port 0; the "slaves" are
raw sockets writing 8-byte reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ha.codec import encode_ack
from ha.config import HAConfig
from ha.master import HAConnection, HAService, SlaveState
from store.commitlog import PutStatus
from store.config import StoreConfig
from store.message_store import MessageStore
from store.record import MessageToStore
from store.settings import from_properties
from tests.support.conditions import eventually

FILE = 64 * 1024
HOST = "127.0.0.1"


def message(i: int, size: int = 900) -> MessageToStore:
    return MessageToStore("T", 0, (f"m{i:06d};" * (size // 8 + 1)).encode()[:size], "")


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[MessageStore]:
    config = from_properties(
        StoreConfig,
        {
            "storePathRootDir": str(tmp_path / "master"),
            "mappedFileSizeCommitLog": str(FILE),
            "maxMessageSize": "8192",
            "mappedFileSizeConsumeQueue": str(20 * 256),
            "maxHashSlotNum": "64",
            "maxIndexNum": "256",
            "brokerRole": "SYNC_MASTER",
        },
    )
    store = MessageStore(config)
    store.load()
    await store.start()
    try:
        yield store
    finally:
        await store.stop()


@pytest.fixture
async def service(master: MessageStore) -> AsyncIterator[HAService]:
    config = HAConfig(
        ha_send_heartbeat_interval=100, ha_housekeeping_interval=5000, slave_timeout=1000
    )
    started = HAService(master, config, HOST, 0)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


@contextlib.asynccontextmanager
async def raw_slave(
    port: int, *, receive_buffer: int = 0
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


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
    master: MessageStore, service: HAService
) -> None:
    await master.put_message(message(0))
    start = master.max_phy_offset
    async with (
        raw_slave(service.port) as (_reader, usable),
        raw_slave(service.port) as (forged_reader, forged),
    ):
        await report(usable, start)  # a slave that will never ack: the put waits for it
        await report(forged, start + 1)  # claims more than the master has: DIVERGED, sent nothing
        await eventually(lambda: len(service.connections) == 2, "both connections")
        await eventually(lambda: all(c.reported for c in service.connections), "both reports")
        assert connection(service, SlaveState.DIVERGED).sent_offset == start + 1

        put = asyncio.create_task(master.put_message(message(1)))
        await eventually(lambda: service.transfer.waiting == 1, "the put to wait")
        # Within the master's max and above its previous report: only what it was sent says no.
        await report(forged, master.max_phy_offset)
        assert await closed(forged_reader)
        assert service.transfer.acked_offset == 0
        assert not put.done()
        assert (await put).status is PutStatus.FLUSH_SLAVE_TIMEOUT


async def test_reports_of_a_diverged_connection_release_nothing(
    master: MessageStore, service: HAService
) -> None:
    await master.put_message(message(0))
    start = master.max_phy_offset
    claim = start + 1500  # past the next message's end, short of the one after
    async with (
        raw_slave(service.port) as (_reader, usable),
        raw_slave(service.port) as (forged_reader, forged),
    ):
        await report(usable, start)
        await report(forged, claim)
        await eventually(lambda: all(c.reported for c in service.connections), "both reports")
        assert len(service.connections) == 2
        first = asyncio.create_task(master.put_message(message(1)))
        await eventually(lambda: service.transfer.waiting == 1, "the first put to wait")
        assert master.max_phy_offset < claim
        second = asyncio.create_task(master.put_message(message(2)))
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
    master: MessageStore, service: HAService, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(2000):  # ~60 files
        await master.put_message(message(i, 2000))
    first_end = master.commitlog.get_record(0, 4)
    assert first_end is not None
    request = struct.unpack(">i", first_end)[0]  # the end of the first record
    async with raw_slave(service.port, receive_buffer=4096) as (reader, writer):
        await report(writer, request)
        await eventually(lambda: any(c.reported for c in service.connections), "the report")
        (conn,) = service.connections
        sock = conn.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # The slave reads nothing: the transfer stalls well before the master's end.
        previous = -1
        while previous != conn.next_transfer_from:
            previous = conn.next_transfer_from
            await asyncio.sleep(0.2)
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
