"""Power cuts on lossy file systems (tests/support/lazyfs.py).

- A SYNC_FLUSH store writer process (tests/fault/store_writer.py: 256 KiB CommitLog files,
  20-unit ConsumeQueue files, so files are created all the time) cut under load, then the store
  loaded and checked offline (`store_fault_check.check_store`: every acknowledged message at its
  place, in its queue and index, nothing invalid). Without the store's directory fsyncs (a new
  store, CommitLog or ConsumeQueue file, or queue directory, lost whole) and the fsync of a new
  file's size (a ConsumeQueue file back with 0 bytes stopped the load) it fails.
- A few seeded rounds of each scenario of tests/fault/powercut.py with brokerd processes (its
  docstring states what each scenario promises); `make powercut` is the long run.

Rerun a failure with TIDEMQ_FAULT_SEED=<seed>.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.fault.powercut import power_cut, run
from tests.fault.store_fault_check import History, Writers, check_store
from tests.support.lazy_mounts import NEEDS_FUSE, LazyMount, can_mount

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)

ROUNDS = 3
WRITER_ROUNDS = 4


@pytest.mark.parametrize("mode", ["all", "torn"])
def test_sync_flush_writer_keeps_every_acknowledged_message(
    tmp_path: Path, writers: Writers, seed: int, mode: str
) -> None:
    rng = random.Random(seed)
    mount = LazyMount(tmp_path, "disk")
    history = History(seed)
    try:
        for round_no in range(WRITER_ROUNDS):
            mount.start()
            tasks = rng.randint(1, 4)
            # appends by pwrite (the default) or by copies into the shared map (msync'd)
            overrides = rng.choice([{}, {"appendMode": "mmap"}])
            run_ = writers.start(
                mount.path / "store", seed=seed, round_no=round_no, tasks=tasks, overrides=overrides
            )
            run_.wait_acks(rng.randint(20, 300))
            summary = power_cut(mount, mode, rng.randrange(2**31))
            run_.kill()
            acks = run_.acks()
            history.add_run(round_no, tasks, acks)
            lost, kept = summary["pages_lost"], summary["pages_kept"]
            context = (
                f"round {round_no} ({overrides or 'pwrite'}): {len(acks)} acks, {mode} cut "
                f"({lost} pages lost, {kept} kept)"
            )
            report = check_store(mount.backing / "store", history, context)
            print(f"{context}: {report.records} records")
    finally:
        mount.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("scenario", ["sync-flush", "async-flush", "ha"])
async def test_power_cut_rounds(tmp_path: Path, seed: int, scenario: str) -> None:
    report = await run(scenario, ROUNDS, tmp_path, seed)
    print(report.line())
    assert report.rounds == ROUNDS
    assert report.in_flight_at_cut > 0, "every cut came with sends in flight"
    assert not report.violations, report.line()
    if scenario != "async-flush":
        assert report.lost == 0
