"""A producer refuses a message it cannot send, at once, and goes on sending (issue 30, item 6).

Against a real name server and broker, for every kind of bad message (tests/support/
bad_messages.py) and every send path of the blocking producers and of the asyncio ones (send,
oneway, async with a callback, orderly, batch, to a given queue, with a selector, in a
transaction): the send raises `InvalidMessageError` naming the field, and a good message sent
next by the same producer, on the same connection, is stored. "At once" is a condition, not a
clock: a refusal raised inside the transport (the old behaviour) leaves a connection whose next
send fails with the producer's own timeout error, which fails the test without timing anything.
So are a send's bad queue and a selector that gives no queue. At the end the broker holds
exactly the good messages: nothing of a refused one reached it.

At c82965c a str body failed inside the transport's write, and every later send on that
connection waited out its 10 s timeout; a None body raised a bare TypeError; int tags, an int
property value, a bool delay level or a queue of another topic were sent as they were.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.bad_messages import BAD_MESSAGES
from tests.support.conditions import eventually, eventually_sync
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import InvalidMessageError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer, Producer, hash_selector
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.transaction import (
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionProducer,
)

# A bound on waits for callbacks and stored messages, not a speed target.
LIVENESS = 60.0
TOPIC = "BadMessagesT"
QUEUES = 2
BROKER = "broker-a"  # tests.support.processes names every broker so


def misused_sends(topic: str) -> list[tuple[str, dict[str, Any], str]]:
    """(label, send keywords, field) for a good message sent with a bad queue or selector."""
    return [
        ("a queue that is a str", {"queue": "q"}, "queue"),
        ("a queue of another topic", {"queue": MessageQueue("OtherT", BROKER, 0)}, "queue"),
        ("a queue id that is a str", {"queue": MessageQueue(topic, BROKER, "0")}, "queue"),
        ("a selector that gives no queue", {"selector": lambda qs, m, a: None}, "selector"),
    ]


def commit(*_args: Any) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


async def create_topic(namesrv: Daemon, broker: Daemon) -> None:
    api = BrokerAPI()
    try:
        await api.create_topic(broker.address, TopicConfig(TOPIC, QUEUES, QUEUES))

        async def routed() -> bool:
            return await api.get_route(namesrv.address, TOPIC) is not None

        await eventually(routed, f"the route of {TOPIC}", 15)
    finally:
        await api.close()


async def stored(broker: Daemon) -> int:
    api = BrokerAPI()
    try:
        return sum([await api.get_max_offset(broker.address, TOPIC, q) for q in range(QUEUES)])
    finally:
        await api.close()


def start_broker(processes: ProcessGroup, namesrv: Daemon, tmp_path: Path) -> Daemon:
    broker = processes.brokerd(namesrv.address, tmp_path / BROKER, name=BROKER)
    asyncio.run(create_topic(namesrv, broker))
    return broker


# --- the blocking producers -------------------------------------------------------------------


def refusal(send: Callable[[Message], object], msg: Message) -> InvalidMessageError:
    with pytest.raises(InvalidMessageError) as caught:
        send(msg)
    return caught.value


def test_the_blocking_producers_refuse_bad_messages_at_once_and_send_on(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = start_broker(processes, namesrv, tmp_path)
    told: list[BaseException | None] = []
    good = 0
    with (
        Producer("PG-bad-blocking", namesrv.address) as producer,
        TransactionProducer(
            "PG-bad-blocking-tx", namesrv.address, execute=commit, check=commit
        ) as transactional,
    ):

        def send_good() -> None:
            assert producer.send(Message(TOPIC, b"good")).ok

        def send_good_in_transaction() -> None:
            result = transactional.send_message_in_transaction(Message(TOPIC, b"good"))
            assert result.local_transaction_state is LocalTransactionState.COMMIT

        paths: dict[str, tuple[Callable[[Message], object], Callable[[], None]]] = {
            "send": (producer.send, send_good),
            "send_oneway": (producer.send_oneway, send_good),
            "send_async": (
                lambda m: producer.send_async(m, lambda r, e: told.append(e)).result(LIVENESS),
                send_good,
            ),
            "send_orderly": (lambda m: producer.send_orderly(m, "key"), send_good),
            "send_batch": (lambda m: producer.send_batch([Message(TOPIC, b"ok"), m]), send_good),
            "send to a queue": (
                lambda m: producer.send(m, queue=MessageQueue(TOPIC, BROKER, 0)),
                send_good,
            ),
            "send with a selector": (
                lambda m: producer.send(m, selector=hash_selector, arg=1),
                send_good,
            ),
            "send_message_in_transaction": (
                transactional.send_message_in_transaction,
                send_good_in_transaction,
            ),
        }
        send_good()  # the route known and the connection open before the first bad message
        send_good_in_transaction()
        good += 2
        for label, make, field in BAD_MESSAGES:
            for path, (send_bad, send_next) in paths.items():
                refused = refusal(send_bad, make(TOPIC))
                assert refused.field == field, f"{path} of {label}: {refused}"
                send_next()
                good += 1
        for label, kwargs, field in misused_sends(TOPIC):
            send = functools.partial(producer.send, **kwargs)
            refused = refusal(send, Message(TOPIC, b"x"))
            assert refused.field == field, f"{label}: {refused}"
            send_good()
            good += 1

    eventually_sync(lambda: len(told) == len(BAD_MESSAGES), "every send_async callback", LIVENESS)
    assert all(isinstance(error, InvalidMessageError) for error in told)
    eventually_sync(lambda: asyncio.run(stored(broker)) >= good, "the good messages stored", 15)
    assert asyncio.run(stored(broker)) == good


# --- the asyncio producers --------------------------------------------------------------------


async def refusal_async(
    send: Callable[[Message], Awaitable[object]], msg: Message
) -> InvalidMessageError:
    with pytest.raises(InvalidMessageError) as caught:
        await send(msg)
    return caught.value


async def test_the_asyncio_producers_refuse_bad_messages_at_once_and_send_on(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = await asyncio.to_thread(start_broker, processes, namesrv, tmp_path)
    told: list[BaseException | None] = []
    good = 0
    async with (
        AsyncProducer("PG-bad-asyncio", namesrv.address) as producer,
        AsyncTransactionProducer(
            "PG-bad-asyncio-tx", namesrv.address, execute=commit, check=commit
        ) as transactional,
    ):

        async def send_good() -> None:
            assert (await producer.send(Message(TOPIC, b"good"))).ok

        async def send_good_in_transaction() -> None:
            result = await transactional.send_message_in_transaction(Message(TOPIC, b"good"))
            assert result.local_transaction_state is LocalTransactionState.COMMIT

        paths: dict[str, tuple[Callable[[Message], Awaitable[object]], Callable[[], Any]]] = {
            "send": (producer.send, send_good),
            "send_oneway": (producer.send_oneway, send_good),
            "send_async": (
                lambda m: producer.send_async(m, lambda r, e: told.append(e)),
                send_good,
            ),
            "send_orderly": (lambda m: producer.send_orderly(m, "key"), send_good),
            "send_batch": (lambda m: producer.send_batch([Message(TOPIC, b"ok"), m]), send_good),
            "send to a queue": (
                lambda m: producer.send(m, queue=MessageQueue(TOPIC, BROKER, 0)),
                send_good,
            ),
            "send with a selector": (
                lambda m: producer.send(m, selector=hash_selector, arg=1),
                send_good,
            ),
            "send_message_in_transaction": (
                transactional.send_message_in_transaction,
                send_good_in_transaction,
            ),
        }
        await send_good()
        await send_good_in_transaction()
        good += 2
        for label, make, field in BAD_MESSAGES:
            for path, (send_bad, send_next) in paths.items():
                refused = await refusal_async(send_bad, make(TOPIC))
                assert refused.field == field, f"{path} of {label}: {refused}"
                await send_next()
                good += 1
        for label, kwargs, field in misused_sends(TOPIC):
            send_with = functools.partial(producer.send, **kwargs)
            refused = await refusal_async(send_with, Message(TOPIC, b"x"))
            assert refused.field == field, f"{label}: {refused}"
            await send_good()
            good += 1

    await eventually(lambda: len(told) == len(BAD_MESSAGES), "every send_async callback", LIVENESS)
    assert all(isinstance(error, InvalidMessageError) for error in told)

    async def all_good_stored() -> bool:
        return await stored(broker) >= good

    await eventually(all_good_stored, "the good messages stored", 15)
    assert await stored(broker) == good
