"""CommitLog records (store/record.py): RocketMQ's v1 layout, byte for byte.

Expected bytes are built with struct from the field table of RocketMQ's
`CommitLog.MessageExtEncoder` (tests/support/records.py), never with the module under test, so a
shared mistake cannot hide.
"""

from __future__ import annotations

import ipaddress
import random
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.records import host_bytes, reference_record
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.commitlog import AppendResult, CommitLog, PutStatus
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    BLANK,
    INVALID,
    MessageBatch,
    MessageToStore,
    RecordFormatError,
    body_crc,
    check_record,
    decode_message_id,
    decode_record,
    encode_blank,
    encode_properties,
    encode_record,
    message_id,
    pack_host,
    pack_record,
    record_length,
    scan_record,
    stamp_record,
)
from tidemq.store.segment_queue import SegmentQueue

MiB = 1024 * 1024
MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def encode_stamped(
    msg: MessageToStore, queue_offset: int, phy: int, store_ts: int, max_body: int = 4 * MiB
) -> bytes:
    encoded = encode_record(msg, max_body)
    stamp_record(encoded.data, 0, encoded.store_ts_at, queue_offset, phy, store_ts)
    return bytes(encoded.data)


# --- fixed layout ----------------------------------------------------------------------------


def test_fixed_overhead_is_91_bytes_with_ipv4_and_115_with_ipv6() -> None:
    fixed = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2
    assert fixed == 91
    assert record_length(0, 0, 0, 0) == 91
    assert record_length(0x10 | 0x20, 0, 0, 0) == 91 + 12 + 12
    assert record_length(0x10, 5, 3, 7) == 91 + 12 + 15
    one = MessageToStore("T", 0, b"")
    assert len(encode_record(one, 1024).data) == 92  # one topic byte


def test_one_record_byte_for_byte() -> None:
    props = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABCDEF"})
    msg = MessageToStore(
        topic="TopicTest",
        queue_id=3,
        body=b"Hello RocketMQ",
        properties=props,
        flag=0x55,
        sys_flag=0x8,  # COMMIT
        born_timestamp=1_700_000_000_123,
        born_host=host_bytes("10.1.2.3", 51000),
        store_host=host_bytes("192.168.0.7", 10911),
        reconsume_times=2,
        prepared_transaction_offset=4242,
    )
    got = encode_stamped(msg, queue_offset=17, phy=123_456, store_ts=1_700_000_000_999)
    expected = reference_record(
        queue_id=3,
        flag=0x55,
        queue_offset=17,
        phy=123_456,
        sys_flag=0x8,
        born_ts=1_700_000_000_123,
        born=("10.1.2.3", 51000),
        store_ts=1_700_000_000_999,
        store=("192.168.0.7", 10911),
        reconsume=2,
        prepared=4242,
        body=b"Hello RocketMQ",
        topic=b"TopicTest",
        props=props.encode(),
    )
    assert got == expected
    assert len(got) == 91 + len(b"Hello RocketMQ") + len(b"TopicTest") + len(props.encode())
    # Field offsets RocketMQ's readers use directly (IPv4 hosts).
    assert struct.unpack_from(">I", got, 4)[0] == MAGIC
    assert struct.unpack_from(">i", got, 16)[0] == 0x55
    assert struct.unpack_from(">q", got, 20)[0] == 17
    assert struct.unpack_from(">q", got, 28)[0] == 123_456
    assert struct.unpack_from(">i", got, 36)[0] == 0x8
    assert struct.unpack_from(">q", got, 40)[0] == 1_700_000_000_123
    assert struct.unpack_from(">q", got, 56)[0] == 1_700_000_000_999
    assert struct.unpack_from(">i", got, 8)[0] == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF
    # Properties: name\x01value\x02 repeated, trailing \x02.
    assert got.endswith(b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABCDEF\x02")


def test_ipv6_hosts_set_sys_flag_bits_and_shift_store_timestamp() -> None:
    born = host_bytes("2001:db8::1", 40000)
    store = host_bytes("fe80::1234:5678", 10911)
    msg = MessageToStore("T6", 1, b"x", born_host=born, store_host=host_bytes("1.2.3.4", 1))
    got = encode_stamped(msg, 0, 0, 77)
    assert struct.unpack_from(">i", got, 36)[0] == 0x10
    assert struct.unpack_from(">q", got, 48 + 20)[0] == 77  # store ts after a 20-byte born host
    msg = MessageToStore("T6", 1, b"x", born_host=host_bytes("1.2.3.4", 1), store_host=store)
    got = encode_stamped(msg, 0, 0, 77)
    assert struct.unpack_from(">i", got, 36)[0] == 0x20
    assert len(got) == 91 + 12 + 1 + 2
    # A caller's stale host bits are replaced by what the hosts really are.
    msg = MessageToStore("T6", 1, b"x", sys_flag=0x30 | 0x1, born_host=born, store_host=store)
    assert struct.unpack_from(">i", encode_stamped(msg, 0, 0, 77), 36)[0] == 0x31
    msg = MessageToStore("T6", 1, b"x", sys_flag=0x30 | 0x1)
    assert struct.unpack_from(">i", encode_stamped(msg, 0, 0, 77), 36)[0] == 0x1


def test_body_crc_is_zlib_crc32_masked_to_31_bits() -> None:
    rng = random.Random(7)
    for body in [b"", b"a", rng.randbytes(1000), b"\xff" * 64]:
        assert body_crc(body) == zlib.crc32(body) & 0x7FFFFFFF
        assert 0 <= body_crc(body) < 2**31
    # A body whose CRC has the top bit set: the mask matters.
    high = next(b for b in (bytes([i]) * 3 for i in range(256)) if zlib.crc32(b) >= 2**31)
    assert body_crc(high) == zlib.crc32(high) - 2**31


# --- round trips ----------------------------------------------------------------------------

TEXT = st.characters(blacklist_categories=("Cs",))  # any code point UTF-8 can encode
PROP_TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")

# A topic ending in NUL is refused when there are no properties (record.RecordEndsInNulError).
topics = st.text(TEXT, min_size=1, max_size=60).filter(
    lambda t: len(t.encode()) <= 127 and not t.endswith("\x00")
)
property_maps = st.dictionaries(
    st.text(PROP_TEXT, min_size=1, max_size=12), st.text(PROP_TEXT, max_size=40), max_size=6
)
hosts = st.tuples(st.ip_addresses().map(str), st.integers(0, 65535))
# Every sysFlag bit RocketMQ defines, transaction types included; host bits come from the hosts.
sys_flags = st.builds(
    lambda bits, tran: (bits & ~0x3C) | tran,
    st.integers(0, 0x3FF),
    st.sampled_from([0x0, 0x4, 0x8, 0xC]),
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["small", "empty", "max"]))
    if kind == "empty":
        return b""
    if kind == "max":
        return random.Random(draw(st.integers(0, 3))).randbytes(4 * MiB)
    return draw(st.binary(max_size=300))


