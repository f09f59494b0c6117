"""The Spark source's record twins: compiled and pure give the same columns and the same errors.

`walk_records` (where a pull body's records start) and `fast_columns` (walked bodies as Arrow
columns, client/spark/records.py) against their compiled twins in client/spark/_records.pyx: on
records as producers send them, on random ones (IPv6 hosts, compressed bodies, properties with
names inside values, missing UNIQ_KEY, non-UTF-8 text, several bodies and ranges), on damaged
bodies and on a body damaged byte by byte. On well-formed input the compiled loop must do the
work itself: a hand-over to the pure twin fails the test.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.records import reference_record
from tests.support.speedups_twins import selected
from tidemq.client.spark import _records, records
from tidemq.client.spark.records import ColumnBuffer, spark_schema
from tidemq.common import speedups
from tidemq.store.record import encode_properties
from tidemq.store.tags import parse_tag_expression

WALK_KEY = "tidemq.client.spark.records.walk_records"
COLUMNS_KEY = "tidemq.client.spark.records.fast_columns"
PURE_WALK = speedups.PURE_TWINS[WALK_KEY]
PURE_COLUMNS = speedups.PURE_TWINS[COLUMNS_KEY]

INT64 = st.integers(-(2**63), 2**63 - 1)
# Timestamps Arrow can hold as microseconds, and the odd ones it cannot.
MILLIS = st.integers(0, 2**45) | st.sampled_from([-1, 2**62])
PROPERTY_TEXT = st.text(alphabet="KEYSUNIQ_TAG a\x01\x02\u00e9", max_size=40).map(str.encode)
producer_properties = st.builds(
    lambda i, tags, keys: encode_properties(
        {
            "UNIQ_KEY": f"ID{i:08d}",
            **({"TAGS": tags} if tags else {}),
            **({"KEYS": keys} if keys else {}),
        }
    ).encode(),
    st.integers(0, 10**8),
    st.sampled_from(["", "TagA", "t\u00e9"]),
    st.sampled_from(["", "k1", "k1 k2", "\u00e9"]),
)
property_bytes = (
    producer_properties
    | PROPERTY_TEXT
    | st.binary(max_size=30)
    | st.sampled_from([b"", b"UNIQ_KEY\x01x", b"TAGS\x01\x02UNIQ_KEY\x01", b"UNIQ_KEY\x01\xff\x02"])
)


def record(
    queue_offset: int,
    body: bytes,
    props: bytes,
    *,
    topic: bytes = b"SparkBench",
    v6: bool = False,
    compressed: bool = False,
    store_ms: int = 1_700_000_000_456,
    born_ms: int = 1_700_000_000_123,
) -> bytes:
    host = ("fe80::1", 10911) if v6 else ("10.0.0.1", 10911)
    return reference_record(
        queue_id=1,
        flag=0,
        queue_offset=queue_offset,
        phy=1000 + queue_offset,
        sys_flag=1 if compressed else 0,
        born_ts=born_ms,
        born=host,
        store_ts=store_ms,
        store=host,
        reconsume=0,
        prepared=0,
        body=zlib.compress(body) if compressed else body,
        topic=topic,
        props=props,
    )


V4_HOSTS = st.sampled_from([("10.0.0.1", 1234), ("127.0.0.1", 10911)])
ANY_HOSTS = V4_HOSTS | st.just(("fe80::1", 10912))


@st.composite
def random_records(draw: st.DrawFn, queue_offset: int, topic: bytes, odd: bool) -> bytes:
    """A record at `queue_offset`; `odd` ones may have IPv6 hosts, a compressed body, another
    topic and properties that are not what producers write."""
    return reference_record(
        queue_id=1,
        flag=0,
        queue_offset=queue_offset,
        phy=draw(INT64),
        sys_flag=draw(st.sampled_from([0, 4, 8, 1] if odd else [0, 4, 8])),
        born_ts=draw(MILLIS),
        born=draw(ANY_HOSTS if odd else V4_HOSTS),
        store_ts=draw(MILLIS),
        store=draw(ANY_HOSTS if odd else V4_HOSTS),
        reconsume=0,
        prepared=0,
        body=draw(st.binary(max_size=100)),
        topic=draw(st.sampled_from([topic, b"T", b""])) if odd else topic,
        props=draw(property_bytes if odd else producer_properties),
    )


@st.composite
def pull_bodies(draw: st.DrawFn) -> list[tuple[bytes, int, int]]:
    """1-3 pull bodies of consecutive queue offsets, each with a range to keep."""
    out = []
    offset = draw(st.integers(0, 2**40))
    topic = draw(st.sampled_from([b"SparkBench", b"T", "t\u00e9".encode()]))
    odd = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 5))
        body = b"".join(draw(random_records(offset + i, topic, odd)) for i in range(count))
        start = offset + draw(st.integers(-1, count))
        end = start + draw(st.integers(0, count + 1))
        out.append((body, start, end))
        offset += count
    return out


def as_view(body: bytes) -> memoryview:
    """A body as a large pull response's arrives: a view of a receive buffer."""
    return memoryview(bytearray(body))


