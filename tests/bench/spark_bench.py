"""Spark benchmark: the `tidemq` source into Parquet on local[2], beside an in-memory baseline.

Setup: a name server and one broker as separate processes; a topic of QUEUES queues filled with
MESSAGES messages of 1 KiB random bodies (keys, tags, a msgId: what producers send). Then, in one
Spark session (`local[2]`, full JIT), Trigger.AvailableNow queries write everything to Parquet
in micro-batches of BATCH_ROWS rows (maxOffsetsPerTrigger):

- **source**: `format("tidemq")`, pulls from the broker;
- **baseline**: a Python data source that yields *the same rows* as RecordBatches from memory:
  before the runs the topic is read once (outside Spark) into one Arrow IPC file per queue, and
  the baseline's tasks memory-map those files and yield their batches for their offset ranges.
  Same schema, same batch sizes, same partitions (one per queue), same admission control.

The figure is the steady state: rows / triggerExecution time over the batches after the first
(the first one spawns the Python workers). Each query runs RUNS times, alternating, after one
warm-up run of each for the JIT; the best run of each is reported (the machine is shared: the
best is the least disturbed), and the median of the ratios of back-to-back pairs. CPU time per
row of the JVM, the Python workers and the broker is printed for every run. Targets:
>= 100,000 rows/s (issue 7), and >= 0.9 of the baseline (TARGET_RATIO, issue 15).

The broker is given the transfer caps of a bulk reader (maxTransferCountOnMessageInMemory=2048,
maxTransferBytesOnMessageInMemory=4 MiB; RocketMQ's defaults of 32 messages / 256 KiB per pull
are made for many small consumers). The figure with the default caps is printed as information.

Knobs: TIDEMQ_BENCH_SPARK_MESSAGES (default 800000), TIDEMQ_BENCH_SPARK_RUNS (3).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tests.bench import Result, env_int, temp_dir
from tests.support.processes import REPO_ROOT, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.message import SendStatus
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.spark.records import spark_schema
from tidemq.client.spark.source import allocate
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import encode_properties

TOPIC = "SparkBench"
QUEUES = 4
BODY_SIZE = 1024
BATCH_ROWS = 200_000
# Issue 15: Spark ingest keeps >= 0.9 of its in-memory baseline (issue 7 had 0.7).
TARGET_RATIO = 0.9
BULK_CAPS = (
    "maxTransferCountOnMessageInMemory=2048",
    "maxTransferBytesOnMessageInMemory=4194304",
)
STORE = (
    "mappedFileSizeCommitLog=268435456",
    "mappedFileSizeConsumeQueue=6000000",
    "maxHashSlotNum=5000000",
    "maxIndexNum=20000000",
    "maxMessageSize=4194304",
)


# --- the baseline: the same rows from memory-mapped Arrow files ----------------------------------


class _Slice(InputPartition):
    def __init__(self, path: str, start: int, end: int) -> None:
        self.path, self.start, self.end = path, start, end


class _BaselineReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets `{"q0": rows, ...}`; the same proportional ReadMaxRows split as the source."""

    def __init__(self, folder: str, sizes: dict[str, int], batch_rows: int) -> None:
        self.folder = folder
        self.sizes = sizes
        self.batch_rows = batch_rows

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def initialOffset(self) -> dict[str, int]:
        return {q: 0 for q in sorted(self.sizes)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.batch_rows)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        available = {(q, "", 0): self.sizes[q] - start[q] for q in sorted(start)}
        shares = allocate(available, cap)
        return {q: start[q] + shares[(q, "", 0)] for q in sorted(start)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Slice]:
        return [
            _Slice(os.path.join(self.folder, f"{q}.arrow"), start[q], end[q])
            for q in sorted(end)
            if end[q] > start[q]
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Slice)
        reader = pa.ipc.open_file(pa.memory_map(partition.path))
        row = 0
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            lo, hi = row, row + batch.num_rows
            row = hi
            if hi <= partition.start:
                continue
            if lo >= partition.end:
                break
            a, b = max(lo, partition.start) - lo, min(hi, partition.end) - lo
            yield batch if (a, b) == (0, batch.num_rows) else batch.slice(a, b - a)


class BaselineSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidemq_bench_baseline"

    def schema(self) -> StructType:
        return spark_schema(False)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        sizes = {q: int(v) for q, v in (p.split("=") for p in self.options["sizes"].split(","))}
        return _BaselineReader(self.options["folder"], sizes, int(self.options["batchRows"]))


# --- filling the topic -----------------------------------------------------------------------


async def fill_topic(namesrv: str, broker: str, messages: int) -> None:
    """`messages` x 1 KiB into TOPIC's QUEUES queues on `broker` (created there if need be)."""
    api = BrokerAPI(timeout=30)
    try:
        await api.create_topic(broker, TopicConfig(TOPIC, QUEUES, QUEUES))
        for _ in range(100):
            route = await api.get_route(namesrv, TOPIC)
            if route is not None and route.queue_datas:
                break
            await asyncio.sleep(0.1)
        sent = 0

        async def worker(queue_id: int) -> None:
            nonlocal sent
            mine = messages // QUEUES + (1 if queue_id < messages % QUEUES else 0)
            for at in range(0, mine, 64):
                count = min(64, mine - at)
                batch = []
                for i in range(at, at + count):
                    key = f"q{queue_id}-{i}"
                    props = {"KEYS": key, "TAGS": "bench", "UNIQ_KEY": key, "WAIT": "false"}
                    batch.append((0, os.urandom(BODY_SIZE), encode_properties(props)))
                header = SendMessageRequestHeader(
                    producer_group="BenchPG",
                    topic=TOPIC,
                    queue_id=queue_id,
                    born_timestamp=int(time.time() * 1000),
                    batch=True,
                )
                result = await api.send(broker, header, encode_batch_body(batch), batch=True)
                assert result.status is SendStatus.SEND_OK
                sent += count

        await asyncio.gather(*(worker(q) for q in range(QUEUES)))
        # A send is answered once stored; its ConsumeQueue entry follows when dispatch gets to
        # it, which may be a moment after the last answer: readers must see every message.
        deadline = time.monotonic() + 60
        while True:
            dispatched = [await api.get_max_offset(broker, TOPIC, q) for q in range(QUEUES)]
            if sum(dispatched) >= sent or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        await api.close()


