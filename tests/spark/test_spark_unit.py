"""The Spark source without Spark: options, offsets, admission control, Arrow decoding.

No JVM and no broker: records are encoded with the store's codec, the driver client is a fake.
Spark's own Arrow conversion (`to_arrow_schema`) is the oracle for the schema.
"""

from __future__ import annotations

import itertools
import json
import pickle
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tidemq.client.spark.brokers import DataLossError
from tidemq.client.spark.ingest import cli, lag_of, progress_line, short_error
from tidemq.client.spark.options import (
    EARLIEST,
    OptionError,
    QueueKey,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_duration_ms,
)
from tidemq.client.spark.reader import QueueRange, RangeReader, _Pull
from tidemq.client.spark.records import ColumnBuffer, record_offsets, spark_schema
from tidemq.client.spark.source import TideMQStreamReader, allocate, plan_ranges
from tidemq.store.layout import FLAG_COMPRESSED
from tidemq.store.record import (
    MessageToStore,
    encode_properties,
    encode_record,
    message_id,
    stamp_record,
)
from tidemq.store.tags import parse_tag_expression

NS = "127.0.0.1:9876"
V4_HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x11"
V6_HOST = bytes(15) + b"\x01" + b"\x00\x00\x27\x12"


def options(streaming: bool = True, /, **extra: str) -> SourceOptions:
    return SourceOptions.parse({"namesrvAddr": NS, "topic": "T", **extra}, streaming=streaming)


# --- options ---------------------------------------------------------------------------------


def test_defaults_follow_kafka() -> None:
    stream, batch = options(True), options(False)
    assert stream.starting.kind == "latest" and batch.starting.kind == "earliest"
    assert stream.ending.kind == "latest"
    assert stream.fail_on_data_loss and not stream.read_from_slave
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000
    assert stream.tags == "*" and not stream.filters_tags


