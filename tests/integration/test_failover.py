"""Automatic failover on real processes (issue 16): etcd, namesrvd and three brokerd of one group
in controller mode (SYNC_MASTER, allAckInSyncStateSet), our producer and the RocketMQ C++ client
sending all along, our push consumers (concurrent and orderly) consuming.

The master is SIGKILLed under continuous sends: an in-sync slave must become master with a new
epoch and the producer must resume on it. Our producer's sends, both epochs and what the new
master serves are one history (tests/support/history.py), judged as a whole: every message
answered SEND_OK (before or after the kill) is readable on the new master at the queue offset
its answer gave; no body is stored more often than its send's attempts explain (the producer's
retries); every SEND_OK came from the master of its epoch. The time from the kill to the first
SEND_OK of the new master (the store host of its offsetMsgId) is printed with the history's
counts; speed targets belong to `make bench`.
The C++ client keeps its route until its own 30 s refresh, so its sends fail meanwhile; one
started after the failover gets the new master at once. Its answers carry no queue, so the
history has its sends with an unknown outcome, and this test checks its SEND_OKs itself. The
push consumer's committed offsets on the new master are never below those it had on the old
one (stricter than the history's offsets rule, which lets reads go back across a failover).
Both push consumers' deliveries are in the history too (`recording_listener`): once every
stored message was delivered to each, the checker's delivery rule holds: every acknowledged
message delivered at least once, each delivery the message the new master holds at its queue
and offset, and the orderly consumer's group never skipping an offset of a queue nor given
two messages of a queue at once (duplicates are counted and printed).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.cpp_peers import SEND_OK, Peer
from tests.support.etcd import EtcdCluster
from tests.support.failover import (
    controller,
    start_member,
    wait_master,
    wait_sync_state_set,
)
from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import as_int, body_of, commitlog_range, id_of
from tests.support.history import (
    Event,
    Recorder,
    RecordingProducer,
    check,
    record_read,
    recording_listener,
)
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.consumer.push import AsyncPushConsumer
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere

TOPIC = "FailoverTopic"
CPP_NUMBERS = 50_000_000  # the C++ client's message numbers start here


def cpp_producer(
    tmp_path: Path, namesrv: Daemon, first: int, count: int, *, keep_going: bool = False
) -> Peer:
    """The RocketMQ C++ client sending messages first..first+count-1, one send_sync at a time
    (with `keep_going`, a failed send is reported and the next one tried)."""
    return Peer(
        tmp_path,
        {
            "op": "produce",
            "namesrv": namesrv.address,
            "group": "FailoverCppPG",
            "topic": TOPIC,
            "send_timeout_ms": 3000,
            "keep_going": keep_going,
            "retry_pause": 0.2,
            "messages": [{"body": f"c{n:08d}|cpp"} for n in range(first, first + count)],
        },
    )


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
    recorder: Recorder,
) -> None:
    """With 3 etcd members, the etcd leader is killed with the master (apache/rocketmq#7689:
    the controller's leader and the master dying together lost acknowledged messages)."""
    etcd = etcd_cluster
    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert await wait_master(api, [first], 30) is first
    elected = as_int((await controller(api, first))["electedAtMillis"])
    recorder.epoch(first.address, 1, elected / 1000)
    slaves = [start_member(processes, namesrv, etcd.endpoints, tmp_path, i) for i in (2, 3)]

    await wait_sync_state_set(api, first, [1, 2, 3])
    assert (await controller(api, first))["epoch"] == 1

    delivered: list[tuple[int, int, int]] = []  # (queue id, queue offset, message number)
    in_order: list[int] = []  # the orderly consumer's message numbers

    async def on_message(message: ReceivedMessage) -> None:
        delivered.append((message.queue_id, message.queue_offset, id_of(message.body)))

    async def on_message_in_order(message: ReceivedMessage) -> None:
        in_order.append(id_of(message.body))

    consumer = AsyncPushConsumer(
        "failover-consumer",
        namesrv.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        offset_store_dir=tmp_path / "offsets",
    )
    consumer.subscribe(TOPIC, "*", recording_listener(recorder, consumer, on_message))
    orderly = AsyncPushConsumer(
        "failover-orderly",
        namesrv.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        offset_store_dir=tmp_path / "offsets-orderly",
        orderly=True,
    )
    orderly.subscribe(TOPIC, "*", recording_listener(recorder, orderly, on_message_in_order))

    acks: list[Event] = []  # the history's SEND_OK events, as they come
    numbers = iter(range(10**9))
    stop = asyncio.Event()
    producer = AsyncProducer("failover-producer", namesrv.address, timeout=3)
    await producer.start()
    recording = RecordingProducer(recorder, producer)

    async def sender() -> None:
        while not stop.is_set():
            try:
                result = await recording.send(Message(TOPIC, body_of(next(numbers), 200)))
            except TideMQError:
                await asyncio.sleep(0.01)  # no master known yet: do not spin on the loop
                continue
            if result.ok:
                acks.append(recorder.events[-1])

    senders = [asyncio.create_task(sender()) for _ in range(4)]
    cpp_first = cpp_producer(tmp_path, namesrv, CPP_NUMBERS, 400, keep_going=True)
    await cpp_first.start()
    cpp_reader = asyncio.create_task(read_events(cpp_first))
    try:
        await eventually(lambda: len(acks) >= 300, "300 sends acknowledged", 60)
        await consumer.start()
        await orderly.start()
        await eventually(lambda: len(delivered) >= 200, "200 messages consumed", 60)
        await eventually(lambda: len(in_order) >= 200, "200 messages consumed in order", 60)
        await eventually(lambda: len(cpp_first.of("sent")) >= 20, "the C++ client's sends", 60)
        committed_before = [
            await api.query_consumer_offset(first.address, "failover-consumer", TOPIC, q)
            for q in range(4)
        ]
        leader = etcd.leader_index() if len(etcd.members) > 1 else None
        assert leader is not None or len(etcd.members) == 1
        killed_at = time.monotonic()
        first.kill()
        if leader is not None:
            etcd.kill(leader)
        before_kill = len(acks)
        await eventually(
            lambda: sum(1 for e in acks if e["broker"] != first.address) >= 300,
            "300 sends acknowledged by the new master",
            60,
        )
    finally:
        stop.set()
        await asyncio.gather(*senders, return_exceptions=True)
        await producer.shutdown()
        await cpp_first.kill()
        await asyncio.gather(cpp_reader, return_exceptions=True)
    # A RocketMQ C++ client started now asks for the route and gets the new master.
    cpp_after = cpp_producer(tmp_path, namesrv, CPP_NUMBERS + 1000, 50)
    await cpp_after.start()
    await cpp_after.finish()
    assert [e["status"] for e in cpp_after.of("sent")] == [SEND_OK] * 50
    cpp_acked = {
        CPP_NUMBERS + e["index"] for e in cpp_first.of("sent") if e["status"] == SEND_OK
    } | {CPP_NUMBERS + 1000 + e["index"] for e in cpp_after.of("sent")}
    # Every message the C++ client was given (the one in flight when it was killed too), with
    # no outcome: its answers name no queue. send_sync's retries: 1 + retryTimes (2) attempts.
    for base, count in ((CPP_NUMBERS, 400), (CPP_NUMBERS + 1000, 50)):
        for number in range(base, base + count):
            recorder.invoke("send", topic=TOPIC, body=number, attempts=3, client="C++")

    new_master = await wait_master(api, slaves, 10)
    info = await controller(api, new_master)
    assert info["epoch"] == 2 and info["elections"] == 1, info
    recorder.epoch(new_master.address, 2, as_int(info["electedAtMillis"]) / 1000)
    # The first SEND_OK of the new master (answers of the old one may be read after the kill).
    first_ok = min(e["mono"] for e in acks if e["broker"] == new_master.address)
    await record_read(recorder, api, new_master.address, TOPIC, "broker-a", 4)
    found = {int(m[3]) for m in recorder.events[-1]["messages"]}
    lost_cpp = sorted(cpp_acked - found)

    # The consumers go on from where they were: every message stored is delivered, and no
    # committed offset is below the one it had on the old master.
    await eventually(lambda: {n for _q, _o, n in delivered} >= found, "all consumed", 60)
    await eventually(lambda: set(in_order) >= found, "all consumed in order", 60)
    await consumer.shutdown()
    await orderly.shutdown()
    recorder.drained(consumer.group, TOPIC)
    recorder.drained(orderly.group, TOPIC)
    judged = check(recorder.events)
    committed_after = [
        await api.query_consumer_offset(new_master.address, "failover-consumer", TOPIC, q)
        for q in range(4)
    ]
    assert all(a >= b for a, b in zip(committed_after, committed_before, strict=True)), (
        committed_before,
        committed_after,
    )
    redelivered = len(delivered) - len({(q, o) for q, o, _n in delivered})
    print(
        f"\nfailover ({len(etcd.members)} etcd): kill -> first SEND_OK on the new master "
        f"{first_ok - killed_at:.2f} s; {before_kill} acknowledged before the kill; "
        f"C++ client: {len(cpp_acked)} acknowledged, lost {len(lost_cpp)}; consumer: "
        f"{len(delivered)} deliveries, {redelivered} redelivered; orderly consumer: "
        f"{len(in_order)} deliveries\n{judged.summary()}"
    )
    assert judged.ok, judged.summary()
    assert judged.counts["delivered"] == len(delivered) + len(in_order)
    assert judged.counts["acknowledged"] >= 600 and judged.counts["epochs"] == 2
    assert not lost_cpp, f"C++ client's acknowledged messages lost: {lost_cpp[:10]}"

    # The killed master restarted: a slave of the new master, its unreplicated tail (if the
    # kill left one) kept in .diverged files, then byte-identical.
    restarted = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert not (await controller(api, restarted))["isMaster"]
    end = as_int((await ha_status(api, new_master.address))["masterCommitLogMaxOffset"])

    async def caught_up() -> bool:
        return as_int((await ha_status(api, restarted.address))["maxOffset"]) == end

    await eventually(caught_up, "the restarted broker at the new master's end", 30)
    # its HA connection began with the epoch handshake: the master knows it as broker 1
    assert "is broker 1, its epochs end with" in new_master.log_text()
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

    # The operator's view: mqadmin getSyncStateSet and getBrokerEpoch.
    shown = await asyncio.to_thread(
        mqadmin, "getSyncStateSet", "-n", namesrv.address, "-b", "broker-a"
    )
    assert "#MasterEpoch\t2" in shown and "#SyncStateSetNums\t3" in shown, shown
    epochs = await asyncio.to_thread(
        mqadmin, "getBrokerEpoch", "-n", namesrv.address, "-b", "broker-a"
    )
    assert "#Epoch: 1, start: 0, end: " in epochs and f"#Epoch: 2, start: {start}" in epochs, epochs
    listed = await asyncio.to_thread(mqadmin, "clusterList", "-n", namesrv.address)
    role_lines = [line.split() for line in listed.splitlines() if line.startswith("broker-a ")]
    roles = {line[1]: (line[3], line[4]) for line in role_lines if len(line) >= 6}
    assert roles[new_master.address] == ("MASTER", "2"), listed
    assert roles[restarted.address] == ("SLAVE", "2"), listed


async def read_events(peer: Peer) -> None:
    """Keep `peer.events` current while it runs."""
    while await peer.next_event() is not None:
        pass


def mqadmin(*args: str) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("mqadmin")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