def _snapshot(namesrv: str, folder: Path) -> dict[str, int]:
    """The topic read once with the source's own reader into q<N>.arrow files: row counts."""
    from tidemq.client.spark.options import SourceOptions
    from tidemq.client.spark.source import TideMQBatchReader

    options = SourceOptions.parse({"namesrvAddr": namesrv, "topic": TOPIC}, streaming=False)
    reader = TideMQBatchReader(options, spark_schema(False))
    sizes: dict[str, int] = {}
    for part in reader.partitions():
        name = f"q{len(sizes)}"
        rows = 0
        with pa.OSFile(str(folder / f"{name}.arrow"), "wb") as sink:
            writer = None
            for batch in reader.read(part):
                writer = writer or pa.ipc.new_file(sink, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
        sizes[name] = rows
    return sizes


# --- the runs -----------------------------------------------------------------------------------


def _cpu_by_role(broker_pids: Collection[int]) -> dict[str, float]:
    """CPU seconds so far of this process's descendants by role, and of the brokers (Linux).

    A Spark standalone worker started by this process counts too: its executors are "jvm" and
    their Python workers "python workers", like local mode's.
    """
    parents: dict[int, int] = {}
    info: dict[int, tuple[float, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(stat[1])
        info[pid] = ((int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"), command)
    me = os.getpid()
    out: dict[str, float] = {}
    for pid, (seconds, command) in info.items():
        ancestor, depth = parents.get(pid, 0), 0
        while ancestor not in (0, 1, me) and depth < 10:
            ancestor, depth = parents.get(ancestor, 0), depth + 1
        if pid in broker_pids:
            role = "broker"
        elif ancestor != me:
            continue
        elif "java" in command.split(" ")[0]:
            role = "jvm"
        elif "pyspark.daemon" in command or "pyspark.worker" in command:
            role = "python workers"
        else:
            role = "python planner/runner"
        out[role] = out.get(role, 0.0) + seconds
    return out


def _measure(
    spark: Any,
    df: Any,
    folder: Path,
    name: str,
    broker_pids: Collection[int] = (),
    expected_rows: int | None = None,
) -> tuple[float, float, list[int], dict[str, float]]:
    """(steady rows/s, end-to-end rows/s, batch durations in ms, CPU us per row by role)."""
    out, checkpoint = folder / f"out-{name}", folder / f"checkpoint-{name}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    cpu_before = _cpu_by_role(broker_pids)
    started = time.perf_counter()
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    cpu_after = _cpu_by_role(broker_pids)
    if query.exception() is not None:
        raise RuntimeError(f"{name}: {query.exception()}")
    ran = [p for p in query.recentProgress if "addBatch" in (p["durationMs"] or {})]
    rows = sum(p["numInputRows"] for p in ran)
    if expected_rows is not None and rows != expected_rows:
        raise RuntimeError(f"{name}: wrote {rows} rows, not {expected_rows}")
    steady = ran[1:] or ran
    steady_rows = sum(p["numInputRows"] for p in steady)
    steady_s = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    cpu = {
        role: round((seconds - cpu_before.get(role, 0.0)) / max(rows, 1) * 1e6, 1)
        for role, seconds in cpu_after.items()
        if seconds > cpu_before.get(role, 0.0)
    }
    durations = [p["durationMs"]["triggerExecution"] for p in ran]
    return steady_rows / steady_s, rows / wall, durations, cpu


def _source(spark: Any, namesrv: str, batch_rows: int = BATCH_ROWS) -> Any:
    return (
        spark.readStream.format("tidemq")
        .option("namesrvAddr", namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", batch_rows)
        .load()
    )


def _baseline(spark: Any, folder: Path, sizes: dict[str, int], batch_rows: int) -> Any:
    return (
        spark.readStream.format(BaselineSource.name())
        .option("folder", str(folder))
        .option("sizes", ",".join(f"{q}={n}" for q, n in sorted(sizes.items())))
        .option("batchRows", batch_rows)
        .load()
    )


def _broker(group: ProcessGroup, namesrv: str, folder: Path, name: str, caps: Sequence[str]) -> Any:
    return group.brokerd(namesrv, folder / name, *STORE, *caps, name=name)


@dataclass
class Comparison:
    """Source and baseline runs of one session: steady rows/s of every run, by name."""

    steadies: dict[str, list[float]] = field(default_factory=lambda: {"source": [], "baseline": []})
    # name -> (steady rows/s, end-to-end rows/s, CPU us per row) of its best run
    best: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Best source run against best baseline run."""
        return self.best["source"][0] / self.best["baseline"][0]

    @property
    def paired(self) -> float:
        """Median of the back-to-back pairs' ratios: a pair shares the machine's load, so on a
        shared machine this is the steadier figure."""
        return statistics.median(self.pairs)

    @property
    def pairs(self) -> list[float]:
        return sorted(
            s / b for s, b in zip(self.steadies["source"], self.steadies["baseline"], strict=True)
        )

    def summary(self) -> str:
        return (
            f"source / baseline: {self.ratio:.2f} (best against best); back-to-back pairs "
            f"{', '.join(f'{r:.2f}' for r in self.pairs)}, median {self.paired:.2f}"
        )


def compare(
    spark: Any,
    namesrv: str,
    folder: Path,
    messages: int,
    runs: int,
    *,
    batch_rows: int = BATCH_ROWS,
    broker_pids: Collection[int] = (),
    where: str = "local[2]",
) -> Comparison:
    """The topic (`messages` rows, every broker of the route) read once into the baseline's
    Arrow files, then a warm-up of each query and `runs` alternating runs of both in `spark`."""
    snapshot = folder / "snapshot"
    snapshot.mkdir()
    sizes = _snapshot(namesrv, snapshot)
    assert sum(sizes.values()) == messages, sizes
    print(
        f"comparison: source and baseline each write the same {messages:,} rows "
        f"(same schema; {len(sizes)} partitions, one per queue; the same Arrow batches, "
        f"one per pull window; micro-batches of {batch_rows:,} rows by the same admission "
        f"control) through the same Parquet sink in the same {where} session; the "
        "baseline reads them from memory-mapped Arrow files (no broker, no decoding)"
    )
    spark.dataSource.register(BaselineSource)

    def source() -> Any:
        return _source(spark, namesrv, batch_rows)

    def baseline() -> Any:
        return _baseline(spark, snapshot, sizes, batch_rows)

    # Warm-up: the JIT compiles the JVM side of both kinds of query first.
    _measure(spark, source(), folder, "warm-up-source")
    _measure(spark, baseline(), folder, "warm-up-baseline")
    out = Comparison()
    for i in range(runs):
        for name, df in (("source", source()), ("baseline", baseline())):
            steady, e2e, batches, cpu = _measure(
                spark, df, folder, name, broker_pids, expected_rows=messages
            )
            print(
                f"run {i + 1} {name:<8}: steady {steady:>9,.0f} rows/s, end to end "
                f"{e2e:>9,.0f} rows/s, batches (ms) {batches}, CPU us/row {cpu}",
                flush=True,
            )
            out.steadies[name].append(steady)
            if steady > out.best.get(name, (0.0, 0.0, 0.0))[0]:
                out.best[name] = (steady, e2e, sum(cpu.values()))
    print(out.summary(), flush=True)
    return out


def workers_import_tests() -> None:
    """Spark's Python workers import this module (the baseline) and tidemq: from the repository."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_SPARK_MESSAGES", 800_000)
    runs = env_int("TIDEMQ_BENCH_SPARK_RUNS", 3)
    workers_import_tests()
    from tidemq.client.spark import local_session

    with temp_dir("spark") as folder:
        group = ProcessGroup(folder / "logs")
        spark = None
        try:
            namesrv = group.namesrvd(name="namesrvd")
            broker = _broker(group, namesrv.address, folder, "bulk", BULK_CAPS)
            started = time.perf_counter()
            asyncio.run(fill_topic(namesrv.address, broker.address, messages))
            print(f"filled {messages:,} x 1 KiB in {time.perf_counter() - started:.1f} s")
            spark = local_session("local[2]", app_name="tidemq-bench")
            comparison = compare(
                spark, namesrv.address, folder, messages, runs, broker_pids={broker.pid or 0}
            )
            # Information: the broker with RocketMQ's default transfer caps (32 per pull).
            group.stop_all()
            group = ProcessGroup(folder / "logs2")
            namesrv = group.namesrvd(name="namesrvd2")
            broker = _broker(group, namesrv.address, folder, "default", ())
            asyncio.run(fill_topic(namesrv.address, broker.address, messages // 2))
            default_steady, _e2e, batches, _cpu = _measure(
                spark, _source(spark, namesrv.address), folder, "default-caps"
            )
            print(f"default caps: steady {default_steady:,.0f} rows/s, batches (ms) {batches}")
        finally:
            if spark is not None:
                spark.stop()
            group.stop_all()
    source, baseline = comparison.best["source"], comparison.best["baseline"]
    return [
        Result("tidemq source -> Parquet, 1 KiB, local[2], steady", source[0], "rows/s", 100_000),
        Result("baseline (same rows from memory) -> Parquet, steady", baseline[0], "rows/s"),
        Result("source / baseline, steady", comparison.ratio, "x", TARGET_RATIO),
        Result("source / baseline, median of back-to-back pairs", comparison.paired, "x"),
        Result("tidemq source -> Parquet, end to end (incl. batch 0)", source[1], "rows/s"),
        Result(
            "tidemq source, broker with default caps (32/pull), steady", default_steady, "rows/s"
        ),
        Result("CPU per row of the best source run (JVM, Python, broker)", source[2], "us"),
        Result("CPU per row of the best baseline run (JVM, Python)", baseline[2], "us"),
    ]
