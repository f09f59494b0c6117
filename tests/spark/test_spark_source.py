"""The `tidemq` data source in Spark local mode against real name servers and brokers.

One Spark session for the whole module (`spark` fixture). Queries and checks ("exactly once")
are in tests/spark/queries.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import Cluster, spark_subprocess_env, start_cluster
from tests.spark.queries import (
    QueueRef,
    all_queues,
    assert_exactly_once,
    batch,
    executed,
    stopped_midway_then_restarted,
    stream,
    whole_range,
)
from tests.support.conditions import eventually_sync
from tests.support.ha_brokers import HA_TIMING
from tests.support.processes import REPO_ROOT, ProcessGroup
from tidemq.client.admin.api import AdminClient
from tidemq.client.api import BrokerAPI
from tidemq.client.spark.records import spark_schema

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def _runtime_info(namesrv: str, address: str) -> dict[str, str]:
    async with AdminClient(namesrv) as admin:
        return await admin.runtime_info(address)


# --- batch --------------------------------------------------------------------------------------


def test_batch_read_returns_every_message_once(spark: Any, cluster: Cluster) -> None:
    topic = "SparkBatch"
    cluster.create_topic(topic, queues=4)
    queues = all_queues(cluster, 4)
    placed = cluster.produce(topic, 2000, "b", queues, tags=("TagA", "TagB", None))
    df = batch(spark, cluster, topic)
    assert df.schema == spark_schema(False)
    assert_exactly_once(df, placed, whole_range(cluster, topic, queues))
    # Reading the same range again gives the same rows.
    first = sorted(
        tuple(r) for r in df.select("brokerName", "queueId", "queueOffset", "msgId").collect()
    )
    again = sorted(
        tuple(r) for r in df.select("brokerName", "queueId", "queueOffset", "msgId").collect()
    )
    assert first == again and len(first) == 2000
    row = df.where("queueOffset = 0 and brokerName = 'broker-a' and queueId = 0").first()
    assert row["key"] == b"b-0" and row["value"].startswith(b"b-0:") and row["msgId"] == "b-id-0"
    assert row["topic"] == topic and row["tags"] == "TagA" and row["storeTimestamp"] is not None


def test_batch_offsets_tags_properties_and_partitions(spark: Any, cluster: Cluster) -> None:
    topic = "SparkBatchOptions"
    cluster.create_topic(topic, queues=2)
    queues = all_queues(cluster, 2)
    placed = cluster.produce(topic, 400, "o", queues, tags=("TagA", "TagB"))
    maxes = cluster.max_offsets(topic, queues)
    assert all(v == 100 for v in maxes.values())
    # A JSON start and end for two queues; the others from earliest to latest.
    starting = {topic: {"broker-a": {"0": 10, "1": -2}}}
    ending = {topic: {"broker-a": {"0": 20}, "broker-b": {"1": -1}}}
    df = batch(
        spark,
        cluster,
        topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    ranges = {
        ("broker-a", 0): (10, 20),
        ("broker-a", 1): (0, 100),
        ("broker-b", 0): (0, 100),
        ("broker-b", 1): (0, 100),
    }
    wanted = {k: q for k, q in placed.items() if _offset_of(k, q, queues) in range(*ranges[q])}
    assert_exactly_once(df, wanted, ranges)
    # Tags: only TagB, filtered by the broker (and re-checked by the reader).
    tagged = batch(spark, cluster, topic, tags="TagB")
    assert tagged.count() == 200 and tagged.where("tags <> 'TagB'").count() == 0
    # The properties map.
    with_props = batch(spark, cluster, topic, includeProperties="true")
    assert with_props.schema == spark_schema(True)
    assert with_props.where("properties['KEYS'] = cast(key as string)").count() == 400
    # minPartitions splits queue ranges into more tasks.
    assert batch(spark, cluster, topic, minPartitions=16).rdd.getNumPartitions() >= 16


def _offset_of(key: str, queue: QueueRef, queues: Sequence[QueueRef]) -> int:
    # produce() places message i on queues[i % n], in order: its offset is i // n.
    return int(key.rsplit("-", 1)[1]) // len(queues)


def test_starting_timestamp(spark: Any, cluster: Cluster) -> None:
    topic = "SparkTimestamp"
    cluster.create_topic(topic, queues=1, brokers=["broker-a"])
    queues = [("broker-a", 0)]
    cluster.produce(topic, 50, "early", queues)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    later = cluster.produce(topic, 30, "late", queues)
    df = batch(spark, cluster, topic, startingTimestamp=middle)
    assert_exactly_once(df, later, {("broker-a", 0): (50, 80)})


# --- streaming ---------------------------------------------------------------------------------


def test_max_offsets_per_trigger_bounds_batches(spark: Any, cluster: Cluster) -> None:
    topic = "SparkBounded"
    cluster.create_topic(topic, queues=4)
    queues = all_queues(cluster, 4)
    placed = cluster.produce(topic, 1000, "m", queues)
    query = (
        stream(spark, cluster, topic, maxOffsetsPerTrigger=300)
        .writeStream.format("memory")
        .queryName("bounded")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in executed(query)]
    assert sizes == [300, 300, 300, 100]
    assert_exactly_once(spark.table("bounded"), placed, whole_range(cluster, topic, queues))


def test_stopped_midway_then_restarted_reads_everything_once(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    """Messages sent while the query runs are read; a stop mid-way and a restart lose nothing."""
    stopped_midway_then_restarted(spark, cluster, "SparkRestart", tmp_path)


def _ingest_command(cluster: Cluster, topic: str, out: Path, checkpoint: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tidemq.client.spark.ingest",
        "--namesrv",
        cluster.namesrv_addr,
        "--topic",
        topic,
        "--output",
        str(out),
        "--checkpoint",
        str(checkpoint),
        "--max-offsets-per-trigger",
        "150",
        "--trigger-interval",
        "200 milliseconds",
        "--master",
        "local[2]",
        "--conf",
        "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        "--conf",
        "spark.sql.shuffle.partitions=1",
    ]


def _batches(checkpoint: Path, kind: str) -> int:
    folder = checkpoint / kind
    if not folder.is_dir():
        return 0
    return sum(1 for f in folder.iterdir() if f.name.isdigit())


@pytest.mark.slow
def test_ingest_says_what_it_waits_for_and_ends_without_tracebacks(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`tidemq-ingest --available-now`: progress lines while the JVM starts and the query is
    planned, then its batches, then exit 0 with no traceback from Spark's Python workers."""
    topic = "SparkIngestOnce"
    cluster.create_topic(topic, queues=2)
    cluster.produce(topic, 600, "o", all_queues(cluster, 2))
    command = [
        *_ingest_command(cluster, topic, tmp_path / "out", tmp_path / "checkpoint")[:-8],
        "--available-now",
        "--master",
        "local[2]",
        "--conf",
        "spark.sql.shuffle.partitions=1",
    ]
    assert "--trigger-interval" not in command
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=spark_subprocess_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "starting Spark (local[2])..."
    assert any(line.startswith("starting Spark (local[2]): ready in ") for line in out), out
    assert "starting the query (Python workers plan the source)..." in out
    assert any(line.startswith("batch ") for line in out) and out[-1].startswith("stopped: ")
    for text in (done.stdout, done.stderr):
        assert "Traceback" not in text and "BrokenPipeError" not in text and "\tat " not in text


