"""The fuzz targets in `make test`: every seed and every known crash replayed, each target run
briefly under atheris from its seeds.

The replay runs in this process under tracemalloc: each input must keep its target's property
(tests/fuzz/targets.py) and its peak allocation within `ALLOCATION_BOUND`. The short runs are
`python -m tests.fuzz` with a fixed libFuzzer seed and FUZZ_TEST_RUNS executions per target
(default 4000: about 2 s each); `make fuzz` is the long version.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from tests.fuzz.__main__ import REGRESSIONS, SEEDS, fuzz
from tests.fuzz.targets import ALLOCATION_BOUND, TARGETS

SHORT_RUNS = int(os.environ.get("FUZZ_TEST_RUNS", "4000"))


def inputs_of(target: str) -> list[Path]:
    return sorted(
        p for d in (SEEDS / target, REGRESSIONS / target) if d.is_dir() for p in d.iterdir()
    )


def test_every_target_has_seeds() -> None:
    assert sorted(p.name for p in SEEDS.iterdir()) == sorted(TARGETS)
    assert all(inputs_of(target) for target in TARGETS)


@pytest.mark.parametrize("target", list(TARGETS))
def test_seeds_and_crashes_replay_within_bounds(target: str) -> None:
    run = TARGETS[target].run
    per_byte, constant = ALLOCATION_BOUND
    for path in inputs_of(target):
        data = path.read_bytes()
        run(data)  # first call: lazy imports and caches are not the input's allocations
        tracemalloc.start()
        try:
            run(data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= per_byte * len(data) + constant, f"{path.name}: peak {peak} bytes"


@pytest.mark.parametrize("target", list(TARGETS))
def test_short_seeded_run(target: str, tmp_path: Path) -> None:
    result = fuzz(target, SHORT_RUNS, tmp_path, seed=1, timeout=10, rss_limit_mb=1024)
    assert result.ok, result.output[-3000:]
    assert result.executions >= SHORT_RUNS
