"""The request fuzzer in `make test`: the catalog covers every served code, every saved input
replays without a finding, and a seeded run of about a minute keeps every invariant.

The run is `tests.fuzz.requests.run` with the fixed seed REQUEST_SEED for FUZZ_REQUEST_SECONDS
(default 60); `make fuzz` is the long version. A failure prints the run's figures and findings;
each finding's requests are saved under the test's temporary folder (a JSON file to copy to
tests/fuzz/regressions/requests/ once the bug is understood).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.request_catalog import CATALOG, Server, served_codes
from tests.fuzz.requests import REGRESSIONS, replay, run

REQUEST_SEED = 30
SECONDS = float(os.environ.get("FUZZ_REQUEST_SECONDS", "60"))


def test_the_catalog_names_every_code_the_daemons_serve() -> None:
    served = served_codes()
    for server in Server:
        assert {code for s, code in CATALOG if s is server} == served[server], server


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 240)
def test_seeded_run_keeps_every_invariant(tmp_path: Path) -> None:
    report = run(REQUEST_SEED, SECONDS, tmp_path / "run", tmp_path / "findings")
    print(report.summary())
    assert report.requests > 0
    assert set(report.per_code) >= {spec.name for spec in CATALOG.values()}
    assert not report.findings, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("saved", sorted(REGRESSIONS.glob("*.json")), ids=lambda p: p.stem)
def test_saved_input_replays_without_a_finding(saved: Path, tmp_path: Path) -> None:
    report = replay(saved, tmp_path)
    assert not report.findings, report.summary()
