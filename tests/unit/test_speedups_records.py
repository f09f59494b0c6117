"""The record twins: compiled and pure give the same bytes, values and errors.

For encode_batch, scan_fast, find_value, find_property, read_properties, read_named_properties,
KeyGatherer, gather_entries, extend_runs, and a single put's record_total, pack_single and
message_id, on
well-formed input and on damaged input (truncated bodies and records, wrong lengths, bad magic,
IPv6 hosts, transaction flags, limits, values out of range). On well-formed input the compiled
fast path must do the work itself: `fast_path_only` makes a hand-over to the pure twin fail.
"""

from __future__ import annotations

import mmap
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.common import speedups
from tidemq.store import _fast_scan, _index, _record
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import (
    AppendStamp,
    MessageBatch,
    MessageToStore,
    RecordEndsInNulError,
    check_record,
    encode_blank,
    encode_properties,
    pack_host,
    pack_record,
    scan_record,
)


def pure(key: str) -> Any:
    return speedups.PURE_TWINS[f"tidemq.store.{key}"]


@contextmanager
def fast_path_only(*keys: str) -> Iterator[None]:
    """Fail if the compiled functions hand these inputs to the pure twins `keys`."""
    saved = {key: speedups.PURE_TWINS[f"tidemq.store.{key}"] for key in keys}

    def refuse(*_args: Any) -> None:
        raise AssertionError("the compiled fast path handed well-formed input to the pure twin")

    try:
        for key in keys:
            speedups.PURE_TWINS[f"tidemq.store.{key}"] = refuse
        yield
    finally:
        speedups.PURE_TWINS.update({f"tidemq.store.{k}": v for k, v in saved.items()})


def outcome(function: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """The result, or the exception's type, message and `properties` flag."""
    try:
        return ("result", function(*args))
    except Exception as e:
        return ("error", type(e), str(e), getattr(e, "properties", None))


# --- batches ----------------------------------------------------------------------------------

V4 = pack_host("10.0.0.17", 52344)
V6 = pack_host("fe80::1", 10911)
# Property text that makes the lookups work: names, separators, names inside values.
PROPERTY_TEXT = st.text(alphabet="KEYSUNIQ_TAGW a\x01\x02\u00e9", max_size=40)
MESSAGES = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=200), PROPERTY_TEXT),
    min_size=1,
    max_size=6,
)
STAMPS = st.none() | st.builds(
    AppendStamp,
    physical_offset=st.integers(0, 2**50),
    queue_offset=st.integers(0, 2**50),
    takes_queue_offsets=st.booleans(),
    store_timestamp=st.integers(0, 2**45),
)


# A topic ending in NUL is refused when the properties are empty (record.RecordEndsInNulError).
TOPICS = st.text(min_size=1, max_size=30).filter(lambda topic: not topic.endswith("\x00"))
HOSTS = st.sampled_from([V4, V6])
NUMBERS = st.integers(0, 2**31 - 1)


@st.composite
def batches(
    draw: st.DrawFn,
    topics: st.SearchStrategy[str] = TOPICS,
    hosts: st.SearchStrategy[bytes] = HOSTS,
    numbers: st.SearchStrategy[int] = NUMBERS,
) -> MessageBatch:
    return MessageBatch(
        topic=draw(topics),
        queue_id=draw(numbers),
        body=encode_batch_body(draw(MESSAGES)),
        properties=draw(PROPERTY_TEXT),
        sys_flag=draw(st.integers(0, 0xFF)),
        born_timestamp=draw(numbers),
        born_host=draw(hosts),
        store_host=draw(hosts),
        reconsume_times=draw(numbers),
        prepared_transaction_offset=draw(numbers),
    )


def encode_twins(batch: MessageBatch, max_body: int, stamp: AppendStamp | None) -> None:
    expected = outcome(pure("record.encode_batch"), batch, max_body, stamp)
    assert outcome(_record.encode_batch, batch, max_body, stamp) == expected


@given(batches(), STAMPS)
def test_encode_batch_twins_on_well_formed_batches(batch: MessageBatch, stamp: Any) -> None:
    expected = pure("record.encode_batch")(batch, 4 << 20, stamp)
    with fast_path_only("record.encode_batch"):
        assert _record.encode_batch(batch, 4 << 20, stamp) == expected
        # the body as the broker gets it: a memoryview of the request
        batch.body = memoryview(bytearray(batch.body))
        assert _record.encode_batch(batch, 4 << 20, stamp) == expected