def test_options_are_case_insensitive_and_topics_a_comma_list() -> None:
    parsed = SourceOptions.parse(
        {"NAMESRVADDR": "h1:1;h2:2", "topic": " A, B ,A", "failondataloss": "false"},
        streaming=True,
    )
    assert parsed.namesrv_addr == ("h1:1", "h2:2")
    assert parsed.topics == ("A", "B")
    assert not parsed.fail_on_data_loss


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"topic": ""}, "topic is required"),
        ({"namesrvAddr": "nohost"}, "not host:port"),
        ({"maxOffsetsPerTrigger": "0"}, "must be positive"),
        ({"maxOffsetsPerTrigger": "ten"}, "expected an integer"),
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "exceeds"),
        ({"maxTriggerDelay": "soon"}, "duration"),
        ({"failOnDataLoss": "maybe"}, "true or false"),
        ({"startingOffsets": "first"}, "expected earliest, latest or JSON"),
        ({"startingOffsets": '{"Other": {"b": {"0": 1}}}'}, "not one of option topic"),
        ({"startingOffsets": '{"T": {"b": {"x": 1}}}'}, "not a number"),
        ({"startingOffsets": '{"T": {"b": {"0": -3}}}'}, "not allowed"),
        ({"endingOffsets": "x"}, "endingOffsets is for batch"),
        ({"subscribe": "T"}, "unknown option"),
        ({"tags": " || "}, "names no tag"),
    ],
)
def test_bad_options_are_refused_by_name(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse({"namesrvAddr": NS, "topic": "T", **extra}, streaming=True)


def test_ending_offsets_refuse_earliest() -> None:
    with pytest.raises(OptionError, match="not allowed"):
        options(False, endingOffsets='{"T": {"b": {"0": -2}}}')
    with pytest.raises(OptionError, match="earliest is not allowed"):
        options(False, endingOffsets="earliest")


def test_offsets_json_spec() -> None:
    parsed = options(startingOffsets='{"T": {"broker-b": {"1": 7}, "broker-a": {"0": -2}}}')
    assert parsed.starting.kind == "json"
    assert parsed.starting.as_dict() == {("T", "broker-a", 0): EARLIEST, ("T", "broker-b", 1): 7}


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500", 500),
        ("500ms", 500),
        ("30s", 30_000),
        ("15m", 900_000),
        ("2 min", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms("maxTriggerDelay", text) == ms


# --- offsets -----------------------------------------------------------------------------------

queue_keys = st.tuples(
    st.sampled_from(["A", "B", "T-1"]),
    st.sampled_from(["broker-a", "broker-b", "z"]),
    st.integers(0, 20),
)


@given(st.dictionaries(queue_keys, st.integers(0, 10**12), max_size=30), st.randoms())
def test_offsets_json_is_canonical(offsets: dict[QueueKey, int], rnd: Any) -> None:
    items = list(offsets.items())
    rnd.shuffle(items)
    text = json.dumps(offsets_to_json(offsets))
    assert json.dumps(offsets_to_json(dict(items))) == text
    # The same text json.dumps(sort_keys=True) gives: Spark compares offsets by text.
    assert text == json.dumps(json.loads(text), sort_keys=True)
    assert offsets_from_json(json.loads(text)) == offsets


@given(st.dictionaries(queue_keys, st.integers(0, 10_000), max_size=20), st.integers(1, 20_000))
def test_allocate_never_exceeds_the_cap(available: dict[QueueKey, int], cap: int) -> None:
    shares = allocate(available, cap)
    assert set(shares) == set(available)
    assert sum(shares.values()) == min(cap, sum(available.values()))
    assert all(0 <= shares[q] <= available[q] for q in available)


def test_allocate_is_proportional() -> None:
    available = {("T", "a", 0): 900, ("T", "a", 1): 100, ("T", "a", 2): 0}
    assert allocate(available, 100) == {("T", "a", 0): 90, ("T", "a", 1): 10, ("T", "a", 2): 0}
    assert allocate(available, None) == available
    # Three queues of 1 and a cap of 2: whole offsets, ties in key order, never 3.
    ones = {("T", "a", i): 1 for i in range(3)}
    assert allocate(ones, 2) == {("T", "a", 0): 1, ("T", "a", 1): 1, ("T", "a", 2): 0}


def test_plan_ranges() -> None:
    start = {("T", "a", 0): 10, ("T", "a", 1): 5, ("T", "a", 2): 9}
    end = {("T", "a", 0): 20, ("T", "a", 1): 5, ("T", "a", 2): 4, ("T", "b", 0): 3}
    ranges = plan_ranges(start, end, {"a": {0: "h:1", 1: "h:2"}}, None)
    assert [(r.key, r.start, r.end) for r in ranges] == [
        (("T", "a", 0), 10, 20),  # queue 1: empty; queue 2: start past end (stale latest)
        (("T", "b", 0), EARLIEST, 3),  # new queue: from its earliest offset
    ]
    assert ranges[0].brokers == ((0, "h:1"), (1, "h:2")) and ranges[1].brokers == ()


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=6), st.integers(1, 40))
def test_min_partitions_split_covers_each_range_exactly(sizes: list[int], parts: int) -> None:
    start = {("T", "a", i): 100 for i in range(len(sizes))}
    end = {("T", "a", i): 100 + size for i, size in enumerate(sizes)}
    ranges = plan_ranges(start, end, {}, parts)
    assert len(ranges) >= min(parts, sum(sizes)) or len(ranges) >= len(sizes)
    for key in start:
        pieces = sorted((r.start, r.end) for r in ranges if r.key == key)
        assert pieces[0][0] == start[key] and pieces[-1][1] == end[key]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
        assert all(lo < hi for lo, hi in pieces)


# --- the stream reader's admission control, with a fake broker ------------------------------


class FakeDriver:
    def __init__(self, maxes: dict[QueueKey, int], mins: dict[QueueKey, int] | None = None):
        self.maxes = maxes
        self.mins = mins or {}
        self.calls = 0

    def queues(self, *, fresh: bool = False) -> list[QueueKey]:
        return sorted(self.maxes)

    def offsets(self, keys: Iterable[QueueKey], which: str) -> dict[QueueKey, int]:
        self.calls += 1
        source = self.maxes if which == "max" else self.mins
        return {k: source.get(k, 0) for k in keys}

    def search(self, keys: Iterable[QueueKey], timestamp: int) -> dict[QueueKey, int]:
        return {k: 0 for k in keys}

    def addresses(self) -> dict[str, dict[int, str]]:
        return {"a": {0: "h:1"}}

    def close(self) -> None:
        pass


def stream_reader(fake: FakeDriver, **extra: str) -> TideMQStreamReader:
    opts = options(True, offsetFetchIntervalMs="0", **extra)
    reader = TideMQStreamReader(opts, spark_schema(False))
    reader._client = fake  # type: ignore[assignment]
    return reader


