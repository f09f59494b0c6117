"""CommitLog records in RocketMQ's v1 layout (4.x `CommitLog.MessageExtEncoder`), byte for byte.

The layout itself (the fields, their offsets and sizes, the sysFlag bits, the magic codes) is
store/layout.py, the one module every reader of records imports, Python and Cython alike.

`encode_batch` and `find_property` are the pure-Python twins of compiled ones in
store/_record.pyx, which run when built (store/common/speedups.py picks; same bytes and errors).
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple, NoReturn

from tidemq.common import speedups
from tidemq.common.errors import DecodeError, TideMQError
from tidemq.store.batch_body import BATCH_HEAD, decode_batch_body, read_batch_message
from tidemq.store.batch_body import HEAD_SIZE as BATCH_HEAD_SIZE
from tidemq.store.crc import crc32, java_crc32
from tidemq.store.layout import (
    BLANK_FORMAT,
    BLANK_MAGIC,
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    MAGIC_V1,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    OFFSET_BORN_HOST,
    OFFSET_QUEUE_OFFSET,
    OFFSET_SYS_FLAG,
    PREFIX_FORMAT,
)

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_WAIT: Final = "WAIT"
PROPERTY_DELAY: Final = "DELAY"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# The half queue offset of the first copy of a half message (a check re-puts a copy).
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROPERTY_CLUSTER: Final = "CLUSTER"

# Fields 1-9, i.e. everything before the born host.
_PREFIX = struct.Struct(PREFIX_FORMAT)
_TS = struct.Struct(">q")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_RECONSUME_PREPARED = struct.Struct(">iq")
_BLANK = struct.Struct(BLANK_FORMAT)


def host_length(sys_flag: int, store: bool) -> int:
    bit = FLAG_STOREHOST_V6 if store else FLAG_BORNHOST_V6
    return 20 if sys_flag & bit else 8


def store_timestamp_offset(sys_flag: int) -> int:
    return OFFSET_BORN_HOST + host_length(sys_flag, store=False)


def record_length(sys_flag: int, body_len: int, topic_len: int, properties_len: int) -> int:
    """RocketMQ's calMsgLength: the size of a record with these variable parts."""
    return (
        _PREFIX.size
        + host_length(sys_flag, store=False)
        + 8
        + host_length(sys_flag, store=True)
        + 4
        + 8
        + 4
        + body_len
        + 1
        + topic_len
        + 2
        + properties_len
    )


def body_crc(body: bytes | memoryview) -> int:
    return java_crc32(body)


# --- hosts -------------------------------------------------------------------------------


# Kept per (ip, port): a broker packs the few hosts of its clients and itself per message
# (a transaction's commit packs two), and ipaddress's parse costs 2-3 us each time.
@functools.lru_cache(maxsize=1024, typed=True)
def pack_host(ip: str, port: int) -> bytes:
    """`ip + port` as RocketMQ writes a socket address: 4 or 16 address bytes, then a 4-byte int."""
    return ipaddress.ip_address(ip).packed + _INT.pack(port)


def unpack_host(data: bytes | memoryview) -> tuple[str, int]:
    raw = bytes(data)
    if len(raw) == 8:  # IPv4, the usual case: what str(IPv4Address) gives, 20x cheaper
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}", _INT.unpack_from(raw, 4)[0]
    address = ipaddress.ip_address(raw[:-4])
    return str(address), _INT.unpack_from(raw, len(raw) - 4)[0]


def host_sys_flags(born_host: bytes, store_host: bytes) -> int:
    flags = 0
    if len(born_host) == 20:
        flags |= FLAG_BORNHOST_V6
    if len(store_host) == 20:
        flags |= FLAG_STOREHOST_V6
    return flags


def message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ's offsetMsgId: hex of the store host bytes followed by the physical offset."""
    return (store_host + physical_offset.to_bytes(8, "big", signed=True)).hex().upper()


message_id = speedups.select(message_id, "tidemq.store._record")


def decode_message_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """Split an offsetMsgId into (store host, physical offset); raises ValueError if malformed."""
    raw = _message_id_bytes(msg_id)
    return unpack_host(raw[:-8]), int.from_bytes(raw[-8:], "big", signed=True)


def decode_message_offset(msg_id: str) -> int:
    """The physical offset of an offsetMsgId (`decode_message_id`'s second part, without the
    host's decoding); raises ValueError if malformed."""
    return int.from_bytes(_message_id_bytes(msg_id)[-8:], "big", signed=True)