@given(
    batches(
        topics=st.text(max_size=140) | st.sampled_from(["", "x" * 127, "x" * 128, "x" * 256]),
        hosts=st.sampled_from([V4, V6, b"", b"\x01" * 5, b"\x02" * 30]),
        numbers=st.integers(-(2**64), 2**64) | st.integers(0, 100),
    ),
    st.integers(-10, 400),
    st.none()
    | st.builds(
        AppendStamp,
        physical_offset=st.integers(-(2**64), 2**64),
        queue_offset=st.integers(2**63 - 10, 2**63) | st.integers(0, 10),
        takes_queue_offsets=st.booleans(),
        store_timestamp=st.integers(-(2**64), 2**64),
    ),
)
def test_encode_batch_twins_on_limits_and_out_of_range_fields(
    batch: MessageBatch, max_body: int, stamp: Any
) -> None:
    encode_twins(batch, max_body, stamp)


@given(batches(), STAMPS, st.data())
def test_encode_batch_twins_on_damaged_bodies(
    batch: MessageBatch, stamp: Any, data: st.DataObject
) -> None:
    body = bytearray(batch.body)
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["truncate", "overwrite", "length", "extend"]))
        at = data.draw(st.integers(0, max(len(body) - 1, 0)))
        if how == "truncate":
            del body[at:]
        elif how == "overwrite":
            body[at : at + 4] = data.draw(st.binary(min_size=1, max_size=4))
        elif how == "length":  # a message's total, body or properties length
            value = data.draw(st.integers(-(2**15), 2**15 - 1))
            body[at : at + 2] = value.to_bytes(2, "big", signed=True)
        else:
            body += data.draw(st.binary(max_size=30))
    batch.body = bytes(body)
    encode_twins(batch, 4 << 20, stamp)


NUL_TEXT = st.text(alphabet="K\x01\x02\x00", max_size=6)


@given(
    st.lists(st.tuples(NUMBERS, st.binary(max_size=50), NUL_TEXT), min_size=1, max_size=4),
    NUL_TEXT,
    st.sampled_from(["T", "T\x00", "\x00T"]),
    STAMPS,
)
def test_encode_batch_twins_refuse_records_ending_in_nul(
    messages: list[tuple[int, bytes, str]], shared: str, topic: str, stamp: Any
) -> None:
    """Recovery takes a record ending in a zero byte for a torn one (record.has_zeroed_tail)."""
    batch = MessageBatch(
        topic=topic, queue_id=0, body=encode_batch_body(messages), properties=shared,
        sys_flag=0, born_timestamp=1, born_host=V4, store_host=V4, reconsume_times=0,
        prepared_transaction_offset=0,
    )  # fmt: skip
    encode_twins(batch, 4 << 20, stamp)

    def record_end(own: str) -> str:
        separator = "\x02" if own and shared and not own.endswith("\x02") else ""
        return own + separator + shared or topic

    ends_in_nul = any(record_end(own).endswith("\x00") for _, _, own in messages)
    result = outcome(_record.encode_batch, batch, 4 << 20, stamp)
    assert (result[:2] == ("error", RecordEndsInNulError)) is ends_in_nul


@given(batches(), st.sampled_from([None, object(), "text", [1, 2]]))
def test_encode_batch_twins_on_wrong_types(batch: MessageBatch, wrong: Any) -> None:
    for field in ("topic", "body", "properties", "queue_id", "born_host"):
        broken = MessageBatch(**{**{f: getattr(batch, f) for f in batch.__slots__}, field: wrong})
        encode_twins(broken, 4 << 20, None)


# --- records read in place --------------------------------------------------------------------


@st.composite
def record_spans(draw: st.DrawFn) -> bytes:
    """Records as a CommitLog holds them (IPv6 hosts and transaction flags too), maybe a blank."""
    parts = []
    phy = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 4))):
        stamp = AppendStamp(phy, draw(st.integers(0, 2**40)), True, draw(st.integers(0, 2**45)))
        encoded = pure("record.encode_batch")(draw(batches()), 4 << 20, stamp)
        parts.append(bytes(encoded.data))
        phy += len(encoded.data)
    if draw(st.booleans()):
        parts.append(encode_blank(draw(st.integers(8, 64))) + bytes(draw(st.integers(0, 56))))
    return b"".join(parts)