def as_json(offsets: dict[QueueKey, int]) -> dict[str, Any]:
    return offsets_to_json(offsets)


def test_latest_offset_unchanged_returns_start_itself() -> None:
    fake = FakeDriver({("T", "a", 0): 5, ("T", "a", 1): 7})
    reader = stream_reader(fake)
    start = reader.initialOffset()
    assert start == {"T": {"a": {"0": 5, "1": 7}}}
    assert reader.latestOffset(start, ReadAllAvailable()) is start


def test_initial_offset_does_not_move_between_calls() -> None:
    fake = FakeDriver({("T", "a", 0): 5})
    reader = stream_reader(fake)
    first = reader.initialOffset()
    fake.maxes[("T", "a", 0)] = 50
    assert reader.initialOffset() == first


def test_latest_offset_caps_by_read_max_rows() -> None:
    fake = FakeDriver({("T", "a", 0): 1000, ("T", "a", 1): 3000})
    reader = stream_reader(fake, startingOffsets="earliest", maxOffsetsPerTrigger="400")
    assert reader.getDefaultReadLimit() == ReadMaxRows(400)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(400))
    assert offsets_from_json(end) == {("T", "a", 0): 100, ("T", "a", 1): 300}


def test_new_queue_starts_at_earliest_and_joins_when_it_has_data() -> None:
    fake = FakeDriver({("T", "a", 0): 10}, mins={("T", "b", 0): 3})
    reader = stream_reader(fake)
    start = reader.initialOffset()
    fake.maxes[("T", "b", 0)] = 3  # a new, empty queue: not in the offsets yet
    assert reader.latestOffset(start, ReadAllAvailable()) is start
    fake.maxes[("T", "b", 0)] = 8
    end = reader.latestOffset(start, ReadAllAvailable())
    assert offsets_from_json(end) == {("T", "a", 0): 10, ("T", "b", 0): 8}
    ranges = reader.partitions(start, end)
    assert [(r.key, r.start, r.end) for r in ranges] == [(("T", "b", 0), EARLIEST, 8)]


def test_vanished_queue_keeps_its_offset() -> None:
    fake = FakeDriver({("T", "a", 0): 10})
    reader = stream_reader(fake)
    start = as_json({("T", "a", 0): 4, ("T", "gone", 0): 77})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert offsets_from_json(end) == {("T", "a", 0): 10, ("T", "gone", 0): 77}


def test_min_offsets_wait_until_max_trigger_delay() -> None:
    fake = FakeDriver({("T", "a", 0): 0})
    reader = stream_reader(fake, minOffsetsPerTrigger="100", maxTriggerDelay="1h")
    start = reader.initialOffset()
    fake.maxes[("T", "a", 0)] = 10
    first = reader.latestOffset(start, ReadAllAvailable())  # the first batch never waits
    assert offsets_from_json(first) == {("T", "a", 0): 10}
    fake.maxes[("T", "a", 0)] = 50
    assert reader.latestOffset(first, ReadAllAvailable()) is first  # 40 < 100: wait
    fake.maxes[("T", "a", 0)] = 110
    assert offsets_from_json(reader.latestOffset(first, ReadAllAvailable())) == {("T", "a", 0): 110}
    reader._last_trigger -= 3_600_000  # the delay has passed: a small batch goes
    fake.maxes[("T", "a", 0)] = 115
    later = as_json({("T", "a", 0): 110})
    assert offsets_from_json(reader.latestOffset(later, ReadAllAvailable())) == {("T", "a", 0): 115}


def test_available_now_stops_at_the_snapshot() -> None:
    fake = FakeDriver({("T", "a", 0): 100})
    reader = stream_reader(fake, startingOffsets="earliest", minOffsetsPerTrigger="1000")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    fake.maxes[("T", "a", 0)] = 500
    fake.maxes[("T", "new", 0)] = 5
    end = reader.latestOffset(start, ReadMaxRows(60))
    assert offsets_from_json(end) == {("T", "a", 0): 60}  # min rows ignored, max honoured
    end = reader.latestOffset(end, ReadMaxRows(60))
    end = reader.latestOffset(end, ReadMaxRows(60))
    assert offsets_from_json(end) == {("T", "a", 0): 100}
    assert reader.latestOffset(end, ReadMaxRows(60)) is end