def _message_id_bytes(msg_id: str) -> bytes:
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"message id {msg_id!r} has {len(raw)} bytes, expected 16 or 28")
    return raw


# --- properties ----------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> str:
    # a list, not a generator: join() makes one of a generator first anyway
    return "".join(
        [
            f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
            for name, value in properties.items()
        ]
    )


def decode_properties(text: str) -> dict[str, str]:
    """Parse `name\\x01value\\x02...`; items without exactly one separator are skipped."""
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and NAME_VALUE_SEPARATOR not in value:
            result[name] = value
    return result


def with_property(text: str, name: str, value: str) -> str:
    """`text` with `name` set to `value`: what `encode_properties(decode_properties(text) |
    {name: value})` gives. Text as encode_properties writes it (every item a pair, no name
    twice) that lacks `name` gets the pair appended; any other text is decoded and re-encoded."""
    props = decode_properties(text)
    if name not in props and (
        not text
        or (text[-1] == PROPERTY_SEPARATOR and len(props) == text.count(PROPERTY_SEPARATOR))
    ):
        return f"{text}{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
    props[name] = value
    return encode_properties(props)


# The compiled twin checks the text in one pass, without the dict (every send sets CLUSTER).
with_property = speedups.select(with_property, "tidemq.store._record")


def find_property(properties: bytes | memoryview, name: bytes) -> bytes | None:
    """One property's raw value, without decoding the others (the dispatch hot path)."""
    data = bytes(properties)
    start = 0
    needle = name + b"\x01"
    while True:
        at = data.find(needle, start)
        if at < 0:
            return None
        if at == 0 or data[at - 1] == 0x02:
            begin = at + len(needle)
            end = data.find(b"\x02", begin)
            return data[begin : end if end >= 0 else len(data)]
        start = at + 1


find_property = speedups.select(find_property, "tidemq.store._record")


# --- encoding --------------------------------------------------------------------------------


@dataclass(slots=True)
class MessageToStore:
    """A message as the broker hands it to the store (RocketMQ's MessageExtBrokerInner).

    `properties` is the already encoded `name\\x01value\\x02` text; `tags_code` is what the
    ConsumeQueue unit will hold. Queue offset, physical offset and store time are assigned by the
    CommitLog under its put lock.
    """

    topic: str
    queue_id: int
    body: bytes
    properties: str = ""
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    # Filled once the CommitLog has stored the message.
    queue_offset: int = field(default=0)


@dataclass(slots=True)
class MessageBatch:
    """The messages of one SEND_BATCH_MESSAGE (RocketMQ's MessageExtBatch).

    `body` is the request body as the producer encoded it (`store.batch_body`): each message's
    flag, body and properties. `properties` are the batch's own (the request header's, with
    CLUSTER), which every record gets after the message's own, as RocketMQ's
    MessageExtBatchEncoder writes them: the message's property bytes as sent, a separator when
    they do not end with one, then the batch's. Nothing is decoded or merged; a name present in
    both stands twice, and a reader's map keeps the last (the batch's).
    """

    topic: str
    queue_id: int
    body: bytes | bytearray | memoryview
    properties: str = ""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def as_messages(self) -> list[MessageToStore]:
        """The same messages one by one (what `encode_batch` must encode them as).

        Raises BatchDecodeError for a malformed body.
        """
        shared = self.properties
        return [
            MessageToStore(
                topic=self.topic,
                queue_id=self.queue_id,
                body=body,
                properties=(
                    f"{own}{PROPERTY_SEPARATOR}{shared}"
                    if own and shared and not own.endswith(PROPERTY_SEPARATOR)
                    else own + shared
                ),
                flag=flag,
                sys_flag=self.sys_flag,
                born_timestamp=self.born_timestamp,
                born_host=self.born_host,
                store_host=self.store_host,
                reconsume_times=self.reconsume_times,
                prepared_transaction_offset=self.prepared_transaction_offset,
            )
            for flag, body, own in decode_batch_body(self.body)
        ]


class RecordTooLargeError(TideMQError, ValueError):
    """A limit is exceeded: MESSAGE_ILLEGAL, or PROPERTIES_SIZE_EXCEEDED when `properties`."""

    def __init__(self, reason: str, *, properties: bool = False) -> None:
        super().__init__(reason)
        self.properties = properties