def damage(span: bytes, data: st.DataObject) -> bytes:
    out = bytearray(span)
    for _ in range(data.draw(st.integers(0, 3))):
        how = data.draw(st.sampled_from(["truncate", "overwrite", "magic", "length", "flags"]))
        at = data.draw(st.integers(0, len(out) - 1)) if out else 0
        if how == "truncate":
            del out[max(at, 1) :]
        elif how == "overwrite":
            out[at : at + 4] = data.draw(st.binary(min_size=4, max_size=4))
        elif how == "magic":  # a record's magic: the blank's, or garbage
            out[at : at + 4] = data.draw(st.sampled_from([b"\xcb\xd4\x31\x94", b"\x00" * 4]))
        elif how == "length":
            width = data.draw(st.sampled_from([1, 2, 4]))
            value = data.draw(st.integers(0, 256**width - 1))
            out[at : at + width] = value.to_bytes(width, "big")
        else:  # SYSFLAG of the first record: IPv6 bits and transaction states
            out[36:40] = data.draw(st.integers(0, 0xFF)).to_bytes(4, "big")
    return bytes(out)


def as_mmap(span: bytes) -> mmap.mmap:
    mm = mmap.mmap(-1, max(len(span), 1))
    mm.write(span)
    return mm


def positions(span: bytes) -> list[int]:
    """Where each record of an undamaged span starts, and a few places in between."""
    starts, pos = [], 0
    while pos + 8 <= len(span):
        info = scan_record(span, pos, check_crc=False)
        starts.append(pos)
        if info.size <= 0:
            break
        pos += info.size
    return starts


@given(record_spans(), st.data())
def test_scan_fast_twins(span: bytes, data: st.DataObject) -> None:
    starts = positions(span)
    span = damage(span, data)
    mm = as_mmap(span)
    extra = data.draw(st.lists(st.integers(0, len(span)), max_size=4))
    for buffer in (mm, span):
        for pos in [*starts, *extra]:
            end = data.draw(st.integers(pos, len(span)) if pos <= len(span) else st.just(pos))
            expected = outcome(pure("fast_scan.scan_fast"), buffer, pos, end)
            assert outcome(_fast_scan.scan_fast, buffer, pos, end) == expected


@given(record_spans())
def test_scan_fast_reads_well_formed_records_itself(span: bytes) -> None:
    mm = as_mmap(span)
    starts = positions(span)
    expected = [pure("fast_scan.scan_fast")(mm, pos, len(span)) for pos in starts]
    with fast_path_only("fast_scan.scan_fast"):
        assert [_fast_scan.scan_fast(mm, pos, len(span)) for pos in starts] == expected


NEEDLES = st.sampled_from([b"KEYS\x01", b"UNIQ_KEY\x01", b"TAGS\x01", b"K\x01", b"\x01"])
PROPERTY_BYTES = PROPERTY_TEXT.map(str.encode) | st.binary(max_size=40)


@given(PROPERTY_BYTES, NEEDLES, st.data())
def test_find_value_twins(properties: bytes, needle: bytes, data: st.DataObject) -> None:
    mm = as_mmap(properties)
    size = len(properties)
    start = data.draw(st.integers(0, size))
    end = data.draw(st.integers(start, size))
    for buffer in (mm, properties):
        expected = outcome(pure("fast_scan.find_value"), buffer, needle, start, end)
        with fast_path_only("fast_scan.find_value"):
            assert outcome(_fast_scan.find_value, buffer, needle, start, end) == expected
    # out of the buffer, reversed, an empty needle: the pure twin's answer
    for odd in ((needle, size, size + 5), (needle, end, start - 1), (b"", 0, 0)):
        expected = outcome(pure("fast_scan.find_value"), mm, *odd)
        assert outcome(_fast_scan.find_value, mm, *odd) == expected


@given(PROPERTY_BYTES, NEEDLES.map(lambda n: n[:-1]))
def test_find_property_twins(properties: bytes, name: bytes) -> None:
    expected = outcome(pure("record.find_property"), properties, name)
    with fast_path_only("record.find_property"):
        assert outcome(_record.find_property, properties, name) == expected
        assert outcome(_record.find_property, memoryview(properties), name) == expected
    for odd in (bytearray(properties), "text", 3, None):
        expected = outcome(pure("record.find_property"), odd, name)
        assert outcome(_record.find_property, odd, name) == expected
    expected = outcome(pure("record.find_property"), properties, bytearray(name))
    assert outcome(_record.find_property, properties, bytearray(name)) == expected


