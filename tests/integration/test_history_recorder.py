"""The history recorder (tests/support/history.py) around the real client and a real broker: the
producers' sends, a pull consumer's polls, commits and committed-offset reads and the final read
back make a history the checker passes, with the counts the test knows; the same history with
one acknowledged message taken out of the broker's answer fails as lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.conditions import eventually
from tests.support.ha_processes import body_of
from tests.support.history import (
    Recorder,
    RecordingBlockingProducer,
    RecordingProducer,
    RecordingPullConsumer,
    check,
    load,
    record_read,
)
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer, Producer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere, MessageQueue
from tidemq.client.protocol.models import TopicConfig

TOPIC = "HistoryTopic"


async def test_a_recorded_history_of_the_real_client_passes_the_checker(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store", name="broker-a")
    await api.create_topic(broker.address, TopicConfig(TOPIC, 4, 4))

    async def routed() -> bool:
        return await api.get_route(namesrv.address, TOPIC) is not None

    await eventually(routed, f"the route of {TOPIC}", 15)
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path, process="test")
    config = ClientConfig.create(namesrv.address, poll_name_server_interval=1.0)
    producer = AsyncProducer("HistoryPG", config=config)
    consumer = AsyncPullConsumer(
        "HistoryCG",
        config=config,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit=False,
        offset_store_dir=tmp_path / "offsets",
    )
    blocking = Producer("HistoryBlockingPG", namesrv.address)
    await producer.start()
    try:
        sending = RecordingProducer(recorder, producer)
        for number in range(20):
            assert (await sending.send(Message(TOPIC, body_of(number, 100)))).ok
        await asyncio.to_thread(blocking.start)
        blocking_sending = RecordingBlockingProducer(recorder, blocking)
        for number in range(20, 25):
            result = await asyncio.to_thread(
                blocking_sending.send, Message(TOPIC, body_of(number, 100))
            )
            assert result.ok

        await consumer.start()
        queues = [MessageQueue(TOPIC, "broker-a", q) for q in range(4)]
        await consumer.assign(queues)
        reading = RecordingPullConsumer(recorder, consumer)
        polled: list[object] = []

        async def all_polled() -> bool:
            polled.extend(await reading.poll(timeout=0.2))
            return len(polled) >= 25

        await eventually(all_polled, "25 messages polled", 30, interval=0)
        await reading.commit()
        assert sum([await reading.committed(mq) for mq in queues]) == 25
    finally:
        await consumer.stop()
        await producer.stop()
        await asyncio.to_thread(blocking.shutdown)
    assert await record_read(recorder, api, broker.address, TOPIC, "broker-a", 4) == 25
    recorder.close()

    events = load(path)
    assert events == recorder.events
    report = check(events)
    assert report.ok, report.summary()
    c = report.counts
    assert (c["sends"], c["acknowledged"], c["lost"], c["duplicates"]) == (25, 25, 0, 0)
    assert (c["consumed"], c["committed_reads"]) == (25, 4)
    sends = [e for e in events if e["f"] == "send" and e["type"] == "ok"]
    assert {e["broker"] for e in sends} == {broker.address}
    assert [e["attempts"] for e in events if e["f"] == "send" and e["type"] == "invoke"] == [3] * 25

    # The broker's answer without one acknowledged message: the checker finds it lost.
    final = next(e for e in events if e["f"] == "read" and e["type"] == "ok")
    final["messages"] = final["messages"][1:]
    damaged = check(events)
    assert damaged.counts["lost"] == 1 and len(damaged.violations["lost"]) == 1
