"""The gRPC request fuzzer in `make test`: a seed makes the same calls, every RPC is drawn, saved
findings replay clean, and a seeded run of a few seconds against a real brokerd keeps every
invariant (tests/fuzz/grpc_requests.py). `make fuzz` is the long version
(FUZZ_GRPC_SECONDS); GRPC_FUZZ_SECONDS sets this one's budget (default 8: half without ACL,
half with signed and hostile calls).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tests.fuzz.grpc_requests import FRAME_LIMIT, MAX_BODY, REGRESSIONS, replay, run
from tests.fuzz.grpc_steps import GrpcStep, GrpcSteps
from tidemq.broker.proxy.server import RPCS

GRPC_SEED = 33
SECONDS = float(os.environ.get("GRPC_FUZZ_SECONDS", "8"))
LANES = int(os.environ.get("GRPC_FUZZ_LANES", "3"))  # clients calling at once


def steps_of(seed: int, count: int) -> list[GrpcStep]:
    maker = GrpcSteps(random.Random(seed), ["/nonexistent/victim"], MAX_BODY, FRAME_LIMIT)
    return [maker.next() for _ in range(count)]


def test_a_seed_makes_the_same_calls_of_every_rpc_and_they_survive_a_save() -> None:
    steps = steps_of(GRPC_SEED, 400)
    assert [s.to_json() for s in steps] == [s.to_json() for s in steps_of(GRPC_SEED, 400)]
    assert [s.to_json() for s in steps] != [s.to_json() for s in steps_of(GRPC_SEED + 1, 400)]
    assert [GrpcStep.from_json(json.loads(json.dumps(s.to_json()))) for s in steps] == steps
    assert {s.method for s in steps} == set(RPCS)
    notes = " ".join(s.note for s in steps)
    for kind in ("name", "duration", "handle", "body size", "bad utf-8", "raw", "client id"):
        assert kind in notes, kind
    signed = GrpcSteps(random.Random(GRPC_SEED), [], MAX_BODY, FRAME_LIMIT, (("ak-1234", "sk"),))
    headers = [dict(signed.next().metadata) for _ in range(200)]
    assert all("authorization" in h for h in headers)
    assert any("x-mq-date-time" not in h for h in headers)


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 240)
@pytest.mark.parametrize("acl", [False, True], ids=["open", "acl"])
def test_seeded_grpc_run_keeps_every_invariant(tmp_path: Path, acl: bool) -> None:
    """`acl`: the broker checks 5.x signatures; the calls are signed by an admin or a user
    limited to the good topic, or carry hostile authorization headers."""
    report = run(
        GRPC_SEED, SECONDS / 2, tmp_path / "run", tmp_path / "findings", acl=acl, lanes=LANES
    )
    print(report.summary())
    assert report.calls > 0 and report.sanity_checks >= 2
    if acl:
        assert report.answers["UNAUTHORIZED"] and report.answers["FORBIDDEN"], report.summary()
    assert not report.findings, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("saved", sorted(REGRESSIONS.glob("*.json")), ids=lambda p: p.stem)
def test_saved_grpc_input_replays_without_a_finding(saved: Path, tmp_path: Path) -> None:
    report = replay(saved, tmp_path)
    assert not report.findings, report.summary()