@given(record_spans(), st.data())
def test_read_properties_twins(span: bytes, data: st.DataObject) -> None:
    """Each whole record, as bytes and as a view of a map; then cut short, damaged, or with
    bytes after it (its lengths disagree with its size)."""
    mm = as_mmap(span)
    starts = positions(span)
    for pos, end in zip(starts, [*starts[1:], len(span)], strict=True):
        record = span[pos:end]
        expected = outcome(pure("record.read_properties"), record)
        with fast_path_only("record.read_properties"):
            assert outcome(_record.read_properties, record) == expected
            assert outcome(_record.read_properties, memoryview(mm)[pos:end]) == expected
        cut = data.draw(st.integers(0, len(record)))
        for odd in (record[:cut], damage(record, data) if record else b"", record + b"\x00"):
            expected = outcome(pure("record.read_properties"), odd)
            with fast_path_only("record.read_properties"):
                assert outcome(_record.read_properties, odd) == expected
    for odd in ("text", 3, None):
        expected = outcome(pure("record.read_properties"), odd)
        assert outcome(_record.read_properties, odd) == expected


NAMES = st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "K", "a", "W", "\u00e9", "", "x" * 300])
NAMED_KEYS = st.lists(NAMES, max_size=4).map(lambda ns: tuple((n, n.encode()) for n in ns))


@given(record_spans(), NAMED_KEYS, st.data())
def test_read_named_properties_twins(
    span: bytes, keys: tuple[tuple[str, bytes], ...], data: st.DataObject
) -> None:
    """Each whole record, as bytes and as a view of a map; then cut short, damaged, or with
    bytes after it; with names present, absent, empty, repeated and longer than the C buffer."""
    mm = as_mmap(span)
    starts = positions(span)
    fast = all(len(key) < 256 for _name, key in keys)
    for pos, end in zip(starts, [*starts[1:], len(span)], strict=True):
        record = span[pos:end]
        expected = outcome(pure("record.read_named_properties"), record, keys)
        # what the filter read before: the raw properties, then each name looked up and decoded
        raw = _record.read_properties(record)
        looked_up = {
            name: value.decode("utf-8", "replace")
            for name, key in keys
            if raw and (value := _record.find_property(raw, key)) is not None
        }
        assert expected == ("result", looked_up)
        views = (record, memoryview(mm)[pos:end])
        for view in views:
            if fast:
                with fast_path_only("record.read_named_properties"):
                    assert outcome(_record.read_named_properties, view, keys) == expected
            else:
                assert outcome(_record.read_named_properties, view, keys) == expected
        cut = data.draw(st.integers(0, len(record)))
        for odd in (record[:cut], damage(record, data) if record else b"", record + b"\x00"):
            expected = outcome(pure("record.read_named_properties"), odd, keys)
            assert outcome(_record.read_named_properties, odd, keys) == expected
    record = span[: starts[1]] if len(starts) > 1 else span
    odd_keys: list[Any] = [
        list(keys),
        (("a", "a"),),
        (("a",),),
        (("a", b"a", 1),),
        ((["a"], b"a"),),
    ]
    for odd_key in odd_keys:
        expected = outcome(pure("record.read_named_properties"), record, odd_key)
        assert outcome(_record.read_named_properties, record, odd_key) == expected
    for odd in ("text", 3, None):
        expected = outcome(pure("record.read_named_properties"), odd, keys)
        assert outcome(_record.read_named_properties, odd, keys) == expected


def gatherers() -> tuple[Any, Any]:
    return pure("fast_scan.KeyGatherer")(), _fast_scan.KeyGatherer()


