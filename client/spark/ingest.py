"""`tidemq-ingest`: a Structured Streaming query from tidemq topics into Parquet, exactly once.

    tidemq-ingest --namesrv 127.0.0.1:9876 --topic Orders \\
        --output /data/orders --checkpoint /data/orders-checkpoint [--available-now]

Rows are the source's columns (see `client.spark.records`). Exactly once comes from Spark: the
offsets of each micro-batch are logged in the checkpoint before it runs, and the file sink
commits its files in `<output>/_spark_metadata` with the batch; a restarted query (same
checkpoint) replays an unfinished batch over the same offsets and goes on. Read the output with
Spark (`spark.read.parquet(output)`), which lists files through `_spark_metadata`: a crash can
leave a partial file in the directory that belongs to no batch.

One progress line per micro-batch on stdout:

    batch 4: 80000 rows in 1.21 s (66116 rows/s), lag 120000, 400000 rows in all

`lag` is what the brokers hold beyond the batch's end offsets (the source's latest offsets at
its last look). Ctrl-C (SIGINT) or SIGTERM stops the query cleanly: the batch in flight is
abandoned and redone on restart, then the command exits 0; a second signal exits at once
(130). `--available-now` reads what is there at start-up, in batches of
`--max-offsets-per-trigger`, and exits. A failed query prints its error and exits 1.

Before Spark starts, the source's options are checked (a mistyped one is one line naming it,
with the option it probably meant, and exit 1, in a second rather than after Spark's start),
and the name servers are asked for each topic's route: none of them answering
prints one line naming them and the error, and exits 1; a topic without a route (it does not
exist, or not yet) is warned about on one line and the query goes on (it reads that topic once
it has a route).

Under spark-submit the master and Spark settings come from spark-submit; run directly, the
command starts a local Spark (`--master`, default local[*]).

While Spark starts and plans the query (tens of seconds on a small machine) a line every 5 s
says so (`starting Spark (local[*]): 10 s`). The JVM's stderr goes through
`client.spark.console.SparkNoise`: a worker's BrokenPipeError at the end of a task and Java
stack frames are not shown (the one line of each ERROR is).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.errors import TideMQError, TopicNotExistError
from tidemq.client.spark.console import Progress, filtered_stderr
from tidemq.client.spark.options import OptionError, SourceOptions, offsets_from_json
from tidemq.client.version import version_option

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
POLL_INTERVAL = 0.5


@dataclass(frozen=True, slots=True)
class IngestSettings:
    """What one run ingests, and how (every source option as a string, as Spark takes them)."""

    source_options: Mapping[str, str]
    output: str
    checkpoint: str
    trigger_interval: str | None = None  # e.g. "10 seconds"; None: as fast as possible
    available_now: bool = False
    partition_by: tuple[str, ...] = ()
    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    query_name: str | None = None


def lag_of(progress: Mapping[str, Any]) -> int | None:
    """Offsets the brokers hold past the batch's end offsets, from a progress event."""
    sources = progress.get("sources") or []
    if not sources:
        return None
    latest_text, end_text = sources[0].get("latestOffset"), sources[0].get("endOffset")
    if not latest_text or not end_text:
        return None
    try:
        latest = offsets_from_json(json.loads(latest_text))
        end = offsets_from_json(json.loads(end_text))
    except (ValueError, TypeError):
        return None
    return sum(max(0, offset - end.get(queue, 0)) for queue, offset in latest.items())


def progress_line(progress: Mapping[str, Any], total_rows: int) -> str:
    rows = int(progress.get("numInputRows") or 0)
    millis = (progress.get("durationMs") or {}).get("triggerExecution") or 0
    rate = rows / (millis / 1000) if millis else 0.0
    lag = lag_of(progress)
    lag_text = "?" if lag is None else str(lag)
    return (
        f"batch {progress.get('batchId')}: {rows} rows in {millis / 1000:.2f} s "
        f"({rate:.0f} rows/s), lag {lag_text}, {total_rows} rows in all"
    )


