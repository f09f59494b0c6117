"""The kill-9 soak's short version: three rounds (tests/fault/soak.py; `make soak` runs 100)."""

from __future__ import annotations

from pathlib import Path

from tests.fault.soak import soak


async def test_three_kill_rounds_lose_no_acknowledged_message(tmp_path: Path, seed: int) -> None:
    report = await soak(3, tmp_path, seed)
    assert report.rounds == 3
    assert report.acknowledged > 0
    assert report.lost == 0, report.line()
