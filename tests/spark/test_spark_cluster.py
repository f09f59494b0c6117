"""The `tidemq` source on a Spark standalone cluster, reading a topic spread over two groups.

A master and a worker process (`standalone`), and a name server with two master brokers of one
cluster, broker-a and broker-b (`cluster`): the topic is created on both, so its route lists
both groups, and filled by our producer, which spreads the messages over all their queues.
The driver is this process (`cluster_spark`, client mode); the source's `read()` runs in the
worker's executors. Exactly once is checked as in local mode (tests/spark/queries.py), through
a stop mid-way and a restart from the checkpoint, for a query of this process and for
`tidemq-ingest --master spark://...` in a subprocess.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import CLUSTER_APP_CONF, Cluster, spark_subprocess_env
from tests.spark.queries import (
    all_queues,
    assert_exactly_once,
    stopped_midway_then_restarted,
    whole_range,
)
from tests.support.conditions import eventually_sync
from tests.support.processes import REPO_ROOT
from tests.support.spark_standalone import SparkStandalone

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BROKERS = {"broker-a", "broker-b"}


def assert_unique_msg_ids(df: Any, count: int) -> None:
    from pyspark.sql import functions as F

    row = df.agg(F.count("*").alias("rows"), F.countDistinct("msgId").alias("ids")).first()
    assert (row["rows"], row["ids"]) == (count, count)


def test_two_groups_into_parquet_on_the_cluster_stopped_and_restarted(
    cluster_spark: Any, standalone: SparkStandalone, cluster: Cluster, tmp_path: Path
) -> None:
    assert cluster_spark.sparkContext.master == standalone.master_url
    topic = "SparkClusterRestart"
    count = 2000
    placed = stopped_midway_then_restarted(
        cluster_spark,
        cluster,
        topic,
        tmp_path,
        queues_per_broker=4,
        count=count,
        batch_rows=200,
        produce=lambda prefix: cluster.send(topic, count, prefix),
    )
    assert {broker for broker, _queue in placed.values()} == BROKERS
    assert_unique_msg_ids(cluster_spark.read.parquet(str(tmp_path / "out")), 2 * count)
    # The tasks ran in the worker's executors: the master lists this application with them.
    assert standalone.executor_pids()
    apps = standalone.status()["activeapps"]
    assert [a["name"] for a in apps] == ["tidemq-cluster-tests"]
    assert apps[0]["cores"] == 1


def _ingest(
    standalone: SparkStandalone, cluster: Cluster, topic: str, out: Path, *extra: str
) -> list[str]:
    conf = {**standalone.driver_conf(), **CLUSTER_APP_CONF}
    return [
        sys.executable,
        "-m",
        "tidemq.client.spark.ingest",
        "--namesrv",
        cluster.namesrv_addr,
        "--topic",
        topic,
        "--output",
        str(out / "out"),
        "--checkpoint",
        str(out / "checkpoint"),
        "--max-offsets-per-trigger",
        "400",
        "--master",
        standalone.master_url,
        *(f"--conf={key}={value}" for key, value in conf.items()),
        *extra,
    ]


@pytest.mark.slow
def test_ingest_on_the_cluster_stopped_then_restarted_reads_everything_once(
    cluster_spark: Any, standalone: SparkStandalone, cluster: Cluster, tmp_path: Path
) -> None:
    """`tidemq-ingest --master spark://...`: Ctrl-C mid-way, then --available-now finishes."""
    topic = "SparkClusterIngest"
    cluster.create_topic(topic, queues=4)
    placed = cluster.send(topic, 4000, "c")
    assert {broker for broker, _queue in placed.values()} == BROKERS
    log1 = tmp_path / "ingest1.log"
    with log1.open("wb") as sink:
        first = subprocess.Popen(
            _ingest(standalone, cluster, topic, tmp_path, "--trigger-interval=200 milliseconds"),
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=spark_subprocess_env(),
        )
        try:
            eventually_sync(
                lambda: "batch 2:" in log1.read_text(errors="replace"), "3 batches", 180
            )
            first.send_signal(signal.SIGINT)
            assert first.wait(60) == 0, log1.read_text(errors="replace")[-3000:]
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    text = log1.read_text(errors="replace")
    assert "SIGINT: stopping the query" in text and "stopped:" in text
    out = str(tmp_path / "out")
    assert 1200 <= cluster_spark.read.parquet(out).count() < 4000

    second = subprocess.run(
        _ingest(standalone, cluster, topic, tmp_path, "--available-now"),
        capture_output=True,
        cwd=REPO_ROOT,
        env=spark_subprocess_env(),
        timeout=240,
    )
    assert second.returncode == 0, second.stdout.decode(errors="replace")[-3000:]
    queues = all_queues(cluster, 4)
    df = cluster_spark.read.parquet(out)
    assert_exactly_once(df, placed, whole_range(cluster, topic, queues))
    assert_unique_msg_ids(df, 4000)
