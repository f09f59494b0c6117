"""Controller mode's confirmed offset in the store: kept in the checkpoint (RocketMQ 5's
confirmPhyOffset at [32:40)), a load serves no further (`serve_confirmed_only`), and
`withdraw_unconfirmed` takes back what dispatch made readable past it (a candidate that lost
its election), until a cap set later lets dispatch through again; a message by id (physical
offset) past it is not found."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from tests.support.stores import StoreFactory
from tidemq.broker.processors.query import QueryProcessor
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore
from tidemq.store.replication import Replication

STORES = StoreFactory(physical_memory_bytes=1 << 50)


def test_the_checkpoint_keeps_the_confirmed_offset_where_rocketmq_5_does(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    checkpoint = StoreCheckpoint(path)
    checkpoint.physic_msg_timestamp = 3
    checkpoint.confirm_phy_offset = 123_456
    checkpoint.flush()
    page = path.read_bytes()
    assert len(page) == 4096
    assert struct.unpack_from(">qqqqq", page) == (3, 0, 0, 0, 123_456)
    assert StoreCheckpoint(path).confirm_phy_offset == 123_456
    # A 4.x checkpoint (three fields, zeros after): nothing confirmed.
    path.write_bytes(struct.pack(">qqq", 1, 2, 3).ljust(4096, b"\0"))
    assert StoreCheckpoint(path).confirm_phy_offset == 0


def test_the_confirmed_offset_noted_before_a_flush(tmp_path: Path) -> None:
    store = STORES.open(tmp_path / "store")
    try:
        checkpoint = store.checkpoint
        checkpoint.confirm_phy_offset = 7
        checkpoint.note_confirmed()
        assert checkpoint.confirm_phy_offset == 7  # not in controller mode: left alone
        store.serve_confirmed_only = True
        store.reput.dispatch_cap = lambda: 5
        checkpoint.note_confirmed()
        assert checkpoint.confirm_phy_offset == 0  # min(the log's end, the cap): empty log
        store.reput.dispatch_cap = None
        store.take_role(BrokerRole.SLAVE)  # a candidate, its cap lifted: the value stays
        checkpoint.confirm_phy_offset = 7
        checkpoint.note_confirmed()
        assert checkpoint.confirm_phy_offset == 7
    finally:
        store.close_files()


async def put_three(store: MessageStore) -> list[int]:
    ends = []
    for number in range(3):
        result = await store.put_message(MessageToStore("T", 0, b"body %d" % number))
        assert result.ok and result.append is not None
        ends.append(result.append.end_offset)
    store.reput.dispatch_available(1 << 62)
    assert store.max_offset_in_queue("T", 0) == 3
    return ends


async def test_a_load_serves_no_further_than_the_confirmed_offset(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = STORES.open(root)
    ends = await put_three(store)
    store.checkpoint.confirm_phy_offset = ends[0]
    store.checkpoint.flush()
    await store.stop()

    again = MessageStore(STORES.config(root, broker_role=BrokerRole.SLAVE))
    again.serve_confirmed_only = True
    again.load()
    try:
        assert again.max_phy_offset == ends[2]  # the CommitLog keeps every record
        assert again.max_offset_in_queue("T", 0) == 1
        assert again.get_message("", "T", 0, 1, 8).message_count == 0
        assert again.reput.limit() == ends[0]
        again.reput.dispatch_cap = lambda: ends[2]  # the master confirms the rest
        again.reput.dispatch_available(1 << 62)
        assert again.max_offset_in_queue("T", 0) == 3
    finally:
        await again.stop()


async def test_withdrawn_units_come_back_when_confirmed(tmp_path: Path) -> None:
    store = STORES.open(tmp_path / "store")
    try:
        ends = await put_three(store)
        store.withdraw_unconfirmed(ends[1])
        assert store.max_offset_in_queue("T", 0) == 2
        assert store.get_message("", "T", 0, 2, 8).message_count == 0
        store.reput.dispatch_available(1 << 62)
        assert store.max_offset_in_queue("T", 0) == 2  # dispatch stops at the cap
        store.withdraw_unconfirmed(ends[2])  # nothing past it: no change
        store.reput.dispatch_available(1 << 62)
        assert store.max_offset_in_queue("T", 0) == 3
        assert store.get_message("", "T", 0, 2, 8).message_count == 1
    finally:
        await store.stop()


async def test_a_message_by_id_past_the_confirmed_offset_is_not_found(tmp_path: Path) -> None:
    store = STORES.open(tmp_path / "store")
    try:
        ends = await put_three(store)
        query = QueryProcessor(store)

        async def view(physical_offset: int) -> RemotingCommand:
            request = RemotingCommand.request(
                RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(physical_offset)}
            )
            return await query.view_by_id(None, request)  # type: ignore[arg-type]

        assert (await view(ends[1])).code == ResponseCode.SUCCESS  # no cap: the whole log
        store.withdraw_unconfirmed(ends[1])  # the third record is past the confirmed offset
        assert store.served_end == ends[1]
        assert (await view(ends[0])).code == ResponseCode.SUCCESS
        refused = await view(ends[1])
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark == f"can not find message by the offset, {ends[1]}"
    finally:
        await store.stop()


async def test_a_candidate_that_lost_goes_back_to_its_confirmed_offset(tmp_path: Path) -> None:
    """Standing for election lifts the cap and dispatches the whole log (the candidate's log
    would be the group's); having lost, the slave withdraws to what was confirmed before
    (Broker.switch_master / resume_replication), until its new master confirms more."""
    store = STORES.open(tmp_path / "store")
    try:
        ends = await put_three(store)
        store.serve_confirmed_only = True
        store.withdraw_unconfirmed(ends[0])  # a slave whose master confirmed the first only
        store.take_role(BrokerRole.SLAVE)
        assert store.max_offset_in_queue("T", 0) == 1
        assert store.cut_incomplete_tail() == ends[2]  # stands: its whole log served
        assert store.max_offset_in_queue("T", 0) == 3
        store.withdraw_unconfirmed(ends[0])  # lost
        assert store.max_offset_in_queue("T", 0) == 1
        assert store.served_end == ends[0]
    finally:
        await store.stop()


class AckedCap:
    """A dispatch cap as ha.GroupTransferService gives it (what the SyncStateSet has)."""

    def __init__(self, acked: int) -> None:
        self.acked_offset = acked
        self.ack_listeners: list[Callable[[int], None]] = []


async def test_a_master_detached_from_replication_keeps_its_confirmed_end(tmp_path: Path) -> None:
    """A stop (or a demotion) detaches HA: the end stays what the set confirmed, so the stop
    neither serves the unconfirmed tail nor notes it as confirmed in the checkpoint."""
    store = STORES.open(tmp_path / "store")
    try:
        ends = await put_three(store)
        store.serve_confirmed_only = True
        store.withdraw_unconfirmed(ends[0])
        store.attach_replication(Replication(lambda: None, dispatch_cap=AckedCap(ends[1])))
        store.reput.dispatch_available(1 << 62)
        assert store.max_offset_in_queue("T", 0) == 2
        store.detach_replication()
        store.reput.dispatch_available(1 << 62)
        assert store.max_offset_in_queue("T", 0) == 2
        store.checkpoint.note_confirmed()
        assert store.checkpoint.confirm_phy_offset == ends[1]
    finally:
        await store.stop()
