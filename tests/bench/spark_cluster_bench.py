"""Spark benchmark, scaled out: two broker groups and a Spark standalone cluster.

Setup: a name server and two master brokers of one cluster (broker-a, broker-b: two groups) as
processes, with the bulk reader's transfer caps of the local-mode bench; the topic is created
on both, so its route spreads its 2 x QUEUES queues over both groups, and each group gets half
of MESSAGES messages of 1 KiB. A Spark standalone cluster from the installed pyspark (a master
and a worker process on loopback, the worker offering both cores: tests/support/
spark_standalone.py) runs the executors; this process is the driver (client mode).

The comparison is the local-mode bench's (tests/bench/spark_bench.py `compare`): the `tidemq`
source against the in-memory baseline (the same rows from memory-mapped Arrow files), both into
Parquet by Trigger.AvailableNow in micro-batches of BATCH rows, one warm-up each, then RUNS
alternating runs; steady rows/s (rows / triggerExecution after the first batch), best runs and
the median of the back-to-back pairs' ratios. Target (issue 15): source >= 0.9 of the baseline.

Knobs: TIDEMQ_BENCH_SPARK_CLUSTER_MESSAGES (default 400000), TIDEMQ_BENCH_SPARK_CLUSTER_RUNS (2),
TIDEMQ_BENCH_SPARK_CLUSTER_BATCH (100000 rows per micro-batch). About 3 minutes by default.
"""

from __future__ import annotations

import asyncio
import time

from tests.bench import Result, env_int, temp_dir
from tests.bench.spark_bench import (
    BULK_CAPS,
    STORE,
    TARGET_RATIO,
    TOPIC,
    compare,
    fill_topic,
    workers_import_tests,
)
from tests.support.processes import ProcessGroup
from tests.support.spark_standalone import SparkStandalone
from tidemq.client.api import BrokerAPI

GROUPS = ("broker-a", "broker-b")
EXECUTOR_MEMORY = "2g"
WORKER_MEMORY = "3g"


async def _routed(namesrv: str) -> None:
    """Until the name server's route of TOPIC lists both groups (the source reads the route)."""
    api = BrokerAPI()
    try:
        for _ in range(200):
            route = await api.get_route(namesrv, TOPIC)
            if route is not None and {q.broker_name for q in route.queue_datas} == set(GROUPS):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"the route of {TOPIC} does not list {GROUPS}")
    finally:
        await api.close()


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_SPARK_CLUSTER_MESSAGES", 400_000)
    runs = env_int("TIDEMQ_BENCH_SPARK_CLUSTER_RUNS", 2)
    batch_rows = env_int("TIDEMQ_BENCH_SPARK_CLUSTER_BATCH", 100_000)
    workers_import_tests()
    from tidemq.client.spark import local_session

    with temp_dir("spark-cluster") as folder:
        group = ProcessGroup(folder / "logs")
        standalone = SparkStandalone(folder / "spark", memory=WORKER_MEMORY)
        spark = None
        try:
            namesrv = group.namesrvd(name="namesrvd")
            brokers = [
                group.brokerd(
                    namesrv.address,
                    folder / name,
                    *STORE,
                    *BULK_CAPS,
                    f"brokerName={name}",
                    name=name,
                )
                for name in GROUPS
            ]
            started = time.perf_counter()
            for i, broker in enumerate(brokers):
                share = messages // len(brokers) + (1 if i < messages % len(brokers) else 0)
                asyncio.run(fill_topic(namesrv.address, broker.address, share))
            asyncio.run(_routed(namesrv.address))
            print(
                f"filled {messages:,} x 1 KiB over {len(brokers)} broker groups in "
                f"{time.perf_counter() - started:.1f} s"
            )
            started = time.perf_counter()
            standalone.start()
            conf = {
                **standalone.driver_conf(fast_start=False),
                "spark.executor.memory": EXECUTOR_MEMORY,
            }
            spark = local_session(standalone.master_url, app_name="tidemq-bench-cluster", conf=conf)
            print(
                f"standalone cluster {standalone.master_url} and its session up in "
                f"{time.perf_counter() - started:.1f} s"
            )
            comparison = compare(
                spark,
                namesrv.address,
                folder,
                messages,
                runs,
                batch_rows=batch_rows,
                broker_pids={b.pid or 0 for b in brokers},
                where="standalone-cluster",
            )
        finally:
            if spark is not None:
                spark.stop()
            standalone.stop()
            group.stop_all()
    source, baseline = comparison.best["source"], comparison.best["baseline"]
    return [
        Result("tidemq source, 2 broker groups -> Parquet, standalone", source[0], "rows/s"),
        Result("baseline (same rows from memory) -> Parquet, standalone", baseline[0], "rows/s"),
        Result("standalone: source / baseline, steady", comparison.ratio, "x", TARGET_RATIO),
        Result("standalone: source / baseline, median of pairs", comparison.paired, "x"),
        Result("standalone: source end to end (incl. batch 0)", source[1], "rows/s"),
        Result("standalone: CPU per row, best source run", source[2], "us"),
        Result("standalone: CPU per row, best baseline run", baseline[2], "us"),
    ]
