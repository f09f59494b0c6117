"""Queries of the `tidemq` source and their checks, shared by the local-mode and cluster tests.

"Exactly once" (`assert_exactly_once`) means: the rows' (brokerName, queueId, queueOffset) are
all distinct, each queue's offsets run without a gap over exactly the range the brokers hold,
and the keys are the keys that were sent, each once, read from the queue it was sent to.
Every check of what a query read is made through Spark (aggregates over the sink, or over
`spark.read.parquet`, which lists a file sink through its `_spark_metadata` log), never by
listing files: a killed query may leave a file in the directory that belongs to no batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.spark.conftest import Cluster
from tests.support.conditions import eventually_sync

QueueRef = tuple[str, int]


def stream(spark: Any, cluster: Cluster, topic: str, **options: Any) -> Any:
    reader = (
        spark.readStream.format("tidemq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
    )
    for key, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, str(value))
    return reader.load()


def batch(spark: Any, cluster: Cluster, topic: str, **options: Any) -> Any:
    reader = (
        spark.read.format("tidemq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def assert_exactly_once(
    df: Any,
    placed: Mapping[str, QueueRef],
    ranges: Mapping[QueueRef, tuple[int, int]],
) -> None:
    """`df` holds each message of `placed` once, and each queue exactly its [lo, hi) range."""
    from pyspark.sql import functions as F

    per_queue = {
        (r["brokerName"], r["queueId"]): r
        for r in df.groupBy("brokerName", "queueId")
        .agg(
            F.count("*").alias("rows"),
            F.countDistinct("queueOffset").alias("distinct"),
            F.min("queueOffset").alias("lo"),
            F.max("queueOffset").alias("hi"),
        )
        .collect()
    }
    expected = {q: (lo, hi) for q, (lo, hi) in ranges.items() if hi > lo}
    assert set(per_queue) == set(expected)
    for queue, (lo, hi) in expected.items():
        row = per_queue[queue]
        assert (row["rows"], row["distinct"], row["lo"], row["hi"]) == (
            hi - lo,
            hi - lo,
            lo,
            hi - 1,
        ), (
            queue,
            row,
        )
    keys = df.select(F.col("key").cast("string").alias("k"), "brokerName", "queueId").collect()
    seen = {r["k"]: (r["brokerName"], r["queueId"]) for r in keys}
    assert len(seen) == len(keys) == len(placed)
    assert seen == dict(placed)


def all_queues(
    cluster: Cluster, queues: int, brokers: Sequence[str] | None = None
) -> list[QueueRef]:
    return [(b, q) for b in (brokers or sorted(cluster.masters)) for q in range(queues)]


def whole_range(
    cluster: Cluster, topic: str, queues: Sequence[QueueRef]
) -> dict[QueueRef, tuple[int, int]]:
    return {q: (0, hi) for q, hi in cluster.max_offsets(topic, queues).items()}


def executed(query: Any) -> list[Any]:
    """Progress events of batches that ran (idle triggers post events too)."""
    return [p for p in query.recentProgress if "addBatch" in (p["durationMs"] or {})]


def stopped_midway_then_restarted(
    spark: Any,
    cluster: Cluster,
    topic: str,
    folder: Path,
    *,
    queues_per_broker: int = 2,
    count: int = 400,
    batch_rows: int = 100,
    produce: Callable[[str], dict[str, QueueRef]] | None = None,
) -> dict[str, QueueRef]:
    """A Parquet query stopped mid-way and restarted from its checkpoint reads all once.

    `count` messages are there at the start and `count` more are sent while the query runs
    (`produce(prefix)` sends them and returns where each went; default: straight to every
    queue of the topic, `queues_per_broker` on each master), in batches of `batch_rows`.
    Returns where every message went.
    """
    cluster.create_topic(topic, queues=queues_per_broker)
    queues = all_queues(cluster, queues_per_broker)
    send = produce or (lambda prefix: cluster.produce(topic, count, prefix, queues))
    out, checkpoint = str(folder / "out"), str(folder / "checkpoint")
    placed = send("w1")

    def start(**trigger: Any) -> Any:
        return (
            stream(spark, cluster, topic, maxOffsetsPerTrigger=batch_rows)
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    def rows(where: str = "true") -> int:
        try:
            return int(spark.read.parquet(out).where(where).count())
        except Exception:  # nothing committed yet: no _spark_metadata, no schema
            return 0

    query = start(processingTime="200 milliseconds")
    eventually_sync(lambda: rows() >= 2 * batch_rows, "the first batches", 90)
    placed |= send("w2")  # arrives while the query runs
    eventually_sync(lambda: rows("cast(key as string) like 'w2-%'") > 0, "messages sent later", 90)
    query.stop()
    assert query.exception() is None
    assert rows() < 2 * count, "the query was to be stopped mid-way"
    restarted = start(availableNow=True)
    restarted.awaitTermination(120)
    assert restarted.exception() is None
    assert_exactly_once(spark.read.parquet(out), placed, whole_range(cluster, topic, queues))
    return placed
