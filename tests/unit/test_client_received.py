"""Consumers' record decoding (client/consumer/received.py) and the lazily decoded ReceivedMessage.

The reference is the decoding before the one-pass decoder: `store.record.decode_record` of each
record, then the fields the old `ReceivedMessage.from_stored` made of the StoredMessage (restated
here as a dict, so a shared mistake cannot hide). On random records (IPv4 and IPv6 hosts,
compressed bodies, any property bytes) and on damaged bodies, the new decoder gives the same
fields or raises the same error.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import ipaddress
import pickle
import struct
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.records import reference_record
from tests.support.speedups_twins import selected
from tidemq.client.api import PullResult, PullStatus, decode_records
from tidemq.client.consumer import _received
from tidemq.client.consumer.received import decode_received
from tidemq.client.inflate import inflate_body
from tidemq.client.message import UNSET, ReceivedMessage, _ReceivedFields
from tidemq.common import speedups
from tidemq.store.record import StoredMessage, encode_properties, unpack_host

BROKER = "broker-a"
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.tuples(st.ip_addresses().map(str), st.integers(0, 65535))
property_bytes = st.one_of(
    st.dictionaries(
        st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "RETRY_TOPIC", "x"]),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
        max_size=5,
    ).map(lambda props: encode_properties(props).encode()),
    st.binary(max_size=60),  # anything: bad UTF-8, stray separators
)


def old_fields(stored: StoredMessage, broker_name: str) -> dict[str, object]:
    """What `ReceivedMessage.from_stored` made of a StoredMessage before the lazy decoder (the
    body inflated within bounds since the fuzzer found unbounded and untyped inflation)."""
    body = inflate_body(stored.body) if stored.sys_flag & 0x1 else stored.body
    props = stored.properties
    return {
        "topic": stored.topic,
        "body": body,
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS") or None,  # RocketMQ's getKeys(): one str
        "properties": props,
        "msg_id": props.get("UNIQ_KEY", stored.msg_id),
        "offset_msg_id": stored.msg_id,
        "queue_id": stored.queue_id,
        "queue_offset": stored.queue_offset,
        "broker_name": broker_name,
        "store_timestamp": stored.store_timestamp,
        "born_timestamp": stored.born_timestamp,
        "reconsume_times": stored.reconsume_times,
        "commit_log_offset": stored.physical_offset,
        "store_host": f"{stored.store_host[0]}:{stored.store_host[1]}",
        "born_host": f"{stored.born_host[0]}:{stored.born_host[1]}",
        "sys_flag": stored.sys_flag,
        "flag": stored.flag,
    }


def old_decode(body: bytes) -> list[dict[str, object]]:
    return [old_fields(m, BROKER) for m in decode_records(body)]


def new_decode(body: bytes | bytearray | memoryview) -> list[dict[str, object]]:
    return [m.fields() for m in decode_received(body, BROKER)]


def outcome(decode: object, body: bytes) -> object:
    """The decoded fields, or the error as (type, args)."""
    try:
        return decode(body)  # type: ignore[operator]
    except Exception as exc:
        return (type(exc), exc.args)


@st.composite
def records(draw: st.DrawFn) -> bytes:
    compressed = draw(st.booleans())
    body = draw(st.binary(max_size=200))
    flags = draw(st.integers(0, 0x3FF)) & ~0x31  # host bits follow the hosts
    if compressed:
        body = zlib.compress(body) if draw(st.booleans()) else body  # or not inflatable
        flags |= 0x1
    return reference_record(
        queue_id=draw(INT32),
        flag=draw(INT32),
        queue_offset=draw(INT64),
        phy=draw(INT64),
        sys_flag=flags,
        born_ts=draw(INT64),
        born=draw(hosts),
        store_ts=draw(INT64),
        store=draw(hosts),
        reconsume=draw(INT32),
        prepared=draw(INT64),
        body=body,
        topic=draw(st.sampled_from([b"T", b"BenchSingle", "t\u00e9".encode(), b"\xff\xfe"])),
        props=draw(property_bytes),
    )


def damaged_body(bodies: list[bytes], damage: list[tuple[int, int]], cut: int) -> bytes:
    """`bodies` joined, bytes overwritten at `damage`, maybe cut short by a few bytes."""
    body = bytearray(b"".join(bodies))
    for at, value in damage:
        body[at % len(body)] = value
    # lengths are where damage matters most: hit the first record's size fields too
    if damage:
        struct.pack_into(">i", body, 0, damage[0][0] % (len(body) + 8))
    return bytes(body[: len(body) - cut % 4 if cut % 3 else len(body)])


@settings(max_examples=300, deadline=None)
@given(bodies=st.lists(records(), max_size=6))
def test_decode_equals_the_old_decoding_on_random_records(bodies: list[bytes]) -> None:
    body = b"".join(bodies)
    assert outcome(new_decode, body) == outcome(old_decode, body)
    assert outcome(new_decode, memoryview(body)) == outcome(old_decode, body)


@settings(max_examples=400, deadline=None)
@given(
    bodies=st.lists(records(), min_size=1, max_size=4),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 10_000),
)
def test_damaged_bodies_give_the_same_errors(
    bodies: list[bytes], damage: list[tuple[int, int]], cut: int
) -> None:
    damaged = damaged_body(bodies, damage, cut)
    assert outcome(new_decode, damaged) == outcome(old_decode, damaged)


@given(ip=st.ip_addresses(v=4).map(str), port=st.integers(-(2**31), 2**31 - 1))
def test_unpack_host_of_ipv4_equals_ipaddress(ip: str, port: int) -> None:
    raw = ipaddress.ip_address(ip).packed + struct.pack(">i", port)
    assert unpack_host(raw) == (ip, port)
    assert unpack_host(memoryview(raw)) == (ip, port)


def _one(props: dict[str, str]) -> ReceivedMessage:
    record = reference_record(
        queue_id=3,
        flag=0,
        queue_offset=7,
        phy=1234,
        sys_flag=0,
        born_ts=1,
        born=("10.0.0.1", 5),
        store=("10.0.0.2", 10911),
        store_ts=2,
        reconsume=0,
        prepared=0,
        body=b"hello",
        topic=b"T",
        props=encode_properties(props).encode(),
    )
    (msg,) = decode_received(record, BROKER)
    return msg


def test_received_message_is_frozen_and_replace_keeps_the_rest() -> None:
    msg = _one({"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "ID"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.topic = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del msg.body
    moved = msg.replace(topic="U", reconsume_times=2)
    assert (moved.topic, moved.reconsume_times, msg.topic, msg.reconsume_times) == ("U", 2, "T", 0)
    assert (moved.tags, moved.keys, moved.msg_id) == ("a", "k1 k2", "ID")
    assert moved.key_list == ["k1", "k2"]
    assert moved.store_host == "10.0.0.2:10911" and moved.born_host == "10.0.0.1:5"
    assert moved.replace(topic="T", reconsume_times=0) == msg
    with pytest.raises(TypeError):
        msg.replace(_properties={})
    assert "msg_id='ID'" in repr(msg)


def test_msg_id_falls_back_to_the_offset_msg_id() -> None:
    msg = _one({"TAGS": "a"})
    assert msg.msg_id == msg.offset_msg_id == "0A00000200002A9F00000000000004D2"
    assert msg.keys is None and msg.delay_level == 0


def test_keyword_constructor_holds_what_it_is_given() -> None:
    fields = _one({"UNIQ_KEY": "ID"}).fields()
    built = ReceivedMessage(**fields)  # type: ignore[arg-type]
    assert built.fields() == fields and built == _one({"UNIQ_KEY": "ID"})


def test_pull_result_received_from_decoded_messages_or_raw_body() -> None:
    record = reference_record(
        queue_id=1,
        flag=0,
        queue_offset=0,
        phy=0,
        sys_flag=0,
        born_ts=0,
        born=("::1", 1),
        store=("127.0.0.1", 2),
        store_ts=0,
        reconsume=0,
        prepared=0,
        body=b"b",
        topic=b"T",
        props=b"TAGS\x01x\x02",
    )
    raw = PullResult(PullStatus.FOUND, 1, 0, 1, 0, [], record)
    decoded = PullResult(PullStatus.FOUND, 1, 0, 1, 0, decode_records(record))
    assert raw.received(BROKER) == decoded.received(BROKER)
    assert [m.tags for m in raw.received(BROKER)] == ["x"]


def test_pickle_and_copy_give_an_equal_message() -> None:
    msg = _one({"TAGS": "a", "UNIQ_KEY": "ID"})
    for copied in (pickle.loads(pickle.dumps(msg)), copy.copy(msg), copy.deepcopy(msg)):
        assert copied == msg and copied.fields() == msg.fields()
        assert isinstance(copied, ReceivedMessage)


# --- the compiled twin (client/consumer/_received.pyx) ----------------------------------------

RECEIVED_KEY = "tidemq.client.consumer.received.decode_received"


def twin_outcome(decode: object, body: object) -> object:
    """Every field of every message (the raw ones too), or the error as (type, args)."""
    try:
        messages = decode(body, BROKER)  # type: ignore[operator]
    except Exception as exc:
        return (type(exc), exc.args)
    return [
        (type(m), {name: getattr(m, name) for name in _ReceivedFields.__slots__}) for m in messages
    ]


def common_record(
    queue_id: int, queue_offset: int, body: bytes, topic: bytes, props: bytes
) -> bytes:
    """A record as brokers hold most: IPv4 hosts, an uncompressed body."""
    return reference_record(
        queue_id=queue_id,
        flag=0,
        queue_offset=queue_offset,
        phy=queue_offset * 1000,
        sys_flag=0,
        born_ts=1,
        born=("10.0.0.1", 1234),
        store_ts=2,
        store=("10.0.0.2", 10911),
        reconsume=0,
        prepared=0,
        body=body,
        topic=topic,
        props=props,
    )


def test_the_compiled_decoder_is_selected() -> None:
    assert selected(RECEIVED_KEY) is _received.decode_received
    assert speedups.PURE_TWINS[RECEIVED_KEY] is not _received.decode_received


@settings(max_examples=300, deadline=None)
@given(bodies=st.lists(records(), max_size=6))
def test_the_twins_decode_records_the_same(bodies: list[bytes]) -> None:
    body = b"".join(bodies)
    pure = speedups.PURE_TWINS[RECEIVED_KEY]
    for data in (body, bytearray(body), memoryview(body)):
        assert twin_outcome(_received.decode_received, data) == twin_outcome(pure, data)


@settings(max_examples=400, deadline=None)
@given(
    bodies=st.lists(records(), min_size=1, max_size=4),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 10_000),
)
def test_the_twins_fail_the_same_on_damaged_bodies(
    bodies: list[bytes], damage: list[tuple[int, int]], cut: int
) -> None:
    damaged = damaged_body(bodies, damage, cut)
    pure = speedups.PURE_TWINS[RECEIVED_KEY]
    assert twin_outcome(_received.decode_received, damaged) == twin_outcome(pure, damaged)


def test_common_records_are_read_by_the_compiled_loop_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_args: object) -> int:
        raise AssertionError("a common record handed to _general")

    common = [
        common_record(
            q, q * 7, b"x" * q, topic, encode_properties({"TAGS": "t", "KEYS": str(q)}).encode()
        )
        for q, topic in enumerate([b"A", b"A", b"BB", "t\u00e9".encode(), b"\xff"])
    ]
    body = b"".join(common)
    expected = twin_outcome(speedups.PURE_TWINS[RECEIVED_KEY], body)
    monkeypatch.setattr("tidemq.client.consumer.received._general", refuse)
    assert twin_outcome(_received.decode_received, body) == expected


def test_the_compiled_decoder_leaves_no_reference_behind() -> None:
    """It fills the message's slots itself: each value is held once per message, and dropping
    the messages releases every one of them."""
    broker = "".join(["broker-", "refcounted"])  # a string of its own, not interned
    body = b"".join(common_record(1, offset, b"payload", b"T", b"") for offset in range(50))
    before = sys.getrefcount(broker), sys.getrefcount(UNSET)
    messages = _received.decode_received(body, broker)
    assert sys.getrefcount(broker) == before[0] + 50
    assert sys.getrefcount(UNSET) == before[1] + 50 * 7
    assert [m.queue_offset for m in messages] == list(range(50))
    # nothing a message holds can refer back to it: the cyclic collector need not walk them
    assert not any(gc.is_tracked(m) for m in messages)
    del messages
    assert (sys.getrefcount(broker), sys.getrefcount(UNSET)) == before