@settings(max_examples=60, deadline=None)
@given(
    topic=topics,
    queue_id=INT32,
    flag=INT32,
    sys_flag=sys_flags,
    born_ts=INT64,
    store_ts=INT64,
    born=hosts,
    store=hosts,
    reconsume=INT32,
    prepared=INT64,
    queue_offset=INT64,
    phy=INT64,
    body=bodies(),
    props=property_maps,
)
def test_round_trip_every_field(
    topic: str,
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_ts: int,
    store_ts: int,
    born: tuple[str, int],
    store: tuple[str, int],
    reconsume: int,
    prepared: int,
    queue_offset: int,
    phy: int,
    body: bytes,
    props: dict[str, str],
) -> None:
    properties = encode_properties(props)
    msg = MessageToStore(
        topic=topic,
        queue_id=queue_id,
        body=body,
        properties=properties,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=pack_host(*born),
        store_host=pack_host(*store),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
    )
    data = encode_stamped(msg, queue_offset, phy, store_ts)
    # a single put packs its record already stamped: the same bytes
    assert pack_record(msg, check_record(msg, 4 * MiB), queue_offset, phy, store_ts) == data
    expected_flag = sys_flag | (0x10 if ":" in born[0] else 0) | (0x20 if ":" in store[0] else 0)
    expected_bytes = reference_record(
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        phy=phy,
        sys_flag=sys_flag,
        born_ts=born_ts,
        born=born,
        store_ts=store_ts,
        store=store,
        reconsume=reconsume,
        prepared=prepared,
        body=body,
        topic=topic.encode(),
        props=properties.encode(),
    )
    assert data == expected_bytes
    got = decode_record(data)
    assert got.total_size == len(data)
    assert got.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    assert got.queue_id == queue_id
    assert got.flag == flag
    assert got.queue_offset == queue_offset
    assert got.physical_offset == phy
    assert got.sys_flag == expected_flag
    assert got.born_timestamp == born_ts
    assert got.born_host == (str(ipaddress.ip_address(born[0])), born[1])
    assert got.store_timestamp == store_ts
    assert got.store_host == (str(ipaddress.ip_address(store[0])), store[1])
    assert got.reconsume_times == reconsume
    assert got.prepared_transaction_offset == prepared
    assert got.body == body
    assert got.topic == topic
    assert got.properties == props
    assert got.tags == props.get("TAGS")
    # The dispatch path's summary agrees with the full decoder.
    info = scan_record(data, 0, check_crc=True)
    assert (info.size, info.topic, info.queue_id) == (len(data), topic, queue_id)
    assert (info.queue_offset, info.physical_offset) == (queue_offset, phy)
    assert (info.sys_flag, info.store_timestamp) == (expected_flag, store_ts)
    assert info.properties == properties.encode()