def test_stream_reader_pickles_without_its_connections() -> None:
    reader = stream_reader(FakeDriver({("T", "a", 0): 1}))
    reader.initialOffset()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._client is None and copy.options == reader.options


def test_partition_pickles() -> None:
    part = QueueRange("T", "broker-a", 3, 10, 20, ((0, "h:1"), (1, "h:2")))
    assert pickle.loads(pickle.dumps(part)) == part


# --- records to Arrow ----------------------------------------------------------------------------


def record(
    queue_offset: int,
    body: bytes,
    properties: dict[str, str],
    *,
    v6: bool = False,
    compressed: bool = False,
    physical_offset: int = 1000,
) -> bytes:
    host = V6_HOST if v6 else V4_HOST
    stored_body = zlib.compress(body) if compressed else body
    msg = MessageToStore(
        topic="T",
        queue_id=2,
        body=stored_body,
        properties=encode_properties(properties),
        sys_flag=FLAG_COMPRESSED if compressed else 0,
        born_timestamp=1_700_000_000_123,
        born_host=host,
        store_host=host,
    )
    encoded = encode_record(msg, 1 << 20)
    data = encoded.data
    stamp_record(data, 0, encoded.store_ts_at, queue_offset, physical_offset, 1_700_000_000_456)
    return bytes(data)


def props(i: int, tags: str | None = "TagA") -> dict[str, str]:
    out = {"KEYS": f"k{i} other", "UNIQ_KEY": f"ID{i:030d}", "WAIT": "true", "x": "1"}
    if tags is not None:
        out["TAGS"] = tags
    return out


def decode(
    bodies: Sequence[bytes], start: int = 0, end: int = 10**9, tags: str = "*", **kw: bool
) -> Any:
    schema = spark_schema(kw.get("include_properties", False))
    buffer = ColumnBuffer("T", "broker-a", 2, schema, parse_tag_expression(tags))
    for body in bodies:
        buffer.add(body, start, end)
    batch = buffer.take()
    # Exactly what Spark's Python data source worker checks a RecordBatch against.
    assert batch.schema.equals(to_arrow_schema(schema, timezone="UTC"))
    return batch


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("compressed", [False, True])
def test_columns_of_every_record_layout(v6: bool, compressed: bool) -> None:
    body = b"".join(
        record(i, b"v%d" % i * 50, props(i), v6=v6, compressed=compressed) for i in range(3)
    )
    rows = decode([body]).to_pylist()
    assert [r["queueOffset"] for r in rows] == [0, 1, 2]
    first = rows[0]
    assert first["value"] == b"v0" * 50
    assert first["key"] == b"k0 other"
    assert first["tags"] == "TagA"
    assert first["msgId"] == "ID" + "0" * 30
    assert (first["topic"], first["brokerName"], first["queueId"]) == ("T", "broker-a", 2)
    assert int(first["storeTimestamp"].timestamp() * 1000) == 1_700_000_000_456
    assert int(first["bornTimestamp"].timestamp() * 1000) == 1_700_000_000_123


def test_missing_properties_give_nulls_and_the_broker_msg_id() -> None:
    body = record(7, b"x", {"WAIT": "true"}, physical_offset=4242) + record(8, b"", props(8))
    rows = decode([body]).to_pylist()
    assert rows[0]["key"] is None and rows[0]["tags"] is None
    assert rows[0]["msgId"] == message_id(V4_HOST, 4242)
    assert rows[1]["value"] == b"" and rows[1]["msgId"] == "ID" + "0" * 29 + "8"


def test_range_bounds_and_offsets_seen() -> None:
    body = b"".join(record(i, b"x", props(i)) for i in range(10, 20))
    schema = spark_schema(False)
    buffer = ColumnBuffer("T", "broker-a", 2, schema, parse_tag_expression("*"))
    assert buffer.add(body, 12, 15) == (10, 19, 10)
    assert buffer.take().column("queueOffset").to_pylist() == [12, 13, 14]
    assert record_offsets(body) == list(range(10, 20))


def test_tags_filtered_by_string_not_only_hash_code() -> None:
    # "Aa" and "BB" share Java's String.hashCode: the broker lets both through.
    body = b"".join(
        record(i, b"x", props(i, tags)) for i, tags in enumerate(["Aa", "BB", None, "Aa"])
    )
    assert decode([body], tags="Aa").column("queueOffset").to_pylist() == [0, 3]
    assert decode([body], tags="BB || Zz").column("queueOffset").to_pylist() == [1]


