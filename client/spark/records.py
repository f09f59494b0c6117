"""The source's schema, and pulled CommitLog records decoded straight into Arrow columns.

Rows (Spark types; every field nullable, as Spark's defaults are):

- `key` binary: the KEYS property (the message keys, space-separated) in UTF-8; null when none;
- `value` binary: the body (inflated when the producer compressed it);
- `topic` string, `brokerName` string, `queueId` int: the message queue;
- `queueOffset` bigint: the message's consume-queue offset;
- `tags` string: the TAGS property; null when none;
- `storeTimestamp`, `bornTimestamp` timestamp: when the broker stored it and when the producer
  made it (millisecond precision, UTC);
- `msgId` string: the client msgId (UNIQ_KEY), else the broker's offsetMsgId;
- `properties` map<string,string>: every property, only with `includeProperties=true`.

(brokerName, queueId, queueOffset) identifies a message of a topic exactly once.

`ColumnBuffer` decodes pull response bodies (records back to back, RocketMQ's v1 layout, see
`store.record`) without building a message object per record: the hot loop of an executor. It
returns `pyarrow.RecordBatch`es whose schema *equals* `arrow_schema(...)`, which is what Spark's
Python data source worker checks (`string` not `large_string`, `int32` queue ids,
`timestamp[us, tz=UTC]`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type information
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidemq.client.inflate import inflate_body
from tidemq.client.remoting.command import Body
from tidemq.common import speedups
from tidemq.store.layout import (
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    HEAD_V4_SIZE,
    MAGIC_V1,
    MIN_RECORD,
    OFFSET_BODY_LENGTH_V4,
    OFFSET_BORN_HOST,
    OFFSET_BORN_TIMESTAMP,
    OFFSET_PHYSICAL_OFFSET,
    OFFSET_QUEUE_OFFSET,
    OFFSET_STORE_TIMESTAMP_V4,
    OFFSET_SYS_FLAG,
    PREFIX_FORMAT,
)
from tidemq.store.record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RecordFormatError,
    decode_properties,
    message_id,
)
from tidemq.store.tags import TagFilter

COLUMNS = (
    "key",
    "value",
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "tags",
    "storeTimestamp",
    "bornTimestamp",
    "msgId",
)


def spark_schema(include_properties: bool) -> StructType:
    """Built from types, not DDL: DDL parsing needs a running SparkContext (not on workers)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("brokerName", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("tags", StringType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("bornTimestamp", TimestampType()),
        StructField("msgId", StringType()),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType())))
    return StructType(fields)