def test_round_trip_inside_a_larger_buffer_at_an_offset() -> None:
    a = encode_stamped(MessageToStore("A", 0, b"first"), 0, 100, 5)
    b = encode_stamped(MessageToStore("B", 1, b"second"), 0, 100 + len(a), 6)
    buf = b"\x00" * 100 + a + b + encode_blank(50) + b"\x00" * 42
    assert decode_record(buf, 100).body == b"first"
    assert decode_record(buf, 100 + len(a)).topic == "B"
    assert scan_record(buf, 100 + len(a) + len(b), check_crc=True) is BLANK


def test_exact_limits_are_accepted() -> None:
    topic = "\u00e9" * 63 + "a"  # 127 UTF-8 bytes, 64 characters
    assert len(topic.encode()) == 127
    props = "k\x01" + "v" * (32767 - 3) + "\x02"
    assert len(props.encode()) == 32767
    data = encode_stamped(MessageToStore(topic, 0, b"\x00" * (4 * MiB), props), 0, 0, 0)
    got = decode_record(data)
    assert got.topic == topic
    assert len(got.body) == 4 * MiB
    assert got.properties == {"k": "v" * 32764}


# --- corruption is detected -------------------------------------------------------------------


def test_decoder_rejects_bad_magic_crc_and_truncation() -> None:
    data = bytearray(encode_stamped(MessageToStore("T", 0, b"payload", "TAGS\x01a\x02"), 0, 0, 1))
    decode_record(data)
    bad_magic = bytearray(data)
    bad_magic[5] ^= 0xFF
    with pytest.raises(RecordFormatError, match="magic"):
        decode_record(bad_magic)
    assert scan_record(bad_magic, 0, check_crc=False) is INVALID
    bad_body = bytearray(data)
    bad_body[data.index(b"payload")] ^= 0x01
    with pytest.raises(RecordFormatError, match="CRC"):
        decode_record(bad_body)
    assert scan_record(bad_body, 0, check_crc=True) is INVALID
    assert scan_record(bad_body, 0, check_crc=False).size == len(data)
    for cut in (4, 30, len(data) - 1):
        with pytest.raises(RecordFormatError):
            decode_record(data[:cut])
        assert scan_record(data[:cut], 0, check_crc=True) is INVALID
    wrong_total = bytearray(data)
    struct.pack_into(">i", wrong_total, 0, len(data) - 1)
    with pytest.raises(RecordFormatError):
        decode_record(wrong_total)
    assert scan_record(wrong_total, 0, check_crc=True) is INVALID


def test_blank_marker_layout() -> None:
    assert encode_blank(1234) == struct.pack(">iI", 1234, BLANK_MAGIC)
    assert scan_record(encode_blank(8) + b"\x00" * 8, 0, check_crc=True) is BLANK


# --- message ids ----------------------------------------------------------------------------


def test_message_id_is_uppercase_hex_of_store_host_and_offset() -> None:
    store = host_bytes("192.168.0.7", 10911)
    got = message_id(store, 0x1234_5678_9ABC)
    assert got == "C0A80007" + "00002A9F" + "000012345678" + "9ABC".rjust(4, "0")
    assert got == f"{0xC0A80007:08X}{10911:08X}{0x123456789ABC:016X}"
    assert decode_message_id(got) == (("192.168.0.7", 10911), 0x123456789ABC)


@given(host=hosts, phy=st.integers(0, 2**63 - 1))
def test_message_id_round_trip(host: tuple[str, int], phy: int) -> None:
    raw = host_bytes(*host)
    msg_id = message_id(raw, phy)
    assert msg_id == (raw + struct.pack(">q", phy)).hex().upper()
    assert len(msg_id) == (32 if len(raw) == 8 else 56)
    assert decode_message_id(msg_id) == ((str(ipaddress.ip_address(host[0])), host[1]), phy)
    assert decode_message_id(msg_id.lower()) == decode_message_id(msg_id)


