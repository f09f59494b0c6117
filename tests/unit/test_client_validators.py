"""What a producer refuses to send (client.validators), and that every send path asks it first.

The producers here are never started: a refused message must raise before the producer needs
a route, a broker or a connection (an unstarted producer that got that far would raise "not
started" instead).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.bad_messages import BAD_MESSAGES
from tidemq.broker.managers import topic_config
from tidemq.client import validators
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.consumer.push import AsyncPushConsumer
from tidemq.client.errors import ClientError, InvalidMessageError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol import names
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.transaction import AsyncTransactionProducer, LocalTransactionState
from tidemq.client.validators import (
    TOPIC_MAX_LENGTH,
    check_message,
    check_queue,
    validate_topic_name,
)

TOPIC = "ValidT"
BAD = pytest.mark.parametrize(
    ("make", "field"),
    [(make, field) for _label, make, field in BAD_MESSAGES],
    ids=[label for label, _make, _field in BAD_MESSAGES],
)


@BAD
def test_a_bad_message_is_refused_naming_its_field(
    make: Callable[[str], Message], field: str
) -> None:
    with pytest.raises(InvalidMessageError) as refused:
        check_message(make(TOPIC))
    assert refused.value.field == field
    assert isinstance(refused.value, ClientError) and isinstance(refused.value, ValueError)


def test_what_is_not_a_message_is_refused() -> None:
    with pytest.raises(InvalidMessageError) as refused:
        check_message(b"just a body")
    assert refused.value.field == "message"


def test_a_body_over_the_size_limit_is_refused() -> None:
    check_message(Message(TOPIC, bytes(100)), 100)
    with pytest.raises(InvalidMessageError, match="101 bytes exceeds 100") as refused:
        check_message(Message(TOPIC, bytes(101)), 100)
    assert refused.value.field == "body"


@pytest.mark.parametrize(
    "msg",
    [
        Message(TOPIC, b""),
        Message(TOPIC, bytearray(b"body")),
        Message(TOPIC, memoryview(b"body")),
        Message(TOPIC, memoryview(bytearray(b"0123456789"))[2:8]),
        Message(TOPIC, memoryview(b"0123").cast("i").cast("B")),
        Message("%RETRY%group-1|a_b", b"x"),
        Message("T" * TOPIC_MAX_LENGTH, b"x"),
        Message(TOPIC, b"x", tags="TagA", keys="k1 k2", properties={"a": "b", "": ""}),
        Message(TOPIC, b"x", tags="标签", keys=["clé", "ключ"], properties={"名": "値 \t\n"}),
        Message(TOPIC, b"x", keys={"k1", "k2"}, delay_level=3, flag=-(2**31)),
        Message(TOPIC, b"x", delay_level=-1, flag=2**31 - 1),
    ],
)
def test_a_good_message_passes(msg: Message) -> None:
    check_message(msg, 4 * 1024 * 1024)


def test_keys_from_a_generator_are_kept_for_the_properties() -> None:
    # Checking a generator uses it up: the message keeps the keys it gave.
    msg = Message(TOPIC, b"x", keys=(k for k in ("k1", "k2")))
    check_message(msg)
    assert msg.key_list == ["k1", "k2"]
    assert "k1 k2" in msg.encoded_properties()


def test_valid_topic_names_are_remembered_in_a_bounded_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(validators, "_valid_topics", set())
    checked: list[str] = []
    monkeypatch.setattr(
        validators,
        "validate_topic_name",
        lambda topic: checked.append(topic) or validate_topic_name(topic),
    )
    for _ in range(3):
        validators.check_topic(TOPIC)
    assert checked == [TOPIC]  # the rule ran once for the name
    for n in range(3000):
        validators.check_topic(f"T{n}")
    assert 0 < len(validators._valid_topics) <= validators._MAX_VALID_TOPICS


def test_a_refused_topic_is_not_remembered() -> None:
    for _ in range(2):
        with pytest.raises(InvalidMessageError, match="illegal characters"):
            validators.check_topic("Bad Topic")
    assert "Bad Topic" not in validators._valid_topics


def test_the_broker_applies_the_same_topic_rule() -> None:
    assert topic_config.validate_topic_name is validate_topic_name is names.topic_problem


def test_the_error_survives_pickle_with_its_field() -> None:
    error = InvalidMessageError("tags", "message tags must be a str, not int")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.field, str(copy)) == (InvalidMessageError, "tags", str(error))


@pytest.mark.parametrize(
    ("queue", "problem"),
    [
        ("q", "must be a MessageQueue, not str"),
        (MessageQueue("OtherT", "broker-a", 0), "is not the message's topic"),
        (MessageQueue(TOPIC, "broker-a", -1), "queue_id must be an int"),
        (MessageQueue(TOPIC, "broker-a", "0"), "queue_id must be an int"),  # type: ignore[arg-type]
        (MessageQueue(TOPIC, "broker-a", True), "queue_id must be an int"),
        (MessageQueue(TOPIC, "", 0), "broker_name must be a non-empty str"),
        (MessageQueue(TOPIC, None, 0), "broker_name must be a non-empty str"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_queue_is_refused(queue: Any, problem: str) -> None:
    with pytest.raises(InvalidMessageError, match=problem) as refused:
        check_queue(queue, TOPIC)
    assert refused.value.field == "queue"


# --- every send path checks first -----------------------------------------------------------


def producer() -> AsyncTransactionProducer:
    """Unstarted: anything past the checks raises "not started" (a ClientError of another
    kind), so only the checks can raise InvalidMessageError."""

    def commit(*_args: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    return AsyncTransactionProducer("PG-checks", "127.0.0.1:1", execute=commit, check=commit)


def send_paths(msg: Message) -> dict[str, Callable[[AsyncProducer], Any]]:
    good = Message(TOPIC, b"good")
    return {
        "send": lambda p: p.send(msg),
        "send_oneway": lambda p: p.send_oneway(msg),
        "send_async": lambda p: p.send_async(msg),
        "send_orderly": lambda p: p.send_orderly(msg, "key"),
        "send_batch": lambda p: p.send_batch([good, msg]),
        "send_message_in_transaction": lambda p: p.send_message_in_transaction(msg),  # type: ignore[attr-defined]
    }


@BAD
@pytest.mark.parametrize("path", list(send_paths(Message(TOPIC, b""))))
async def test_every_send_path_refuses_a_bad_message_before_it_needs_a_broker(
    make: Callable[[str], Message], field: str, path: str
) -> None:
    with pytest.raises(InvalidMessageError) as refused:
        await send_paths(make(TOPIC))[path](producer())
    assert refused.value.field == field


async def test_a_good_message_gets_past_the_checks() -> None:
    # The control for the test above: a good message reaches "not started".
    for path, send in send_paths(Message(TOPIC, b"good")).items():
        with pytest.raises(ClientError, match="is not started") as stopped:
            await send(producer())
        assert not isinstance(stopped.value, InvalidMessageError), path


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue": "q"}, "queue"),
        ({"queue": MessageQueue("OtherT", "broker-a", 0)}, "queue"),
        ({"queue": MessageQueue(TOPIC, "broker-a", "1")}, "queue"),
    ],
)
async def test_send_refuses_a_bad_queue(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidMessageError) as refused:
        await producer().send(Message(TOPIC, b"x"), **kwargs)
    assert refused.value.field == field


async def test_send_refuses_a_selector_that_cannot_be_called() -> None:
    with pytest.raises(ClientError, match="must be callable"):
        await producer().send(Message(TOPIC, b"x"), selector="by key")  # type: ignore[arg-type]


async def test_a_batch_that_is_not_a_sequence_is_refused() -> None:
    batch = (Message(TOPIC, b"x") for _ in range(2))
    with pytest.raises(ClientError, match="a sequence of messages, not generator"):
        await producer().send_batch(batch)  # type: ignore[arg-type]


async def test_send_async_fails_its_task_and_tells_the_callback() -> None:
    told: list[tuple[Any, BaseException | None]] = []
    task = producer().send_async(Message(TOPIC, None), lambda r, e: told.append((r, e)))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        await asyncio.wait_for(task, 1.0)
    await asyncio.sleep(0)  # done callbacks run in the next loop iteration
    assert len(told) == 1 and told[0][0] is None
    assert isinstance(told[0][1], InvalidMessageError)


@pytest.mark.parametrize("group", ["../g", "a/b", "", "g\0", "g" * 256, 7])
def test_producers_and_consumers_refuse_a_group_the_broker_would(group: object) -> None:
    for make in (AsyncProducer, AsyncPushConsumer, AsyncPullConsumer):
        with pytest.raises(ClientError, match="group"):
            make(group, "127.0.0.1:1")  # type: ignore[arg-type]


def test_a_consumer_group_must_leave_room_for_its_retry_topic() -> None:
    AsyncProducer("p" * 200, "127.0.0.1:1")  # nothing is derived from a producer group
    AsyncPushConsumer("c" * 120, "127.0.0.1:1")
    with pytest.raises(ClientError, match="retry topic"):
        AsyncPushConsumer("c" * 121, "127.0.0.1:1")


@pytest.mark.parametrize("topic", ["../t", "t t", "", 5])
def test_consumers_refuse_to_subscribe_to_what_is_no_topic(topic: object) -> None:
    for consumer in (AsyncPushConsumer("G", "127.0.0.1:1"), AsyncPullConsumer("G", "127.0.0.1:1")):
        with pytest.raises(ClientError, match="topic"):
            consumer.subscribe(topic)  # type: ignore[arg-type]