_ARROW_SCHEMAS: dict[str, Any] = {}
_LAST_SCHEMA: list[tuple[StructType, Any]] = []


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects for `schema` (its own conversion, so they always agree)."""
    if _LAST_SCHEMA and _LAST_SCHEMA[0][0] is schema:
        return _LAST_SCHEMA[0][1]  # a task asks once per window: schema.json() costs ~100 us
    key = schema.json()
    found = _ARROW_SCHEMAS.get(key)
    if found is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        found = _ARROW_SCHEMAS[key] = to_arrow_schema(schema, timezone="UTC")
    _LAST_SCHEMA[:] = [(schema, found)]
    return found


# Fields 1-9 of a record: total, magic, body CRC, queue id, flag, queue offset, physical
# offset, sys flag, born timestamp (store/layout.py). The hosts that follow vary in length.
_PREFIX = struct.Struct(PREFIX_FORMAT)
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")
_PHYSICAL_OFFSET = struct.Struct(">q")

# The fast path: records with IPv4 hosts and an uncompressed body (what brokers normally hold).
# Their first HEAD_V4_SIZE bytes have the fixed layout of store/layout.py's HEAD_V4_FORMAT.
_WALK = struct.Struct(">ii")  # total, magic: all the walk reads of a record
# Records the fast path leaves to the general one: IPv6 hosts shift the fields after them,
# a compressed body must be inflated.
_GENERAL_PATH: Final = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6 | FLAG_COMPRESSED
# Bodies decoded together are joined into one buffer: Arrow's int32 offsets must address it.
_JOIN_LIMIT: Final = 1 << 30

_I32 = pa.int32()
_I64 = pa.int64()


def _properties(text: str) -> dict[str, str]:
    """`name\\x01value\\x02...` to a dict: the per-record hot path of `store.record`'s parser.

    Well-formed text (what every producer writes) alternates names and values, so one split
    on both separators pairs them up; anything else goes through the careful parser.
    """
    parts = text.replace(PROPERTY_SEPARATOR, NAME_VALUE_SEPARATOR).split(NAME_VALUE_SEPARATOR)
    pairs_expected = text.count(NAME_VALUE_SEPARATOR)
    if len(parts) % 2 == 1 and not parts[-1] and pairs_expected * 2 == len(parts) - 1:
        pairs = iter(parts)
        return dict(zip(pairs, pairs, strict=False))
    return decode_properties(text)


def _offset_msg_id(body: Body, at: int, sys_flag: int, phy: int) -> str:
    # Only for records without UNIQ_KEY (sent by clients that set none): the broker's id.
    host_at = at + OFFSET_BORN_HOST + (20 if sys_flag & FLAG_BORNHOST_V6 else 8) + 8
    host_len = 20 if sys_flag & FLAG_STOREHOST_V6 else 8
    return message_id(bytes(body[host_at : host_at + host_len]), phy)


@dataclass(slots=True)
class _Walked:
    """One pull body as `add()` leaves it: where its records start, nothing decoded yet."""

    body: Body
    starts: list[int]
    start: int  # the range of queue offsets to keep
    end: int
    first: int  # the queue offsets of its first and last records
    last: int

    @property
    def all_kept(self) -> bool:
        return self.start <= self.first and self.last < self.end


@dataclass(slots=True)
class _Piece:
    """Decoded rows (of one body, or of several decoded together), as Arrow columns."""

    values: Any  # BinaryArray
    props: Any  # BinaryArray of the raw `name\x01value\x02...` text
    offsets: Any  # Int64Array
    store_ms: Any  # Int64Array
    born_ms: Any  # Int64Array
    fallback_ids: Callable[[], list[str]]  # offsetMsgIds, for records without UNIQ_KEY


class ColumnBuffer:
    """Rows of one queue range, until `take()` makes one RecordBatch of them.

    `add()` only walks a pull body: one `struct` unpack per record (its size and magic), which
    also finds the first and last queue offsets the caller checks for holes. `take()` decodes
    everything added since the last one at once, per column, in Arrow's C++ kernels rather
    than per record in Python: the bodies (joined when there are several) are one Arrow
    buffer; each record's fixed-size head is copied out with one `take`, its bytes reversed
    (big-endian fields become native little-endian ones) and its fields read as int32/int64
    views; values and properties are sliced out of the buffer by their offsets; TAGS, KEYS
    and UNIQ_KEY are found by splitting the properties on their separator. Records the fast
    path does not handle (IPv6 hosts, compressed bodies) are decoded record by record.
    """

    def __init__(
        self,
        topic: str,
        broker_name: str,
        queue_id: int,
        schema: StructType,
        tag_filter: TagFilter,
    ) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.schema = schema
        self.pa_schema = arrow_schema(schema)
        self.include_properties = "properties" in schema.fieldNames()
        self.tag_filter = None if tag_filter.matches_all else tag_filter
        self._walked: list[_Walked] = []

    def add(self, body: Body, start: int, end: int) -> tuple[int, int, int]:
        """Add the records of a pull body with start <= queueOffset < end.

        Returns (first, last, count) of the queue offsets of every record in the body, kept or
        not, so the caller can check that the queue has no holes (the broker returns records in
        offset order: they are contiguous exactly when count == last - first + 1). Raises
        RecordFormatError on a record whose size or magic is wrong; `take()` raises it for
        the other damage it finds. Tags are filtered in `take()`.
        """
        starts = walk_records(body)
        if not starts:
            return -1, -1, 0
        first = _Q.unpack_from(body, starts[0] + OFFSET_QUEUE_OFFSET)[0]
        last = _Q.unpack_from(body, starts[-1] + OFFSET_QUEUE_OFFSET)[0]
        self._walked.append(_Walked(body, starts, start, end, first, last))
        return first, last, len(starts)

    # --- one window's batch -------------------------------------------------------------------

    def take(self) -> Any:
        """Everything added so far as one RecordBatch (then the buffer is empty again)."""
        walked, self._walked = self._walked, []
        parts: list[Columns] = []
        for group in _groups(walked):
            found = fast_columns(group)
            if found is not None:
                parts.append(found)
            else:  # a record needs the general path: IPv6 hosts, a compressed body
                parts += [
                    _columns_of(_decode_general(item.body, item.start, item.end)) for item in group
                ]
        if len(parts) == 1:
            columns = parts[0]
        else:
            types = _EMPTY_COLUMNS
            columns = Columns(
                *(_concat([p[i] for p in parts], types[i].type) for i in range(len(types)))
            )
        n = len(columns.offsets)
        ts_type = self.pa_schema.field("storeTimestamp").type
        arrays = [
            columns.keys.cast(pa.binary()),
            columns.values,
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.broker_name, pa.string()), n),
            pa.repeat(pa.scalar(self.queue_id, _I32), n),
            columns.offsets,
            columns.tags,
            _timestamps(columns.store_ms, ts_type),
            _timestamps(columns.born_ms, ts_type),
            columns.msg_ids,
        ]
        if self.include_properties:
            maps = [list(_properties(text).items()) for text in columns.props.to_pylist()]
            arrays.append(pa.array(maps, self.pa_schema.field("properties").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.pa_schema)
        if self.tag_filter is not None and n:
            # The broker filters by tag hash code only: different tags can share one.
            wanted = pa.array(sorted(self.tag_filter.tags), pa.string())
            batch = batch.filter(pc.fill_null(pc.is_in(columns.tags, value_set=wanted), False))
        return batch


class Columns(NamedTuple):
    """The kept rows of some records as Arrow columns: what `fast_columns` returns."""

    values: Any  # binary: the bodies
    props: Any  # string: the raw `name\x01value\x02...` text
    offsets: Any  # int64: queue offsets
    store_ms: Any  # int64
    born_ms: Any  # int64
    tags: Any  # string: TAGS, null where absent
    keys: Any  # string: KEYS, null where absent
    msg_ids: Any  # string: UNIQ_KEY, else the broker's offsetMsgId


def fast_columns(group: list[_Walked]) -> Columns | None:
    """The kept rows of `group` (walked bodies) decoded together; None when a record needs the
    general path (IPv6 hosts, a compressed body). RecordFormatError on a damaged record.

    The compiled twin (client/spark/_records.pyx) does it in one pass over the records in C; this
    one in Arrow's kernels (see `ColumnBuffer`).
    """
    piece = _decode_fast(group)
    return None if piece is None else _columns_of(piece)


def _columns_of(piece: _Piece) -> Columns:
    props = _text(piece.props)
    tags, keys, msg_ids = _property_values(props, (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY))
    if msg_ids.null_count:
        msg_ids = pc.coalesce(msg_ids, pa.array(piece.fallback_ids(), pa.string()))
    return Columns(
        piece.values, props, piece.offsets, piece.store_ms, piece.born_ms, tags, keys, msg_ids
    )


_EMPTY_COLUMNS = Columns(
    *(
        pa.array([], t)
        for t in (
            pa.binary(),
            pa.string(),
            _I64,
            _I64,
            _I64,
            pa.string(),
            pa.string(),
            pa.string(),
        )
    )
)


def walk_records(body: Body) -> list[int]:
    """Where each record of a pull body starts; RecordFormatError on a bad size or magic."""
    # The only loop over records in Python: one unpack, one append per record.
    starts: list[int] = []
    append = starts.append
    unpack = _WALK.unpack_from
    limit = len(body)
    last_head = limit - HEAD_V4_SIZE
    pos = 0
    while pos <= last_head:
        append(pos)
        total, magic = unpack(body, pos)
        if total < MIN_RECORD or magic != MAGIC_V1:  # a short size could loop forever
            raise _bad_record(body, pos)
        pos += total
    if pos != limit:
        raise RecordFormatError(f"pull body of {limit} bytes ends inside a record at {pos}")
    return starts


def _groups(walked: list[_Walked]) -> list[list[_Walked]]:
    """Consecutive bodies small enough together for one buffer with int32 offsets."""
    groups: list[list[_Walked]] = []
    size = _JOIN_LIMIT
    for item in walked:
        if size + len(item.body) > _JOIN_LIMIT:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += len(item.body)
    return groups


def _decode(group: list[_Walked]) -> list[_Piece]:
    fast = _decode_fast(group)
    if fast is not None:
        return [fast]
    return [_decode_general(item.body, item.start, item.end) for item in group]


def _decode_fast(group: list[_Walked]) -> _Piece | None:
    """The rows of `group` decoded together; None when a record needs the general path."""
    if len(group) == 1:
        data, starts = group[0].body, group[0].starts
    else:
        data = b"".join(item.body for item in group)
        starts = []
        base = 0
        for item in group:
            starts += map(base.__add__, item.starts) if base else item.starts
            base += len(item.body)
    n = len(starts)
    limit = len(data)
    buffer = pa.py_buffer(data)
    record_at = pa.array(starts, _I32)
    # Each record's head, copied out and reversed: row i's head is bytes [88 i, 88 i + 88) of
    # `heads`, and a big-endian field at [f, f + size) of a head is a native little-endian one
    # at [88 - f - size, 88 - f) of the reversed head (each a multiple of its size).
    heads = pc.binary_reverse(_spans(buffer, record_at, pc.add(record_at, _s32(HEAD_V4_SIZE))))
    head_bytes = heads.buffers()[2]
    int32s = pa.Array.from_buffers(_I32, n * HEAD_V4_SIZE // 4, [None, head_bytes])
    int64s = pa.Array.from_buffers(_I64, n * HEAD_V4_SIZE // 8, [None, head_bytes])

    def field(view: Any, at: int, size: int) -> Any:
        return view.take(_strided(n, HEAD_V4_SIZE // size, (HEAD_V4_SIZE - at - size) // size))

    flags = field(int32s, OFFSET_SYS_FLAG, 4)
    if pc.max(pc.bit_wise_and(flags, _s32(_GENERAL_PATH))).as_py():
        return None
    body_lens = field(int32s, OFFSET_BODY_LENGTH_V4, 4)
    if pc.min(body_lens).as_py() < 0:
        return None
    # Past a value: the topic's length byte. Every record of a queue has the queue's topic:
    # its length is read from the first record and checked on the last.
    value_ends = [
        at + HEAD_V4_SIZE + _I.unpack_from(data, at + OFFSET_BODY_LENGTH_V4)[0]
        for at in (starts[0], starts[-1])
    ]
    if max(value_ends) >= limit or data[value_ends[0]] != data[value_ends[1]]:
        return None
    topic_len = data[value_ends[0]]
    record_end = pa.concat_arrays([record_at.slice(1), pa.array([limit], _I32)])
    # Room for the value: the record less its head, the topic and the properties' length.
    room = pc.subtract(record_end, pc.add(record_at, _s32(HEAD_V4_SIZE + 3 + topic_len)))
    if not pc.all(pc.less_equal(body_lens, room)).as_py():
        raise RecordFormatError(
            f"bad record in a {limit}-byte pull body: a body length exceeds its record's size"
        )
    value_at = pc.add(record_at, _s32(HEAD_V4_SIZE))
    value_end = pc.add(value_at, body_lens)
    values = _spans(buffer, value_at, value_end)
    props = _spans(buffer, pc.add(value_end, _s32(3 + topic_len)), record_end)
    queue_offsets = pc.add(
        pc.multiply(field(int32s, OFFSET_QUEUE_OFFSET, 4).cast(_I64), _s64(1 << 32)),
        field(int32s, OFFSET_QUEUE_OFFSET + 4, 4).view(pa.uint32()).cast(_I64),
    )
    store_ms = field(int64s, OFFSET_STORE_TIMESTAMP_V4, 8)
    born_ms = field(int64s, OFFSET_BORN_TIMESTAMP, 8)
    kept: Any = None
    if not all(item.all_kept for item in group):
        lows: list[int] = []
        highs: list[int] = []
        for item in group:
            lows += [item.start] * len(item.starts)
            highs += [item.end] * len(item.starts)
        mask = pc.and_(
            pc.greater_equal(queue_offsets, pa.array(lows, _I64)),
            pc.less(queue_offsets, pa.array(highs, _I64)),
        )
        kept = pc.indices_nonzero(mask)
        values, props, queue_offsets, store_ms, born_ms = (
            column.take(kept) for column in (values, props, queue_offsets, store_ms, born_ms)
        )

    def fallback_ids() -> list[str]:
        # Only called for rows without UNIQ_KEY (from clients that set none): the broker's
        # offsetMsgIds, made on demand so the usual case costs nothing.
        rows = range(n) if kept is None else kept.to_pylist()
        return [
            _offset_msg_id(
                data,
                starts[i],
                0,
                _PHYSICAL_OFFSET.unpack_from(data, starts[i] + OFFSET_PHYSICAL_OFFSET)[0],
            )
            for i in rows
        ]

    return _Piece(values, props, queue_offsets, store_ms, born_ms, fallback_ids)


def _decode_general(body: Body, start: int, end: int) -> _Piece:
    """Record by record, any layout: IPv6 hosts, compressed bodies."""
    pos = 0
    limit = len(body)
    values: list[bytes] = []
    props: list[bytes] = []
    offsets: list[int] = []
    store_ms: list[int] = []
    born_ms: list[int] = []
    fallback_ids: list[str] = []
    while pos < limit:
        if pos + _PREFIX.size > limit:
            raise RecordFormatError(f"pull body ends inside a record header at {pos}")
        (total, magic, _crc, _qid, _flag, queue_offset, phy, sys_flag, born) = _PREFIX.unpack_from(
            body, pos
        )
        if magic != MAGIC_V1 or total < _PREFIX.size or pos + total > limit:
            raise _bad_record(body, pos)
        at = pos + OFFSET_BORN_HOST + (20 if sys_flag & FLAG_BORNHOST_V6 else 8)
        record_end = pos + total
        if at + 8 + (20 if sys_flag & FLAG_STOREHOST_V6 else 8) + 16 > record_end:
            raise RecordFormatError(f"record at {pos}: {total} bytes cannot hold its hosts")
        stored = _Q.unpack_from(body, at)[0]
        at += 8 + (20 if sys_flag & FLAG_STOREHOST_V6 else 8) + 12
        body_len = _I.unpack_from(body, at)[0]
        value_at = at + 4
        at = value_at + body_len
        if body_len < 0 or at + 3 > record_end:
            raise RecordFormatError(f"record at {pos}: body length {body_len} too large")
        at += 1 + body[at]  # the topic: every record of a queue has the queue's topic
        props_at = at + 2
        if props_at > record_end or props_at + _H.unpack_from(body, at)[0] != record_end:
            raise RecordFormatError(f"record at {pos}: properties length disagrees")
        record_at = pos
        pos = record_end
        if queue_offset < start or queue_offset >= end:
            continue
        value = bytes(body[value_at : value_at + body_len])  # no copy of a bytes slice
        if sys_flag & FLAG_COMPRESSED:
            value = inflate_body(value)
        values.append(value)
        props.append(bytes(body[props_at:record_end]))
        offsets.append(queue_offset)
        store_ms.append(stored)
        born_ms.append(born)
        fallback_ids.append(_offset_msg_id(body, record_at, sys_flag, phy))
    return _Piece(
        pa.array(values, pa.binary()),
        pa.array(props, pa.binary()),
        pa.array(offsets, _I64),
        pa.array(store_ms, _I64),
        pa.array(born_ms, _I64),
        lambda: fallback_ids,
    )


def _bad_record(body: Body, pos: int) -> RecordFormatError:
    head = body[pos : pos + 8]
    return RecordFormatError(
        f"bad record at {pos} of a {len(body)}-byte pull body (header {head.hex()})"
    )


# --- Arrow helpers ------------------------------------------------------------------------------


_SCALARS: dict[tuple[int, bool], Any] = {}


def _s32(value: int) -> Any:
    # Always an Arrow scalar: arithmetic with a Python int costs a failed `import dateutil`
    # per call inside pyarrow. Made once each (a few microseconds apiece): a few constants.
    found = _SCALARS.get((value, False))
    if found is None:
        found = _SCALARS[(value, False)] = pa.scalar(value, _I32)
    return found


def _s64(value: int) -> Any:
    found = _SCALARS.get((value, True))
    if found is None:
        found = _SCALARS[(value, True)] = pa.scalar(value, _I64)
    return found


class _Series:
    """Cached int32 arrays `a + b * i` (i = 0, 1, ...), grown on demand and sliced."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[int, int], Any] = {}

    def get(self, n: int, step: int, base: int) -> Any:
        found = self._arrays.get((step, base))
        if found is None or len(found) < n:
            size = max(n, 4096, 0 if found is None else 2 * len(found))
            found = self._arrays[(step, base)] = pa.array(
                range(base, base + step * size, step), _I32
            )
        return found.slice(0, n)