@pytest.mark.parametrize("bad", ["", "ABC", "00" * 15, "00" * 17, "ZZ" * 16])
def test_malformed_message_id(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_message_id(bad)


def test_stored_message_msg_id_matches_its_position() -> None:
    store = host_bytes("10.0.0.9", 10911)
    data = encode_stamped(MessageToStore("T", 0, b"x", store_host=store), 0, 987_654, 1)
    assert decode_record(data).msg_id == message_id(store, 987_654)


# --- limits through CommitLog.put and MessageStore.put_message ------------------------------


@pytest.fixture
def big_commitlog(tmp_path: Path) -> Iterator[CommitLog]:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=8 * MiB + 4096
    )
    segments = SegmentQueue(config.commit_log_dir, config.mapped_file_size_commit_log)
    segments.load()
    yield CommitLog(config, segments)
    segments.close()


def _put_expect(log: CommitLog, msg: MessageToStore, status: PutStatus) -> None:
    before = (log.segments.max_wrote_offset, dict(log.topic_queue_table))
    result = log.put(msg)
    assert result.status is status, result.remark
    assert result.remark
    assert (log.segments.max_wrote_offset, log.topic_queue_table) == before


def test_commitlog_put_limits(big_commitlog: CommitLog) -> None:
    log = big_commitlog
    _put_expect(log, MessageToStore("T", 0, b"\x00" * (4 * MiB + 1)), PutStatus.MESSAGE_ILLEGAL)
    _put_expect(log, MessageToStore("\u00e9" * 64, 0, b"x"), PutStatus.MESSAGE_ILLEGAL)
    _put_expect(log, MessageToStore("a" * 128, 0, b"x"), PutStatus.MESSAGE_ILLEGAL)
    _put_expect(log, MessageToStore("", 0, b"x"), PutStatus.MESSAGE_ILLEGAL)
    props = "k\x01" + "v" * 32765 + "\x02"  # 32768 bytes
    _put_expect(log, MessageToStore("T", 0, b"x", props), PutStatus.PROPERTIES_SIZE_EXCEEDED)
    # A batch with one bad message is refused whole: its own 32767 bytes plus the batch's.
    body = encode_batch_body([(0, b"ok", ""), (0, b"x", props[:-2] + "\x02")])
    refused = log.encode_message_batch(MessageBatch("T", 0, body, "CLUSTER\x01C\x02"))
    assert isinstance(refused, AppendResult)
    assert refused.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert log.segments.max_wrote_offset == 0
    # The limits themselves are accepted.
    ok = log.put(MessageToStore("T", 0, b"\x00" * (4 * MiB)))
    assert ok.status is PutStatus.PUT_OK
    ok = log.put(MessageToStore("\u00e9" * 63 + "a", 0, b"x", props[:-2] + "\x02"))
    assert ok.status is PutStatus.PUT_OK
    assert log.topic_queue_table == {"T-0": 1, "\u00e9" * 63 + "a-0": 1}


async def test_message_store_put_limits(tmp_path: Path) -> None:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        mapped_file_size_commit_log=128 * 1024,
        max_message_size=1024,
        message_index_enable=False,
    )
    store = MessageStore(config)
    store.load()
    try:
        cases: list[tuple[dict[str, Any], PutStatus]] = [
            ({"topic": "T", "body": b"x" * 1025}, PutStatus.MESSAGE_ILLEGAL),
            ({"topic": "t" * 128, "body": b"x"}, PutStatus.MESSAGE_ILLEGAL),
            (
                {"topic": "T", "body": b"x", "properties": "a\x01" + "b" * 32765 + "\x02"},
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
            ),
        ]
        for fields, status in cases:
            result = await store.put_message(MessageToStore(queue_id=0, **fields))
            assert result.status is status
            assert not result.ok
        assert store.max_phy_offset == 0
        ok = await store.put_message(MessageToStore("T", 0, b"x" * 1024))
        assert ok.status is PutStatus.PUT_OK
        assert ok.append is not None and ok.append.queue_offset == 0
    finally:
        await store.stop()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.sampled_from([0, 1, 4 * MiB - 1, 4 * MiB, 4 * MiB + 1]))
def test_body_limit_boundary(size: int) -> None:
    msg = MessageToStore("T", 0, b"\x01" * size)
    if size > 4 * MiB:
        with pytest.raises(ValueError, match="exceeds"):
            encode_record(msg, 4 * MiB)
    else:
        assert decode_record(encode_stamped(msg, 0, 0, 0)).body == msg.body


@given(
    st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str),
    st.integers(0, 65535),
)
def test_pack_host_gives_the_same_bytes_again(ip: str, port: int) -> None:
    """pack_host keeps what it packed (per ip, port and their types): the same bytes as the
    first time, what ipaddress gives; bad input raises every time, never cached."""
    expected = ipaddress.ip_address(ip).packed + struct.pack(">i", port)
    assert pack_host(ip, port) == pack_host(ip, port) == expected
    for _ in range(2):
        with pytest.raises(ValueError):
            pack_host(ip + "x", port)
        with pytest.raises(struct.error):
            pack_host(ip, 2**40)
