"""What a person sees of Spark on a terminal: progress while the JVM starts, and none of the
tracebacks Spark prints when nothing went wrong.

`Progress(out, what)` prints `what...` at once, `what: 5 s` every `every` seconds while the
work goes on (the JVM takes 5-30 s to start, the first query's planning as long again, with
nothing else on the terminal but Spark's WARN lines), and `what: ready in 12.3 s` at the end.

`SparkNoise` is a sans-IO filter of the JVM's stderr lines (the JVM's own log and, through its
redirect threads, the Python workers' stderr). It drops:

- a Python traceback whose exception is BrokenPipeError or ConnectionResetError, with PySpark's
  "PySpark daemon failed to flush the output to the worker process:" line before it: a worker
  whose task had ended wrote its last bytes to a socket the JVM had already closed (at the end
  of a query, and when a stop cancels a batch); nothing was lost. Any other traceback is shown;
- Java stack frames (`\tat ...`, `\t... 12 more`): the line that names the error stays, so an
  ERROR is one line; the query's own failure is printed by tidemq-ingest as one line too.

`filtered_stderr(out)` routes file descriptor 2 through that filter while Spark runs: the JVM
inherits the descriptor when it starts, and its workers inherit it from the JVM.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import IO, Final

FLUSH_FAILURE: Final = "PySpark daemon failed to flush the output to the worker process:"
TRACEBACK_START: Final = "Traceback (most recent call last):"
# The exceptions of a peer that closed the connection first: harmless at the end of a task.
CLOSED_BY_PEER: Final = re.compile(r"^(BrokenPipeError|ConnectionResetError)\b")
JAVA_FRAME: Final = re.compile(r"^\t(at |\.\.\. \d+ more)")


class SparkNoise:
    """Feed it lines (without their newline); it returns the lines to show."""

    def __init__(self) -> None:
        self._held: list[str] = []  # a traceback (and its flush line) not yet ended

    def feed(self, line: str) -> list[str]:
        if JAVA_FRAME.match(line):
            return []
        if self._held:
            if line == TRACEBACK_START and self._held == [FLUSH_FAILURE]:
                self._held.append(line)
                return []
            if self._held[-1] != FLUSH_FAILURE and (
                line.startswith((" ", "\t")) or not line.strip()
            ):
                self._held.append(line)  # a frame of the traceback, or its source line
                return []
            held, self._held = self._held, []
            if len(held) > 1 and CLOSED_BY_PEER.match(line):
                return []  # the traceback ends with a closed connection: nothing to tell
            return [*held, *self.feed(line)]
        if line in (FLUSH_FAILURE, TRACEBACK_START):
            self._held = [line]
            return []
        return [line]

    def flush(self) -> list[str]:
        """What is held at the end of the stream (a traceback cut short is shown)."""
        held, self._held = self._held, []
        return held


class Progress:
    """A context manager: `what...`, then `what: N s` every `every` seconds, then the total."""

    def __init__(self, out: IO[str], what: str, every: float = 5.0) -> None:
        self.out = out
        self.what = what
        self.every = every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._started = 0.0

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _tick(self) -> None:
        while not self._done.wait(self.every):
            self._say(f"{self.what}: {time.monotonic() - self._started:.0f} s")

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        self._say(f"{self.what}...")
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()
        if kind is None:
            self._say(f"{self.what}: ready in {time.monotonic() - self._started:.1f} s")


def _copy_filtered(read_fd: int, out_fd: int) -> None:
    noise = SparkNoise()
    with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace", newline="\n") as lines:
        for line in lines:
            shown = noise.feed(line.rstrip("\n"))
            if shown:
                os.write(out_fd, ("\n".join(shown) + "\n").encode())
    rest = noise.flush()
    if rest:
        os.write(out_fd, ("\n".join(rest) + "\n").encode())


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Descriptor 2 goes through SparkNoise for as long as the block runs (and for the JVM it
    starts meanwhile, for its whole life; the copying thread is a daemon thread, as the JVM
    lives until this process exits)."""
    sys.stderr.flush()
    terminal = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    copier = threading.Thread(
        target=_copy_filtered, args=(read_fd, terminal), name="spark-stderr", daemon=True
    )
    copier.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # this process writes to the terminal again; the JVM, the pipe