def test_properties_map_and_many_bodies() -> None:
    bodies = [record(i, b"x", props(i)) for i in range(4)]
    rows = decode(bodies, include_properties=True).to_pylist()
    assert [r["queueOffset"] for r in rows] == [0, 1, 2, 3]
    assert dict(rows[1]["properties"]) == props(1)


def test_empty_window_is_an_empty_batch_of_the_schema() -> None:
    assert decode([]).num_rows == 0


def test_bodies_of_a_window_decoded_together_keep_their_rows_and_ranges() -> None:
    # Several pulls per window (a broker's default cap is 32 messages per pull): decoded as
    # one buffer, each body's own range applied; a v6 body sends the window the general way.
    big = 5 << 32  # queue offsets past 32 bits: read as two words
    first = b"".join(record(big + i, b"a%d" % i, props(i)) for i in range(4))
    second = b"".join(record(big + i, b"b%d" % i * 300, props(i)) for i in range(4, 9))
    schema = spark_schema(False)
    buffer = ColumnBuffer("T", "broker-a", 2, schema, parse_tag_expression("*"))
    assert buffer.add(first, big + 1, big + 7) == (big, big + 3, 4)
    assert buffer.add(second, big + 4, big + 7) == (big + 4, big + 8, 5)
    rows = buffer.take().to_pylist()
    assert [r["queueOffset"] - big for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["value"] for r in rows[:4]] == [b"a1", b"a2", b"a3", b"b4" * 300]
    assert [r["key"] for r in rows] == [b"k%d other" % i for i in range(1, 7)]
    assert rows[5]["msgId"] == "ID" + "0" * 29 + "6"
    v6 = record(big + 9, b"c", props(9), v6=True)
    offsets = decode([first, v6], end=big + 10).column("queueOffset").to_pylist()
    assert offsets == [big + i for i in (0, 1, 2, 3, 9)]


def test_properties_first_occurrence_nulls_and_names_inside_values() -> None:
    text = ["KEYS\x01k1\x02TAGS\x01t1\x02TAGS\x01t2\x02", "XTAGS\x01no\x02V\x01TAGS\x01\x02"]
    raw = []
    for offset, props_text in enumerate(text):
        # No properties, then the text put in place of the empty properties and their length.
        data = bytearray(record(offset, b"x", {})[:-2])
        encoded = props_text.encode()
        data += len(encoded).to_bytes(2, "big") + encoded
        data[0:4] = len(data).to_bytes(4, "big")
        raw.append(bytes(data))
    rows = decode([b"".join(raw)]).to_pylist()
    assert [(r["key"], r["tags"]) for r in rows] == [(b"k1", "t1"), (None, None)]
    assert rows[1]["msgId"] == message_id(V4_HOST, 1000)


def test_a_body_length_past_its_record_is_refused_when_decoded() -> None:
    body = bytearray(record(0, b"x" * 10, props(0)) + record(1, b"y", props(1)))
    body[84:88] = (60).to_bytes(4, "big")  # the first record's body length, past its end
    schema = spark_schema(False)
    buffer = ColumnBuffer("T", "broker-a", 2, schema, parse_tag_expression("*"))
    assert buffer.add(bytes(body), 0, 10) == (0, 1, 2)
    with pytest.raises(ValueError, match="length"):  # whichever check sees it first
        buffer.take()


def test_a_damaged_record_is_refused() -> None:
    body = bytearray(record(0, b"x" * 10, props(0)))
    body[4] ^= 0xFF  # magic
    schema = spark_schema(False)
    buffer = ColumnBuffer("T", "broker-a", 2, schema, parse_tag_expression("*"))
    with pytest.raises(ValueError, match="bad record"):
        buffer.add(bytes(body), 0, 10)
    with pytest.raises(ValueError, match="ends inside a record"):
        buffer.add(record(0, b"x", props(0))[:60], 0, 10)


# --- the ingest command's progress line ----------------------------------------------------------


def test_progress_line_and_lag() -> None:
    progress = {
        "batchId": 3,
        "numInputRows": 500,
        "durationMs": {"triggerExecution": 250, "addBatch": 200},
        "sources": [
            {
                "endOffset": json.dumps({"T": {"a": {"0": 100, "1": 50}}}),
                "latestOffset": json.dumps({"T": {"a": {"0": 180, "1": 50, "2": 7}}}),
            }
        ],
    }
    assert lag_of(progress) == 87
    assert progress_line(progress, 1500) == (
        "batch 3: 500 rows in 0.25 s (2000 rows/s), lag 87, 1500 rows in all"
    )
    assert lag_of({"sources": [{"endOffset": None}]}) is None


