"""Controller mode's pure rules: the election's ranking (broker/failover.py), the name server's
highest-epoch registration (route_info), the allAckInSyncStateSet waiter and dispatch cap
(ha/group_transfer.py), and the store's write fence at the lease deadline."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.messages import message
from tidemq.broker.failover import Candidate, best_candidate
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.ha.group_transfer import AllInSyncTransfer, InSyncCap
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole, StoreConfig
from tidemq.store.message_store import MessageStore


def test_the_highest_epoch_then_offset_then_priority_wins() -> None:
    a = Candidate(1, epoch=3, max_offset=100, priority=5)
    b = Candidate(2, epoch=3, max_offset=200, priority=9)
    c = Candidate(3, epoch=4, max_offset=50, priority=9)
    d = Candidate(4, epoch=4, max_offset=50, priority=1)
    assert best_candidate([a, b, c, d], None) == d
    assert best_candidate([a, b, c], None) == c  # a newer epoch beats a longer log
    assert best_candidate([a, b], None) == b
    assert best_candidate([a, b, c, d], {1, 2}) == b  # only the SyncStateSet
    assert best_candidate([a, b], {7}) is None  # nobody in sync: no election


def register(routes: RouteInfoManager, addr: str, broker_id: int, epoch: int | None) -> object:
    return routes.register_broker(
        cluster_name="c",
        broker_addr=addr,
        broker_name="broker-a",
        broker_id=broker_id,
        ha_server_addr=addr + "1",
        topic_config_wrapper=None,
        filter_server_list=None,
        connection=None,
        master_epoch=epoch,
    )


def test_the_name_server_keeps_the_master_of_the_highest_epoch() -> None:
    routes = RouteInfoManager(clock=lambda: 0)
    register(routes, "h:1", 0, 1)
    register(routes, "h:2", 2, None)
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: "h:1", 2: "h:2"}
    register(routes, "h:2", 0, 2)  # the slave elected: it replaces the master, not a second id
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: "h:2"}
    stale = register(routes, "h:1", 0, 1)  # the deposed master registers again
    assert stale.stale_against == 2
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: "h:2"}
    # RocketMQ 4.x masters carry no epoch and are never compared
    register(routes, "h:9", 0, None)
    assert routes.broker_addr_table["broker-a"].broker_addrs[0] == "h:9"


@dataclass
class Slave:
    broker_id: int | None
    slave_ack_offset: int
    address: str = "s"

    @property
    def known_offset(self) -> int:
        return self.slave_ack_offset


async def test_all_ack_waits_for_every_member_and_the_union_while_changing() -> None:
    slaves = [Slave(2, 0), Slave(3, 0)]
    transfer = AllInSyncTransfer(lambda: slaves, slave_timeout_ms=5000, fallbehind_max=1 << 30)
    assert await transfer.wait_for_slave(100)  # no slave required: the master alone
    transfer.require(frozenset({2, 3}))
    waiting = asyncio.ensure_future(transfer.wait_for_slave(100))
    slaves[0].slave_ack_offset = 100
    transfer.on_ack(100)
    await asyncio.sleep(0)
    assert not waiting.done()  # broker 3 has not got it
    slaves[1].slave_ack_offset = 100
    transfer.on_ack(100)
    assert await waiting
    transfer.require(frozenset({2, 3, 4}))  # 4 not connected: sends wait
    waiting = asyncio.ensure_future(transfer.wait_for_slave(200))
    await asyncio.sleep(0)
    assert not waiting.done()
    transfer.require(frozenset())  # the set became the master alone
    assert await waiting


def test_what_a_controller_mode_master_makes_readable_is_what_its_set_has() -> None:
    slaves = [Slave(2, 0), Slave(3, 0)]
    transfer = AllInSyncTransfer(lambda: slaves, slave_timeout_ms=5000, fallbehind_max=1 << 30)
    stored = [500]
    cap = InSyncCap(transfer, lambda: stored[0])
    woken: list[int] = []
    cap.ack_listeners.append(woken.append)
    assert cap.acked_offset == 500  # the master alone: all it stored
    transfer.require(frozenset({2, 3}))
    assert cap.acked_offset == 0
    slaves[0].slave_ack_offset = 300
    transfer.on_ack(300)
    assert cap.acked_offset == 0  # broker 3 has nothing yet
    slaves[1].slave_ack_offset = 200
    transfer.on_ack(200)
    assert cap.acked_offset == 200  # the slowest of the set
    woken.clear()
    transfer.require(frozenset())  # the set shrank to the master: dispatch is woken
    assert cap.acked_offset == 500 and woken


async def test_a_master_past_its_lease_deadline_refuses_and_says_why(tmp_path: Path) -> None:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        broker_role=BrokerRole.SYNC_MASTER,
        mapped_file_size_commit_log=1 << 20,
        message_index_worker_enable=False,
    )
    store = MessageStore(config)
    store.load()
    try:
        store.lease_deadline = time.monotonic() + 60
        assert (await store.put_message(message(1))).status is PutStatus.PUT_OK
        store.lease_deadline = time.monotonic() - 0.001
        refused = await store.put_message(message(1))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "etcd lease could not be renewed" in refused.remark
        store.lease_deadline = None
        store.in_sync_replicas, store.min_in_sync_replicas = 1, 2
        short = await store.put_message(message(2))
        assert short.status is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        assert "minInSyncReplicas is 2" in short.remark
    finally:
        await store.stop()


def test_the_divergence_point_is_the_first_epoch_of_the_master_after_the_last_shared() -> None:
    from tidemq.broker.failover import divergence_point
    from tidemq.ha.epoch_file import EpochEntry as E

    # a deposed master (epoch 1 from 0) and the new master's history (epoch 2 from 500)
    assert divergence_point([E(1, 0)], [E(1, 0), E(2, 500)]) == 500
    # a slave that followed epochs 1 and 2, the master now at 4 after an epoch 3 it never saw
    assert divergence_point([E(1, 0), E(2, 500)], [E(1, 0), E(2, 500), E(3, 900), E(4, 950)]) == 900
    # the same history: it can only be behind
    assert divergence_point([E(1, 0), E(2, 500)], [E(1, 0), E(2, 500)]) is None
    # a fresh broker knows no epoch: nothing to cut
    assert divergence_point([], [E(3, 700)]) is None
    # nothing shared: nothing of this log is known good past the master's first epoch's start
    assert divergence_point([E(5, 0)], [E(6, 300)]) == 300
