"""Messages a producer must refuse before sending, for unit and integration tests.

`BAD_MESSAGES`: (label, make, field): `make(topic)` builds a `Message` that breaks one rule of
`client.validators` (the fields of the wrong type are built past the type checker on purpose);
`field` is what the `InvalidMessageError` must name. The topic given stays the topic of every
message but those whose fault is the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemq.client.message import Message


def _message(topic: str, **fields: Any) -> Message:
    fields.setdefault("body", b"bad")
    return Message(topic, **fields)


def _with_topic(bad_topic: Any) -> Callable[[str], Message]:
    return lambda _topic: Message(bad_topic, b"bad")


def _with(**fields: Any) -> Callable[[str], Message]:
    return lambda topic: _message(topic, **fields)


BAD_MESSAGES: list[tuple[str, Callable[[str], Message], str]] = [
    ("a str body", _with(body="a str body"), "body"),
    ("a None body", _with(body=None), "body"),
    ("a list body", _with(body=[1, 2, 3]), "body"),
    ("a strided memoryview body", _with(body=memoryview(b"0123456789")[::2]), "body"),
    ("a memoryview body of 4-byte items", _with(body=memoryview(b"01234567").cast("i")), "body"),
    ("an int topic", _with_topic(42), "topic"),
    ("an empty topic", _with_topic(""), "topic"),
    ("a topic with a space", _with_topic("Bad Topic"), "topic"),
    ("a topic with a separator", _with_topic("Bad\x01Topic"), "topic"),
    ("a topic of 128 characters", _with_topic("T" * 128), "topic"),
    ("int tags", _with(tags=5), "tags"),
    ("tags holding \\x01", _with(tags="A\x01B"), "tags"),
    ("tags holding \\x02", _with(tags="A\x02B"), "tags"),
    ("tags with a lone surrogate", _with(tags="A\udc80"), "tags"),
    ("bytes keys", _with(keys=b"k1"), "keys"),
    ("int keys", _with(keys=7), "keys"),
    ("a key of a list that is not a str", _with(keys=["k1", 7]), "keys"),
    ("keys holding \\x02", _with(keys="k1\x02k2"), "keys"),
    ("a key holding \\x01", _with(keys=("k1", "k\x012")), "keys"),
    ("properties not a mapping", _with(properties=[("a", "b")]), "properties"),
    ("an int property value", _with(properties={"a": 1}), "properties"),
    ("an int property name", _with(properties={1: "a"}), "properties"),
    ("a property name holding \\x01", _with(properties={"a\x01b": "c"}), "properties"),
    ("a property value holding \\x02", _with(properties={"a": "b\x02c"}), "properties"),
    ("a property value not encodable", _with(properties={"a": "\ud800"}), "properties"),
    ("a str delay level", _with(delay_level="3"), "delay_level"),
    ("a float delay level", _with(delay_level=3.0), "delay_level"),
    ("a bool delay level", _with(delay_level=True), "delay_level"),
    ("a delay level past Java's int", _with(delay_level=2**31), "delay_level"),
    ("a str flag", _with(flag="0"), "flag"),
    ("a None flag", _with(flag=None), "flag"),
]
