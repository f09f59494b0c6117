"""The transaction twins: compiled and pure give the same values and errors.

`transaction_properties`, `commit_record` and `op_record` (broker/transaction/_records.pyx
against broker/transaction/messages.py). `transaction_properties` on property texts as the
broker stores them (pairs, no name twice: the fast path) and on any other text (items without or
with two separators, names twice, invalid UTF-8, non-ASCII and over-long REAL_QIDs, more than
64 items), as bytes and as a memoryview. On well-formed input
the compiled fast path must do the work itself: `fast_path_only` makes a hand-over to the pure
twin fail. The record builders on the half records of test_transaction_records (whole, cut and
damaged; IPv4 and IPv6 hosts; limits the commit breaks; queue ids and offsets out of range; a view
cut short) and op records of any offset, host and birth.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.half_records import (
    HOST4,
    HOST6,
    MAX_MESSAGE_SIZE,
    damaged,
    half_records,
)
from tests.support.speedups_twins import selected
from tidemq.broker.transaction import _records
from tidemq.broker.transaction.messages import park_half, read_half
from tidemq.common import speedups
from tidemq.store.layout import TRANSACTION_PREPARED_TYPE
from tidemq.store.record import (
    EncodedRecord,
    MessageToStore,
    RecordTooLargeError,
    check_record,
    encode_properties,
    pack_record,
)

KEY = "tidemq.broker.transaction.messages.transaction_properties"


def pure(*args: Any) -> Any:
    return speedups.PURE_TWINS[KEY](*args)


def outcome(make: Any, *args: Any) -> Any:
    try:
        return make(*args)
    except (ValueError, TypeError) as exc:
        return (type(exc), str(exc))


@contextmanager
def fast_path_only() -> Iterator[None]:
    """Fail if the compiled function hands its input to the pure twin."""
    saved = speedups.PURE_TWINS[KEY]

    def refuse(*_args: Any) -> None:
        raise AssertionError("the compiled fast path handed well-formed input to the pure twin")

    speedups.PURE_TWINS[KEY] = refuse
    try:
        yield
    finally:
        speedups.PURE_TWINS[KEY] = saved


def test_the_compiled_transaction_properties_is_selected() -> None:
    assert selected(KEY) is _records.transaction_properties


NAMES = st.sampled_from(
    [
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "PGROUP",
        "WAIT",
        "DELAY",
        "UNIQ_KEY",
        "CLUSTER",
        "",
        "é",
        "REAL_TOPI",
        "WAITS",
    ]
) | st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), max_size=5)
VALUES = st.sampled_from(
    ["T", "", "0", "3", "007", "-1", "3a", " 3", "²", "٣", "9" * 18, "9" * 19, "true", "false"]
) | st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), max_size=6)
# Texts as encode_properties writes them: up to and past the fast path's 64 items.
STORED = st.dictionaries(NAMES, VALUES, max_size=70).map(encode_properties)
# Anything: pieces that make malformed items, names twice, invalid UTF-8.
PIECES = st.sampled_from(
    [
        b"\x01",
        b"\x02",
        b"REAL_TOPIC\x01T\x02",
        b"REAL_QID\x011\x02",
        b"PGROUP\x01G\x02",
        b"WAIT\x01true\x02",
        b"TRAN_PREPARED_QUEUE_OFFSET\x0112\x02",
        b"a",
        b"\xc3\xa9",
        b"\xff",
        b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8
        b"\xc3",
    ]
)
ANY_RAW = st.lists(PIECES, max_size=12).map(b"".join) | st.binary(max_size=40)


def encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@given(STORED, st.booleans())
def test_stored_properties_are_read_alike(text: str, as_view: bool) -> None:
    if not encodable(text):
        return  # a lone surrogate: no stored text holds one (it is UTF-8)
    raw: bytes | memoryview = text.encode()
    if as_view:
        raw = memoryview(raw)
    expected = outcome(pure, raw)
    assert outcome(_records.transaction_properties, raw) == expected
    items = text.count("\x02")
    qid = dict(item.split("\x01") for item in text.split("\x02")[:-1]).get("REAL_QID", "")
    if items <= 64 and qid.isascii() and len(qid) <= 18:
        with fast_path_only():
            assert _records.transaction_properties(raw) == expected


@given(ANY_RAW)
def test_any_properties_are_read_alike(raw: bytes) -> None:
    assert outcome(_records.transaction_properties, raw) == outcome(pure, raw)
    assert outcome(_records.transaction_properties, memoryview(raw)) == outcome(pure, raw)


def test_a_broker_half_message_is_read_on_the_fast_path() -> None:
    raw = (
        b"TRAN_MSG\x01true\x02PGROUP\x01PG\x02WAIT\x01true\x02UNIQ_KEY\x01AB\x02"
        b"CLUSTER\x01DC\x02REAL_TOPIC\x01T\x02REAL_QID\x013\x02"
    )
    with fast_path_only():
        assert _records.transaction_properties(raw) == (
            "PG",
            None,
            b"PGROUP\x01PG\x02WAIT\x01false\x02UNIQ_KEY\x01AB\x02CLUSTER\x01DC\x02",
            "T",
            3,
        )
    assert _records.transaction_properties(raw) == pure(raw)


def test_other_types_go_to_the_pure_twin() -> None:
    for raw in ("REAL_TOPIC\x01T\x02", 3, None, bytearray(b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02")):
        assert outcome(_records.transaction_properties, raw) == outcome(pure, raw)


# --- the records END stores -------------------------------------------------------------------

COMMIT_KEY = "tidemq.broker.transaction.messages.commit_record"
OP_KEY = "tidemq.broker.transaction.messages.op_record"


def test_the_compiled_record_builders_are_selected() -> None:
    assert selected(COMMIT_KEY) is _records.commit_record
    assert selected(OP_KEY) is _records.op_record


def record_outcome(make: Any, *args: Any) -> Any:
    try:
        return make(*args)
    except struct.error as exc:
        return ("struct.error", type(exc))  # the message names the format, not the value
    except (ValueError, OverflowError, TypeError, RecordTooLargeError) as exc:
        return (type(exc), str(exc))


@given(half_records(), st.data(), st.sampled_from([MAX_MESSAGE_SIZE, 16, 1 << 20]))
def test_a_commit_record_is_built_alike(record: bytes, data: st.DataObject, limit: int) -> None:
    half = read_half(memoryview(damaged(record, data)))
    if half is None:
        return
    compiled = record_outcome(_records.commit_record, half, limit)
    assert compiled == record_outcome(speedups.PURE_TWINS[COMMIT_KEY], half, limit)


@given(
    half_records(),
    st.integers(-(2**33), 2**33),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
)
def test_a_commit_record_of_odd_fields_is_built_alike(
    record: bytes, queue_id: int, physical: int, short_view: bool
) -> None:
    half = read_half(memoryview(record))
    assert half is not None
    half.real_queue_id = queue_id
    half.physical_offset = physical
    if short_view:
        half.view = half.view[: half.body_end - 1]
    compiled = record_outcome(_records.commit_record, half, 1 << 20)
    assert compiled == record_outcome(speedups.PURE_TWINS[COMMIT_KEY], half, 1 << 20)


@given(
    st.integers(-(2**70), 2**70) | st.sampled_from([0, 7, -1]),
    st.sampled_from([HOST4, HOST6, b"", b"\x00" * 9]),
    st.none() | st.integers(-(2**64), 2**64),
)
def test_an_op_record_is_built_alike(offset: int, host: bytes, now: int | None) -> None:
    if now is None:  # the clock's time: compare what it cannot change
        compiled = record_outcome(_records.op_record, offset, host)
        pure_one = record_outcome(speedups.PURE_TWINS[OP_KEY], offset, host)
        if isinstance(compiled, EncodedRecord) and isinstance(pure_one, EncodedRecord):
            for one in (compiled, pure_one):
                one.data[40:48] = bytes(8)  # BORNTIMESTAMP
        assert compiled == pure_one
        return
    compiled = record_outcome(_records.op_record, offset, host, now)
    assert compiled == record_outcome(speedups.PURE_TWINS[OP_KEY], offset, host, now)
    if host in (HOST4, HOST6) and -(2**63) <= now < 2**63:
        with fast_path_only_of(OP_KEY):
            assert _records.op_record(offset, host, now) == compiled


def test_a_broker_commit_is_built_on_the_fast_path() -> None:
    msg = MessageToStore(
        "BenchTxn",
        3,
        b"x" * 100,
        "TRAN_MSG\x01true\x02PGROUP\x01PG\x02WAIT\x01true\x02",
        sys_flag=TRANSACTION_PREPARED_TYPE,
        born_host=HOST4,
        store_host=HOST4,
    )
    park_half(msg)
    half = read_half(memoryview(pack_record(msg, check_record(msg, 1 << 20), 5, 4096, 1)))
    assert half is not None
    with fast_path_only_of(COMMIT_KEY):
        compiled = _records.commit_record(half, 1 << 20)
    assert compiled == speedups.PURE_TWINS[COMMIT_KEY](half, 1 << 20)


@contextmanager
def fast_path_only_of(key: str) -> Iterator[None]:
    saved = speedups.PURE_TWINS[key]

    def refuse(*_args: Any) -> None:
        raise AssertionError("the compiled fast path handed well-formed input to the pure twin")

    speedups.PURE_TWINS[key] = refuse
    try:
        yield
    finally:
        speedups.PURE_TWINS[key] = saved


# --- the half record --------------------------------------------------------------------------

HALF_KEY = "tidemq.broker.transaction.messages.read_half"


def test_the_compiled_read_half_is_selected() -> None:
    assert selected(HALF_KEY) is _records.read_half


@given(half_records(), st.data())
def test_a_half_record_is_read_alike(record: bytes, data: st.DataObject) -> None:
    view = memoryview(damaged(record, data))
    compiled = record_outcome(_records.read_half, view)
    assert compiled == record_outcome(speedups.PURE_TWINS[HALF_KEY], view)
    if compiled is not None and not isinstance(compiled, tuple):
        assert compiled.view is view  # where it lies, not a copy


def test_read_half_hands_other_types_to_the_pure_twin() -> None:
    for view in (b"\x00" * 60, bytearray(60)):
        assert record_outcome(_records.read_half, view) == record_outcome(
            speedups.PURE_TWINS[HALF_KEY], view
        )


@given(half_records(), st.integers(0, 60), st.integers(0, 60))
def test_a_commit_record_of_a_body_anywhere_is_built_alike(
    record: bytes, body_at: int, body_size: int
) -> None:
    # HalfRecords read_half does not make (a body inside the fixed fields): the pure twin's
    # outcome, and no write past the record's end.
    half = read_half(memoryview(record))
    assert half is not None
    half.body_at, half.body_end = body_at, body_at + body_size
    compiled = record_outcome(_records.commit_record, half, 1 << 20)
    assert compiled == record_outcome(speedups.PURE_TWINS[COMMIT_KEY], half, 1 << 20)
