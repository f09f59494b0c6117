"""What a producer refuses to send, checked before anything is queued (RocketMQ's Validators).

A message that cannot go on the wire as it is raises `InvalidMessageError` at once, its `field`
naming the part that is wrong, instead of failing later: a str body used to fail inside the
transport's write, after the request was registered, and took every later send on that
connection with it. The rules:

- topic: a str, RocketMQ's topic name rule (TopicValidator: `^[%|a-zA-Z0-9_-]+$`, at most 127
  characters); the broker applies the same `validate_topic_name`;
- body: bytes, bytearray, or a memoryview of flat bytes (C-contiguous, one dimension, one-byte
  items, so that its len() is its size everywhere), at most the producer's max_message_size;
- tags, keys, property names and values: str (keys: one str or an iterable of str), without the
  property separators \\x01 and \\x02 (they would split or merge properties on the broker), and
  encodable as UTF-8 (the header carries them so);
- delay_level and flag: an int (not a bool) in Java's int range; deliver_at_ms and delay_ms:
  None or an int (not a bool) in Java's long range;
- a send's given queue: a `MessageQueue` of the message's topic with a queue id of Java's int
  range (RocketMQ: "message's topic not equal mq's topic").

A valid send pays type tests and substring searches; the topic's regular expression runs once
per name: names that passed are kept in a bounded set.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from typing import Final

from tidemq.client.errors import ClientError, InvalidMessageError
from tidemq.client.message import Message
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.names import (
    TOPIC_MAX_LENGTH,
    consumer_group_problem,
    group_problem,
    topic_problem,
)
from tidemq.common import speedups
from tidemq.store.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

__all__ = [
    "TOPIC_MAX_LENGTH",
    "check_group",
    "check_message",
    "check_queue",
    "check_topic",
    "subscription_topic",
    "validate_topic_name",
]

# Topic names that passed `validate_topic_name`; emptied when full (names are checked again,
# nothing else is lost), so a producer sending to ever new names holds no more than this.
_MAX_VALID_TOPICS: Final = 1024
_valid_topics: set[str] = set()
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1
_shown = reprlib.Repr()
_shown.maxstring = 60


# The broker's rule (client/protocol/names.py): a producer refuses what the broker would.
validate_topic_name = topic_problem


def check_group(group: object, *, consumer: bool) -> None:
    """`ClientError` unless `group` is a name the broker takes for a producer group, or with
    `consumer` for a consumer group (RocketMQ's client Validators.checkGroup, at start)."""
    what = "consumer" if consumer else "producer"
    if not isinstance(group, str) or not group:
        raise ClientError(f"a {what} needs a group name (a str), not {_type(group)}")
    problem = consumer_group_problem(group) if consumer else group_problem(group)
    if problem is not None:
        raise ClientError(f"{what} group {_shown.repr(group)}: {problem}")


def subscription_topic(topic: object) -> str:
    """`topic` when a consumer may subscribe to it, else `ClientError` naming why."""
    if not isinstance(topic, str):
        raise ClientError(f"a subscription's topic must be a str, not {_type(topic)}")
    problem = topic_problem(topic)
    if problem is not None:
        raise ClientError(f"subscription topic {_shown.repr(topic)}: {problem}")
    return topic


def check_topic(topic: object) -> None:
    """`InvalidMessageError` (field "topic") unless `topic` is a str that is a valid name."""
    if type(topic) is str and topic in _valid_topics:
        return
    if not isinstance(topic, str):
        raise InvalidMessageError("topic", f"message topic must be a str, not {_type(topic)}")
    problem = validate_topic_name(topic)
    if problem is not None:
        raise InvalidMessageError("topic", f"message topic {_shown.repr(topic)}: {problem}")
    if len(_valid_topics) >= _MAX_VALID_TOPICS:
        _valid_topics.clear()
    _valid_topics.add(topic)


def check_message(msg: object, max_size: int | None = None) -> None:
    """`InvalidMessageError` naming the first field of `msg` that breaks the module's rules.

    A `keys` given as a one-shot iterator (a generator) is replaced by the tuple it yields:
    checking it uses it up, and the properties and the trace read the keys again.
    """
    # Each field is first tried against what most messages hold (ASCII without control
    # characters is encodable and holds no separator), inline: a send's checks are a few C calls.
    # What fails that goes to the full check, which decides and names the fault.
    if not isinstance(msg, Message):
        raise InvalidMessageError("message", f"a message must be a Message, not {_type(msg)}")
    topic = msg.topic
    if type(topic) is not str or topic not in _valid_topics:
        check_topic(topic)
    body = msg.body
    if type(body) is not bytes:
        _check_body(body)
    if max_size is not None and len(body) > max_size:
        raise InvalidMessageError("body", f"message body of {len(body)} bytes exceeds {max_size}")
    tags = msg.tags
    if tags is not None and not (type(tags) is str and tags.isascii() and tags.isprintable()):
        _check_text("tags", "message tags", tags)
    keys = msg.keys
    if keys is not None and not (type(keys) is str and keys.isascii() and keys.isprintable()):
        _check_keys(msg)
    properties = msg.properties
    if type(properties) is not dict:
        _check_properties(properties)
    elif properties:
        for name, value in properties.items():
            if not (
                type(name) is str
                and type(value) is str
                and name.isascii()
                and value.isascii()
                and name.isprintable()
                and value.isprintable()
            ):
                _check_property(name, value)
    level = msg.delay_level
    if type(level) is not int or not _INT_MIN <= level <= _INT_MAX:
        _check_int("delay_level", level)
    flag = msg.flag
    if type(flag) is not int or not _INT_MIN <= flag <= _INT_MAX:
        _check_int("flag", flag)
    # the two timer fields one by one: a loop over them made three tuples per send
    when = msg.deliver_at_ms
    if when is not None and (type(when) is not int or not _LONG_MIN <= when <= _LONG_MAX):
        _check_long("deliver_at_ms", when)
    when = msg.delay_ms
    if when is not None and (type(when) is not int or not _LONG_MIN <= when <= _LONG_MAX):
        _check_long("delay_ms", when)


# The compiled twin (client/protocol/_headers.pyx) passes, in C, what the checks above pass at
# their first test; anything else it hands to this function.
check_message = speedups.select(check_message, "tidemq.client.protocol._headers")


def check_queue(queue: object, topic: str | None, field: str = "queue") -> MessageQueue:
    """`queue` if it is a `MessageQueue` a send can name (of `topic`, unless None)."""
    if not isinstance(queue, MessageQueue):
        raise InvalidMessageError(
            field, f"a send's {field} must be a MessageQueue, not {_type(queue)}"
        )
    if topic is not None and queue.topic != topic:
        raise InvalidMessageError(
            field,
            f"the {field}'s topic {_shown.repr(queue.topic)} is not the message's topic "
            f"{_shown.repr(topic)}",
        )
    queue_id = queue.queue_id
    if not isinstance(queue_id, int) or isinstance(queue_id, bool) or not 0 <= queue_id <= _INT_MAX:
        raise InvalidMessageError(
            field, f"the {field}'s queue_id must be an int from 0 to {_INT_MAX}, not {queue_id!r}"
        )
    if not isinstance(queue.broker_name, str) or not queue.broker_name:
        raise InvalidMessageError(
            field, f"the {field}'s broker_name must be a non-empty str, not {queue.broker_name!r}"
        )
    return queue


def _check_body(body: object) -> None:
    if isinstance(body, (bytes, bytearray)):
        return
    if not isinstance(body, memoryview):
        raise InvalidMessageError(
            "body", f"message body must be bytes, bytearray or memoryview, not {_type(body)}"
        )
    if not (body.c_contiguous and body.ndim == 1 and body.itemsize == 1):
        raise InvalidMessageError(
            "body",
            "a memoryview message body must be flat bytes (C-contiguous, one dimension, "
            f"one-byte items), not format {body.format!r} of shape {body.shape}: cast it to 'B'",
        )


def _check_text(field: str, what: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidMessageError(field, f"{what} must be a str, not {_type(value)}")
    if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
        raise InvalidMessageError(
            field,
            f"{what} {_shown.repr(value)} holds a property separator (\\x01 or \\x02)",
        )
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(
                field, f"{what} {_shown.repr(value)} is not encodable as UTF-8: {exc.reason}"
            ) from None


def _check_keys(msg: Message) -> None:
    keys = msg.keys
    if isinstance(keys, str):
        _check_text("keys", "message keys", keys)
        return
    if type(keys) is not list and type(keys) is not tuple:
        if isinstance(keys, (bytes, bytearray, memoryview)) or not isinstance(keys, Iterable):
            raise InvalidMessageError(
                "keys", f"message keys must be a str or an iterable of str, not {_type(keys)}"
            )
        if iter(keys) is keys:
            keys = msg.keys = tuple(keys)
    for key in keys:
        if not (type(key) is str and key.isascii() and key.isprintable()):
            _check_text("keys", "a message key", key)


def _check_properties(properties: object) -> None:
    if not isinstance(properties, Mapping):
        raise InvalidMessageError(
            "properties", f"message properties must be a dict of str, not {_type(properties)}"
        )
    for name, value in properties.items():
        _check_property(name, value)


def _check_property(name: object, value: object) -> None:
    _check_text("properties", "a property name", name)
    _check_text("properties", f"property {_shown.repr(name)}", value)


def _check_int(field: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidMessageError(field, f"message {field} must be an int, not {_type(value)}")
    if not _INT_MIN <= value <= _INT_MAX:
        raise InvalidMessageError(field, f"message {field} {value} is outside Java's int range")


def _check_long(field: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidMessageError(field, f"message {field} must be an int, not {_type(value)}")
    raise InvalidMessageError(field, f"message {field} {value} is outside Java's long range")


def _type(value: object) -> str:
    return type(value).__name__
