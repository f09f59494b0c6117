"""The soak's short version: one round of each kind (tests/fault/soak.py; `make soak` runs 100)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault.soak import KINDS, soak
from tests.support.lazy_mounts import NEEDS_FUSE, can_mount

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)


async def test_a_round_of_each_kind_under_load_loses_no_acknowledged_message(
    tmp_path: Path, seed: int
) -> None:
    report = await soak(len(KINDS), tmp_path, seed)
    assert report.rounds == len(KINDS), report.line()
    assert all(report.kinds[kind] == 1 for kind in KINDS), report.line()
    assert min(report.in_flight) > 0, report.line()
    assert report.history is not None and report.history.counts["acknowledged"] > 0
    assert report.ok, report.line() + "\n" + "\n".join(report.notes)