def test_arrow_schema_is_sparks() -> None:
    # Not large_string, int32 queue ids, timestamp[us, UTC], a map for properties.
    schema = to_arrow_schema(spark_schema(True), timezone="UTC")
    assert schema.field("topic").type == pa.string()
    assert schema.field("queueId").type == pa.int32()
    assert schema.field("storeTimestamp").type == pa.timestamp("us", tz="UTC")
    assert str(schema.field("properties").type) == "map<string, string>"


# --- the executor's range reader against a scripted broker ----------------------------------------


PULL_OK, PULL_NOT_FOUND, PULL_RETRY, PULL_MOVED = 0, 19, 20, 21


def scripted(
    store: dict[int, bytes],
    *,
    min_offset: int = 0,
    lagging_member: int | None = None,
    **extra: str,
) -> tuple[RangeReader, list[tuple[int, int, int]]]:
    """A RangeReader whose pulls are answered from `store` (queue offset -> record bytes).

    Offsets missing from `store` below its max are holes (records removed); `lagging_member`
    answers PULL_NOT_FOUND to every pull. Returns the reader and a log of (broker id, offset,
    count) pulls.
    """
    opts = options(False, pullBatchSize="4", pullsInFlight="2", pollTimeoutMs="2000", **extra)
    part = QueueRange("T", "broker-a", 2, 0, max(store) + 1, ((0, "m:1"), (1, "s:1")))
    reader = RangeReader(opts, part, spark_schema(False))
    pulls: list[tuple[int, int, int]] = []
    top = max(store) + 1

    async def pull(offset: int, count: int) -> _Pull:
        member = reader.broker_id
        pulls.append((member, offset, count))
        if member == lagging_member:
            return _Pull(PULL_NOT_FOUND, offset, min_offset, 0, 0, b"")
        if offset < min_offset:
            return _Pull(PULL_MOVED, min_offset, min_offset, top, 0, b"")
        found = [o for o in range(offset, top) if o in store][:count]
        if not found:
            return _Pull(PULL_RETRY, top, min_offset, top, 0, b"")
        return _Pull(PULL_OK, found[-1] + 1, min_offset, top, 0, b"".join(store[o] for o in found))

    reader._pull = pull  # type: ignore[method-assign]
    return reader, pulls


def read_offsets(reader: RangeReader) -> list[int]:
    return [o for batch in reader.batches() for o in batch.column("queueOffset").to_pylist()]


def queue_store(offsets: Iterable[int]) -> dict[int, bytes]:
    return {o: record(o, b"v%d" % o, props(o)) for o in offsets}


def test_range_reader_reads_a_range_in_windows() -> None:
    reader, pulls = scripted(queue_store(range(10)))
    assert read_offsets(reader) == list(range(10))
    assert sorted(p[1] for p in pulls) == [0, 4, 8]  # windows of pullBatchSize


def test_range_reader_hole_is_data_loss() -> None:
    store = queue_store([0, 1, 3, 4, 5, 6, 7])
    reader, _ = scripted(store)
    with pytest.raises(DataLossError, match=r"offsets \[2, 3\) are lost"):
        read_offsets(reader)
    reader, _ = scripted(store, failOnDataLoss="false")
    assert read_offsets(reader) == [0, 1, 3, 4, 5, 6, 7]
    assert reader.lost == 1


def test_range_reader_below_min_offset_is_data_loss() -> None:
    store = queue_store(range(6, 12))
    reader, _ = scripted(store, min_offset=6)
    with pytest.raises(DataLossError, match=r"min offset is now 6"):
        read_offsets(reader)
    reader, _ = scripted(store, min_offset=6, failOnDataLoss="false")
    assert read_offsets(reader) == list(range(6, 12))
    assert reader.lost == 6


def test_range_reader_leaves_a_lagging_member() -> None:
    reader, pulls = scripted(queue_store(range(8)), lagging_member=1, readFromSlave="true")
    assert reader.broker_id == 1  # readFromSlave: the slave first
    assert read_offsets(reader) == list(range(8))
    assert pulls[0][0] == 1 and pulls[-1][0] == 0


