"""`check_message`'s compiled twin (client/protocol/_headers.pyx) against the pure one
(client/validators.py): for every message, the same outcome (None, or the same
`InvalidMessageError` with the same field and text) and the same message after (a one-shot
`keys` replaced by its tuple); the messages most sends carry are passed in C, without the pure
twin. It cannot see how fast either is."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.bad_messages import BAD_MESSAGES
from tests.support.speedups_twins import selected
from tidemq.client import validators
from tidemq.client.errors import InvalidMessageError
from tidemq.client.message import Message
from tidemq.client.protocol import _headers
from tidemq.common import speedups

KEY = "tidemq.client.validators.check_message"
PURE = speedups.PURE_TWINS[KEY]
TOPIC = "TwinTopic"

TEXT = st.text(max_size=6) | st.sampled_from(["", "~", " ", "\x7f", "\x01", "é", "\ud800", "A B"])
ODD = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
INTS = (
    st.integers(-(2**31), 2**31 - 1)
    | st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1])
    | st.booleans()
    | TEXT
)
LONGS = st.none() | st.integers(-(2**63), 2**63 - 1) | st.sampled_from([2**63, -(2**63) - 1, 1.5])


class _Subclass(Message):
    pass


messages = st.builds(
    Message,
    st.sampled_from([TOPIC, "Bad Topic", "", "T" * 128]) | st.integers(),
    st.binary(max_size=8) | st.sampled_from([bytearray(b"ba"), memoryview(b"mv"), "text", None]),
    tags=st.none() | TEXT | st.integers(),
    keys=st.none() | TEXT | st.lists(TEXT, max_size=2) | st.binary(max_size=2),
    properties=st.dictionaries(TEXT | st.integers(), TEXT | st.integers(), max_size=3)
    | st.lists(st.tuples(TEXT, TEXT), max_size=1),
    delay_level=INTS,
    flag=INTS,
    deliver_at_ms=LONGS,
    delay_ms=LONGS,
)


def outcome(twin: Any, msg: Any, max_size: Any) -> Any:
    try:
        result = twin(msg, max_size)
    except InvalidMessageError as exc:
        return ("refused", exc.field, str(exc))
    except Exception as exc:
        return (type(exc), str(exc))
    return ("passed", result)


def _pair(msg: Any) -> tuple[Any, Any]:
    return msg, copy.copy(msg)


@pytest.fixture(autouse=True)
def _known_topic() -> None:
    validators.check_topic(TOPIC)  # the set of topics checked before (both twins read it)


def test_the_compiled_message_check_is_selected() -> None:
    assert selected(KEY) is _headers.check_message
    assert PURE is not _headers.check_message


@given(messages, st.none() | st.integers(-1, 10) | st.sampled_from([2**64, 4.5, True]))
def test_message_checks_give_the_same_outcome(msg: Message, max_size: Any) -> None:
    compiled, pure = _pair(msg)
    assert outcome(_headers.check_message, compiled, max_size) == outcome(PURE, pure, max_size)
    assert compiled == pure


@pytest.mark.parametrize(
    ("label", "make", "field"), BAD_MESSAGES, ids=[label for label, *_ in BAD_MESSAGES]
)
def test_bad_messages_are_refused_alike(label: str, make: Any, field: str) -> None:
    expected = outcome(PURE, make(TOPIC), None)
    assert expected[:2] == ("refused", field)
    assert outcome(_headers.check_message, make(TOPIC), None) == expected


def test_odd_things_are_refused_alike() -> None:
    for thing in [b"just a body", None, _Subclass(TOPIC, b"body", keys=iter(["k"]))]:
        assert outcome(_headers.check_message, thing, None) == outcome(PURE, thing, None)


def test_keys_from_a_generator_are_replaced_as_the_pure_twin_does() -> None:
    msg = Message(TOPIC, b"body", keys=(k for k in ["k1", "k2"]))
    _headers.check_message(msg, None)
    assert msg.keys == ("k1", "k2")


def test_messages_as_most_sends_carry_them_pass_without_the_pure_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("the pure twin checked a plain message")

    monkeypatch.setitem(speedups.PURE_TWINS, KEY, refuse)
    for msg in [
        Message(TOPIC, b"x" * 1024),
        Message(TOPIC, b"", tags="TagA", keys="k1 k2", properties={"a": "b", "~": " "}),
        Message(TOPIC, b"b", delay_level=3, flag=-(2**31), deliver_at_ms=2**63 - 1, delay_ms=0),
    ]:
        assert _headers.check_message(msg, 4 * 1024 * 1024) is None
        assert _headers.check_message(msg, None) is None
