"""Power cuts of a SYNC_MASTER and its SLAVE that both flush asynchronously (issue 32 item 2:
ASYNC_FLUSH + SYNC_MASTER), each store on its own lossy file system (tests/support/lazyfs.py).

What RocketMQ promises here. With ASYNC_FLUSH a broker answers before any fsync; with SYNC_MASTER
the master answers SEND_OK once its slave reported the message's end, and a slave reports what it
appended, not what it synced (RocketMQ's HAClient reports its CommitLog's max offset after each
append; so does ours, ha/slave.py). So SEND_OK means: in the page cache of two machines. RocketMQ
states it as "to make sure no message will be lost, enable SYNC_MASTER or SYNC_FLUSH" (its docs'
SendStatus notes), and its sync double-write deployment as having no single point of data
loss: one machine losing power loses nothing acknowledged; both at once may lose what neither
had synced. Exactly that is tested, each by the history checker (tests/support/history.py):

- `master`: the master loses power (every process of its store SIGKILLed, everything unsynced
  dropped), the slave does not. Every acknowledged message is in the slave's CommitLog at its
  queue and offset (its files read as a final read, as the soak judges a slave): lost must be
  0. The master then boots again and what it serves is judged too: there acknowledged messages
  may be missing (they were not synced), and the test prints how many. Getting them back into
  the group is not automatic in a RocketMQ 4.x pair: the slave, now ahead of its master, says
  DIVERGED and keeps its log (haSlaveAutoTruncate is off by default, as here), so nothing it
  holds is thrown away; an operator (or controller mode's failover) acts.
- `both`: master and slave lose power at once. Acknowledged messages may be lost, but only
  from the master's unsynced tail: every acknowledged message whose record lay wholly before the
  master's first unsynced CommitLog page at the cut is served by the rebooted master at its
  queue and offset; every other rule of the checker (positions, duplicates) holds in full.

Sends are raw SEND_MESSAGE requests, 16 in flight, and the cut comes with sends in flight. A
seeded random number of answers (200-600) comes first; rerun with TIDEMQ_FAULT_SEED.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from tests.fault.powercut import COMMON, RECORD_BOUND, Node, durable_end, power_cut
from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING
from tests.support.ha_processes import body_of, wait_state, wait_transfer
from tests.support.history import Recorder, check, record_read, record_send
from tests.support.lazy_mounts import NEEDS_FUSE, LazyMount, can_mount
from tests.support.processes import Daemon, ProcessGroup
from tests.support.store_history import files_hold_acked
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)

TOPIC: Final = "Soak"
BROKER_NAME: Final = "broker-a"
QUEUES: Final = 4
IN_FLIGHT: Final = 16
# Acknowledged before any fsync; the flush service syncs every 200 ms what is written (at least
# one page; RocketMQ's 4 pages and 10 s thorough flush would sync nothing in a test this short),
# so a cut finds part of the log synced and the bound of `both` says something.
ASYNC_FLUSH: Final = (
    "flushDiskType=ASYNC_FLUSH",
    "flushIntervalCommitLog=200",
    "flushCommitLogLeastPages=1",
)


class Sends:
    """Numbered raw sends to `address`, IN_FLIGHT at a time, each recorded, until stopped."""

    def __init__(self, api: BrokerAPI, address: str, recorder: Recorder) -> None:
        self.api, self.address, self.recorder = api, address, recorder
        self.answered = self.in_flight = 0
        self.stopped = False
        self._numbers = iter(range(10**9))

    async def worker(self) -> None:
        while not self.stopped:
            number = next(self._numbers)
            header = send_header(TOPIC, number % QUEUES)
            body = body_of(number, 100 + number % 900)
            self.in_flight += 1
            try:
                await record_send(
                    self.recorder, self.api, self.address, header, body,
                    broker_name=BROKER_NAME, timeout=10,
                )  # fmt: skip
            except Exception:  # recorded (unknown): the broker died or the answer was lost
                pass
            finally:
                self.in_flight -= 1
                self.answered += 1


@pytest.fixture
async def nodes(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon
) -> AsyncIterator[tuple[Node, Node]]:
    mounts = [LazyMount(tmp_path, "master"), LazyMount(tmp_path, "slave")]
    master = Node(
        processes, namesrv, mounts[0], (*COMMON, *ASYNC_FLUSH, "brokerRole=SYNC_MASTER", *HA_TIMING)
    )
    slave = Node(
        processes,
        namesrv,
        mounts[1],
        (*COMMON, *ASYNC_FLUSH, "brokerRole=SLAVE", "brokerId=1", *HA_TIMING),
    )
    try:
        yield master, slave
    finally:
        processes.stop_all()
        for mount in mounts:
            mount.stop()


@pytest.mark.parametrize("cut", ["master", "both"])
async def test_sync_master_async_flush_power_cut_keeps_what_it_promises(
    nodes: tuple[Node, Node], api: BrokerAPI, recorder: Recorder, seed: int, cut: str
) -> None:
    master, slave = nodes
    rng = random.Random(seed)
    master.boot()
    slave.boot()
    assert master.broker is not None and slave.broker is not None
    await wait_transfer(api, master.broker, timeout=30)
    sends = Sends(api, master.address, recorder)
    workers = [asyncio.create_task(sends.worker()) for _ in range(IN_FLIGHT)]
    wait_for = rng.randint(200, 600)
    try:
        await eventually(lambda: sends.answered >= wait_for, f"{wait_for} answers", 60)
        in_flight = sends.in_flight  # the cut follows with no await
        victims = [master, slave] if cut == "both" else [master]
        for node in victims:  # the brokers first, at once; then the rest of each store's
            assert node.broker is not None
            node.broker.kill()
        summaries = [power_cut(node.mount, "all", rng.randrange(2**31)) for node in victims]
        summary = summaries[0]
    finally:
        sends.stopped = True
        await asyncio.gather(*workers)
    assert in_flight > 0

    if cut == "master":
        # The slave never lost power: its files (its page cache) hold every acknowledged message.
        on_slave = files_hold_acked(recorder, slave.store, TOPIC, BROKER_NAME)
        assert on_slave.ok, on_slave.summary()
    master.boot()

    async def topic_known() -> bool:
        return TOPIC in (await api.all_topic_config(master.address)).topic_config_table

    await eventually(topic_known, f"topic {TOPIC} on the rebooted master", 30)
    await record_read(recorder, api, master.address, TOPIC, BROKER_NAME, QUEUES)
    on_master = check(recorder.events)
    end = durable_end(summary)
    print(
        f"{cut} cut with {in_flight} sends in flight; the master's CommitLog durable up to "
        f"{end}; the rebooted master:\n{on_master.summary()}"
    )
    assert on_master.counts["acknowledged"] > 0
    # What the master may lose: only acknowledged messages past its first unsynced page.
    early = [
        o for o in on_master.lost_sends if end is None or int(o.get("phy")) + RECORD_BOUND <= end
    ]
    assert not early, f"lost although synced before the cut: {[o.get('body') for o in early][:10]}"
    for rule, texts in on_master.violations.items():
        assert rule == "lost" or not texts, on_master.summary()
    if cut == "master" and on_master.counts["lost"]:
        # The slave, ahead of its rebooted master, keeps what it holds (no auto-truncate).
        assert slave.broker is not None
        await wait_state(api, slave.broker, "DIVERGED", timeout=30)
        kept = files_hold_acked(recorder, slave.store, TOPIC, BROKER_NAME)
        assert kept.ok, kept.summary()
