"""The request fuzzer in `make test`: the catalog covers every served code, every saved input
replays without a finding, and a seeded run of half a minute keeps every invariant.

The run is `tests.fuzz.requests.run` with the fixed seed REQUEST_SEED for FUZZ_REQUEST_SECONDS
(default 30; every code of the catalog is sent first, then the random scenarios) by
FUZZ_REQUEST_LANES clients at once (default 3); `make fuzz` is the long version. A failure
prints the run's figures and findings; each finding's requests are saved under the test's
temporary folder (a JSON file to copy to tests/fuzz/regressions/requests/ once the bug is
understood).
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

from tests.fuzz.request_catalog import CATALOG, Server, served_codes
from tests.fuzz.request_steps import Scenarios, Step
from tests.fuzz.request_wire import Answer, typed_frame
from tests.fuzz.requests import REGRESSIONS, replay, run
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.frame import FrameDecoder

REQUEST_SEED = 30
SECONDS = float(os.environ.get("FUZZ_REQUEST_SECONDS", "30"))
LANES = int(os.environ.get("FUZZ_REQUEST_LANES", "3"))


def test_the_catalog_names_every_code_the_daemons_serve() -> None:
    served = served_codes()
    for server in Server:
        assert {code for s, code in CATALOG if s is server} == served[server], server


def steps_of(seed: int, scenarios: int, names: bool = True) -> list[Step]:
    """The steps a seed makes when every request is answered by a closed connection."""
    maker = Scenarios(random.Random(seed), ["/nonexistent/victim"], "t", names=names)
    out: list[Step] = []
    for _ in range(scenarios):
        scenario = maker.next()
        try:
            step = next(scenario)
            while True:
                out.append(step)
                step = scenario.send(Answer(None, closed=True))
        except StopIteration:
            pass
    return out


def test_a_seed_makes_the_same_requests_and_they_survive_a_save() -> None:
    steps = steps_of(30, 200)
    assert [s.to_json() for s in steps] == [s.to_json() for s in steps_of(30, 200)]
    assert [s.to_json() for s in steps] != [s.to_json() for s in steps_of(31, 200)]
    again = [Step.from_json(json.loads(json.dumps(s.to_json()))) for s in steps]
    assert again == steps
    assert any(s.track for s in steps) and any(s.typed for s in steps)
    assert {s.serialize for s in steps} == {int(t) for t in SerializeType}


def test_legal_names_keep_every_name_to_rocketmqs_characters() -> None:
    legal = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
    for step in steps_of(7, 300, names=False):
        for key in ("topic", "group", "consumerGroup", "b"):
            value = step.ext.get(key)
            assert not isinstance(value, str) or legal.fullmatch(value), (key, value)


@pytest.mark.parametrize("serialize", [SerializeType.JSON, SerializeType.MSGPACK])
def test_a_typed_frame_reads_as_the_servers_read_it(serialize: SerializeType) -> None:
    ext = {"topic": ["../x"], "queueId": 2**63 - 1, "order": True, "gone": None, "n": {"a": 1}}
    [command] = FrameDecoder().feed(typed_frame(36, 7, ext, b"body", serialize))
    assert (command.code, command.opaque, command.body) == (36, 7, b"body")
    assert command.ext_fields == {
        "topic": '["../x"]', "queueId": str(2**63 - 1), "order": "true", "n": '{"a":1}'
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 240)
def test_seeded_run_keeps_every_invariant(tmp_path: Path) -> None:
    report = run(REQUEST_SEED, SECONDS, tmp_path / "run", tmp_path / "findings", lanes=LANES)
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
