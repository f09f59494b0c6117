"""HA attaches to the store through one call, `MessageStore.attach_replication`, and detaches.

The store is given fakes of what HA provides (ha.master.HAService.replication): the wake-up for
the connections' writers, the SYNC_MASTER waiter and the haReadReplicatedOnly dispatch cap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.stores import StoreFactory
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole, FlushDiskType
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore
from tidemq.store.replication import Replication


@dataclass
class FakeTransfer:
    """A ReplicationHook and a ReplicatedCap, as ha.GroupTransferService is both."""

    slave_ok: bool = True
    acked: bool = True
    acked_offset: int = 0
    ack_listeners: list[Callable[[int], None]] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)

    def is_slave_ok(self, master_put_where: int) -> bool:
        self.asked.append(master_put_where)
        return self.slave_ok

    async def wait_for_slave(self, next_offset: int) -> bool:
        return self.acked

    def ack(self, offset: int) -> None:
        self.acked_offset = offset
        for listener in self.ack_listeners:
            listener(offset)


STORES = StoreFactory(message_index_enable=False)


async def open_store(root: Path, role: BrokerRole) -> MessageStore:
    store = STORES.open(root, broker_role=role)
    await store.start()
    return store


@pytest.fixture
async def sync_master(tmp_path: Path) -> AsyncIterator[MessageStore]:
    store = await open_store(tmp_path, BrokerRole.SYNC_MASTER)
    try:
        yield store
    finally:
        await store.stop()


async def put(store: MessageStore, i: int) -> PutStatus:
    return (await store.put_message(MessageToStore("T", 0, b"m%d" % i))).status


async def test_a_sync_master_asks_the_attached_waiter_until_detached(
    sync_master: MessageStore,
) -> None:
    store = sync_master
    transfer = FakeTransfer(slave_ok=False)
    woken: list[None] = []
    store.attach_replication(Replication(lambda: woken.append(None), sync=transfer))
    assert await put(store, 0) is PutStatus.SLAVE_NOT_AVAILABLE
    assert transfer.asked == [store.max_phy_offset]
    assert woken  # the HA writers were told that there are bytes to send
    transfer.slave_ok, transfer.acked = True, False
    assert await put(store, 1) is PutStatus.FLUSH_SLAVE_TIMEOUT
    store.detach_replication()
    woken.clear()
    assert await put(store, 2) is PutStatus.PUT_OK
    assert len(transfer.asked) == 2 and not woken


async def test_only_a_sync_master_waits_for_a_slave(tmp_path: Path) -> None:
    store = await open_store(tmp_path, BrokerRole.ASYNC_MASTER)
    try:
        transfer = FakeTransfer(slave_ok=False)
        store.attach_replication(Replication(lambda: None, sync=transfer))
        assert await put(store, 0) is PutStatus.PUT_OK
        assert transfer.asked == []
    finally:
        await store.stop()


async def test_the_dispatch_cap_holds_dispatch_until_an_ack_moves_it(
    sync_master: MessageStore,
) -> None:
    store = sync_master
    transfer = FakeTransfer()
    store.attach_replication(Replication(lambda: None, sync=transfer, dispatch_cap=transfer))
    assert await put(store, 0) is PutStatus.PUT_OK
    await store.reput.wait_idle()
    assert store.max_offset_in_queue("T", 0) == 0  # nothing acknowledged: nothing readable
    transfer.ack(store.max_phy_offset)  # wakes dispatch
    await eventually(lambda: store.max_offset_in_queue("T", 0) == 1, "dispatch after the ack")
    store.detach_replication()
    assert transfer.ack_listeners == []
    assert await put(store, 1) is PutStatus.PUT_OK
    await eventually(lambda: store.max_offset_in_queue("T", 0) == 2, "dispatch without a cap")


async def test_a_sync_flush_slave_flushes_what_it_replicates(tmp_path: Path) -> None:
    """No put waits on a slave: its group commit must flush the replicated bytes by itself
    (else a power cut of the slave tears pages anywhere in its CommitLog; found by
    tests/fault/powercut.py)."""
    master = await open_store(tmp_path / "master", BrokerRole.ASYNC_MASTER)
    slave = STORES.open(
        tmp_path / "slave", broker_role=BrokerRole.SLAVE, flush_disk_type=FlushDiskType.SYNC_FLUSH
    )
    await slave.start()
    try:
        for i in range(20):
            assert await put(master, i) is PutStatus.PUT_OK
        end = master.commitlog.max_offset
        data = bytes(master.commitlog.segments.segments[0].view[:end])
        slave.append_to_commitlog(0, data)
        await eventually(
            lambda: slave.commitlog.segments.flushed_where >= end, "the slave's flush", 5
        )
    finally:
        await slave.stop()
        await master.stop()
