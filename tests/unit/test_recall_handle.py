"""Recall handles: RocketMQ's HandleV1 text, a round trip, and every malformed handle refused
naming what is wrong (broker/recall_handle.py)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.recall_handle import MAX_LENGTH, InvalidRecallHandle, RecallHandle


def b64(text: str, pad: bool = True) -> str:
    encoded = base64.urlsafe_b64encode(text.encode()).decode()
    return encoded if pad else encoded.rstrip("=")


def test_the_text_is_rocketmqs_v1_handle() -> None:
    handle = RecallHandle("topic", "broker-0", 1_888_825_600_000, "7F0000010001")
    assert handle.encode() == b64("v1 topic broker-0 1888825600000 7F0000010001")
    assert RecallHandle.decode(handle.encode()) == handle
    # Java's URL decoder reads it unpadded too.
    assert RecallHandle.decode(b64("v1 t b 5 id", pad=False)) == RecallHandle("t", "b", 5, "id")


_WORD = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=" "), min_size=1, max_size=40
)


@given(_WORD, _WORD, st.integers(0, 10**17), _WORD)
def test_round_trip(topic: str, broker: str, deliver: int, message_id: str) -> None:
    handle = RecallHandle(topic, broker, deliver, message_id)
    assert RecallHandle.decode(handle.encode()) == handle


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("x" * (MAX_LENGTH + 1), "longer"),
        ("not base64!", "base64"),
        (base64.standard_b64encode(b"v1 t b 5 ?>?>").decode() + "+/", "base64"),
        ("_w==", "UTF-8"),
        (b64("v2 t b 5 id"), "version"),
        (b64("v1 t b 5"), "4 fields"),
        (b64("v1 t b 5 id extra"), "6 fields"),
        (b64("v1  b 5 id"), "topic"),
        (b64("v1 t  5 id"), "broker name"),
        (b64("v1 t b 5 "), "id"),
        (b64("v1 t b -5 id"), "time"),
        (b64("v1 t b 5e3 id"), "time"),
        (b64("v1 t b 9999999999999999999 id"), "time"),
    ],
)
def test_malformed_handles_are_refused_naming_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidRecallHandle, match=says):
        RecallHandle.decode(text)
