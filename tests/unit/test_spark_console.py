"""client/spark/console.py: the filter of Spark's stderr and the progress lines, without Spark."""

from __future__ import annotations

import io
import threading

from tidemq.client.spark.console import FLUSH_FAILURE, Progress, SparkNoise

# What PySpark 4's daemon prints when a worker's last flush meets a socket the JVM closed.
BROKEN_PIPE = [
    FLUSH_FAILURE,
    "Traceback (most recent call last):",
    '  File ".../pyspark/daemon.py", line 95, in worker',
    "    outfile.flush()",
    "BrokenPipeError: [Errno 32] Broken pipe",
]
JAVA_ERROR = [
    "26/11/29 10:46:07 ERROR FileFormatWriter: Aborting job 989beb2f.",
    "java.lang.InterruptedException",
    "\tat java.base/java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire(AQS.java:1048)",
    "\tat scala.concurrent.impl.Promise$DefaultPromise.tryAwait0(Promise.scala:253)",
    "Caused by: java.io.IOException: closed",
    "\t... 12 more",
]


def shown(lines: list[str]) -> list[str]:
    noise = SparkNoise()
    out = [line for each in lines for line in noise.feed(each)]
    return out + noise.flush()


def test_a_broken_pipe_at_the_end_of_a_task_is_not_shown() -> None:
    lines = ["batch 0: 50 rows", *BROKEN_PIPE, *BROKEN_PIPE[1:], "stopped: 1 batches"]
    assert shown(lines) == ["batch 0: 50 rows", "stopped: 1 batches"]


def test_any_other_traceback_is_shown_whole() -> None:
    other = [*BROKEN_PIPE[:-1], "MemoryError"]
    assert shown([*other, "next"]) == [*other, "next"]
    bare = ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad"]
    assert shown(bare) == bare


def test_a_traceback_cut_short_is_shown_at_the_end() -> None:
    assert shown(BROKEN_PIPE[:3]) == BROKEN_PIPE[:3]


def test_java_errors_keep_their_lines_without_frames() -> None:
    assert shown(JAVA_ERROR) == [JAVA_ERROR[0], JAVA_ERROR[1], JAVA_ERROR[4]]


def test_spark_warnings_pass() -> None:
    warn = "26/11/29 10:43:26 WARN NativeCodeLoader: Unable to load native-hadoop library"
    assert shown([warn, ""]) == [warn, ""]


def test_progress_says_what_it_waits_for_until_it_is_done() -> None:
    out = io.StringIO()
    ticked = threading.Event()

    class Watched(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith("starting Spark (local[2]): 0 s"):
                ticked.set()
            return out.write(text)

    with Progress(Watched(), "starting Spark (local[2])", every=0.01):
        assert ticked.wait(10)
    lines = out.getvalue().splitlines()
    assert lines[0] == "starting Spark (local[2])..."
    assert lines[1].startswith("starting Spark (local[2]): ")
    assert lines[-1].startswith("starting Spark (local[2]): ready in ")