class RecordEndsInNulError(RecordTooLargeError):
    """A record whose properties end in a NUL byte (its topic, when it has none), refused as
    MESSAGE_ILLEGAL like a broken limit: recovery takes a record ending so for one a power cut
    tore (`has_zeroed_tail`), so none may be written."""

    def __init__(self) -> None:
        super().__init__("message properties (the topic, without any) must not end with NUL")


@dataclass(slots=True)
class EncodedRecord:
    """A record encoded except for the three fields assigned at append time."""

    data: bytearray
    store_ts_at: int
    topic: str
    queue_id: int
    sys_flag: int


class RecordShape(NamedTuple):
    """What encoding a message needs beyond the message: its checked variable parts."""

    total: int
    sys_flag: int  # with the host flags its hosts call for
    topic: bytes
    properties: bytes


def check_record(msg: MessageToStore, max_body_size: int) -> RecordShape:
    """The shape of `msg`'s record, or RecordTooLargeError for a limit it breaks."""
    shape = _shape(msg)
    check_record_parts(
        len(msg.body), msg.sys_flag, shape.topic, shape.properties, shape.total, max_body_size
    )
    return shape


def _shape(msg: MessageToStore) -> RecordShape:
    """The shape of `msg`'s record, its limits not checked."""
    body = msg.body
    topic_bytes = msg.topic.encode()
    props = msg.properties.encode()
    sys_flag = msg.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)
    if len(msg.born_host) == 8 and len(msg.store_host) == 8:
        # record_length with IPv4 hosts, inline: this runs for every message
        total = _V4_FIXED_LENGTH + len(body) + len(topic_bytes) + len(props)
    else:
        sys_flag |= host_sys_flags(msg.born_host, msg.store_host)
        total = record_length(sys_flag, len(body), len(topic_bytes), len(props))
    return RecordShape(total, sys_flag, topic_bytes, props)


def record_total(msg: MessageToStore, max_body_size: int) -> int:
    """`check_record(msg, max_body_size).total`: the size of `msg`'s record, or
    RecordTooLargeError for a limit it breaks (a single put's check, made before it knows
    where the record goes; `pack_single` then packs it there)."""
    return check_record(msg, max_body_size).total


def pack_single(
    msg: MessageToStore, queue_offset: int, physical_offset: int, store_timestamp: int
) -> bytes:
    """The whole record of a message `record_total` accepted, append-time fields included:
    `pack_record(msg, check_record(msg, ...), ...)`, the bytes a single put writes."""
    return pack_record(msg, _shape(msg), queue_offset, physical_offset, store_timestamp)


def check_record_parts(
    body_len: int, sys_flag: int, topic: bytes, properties: bytes, total: int, max_body_size: int
) -> None:
    """A record's limits, checked from its parts (`check_record`'s, and those of the broker's
    own records built from bytes it stored: a transaction's commit): RecordTooLargeError for
    the first one broken (body, topic, properties, whole record)."""
    if body_len > max_body_size:
        # A compressed body is judged as stored: say so, the sender knows a different size.
        kind = "compressed message body" if sys_flag & FLAG_COMPRESSED else "message body"
        raise RecordTooLargeError(f"{kind} of {body_len} bytes exceeds {max_body_size}")
    if not topic or len(topic) > MAX_TOPIC_BYTES:
        raise RecordTooLargeError(f"topic must be 1-{MAX_TOPIC_BYTES} bytes")
    if len(properties) > MAX_PROPERTIES_BYTES:
        raise RecordTooLargeError(
            f"properties of {len(properties)} bytes exceed {MAX_PROPERTIES_BYTES}", properties=True
        )
    if total > max_body_size + 64 * 1024:
        raise RecordTooLargeError(f"record of {total} bytes exceeds body limit + 64 KiB")
    if (properties or topic)[-1:] == b"\0":
        raise RecordEndsInNulError()


_V4_FIXED_LENGTH: Final = record_length(0, 0, 0, 0)
# A record up to its body, in one pack, by (born host, store host) length (IPv4 8, IPv6 20):
# fields 1-9, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET,
# BODYLENGTH.
_HEADS: Final = {
    (born, store): struct.Struct(f">iiiiiqqiq{born}sq{store}siqi")
    for born in (8, 20)
    for store in (8, 20)
}