class _Stopper:
    """SIGINT/SIGTERM set an event the main loop watches; a second one exits at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.event.is_set():
            # The clean stop is stuck (or the user insists): leave now.
            os._exit(EXIT_INTERRUPTED)
        print(f"{signal.Signals(signum).name}: stopping the query", flush=True)
        self.event.set()


PREFLIGHT_TIMEOUT = 5.0


def missing_topics(namesrv_addr: str, topics: Sequence[str]) -> list[str]:
    """The topics the name servers have no route for; TideMQError when none answers."""

    async def check() -> list[str]:
        missing = []
        async with AdminClient(namesrv_addr, timeout=PREFLIGHT_TIMEOUT) as admin:
            for topic in topics:
                try:
                    await admin.topic_route(topic)
                except TopicNotExistError:
                    missing.append(topic)
        return missing

    return asyncio.run(check())


def preflight(options: Mapping[str, str], out: Any) -> bool:
    """Warn about topics that do not exist; False (after one line) when no name server answers."""
    namesrv = options.get("namesrvAddr", "")
    topics = [t.strip() for t in options.get("topic", "").split(",") if t.strip()]
    try:
        missing = missing_topics(namesrv, topics)
    except TideMQError as exc:
        print(f"tidemq-ingest: name server {namesrv}: {exc}", file=out, flush=True)
        return False
    for topic in missing:
        print(
            f"tidemq-ingest: warning: topic {topic} does not exist (no route on {namesrv}); "
            "nothing is read from it until it is created",
            file=out,
            flush=True,
        )
    return True


def start_query(spark: Any, settings: IngestSettings) -> Any:
    from tidemq.client.spark.source import FORMAT

    reader = spark.readStream.format(FORMAT)
    for key, value in settings.source_options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", settings.output)
        .option("checkpointLocation", settings.checkpoint)
    )
    if settings.partition_by:
        writer = writer.partitionBy(*settings.partition_by)
    if settings.query_name:
        writer = writer.queryName(settings.query_name)
    if settings.available_now:
        writer = writer.trigger(availableNow=True)
    elif settings.trigger_interval:
        writer = writer.trigger(processingTime=settings.trigger_interval)
    return writer.start()


def run(settings: IngestSettings, spark: Any | None = None, *, out: Any = None) -> int:
    """Run the query until it ends (available-now), fails, or a signal stops it. Exit status."""
    out = out or sys.stdout
    try:  # the source's own check, before Spark takes its tens of seconds to start
        SourceOptions.parse(settings.source_options, streaming=True)
    except OptionError as exc:
        print(f"tidemq-ingest: {exc}", file=out, flush=True)
        return EXIT_FAILED
    if not preflight(settings.source_options, out):
        return EXIT_FAILED
    if spark is not None:
        return _run_in(spark, settings, out, own_session=False)
    from tidemq.client.spark.session import local_session

    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started us
    master = settings.master
    if master is None and not submitted:
        master = "local[*]"  # run Spark in this process
    # The JVM starts with this process's stderr: from here on it goes through SparkNoise.
    with filtered_stderr():
        with Progress(out, f"starting Spark ({master or 'spark-submit'})"):
            spark = local_session(
                master, app_name="tidemq-ingest", conf=settings.conf, defaults=not submitted
            )
        return _run_in(spark, settings, out, own_session=True)


def _run_in(spark: Any, settings: IngestSettings, out: Any, *, own_session: bool) -> int:
    stopper = _Stopper()
    if threading.current_thread() is threading.main_thread():
        stopper.install()
    status = 0
    try:
        try:
            with Progress(out, "starting the query (Python workers plan the source)"):
                query = start_query(spark, settings)
        except Exception as exc:  # noqa: BLE001 (Spark wraps every failure: report it, exit 1)
            print(f"cannot start the query: {short_error(exc)}", file=out, flush=True)
            return EXIT_FAILED
        print(
            f"query {query.id} started: {settings.source_options.get('topic')} -> "
            f"{settings.output} (checkpoint {settings.checkpoint})",
            file=out,
            flush=True,
        )
        status = _follow(query, stopper, out)
    finally:
        stopper.restore()
        if own_session:
            spark.stop()
    return status


def short_error(exc: BaseException) -> str:
    """The line that says what went wrong, out of Spark's wrapped Python tracebacks."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if any(name in line for name in ("OptionError:", "SourceError:", "DataLossError:")):
            return line
    return lines[0] if lines else type(exc).__name__


