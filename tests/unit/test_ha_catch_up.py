"""A slave's catch-up does not wait for its dispatch (in process, over the in-memory network).

The slave's dispatch is held back by a gate: the slave must still append and acknowledge the
whole backlog, report how far dispatch is behind (runtime info, `dispatchBehindBytes`), and once
the gate opens, dispatch catches up to the same ConsumeQueue the master has. A slave that dies
while dispatch is far behind (its files copied as a SIGKILL leaves them: the page cache) loads,
recovers, dispatches what it had received and goes on replicating.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable

import pytest

from tests.support.conditions import eventually
from tests.support.ha_harness import (
    FILE,
    Harness,
    caught_up,
    commitlog_bytes,
    copy_commitlog,
    put_many,
    queue_bodies,
)
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore

pytestmark = pytest.mark.asyncio


def hold_dispatch(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Keep `store`'s dispatch from doing anything until the returned function is called."""
    gate = asyncio.Event()
    dispatch = store.reput.dispatch_available

    def gated(budget: int) -> int:
        return dispatch(budget) if gate.is_set() else 0

    monkeypatch.setattr(store.reput, "dispatch_available", gated)

    def release() -> None:
        gate.set()
        store.reput.wakeup()

    return release


async def slave_with_prefix(ha: Harness, master: MessageStore, name: str) -> MessageStore:
    """A slave holding the master's CommitLog as it is now (so it is sent all that follows)."""
    copy_commitlog(master, ha.tmp / name)
    return await ha.store(name, BrokerRole.SLAVE)


async def test_slave_acks_the_backlog_while_dispatch_lags_then_dispatch_catches_up(
    ha: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = await ha.store("master")
    await put_many(master, 40)
    slave = await slave_with_prefix(ha, master, "slave")
    prefix = slave.max_phy_offset
    await put_many(master, 300, start=40)
    assert master.max_phy_offset > prefix + 3 * FILE
    release = hold_dispatch(slave, monkeypatch)
    service = await ha.service(master)
    client = await ha.client(slave, service.port)

    await eventually(caught_up(master, slave), "the slave to receive the backlog")
    (connection,) = service.connections
    # Acknowledged without waiting for dispatch: SYNC_MASTER sends are not held by it.
    await eventually(
        lambda: connection.slave_ack_offset == master.max_phy_offset, "the slave's last ack"
    )
    received = master.max_phy_offset - prefix
    assert client.runtime_info()["dispatchBehindBytes"] == received
    assert slave.reput.behind_bytes == received
    assert len(queue_bodies(slave)) == 40  # the prefix only

    release()
    await eventually(
        lambda: client.runtime_info()["dispatchBehindBytes"] == 0, "dispatch to catch up"
    )
    assert queue_bodies(slave) == queue_bodies(master)
    assert len(queue_bodies(slave)) == 340


async def test_slave_dying_with_dispatch_far_behind_recovers_a_consistent_store(
    ha: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = await ha.store("master")
    await put_many(master, 40)
    slave = await slave_with_prefix(ha, master, "slave")
    await put_many(master, 300, start=40)
    release = hold_dispatch(slave, monkeypatch)
    service = await ha.service(master)
    client = await ha.client(slave, service.port)
    await eventually(caught_up(master, slave), "the slave to receive the backlog")
    assert slave.reput.behind_bytes > 3 * FILE

    # What SIGKILL leaves: the files as the page cache holds them now, the abort file included.
    shutil.copytree(slave.root, ha.tmp / "crashed")
    await ha.stop(client)
    release()  # the dead slave's own store is stopped at the end: with dispatch, as usual
    assert (ha.tmp / "crashed" / "abort").exists()

    crashed = await ha.store("crashed", BrokerRole.SLAVE)
    assert crashed.max_phy_offset == master.max_phy_offset
    assert crashed.reput.behind_bytes == 0  # load dispatched what the slave had received
    assert queue_bodies(crashed) == queue_bodies(master)
    assert commitlog_bytes(crashed, 0, crashed.max_phy_offset) == commitlog_bytes(
        master, 0, master.max_phy_offset
    )

    # ... and it goes on replicating from where it stands.
    await ha.client(crashed, service.port)
    await put_many(master, 20, start=340)
    await eventually(caught_up(master, crashed), "the recovered slave to follow")
    await eventually(lambda: crashed.reput.behind_bytes == 0, "its dispatch")
    assert queue_bodies(crashed) == queue_bodies(master)
    assert len(queue_bodies(crashed)) == 360


async def test_dispatch_giving_turns_to_a_busy_receive_path_still_follows(ha: Harness) -> None:
    store = await ha.store("store")
    store.reput.chunk_bytes = 4096
    asked: list[int] = []

    def always_busy() -> bool:
        asked.append(store.reput.reput_from_offset)
        return True

    store.reput.defer = always_busy
    await put_many(store, 100)
    await eventually(lambda: store.reput.behind_bytes == 0, "dispatch, though always deferred")
    assert len(queue_bodies(store)) == 100
    # It let turns go by (at most DEFERRED_TURNS_MAX in a row), and moved on between them.
    assert len(asked) >= 3 and len(set(asked)) > 1