def pack_record(
    msg: MessageToStore,
    shape: RecordShape,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
) -> bytes:
    """The whole record of `msg`, append-time fields included (what a single put writes)."""
    body = msg.body
    topic, props = shape.topic, shape.properties
    born_host, store_host = msg.born_host, msg.store_host
    head_struct = _HEADS.get((len(born_host), len(store_host)))
    if head_struct is None:
        raise ValueError(f"hosts of {len(born_host)} and {len(store_host)} bytes: not 8 or 20")
    head = head_struct.pack(
        shape.total,
        MAGIC_V1,
        java_crc32(body),
        msg.queue_id,
        msg.flag,
        queue_offset,
        physical_offset,
        shape.sys_flag,
        msg.born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(body),
    )
    return b"".join((head, body, bytes((len(topic),)), topic, _SHORT.pack(len(props)), props))


def encode_record(msg: MessageToStore, max_body_size: int) -> EncodedRecord:
    """Encode `msg` with placeholder queue offset, physical offset and store timestamp.

    `stamp_record` fills them in at append time. (A single put packs its record whole, already
    stamped: `check_record` then `pack_record`, the same bytes.)
    """
    shape = check_record(msg, max_body_size)
    data = bytearray(pack_record(msg, shape, 0, 0, 0))
    store_ts_at = OFFSET_BORN_HOST + len(msg.born_host)
    return EncodedRecord(data, store_ts_at, msg.topic, msg.queue_id, shape.sys_flag)


_NO_TIMESTAMP = bytes(8)
_SEPARATOR_BYTE = 0x02
_SEPARATOR_BYTES = b"\x02"


@dataclass(frozen=True, slots=True)
class AppendStamp:
    """The append-time fields of a batch's records, for where it is expected to land."""

    physical_offset: int  # of the first record; each next one follows it
    queue_offset: int  # of the first record
    takes_queue_offsets: bool  # False: every record's is 0 (PREPARED and ROLLBACK records)
    store_timestamp: int


@dataclass(slots=True)
class EncodedBatch:
    """The records of a batch back to back; the append-time fields as `stamp` says, or 0."""

    data: bytearray
    offsets: list[int]  # where each record starts in `data`
    store_ts_at: int
    topic: str
    queue_id: int
    sys_flag: int
    wait_store: bool = True  # the first message's WAIT property (see `waits_for_store`)
    # where each record's properties start in `data` (they end where the record does)
    properties_at: list[int] = field(default_factory=list)
    stamp: AppendStamp | None = None

    def records(self) -> list[EncodedRecord]:
        """Each record on its own (what `encode_record` gives for it)."""
        ends = [*self.offsets[1:], len(self.data)] if self.offsets else []
        return [
            EncodedRecord(
                self.data[a:b], self.store_ts_at, self.topic, self.queue_id, self.sys_flag
            )
            for a, b in zip(self.offsets, ends, strict=True)
        ]


