"""The soak's short version: two rounds of each kind, one with raw sends and one
with the public producer (tests/fault/soak.py; `make soak` runs 100),
and its check of the slave's files failing on a slave that lacks an acknowledged message."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.fault.cq_check import CommitLogFiles, walk_commitlog
from tests.fault.soak import BROKER_NAME, KINDS, TOPIC, soak
from tests.support.history import Recorder, check, load, operations
from tests.support.lazy_mounts import NEEDS_FUSE, can_mount
from tests.support.store_history import record_store_read

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)


async def test_two_rounds_of_each_kind_under_load_lose_no_acknowledged_message(
    tmp_path: Path, seed: int
) -> None:
    report = await soak(2 * len(KINDS), tmp_path, seed)
    assert report.rounds == 2 * len(KINDS), report.line()
    assert all(report.kinds[kind] == 2 for kind in KINDS), report.line()
    assert min(report.in_flight) > 0, report.line()
    assert report.history is not None and report.history.counts["acknowledged"] > 0
    # the C++ client's sends are part of the load, recorded and judged with the others
    assert report.cpp_acknowledged > 0, report.line()
    assert report.cpp_acknowledged <= report.history.counts["acknowledged"]
    assert report.ok, report.line() + "\n" + "\n".join(report.notes)


async def test_the_slave_files_check_fails_when_an_acknowledged_message_is_missing(
    tmp_path: Path, seed: int
) -> None:
    """What the soak's check at the strike sees of a slave that acknowledged before storing:
    the slave's real files after a round, their tail from an acknowledged record on zeroed."""
    report = await soak(1, tmp_path, seed)
    assert report.ok, report.line()
    events = load(tmp_path / "history.jsonl")
    acked = {
        (o.get("queue"), o.get("offset")) for o in operations(events) if o.f == "send"
        if o.outcome == "ok"
    }  # fmt: skip
    store = tmp_path / "slave.backing" / "store"  # the mount is down: its backing folder
    with ExitStack() as stack:
        files = CommitLogFiles(store / "commitlog", stack)
        phys = [phy for _t, q, off, phy in walk_commitlog(files) if (q, off) in acked]
        last = max(phys)
        held = files.at(last)
        assert held is not None
        base = held[0]
    segment = store / "commitlog" / f"{base:020d}"
    data = bytearray(segment.read_bytes())
    data[last - base :] = bytes(len(data) - (last - base))
    segment.write_bytes(bytes(data))

    recorder = Recorder(None, "test")
    recorder.events = events
    record_store_read(recorder, store, TOPIC, BROKER_NAME)
    judged = check(recorder.events)
    assert judged.counts["lost"] >= 1, judged.summary()
    assert judged.violations["lost"], judged.summary()
