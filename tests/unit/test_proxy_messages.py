"""A 5.x client's Message as the store keeps it (broker/proxy/messages.py), and the queues of a
route (broker/proxy/routes.py): sans-IO, no server."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.proxy.messages import Limits, delay_level, from_store, to_store
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Broker,
    Code,
    DigestType,
    Encoding,
    Message,
    MessageType,
    Permission,
    Resource,
)
from tidemq.broker.proxy.routes import assignments, message_queues
from tidemq.broker.proxy.status import Rejected, put_status_code
from tidemq.client.protocol.models import TopicConfig
from tidemq.store.commitlog import PutStatus
from tidemq.store.record import MessageToStore, StoredMessage, encode_properties
from tidemq.store.timer_message import TimerLimits, park_timer

LEVELS = (1000, 5000, 10_000, 60_000)
LIMITS = Limits(max_body_size=1024, delay_levels=LEVELS)
# google.protobuf.Timestamp's range (0001-01-01 to 9999-12-31)
TIMESTAMP_MIN_SECONDS, TIMESTAMP_MAX_SECONDS = -62_135_596_800, 253_402_300_799
NOW = 1_700_000_000_000


def message(body: bytes = b"hello", kind: MessageType.ValueType = MessageType.NORMAL) -> Message:
    built = Message(topic=Resource(name="T"), body=body)
    built.system_properties.message_id = "id-1"
    built.system_properties.message_type = kind
    return built


def refused(sent: Message) -> Rejected:
    with pytest.raises(Rejected) as caught:
        to_store(sent, LIMITS, NOW)
    return caught.value


def test_delay_levels_never_deliver_early() -> None:
    assert delay_level(0, LEVELS) == 0  # the time has come: at once
    assert delay_level(-5, LEVELS) == 0
    assert delay_level(1, LEVELS) == 1
    assert delay_level(1000, LEVELS) == 1
    assert delay_level(1001, LEVELS) == 2
    assert delay_level(60_000, LEVELS) == 4
    with pytest.raises(Rejected) as caught:
        delay_level(60_001, LEVELS)
    assert caught.value.code == Code.ILLEGAL_DELIVERY_TIME and "60000 ms" in caught.value.message


@given(st.integers(min_value=1, max_value=60_000))
def test_the_chosen_level_is_the_shortest_not_shorter_than_the_wait(wait: int) -> None:
    level = delay_level(wait, LEVELS)
    assert LEVELS[level - 1] >= wait
    assert level == 1 or LEVELS[level - 2] < wait


def test_without_the_timer_wheel_a_delayed_message_carries_its_level_alone() -> None:
    sent = message(kind=MessageType.DELAY)
    sent.system_properties.delivery_timestamp.FromMilliseconds(NOW + 4000)
    stored = to_store(sent, LIMITS, NOW)
    assert stored.properties["DELAY"] == "2"
    assert "TIMER_DELIVER_MS" not in stored.properties


@pytest.mark.parametrize("ahead_ms", [0, -5000])
def test_without_the_timer_wheel_a_message_whose_time_has_come_is_stored_at_once(
    ahead_ms: int,
) -> None:
    """Found in review: its TIMER_DELIVER_MS, with no level, made the store refuse it
    (WHEEL_TIMER_NOT_ENABLE, answered INTERNAL_SERVER_ERROR)."""
    sent = message(kind=MessageType.DELAY)
    sent.system_properties.delivery_timestamp.FromMilliseconds(NOW + ahead_ms)
    outgoing = to_store(sent, LIMITS, NOW)
    stored = MessageToStore("T", 0, outgoing.body, encode_properties(outgoing.properties))
    assert park_timer(stored, NOW, TimerLimits(enabled=False)) is None
    assert stored.topic == "T" and "DELAY" not in outgoing.properties


def test_with_the_timer_wheel_a_delayed_message_carries_its_time_alone() -> None:
    wheel = Limits(max_body_size=1024, delay_levels=LEVELS, timer_max_delay_ms=259_200_000)
    sent = message(kind=MessageType.DELAY)
    sent.system_properties.delivery_timestamp.FromMilliseconds(NOW + 3_600_000)
    stored = to_store(sent, wheel, NOW)
    assert "DELAY" not in stored.properties
    assert stored.properties["TIMER_DELIVER_MS"] == str(NOW + 3_600_000)
    sent.system_properties.delivery_timestamp.FromMilliseconds(NOW + 259_200_001)
    with pytest.raises(Rejected) as refused:
        to_store(sent, wheel, NOW)
    assert refused.value.code == Code.ILLEGAL_DELIVERY_TIME
    assert "timerMaxDelaySec (259200 s)" in str(refused.value)


def test_gzip_bodies_are_stored_inflated_within_the_size_limit() -> None:
    sent = message(gzip.compress(b"a" * 1000))
    sent.system_properties.body_encoding = Encoding.GZIP
    assert to_store(sent, LIMITS, NOW).body == b"a" * 1000
    bomb = message(gzip.compress(b"a" * 100_000))
    bomb.system_properties.body_encoding = Encoding.GZIP
    assert refused(bomb).code == Code.MESSAGE_BODY_TOO_LARGE
    cut = message(gzip.compress(b"a" * 1000)[:-12])
    cut.system_properties.body_encoding = Encoding.GZIP
    assert refused(cut).code == Code.MESSAGE_CORRUPTED


@pytest.mark.parametrize(
    ("kind", "digest"),
    [
        (DigestType.CRC32, f"{zlib.crc32(b'hello'):08X}"),
        (DigestType.MD5, hashlib.md5(b"hello").hexdigest()),
        (DigestType.SHA1, hashlib.sha1(b"hello").hexdigest().upper()),
    ],
)
def test_a_body_digest_is_checked(kind: DigestType.ValueType, digest: str) -> None:
    sent = message()
    sent.system_properties.body_digest.type = kind
    sent.system_properties.body_digest.checksum = digest
    assert to_store(sent, LIMITS, NOW).body == b"hello"
    sent.body = b"hellO"
    assert refused(sent).code == Code.MESSAGE_CORRUPTED


def test_user_properties_are_bounded() -> None:
    many = message()
    for i in range(129):
        many.user_properties[f"k{i}"] = "v"
    assert refused(many).code == Code.MESSAGE_PROPERTIES_TOO_LARGE
    large = message()
    large.user_properties["k"] = "v" * 20_000
    assert refused(large).code == Code.MESSAGE_PROPERTIES_TOO_LARGE
    large.user_properties["k"] = "v" * 1000
    assert to_store(large, LIMITS, NOW).properties["k"] == "v" * 1000


def test_a_message_group_is_checked_and_kept() -> None:
    sent = message(kind=MessageType.FIFO)
    sent.system_properties.message_group = "g" * 64
    assert refused(sent).code == Code.ILLEGAL_MESSAGE_GROUP
    sent.system_properties.message_group = "orders-7"
    stored = to_store(sent, LIMITS, NOW)
    assert (stored.message_group, stored.properties["__SHARDINGKEY"]) == ("orders-7", "orders-7")


def test_route_queues_split_by_permission_in_rocketmqs_order() -> None:
    broker = Broker(name="b", id=0)
    topic = Resource(name="T")
    queues = message_queues(topic, TopicConfig("T", 2, 3), 6, broker)
    assert [(q.id, q.permission) for q in queues] == [
        (0, Permission.WRITE),
        (1, Permission.READ_WRITE),
        (2, Permission.READ_WRITE),
    ]
    read_only = message_queues(topic, TopicConfig("T", 2, 3), 4, broker)
    assert [q.permission for q in read_only] == [Permission.READ] * 2
    closed = message_queues(topic, TopicConfig("T", 2, 3), 0, broker)
    assert [q.permission for q in closed] == [Permission.NONE] * 3
    assert not assignments(topic, TopicConfig("T", 2, 3), 2, broker, fifo=False)
    fifo = assignments(topic, TopicConfig("T", 2, 3), 6, broker, fifo=True)
    assert [a.message_queue.id for a in fifo] == [0, 1]


def test_the_stores_refusal_of_a_timer_message_names_the_delivery_time() -> None:
    """Found in review: the store's WHEEL_TIMER_* refusals were INTERNAL_SERVER_ERROR."""
    assert put_status_code(PutStatus.WHEEL_TIMER_MSG_ILLEGAL) == Code.ILLEGAL_DELIVERY_TIME
    assert put_status_code(PutStatus.WHEEL_TIMER_FLOW_CONTROL) == Code.TOO_MANY_REQUESTS


