"""Static tools resolve `tidemq.*` in the checkout: pyrightconfig.json points pyright (and
Pylance, which reads the same file) at the links `make install` puts in `.venv/typing` (the tree
mypy reads), so `tidemq.store.record` is store/record.py. Shown with basedpyright (PyPI; it
brings its own node, nothing is fetched at run time) on a module of each package, a test, and a
module that imports across packages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    "store/record.py",
    "store/common/accept.py",
    "ha/transport.py",
    "client/transport/connection.py",
    "client/consumer/push.py",
    "broker/remoting/server.py",
    "broker/daemons/brokerd.py",
    "tests/unit/test_producer_retries.py",
]


def _pyright() -> str:
    found = shutil.which("basedpyright", path=str(Path(sys.executable).parent))
    assert found, "basedpyright is in the dev extra: run make install"
    return found


def test_pyright_resolves_every_tidemq_import_in_the_checkout() -> None:
    assert (REPO_ROOT / ".venv/typing/tidemq/store").exists(), "make install makes the links"
    run = subprocess.run(
        [_pyright(), "--outputjson", *MODULES],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = json.loads(run.stdout)
    assert report["summary"]["filesAnalyzed"] == len(MODULES)
    problems = [
        f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert problems == []


def test_the_configuration_names_the_typing_links() -> None:
    config = json.loads((REPO_ROOT / "pyrightconfig.json").read_text())
    assert ".venv/typing" in config["extraPaths"]