def _follow(query: Any, stopper: _Stopper, out: Any) -> int:
    last_batch = -1
    total = 0
    batches = 0

    def report() -> None:
        nonlocal last_batch, total, batches
        for progress in query.recentProgress:
            batch_id = int(progress.get("batchId", -1))
            # Idle triggers post progress events too (every 10 s by default); only a batch
            # that ran has addBatch in its durations.
            if batch_id <= last_batch or "addBatch" not in (progress.get("durationMs") or {}):
                continue
            last_batch = batch_id
            total += int(progress.get("numInputRows") or 0)
            batches += 1
            print(progress_line(progress, total), file=out, flush=True)

    started = time.monotonic()
    while query.isActive and not stopper.event.is_set():
        stopper.event.wait(POLL_INTERVAL)
        report()
    if stopper.event.is_set() and query.isActive:
        query.stop()
    report()
    error = query.exception()
    elapsed = time.monotonic() - started
    if error is not None:
        print(f"query failed: {short_error(error)}", file=out, flush=True)
        return EXIT_FAILED
    print(f"stopped: {batches} batches, {total} rows in {elapsed:.1f} s", file=out, flush=True)
    return 0


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=what)
        out[key.strip()] = value
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option("tidemq-ingest")
@click.option("--namesrv", "-n", envvar="NAMESRV_ADDR", required=True, help="host:port[;...]")
@click.option("--topic", "-t", required=True, help="topic, or a comma list of topics")
@click.option("--output", "-o", required=True, help="Parquet output directory (any Spark path)")
@click.option("--checkpoint", "-c", required=True, help="checkpoint directory (keep it)")
@click.option(
    "--starting-offsets",
    default="earliest",
    show_default=True,
    help="earliest, latest or offsets JSON; only for a new checkpoint",
)
@click.option("--max-offsets-per-trigger", type=int, help="at most this many rows per batch")
@click.option("--trigger-interval", help="e.g. '10 seconds' (default: back to back)")
@click.option("--available-now", is_flag=True, help="ingest what is there now, then exit")
@click.option("--tags", default="*", show_default=True, help="tag expression, e.g. 'A || B'")
@click.option("--include-properties", is_flag=True, help="add the properties map column")
@click.option("--fail-on-data-loss/--no-fail-on-data-loss", default=True, show_default=True)
@click.option("--read-from-slave", is_flag=True, help="prefer slaves for reads")
@click.option("--partition-by", help="comma list of columns to partition the output by")
@click.option(
    "--access-key", envvar="TIDEMQ_ACCESS_KEY", help="ACL access key [env TIDEMQ_ACCESS_KEY]"
)
@click.option(
    "--secret-key", envvar="TIDEMQ_SECRET_KEY", help="ACL secret key [env TIDEMQ_SECRET_KEY]"
)
@click.option(
    "--option",
    "source_option",
    multiple=True,
    metavar="KEY=VALUE",
    help="any other source option (repeatable)",
)
@click.option("--master", help="Spark master (default: spark-submit's, else local[*])")
@click.option(
    "--conf", "spark_conf", multiple=True, metavar="KEY=VALUE", help="a Spark setting (repeatable)"
)
@click.option("--query-name", help="name of the streaming query")
def cli(
    namesrv: str,
    topic: str,
    output: str,
    checkpoint: str,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    trigger_interval: str | None,
    available_now: bool,
    tags: str,
    include_properties: bool,
    fail_on_data_loss: bool,
    read_from_slave: bool,
    partition_by: str | None,
    access_key: str | None,
    secret_key: str | None,
    source_option: tuple[str, ...],
    master: str | None,
    spark_conf: tuple[str, ...],
    query_name: str | None,
) -> None:
    """Ingest tidemq topics into Parquet with Spark Structured Streaming (exactly once)."""
    if available_now and trigger_interval:
        raise click.UsageError("--available-now and --trigger-interval exclude each other")
    options = {
        "namesrvAddr": namesrv,
        "topic": topic,
        "startingOffsets": starting_offsets,
        "tags": tags,
        "includeProperties": str(include_properties).lower(),
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        "readFromSlave": str(read_from_slave).lower(),
    }
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if access_key or secret_key:
        options.update(accessKey=access_key or "", secretKey=secret_key or "")
    options.update(_pairs(source_option, "--option"))
    settings = IngestSettings(
        source_options=options,
        output=output,
        checkpoint=checkpoint,
        trigger_interval=trigger_interval,
        available_now=available_now,
        partition_by=tuple(c.strip() for c in (partition_by or "").split(",") if c.strip()),
        master=master,
        conf=_pairs(spark_conf, "--conf"),
        query_name=query_name,
    )
    sys.exit(run(settings))


SPARK_MISSING = (
    "tidemq-ingest: needs pyspark and pyarrow, the `spark` extra of tidemq: "
    "pip install 'tidemq[spark]' (and Java 17)"
)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script's entry point (one line and exit 1 without the spark extra)."""
    if any(importlib.util.find_spec(name) is None for name in ("pyspark", "pyarrow")):
        print(SPARK_MISSING, file=sys.stderr)
        sys.exit(EXIT_FAILED)
    cli.main(args=list(argv) if argv is not None else None, prog_name="tidemq-ingest")


if __name__ == "__main__":
    main()
