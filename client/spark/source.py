"""The `tidemq` PySpark data source: batch (`spark.read`) and streaming (`spark.readStream`).

    from tidemq.client.spark import register
    register(spark)
    df = (spark.readStream.format("tidemq")
          .option("namesrvAddr", "127.0.0.1:9876").option("topic", "Orders")
          .option("startingOffsets", "earliest").load())

Partitions are message queues (topic, brokerName, queueId); an offset is the next consume-queue
offset to read. Offsets travel through Spark's checkpoint as canonical JSON (sorted keys, see
`options.offsets_to_json`): `{"Orders": {"broker-a": {"0": 120, "1": 98}}}`. The checkpoint is
the source of truth: nothing is committed to the broker.

Which process runs what (pyspark 4.x, see design/spark-notes.md): `TideMQDataSource` is built in
short-lived workers for `.load()`; the stream reader's offset methods (`initialOffset`,
`latestOffset`, `partitions`, `commit`, ...) run in one long-lived runner process per query, which
keeps a `DriverClient` (routes and connections) between calls; `read()` runs on executors on a
pickled copy of a reader made by the planner, so it uses only the options and the partition.

Streaming offsets per trigger (`latestOffset(start, limit)`):
1. the queues of the topics from the name servers (cached for a few seconds, refreshed on
   failure) and each queue's max offset (reused for `offsetFetchIntervalMs`, so an idle query
   polled every 10 ms does not flood the broker);
2. a queue missing from `start` is new: it is read from its earliest offset; one that vanished
   from the routes (its broker group is gone) keeps its offset;
3. under Trigger.AvailableNow the max offsets snapshot taken by `prepareForTriggerAvailableNow`
   caps everything, and minOffsetsPerTrigger is ignored;
4. `minOffsetsPerTrigger`: fewer new offsets than that, and less than `maxTriggerDelay` since the
   last batch, means no batch yet (Kafka's rule);
5. `maxOffsetsPerTrigger` (Spark's ReadMaxRows) is split over the queues in proportion to their
   backlog, largest remainders first, so a batch never exceeds it;
6. nothing new: `start` is returned unchanged, and Spark plans no batch.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tidemq.client.spark.brokers import DriverClient, SourceError
from tidemq.client.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    QueueKey,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
)
from tidemq.client.spark.reader import QueueRange, read_range
from tidemq.client.spark.records import spark_schema

log = logging.getLogger(__name__)

FORMAT = "tidemq"
OffsetsJson = dict[str, dict[str, dict[str, int]]]


class TideMQDataSource(DataSource):
    """`format("tidemq")`; options in `client.spark.options`, schema in `client.spark.records`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self, *, streaming: bool) -> SourceOptions:
        return SourceOptions.parse(self.options, streaming=streaming)

    def schema(self) -> StructType:
        # Parsing here reports a bad option at .load(), not at the first batch.
        return spark_schema(self._options(streaming=False).include_properties)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._options(streaming=False)
        return TideMQBatchReader(options, _checked(schema, options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._options(streaming=True)
        return TideMQStreamReader(options, _checked(schema, options))


def _checked(schema: StructType, options: SourceOptions) -> StructType:
    # read() yields Arrow batches of exactly our schema; another one could never match.
    expected = spark_schema(options.include_properties)
    if schema != expected:
        raise OptionError(
            f"the tidemq source has a fixed schema ({expected.simpleString()}); "
            f"got {schema.simpleString()}"
        )
    return schema


# --- offsets shared by both readers ---------------------------------------------------------


def resolve_start(
    client: DriverClient, options: SourceOptions, queues: Sequence[QueueKey]
) -> dict[QueueKey, int]:
    """Concrete start offsets of `queues`: startingTimestamp, else startingOffsets."""
    if options.starting_timestamp is not None:
        return client.search(queues, options.starting_timestamp)
    spec = options.starting
    if spec.kind == "latest":
        return client.offsets(queues, "max")
    if spec.kind == "earliest":
        return client.offsets(queues, "min")
    named = spec.as_dict()
    _check_named(named, queues, "startingOffsets")
    # Queues the JSON does not name start at earliest, like queues created later.
    wanted = {q: named.get(q, EARLIEST) for q in queues}
    return _resolve_sentinels(client, wanted)


def resolve_end(
    client: DriverClient, options: SourceOptions, queues: Sequence[QueueKey]
) -> dict[QueueKey, int]:
    spec = options.ending
    if spec.kind == "latest":
        return client.offsets(queues, "max")
    named = spec.as_dict()
    _check_named(named, queues, "endingOffsets")
    return _resolve_sentinels(client, {q: named.get(q, LATEST) for q in queues})


def _check_named(named: Mapping[QueueKey, int], queues: Sequence[QueueKey], option: str) -> None:
    unknown = sorted(set(named) - set(queues))
    if unknown:
        raise SourceError(f"{option} names queues the routes do not have: {unknown}")


def _resolve_sentinels(client: DriverClient, wanted: dict[QueueKey, int]) -> dict[QueueKey, int]:
    out = dict(wanted)
    earliest = [q for q, o in wanted.items() if o == EARLIEST]
    latest = [q for q, o in wanted.items() if o == LATEST]
    if earliest:
        out.update(client.offsets(earliest, "min"))
    if latest:
        out.update(client.offsets(latest, "max"))
    return out


def plan_ranges(
    start: Mapping[QueueKey, int],
    end: Mapping[QueueKey, int],
    addresses: Mapping[str, Mapping[int, str]],
    min_partitions: int | None,
) -> list[QueueRange]:
    """One `QueueRange` per queue with something in `[start, end)`, split for minPartitions.

    A queue in `end` but not in `start` is read from its earliest offset (start -2). A start
    past its end (a `latest` start offset recomputed after a restart) reads nothing.
    """
    ranges: list[QueueRange] = []
    for key in sorted(end):
        topic, broker, queue = key
        lo, hi = start.get(key, EARLIEST), end[key]
        if lo != EARLIEST and lo >= hi:
            if lo > hi:
                log.warning("queue %s: start %d is past end %d; nothing to read", key, lo, hi)
            continue
        brokers = tuple(sorted(addresses.get(broker, {}).items()))
        ranges.append(QueueRange(topic, broker, queue, lo, hi, brokers))
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    return _split(ranges, min_partitions)


def _split(ranges: list[QueueRange], min_partitions: int) -> list[QueueRange]:
    # Kafka's KafkaOffsetRangeCalculator: parts in proportion to size, at least one each.
    sizes = [r.end - r.start if r.start != EARLIEST else 0 for r in ranges]
    total = sum(sizes)
    if total == 0:
        return ranges
    out: list[QueueRange] = []
    for r, size in zip(ranges, sizes, strict=True):
        parts = min(size, max(1, round(size * min_partitions / total))) if size else 1
        if parts == 1:
            out.append(r)
            continue
        step, extra = divmod(size, parts)
        lo = r.start
        for i in range(parts):
            hi = lo + step + (1 if i < extra else 0)
            out.append(QueueRange(r.topic, r.broker_name, r.queue_id, lo, hi, r.brokers))
            lo = hi
    return out


def allocate(available: Mapping[QueueKey, int], cap: int | None) -> dict[QueueKey, int]:
    """Split at most `cap` offsets over queues in proportion to what each has available.

    Floors first, then one more to the largest remainders (ties in key order): the total is
    exactly min(cap, sum), never more, and no queue gets more than it has. (Kafka rounds small
    shares up, which can overshoot maxOffsetsPerTrigger.)
    """
    total = sum(available.values())
    if cap is None or total <= cap:
        return dict(available)
    shares = {q: cap * a // total for q, a in available.items()}
    remainder = cap - sum(shares.values())
    by_fraction = sorted(available, key=lambda q: (-(cap * available[q] % total), q))
    for q in by_fraction[:remainder]:
        shares[q] += 1
    return shares


# --- batch -------------------------------------------------------------------------------------


class TideMQBatchReader(DataSourceReader):
    """`spark.read.format("tidemq")`: `[startingOffsets, endingOffsets)` of every queue.

    The ranges are fixed when Spark plans the query (`partitions()` runs in the planner).
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[QueueRange]:
        client = DriverClient(self.options)
        try:
            queues = client.queues(fresh=True)
            start = resolve_start(client, self.options, queues)
            end = resolve_end(client, self.options, queues)
            return plan_ranges(start, end, client.addresses(), self.options.min_partitions)
        finally:
            client.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition, self.schema)


# --- streaming -------------------------------------------------------------------------------


class TideMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; see the module docstring for how each trigger's end is chosen."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._client: DriverClient | None = None
        self._initial: OffsetsJson | None = None
        self._latest: dict[QueueKey, int] = {}
        self._latest_at = float("-inf")
        self._new_queue_min: dict[QueueKey, int] = {}
        self._target: dict[QueueKey, int] | None = None
        # Kafka's lastTriggerMillis: 0, so the first batch is never held back by min rows.
        self._last_trigger = 0.0

    def __getstate__(self) -> dict[str, Any]:
        # The planner pickles this reader into every task: no connections, no loop.
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    def _driver(self) -> DriverClient:
        if self._client is None:
            self._client = DriverClient(self.options)
        return self._client

    # --- offsets ------------------------------------------------------------------------------

    def initialOffset(self) -> OffsetsJson:
        # Spark asks twice at the start of a query; a `latest` start must not move in between.
        if self._initial is None:
            client = self._driver()
            queues = client.queues(fresh=True)
            self._initial = offsets_to_json(resolve_start(client, self.options, queues))
        return copy.deepcopy(self._initial)

    def prepareForTriggerAvailableNow(self) -> None:
        client = self._driver()
        self._target = client.offsets(client.queues(fresh=True), "max")
        self._latest, self._latest_at = dict(self._target), time.monotonic()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        # minOffsetsPerTrigger needs maxTriggerDelay too, which no ReadLimit carries: it is
        # applied in latestOffset.
        return ReadAllAvailable()

    def _high_watermarks(self) -> dict[QueueKey, int]:
        if self._target is not None:
            return self._latest
        age_ms = (time.monotonic() - self._latest_at) * 1000
        if age_ms >= self.options.offset_fetch_interval_ms:
            client = self._driver()
            self._latest = client.offsets(client.queues(), "max")
            self._latest_at = time.monotonic()
        return self._latest

    def latestOffset(self, start: OffsetsJson, limit: ReadLimit) -> OffsetsJson:
        begin = offsets_from_json(start)
        latest = dict(self._high_watermarks())
        if self._target is not None:
            # AvailableNow: never past the snapshot, and queues created since are not read.
            latest = {q: min(v, self._target[q]) for q, v in latest.items() if q in self._target}
        new = sorted(q for q in latest if q not in begin)
        unknown = [q for q in new if q not in self._new_queue_min]
        if unknown:
            self._new_queue_min.update(self._driver().offsets(unknown, "min"))
        effective = dict(begin)
        effective.update({q: self._new_queue_min[q] for q in new})
        available = {q: max(0, latest.get(q, o) - o) for q, o in effective.items()}
        total = sum(available.values())
        if total == 0:
            return start
        cap = self.options.max_offsets_per_trigger
        min_rows = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            cap = None
        elif isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        now = time.time() * 1000
        if (
            self._target is None
            and min_rows is not None
            and total < min_rows
            and now - self._last_trigger < self.options.max_trigger_delay_ms
        ):
            return start
        shares = allocate(available, cap)
        end = dict(begin)
        for q, share in shares.items():
            if q in begin or share > 0:  # a new queue joins once it has something to read
                end[q] = effective[q] + share
        self._last_trigger = now
        return offsets_to_json(end)

    def reportLatestOffset(self) -> OffsetsJson | None:
        # Shown as the source's latestOffset in progress events: the lag is latest - end.
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> list[QueueRange]:
        client = self._driver()
        # On restart Spark replays a logged batch through partitions() alone: routes first.
        client.queues()
        return plan_ranges(
            offsets_from_json(start),
            offsets_from_json(end),
            client.addresses(),
            self.options.min_partitions,
        )

    def commit(self, end: OffsetsJson) -> None:
        # Advisory only: the checkpoint owns the offsets, and commit() lags one batch (and
        # never comes for the last one), so nothing may depend on it.
        log.debug("batch up to %s committed", end)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition, self.schema)