def encode_batch(
    batch: MessageBatch, max_body_size: int, stamp: AppendStamp | None = None
) -> EncodedBatch:
    """`encode_record` of each of `batch.as_messages()`, byte for byte, in one pass over the body.

    With a `stamp`, the records get its append-time fields (as `stamp_record` would write them),
    so that an append at the expected place writes the buffer as it is.

    Everything the messages share (topic, hosts, flags, the fields between the born timestamp
    and the body length, the batch's properties) is checked and packed once per batch. Per
    message only its own head is packed and its CRC computed: the body (with the length before
    it, laid out as a record lays it out) and its properties are sliced out of the request, never
    decoded, and the parts are joined into one buffer in one copy, the one the CommitLog appends.
    Raises BatchDecodeError for a malformed body and RecordTooLargeError for a limit, the former
    first when a body has both (as decoding it before encoding would).
    """
    topic_bytes = batch.topic.encode()
    topic_ok = 0 < len(topic_bytes) <= MAX_TOPIC_BYTES  # reported in encode_record's order
    born_host, store_host = batch.born_host, batch.store_host
    sys_flag = (batch.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) | host_sys_flags(
        born_host, store_host
    )
    fixed_length = record_length(sys_flag, 0, len(topic_bytes), 0)
    # BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED OFFSET
    middle = b"".join(
        (
            born_host,
            _NO_TIMESTAMP if stamp is None else _TS.pack(stamp.store_timestamp),
            store_host,
            _RECONSUME_PREPARED.pack(batch.reconsume_times, batch.prepared_transaction_offset),
        )
    )
    topic_part = bytes((len(topic_bytes),)) + topic_bytes
    shared = batch.properties.encode()
    store_ts_at = _PREFIX.size + len(born_host)
    queue_id, born_timestamp = batch.queue_id, batch.born_timestamp
    # QUEUEOFFSET counts up by queue_step from queue_offset, PHYSICALOFFSET is phy_start + at*step.
    # Without a stamp the steps are 0 and so are the fields (queue offsets also for PREPARED and
    # ROLLBACK records).
    queue_offset = phy_start = step = queue_step = 0
    if stamp is not None:
        phy_start, step = stamp.physical_offset, 1
        if stamp.takes_queue_offsets:
            queue_offset, queue_step = stamp.queue_offset, 1
    view = memoryview(batch.body)
    size = len(view)
    # Per record: [prefix and the shared middle][body length, body][topic, properties length]
    # [own properties][separator and the batch's properties, or the latter alone].
    pack_head = struct.Struct(f"{_PREFIX.format}{len(middle)}s").pack
    pack_topic = struct.Struct(f">{len(topic_part)}sh").pack
    unpack_batch_head, unpack_short = BATCH_HEAD.unpack_from, _SHORT.unpack_from
    shared_len = len(shared)
    shared_ends_in_nul = shared.endswith(b"\0")
    topic_ends_in_nul = topic_bytes.endswith(b"\0")
    shared_after_separator = _SEPARATOR_BYTES + shared
    parts: list[bytes | memoryview] = []
    append = parts.append
    offsets: list[int] = []
    properties_at: list[int] = []
    at = pos = 0
    wait_store = True
    try:
        while pos < size:
            # read_batch_message's checks in one test; it says what is wrong when one fails
            if pos + BATCH_HEAD_SIZE > size:
                _refuse_batch_body(view, pos)
            message_total, _, _, flag, body_len = unpack_batch_head(view, pos)
            end = pos + message_total
            body_at = pos + BATCH_HEAD_SIZE
            props_at = body_at + body_len + 2
            if (
                message_total < BATCH_HEAD_SIZE + 2
                or end > size
                or body_len < 0
                or props_at > end
                or unpack_short(view, props_at - 2)[0] != end - props_at
            ):
                _refuse_batch_body(view, pos)
            props_len = end - props_at
            separator = props_len > 0 and shared_len > 0 and view[end - 1] != _SEPARATOR_BYTE
            props_total = props_len + separator + shared_len
            total = fixed_length + body_len + props_total
            if (
                body_len > max_body_size
                or not topic_ok
                or props_total > MAX_PROPERTIES_BYTES
                or total > max_body_size + 64 * 1024
                # the record's last byte: RecordEndsInNulError
                or (
                    shared_ends_in_nul
                    if shared_len
                    else (view[end - 1] == 0 if props_len else topic_ends_in_nul)
                )
            ):
                _refuse_batch_message(body_len, max_body_size, topic_ok, props_total, total)
            append(
                pack_head(
                    total,
                    MAGIC_V1,
                    # java_crc32 without a call per message
                    crc32(view[body_at : props_at - 2]) & 0x7FFFFFFF,
                    queue_id,
                    flag,
                    queue_offset,
                    phy_start + at * step,
                    sys_flag,
                    born_timestamp,
                    middle,
                )
            )
            append(view[body_at - 4 : props_at - 2])  # [4 body length][body], as in the record
            append(pack_topic(topic_part, props_total))
            append(view[props_at:end])
            if separator:
                append(shared_after_separator)
            elif shared_len:
                append(shared)
            if not offsets:
                first = bytes(view[props_at:end]) + (_SEPARATOR_BYTES if separator else b"")
                wait_store = waits_for_store((first + shared).decode("utf-8", "replace"))
            offsets.append(at)
            at += total
            properties_at.append(at - props_total)
            queue_offset += queue_step
            pos = end
    except RecordTooLargeError:
        decode_batch_body(view)  # a malformed body is reported first
        raise
    return EncodedBatch(
        bytearray().join(parts),
        offsets,
        store_ts_at,
        batch.topic,
        queue_id,
        sys_flag,
        wait_store,
        properties_at,
        stamp,
    )


