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

import itertools
import operator
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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

from store.record import (
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    MAGIC_V1,
    NAME_VALUE_SEPARATOR,
    OFFSET_PHYSICAL_OFFSET,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RecordFormatError,
    decode_properties,
    message_id,
)
from store.tags import TagFilter

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


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects for `schema` (its own conversion, so they always agree)."""
    key = schema.json()
    found = _ARROW_SCHEMAS.get(key)
    if found is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        found = _ARROW_SCHEMAS[key] = to_arrow_schema(schema, timezone="UTC")
    return found


# Fields 1-9 of a record: total, magic, body CRC, queue id, flag, queue offset, physical
# offset, sys flag, born timestamp (see store.record). The hosts that follow vary in length.
_PREFIX = struct.Struct(">iiiiiqqiq")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")
_BORN_HOST_AT = _PREFIX.size  # 48
# For IPv4 hosts (the usual case), the fields the fast path needs in one unpack per record:
# total, magic, queue offset, sys flag, born and store timestamps, body length (fields the
# fast path does not need are skipped with x: fewer Python ints made per record).
_V4 = struct.Struct(">ii12xq8xiq8xq8x12xi")
_V4_TOTAL, _V4_MAGIC, _V4_QUEUE_OFFSET, _V4_FLAGS, _V4_BORN, _V4_STORED, _V4_BODY_LEN = range(7)
_PHYSICAL_OFFSET = struct.Struct(">q")
# Records the fast path leaves to the general one: IPv6 hosts shift the fields after them,
# a compressed body must be inflated.
_GENERAL_PATH = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6 | FLAG_COMPRESSED


def _property_pattern(name: str) -> str:
    # RE2 syntax for extract_regex: the value of `name` at the start or after a separator.
    sep, eq = PROPERTY_SEPARATOR, NAME_VALUE_SEPARATOR
    return f"(?:^|{sep}){re.escape(name)}{eq}(?P<value>[^{sep}]*)"


_TAGS_RE = _property_pattern(PROPERTY_TAGS)
_KEYS_RE = _property_pattern(PROPERTY_KEYS)
_UNIQ_KEY_RE = _property_pattern(PROPERTY_UNIQ_KEY)


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


def _offset_msg_id(body: bytes, at: int, sys_flag: int, phy: int) -> str:
    # Only for records without UNIQ_KEY (sent by clients that set none): the broker's id.
    host_at = at + _BORN_HOST_AT + (20 if sys_flag & FLAG_BORNHOST_V6 else 8) + 8
    host_len = 20 if sys_flag & FLAG_STOREHOST_V6 else 8
    return message_id(bytes(body[host_at : host_at + host_len]), phy)


@dataclass(slots=True)
class _Piece:
    """The rows of one pull body, before the per-window vectorised work of `take()`."""

    values: Any  # BinaryArray
    props: Any  # BinaryArray of the raw `name\x01value\x02...` text
    offsets: list[int]
    store_ms: list[int]
    born_ms: list[int]
    fallback_ids: Callable[[], list[str]]  # offsetMsgIds, for records without UNIQ_KEY


class ColumnBuffer:
    """Rows of one queue range, as Arrow pieces, until `take()` makes one RecordBatch of them.

    `add()` does the per-record Python work and nothing more. Its fast path (IPv4 hosts,
    uncompressed bodies: what brokers normally hold) walks the records with one `struct` unpack
    each and copies no byte: values and properties are Arrow arrays sliced out of the pull body
    (junk and value ranges alternate in one BinaryArray over the body; `take` keeps the values).
    The general path decodes IPv6 hosts and compressed bodies record by record. `take()` then
    works per column on the whole window: TAGS, KEYS and UNIQ_KEY are cut out of the
    properties by Arrow's regex kernel, timestamps scaled, tags filtered.
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
        self._pieces: list[_Piece] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, body: bytes, start: int, end: int) -> tuple[int, int, int]:
        """Add the records of a pull body with start <= queueOffset < end.

        Returns (first, last, count) of the queue offsets of every record in the body, kept or
        not, so the caller can check that the queue has no holes (the broker returns records in
        offset order: they are contiguous exactly when count == last - first + 1). Raises
        RecordFormatError on a malformed record. Tags are filtered in `take()`.
        """
        fast = self._add_fast(body, start, end)
        if fast is not None:
            return fast
        return self._add_general(body, start, end)

    # --- the fast path ------------------------------------------------------------------------

    def _add_fast(self, body: bytes, start: int, end: int) -> tuple[int, int, int] | None:
        """None when the body needs the general path (IPv6 hosts or a compressed body)."""
        # The loop does the least it can per record (one unpack, two appends); everything
        # else is done per column below, in C where Python allows (map, zip, min, count).
        rows: list[tuple[int, ...]] = []
        starts: list[int] = []
        rows_append = rows.append
        starts_append = starts.append
        unpack = _V4.unpack_from
        header = _V4.size
        limit = len(body)
        last_header = limit - header
        pos = 0
        while pos <= last_header:
            record = unpack(body, pos)
            rows_append(record)
            starts_append(pos)
            if record[_V4_TOTAL] < header + 3:  # also keeps a zero size from looping forever
                raise _bad_record(body, pos)
            pos += record[_V4_TOTAL]
        if pos != limit:
            raise RecordFormatError(f"pull body of {limit} bytes ends inside a record at {pos}")
        n = len(rows)
        if n == 0:
            return -1, -1, 0
        columns = list(zip(*rows, strict=True))
        totals, magics = columns[_V4_TOTAL], columns[_V4_MAGIC]
        flags, body_lens = columns[_V4_FLAGS], columns[_V4_BODY_LEN]
        if magics.count(MAGIC_V1) != n:
            bad = next(i for i, magic in enumerate(magics) if magic != MAGIC_V1)
            raise _bad_record(body, starts[bad])
        if any(flag & _GENERAL_PATH for flag in set(flags)):
            return None
        value_starts = list(map((header).__add__, starts))
        value_ends = list(map(operator.add, value_starts, body_lens))
        record_ends = list(map(operator.add, starts, totals))
        # Past a value: topic length (1 byte), the topic, properties length (2 bytes). Every
        # record of a queue has the queue's topic: its length is checked on the first and last.
        topic_len = body[value_ends[0]] if min(body_lens) >= 0 else -1
        if topic_len < 0 or value_ends[-1] >= limit or body[value_ends[-1]] != topic_len:
            return None
        props_starts = list(map((3 + topic_len).__add__, value_ends))
        if min(map(operator.sub, record_ends, props_starts)) < 0:
            raise _bad_record(body, starts[0])
        # Offsets into `body`: 0, value 0 start, value 0 end, value 1 start, ... so that the
        # odd elements of a BinaryArray over the body are the values (the even ones are the
        # bytes between them); the same for the properties.
        pairs = itertools.chain.from_iterable
        value_offsets = [0, *pairs(zip(value_starts, value_ends, strict=True)), limit]
        props_offsets = [0, *pairs(zip(props_starts, record_ends, strict=True)), limit]
        queue_offsets = columns[_V4_QUEUE_OFFSET]
        first, last = queue_offsets[0], queue_offsets[-1]
        keep: list[int] | None = None
        if start <= first and last < end:
            picked = _odd_indices(n)  # the usual case: the whole body is in the range
        else:
            keep = [i for i, o in enumerate(queue_offsets) if start <= o < end]
            picked = pa.array([2 * i + 1 for i in keep], pa.int32())
        data = pa.py_buffer(body)

        def column(index: int) -> list[int]:
            items = columns[index]
            return list(items) if keep is None else [items[i] for i in keep]

        kept = range(n) if keep is None else keep

        def fallback_ids() -> list[str]:
            # Only called for a body with records without UNIQ_KEY (from clients that set none):
            # the broker's offsetMsgIds, made on demand so the usual case costs nothing.
            return [
                _offset_msg_id(
                    body,
                    starts[i],
                    flags[i],
                    _PHYSICAL_OFFSET.unpack_from(body, starts[i] + OFFSET_PHYSICAL_OFFSET)[0],
                )
                for i in kept
            ]

        self._keep(
            _Piece(
                _slices(data, value_offsets).take(picked),
                _slices(data, props_offsets).take(picked),
                column(_V4_QUEUE_OFFSET),
                column(_V4_STORED),
                column(_V4_BORN),
                fallback_ids,
            )
        )
        return first, last, n

    # --- the general path ---------------------------------------------------------------------

    def _add_general(self, body: bytes, start: int, end: int) -> tuple[int, int, int]:
        first = last = -1
        count = 0
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
            (total, magic, _crc, _qid, _flag, queue_offset, phy, sys_flag, born) = (
                _PREFIX.unpack_from(body, pos)
            )
            if magic != MAGIC_V1 or total < _PREFIX.size or pos + total > limit:
                raise _bad_record(body, pos)
            at = pos + _BORN_HOST_AT + (20 if sys_flag & FLAG_BORNHOST_V6 else 8)
            stored = _Q.unpack_from(body, at)[0]
            at += 8 + (20 if sys_flag & FLAG_STOREHOST_V6 else 8) + 12
            body_len = _I.unpack_from(body, at)[0]
            value_at = at + 4
            record_end = pos + total
            at = value_at + body_len
            if body_len < 0 or at + 3 > record_end:
                raise RecordFormatError(f"record at {pos}: body length {body_len} too large")
            at += 1 + body[at]  # the topic: every record of a queue has the queue's topic
            props_at = at + 2
            if props_at + _H.unpack_from(body, at)[0] != record_end:
                raise RecordFormatError(f"record at {pos}: properties length disagrees")
            record_at = pos
            pos = record_end
            if first < 0:
                first = queue_offset
            last = queue_offset
            count += 1
            if queue_offset < start or queue_offset >= end:
                continue
            value = body[value_at : value_at + body_len]
            if sys_flag & FLAG_COMPRESSED:
                value = zlib.decompress(value)
            text = body[props_at:record_end]
            values.append(value)
            props.append(text)
            offsets.append(queue_offset)
            store_ms.append(stored)
            born_ms.append(born)
            fallback_ids.append(_offset_msg_id(body, record_at, sys_flag, phy))
        self._keep(
            _Piece(
                pa.array(values, pa.binary()),
                pa.array(props, pa.binary()),
                offsets,
                store_ms,
                born_ms,
                lambda: fallback_ids,
            )
        )
        return first, last, count

    def _keep(self, piece: _Piece) -> None:
        if piece.offsets:
            self._pieces.append(piece)
            self.rows += len(piece.offsets)

    # --- one window's batch -------------------------------------------------------------------

    def take(self) -> Any:
        """Everything added so far as one RecordBatch (then the buffer is empty again)."""
        pieces, self._pieces, self.rows = self._pieces, [], 0
        n = sum(len(p.offsets) for p in pieces)
        values = _concat([p.values for p in pieces], pa.binary())
        props = _text(_concat([p.props for p in pieces], pa.binary()))
        offsets: list[int] = []
        store_ms: list[int] = []
        born_ms: list[int] = []
        for piece in pieces:
            offsets += piece.offsets
            store_ms += piece.store_ms
            born_ms += piece.born_ms
        tags = _extract(props, _TAGS_RE)
        msg_ids = _extract(props, _UNIQ_KEY_RE)
        if msg_ids.null_count:
            fallback: list[str] = []
            for piece in pieces:
                fallback += piece.fallback_ids()
            msg_ids = pc.coalesce(msg_ids, pa.array(fallback, pa.string()))
        ts_type = self.pa_schema.field("storeTimestamp").type
        arrays = [
            _extract(props, _KEYS_RE).cast(pa.binary()),
            values,
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.broker_name, pa.string()), n),
            pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            tags,
            _timestamps(store_ms, ts_type),
            _timestamps(born_ms, ts_type),
            msg_ids,
        ]
        if self.include_properties:
            maps = [list(_properties(text).items()) for text in props.to_pylist()]
            arrays.append(pa.array(maps, self.pa_schema.field("properties").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.pa_schema)
        if self.tag_filter is not None and n:
            # The broker filters by tag hash code only: different tags can share one.
            wanted = pa.array(sorted(self.tag_filter.tags), pa.string())
            batch = batch.filter(pc.fill_null(pc.is_in(tags, value_set=wanted), False))
        return batch


def _bad_record(body: bytes, pos: int) -> RecordFormatError:
    head = body[pos : pos + 8]
    return RecordFormatError(
        f"bad record at {pos} of a {len(body)}-byte pull body (header {head.hex()})"
    )


_ODD: list[Any] = []


def _odd_indices(n: int) -> Any:
    """1, 3, 5, ... (n of them) as int32, sliced from a cached array (building one costs)."""
    if not _ODD or len(_ODD[0]) < n:
        size = max(n, 4096)
        _ODD[:] = [pa.array(range(1, 2 * size, 2), pa.int32())]
    return _ODD[0].slice(0, n)


def _slices(data: Any, offsets: list[int]) -> Any:
    """A BinaryArray over `data` whose element i is data[offsets[i]:offsets[i + 1]] (no copy)."""
    offsets_buffer = pa.array(offsets, pa.int32()).buffers()[1]
    return pa.BinaryArray.from_buffers(pa.binary(), len(offsets) - 1, [None, offsets_buffer, data])


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


def _extract(props: Any, pattern: str) -> Any:
    """One property's value per row (null where absent), by Arrow's RE2 kernel."""
    return pc.struct_field(pc.extract_regex(props, pattern), [0])


def _timestamps(millis: list[int], type_: Any) -> Any:
    # Casts only: int64 to timestamp[ms] is a relabel, ms to us one C loop. (Arithmetic with a
    # Python int scalar would cost a failed `import dateutil` per call inside pyarrow.)
    return pa.array(millis, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(type_)


def record_offsets(body: bytes) -> list[int]:
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
