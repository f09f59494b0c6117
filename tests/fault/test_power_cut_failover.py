"""A double power cut in controller mode (issue 32): the master and one slave of a three-member
group lose power at once, each store on its own lossy file system (tests/support/lazyfs.py),
while the third member, a slave of the SyncStateSet, could be elected.

What the group promises: a send is acknowledged once every member of the SyncStateSet has
appended it (allAckInSyncStateSet) and the master has synced it (SYNC_FLUSH); a slave
acknowledges what it appended, not what it synced (as RocketMQ's). So the cut may take
acknowledged messages from both cut stores (the slave's, unsynced), but not from the third
member's page cache: it is elected, and every acknowledged message must be on it. Then the cut
members boot again (a new boot, a fresh mount), rejoin as its slaves (their logs cut where
they leave the new master's epochs, as after any election) and must come back byte-identical.

One history (tests/support/history.py) judges it all: raw sends to the first master (16 in
flight, the cut with sends in flight), sends to the new master, both epochs, and final reads of
what the new master serves and then of what each rejoined slave serves (a slave serves only
its master's confirmed offset: once caught up, all of it): lost, position, duplicate, order,
epoch. A seeded choice of cut (`all` or `torn`); rerun with TIDEMQ_FAULT_SEED.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from tests.fault.powercut import Node, power_cut
from tests.support.conditions import eventually
from tests.support.etcd import EtcdCluster
from tests.support.failover import controller, member_overrides, wait_master, wait_sync_state_set
from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import as_int, body_of, commitlog_range
from tests.support.history import Recorder, check, record_read, record_send
from tests.support.lazy_mounts import NEEDS_FUSE, LazyMount, can_mount
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)

TOPIC: Final = "PowerCutFailover"
BROKER_NAME: Final = "broker-a"  # the members' name (tests/support/failover.py)
QUEUES: Final = 4
IN_FLIGHT: Final = 16
# Every member flushes before it acknowledges as master (a stalled flush fails the send).
MEMBER: Final = ("flushDiskType=SYNC_FLUSH", "syncFlushTimeout=5000")


class Sends:
    """Numbered raw sends to `address`, IN_FLIGHT at a time, each recorded, until stopped."""

    def __init__(self, api: BrokerAPI, address: str, recorder: Recorder, first: int) -> None:
        self.api, self.address, self.recorder = api, address, recorder
        self.answered = self.in_flight = 0
        self.stopped = False
        self._numbers = iter(range(first, 10**8))

    async def worker(self) -> None:
        while not self.stopped:
            number = next(self._numbers)
            header = send_header(TOPIC, number % QUEUES)
            self.in_flight += 1
            try:
                await record_send(
                    self.recorder, self.api, self.address, header,
                    body_of(number, 100 + number % 900), broker_name=BROKER_NAME, timeout=10,
                )  # fmt: skip
            except Exception:  # recorded (unknown): the broker died or the answer was lost
                pass
            finally:
                self.in_flight -= 1
                self.answered += 1


@pytest.fixture
async def members(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster
) -> AsyncIterator[list[Node]]:
    mounts = [LazyMount(tmp_path, f"member-{i}") for i in (1, 2, 3)]
    nodes = [
        Node(processes, namesrv, mount, (*member_overrides(etcd.endpoints, i), *MEMBER))
        for i, mount in zip((1, 2, 3), mounts, strict=True)
    ]
    try:
        yield nodes
    finally:
        processes.stop_all()
        for mount in mounts:
            mount.stop()


def daemon(node: Node) -> Daemon:
    assert node.broker is not None
    return node.broker


async def test_master_and_a_slave_cut_at_once_the_third_member_is_elected_and_loses_nothing(
    members: list[Node], api: BrokerAPI, recorder: Recorder, seed: int
) -> None:
    rng = random.Random(seed)
    first, cut_slave, third = members
    first.boot()
    assert await wait_master(api, [daemon(first)], 30) is daemon(first)
    elected = as_int((await controller(api, daemon(first)))["electedAtMillis"])
    recorder.epoch(first.address, 1, elected / 1000)
    cut_slave.boot()
    third.boot()
    await wait_sync_state_set(api, daemon(first), [1, 2, 3])

    sends = Sends(api, first.address, recorder, 0)
    workers = [asyncio.create_task(sends.worker()) for _ in range(IN_FLIGHT)]
    wait_for = rng.randint(100, 600)
    mode = rng.choice(["all", "torn"])
    try:
        await eventually(lambda: sends.answered >= wait_for, f"{wait_for} answers", 60)
        in_flight = sends.in_flight  # the cut follows with no await
        for node in (first, cut_slave):  # both brokers at once, then the rest of each store's
            daemon(node).kill()
        summaries = [
            power_cut(node.mount, mode, rng.randrange(2**31)) for node in (first, cut_slave)
        ]
    finally:
        sends.stopped = True
        await asyncio.gather(*workers)
    assert in_flight > 0

    new = await wait_master(api, [daemon(third)], 30)
    assert new is daemon(third)
    info = await controller(api, new)
    assert info["epoch"] == 2, info
    recorder.epoch(third.address, 2, as_int(info["electedAtMillis"]) / 1000)
    after = Sends(api, third.address, recorder, 10**7)
    workers = [asyncio.create_task(after.worker()) for _ in range(4)]
    try:
        await eventually(lambda: after.answered >= 40, "40 sends answered by the new master", 60)
    finally:
        after.stopped = True
        await asyncio.gather(*workers)
    await record_read(recorder, api, third.address, TOPIC, BROKER_NAME, QUEUES)
    on_new_master = check(recorder.events)
    print(
        f"{mode} cut of master and slave with {in_flight} sends in flight "
        f"(pages lost {[s['pages_lost'] for s in summaries]}); the elected third member:\n"
        f"{on_new_master.summary()}"
    )
    assert on_new_master.ok, on_new_master.summary()
    assert on_new_master.counts["acknowledged"] >= wait_for // 2
    assert on_new_master.counts["epochs"] == 2

    # The cut members boot again and rejoin as slaves of the new master.
    for node in (first, cut_slave):
        node.boot(rng.choice(["pwrite", "mmap"]))
    await wait_sync_state_set(api, new, [1, 2, 3])
    end = as_int((await ha_status(api, third.address))["masterCommitLogMaxOffset"])
    for node in (first, cut_slave):

        async def caught_up(node: Node = node) -> bool:
            """At the new master's end, all of it confirmed and readable."""
            info = await ha_status(api, node.address)
            return (
                as_int(info["maxOffset"]) == end
                and as_int(info["confirmedOffset"]) >= end
                and as_int(info["dispatchBehindBytes"]) == 0
            )

        await eventually(caught_up, f"{node.mount.name} at the new master's end", 60)
        await record_read(recorder, api, node.address, TOPIC, BROKER_NAME, QUEUES)
        on_slave = check(recorder.events)
        assert on_slave.ok, f"{node.mount.name}:\n{on_slave.summary()}"
        assert commitlog_range(node.store, 0, end) == commitlog_range(third.store, 0, end)