def _refuse_batch_body(view: memoryview, pos: int) -> NoReturn:
    """The BatchDecodeError for the message at `pos`, which failed one of the reader's checks."""
    read_batch_message(view, pos)  # raises, saying which check
    raise AssertionError(f"batch message at {pos}: the reader accepts what encode_batch refused")


def _refuse_batch_message(
    body_len: int, max_body_size: int, topic_ok: bool, props_total: int, total: int
) -> NoReturn:
    """The RecordTooLargeError `encode_record` raises for the first limit a message breaks."""
    if body_len > max_body_size:
        raise RecordTooLargeError(f"message body of {body_len} bytes exceeds {max_body_size}")
    if not topic_ok:
        raise RecordTooLargeError(f"topic must be 1-{MAX_TOPIC_BYTES} bytes")
    if props_total > MAX_PROPERTIES_BYTES:
        raise RecordTooLargeError(
            f"properties of {props_total} bytes exceed {MAX_PROPERTIES_BYTES}", properties=True
        )
    if total > max_body_size + 64 * 1024:
        raise RecordTooLargeError(f"record of {total} bytes exceeds body limit + 64 KiB")
    raise RecordEndsInNulError()


def waits_for_store(properties: str) -> bool:
    """RocketMQ's isWaitStoreMsgOK: property WAIT, true unless it says "false"."""
    if _WAIT_FALSE not in properties:  # nearly always: no copy of the text needed
        return True
    text = PROPERTY_SEPARATOR + properties + PROPERTY_SEPARATOR
    return PROPERTY_SEPARATOR + _WAIT_FALSE + PROPERTY_SEPARATOR not in text


_WAIT_FALSE: Final = f"{PROPERTY_WAIT}{NAME_VALUE_SEPARATOR}false"


encode_batch = speedups.select(encode_batch, "tidemq.store._record")
record_total = speedups.select(record_total, "tidemq.store._record")
pack_single = speedups.select(pack_single, "tidemq.store._record")

_STAMP = struct.Struct(">qq")


def stamp_record(
    buffer: bytearray | memoryview,
    at: int,
    store_ts_at: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
) -> None:
    """Fill the append-time fields of an encoded record that starts at `at` in `buffer`."""
    _STAMP.pack_into(buffer, at + OFFSET_QUEUE_OFFSET, queue_offset, physical_offset)
    _TS.pack_into(buffer, at + store_ts_at, store_timestamp)


def encode_blank(remaining: int) -> bytes:
    return _BLANK.pack(remaining, BLANK_MAGIC)