@given(record_spans(), st.data())
def test_key_gatherer_twins(span: bytes, data: st.DataObject) -> None:
    mm = as_mmap(span)
    slow, fast = gatherers()
    for pos in positions(span):
        record = pure("fast_scan.scan_fast")(mm, pos, len(span))
        info = scan_record(span, pos, check_crc=False)
        if info.size <= 0:
            continue
        expected: list[tuple[int, int, int]] = []
        got: list[tuple[int, int, int]] = []
        if record is not None:
            total, _q, _o, phy, store_ts, props, topic_raw = record
            args = (topic_raw, phy, store_ts, props, pos + total)
            slow.gather(mm, expected, *args)
            with fast_path_only("fast_scan.find_value"):
                fast.gather(mm, got, *args)
            # a properties range past the buffer: the lookups' pure answer
            odd = (topic_raw, phy, store_ts, props, len(span) + data.draw(st.integers(1, 9)))
            assert outcome(slow.gather, mm, expected, *odd) == outcome(fast.gather, mm, got, *odd)
        slow.gather_info(info, expected)
        fast.gather_info(info, got)
        assert got == expected
        assert fast.prefix(info.topic.encode()) == slow.prefix(info.topic.encode())


@given(record_spans(), st.data())
def test_gather_entries_twins(span: bytes, data: st.DataObject) -> None:
    starts = positions(span)
    span = damage(span, data)
    mm = as_mmap(span)
    pos = min(data.draw(st.sampled_from(starts)), len(span))
    end = data.draw(st.integers(pos, len(span)))
    slow, fast = gatherers()
    expected: list[tuple[int, int, int]] = []
    got: list[tuple[int, int, int]] = []
    result = outcome(pure("index_worker.gather_entries"), mm, pos, end, slow, expected)
    assert outcome(_fast_scan.gather_entries, mm, pos, end, fast, got) == result
    assert got == expected


@settings(max_examples=30)
@given(record_spans())
def test_gather_entries_reads_well_formed_records_itself(span: bytes) -> None:
    mm = as_mmap(span)
    slow, fast = gatherers()
    expected: list[tuple[int, int, int]] = []
    got: list[tuple[int, int, int]] = []
    result = pure("index_worker.gather_entries")(mm, 0, len(span), slow, expected)
    with fast_path_only("index_worker.gather_entries", "fast_scan.scan_fast"):
        assert _fast_scan.gather_entries(mm, 0, len(span), fast, got) == result
    assert got == expected


# --- index files ------------------------------------------------------------------------------

ENTRIES = st.lists(
    st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**50), st.integers(0, 2**45)),
    max_size=20,
)
ODD_VALUES = st.integers(-(2**64), 2**64) | st.sampled_from([-1, 2**31, 2**63, 1.5, None])
ODD_ENTRIES = st.lists(
    st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**50), st.integers(0, 2**45))
    | st.tuples(ODD_VALUES, ODD_VALUES, ODD_VALUES)
    | st.sampled_from([(1, 2), [1, 2, 3], (1, 2, 3, 4)]),
    max_size=12,
)
INDEX_FIELDS = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset")


@contextmanager
def index_file_pair(
    slots: int, entries_max: int, begin_ts: int, used: int
) -> Iterator[tuple[Any, Any]]:
    """Two equal fresh index files: one for each twin."""
    from tidemq.store.index import _IndexFile

    with tempfile.TemporaryDirectory() as root:
        files = [
            _IndexFile.create(Path(root) / name, slots, entries_max, 0, begin_ts)
            for name in ("a", "b")
        ]
        try:
            for f in files:
                f.index_count = used
                f.begin_timestamp = begin_ts
            yield files[0], files[1]
        finally:
            for f in files:
                f.close()


def put_many_twins(
    entries: list[Any],
    start: int,
    slots: int,
    room: int,
    begin_ts: int,
    used: int,
    *,
    fast_only: bool = False,
) -> None:
    """Both twins on equal files, twice (from `start`, then from 0): same answers, same files."""
    with index_file_pair(slots, room, begin_ts, used) as (slow, fast):
        for chunk_start in (start, 0):
            expected = outcome(pure("index._IndexFile.put_many"), slow, entries, chunk_start)
            keys = ("index._IndexFile.put_many",) if fast_only else ()
            with fast_path_only(*keys):
                assert outcome(_index.put_many, fast, entries, chunk_start) == expected
            assert fast._map[:] == slow._map[:]
            for field in (*INDEX_FIELDS, "index_count", "hash_slot_count", "dirty"):
                assert getattr(fast, field) == getattr(slow, field), field


