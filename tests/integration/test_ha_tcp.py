"""HAService and HAClient on their default transport: loopback TCP, in one event loop.

The unit tests run the same services over in-memory streams; this checks what only sockets do:
the master binds a free port, the slave reaches it at "host:port", the master names the slave by
its socket's peer address, and closing either side ends the connection on the other.
"""

from __future__ import annotations

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
from tidemq.ha.master import SlaveState
from tidemq.ha.slave import ClientState
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