# --- decoding -----------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class StoredMessage:
    """Every field of a stored record (RocketMQ's MessageExt)."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def msg_id(self) -> str:
        return message_id(pack_host(*self.store_host), self.physical_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    def moved(
        self,
        topic: str,
        queue_id: int,
        properties: Mapping[str, str],
        store_host: bytes,
        *,
        reconsume_times: int | None = None,
    ) -> MessageToStore:
        """This message to store again under `topic` and `queue_id` with `properties` (the
        broker's moves: a delayed or timer message that is due, a transaction's commit or check
        copy, a POP retry), born where and when it was born."""
        return MessageToStore(
            topic=topic,
            queue_id=queue_id,
            body=self.body,
            properties=encode_properties(properties),
            flag=self.flag,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=pack_host(*self.born_host),
            store_host=store_host,
            reconsume_times=self.reconsume_times if reconsume_times is None else reconsume_times,
        )


class RecordFormatError(DecodeError, ValueError):
    """The bytes are not a valid record (bad magic, lengths that disagree, CRC mismatch)."""


def decode_record(
    buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = True
) -> StoredMessage:
    """Decode the record that starts at `pos`; every length is checked against the buffer."""
    view = memoryview(buf)
    if pos + _PREFIX.size > len(view):
        raise RecordFormatError("buffer ends inside the record header")
    (total, magic, crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts) = _PREFIX.unpack_from(
        view, pos
    )
    if magic != MAGIC_V1:
        raise RecordFormatError(f"bad magic {magic & 0xFFFFFFFF:#x} at {pos}")
    if total < _PREFIX.size or pos + total > len(view):
        raise RecordFormatError(f"total size {total} does not fit the buffer at {pos}")
    rec = view[pos : pos + total]
    at = _PREFIX.size
    born_len = host_length(sys_flag, store=False)
    store_len = host_length(sys_flag, store=True)
    if at + born_len + 8 + store_len + 16 > total:
        raise RecordFormatError("record too short for its hosts")
    born_host = unpack_host(rec[at : at + born_len])
    at += born_len
    store_ts = _TS.unpack_from(rec, at)[0]
    at += 8
    store_host = unpack_host(rec[at : at + store_len])
    at += store_len
    reconsume, prepared = _RECONSUME_PREPARED.unpack_from(rec, at)
    at += 12
    body_len = _INT.unpack_from(rec, at)[0]
    at += 4
    if body_len < 0 or at + body_len + 3 > total:
        raise RecordFormatError(f"body length {body_len} exceeds the record")
    body = bytes(rec[at : at + body_len])
    at += body_len
    topic_len = rec[at]
    at += 1
    topic = bytes(rec[at : at + topic_len]).decode("utf-8", "replace")
    at += topic_len
    if at + 2 > total:
        raise RecordFormatError("record too short for its properties length")
    props_len = _SHORT.unpack_from(rec, at)[0]
    at += 2
    if props_len < 0 or at + props_len != total:
        raise RecordFormatError("properties length disagrees with the total size")
    props = bytes(rec[at : at + props_len]).decode("utf-8", "replace")
    if check_crc and body_crc(body) != crc:
        raise RecordFormatError(f"body CRC mismatch at physical offset {phy}")
    return StoredMessage(
        total_size=total,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=phy,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties=decode_properties(props),
    )


_HEAD_SCAN = struct.Struct(">ii")


@dataclass(slots=True)
class DispatchInfo:
    """What the reput service needs from a record (RocketMQ's DispatchRequest)."""

    size: int  # > 0: a record; 0: end-of-file blank; -1: invalid, stop here
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    store_timestamp: int = 0
    properties: bytes = b""
    body_crc_ok: bool = True


INVALID: Final = DispatchInfo(-1)
BLANK: Final = DispatchInfo(0)


def _after_born_timestamp(host_flags: int) -> struct.Struct:
    """Fields 10-15 as a scan reads them: STORETIMESTAMP and BODYLEN, skipping the rest."""
    born = host_length(host_flags, store=False)
    store = host_length(host_flags, store=True)
    return struct.Struct(f">{born}xq{store}x12xi")


_HOST_FLAGS: Final = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6
# sys_flag & _HOST_FLAGS -> the layout of fields 10-15.
_SCAN_MIDDLE: Final = {flags: _after_born_timestamp(flags) for flags in (0, 0x10, 0x20, 0x30)}


def has_zeroed_tail(info: DispatchInfo) -> bool:
    """A record that checks out but ends in zeros: torn by a power cut, for recovery.

    RocketMQ's CRC covers the body only, and the topic and properties follow the body. A power
    cut that takes the last page (or sector) of a record whose beginning reached the disk
    leaves zeros where they were, since a CommitLog page is written once over zeros: the record
    still has its size, magic and body CRC. Its properties then end in a NUL byte (its topic,
    when it has no properties), and no record is written so (`check_record_parts` and
    `encode_batch` refuse it). A NUL inside a topic is no sign of a tear: stores written
    before names were checked hold such records. A tear inside properties longer than one such
    unit, with their last bytes intact, is not seen here.
    """
    if info.properties:
        return info.properties[-1:] == b"\0"
    return info.topic.endswith("\0")


def scan_record(buf: bytes | memoryview, pos: int, *, check_crc: bool) -> DispatchInfo:
    """RocketMQ's checkMessageAndReturnSize: classify and summarise the record at `pos`.

    Returns `BLANK` for the end-of-file marker and `INVALID` for anything that is not a whole,
    self-consistent record (torn tail, garbage, CRC mismatch when `check_crc`).
    """
    if pos + 8 > len(buf):
        return INVALID
    total, magic = _HEAD_SCAN.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return BLANK
    end = pos + total
    if magic != MAGIC_V1 or total < _PREFIX.size or end > len(buf):
        return INVALID
    (_t, _m, crc, queue_id, _flag, queue_offset, phy, sys_flag, _born) = _PREFIX.unpack_from(
        buf, pos
    )
    middle = _SCAN_MIDDLE[sys_flag & _HOST_FLAGS]
    at = pos + _PREFIX.size
    if at + middle.size > end:
        return INVALID
    store_ts, body_len = middle.unpack_from(buf, at)
    at += middle.size
    if body_len < 0 or at + body_len + 3 > end:
        return INVALID
    if check_crc and java_crc32(buf[at : at + body_len]) != crc:
        return INVALID
    at += body_len
    topic_end = at + 1 + buf[at]
    if topic_end + 2 > end:
        return INVALID
    props_len = _SHORT.unpack_from(buf, topic_end)[0]
    if props_len < 0 or topic_end + 2 + props_len != end:
        return INVALID
    # Positional arguments: keywords cost 0.2 us more, an eighth of the scan.
    return DispatchInfo(
        total,
        str(buf[at + 1 : topic_end], "utf-8", "replace"),
        queue_id,
        queue_offset,
        phy,
        sys_flag,
        store_ts,
        bytes(buf[topic_end + 2 : end]),
    )


def read_properties(record: bytes | memoryview) -> bytes:
    """The raw properties of one whole record (`record` is exactly its bytes), b"" when its
    lengths disagree: for filters that look at a few properties of every record."""
    size = len(record)
    if size < _PREFIX.size:
        return b""
    sys_flag = _INT.unpack_from(record, OFFSET_SYS_FLAG)[0]
    middle = _SCAN_MIDDLE[sys_flag & _HOST_FLAGS]
    at = _PREFIX.size + middle.size
    if at > size:
        return b""
    body_len = middle.unpack_from(record, _PREFIX.size)[1]
    at += body_len
    if body_len < 0 or at + 3 > size:
        return b""
    topic_end = at + 1 + record[at]
    if topic_end + 2 > size:
        return b""
    props_len = _SHORT.unpack_from(record, topic_end)[0]
    if props_len < 0 or topic_end + 2 + props_len > size:
        return b""
    return bytes(record[topic_end + 2 : topic_end + 2 + props_len])


read_properties = speedups.select(read_properties, "tidemq.store._record")


def read_named_properties(
    record: bytes | memoryview, keys: tuple[tuple[str, bytes], ...]
) -> dict[str, str]:
    """The properties of one whole record that `keys` name (pairs of a name and its UTF-8
    bytes), each value decoded (invalid UTF-8 replaced); those absent are left out, and a
    record whose lengths disagree has none. What an SQL92 filter reads of every record it
    sees: one call per record."""
    raw = read_properties(record)
    found: dict[str, str] = {}
    if raw:
        for name, key in keys:
            value = find_property(raw, key)
            if value is not None:
                found[name] = value.decode("utf-8", "replace")
    return found


read_named_properties = speedups.select(read_named_properties, "tidemq.store._record")


def read_topic(buf: bytes | memoryview, pos: int, total: int) -> bytes | None:
    """The raw topic of the record of `total` bytes at `pos`, None if its lengths disagree."""
    sys_flag = _INT.unpack_from(buf, pos + OFFSET_SYS_FLAG)[0]
    middle = _SCAN_MIDDLE[sys_flag & _HOST_FLAGS]
    at = pos + _PREFIX.size
    end = pos + total
    if at + middle.size > end:
        return None
    body_len = middle.unpack_from(buf, at)[1]
    at += middle.size + body_len
    if body_len < 0 or at + 1 > end:
        return None
    topic_len = buf[at]
    if at + 1 + topic_len + 2 > end:
        return None
    return bytes(buf[at + 1 : at + 1 + topic_len])


_QUEUE_POSITION = struct.Struct(">ii4xI4xq")  # TOTALSIZE MAGICCODE . QUEUEID . QUEUEOFFSET
RECORD_MIN_SIZE: Final = _PREFIX.size


def read_queue_position(buf: bytes | memoryview, pos: int) -> tuple[int, int, int, int]:
    """(total size, magic, queue id, queue offset) of the record at `pos` (one unpack)."""
    total, magic, queue_id, queue_offset = _QUEUE_POSITION.unpack_from(buf, pos)
    return total, magic, queue_id, queue_offset


def read_store_timestamp(buf: bytes | memoryview, pos: int) -> int:
    sys_flag = _INT.unpack_from(buf, pos + OFFSET_SYS_FLAG)[0]
    return int(_TS.unpack_from(buf, pos + store_timestamp_offset(sys_flag))[0])


def read_total_size_and_magic(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    total, magic = _HEAD_SCAN.unpack_from(buf, pos)
    return int(total), int(magic)
