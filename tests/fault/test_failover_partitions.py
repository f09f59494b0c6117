"""Partitions during failover, the short seeded run (tests/fault/partitions.py; `make partitions`
runs 100 rounds): each fault once, in the seed's order, checked by the history checker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault.partitions import SCENARIOS, partitions
from tests.support.history import RULES
from tests.support.netns import skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


async def test_every_fault_once_loses_nothing_and_fences(tmp_path: Path, seed: int) -> None:
    report = await partitions(len(SCENARIOS), tmp_path, seed)
    print(report.line())
    assert report.rounds == len(SCENARIOS)
    assert report.history is not None
    counts = report.history.counts
    assert counts["acknowledged"] > 0 and counts["consumed"] > 0, report.line()
    assert counts["delivered"] > 0, "the orderly push consumer's deliveries are judged"
    # master-etcd, master-etcd-out and pause-master each elect another master
    assert report.elections >= 3, report.line()
    assert {rule: len(report.history.violations[rule]) for rule in RULES} == dict.fromkeys(
        RULES, 0
    ), report.line()
