"""`python -m tests.fuzz [--runs N] [--out DIR] [TARGET ...]`: run the fuzz targets (`make fuzz`).

`python -m tests.fuzz --requests SECONDS [--seed N] [--out DIR]` runs the request fuzzer
instead (tests/fuzz/requests.py: hostile requests to live daemons) for SECONDS (`--legal-names`:
every hostile value but names, to look past the name bugs); its findings
go to DIR/requests/<kind>-<n>.json, and it exits 1 when there is one.
`python -m tests.fuzz --grpc SECONDS [--seed N] [--out DIR]` fuzzes a brokerd's gRPC endpoint
the same way (tests/fuzz/grpc_requests.py; half the time with aclEnable and signed or hostile
calls); findings to DIR/grpc/grpc-<kind>-<n>.json.

Each target runs under atheris in a process of its own, from its checked-in seeds, for `--runs`
executions (default 1,000,000), with a per-input timeout (a hang is a crash) and an RSS limit
(an allocation beyond the bounds is a crash). New coverage goes to DIR/<target>/corpus, a
crashing input to DIR/<target>/crash-* (timeout-*, oom-*); DIR (fuzz-crashes/ by default) is
git-ignored. Prints executions, time and outcome per target; exits 1 when one crashed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.targets import TARGETS

SEEDS = Path(__file__).resolve().parent / "corpus"
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
_EXECUTED = re.compile(rb"stat::number_of_executed_units: (\d+)")


@dataclass
class Result:
    target: str
    executions: int
    seconds: float
    returncode: int
    artifacts: list[Path]
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.artifacts


def fuzz(
    target: str,
    runs: int,
    out: Path,
    *,
    seed: int | None = None,
    timeout: int = 10,
    rss_limit_mb: int = 2048,
    max_len: int = 16384,
    grow_corpus: bool = True,
) -> Result:
    """Run `target` for `runs` executions; see the module docstring."""
    folder = out / target
    work = folder / "corpus"
    work.mkdir(parents=True, exist_ok=True)
    before = set(folder.glob("*-*"))
    command = [
        sys.executable,
        "-m",
        "tests.fuzz.run",
        target,
        f"-runs={runs}",
        f"-timeout={timeout}",
        f"-rss_limit_mb={rss_limit_mb}",
        f"-max_len={max_len}",
        f"-artifact_prefix={folder}/",
        "-print_final_stats=1",
    ]
    if seed is not None:
        command.append(f"-seed={seed}")
    dirs = [work] if grow_corpus else []
    dirs += [d for d in (SEEDS / target, REGRESSIONS / target) if d.is_dir()]
    started = time.monotonic()
    done = subprocess.run(
        [*command, *map(str, dirs)],
        capture_output=True,
        check=False,
        # unbuffered: libFuzzer ends the process without flushing Python's traceback
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    found = _EXECUTED.findall(output)
    artifacts = sorted(set(folder.glob("*-*")) - before)
    return Result(
        target,
        int(found[-1]) if found else 0,
        seconds,
        done.returncode,
        artifacts,
        output.decode("utf-8", "replace"),
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("targets", nargs="*", choices=[[], *TARGETS], default=[])
    parser.add_argument("--runs", type=int, default=1_000_000, help="executions per target")
    parser.add_argument("--out", type=Path, default=Path("fuzz-crashes"))
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="libFuzzer's random seed (with --requests: the run's seed)",
    )
    parser.add_argument("--timeout", type=int, default=10, help="seconds per input")
    parser.add_argument(
        "--requests", type=float, metavar="SECONDS", help="fuzz live daemons' requests instead"
    )
    parser.add_argument(
        "--grpc", type=float, metavar="SECONDS", help="fuzz a brokerd's gRPC endpoint instead"
    )
    parser.add_argument(
        "--legal-names",
        action="store_true",
        help="with --requests: no hostile topic/group/key names, every other hostile value",
    )
    parser.add_argument(
        "--lanes", type=int, default=4, help="with --requests or --grpc: clients fuzzing at once"
    )
    args = parser.parse_args()
    if args.grpc is not None:
        return fuzz_grpc(args.grpc, args.seed, args.out, lanes=args.lanes)
    if args.requests is not None:
        return fuzz_requests(
            args.requests, args.seed, args.out, names=not args.legal_names, lanes=args.lanes
        )
    failed = 0
    for target in args.targets or list(TARGETS):
        result = fuzz(target, args.runs, args.out, seed=args.seed, timeout=args.timeout)
        state = "ok" if result.ok else f"FAILED (exit {result.returncode})"
        print(
            f"{target:18} {result.executions:>10} executions {result.seconds:8.1f} s  {state}",
            flush=True,
        )
        if not result.ok:
            failed += 1
            print(result.output[-4000:])
            for artifact in result.artifacts:
                print(f"  saved: {artifact}")
    return 1 if failed else 0


def fuzz_requests(
    seconds: float, seed: int | None, out: Path, *, names: bool = True, lanes: int = 4
) -> int:
    from tests.fuzz.requests import run  # starts daemons: not needed by the decoder targets

    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
    with tempfile.TemporaryDirectory(prefix="tidemq-reqfuzz-") as base:
        report = run(seed, seconds, Path(base), out / "requests", names=names, lanes=lanes)
    print(report.summary(), flush=True)
    return 1 if report.findings else 0


def fuzz_grpc(seconds: float, seed: int | None, out: Path, *, lanes: int = 4) -> int:
    from tests.fuzz.grpc_requests import run  # starts daemons: not needed by the targets

    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
    found = 0
    for acl in (False, True):  # half the time without ACL, half with signed and hostile calls
        with tempfile.TemporaryDirectory(prefix="tidemq-grpcfuzz-") as base:
            report = run(seed, seconds / 2, Path(base), out / "grpc", acl=acl, lanes=lanes)
        print(("with ACL: " if acl else "") + report.summary(), flush=True)
        found += len(report.findings)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