@given(ENTRIES, st.integers(1, 9), st.integers(2, 24), st.integers(-5, 2**45), st.integers(1, 3))
def test_index_put_many_twins(
    entries: list[tuple[int, int, int]], slots: int, room: int, begin_ts: int, used: int
) -> None:
    put_many_twins(entries, 0, slots, room, begin_ts, used, fast_only=True)


@given(ODD_ENTRIES, st.integers(-3, 14), st.integers(1, 9), st.integers(2, 24), st.integers(1, 3))
def test_index_put_many_twins_on_odd_entries(
    entries: list[Any], start: int, slots: int, room: int, used: int
) -> None:
    put_many_twins(entries, start, slots, room, 1_700_000_000_000, used)


def test_index_put_many_is_the_index_files_method() -> None:
    from tidemq.store.index import _IndexFile

    assert _IndexFile.__dict__["put_many"] is _index.put_many


# --- with_property ----------------------------------------------------------------------------

# Pieces that make well-formed, malformed, repeated and name-carrying property texts likely.
PROPERTY_PIECES = st.sampled_from(
    ["\x01", "\x02", "a", "b", "TAGS", "CLUSTER", "\x01x\x02", "", "é", "\ud800"]
)
PROPERTY_TEXTS = st.lists(PROPERTY_PIECES, max_size=14).map("".join)
PROPERTY_MAPS = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "a", "é", ""])
    | st.text(max_size=3),
    st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), max_size=6),
    max_size=70,  # past the compiled check's 64 names
)
PROPERTY_NAMES = st.sampled_from(["CLUSTER", "a", "", "é", "\ud800"]) | st.text(max_size=3)


@given(PROPERTY_TEXTS, PROPERTY_NAMES, st.text(max_size=5))
def test_with_property_gives_the_same_text(text: str, name: str, value: str) -> None:
    assert outcome(_record.with_property, text, name, value) == outcome(
        pure("record.with_property"), text, name, value
    )


@given(PROPERTY_MAPS, PROPERTY_NAMES, st.text(max_size=5))
def test_with_property_of_encoded_properties_gives_the_same_text(
    props: dict[str, str], name: str, value: str
) -> None:
    text = encode_properties(props)
    assert outcome(_record.with_property, text, name, value) == outcome(
        pure("record.with_property"), text, name, value
    )
    pairs_only = not any("\x01" in key or "\x02" in key for key in props)
    if pairs_only and name not in props and len(props) < 64 and utf8_encodable(text + name):
        with fast_path_only("record.with_property"):
            assert _record.with_property(text, name, value) == f"{text}{name}\x01{value}\x02"


def utf8_encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False  # a lone surrogate: handed to the pure twin
    return True


def test_with_property_hands_other_types_to_the_pure_twin() -> None:
    class Text(str):
        pass

    for args in ((Text("a\x011\x02"), "b", "2"), (b"a\x011\x02", "b", "2"), ("", None, "x")):
        assert outcome(_record.with_property, *args) == outcome(pure("record.with_property"), *args)


# --- a single put -----------------------------------------------------------------------------

MAX_BODY = 4 << 20
SYS_FLAGS = st.integers(0, 0xFF)


@st.composite
def single_messages(
    draw: st.DrawFn,
    topics: st.SearchStrategy[str] = TOPICS,
    hosts: st.SearchStrategy[bytes] = HOSTS,
    numbers: st.SearchStrategy[int] = NUMBERS,
    flags: st.SearchStrategy[int] = SYS_FLAGS,
) -> MessageToStore:
    return MessageToStore(
        topic=draw(topics),
        queue_id=draw(numbers),
        body=draw(st.binary(max_size=300)),
        properties=draw(PROPERTY_TEXT),
        flag=draw(numbers),
        sys_flag=draw(flags),
        born_timestamp=draw(numbers),
        born_host=draw(hosts),
        store_host=draw(hosts),
        reconsume_times=draw(numbers),
        prepared_transaction_offset=draw(numbers),
    )


# The append-time fields a put gives a record (queue offset, physical offset, store time).
APPEND_FIELDS = st.tuples(st.integers(0, 2**50), st.integers(0, 2**50), st.integers(0, 2**45))


