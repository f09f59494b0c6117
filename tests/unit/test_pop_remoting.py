"""The sans-IO parts of POP over remoting (broker/processors/pop.py): BATCH_ACK bodies (RocketMQ's
BatchAckMessageRequestBody with Java BitSet bytes), the offset infos of a pop's answer, and the
7-field extraInfo of ACK_MESSAGE."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.pop.receipt import ReceiptHandle, TopicType
from tidemq.broker.pop.service import Popped, PopRefused, PopResult, Refusal
from tidemq.broker.processors.pop import _rejected, _with_offset, batch_ack_handles, offset_infos
from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.errors import BodyDecodeError


def java_bitset(bits: set[int]) -> str:
    """java.util.BitSet.toByteArray(): little-endian bytes, bit i in byte i // 8."""
    data = bytearray(max(bits) // 8 + 1 if bits else 0)
    for bit in bits:
        data[bit // 8] |= 1 << (bit % 8)
    return base64.b64encode(bytes(data)).decode()


def body(bits: set[int], **ack: object) -> bytes:
    one = {"c": "G", "t": "T", "r": "0", "so": 10, "q": 2, "rq": 3, "pt": 1000, "it": 30000}
    one.update(ack)
    one["b"] = java_bitset(bits)
    return json.dumps({"brokerName": "b", "acks": [one]}).encode()


@given(st.sets(st.integers(0, 500), max_size=40))
def test_every_set_bit_acknowledges_start_offset_plus_its_index(bits: set[int]) -> None:
    handles = batch_ack_handles(body(bits), "broker-a")
    offsets = sorted(ReceiptHandle.decode(h).offset for _g, _t, h in handles)
    assert offsets == sorted(10 + bit for bit in bits)
    for group, topic, text in handles:
        handle = ReceiptHandle.decode(text)
        assert (group, topic) == ("G", "T")
        assert (handle.start_offset, handle.pop_time, handle.invisible_time) == (10, 1000, 30000)
        assert (handle.revive_queue_id, handle.queue_id, handle.broker_name) == (3, 2, "broker-a")
        assert handle.topic_type is TopicType.NORMAL


def test_the_retry_mark_names_the_retry_topic() -> None:
    ((_g, _t, text),) = batch_ack_handles(body({0}, r="1"), "b")
    assert ReceiptHandle.decode(text).topic_type is TopicType.RETRY


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[]", "no acks"),
        (b'{"acks": 1}', "no acks"),
        (body({1}, c=""), "'c'"),
        (body({1}, so=-1), "'so'"),
        (body({1}, q="x"), "'q'"),
        (json.dumps({"acks": [{"c": "G", "t": "T", "so": 0, "q": 0, "rq": 0, "pt": 0,
                              "it": 0, "b": "!!"}]}).encode(), "base64"),
        (json.dumps({"acks": [1]}).encode(), "not an object"),
    ],
)  # fmt: skip
def test_bad_batch_ack_bodies_are_refused_naming_why(raw: bytes, why: str) -> None:
    with pytest.raises(BodyDecodeError, match=why):
        batch_ack_handles(raw, "b")


def test_offset_infos_group_by_topic_type_and_queue() -> None:
    def popped(kind: TopicType, queue: int, start: int, offset: int) -> Popped:
        handle = ReceiptHandle(start, 5, 6, 0, kind, "b", queue, offset)
        return Popped(None, b"", handle, 1)  # type: ignore[arg-type]

    result = PopResult(5, 6, 0, [], 0)
    result.messages = [
        popped(TopicType.NORMAL, 1, 7, 7),
        popped(TopicType.NORMAL, 1, 7, 9),
        popped(TopicType.RETRY, 0, 2, 2),
    ]
    assert offset_infos(result) == {
        "startOffsetInfo": "0 1 7;1 0 2",
        "msgOffsetInfo": "0 1 7,9;1 0 2",
    }


def test_a_seven_field_extra_info_takes_the_headers_offset() -> None:
    assert _with_offset("0 1 2 3 0 b 4", 4, 9) == "0 1 2 3 0 b 4 9"
    assert _with_offset("0 1 2 3 0 b 4 9 100", 4, 9) == "0 1 2 3 0 b 4 9 100"
    with pytest.raises(RequestRejected, match="queueId"):
        _with_offset("0 1 2 3 0 b 4", 5, 9)


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (Refusal.NO_TOPIC, ResponseCode.TOPIC_NOT_EXIST),
        (Refusal.NO_GROUP, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
        (Refusal.BAD_HANDLE, ResponseCode.MESSAGE_ILLEGAL),
        (Refusal.POLLING_FULL, ResponseCode.POLLING_FULL),
        (Refusal.OTHER, ResponseCode.SYSTEM_ERROR),
    ],
)
def test_a_refusal_is_answered_by_its_kind_not_by_its_words(kind: Refusal, code: int) -> None:
    """Found in review: the code was chosen by the reason's first word ("topic...", "invalid
    receipt handle..."), so rewording a reason changed the answer's code."""
    rejected = _rejected(PopRefused("topic or invalid receipt handle, in other words", kind))
    assert rejected.code == code
    assert rejected.remark == "topic or invalid receipt handle, in other words"
