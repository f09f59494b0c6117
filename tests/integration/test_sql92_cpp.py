"""SQL92 filters on messages the RocketMQ C++ client (rocketmq==0.4.4) produced: its user
properties reach the broker's filter as Java's clients write them. (The C++ client 0.4.4 has
no SQL92 subscription, nor a transactional producer in its Python binding: our consumer
subscribes.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

# Not installed (the dev extra has it on x86_64 Linux only), or its librocketmq.so is missing.
pytest.importorskip(
    "rocketmq.client",
    reason="the RocketMQ C++ client (rocketmq==0.4.4, x86_64 Linux only) cannot be imported",
    exc_type=ImportError,
)

from tests.support.conditions import eventually
from tests.support.cpp_peers import run_peer
from tests.support.processes import Daemon, ProcessGroup
from tidemq import AsyncPushConsumer, MessageSelector
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

EXPRESSION = "a BETWEEN 3 AND 5 AND region IN ('eu','us')"


async def test_cpp_produced_properties_are_filtered_by_the_broker(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", "enablePropertyFilter=true")
    await api.create_topic(broker.address, TopicConfig("SQLCPP", 4, 4))

    async def routed() -> bool:
        return await api.get_route(namesrv.address, "SQLCPP") is not None

    await eventually(routed, "the route of SQLCPP", 30)
    messages = [
        {"body": f"{a}-{region}", "tags": "T", "props": {"a": str(a), "region": region}}
        for a in range(8)
        for region in ("eu", "us", "ap")
    ]
    spec = {
        "op": "produce",
        "namesrv": namesrv.address,
        "group": "PG-sqlcpp",
        "topic": "SQLCPP",
        "messages": messages,
    }
    sent = [e for e in await run_peer(tmp_path, spec) if e["event"] == "sent"]
    assert len(sent) == len(messages)

    received: Counter[bytes] = Counter()

    async def listener(msg: ReceivedMessage) -> None:
        received[msg.body] += 1

    consumer = AsyncPushConsumer(
        "G-sqlcpp",
        config=ClientConfig.create(namesrv.address, heartbeat_broker_interval=1.0),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("SQLCPP", MessageSelector.by_sql(EXPRESSION), listener)
    await consumer.start()
    want = Counter(f"{a}-{r}".encode() for a in (3, 4, 5) for r in ("eu", "us"))
    try:
        await eventually(lambda: sum(received.values()) >= len(want), "the matches", 30)

        async def drained() -> bool:  # every queue pulled to its end, nothing more came
            offsets = [
                await api.query_consumer_offset(broker.address, "G-sqlcpp", "SQLCPP", q)
                for q in range(4)
            ]
            ends = [await api.get_max_offset(broker.address, "SQLCPP", q) for q in range(4)]
            return offsets == ends

        await eventually(drained, "the group's offsets at the end of every queue", 30)
        assert received == want
    finally:
        await consumer.shutdown()
