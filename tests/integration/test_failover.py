"""Automatic failover on real processes (issue 16): etcd, namesrvd and three brokerd of one group
in controller mode (SYNC_MASTER, allAckInSyncStateSet), our producer sending all along.

The master is SIGKILLed under continuous sends: an in-sync slave must become master with a new
epoch, the producer must resume on it, and every message answered SEND_OK (before or after the
kill) must be readable on the new master at the queue offset its answer gave. The time from the
kill to the first SEND_OK (necessarily from the new master: the others are dead or slaves) is
printed, with the duplicates the producer's retries made; speed targets belong to `make bench`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.etcd import EtcdCluster
from tests.support.failover import controller, start_member, wait_master, wait_sync_state_set
from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import as_int, body_of, commitlog_range, read_all
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer

TOPIC = "FailoverTopic"


@pytest.fixture(params=[1, 3], ids=["etcd1", "etcd3-leader-killed-too"])
def etcd_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EtcdCluster]:
    with EtcdCluster(request.param, tmp_path / "etcd", tmp_path / "logs") as cluster:
        yield cluster


async def test_sigkill_of_the_master_elects_an_in_sync_slave_and_loses_nothing_then_it_rejoins(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd_cluster: EtcdCluster,
    api: BrokerAPI,
) -> None:
    """With 3 etcd members, the etcd leader is killed with the master (apache/rocketmq#7689:
    the controller's leader and the master dying together lost acknowledged messages)."""
    etcd = etcd_cluster
    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert await wait_master(api, [first], 30) is first
    slaves = [start_member(processes, namesrv, etcd.endpoints, tmp_path, i) for i in (2, 3)]

    await wait_sync_state_set(api, first, [1, 2, 3])
    assert (await controller(api, first))["epoch"] == 1

    acknowledged: dict[int, tuple[int, int]] = {}  # message number -> (queue id, queue offset)
    ok_times: list[float] = []
    failures: Counter[str] = Counter()
    numbers = iter(range(10**9))
    stop = asyncio.Event()
    producer = AsyncProducer("failover-producer", namesrv.address, timeout=3)
    await producer.start()

    async def sender() -> None:
        while not stop.is_set():
            number = next(numbers)
            try:
                result = await producer.send(Message(TOPIC, body_of(number, 200)))
            except TideMQError as exc:
                failures[type(exc).__name__] += 1
                await asyncio.sleep(0.01)  # no master known yet: do not spin on the loop
                continue
            if result.ok:
                acknowledged[number] = (result.message_queue.queue_id, result.queue_offset)
                ok_times.append(time.monotonic())
            else:
                failures[result.status.name] += 1

    senders = [asyncio.create_task(sender()) for _ in range(4)]
    try:
        await eventually(lambda: len(ok_times) >= 300, "300 sends acknowledged", 60)
        leader = etcd.leader_index() if len(etcd.members) > 1 else None
        assert leader is not None or len(etcd.members) == 1
        killed_at = time.monotonic()
        first.kill()
        if leader is not None:
            etcd.kill(leader)
        before_kill = len(ok_times)
        await eventually(
            lambda: sum(1 for t in ok_times if t > killed_at) >= 300,
            "300 sends acknowledged after the kill",
            60,
        )
    finally:
        stop.set()
        await asyncio.gather(*senders, return_exceptions=True)
        await producer.shutdown()

    new_master = await wait_master(api, slaves, 10)
    info = await controller(api, new_master)
    assert info["epoch"] == 2 and info["elections"] == 1, info
    first_ok = min(t for t in ok_times if t > killed_at)
    found = await read_all(api, new_master, TOPIC)
    at = {number: place for place, number in found.items()}
    lost = [n for n, place in acknowledged.items() if at.get(n) != place]
    duplicates = sum(count - 1 for count in Counter(found.values()).values() if count > 1)
    print(
        f"\nfailover ({len(etcd.members)} etcd): kill -> first SEND_OK on the new master "
        f"{first_ok - killed_at:.2f} s; "
        f"{before_kill} acknowledged before the kill, {len(acknowledged)} in all, "
        f"lost {len(lost)}, duplicates {duplicates}, failed attempts {dict(failures)}"
    )
    assert not lost, f"{len(lost)} acknowledged messages not on the new master: " + ", ".join(
        f"{n} acknowledged at {acknowledged[n]}, found at {at.get(n)}" for n in lost[:5]
    )

    # The killed master restarted: a slave of the new master, its unreplicated tail (if the
    # kill left one) kept in .diverged files, then byte-identical.
    restarted = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert not (await controller(api, restarted))["isMaster"]
    end = as_int((await ha_status(api, new_master.address))["masterCommitLogMaxOffset"])

    async def caught_up() -> bool:
        return as_int((await ha_status(api, restarted.address))["maxOffset"]) == end

    await eventually(caught_up, "the restarted broker at the new master's end", 30)
    new_store = tmp_path / f"store-{new_master.name.rsplit('-', 1)[1]}"
    assert commitlog_range(tmp_path / "store-1", 0, end) == commitlog_range(new_store, 0, end)
    diverged = sorted((tmp_path / "store-1" / "commitlog").glob("*.diverged"))
    start = as_int(info["epochStartOffset"])
    print(
        f"rejoined: epoch 2 starts at {start}; {sum(p.stat().st_size for p in diverged)} bytes "
        f"of the killed master's tail kept in {[p.name for p in diverged]}"
    )
    assert all(p.stat().st_size > 0 for p in diverged)

    async def full_set_again() -> bool:
        members = (await controller(api, new_master))["syncStateSet"]
        return isinstance(members, list) and len(members) == 3

    await eventually(full_set_again, "the restarted broker back in the SyncStateSet", 30)