def viewed(bodies: list[tuple[bytes, int, int]]) -> list[tuple[Any, int, int]]:
    return [(as_view(body), start, end) for body, start, end in bodies]


def walked(bodies: list[tuple[Any, int, int]]) -> list[Any]:
    buffer = ColumnBuffer("SparkBench", "b", 1, spark_schema(False), parse_tag_expression("*"))
    for body, start, end in bodies:
        buffer.add(body, start, end)
    return buffer._walked  # what take() hands to fast_columns


def outcome(function: Any, *args: Any) -> Any:
    """The result (columns as type, values and null count), or the error's type and message."""
    try:
        result = function(*args)
    except Exception as exc:
        return ("error", type(exc), str(exc))
    if result is None or isinstance(result, list):
        return ("result", result)
    assert type(result) is records.Columns
    return ("columns", [(str(c.type), c.to_pylist(), c.null_count) for c in result])


@contextmanager
def fast_path_only() -> Iterator[None]:
    """Fail if the compiled functions hand their input to the pure twins."""

    def refuse(*_args: Any) -> None:
        raise AssertionError("the compiled fast path handed well-formed input to the pure twin")

    saved = {key: speedups.PURE_TWINS[key] for key in (WALK_KEY, COLUMNS_KEY)}
    try:
        speedups.PURE_TWINS.update(dict.fromkeys(saved, refuse))
        yield
    finally:
        speedups.PURE_TWINS.update(saved)


def test_the_compiled_twins_are_selected() -> None:
    for key, compiled in (
        (WALK_KEY, _records.walk_records),
        (COLUMNS_KEY, _records.fast_columns),
    ):
        assert selected(key) is compiled
        assert speedups.PURE_TWINS[key] is not compiled


def test_records_as_producers_send_them_are_decoded_by_the_compiled_loop_itself() -> None:
    props = [
        encode_properties({"KEYS": f"q0-{i}", "TAGS": "bench", "UNIQ_KEY": f"q0-{i}"}).encode()
        for i in range(5)
    ]
    props[3] = encode_properties({"UNIQ_KEY": "only", "x": "t\u00e9"}).encode()  # no tags, keys
    bodies = [
        (b"".join(record(i, bytes([i]) * (i * 300), props[i]) for i in range(3)), 0, 10),
        (b"".join(record(i, b"", props[i]) for i in range(3, 5)), 0, 4),  # keeps offset 3
    ]
    expected_walks = [outcome(PURE_WALK, body) for body, _s, _e in bodies]
    expected = outcome(PURE_COLUMNS, walked(bodies))
    with fast_path_only():
        assert [outcome(_records.walk_records, b) for b, _s, _e in bodies] == expected_walks
        assert outcome(_records.fast_columns, walked(bodies)) == expected
        # bodies that are views of a receive buffer, not bytes: the same, without a copy
        views = viewed(bodies)
        assert [outcome(_records.walk_records, b) for b, _s, _e in views] == expected_walks
        assert outcome(_records.fast_columns, walked(views)) == expected
        assert outcome(_records.fast_columns, walked(views[:1])) == outcome(
            PURE_COLUMNS, walked(bodies[:1])
        )
    assert expected[0] == "columns"
    columns = dict(
        zip(records.Columns._fields, (values for _t, values, _n in expected[1]), strict=True)
    )
    assert columns["offsets"] == [0, 1, 2, 3]
    assert columns["values"] == [b"", b"\x01" * 300, b"\x02" * 600, b""]
    assert columns["tags"] == ["bench", "bench", "bench", None]
    assert columns["keys"] == ["q0-0", "q0-1", "q0-2", None]
    assert columns["msg_ids"] == ["q0-0", "q0-1", "q0-2", "only"]
    assert columns["store_ms"] == [1_700_000_000_456] * 4


@pytest.mark.parametrize(
    ("v6", "compressed", "props", "general"),
    [
        (True, False, b"UNIQ_KEY\x01a", True),
        (False, True, b"UNIQ_KEY\x01a", True),
        (False, False, b"TAGS\x01a", False),  # no UNIQ_KEY: the broker's offsetMsgId
        (False, False, b"UNIQ_KEY\x01\xff", False),  # not UTF-8: replaced
    ],
)
def test_other_records_are_left_to_the_pure_twin(
    v6: bool, compressed: bool, props: bytes, general: bool
) -> None:
    group = walked([(record(0, b"body", props, v6=v6, compressed=compressed), 0, 10)])
    expected = outcome(PURE_COLUMNS, group)
    assert outcome(_records.fast_columns, group) == expected
    assert (expected == ("result", None)) is general  # None: the general path's records


