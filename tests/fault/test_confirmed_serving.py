"""A controller-mode slave serves only what its group confirmed, also right after a restart
(issue 32), on real processes: etcd, namesrvd and three brokerd of one group (SYNC_MASTER,
allAckInSyncStateSet).

The slave's confirmed offset is kept in its store's checkpoint (confirmPhyOffset, as RocketMQ
5 keeps it) and its load serves no further: SIGKILLed and restarted while it cannot reach its
master (its HA connection goes through a fault proxy, partitioned), it does not serve a message
it holds that the third member lacks, until the master confirms it. Before, its load dispatched
its whole CommitLog and served that message, which an election of the third member would have
cut.
Reads by message id (VIEW_MESSAGE_BY_ID, a physical offset) end at the confirmed offset too,
before and after the restart (before, a slave answered any record its CommitLog held).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.support.conditions import eventually
from tests.support.etcd import EtcdCluster
from tests.support.failover import start_member, wait_master, wait_sync_state_set
from tests.support.fault_proxy import FaultProxy
from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import as_int, body_of, id_of
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.errors import TideMQError, TopicNotExistError
from tidemq.store.checkpoint import StoreCheckpoint

TOPIC: Final = "ConfirmedTopic"
STAYS: Final = "haMaxTimeSlaveNotCatchup=120000"  # a member that is down stays in the set


@pytest.fixture
def proxies() -> Iterator[list[FaultProxy]]:
    made: list[FaultProxy] = []
    try:
        yield made
    finally:
        for proxy in made:
            proxy.stop()


async def served(api: BrokerAPI, broker: Daemon, offset: int) -> int | None:
    """The body number `broker` serves at queue 0 `offset`, None when it serves none there."""
    try:
        found = await api.pull(broker.address, pull_header(TOPIC, 0, offset))
    except TopicNotExistError:  # a slave before its first copy of the master's topics
        return None
    return id_of(found.messages[0].body) if found.status is PullStatus.FOUND else None


async def serves(api: BrokerAPI, broker: Daemon, offset: int, number: int) -> bool:
    return await served(api, broker, offset) == number


async def not_viewable(api: BrokerAPI, broker: Daemon, physical_offset: int) -> None:
    """VIEW_MESSAGE_BY_ID at `physical_offset` finds nothing on `broker`."""
    with pytest.raises(TideMQError, match="can not find message by the offset"):
        await api.view_message(broker.address, physical_offset)


async def test_a_restarted_slave_serves_no_unconfirmed_tail_before_its_handshake(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
    proxies: list[FaultProxy],
) -> None:
    ha_port = free_port()
    master = start_member(
        processes, namesrv, etcd.endpoints, tmp_path, 1, STAYS, f"haListenPort={ha_port}"
    )
    assert await wait_master(api, [master], 30) is master
    proxy = FaultProxy("127.0.0.1", ha_port, seed=0).start()
    proxies.append(proxy)
    via_proxy = f"haMasterAddress={proxy.address}"
    follower = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, STAYS, via_proxy)
    lacking = start_member(processes, namesrv, etcd.endpoints, tmp_path, 3, STAYS)
    await wait_sync_state_set(api, master, [1, 2, 3])
    first = await api.send(master.address, send_header(TOPIC, 0), body_of(0, 100))
    assert first.status is SendStatus.SEND_OK
    await eventually(lambda: serves(api, follower, 0, 0), "the first message on the follower", 30)
    stored = as_int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])
    lacking.kill()
    pending = asyncio.create_task(
        api.send(master.address, send_header(TOPIC, 0), body_of(1, 100), timeout=60)
    )
    try:

        async def replicated() -> bool:
            info = await ha_status(api, follower.address)
            return as_int(info["maxOffset"]) > stored and as_int(info["dispatchBehindBytes"]) == 0

        await eventually(replicated, "the second message on the follower, dispatch done", 15)
        assert await served(api, follower, 1) is None
        await not_viewable(api, follower, stored)  # by its message id (physical offset)
        assert id_of((await api.view_message(follower.address, 0)).body) == 0

        # SIGKILLed once its checkpoint holds the first message's confirmation (a later kill
        # may keep an older one, which serves less, never more), restarted with its master out
        # of reach: what it holds past the confirmed offset stays unserved; the rest is served.
        checkpoint = tmp_path / "store-2" / "checkpoint"
        await eventually(
            lambda: StoreCheckpoint(checkpoint).confirm_phy_offset == stored,
            "the confirmed offset in the follower's checkpoint",
            15,
        )
        proxy.partition()
        follower.kill()
        follower = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, STAYS, via_proxy)
        info = await ha_status(api, follower.address)
        assert as_int(info["maxOffset"]) > stored  # it holds the second message
        assert info["confirmedOffset"] == stored, info
        assert await served(api, follower, 0) == 0
        assert await served(api, follower, 1) is None, "served a tail the group never confirmed"
        assert await api.get_max_offset(follower.address, TOPIC, 0) == 1
        await not_viewable(api, follower, stored)

        # Reconnected: still unconfirmed while the third member lacks it; served once it has it.
        proxy.heal()
        lacking = start_member(processes, namesrv, etcd.endpoints, tmp_path, 3, STAYS)
        await eventually(
            lambda: serves(api, follower, 1, 1), "the second message served once confirmed", 60
        )
        assert id_of((await api.view_message(follower.address, stored)).body) == 1
    finally:
        with contextlib.suppress(TideMQError):
            await pending


async def test_a_master_stopped_with_an_unconfirmed_tail_keeps_only_the_confirmed_offset(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
) -> None:
    """A master stopped cleanly while its slave (SIGSTOPped) lacks its last message: its
    checkpoint keeps what the SyncStateSet confirmed, not its whole log (its stop detaches HA;
    the end it had stays), so after a restart it would not serve that message as a slave."""
    master = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, STAYS)
    assert await wait_master(api, [master], 30) is master
    slave = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, STAYS)
    await wait_sync_state_set(api, master, [1, 2])
    first = await api.send(master.address, send_header(TOPIC, 0), body_of(0, 100))
    assert first.status is SendStatus.SEND_OK
    stored = as_int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])
    assert slave.pid is not None
    os.kill(slave.pid, signal.SIGSTOP)
    pending = asyncio.create_task(
        api.send(master.address, send_header(TOPIC, 0), body_of(1, 100), timeout=30)
    )
    try:

        async def appended() -> bool:
            info = await ha_status(api, master.address)
            return as_int(info["masterCommitLogMaxOffset"]) > stored

        await eventually(appended, "the second message stored on the master", 15)
        assert await asyncio.to_thread(master.stop, 30) == 0
        kept = StoreCheckpoint(tmp_path / "store-1" / "checkpoint").confirm_phy_offset
        assert kept == stored, f"the checkpoint says {kept} is confirmed, the set has {stored}"
    finally:
        os.kill(slave.pid, signal.SIGCONT)
        with contextlib.suppress(TideMQError):
            await pending