@pytest.mark.slow
def test_ingest_stopped_and_killed_then_restarted_reads_everything_once(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    """`tidemq-ingest` in a subprocess: Ctrl-C stops it cleanly; SIGKILL mid-batch loses nothing."""
    topic = "SparkIngest"
    cluster.create_topic(topic, queues=2)
    queues = all_queues(cluster, 2)
    placed = cluster.produce(topic, 3000, "i", queues)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    command = _ingest_command(cluster, topic, out, checkpoint)

    # 1. Ctrl-C (SIGINT) after a few batches: a clean stop, exit status 0.
    log1 = tmp_path / "ingest1.log"
    with log1.open("wb") as sink:
        first = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=spark_subprocess_env(),
            start_new_session=True,
        )
        try:
            eventually_sync(
                lambda: "batch 2:" in log1.read_text(errors="replace"), "3 batches", 120
            )
            first.send_signal(signal.SIGINT)
            assert first.wait(60) == 0, log1.read_text(errors="replace")[-3000:]
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
    text = log1.read_text(errors="replace")
    assert "SIGINT: stopping the query" in text and "stopped:" in text
    # A stop that cancels a batch is still a clean stop: no Java or Python traceback shown.
    assert "\tat " not in text and "Traceback" not in text, text[-3000:]
    assert "rows/s), lag " in text
    done = _batches(checkpoint, "commits")
    assert done >= 3 and rows_of(spark, out) < 3000

    # 2. Restart, then SIGKILL the driver, its JVM and workers while a batch is in flight.
    log2 = tmp_path / "ingest2.log"
    with log2.open("wb") as sink:
        second = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=spark_subprocess_env(),
            start_new_session=True,
        )
        try:

            def mid_batch() -> bool:
                planned, committed = (
                    _batches(checkpoint, "offsets"),
                    _batches(checkpoint, "commits"),
                )
                return committed >= done + 2 and planned > committed

            eventually_sync(mid_batch, "a batch in flight after the restart", 120)
        finally:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
    assert _batches(checkpoint, "offsets") > _batches(checkpoint, "commits")

    # 3. Restart in this process (same checkpoint): the logged batch is replayed, then the rest.
    query = (
        stream(spark, cluster, topic, maxOffsetsPerTrigger=1000)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert_exactly_once(spark.read.parquet(str(out)), placed, whole_range(cluster, topic, queues))


def rows_of(spark: Any, out: Path) -> int:
    return int(spark.read.parquet(str(out)).count())


# --- retention ----------------------------------------------------------------------------------

RETENTION_FILE_SIZE = 65536
RETENTION = (
    # Small CommitLog files, kept for 0 hours, deleted whatever the hour, checked every 200 ms:
    # every file but the one being written goes as soon as it is full.
    f"mappedFileSizeCommitLog={RETENTION_FILE_SIZE}",
    "maxMessageSize=16384",
    "fileReservedTime=0",
    "deleteWhen=" + ";".join(f"{h:02d}" for h in range(24)),
    "cleanResourceInterval=200",
)


def test_fail_on_data_loss(spark: Any, tmp_path: Path) -> None:
    processes = ProcessGroup(tmp_path / "logs")
    try:
        retention = start_cluster(processes, tmp_path, ["broker-r"], *RETENTION)
        topic = "SparkRetention"
        retention.create_topic(topic, queues=2)
        queues = all_queues(retention, 2)
        placed = retention.produce(topic, 600, "r", queues, body_size=1000, batch=8)
        maxes = retention.max_offsets(topic, queues)
        mins: dict[QueueRef, int] = {}

        def only_last_file_left() -> bool:
            # Retention keeps only the file being written (RETENTION), so this is its end.
            info = asyncio.run(_runtime_info(retention.namesrv_addr, retention.masters["broker-r"]))
            last_file = (int(info["commitLogMaxOffset"]) - 1) // RETENTION_FILE_SIZE
            return int(info["commitLogMinOffset"]) == last_file * RETENTION_FILE_SIZE

        def deleted() -> bool:
            # The queues' minimums follow the CommitLog's in the same clean-up: equal on two
            # polls further apart than cleanResourceInterval, they have followed.
            nonlocal mins
            now = retention.min_offsets(topic, queues)
            settled = now == mins and any(v > 0 for v in now.values())
            mins = now
            return settled

        eventually_sync(only_last_file_left, "retention to delete all but the last file", 30)
        eventually_sync(deleted, "the queues' minimums to follow the CommitLog's", 30, interval=0.5)
        kept = {q: (mins[q], maxes[q]) for q in queues}
        survivors = {k: q for k, q in placed.items() if _offset_of(k, q, queues) >= mins[q]}
        zero: dict[str, dict[str, int]] = {}
        for broker, queue_id in queues:
            zero.setdefault(broker, {})[str(queue_id)] = 0
        from_zero = json.dumps({topic: zero})

        # failOnDataLoss=true (the default): the query fails and says why.
        failing = (
            stream(spark, retention, topic, startingOffsets=from_zero)
            .writeStream.format("memory")
            .queryName("lossy")
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(Exception, match=r"are lost"):
            failing.awaitTermination(120)
        with pytest.raises(Exception, match=r"are lost"):
            batch(spark, retention, topic, startingOffsets=from_zero).count()

        # failOnDataLoss=false: the lost offsets are skipped, everything still there is read.
        tolerant = (
            stream(spark, retention, topic, startingOffsets=from_zero, failOnDataLoss="false")
            .writeStream.format("memory")
            .queryName("tolerant")
            .trigger(availableNow=True)
            .start()
        )
        tolerant.awaitTermination(120)
        assert tolerant.exception() is None
        assert_exactly_once(spark.table("tolerant"), survivors, kept)
        # earliest is the queues' min offset: no loss to report.
        assert_exactly_once(batch(spark, retention, topic), survivors, kept)
    finally:
        processes.stop_all()


# --- master down ---------------------------------------------------------------------------------


async def knows_topic(address: str, topic: str) -> bool:
    api = BrokerAPI()
    try:
        return topic in (await api.all_topic_config(address)).topic_config_table
    finally:
        await api.close()


@pytest.mark.slow
def test_master_down_query_goes_on_from_the_slave(spark: Any, tmp_path: Path) -> None:
    processes = ProcessGroup(tmp_path / "logs")
    try:
        namesrv = processes.namesrvd(name="namesrvd")
        master = processes.brokerd(
            namesrv.address,
            tmp_path / "master",
            "brokerRole=SYNC_MASTER",
            *HA_TIMING,
            name="master",
        )
        slave = processes.brokerd(
            namesrv.address,
            tmp_path / "slave",
            "brokerRole=SLAVE",
            "brokerId=1",
            *HA_TIMING,
            name="slave",
        )
        ha = Cluster(processes, namesrv, {"broker-a": master.address})
        topic = "SparkFailover"
        ha.create_topic(topic, queues=2)
        queues = all_queues(ha, 2)
        eventually_sync(
            lambda: asyncio.run(knows_topic(slave.address, topic)),
            "SlaveSynchronize to copy the topic to the slave",
            15,
        )
        placed = ha.produce(topic, 1500, "f", queues)  # SYNC_MASTER: on the slave too
        ranges = whole_range(ha, topic, queues)
        query = (
            stream(spark, ha, topic, maxOffsetsPerTrigger=150)
            .writeStream.format("memory")
            .queryName("failover")
            .trigger(processingTime="300 milliseconds")
            .start()
        )

        def count() -> int:
            return int(spark.table("failover").count())

        try:
            eventually_sync(lambda: count() >= 300, "batches from the master", 90)
            master.kill()
            eventually_sync(
                lambda: count() >= 1500 or not query.isActive, "the rest from the slave", 120
            )
            assert query.isActive and query.exception() is None
            assert count() == 1500
            assert_exactly_once(spark.table("failover"), placed, ranges)
        finally:
            query.stop()
        assert slave.running
        # A batch read with the master gone, preferring the slave or not.
        for prefer in ("false", "true"):
            assert batch(spark, ha, topic, readFromSlave=prefer).count() == 1500
    finally:
        processes.stop_all()


def test_python_workers_keep_the_memory_they_free(spark: Any) -> None:
    """local_session() starts every Python worker with the malloc tunables (client/memory.py).

    Checked in a worker Spark starts for an RDD task: data source workers come from the same
    worker factory and get the same environment.
    """
    from tidemq.client.memory import GLIBC_TUNABLES

    seen = (
        spark.sparkContext.parallelize([0], 1)
        .map(lambda _: os.environ.get("GLIBC_TUNABLES"))
        .collect()
    )
    assert seen == [GLIBC_TUNABLES]
