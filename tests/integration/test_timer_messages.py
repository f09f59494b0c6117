"""Timer messages (RocketMQ 5's TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC) against real
brokerd processes: delivered at their time, not before; across a broker restart (clean and
killed); by the slave elected when the master is killed (controller mode); refused with a clear
error when out of range or not a number."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.fault.cq_check import check_consume_queues
from tests.support.conditions import eventually
from tests.support.cpp_peers import SEND_OK, run_peer
from tests.support.etcd import EtcdCluster
from tests.support.failover import start_member, wait_master, wait_sync_state_set
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.admin.cli import main as mqadmin
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.namesrv import KVTable
from tidemq.client.remoting.codes import RequestCode

pytestmark = pytest.mark.asyncio

TIMER_LOG = "mappedFileSizeTimerLog=65536"


def config(namesrv: Daemon) -> ClientConfig:
    return ClientConfig.create(
        namesrv.address, poll_name_server_interval=1.0, heartbeat_broker_interval=1.0
    )


class Arrivals:
    """What a push consumer received: body -> wall-clock ms of each arrival."""

    def __init__(self) -> None:
        self.at: dict[bytes, list[int]] = {}
        self.messages: dict[bytes, ReceivedMessage] = {}
        # where each body was stored: a timer delivered twice is stored twice, a message a
        # consumer pulls again is the same (queue, offset)
        self.stored: dict[bytes, set[tuple[int, int]]] = {}

    async def listener(self, msg: ReceivedMessage) -> ConsumeResult:
        self.at.setdefault(msg.body, []).append(int(time.time() * 1000))
        self.messages[msg.body] = msg
        self.stored.setdefault(msg.body, set()).add((msg.queue_id, msg.queue_offset))
        return ConsumeResult.SUCCESS


def broker_status(namesrv: Daemon, address: str) -> dict[str, str]:
    """`mqadmin brokerStatus -n NAMESRV -b ADDRESS --json`, as an operator runs it."""
    result = CliRunner().invoke(
        mqadmin, ["brokerStatus", "-n", namesrv.address, "-b", address, "--json"]
    )
    assert result.exit_code == 0, result.output
    table = json.loads(result.output)[address]
    assert isinstance(table, dict)
    return {str(k): str(v) for k, v in table.items()}


async def consume(namesrv: Daemon, topic: str, group: str, arrivals: Arrivals) -> AsyncPushConsumer:
    consumer = AsyncPushConsumer(
        group,
        config=config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", arrivals.listener)
    await consumer.start()
    return consumer


async def test_a_300_ms_timer_arrives_after_300_ms(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    processes.brokerd(namesrv.address, tmp_path / "b", TIMER_LOG)
    arrivals = Arrivals()
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        await producer.send(Message("TT1", b"warm-up"))  # route and queues exist
        consumer = await consume(namesrv, "TT1", "G-timer", arrivals)
        try:
            await eventually(lambda: b"warm-up" in arrivals.at, "the consumer runs", 30)
            sent = {}
            for i in range(5):
                body = b"t%d" % i
                sent[body] = int(time.time() * 1000)
                await producer.send(Message("TT1", body, delay_ms=300))
            deliver_at = int(time.time() * 1000) + 700
            await producer.send(Message("TT1", b"at", deliver_at_ms=deliver_at))
            await eventually(lambda: len(arrivals.at) == 7, "every timer delivered", 30)
        finally:
            await consumer.shutdown()
    for body, at in sent.items():
        assert arrivals.at[body][0] - at >= 300, (body, arrivals.at[body][0] - at)
    assert arrivals.at[b"at"][0] >= deliver_at


async def test_bad_timers_are_refused_and_past_ones_delivered_at_once(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    processes.brokerd(namesrv.address, tmp_path / "b", TIMER_LOG, "timerMaxDelaySec=60")
    arrivals = Arrivals()
    async with AsyncProducer("P", config=config(namesrv), retry_times=0) as producer:
        await producer.send(Message("TT2", b"warm-up"))
        with pytest.raises(TideMQError, match="timerMaxDelaySec"):
            await producer.send(Message("TT2", b"far", delay_ms=61_000))
        with pytest.raises(TideMQError, match="TIMER_DELAY_SEC"):
            await producer.send(Message("TT2", b"nan", properties={"TIMER_DELAY_SEC": "soon"}))
        past = await producer.send(Message("TT2", b"past", deliver_at_ms=1000))
        assert past.ok
        consumer = await consume(namesrv, "TT2", "G-timer2", arrivals)
        try:
            await eventually(lambda: b"past" in arrivals.at, "the past timer delivered", 30)
        finally:
            await consumer.shutdown()
    assert b"far" not in arrivals.at and b"nan" not in arrivals.at


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_pending_timers_survive_a_broker_restart(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, how: str
) -> None:
    store = tmp_path / "b"
    broker = processes.brokerd(namesrv.address, store, TIMER_LOG)
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        await producer.send(Message("TT3", b"warm-up"))
        due = int(time.time() * 1000) + 4000
        for i in range(20):
            await producer.send(Message("TT3", b"r%d" % i, deliver_at_ms=due + i * 10))

    # Visible to operators: mqadmin brokerStatus's timerCongestNum.
    async def pending_in_broker_status() -> bool:
        table = await asyncio.to_thread(broker_status, namesrv, broker.address)
        return table.get("timerCongestNum") == "20"

    await eventually(pending_in_broker_status, "brokerStatus shows the 20 timers pending", 20)
    # Down before any is due, back after some are due: none lost, none twice.
    if how == "stop":
        broker.stop()
    else:
        broker.kill()
    # The clock passes the due times while the broker is down (the scenario, not a wait).
    await asyncio.sleep(max(0.0, (due - time.time() * 1000) / 1000) + 0.5)
    again = processes.brokerd(namesrv.address, store, TIMER_LOG, port=broker.port)
    arrivals = Arrivals()
    consumer = await consume(namesrv, "TT3", "G-timer3", arrivals)
    try:
        await eventually(lambda: len(arrivals.at) == 21, "every timer delivered", 40)
        await asyncio.sleep(1.0)  # nothing more follows
    finally:
        await consumer.shutdown()
    assert all(len(times) == 1 for times in arrivals.at.values()), arrivals.at
    for i in range(20):
        assert arrivals.at[b"r%d" % i][0] >= due + i * 10
    again.stop()
    # Offline: every ConsumeQueue unit, the timer topic's too (tagsCode = TIMER_OUT_MS), points
    # at its record (the soak's checker).
    check = check_consume_queues(store)
    assert check.problems == []
    assert (store / "consumequeue" / "rmq_sys_wheel_timer" / "0").is_dir()


async def test_timers_are_delivered_by_the_slave_elected_after_the_master_is_killed(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    """Controller mode: the timer messages reach the slave through the CommitLog, its wheel
    follows the master's checkpoint (GET_TIMER_CHECK_POINT); after the master is SIGKILLed the
    elected slave delivers the timers not yet due, and not again those the master delivered."""
    extra = (TIMER_LOG,)  # slaveSynchronizeInterval 10 s: the timer checkpoint follows every 3 s
    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, *extra)
    assert await wait_master(api, [first], 30) is first
    second = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, *extra)
    await wait_sync_state_set(api, first, [1, 2])
    early = int(time.time() * 1000) + 1000
    # The late timers fall due after the kill: the waits before it (early delivery, the slave's
    # checkpoint every 3 s) take 5-7 s on a quiet machine; 20 s leaves room for a loaded one.
    late = early + 20_000
    arrivals = Arrivals()
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        await producer.send(Message("TT4", b"warm-up"))
        for i in range(3):
            await producer.send(Message("TT4", b"early%d" % i, deliver_at_ms=early))
        for i in range(10):
            await producer.send(Message("TT4", b"late%d" % i, deliver_at_ms=late + i))
    consumer = await consume(namesrv, "TT4", "G-timer4", arrivals)
    try:
        await eventually(lambda: len(arrivals.at) == 4, "the early timers delivered", 30)

        async def slave_has_them() -> bool:
            info = await api.call(second.address, api.request(RequestCode.GET_BROKER_RUNTIME_INFO))
            table = KVTable.decode(bytes(info.body)).table
            return (
                int(table["timerCursorMs"]) > early
                and table["timerOffsetBehind"] == "0"
                and table["timerCongestNum"] == "10"
            )

        await eventually(slave_has_them, "the slave's wheel holds the 10 late timers", 30)
        assert time.time() * 1000 < late, "the test was too slow to kill the master in time"
        first.kill()
        assert await wait_master(api, [second], 30) is second
        await eventually(lambda: len(arrivals.at) == 14, "the late timers delivered", 40)
        await asyncio.sleep(1.0)  # nothing more follows
    finally:
        await consumer.shutdown()
    assert all(len(times) == 1 for times in arrivals.at.values()), arrivals.at
    for i in range(10):
        assert arrivals.at[b"late%d" % i][0] >= late + i


async def test_the_rocketmq_4x_cpp_client_sets_the_timer_property_by_hand(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """`msg.set_property("TIMER_DELAY_MS", ...)` from the C++ client (rocketmq on PyPI)."""
    processes.brokerd(namesrv.address, tmp_path / "b", TIMER_LOG)
    arrivals = Arrivals()
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        await producer.send(Message("TT5", b"warm-up"))
    consumer = await consume(namesrv, "TT5", "G-timer5", arrivals)
    try:
        await eventually(lambda: b"warm-up" in arrivals.at, "the consumer runs", 30)
        sent_at = int(time.time() * 1000)
        spec = {
            "op": "produce",
            "namesrv": namesrv.address,
            "group": "PG-TT5",
            "topic": "TT5",
            "messages": [{"body": "cpp-timer", "props": {"TIMER_DELAY_MS": "1500"}}],
        }
        sent = [e for e in await run_peer(tmp_path, spec) if e["event"] == "sent"]
        assert [e["status"] for e in sent] == [SEND_OK]
        await eventually(lambda: b"cpp-timer" in arrivals.at, "the C++ client's timer", 30)
    finally:
        await consumer.shutdown()
    timer = arrivals.messages[b"cpp-timer"]
    due = int(timer.properties["TIMER_OUT_MS"])  # parked as a timer, 1500 ms after it was stored
    assert due >= sent_at + 1500 and arrivals.at[b"cpp-timer"][0] >= due
    assert int(timer.properties["TIMER_DEQUEUE_MS"]) >= due


async def test_a_broker_killed_while_delivering_loses_no_timer(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """SIGKILL in the middle of deliveries: every timer arrives after the restart, and the
    repeats (at least once) are at most what was being delivered when it died."""
    store = tmp_path / "b"
    broker = processes.brokerd(namesrv.address, store, TIMER_LOG)
    arrivals = Arrivals()
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        await producer.send(Message("TT6", b"warm-up"))
        consumer = await consume(namesrv, "TT6", "G-timer6", arrivals)
        try:
            await eventually(lambda: b"warm-up" in arrivals.at, "the consumer runs", 30)
            start = int(time.time() * 1000) + 1500
            for i in range(200):
                await producer.send(Message("TT6", b"k%d" % i, deliver_at_ms=start + i * 10))
            await eventually(lambda: len(arrivals.at) >= 60, "some timers delivered", 30)
            broker.kill()
            processes.brokerd(namesrv.address, store, TIMER_LOG, port=broker.port)
            await eventually(lambda: len(arrivals.at) == 201, "every timer delivered", 40)
            await asyncio.sleep(1.0)  # nothing more follows
        finally:
            await consumer.shutdown()
    repeats = sum(len(places) - 1 for places in arrivals.stored.values())
    pulled_again = sum(len(times) for times in arrivals.at.values()) - 201 - repeats
    print(f"after the SIGKILL: {repeats} timers delivered twice, {pulled_again} pulled again")
    assert repeats <= 50, repeats
    for i in range(200):
        assert arrivals.at[b"k%d" % i][0] >= start + i * 10