@settings(max_examples=300, deadline=None)
@given(bodies=pull_bodies())
def test_the_twins_give_the_same_columns(bodies: list[tuple[bytes, int, int]]) -> None:
    for body, _start, _end in bodies:
        assert outcome(_records.walk_records, body) == outcome(PURE_WALK, body)
        assert outcome(_records.walk_records, as_view(body)) == outcome(PURE_WALK, body)
    group = walked(bodies)
    expected = outcome(PURE_COLUMNS, group)
    assert outcome(_records.fast_columns, group) == expected
    assert outcome(_records.fast_columns, walked(viewed(bodies))) == expected
    assert outcome(PURE_COLUMNS, walked(viewed(bodies))) == expected


@settings(max_examples=400, deadline=None)
@given(
    bodies=pull_bodies(),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 10_000),
)
def test_the_twins_fail_the_same_on_damaged_bodies(
    bodies: list[tuple[bytes, int, int]], damage: list[tuple[int, int]], cut: int
) -> None:
    body = bytearray(bodies[0][0])
    for at, value in damage:
        body[at % len(body)] = value
    if damage:  # sizes are where damage matters most
        struct.pack_into(">i", body, 0, damage[0][0] % (len(body) + 8))
    damaged = bytes(body[: len(body) - cut % 97 if cut % 3 else len(body)])
    walk = outcome(_records.walk_records, damaged)
    assert walk == outcome(PURE_WALK, damaged)
    assert outcome(_records.walk_records, as_view(damaged)) == walk
    if walk[0] == "result":
        group = walked([(damaged, bodies[0][1], bodies[0][2]), *bodies[1:]])
        expected = outcome(PURE_COLUMNS, group)
        assert outcome(_records.fast_columns, group) == expected
        views = walked(viewed([(damaged, bodies[0][1], bodies[0][2]), *bodies[1:]]))
        assert outcome(_records.fast_columns, views) == expected


def test_the_twins_agree_on_every_byte_damaged() -> None:
    props = encode_properties({"KEYS": "k", "TAGS": "t", "UNIQ_KEY": "u"}).encode()
    body = record(7, b"abc", props) + record(8, b"", props, topic=b"T")
    for at in range(len(body)):
        for value in (0, 1, 0x7F, 0x80, 0xFF, body[at] ^ 0x10):
            damaged = body[:at] + bytes([value]) + body[at + 1 :]
            for cut in (damaged, damaged[:at]):
                walk = outcome(_records.walk_records, cut)
                assert walk == outcome(PURE_WALK, cut), (at, value)
                if walk[0] == "result" and walk[1]:
                    group = walked([(cut, 7, 9)])
                    assert outcome(_records.fast_columns, group) == outcome(PURE_COLUMNS, group), (
                        at,
                        value,
                    )


def test_the_twins_agree_on_starts_that_are_not_the_walks() -> None:
    """The compiled loop reads each body where it lies; starts the walk would not give (the
    first not at 0, one too far, one short of a head, a record dropped) are the twin's to judge,
    as it judges them on the bodies joined."""
    props = encode_properties({"KEYS": "k", "TAGS": "t", "UNIQ_KEY": "u"}).encode()
    first = b"".join(record(i, bytes([i]) * 40, props) for i in range(3))
    second = b"".join(record(i, b"x", props) for i in range(3, 5))
    size = len(record(0, bytes(40), props))
    for starts in ([size, 2 * size], [0, size, len(first) + 1], [0, 40], [0, 2 * size], [0]):
        group = [
            records._Walked(first, starts, 0, 10, 0, 2),
            records._Walked(second, records.walk_records(second), 0, 10, 3, 4),
        ]
        assert outcome(_records.fast_columns, group) == outcome(PURE_COLUMNS, group), starts


def test_column_buffer_batches_are_the_same_with_either_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    props = encode_properties({"KEYS": "k", "TAGS": "TagA", "UNIQ_KEY": "u"}).encode()
    bodies = [(b"".join(record(i, bytes(i), props) for i in range(4)), 1, 3)]

    def batch() -> Any:
        buffer = ColumnBuffer("T", "b", 1, spark_schema(True), parse_tag_expression("TagA"))
        for body, start, end in bodies:
            buffer.add(body, start, end)
        return buffer.take()

    compiled = batch()
    monkeypatch.setattr(records, "walk_records", PURE_WALK)
    monkeypatch.setattr(records, "fast_columns", PURE_COLUMNS)
    assert compiled.equals(batch())
    assert compiled.column("queueOffset").to_pylist() == [1, 2]
    assert isinstance(compiled, pa.RecordBatch)