@given(single_messages(), APPEND_FIELDS)
def test_a_single_put_is_packed_by_the_compiled_twins_alone(
    msg: MessageToStore, fields: tuple[int, int, int]
) -> None:
    """Well-formed messages: the compiled twins do the work themselves, and give the bytes of
    check_record then pack_record (what a single put wrote before them)."""
    shape = check_record(msg, MAX_BODY)
    expected = pack_record(msg, shape, *fields)
    with fast_path_only("record.record_total", "record.pack_single"):
        assert _record.record_total(msg, MAX_BODY) == shape.total
        assert _record.pack_single(msg, *fields) == expected
    assert pure("record.pack_single")(msg, *fields) == expected
    assert pure("record.record_total")(msg, MAX_BODY) == shape.total


@given(
    single_messages(
        topics=st.text(max_size=140)
        | st.sampled_from(["", "x" * 127, "x" * 128, "x" * 256, "\ud800", "é" * 64, "T\x00"]),
        hosts=st.sampled_from([V4, V6, b"", b"\x01" * 5, b"\x02" * 30]),
        numbers=st.integers(-(2**64), 2**64) | st.integers(0, 100),
        flags=st.integers(-(2**64), 2**64) | st.integers(0, 0xFF),
    ),
    st.integers(-10, 400) | st.sampled_from([2**31, 2**63, 2**70]),
    st.tuples(
        st.integers(-(2**64), 2**64), st.integers(-(2**64), 2**64), st.integers(-(2**64), 2**64)
    )
    | APPEND_FIELDS,
    st.data(),
)
def test_single_put_twins_on_limits_and_out_of_range_fields(
    msg: MessageToStore, max_body: int, fields: tuple[int, int, int], data: st.DataObject
) -> None:
    """Limits broken, texts UTF-8 cannot encode, unusual hosts, numbers out of their fields'
    range, long properties, a record ending in NUL: the same total, bytes or error (type and
    message)."""
    if data.draw(st.booleans()):
        msg.properties = data.draw(
            st.sampled_from(["p" * 32767, "p" * 32768, "q\ud800", "K\x01v\x00", ""])
        )
    assert outcome(_record.record_total, msg, max_body) == outcome(
        pure("record.record_total"), msg, max_body
    )
    assert outcome(_record.pack_single, msg, *fields) == outcome(
        pure("record.pack_single"), msg, *fields
    )


@given(single_messages(), st.sampled_from([None, 1.5, "text", [1, 2], True, b"x"]))
def test_single_put_twins_on_wrong_types(msg: MessageToStore, wrong: Any) -> None:
    for name in MessageToStore.__slots__:
        broken = MessageToStore(**{**{f: getattr(msg, f) for f in MessageToStore.__slots__}})
        setattr(broken, name, wrong)
        assert outcome(_record.record_total, broken, MAX_BODY) == outcome(
            pure("record.record_total"), broken, MAX_BODY
        ), name
        assert outcome(_record.pack_single, broken, 1, 2, 3) == outcome(
            pure("record.pack_single"), broken, 1, 2, 3
        ), name
    assert outcome(_record.record_total, msg, wrong) == outcome(
        pure("record.record_total"), msg, wrong
    )
    assert outcome(_record.pack_single, msg, 1, wrong, 3) == outcome(
        pure("record.pack_single"), msg, 1, wrong, 3
    )


@given(
    st.sampled_from([V4, V6, b"", b"\xff" * 3]) | st.binary(max_size=24),
    st.integers(-(2**63), 2**63 - 1),
)
def test_message_id_twins(host: bytes, offset: int) -> None:
    expected = pure("record.message_id")(host, offset)
    with fast_path_only("record.message_id"):
        assert _record.message_id(host, offset) == expected


@given(
    st.sampled_from([V4, bytearray(V4), memoryview(V4), "host", None]),
    st.sampled_from([2**63, -(2**63) - 1, 2**70, 1.0, "1", None, True]),
)
def test_message_id_twins_on_odd_input(host: Any, offset: Any) -> None:
    assert outcome(_record.message_id, host, offset) == outcome(
        pure("record.message_id"), host, offset
    )


# --- dispatch's runs --------------------------------------------------------------------------

DELAYING = (b"SCHEDULE_TOPIC_XXXX", b"rmq_sys_wheel_timer")


@dataclass
class Run:
    """A queue's run as dispatch keeps it (store/dispatch.py's _QueueRun)."""

    next_offset: int
    units: list[bytes]
    end_phy: int
    tags_codes: set[int]
    last_ts: int


