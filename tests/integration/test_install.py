"""`make install-run` (what `make run` installs first) is run in a copy of the sources as a
newcomer's clone would: a fresh .venv with tidemq and its dependencies and none of the dev or
spark extras, and progress lines on the terminal while pip works. (What the wheel holds and
how it runs outside the checkout: tests/integration/test_release.py.)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "store", "ha", "client", "broker")


def _copy_sources(tmp_path: Path, names: tuple[str, ...] = SOURCES) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in names:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(
                path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.so")
            )
        else:
            shutil.copy(path, source / name)
    return source


@pytest.mark.slow
def test_make_run_installs_only_what_running_needs_and_shows_progress(tmp_path: Path) -> None:
    source = _copy_sources(tmp_path, (*SOURCES, "Makefile"))
    lines: list[str] = []
    shown_while_installing = 0
    with subprocess.Popen(
        ["make", "-s", "--no-print-directory", "install-run"],
        cwd=source,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as make:
        assert make.stdout is not None
        try:
            for line in make.stdout:
                lines.append(line.rstrip("\n"))
                if make.poll() is None and line.startswith("  Collecting "):
                    shown_while_installing += 1
            assert make.wait(timeout=900) == 0, "\n".join(lines)
        finally:
            if make.poll() is None:
                make.kill()
    assert lines[0] == "installing tidemq and what it runs on into .venv (log: .venv/install.log)"
    assert shown_while_installing >= 5, lines  # one line per package, as pip gets to it
    assert any(line.startswith("  Building editable for tidemq") for line in lines), lines
    python = source / ".venv" / "bin" / "python"
    probe = (
        "import importlib.util as u, tidemq.broker.daemons.cluster\n"
        "import tidemq.client.dashboard.server\n"
        "print(sorted(n for n in ('pytest', 'pyspark', 'pyarrow', 'selenium', 'mypy', 'ruff',"
        " 'hypothesis') if u.find_spec(n)))\n"
    )
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"
    help_text = subprocess.run(
        [source / ".venv" / "bin" / "tidemq-cluster", "run", "--help"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "--port-base" in help_text
