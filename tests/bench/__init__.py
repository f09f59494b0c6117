"""Benchmarks: `make bench`, i.e. `python -m tests.bench [NAME ...]`.

Every module of this package whose name ends in `_bench` is one section of the run, found by the
runner (`__main__.py`) without being listed anywhere. A section module exposes

    def run() -> list[Result]

which prints whatever detail it likes while it runs (tables, notes) and returns its headline
figures. The runner prints a heading per section, calls `run()`, and prints every figure again in
a summary at the end, each with its target and PASS or MISS. A figure without a target is
information only. A section that raises is reported as FAILED and makes the run exit 1; a MISS
does not (numbers are noisy on a shared machine: read them, do not gate on them).

`python -m tests.bench store` runs only the sections whose names start with `store`.

Shared conventions: rates are per second of wall time, MB is 10**6 bytes, every section bounds
its own time and volume and cleans up the temporary files it makes (TIDEMQ_BENCH_DIR chooses
where they go; the default is the system's temporary directory).
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.support.processes import Daemon, ProcessGroup

T = TypeVar("T")

# What a production broker uses (the tests shrink these): 1 GiB CommitLog files, RocketMQ's
# ConsumeQueue and index sizes, 4 MiB messages.
BROKER_SIZES = (
    "mappedFileSizeCommitLog=1073741824",
    "mappedFileSizeConsumeQueue=6000000",
    "maxHashSlotNum=5000000",
    "maxIndexNum=20000000",
    "maxMessageSize=4194304",
)

__all__ = ["Result", "env_int", "temp_dir"]


@dataclass(frozen=True, slots=True)
class Result:
    """One measured figure; `target` makes it PASS or MISS (`higher_is_better` says which way)."""

    name: str
    value: float
    unit: str
    target: float | None = None
    higher_is_better: bool = True
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        if math.isnan(self.value):
            return "MISS"
        ok = self.value >= self.target if self.higher_is_better else self.value <= self.target
        return "PASS" if ok else "MISS"

    def line(self, name_width: int = 60) -> str:
        text = f"{self.name:<{name_width}} {_number(self.value):>12} {self.unit:<8}"
        if self.target is not None:
            op = ">=" if self.higher_is_better else "<="
            text += f" target {op} {_number(self.target):<10} {self.verdict}"
        if self.note:
            text += f"  ({self.note})"
        return text.rstrip()


def _number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if value else "0"


def env_int(name: str, default: int) -> int:
    """An integer knob from the environment (e.g. to shrink a benchmark on a slow machine)."""
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@contextmanager
def temp_dir(tag: str) -> Iterator[Path]:
    """A fresh directory under TIDEMQ_BENCH_DIR (or the system's), removed afterwards."""
    base = os.environ.get("TIDEMQ_BENCH_DIR") or None
    path = Path(tempfile.mkdtemp(prefix=f"tidemq-bench-{tag}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def one_broker(tag: str, *overrides: str) -> Iterator[tuple[Daemon, Daemon]]:
    """(namesrvd, brokerd) as processes with BROKER_SIZES (then `overrides`, `key=value`) in a
    temporary folder; stopped after."""
    with temp_dir(tag) as folder:
        group = ProcessGroup(folder / "logs")
        try:
            namesrv = group.namesrvd(name="namesrvd")
            broker = group.brokerd(
                namesrv.address, folder / "store", *BROKER_SIZES, *overrides, name="brokerd"
            )
            yield namesrv, broker
        finally:
            group.stop_all()


def run_on_uvloop(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on a fresh uvloop (the client's loop), or asyncio's without uvloop."""
    try:
        import uvloop
    except ImportError:
        loop = asyncio.new_event_loop()
    else:
        loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
