"""The transaction twins: compiled and pure give the same values and errors.

`transaction_properties` (broker/transaction/_records.pyx against broker/transaction/messages.py)
on property texts as the broker stores them (pairs, no name twice: the fast path) and on any
other text (items without or with two separators, names twice, invalid UTF-8, non-ASCII and
over-long REAL_QIDs, more than 64 items), as bytes and as a memoryview. On well-formed input
the compiled fast path must do the work itself: `fast_path_only` makes a hand-over to the pure
twin fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.speedups_twins import selected
from tidemq.broker.transaction import _records
from tidemq.broker.transaction import messages as _messages  # noqa: F401 (registers the twin)
from tidemq.common import speedups
from tidemq.store.record import encode_properties

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