_SERIES = _Series()


def _strided(n: int, step: int, base: int) -> Any:
    """base, base + step, base + 2 step, ... (n of them)."""
    return _SERIES.get(n, step, base)


def _interleave_order(n: int) -> Any:
    """0, 1, 1 + n, 2, 2 + n, ..., n, 2n: [0, a..., b...] taken in this order alternates a, b."""
    steps, odd_even = _HALVES.get(2 * n + 1)  # [0, 1, 1, 2, 2, ...] and [0, 0, 1, 0, 1, ...]
    return pc.add(steps, pc.multiply(odd_even, pa.scalar(n, _I32)))


class _Halves:
    """Cached [0, 1, 1, 2, 2, ...] and [0, 0, 1, 0, 1, ...], sliced to length."""

    def __init__(self) -> None:
        self._pair: tuple[Any, Any] | None = None

    def get(self, length: int) -> tuple[Any, Any]:
        if self._pair is None or len(self._pair[0]) < length:
            size = max(length, 8193)
            self._pair = (
                pa.array([(i + 1) // 2 for i in range(size)], _I32),
                pa.array([1 if i and i % 2 == 0 else 0 for i in range(size)], _I32),
            )
        first, second = self._pair
        return first.slice(0, length), second.slice(0, length)


_HALVES = _Halves()


def _spans(data: Any, begins: Any, ends: Any) -> Any:
    """BinaryArray of data[begins[i]:ends[i]], copied out (begins[i] <= ends[i] <= begins[i+1]).

    A BinaryArray over all of `data` with offsets 0, begins[0], ends[0], begins[1], ... has the
    wanted spans at its odd positions (the bytes between them at the even ones): `take` copies
    those out into a compact array.
    """
    n = len(begins)
    offsets = pa.concat_arrays([_ZERO32, begins, ends]).take(_interleave_order(n))
    spans = pa.BinaryArray.from_buffers(pa.binary(), 2 * n, [None, offsets.buffers()[1], data])
    return spans.take(_strided(n, 2, 1))


_ZERO32 = pa.array([0], _I32)


def _concat(arrays: list[Any], type_: Any) -> Any:
    if not arrays:
        return pa.array([], type_)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _text(props: Any) -> Any:
    """Properties as UTF-8 strings; broken UTF-8 (never written by our clients) is replaced."""
    try:
        return props.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([b.decode("utf-8", "replace") for b in props.to_pylist()], pa.string())


def _property_values(props: Any, names: tuple[str, ...]) -> list[Any]:
    """Per name, its value in each row (the first one; null where absent), as strings.

    The same as the regex `(?:^|\\x02)NAME\\x01([^\\x02]*)`, but cheaper: the properties are
    split on the property separator once, and each name's items found by their prefix.
    """
    n = len(props)
    items_of = pc.split_pattern(props, PROPERTY_SEPARATOR)
    items = items_of.flatten()
    owners = pc.list_parent_indices(items_of)
    rows = _strided(n, 1, 0).cast(owners.type)
    out = []
    for name in names:
        prefix = name + NAME_VALUE_SEPARATOR
        found = pc.starts_with(items, prefix)
        values = pc.utf8_slice_codeunits(items.filter(found), len(prefix))
        found_in = owners.filter(found)
        if len(found_in) == n and pc.all(pc.equal(found_in, rows)).as_py():
            out.append(values)  # once in every row: the usual case
        else:
            out.append(values.take(pc.index_in(rows, value_set=found_in)))
    return out


def _timestamps(millis: Any, type_: Any) -> Any:
    # Casts only: int64 to timestamp[ms] is a relabel, ms to us one C loop.
    try:
        return millis.cast(pa.timestamp("ms", tz="UTC")).cast(type_)
    except pa.ArrowInvalid as exc:  # a damaged record: microseconds overflow past year 294,000
        raise RecordFormatError(f"pulled record has a timestamp out of range: {exc}") from exc


def record_offsets(body: Body) -> list[int]:
    """The queue offsets of the records of a pull body (the slow path of hole detection)."""
    out = []
    pos = 0
    while pos + _PREFIX.size <= len(body):
        total, _magic, _crc, _qid, _flag, queue_offset, *_ = _PREFIX.unpack_from(body, pos)
        if total <= 0:
            break
        out.append(queue_offset)
        pos += total
    return out


# The compiled twins (client/spark/_records.pyx) when built; see store/common/speedups.py.
walk_records = speedups.select(walk_records, "tidemq.client.spark._records")
fast_columns = speedups.select(fast_columns, "tidemq.client.spark._records")