def first_offsets(span: bytes) -> dict[tuple[bytes, int], int]:
    """(topic, queue id) -> the queue offset of its first record that scan_fast reads."""
    mm = as_mmap(span)
    found: dict[tuple[bytes, int], int] = {}
    for pos in positions(span):
        record = pure("fast_scan.scan_fast")(mm, pos, len(span))
        if record is not None:
            found.setdefault((record[6], record[1]), record[2])
    return found


@given(record_spans(), st.data())
def test_extend_runs_twins(span: bytes, data: st.DataObject) -> None:
    """Runs that extend, expect another offset or are absent; damaged spans, a stop before the
    end, index entries from some offset on, skipped topics: the same position, last store time,
    runs and index entries (or the same error)."""
    starts = positions(span) or [0]
    firsts = first_offsets(span)
    shift = {key: data.draw(st.sampled_from([0, 0, 1, None])) for key in firsts}
    span = damage(span, data) if data.draw(st.booleans()) else span
    mm = as_mmap(span)
    pos = min(data.draw(st.sampled_from(starts)), len(span))
    end = data.draw(st.integers(pos, len(span)))
    stop = data.draw(st.integers(pos, len(span) + 10))
    index_from = data.draw(st.integers(0, 2**41))
    skip = data.draw(st.sampled_from([DELAYING, *((topic, b"") for topic, _q in firsts)]))
    indexed = data.draw(st.booleans())

    def runs() -> dict[tuple[bytes, int], Run]:
        return {
            key: Run(offset + (shift[key] or 0), [], 0, set(), -1)
            for key, offset in firsts.items()
            if shift[key] is not None
        }

    slow, fast = gatherers()
    slow_runs, fast_runs = runs(), runs()
    expected: list[tuple[int, int, int]] = []
    got: list[tuple[int, int, int]] = []
    result = outcome(
        pure("fast_scan.extend_runs"),
        mm,
        pos,
        end,
        stop,
        slow_runs,
        slow if indexed else None,
        expected,
        index_from,
        skip,
    )
    assert (
        outcome(
            _fast_scan.extend_runs,
            mm,
            pos,
            end,
            stop,
            fast_runs,
            fast if indexed else None,
            got,
            index_from,
            skip,
        )
        == result
    )
    assert fast_runs == slow_runs
    assert got == expected


@settings(max_examples=50)
@given(record_spans())
def test_extend_runs_takes_well_formed_records_itself(span: bytes) -> None:
    mm = as_mmap(span)
    firsts = first_offsets(span)
    slow_runs = {key: Run(offset, [], 0, set(), -1) for key, offset in firsts.items()}
    fast_runs = {key: Run(offset, [], 0, set(), -1) for key, offset in firsts.items()}
    slow, fast = gatherers()
    expected: list[tuple[int, int, int]] = []
    got: list[tuple[int, int, int]] = []
    args = (0, len(span), len(span))
    result = pure("fast_scan.extend_runs")(mm, *args, slow_runs, slow, expected, 0, DELAYING)
    with fast_path_only("fast_scan.extend_runs", "fast_scan.scan_fast"):
        assert _fast_scan.extend_runs(mm, *args, fast_runs, fast, got, 0, DELAYING) == result
    if pure("fast_scan.scan_fast")(mm, 0, len(span)) is not None:
        assert result[0] > 0 and result[1] >= 0  # the first record was taken
    assert fast_runs == slow_runs
    assert got == expected


@given(record_spans(), st.sampled_from([None, object(), "text", [1, 2], 1.5]))
def test_extend_runs_twins_on_wrong_types(span: bytes, wrong: Any) -> None:
    mm = as_mmap(span)
    firsts = first_offsets(span)
    good: list[Any] = [mm, 0, len(span), len(span), {}, None, [], 0, DELAYING]
    for at in range(len(good)):
        args = list(good)
        args[at] = wrong
        slow_args, fast_args = list(args), list(args)
        if at != 4:  # runs of their own for each twin
            slow_args[4] = {key: Run(o, [], 0, set(), -1) for key, o in firsts.items()}
            fast_args[4] = {key: Run(o, [], 0, set(), -1) for key, o in firsts.items()}
        expected = outcome(pure("fast_scan.extend_runs"), *slow_args)
        assert outcome(_fast_scan.extend_runs, *fast_args) == expected, at
        assert slow_args[4] == fast_args[4]
