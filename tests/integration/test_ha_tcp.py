"""HAService and HAClient on their default transport: loopback TCP, in one event loop.

The unit tests run the same services over in-memory streams; this checks what only sockets do:
the master binds a free port, the slave reaches it at "host:port", the master names the slave by
its socket's peer address, and closing either side ends the connection on the other.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.ha_harness import (
    FILE,
    HOST,
    Harness,
    caught_up,
    commitlog_bytes,
    harness,
    put_many,
    queue_bodies,
)
from tests.support.messages import message
from tidemq.ha.codec import encode_ack
from tidemq.ha.master import SlaveState
from tidemq.ha.slave import ClientState
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole


@pytest.fixture
async def tcp(tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness(tmp_path, None) as made:
        yield made


async def test_slave_replicates_over_loopback_tcp(tcp: Harness) -> None:
    master = await tcp.store("master")
    await put_many(master, 100)
    assert master.max_phy_offset > FILE  # more than one file
    service = await tcp.service(master)
    assert service.port > 0  # port 0 asked for a free one; the bound one is kept
    slave = await tcp.store("slave", BrokerRole.SLAVE)
    client = await tcp.client(slave, service.port)

    await eventually(caught_up(master, slave), "the slave to catch up")
    (connection,) = service.connections
    host, _sep, port = connection.address.rpartition(":")
    assert (host, int(port) > 0) == (HOST, True)
    assert connection.state is SlaveState.TRANSFER
    assert client.state is ClientState.TRANSFER
    start = slave.min_phy_offset
    assert commitlog_bytes(slave, start, slave.max_phy_offset) == commitlog_bytes(
        master, start, master.max_phy_offset
    )

    await put_many(master, 5, start=100)
    await eventually(caught_up(master, slave), "the new messages to reach the slave")
    await eventually(lambda: slave.reput.behind_bytes == 0, "the slave's dispatch")
    assert max(queue_bodies(slave)) == 104

    await tcp.stop(client)
    await eventually(lambda: not service.connections, "the master to see the slave go")
    assert client.state is ClientState.SHUTDOWN


def _task_name() -> str | None:
    task = asyncio.current_task()
    return None if task is None else task.get_name()


async def test_a_slaves_ack_releases_sync_master_sends_in_the_receive_callback(
    tcp: Harness,
) -> None:
    """After the first read (the report that came with the connect, read through the stream),
    the slave's acks are read by the transport's own callback, which releases the SYNC_MASTER
    sends they cover: no task (the read service's) is woken for an ack, no loop turn taken."""
    master = await tcp.store("master", BrokerRole.SYNC_MASTER)
    await master.put_message(message(0))
    service = await tcp.service(master, ha_housekeeping_interval=20_000)
    async with tcp.raw_slave(service.port) as (reader, writer):
        writer.write(encode_ack(master.max_phy_offset))
        await eventually(lambda: any(c.reported for c in service.connections), "the report")
        acked_by: list[str | None] = []
        on_ack = service.transfer.on_ack

        def on_ack_noted(offset: int) -> None:
            acked_by.append(_task_name())
            on_ack(offset)

        service.transfer.on_ack = on_ack_noted  # type: ignore[method-assign]
        for i in range(1, 4):
            put = asyncio.create_task(master.put_message(message(i)))
            await eventually(lambda: service.transfer.waiting == 1, f"put {i} to wait")
            await _read_frames_to(reader, master.max_phy_offset)
            writer.write(encode_ack(master.max_phy_offset))
            assert (await put).status is PutStatus.PUT_OK
            assert acked_by == [None] * i, acked_by  # no task: the transport's callback


async def _read_frames_to(reader: asyncio.StreamReader, end: int) -> None:
    """Read transfer frames until one ends at `end`."""
    while True:
        offset, size = struct.unpack(">qi", await reader.readexactly(12))
        await reader.readexactly(size)
        if offset + size == end:
            return


async def test_a_slave_silent_past_housekeeping_is_closed_and_its_sends_time_out(
    tcp: Harness,
) -> None:
    """The read service's task only watches the silence now (acks are read by the callback):
    it still closes a slave that stopped reporting, and the send waiting on it times out."""
    master = await tcp.store("master", BrokerRole.SYNC_MASTER)
    service = await tcp.service(master, ha_housekeeping_interval=600, slave_timeout=300)
    async with tcp.raw_slave(service.port) as (reader, writer):
        writer.write(encode_ack(0))
        await eventually(lambda: any(c.reported for c in service.connections), "the report")
        writer.write(encode_ack(0))  # an ack through the callback, then nothing more
        put = asyncio.create_task(master.put_message(message(1)))
        assert (await put).status is PutStatus.FLUSH_SLAVE_TIMEOUT
        await eventually(
            lambda: not service.connections, "the silent slave to be closed", timeout=10
        )
        while await reader.read(65536):
            pass  # the master closed its end
