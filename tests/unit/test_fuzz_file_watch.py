"""The fuzzers' `FileWatch` (tests/fuzz/request_cluster.py): what appears in the daemons' working
directory is a finding, except what the test run itself makes there beside a fuzzing run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz import request_cluster
from tests.fuzz.request_cluster import FileWatch


def test_a_stray_entry_in_the_working_directory_is_seen_the_runs_own_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd, base = tmp_path / "cwd", tmp_path / "base"
    cwd.mkdir()
    base.mkdir()
    monkeypatch.setattr(request_cluster, "REPO_ROOT", cwd)
    watch = FileWatch(base, frozenset())
    watch.reset()
    for name in ("tidemq-0.1.0", ".hypothesis", ".pytest_cache", "stray"):
        (cwd / name).mkdir()
    (base / "escaped").write_text("x")
    assert watch.changes() == (sorted([str(cwd / "stray"), str(base / "escaped")]), [])
    (cwd / "tidemq-0.1.0").rmdir()
    assert watch.changes()[1] == []
