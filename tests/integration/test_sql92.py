"""SQL92 property filters against real processes: the broker evaluates the expression when
pulling, so only matching messages leave it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import pull_header
from tidemq import AsyncProducer, AsyncPushConsumer, Message, MessageSelector
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.config import ClientConfig
from tidemq.client.errors import BrokerResponseError, SubscriptionParseFailedError
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import ResponseCode
from tidemq.store.record import StoredMessage

pytestmark = pytest.mark.asyncio

EXPRESSION = "a BETWEEN 3 AND 5 AND region IN ('eu','us')"
QUEUES = 4


def config(namesrv: Daemon) -> ClientConfig:
    return ClientConfig.create(
        namesrv.address,
        poll_name_server_interval=1.0,
        heartbeat_broker_interval=1.0,
        persist_consumer_offset_interval=1.0,
    )


def messages(topic: str) -> list[Message]:
    """a in 0..7 (and one "x", one missing) by region eu, us, ap: 30 messages."""
    out = []
    for region in ("eu", "us", "ap"):
        for a in [*map(str, range(8)), "x", None]:
            props = {"region": region} if a is None else {"a": a, "region": region}
            out.append(Message(topic, f"{a}-{region}".encode(), tags="T", properties=props))
    return out


def expected() -> Counter[bytes]:
    return Counter(f"{a}-{r}".encode() for a in (3, 4, 5) for r in ("eu", "us"))


async def broker_pull(
    api: BrokerAPI, broker: Daemon, topic: str, expression: str, expression_type: str = "SQL92"
) -> list[StoredMessage]:
    """Every message the broker lets through for `expression`, queue by queue: no filter runs
    in this process."""
    out: list[StoredMessage] = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            header = pull_header(
                topic,
                queue_id,
                offset,
                group="G-inspect",
                subscription=expression,
                expression_type=expression_type,
            )
            pulled = await api.pull(broker.address, header)
            if pulled.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
                break
            out.extend(pulled.messages)
            offset = pulled.next_begin_offset
    return out


async def test_only_matching_messages_leave_the_broker(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", "enablePropertyFilter=true")
    await api.create_topic(broker.address, TopicConfig("SQL1", QUEUES, QUEUES))
    async with AsyncProducer("P-sql", config=config(namesrv)) as producer:
        for msg in messages("SQL1"):
            await producer.send(msg)

    # The broker's own filter: a pull carrying the expression gets exactly the matches.
    pulled = await broker_pull(api, broker, "SQL1", EXPRESSION)
    assert Counter(m.body for m in pulled) == expected()
    assert len(await broker_pull(api, broker, "SQL1", "*", "TAG")) == 30

    received: Counter[bytes] = Counter()

    async def listener(msg: ReceivedMessage) -> None:
        received[msg.body] += 1

    consumer = AsyncPushConsumer(
        "G-sql",
        config=config(namesrv),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("SQL1", MessageSelector.by_sql(EXPRESSION), listener)
    await consumer.start()
    try:
        await eventually(lambda: received == expected(), "exactly the matching messages", 30)

        async def committed() -> bool:  # the consumer has read every queue to its end
            offsets = [
                await api.query_consumer_offset(broker.address, "G-sql", "SQL1", q)
                for q in range(QUEUES)
            ]
            maxima = [await api.get_max_offset(broker.address, "SQL1", q) for q in range(QUEUES)]
            return offsets == maxima

        await eventually(committed, "the group's offsets at the end of every queue", 30)
        assert received == expected()
    finally:
        await consumer.shutdown()


async def test_bad_expressions_are_refused_with_the_problem_named(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", "enablePropertyFilter=true")
    await api.create_topic(broker.address, TopicConfig("SQL2", QUEUES, QUEUES))
    async with AsyncProducer("P-sql", config=config(namesrv)) as producer:
        for msg in messages("SQL2"):
            await producer.send(msg)  # the route is known once a send went through

    consumer = AsyncPushConsumer("G-bad", config=config(namesrv))
    consumer.subscribe("SQL2", MessageSelector.by_sql("a BETWEEN 3 AND"), lambda m: None)
    with pytest.raises(SubscriptionParseFailedError, match="ends too early"):
        await consumer.start()
    for expression, problem in (
        ("a > 'three'", "cannot be compared"),
        ("a = 1 AND (b = 2", "ends too early"),
        ("a # 1", "unexpected character '#' at column 3"),
        ("a BETWEEN 5 AND 3", "illegal values of BETWEEN"),
    ):
        with pytest.raises(SubscriptionParseFailedError, match=problem):
            await broker_pull(api, broker, "SQL2", expression)

    # Strings against numbers: "x" and a missing `a` never match, and break nothing.
    numbers = await broker_pull(api, broker, "SQL2", "a > 6 OR a < 1")
    assert sorted(m.body for m in numbers) == sorted(
        f"{a}-{r}".encode() for a in (0, 7) for r in ("eu", "us", "ap")
    )
    nulls = await broker_pull(api, broker, "SQL2", "a IS NULL AND region = 'ap'")
    assert [m.body for m in nulls] == [b"None-ap"]
    # 10,000 characters and more: a long OR of terms, one of which matches.
    long_expression = " OR ".join(f"a = {100 + i}" for i in range(1200)) + " OR a = 7"
    assert len(long_expression) > 10_000
    matched = await broker_pull(api, broker, "SQL2", long_expression)
    assert sorted(m.body for m in matched) == [b"7-ap", b"7-eu", b"7-us"]


async def test_a_broker_without_enable_property_filter_refuses_sql92(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b")
    await api.create_topic(broker.address, TopicConfig("SQL3", QUEUES, QUEUES))

    async def routed() -> bool:  # the consumer asks the brokers its route names
        return await api.get_route(namesrv.address, "SQL3") is not None

    await eventually(routed, "the route of SQL3", 30)
    consumer = AsyncPushConsumer("G-off", config=config(namesrv))
    consumer.subscribe("SQL3", MessageSelector.by_sql("a > 1"), lambda m: None)
    with pytest.raises(BrokerResponseError, match="enablePropertyFilter") as refused:
        await consumer.start()
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