def test_range_reader_tag_filter_skips_without_loss() -> None:
    store = {o: record(o, b"x", props(o, "A" if o % 3 == 0 else "B")) for o in range(9)}
    reader, _ = scripted(store, tags="A")
    assert read_offsets(reader) == [0, 3, 6]
    assert reader.lost == 0


def test_short_error_finds_our_line_in_a_spark_traceback() -> None:
    wrapped = RuntimeError(
        "[PYTHON_DATA_SOURCE_ERROR] Failed\nTraceback (most recent call last):\n  File x\n"
        "client.spark.options.OptionError: maxOffsetsPerTrigger: must be positive, got 0\n"
        "\tat org.apache.spark.Something"
    )
    assert short_error(wrapped) == (
        "client.spark.options.OptionError: maxOffsetsPerTrigger: must be positive, got 0"
    )
    assert short_error(RuntimeError("first line\nsecond")) == "first line"


def test_ingest_cli_refuses_conflicting_triggers_before_starting_spark() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(
        cli,
        [
            "-n",
            NS,
            "-t",
            "T",
            "-o",
            "/x",
            "-c",
            "/y",
            "--available-now",
            "--trigger-interval",
            "1s",
        ],
    )
    assert result.exit_code == 2 and "exclude each other" in result.output
    result = CliRunner().invoke(cli, ["-n", NS, "-t", "T", "-o", "/x", "-c", "/y", "--conf", "x"])
    assert result.exit_code == 2 and "expected key=value" in result.output


def test_credentials_options_sign_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidemq.client.spark.brokers import BrokerClient

    parsed = options(accessKey="spark-reader", secretKey="spark-secret")
    assert (parsed.access_key, parsed.secret_key) == ("spark-reader", "spark-secret")
    assert "spark-secret" not in repr(parsed)
    assert pickle.loads(pickle.dumps(parsed)) == parsed
    request = BrokerClient(parsed).api.request(11, {"topic": "T"})
    assert request.ext_fields["AccessKey"] == "spark-reader" and "Signature" in request.ext_fields
    assert "AccessKey" not in BrokerClient(options()).api.request(11, {}).ext_fields
    with pytest.raises(OptionError, match="accessKey/secretKey"):
        options(accessKey="spark-reader")

    from click.testing import CliRunner

    import tidemq.client.spark.ingest as ingest

    seen: list[dict[str, str]] = []
    monkeypatch.setattr(ingest, "run", lambda settings: seen.append(settings.source_options) or 0)
    args = ["-n", NS, "-t", "T", "-o", "/x", "-c", "/y", "--access-key", "ak-ingest"]
    result = CliRunner().invoke(cli, args, env={"TIDEMQ_SECRET_KEY": "sk-ingest"})
    assert result.exit_code == 0, result.output
    assert seen[0]["accessKey"] == "ak-ingest" and seen[0]["secretKey"] == "sk-ingest"


@pytest.mark.parametrize(("reused", "freezes"), [("1", 1), ("", 0)])
def test_a_reused_worker_freezes_its_imports_once(
    monkeypatch: pytest.MonkeyPatch, reused: str, freezes: int
) -> None:
    from tidemq.client.spark import reader

    calls: list[None] = []
    monkeypatch.setattr(reader, "_frozen", False)
    monkeypatch.setattr(reader.gc, "freeze", lambda: calls.append(None))
    monkeypatch.setenv("SPARK_REUSE_WORKER", reused)
    for _ in range(3):
        reader._freeze_imports()
    assert len(calls) == freezes


def test_ingest_names_a_mistyped_option_in_one_line_before_spark_starts() -> None:
    """Checked before the name servers (none answers here) and before Spark: one line naming
    the option and the one it probably meant, no AnalysisException from a Python worker."""
    import io

    from tidemq.client.spark.ingest import IngestSettings, run

    out = io.StringIO()
    settings = IngestSettings(
        source_options={"namesrvAddr": "127.0.0.1:1", "topic": "T", "maxOffsetPerTrigger": "5"},
        output="/nonexistent/out",
        checkpoint="/nonexistent/checkpoint",
    )
    assert run(settings, out=out) == 1
    [line] = out.getvalue().splitlines()
    assert line.startswith(
        "tidemq-ingest: unknown option(s) maxoffsetpertrigger "
        "(did you mean maxOffsetsPerTrigger?); tidemq knows "
    )
