"""What a release wheel must hold beyond the pure modules: every compiled module pyproject.toml's
ext-modules lists (optional to a build without a compiler, required of a release) and the
RocketMQ 5 protocol modules generated from broker/proxy/protocol/*.proto (git-ignored).

`python -m tests.support.release WHEEL` (run by `make dist`) prints one line per missing module
and exits 1; tests/integration/test_release.py uses `missing_modules` on the wheel it built.
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_MODULES = (
    "tidemq.broker.proxy.protocol.definition_pb2",
    "tidemq.broker.proxy.protocol.service_pb2",
)


def compiled_modules(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """The names of the compiled modules pyproject.toml builds."""
    table = tomllib.loads(pyproject.read_text())
    return [str(ext["name"]) for ext in table["tool"]["setuptools"]["ext-modules"]]


def missing_modules(wheel: Path) -> list[str]:
    """One line per module a release wheel should hold and `wheel` lacks."""
    names = zipfile.ZipFile(wheel).namelist()
    missing = []
    for module in compiled_modules():
        stem = module.replace(".", "/")
        if not any(n.startswith(f"{stem}.") and n.endswith(".so") for n in names):
            missing.append(f"{module}: not compiled (no C compiler at build time?)")
    for module in PROTOCOL_MODULES:
        if f"{module.replace('.', '/')}.py" not in names:
            missing.append(f"{module}: not generated (run `make protocol` before building)")
    return missing


def main(argv: list[str]) -> int:
    problems = [f"{wheel}: {line}" for wheel in argv for line in missing_modules(Path(wheel))]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