def test_a_born_timestamp_no_timestamp_can_hold_is_refused() -> None:
    """Stored, it would be handed to 5.x consumers as a Timestamp out of range (the gRPC fuzzer
    found each receive of it failing with INTERNAL_SERVER_ERROR)."""
    for seconds, nanos in ((315_576_000_000, 0), (-(2**62), 0), (1, -1), (1, 10**9)):
        sent = message()
        sent.system_properties.born_timestamp.seconds = seconds
        sent.system_properties.born_timestamp.nanos = nanos
        assert refused(sent).code == Code.BAD_REQUEST
    sent = message()
    sent.system_properties.born_timestamp.FromMilliseconds(NOW - 5)
    assert to_store(sent, LIMITS, NOW).born_timestamp == NOW - 5


@pytest.mark.parametrize("born", [2**63 - 1, -(2**63), 315_576_000_000_000, 0, NOW])
def test_any_stored_born_time_becomes_a_valid_timestamp(born: int) -> None:
    """A 4.x producer stores any 64-bit born time; a 5.x consumer is still handed the
    message, its times clamped into what a Timestamp holds."""
    stored = StoredMessage(
        total_size=100,
        body_crc=0,
        queue_id=0,
        flag=0,
        queue_offset=3,
        physical_offset=1234,
        sys_flag=0,
        born_timestamp=born,
        born_host=("10.0.0.9", 5555),
        store_timestamp=born,
        store_host=("10.0.0.1", 10911),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=b"x",
        topic="T",
        properties={"UNIQ_KEY": "U1"},
    )
    out = from_store(stored)
    for stamp in (out.system_properties.born_timestamp, out.system_properties.store_timestamp):
        assert TIMESTAMP_MIN_SECONDS <= stamp.seconds <= TIMESTAMP_MAX_SECONDS
        stamp.ToJsonString()  # raises for a Timestamp out of range
    if 0 <= born <= NOW:
        assert out.system_properties.born_timestamp.ToMilliseconds() == born


def test_a_received_message_carries_the_md5_digest_every_official_client_accepts() -> None:
    """MD5 in upper-case hex, as RocketMQ's proxy answers: the Python client compares CRC32 as
    8 hex digits and the Node.js client as a decimal number, so no CRC32 text suits both (the
    Node.js push consumer dropped every message with the hex one)."""
    body = b"\x00digest me"
    stored = StoredMessage(
        total_size=100,
        body_crc=0,
        queue_id=0,
        flag=0,
        queue_offset=3,
        physical_offset=1234,
        sys_flag=0,
        born_timestamp=NOW,
        born_host=("10.0.0.9", 5555),
        store_timestamp=NOW,
        store_host=("10.0.0.1", 10911),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic="T",
        properties={"UNIQ_KEY": "U1"},
    )
    digest = from_store(stored).system_properties.body_digest
    assert digest.type == DigestType.MD5
    assert digest.checksum == hashlib.md5(body).hexdigest().upper()
