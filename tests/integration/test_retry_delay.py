"""Delayed messages, consumer retries and dead-letter queues against real processes."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.remoting.codes import RequestCode

pytestmark = pytest.mark.asyncio

# Level 3 (first retry) is 1 s, level 4 (second retry) 2 s, level 5 3 s; the table has 8 levels.
LEVELS = "messageDelayLevel=1s 1s 1s 2s 3s 1s 1s 4s"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def config(namesrv: Daemon) -> ClientConfig:
    return ClientConfig.create(
        namesrv.address, poll_name_server_interval=1.0, heartbeat_broker_interval=1.0
    )


async def test_failed_messages_are_retried_with_the_delay_levels(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    processes.brokerd(namesrv.address, tmp_path / "b", LEVELS)
    deliveries: dict[str, list[tuple[float, int]]] = defaultdict(list)

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        deliveries[msg.msg_id].append((time.monotonic(), msg.reconsume_times))
        assert msg.topic == "RT1"  # retries come back under their original topic
        return ConsumeResult.SUCCESS if msg.reconsume_times >= 2 else ConsumeResult.RECONSUME_LATER

    consumer = AsyncPushConsumer(
        "G-retry",
        config=config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("RT1", "*", listener)
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        ids = [(await producer.send(Message("RT1", b"m%d" % i))).msg_id for i in range(3)]
        await consumer.start()
        try:
            await eventually(
                lambda: all(len(deliveries[i]) >= 3 for i in ids), "three deliveries each", 30
            )
            await asyncio.sleep(2.5)  # nothing more may follow a success
        finally:
            await consumer.shutdown()
    for msg_id in ids:
        times = deliveries[msg_id]
        assert [r for _t, r in times] == [0, 1, 2]
        first_gap, second_gap = times[1][0] - times[0][0], times[2][0] - times[1][0]
        assert 0.9 <= first_gap <= 3.0, first_gap  # level 3: 1 s
        assert 1.9 <= second_gap <= 4.5, second_gap  # level 4: 2 s


async def test_poison_message_reaches_the_dlq(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", LEVELS)
    calls: list[int] = []

    async def listener(msg: ReceivedMessage) -> ConsumeResult:
        calls.append(msg.reconsume_times)
        raise RuntimeError("poison")

    consumer = AsyncPushConsumer(
        "G-poison",
        config=config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        max_reconsume_times=2,
    )
    consumer.subscribe("RT2", "*", listener)
    api = BrokerAPI()
    try:
        async with AsyncProducer("P", config=config(namesrv)) as producer:
            await producer.send(Message("RT2", b"poison"))
        await consumer.start()

        async def in_dlq() -> int:
            return await api.get_max_offset(broker.address, "%DLQ%G-poison", 0)

        async def moved() -> bool:
            return await in_dlq() >= 1

        await eventually(moved, "the poison message in %DLQ%G-poison", 30)
        assert await in_dlq() == 1
        await asyncio.sleep(3)
        assert calls == [0, 1, 2], calls  # no delivery after the move to the DLQ
        assert "moved to %DLQ%G-poison" in broker.log_text()
    finally:
        await consumer.shutdown()
        await api.close()


async def test_delayed_messages_survive_a_restart_and_arrive_once(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", LEVELS)
    sent_at = time.monotonic()
    async with AsyncProducer("P", config=config(namesrv)) as producer:
        ids = {
            (await producer.send(Message("RT3", b"d%d" % i, delay_level=8))).msg_id
            for i in range(10)
        }
    assert broker.stop() == 0
    processes.brokerd(namesrv.address, tmp_path / "b", LEVELS, port=broker.port)
    got: list[str] = []
    arrived: list[float] = []

    async def listener(msg: ReceivedMessage) -> None:
        got.append(msg.msg_id)
        arrived.append(time.monotonic())

    consumer = AsyncPushConsumer(
        "G-delay",
        config=config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("RT3", "*", listener)
    await consumer.start()
    try:
        await eventually(lambda: set(got) >= ids, "every delayed message", 30)
        await asyncio.sleep(2)
    finally:
        await consumer.shutdown()
    assert sorted(got) == sorted(ids)  # exactly once each
    assert min(arrived) - sent_at >= 3.5  # level 8 is 4 s


async def test_delay_level_beyond_the_table_is_clamped(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", LEVELS)
    api = BrokerAPI()
    try:
        async with AsyncProducer("P", config=config(namesrv)) as producer:
            await producer.send(Message("RT4", b"late", delay_level=99))
        # Level 99 becomes the last level (8): queue 7 of the schedule topic.
        assert await api.get_max_offset(broker.address, SCHEDULE_TOPIC, 7) == 1
        assert (
            await api.get_max_offset(broker.address, "RT4", 0)
            + await api.get_max_offset(broker.address, "RT4", 1)
            == 0
        )
    finally:
        await api.close()


async def test_slave_takes_over_the_delay_offsets(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    timing = ("slaveSynchronizeInterval=500", "haSendHeartbeatInterval=500", LEVELS)
    master = processes.brokerd(namesrv.address, tmp_path / "m", "brokerRole=ASYNC_MASTER", *timing)
    slave = processes.brokerd(
        namesrv.address, tmp_path / "s", "brokerRole=SLAVE", "brokerId=1", *timing
    )
    api = BrokerAPI()
    try:
        async with AsyncProducer("P", config=config(namesrv)) as producer:
            for i in range(3):
                await producer.send(Message("RT5", b"d%d" % i, delay_level=1))

        async def delay_offsets(address: str) -> dict[str, int]:
            response = await api.call(address, api.request(RequestCode.GET_ALL_DELAY_OFFSET))
            table = json.loads(bytes(response.body))["offsetTable"]
            return {str(k): int(v) for k, v in table.items()}

        async def copied() -> bool:
            on_master = await delay_offsets(master.address)
            return on_master.get("1") == 3 and await delay_offsets(slave.address) == on_master

        await eventually(copied, "the slave to copy the master's delay offsets", 20)
        assert (await delay_offsets(master.address)).get("1") == 3
        assert await delay_offsets(slave.address) == await delay_offsets(master.address)
    finally:
        await api.close()
