"""`pip install .` puts one new top-level import name into an environment: `tidemq`.

The wheel carries the compiled tier (store/_hashing.pyx and its siblings, one module per
subsystem, built by the package build from the .pyx and .pxi files alone: the copied sources
leave out the work tree's generated .c and .so), and the installed package runs it.

The wheel is built from a copy of the sources (so the work tree gets no build/ or egg-info) and
installed without its dependencies into a fresh virtual environment, which reaches them through
a path entry to this environment's site-packages (a path entry only: this environment's editable
finder is not installed there, so nothing of the repository can leak in).

`make install-run` (what `make run` installs first) is run in a copy of the sources as a
newcomer's clone would: a fresh .venv with tidemq and its dependencies and none of the dev or
spark extras, and progress lines on the terminal while pip works.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.speedups_twins import COMPILED_MODULES

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "store", "ha", "client", "broker")
SCRIPTS = ("namesrvd", "brokerd", "mqadmin", "tidemq-cluster", "tidemq-ingest", "tidemq-dashboard")


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


def _build_wheel(tmp_path: Path) -> Path:
    source = _copy_sources(tmp_path)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("tidemq-*.whl")
    return wheel


def test_the_wheel_and_a_fresh_environment_hold_only_tidemq(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
        assert "tidemq/client/spark/source.py" in archive.namelist()
        assert "tidemq/py.typed" in archive.namelist()
        for asset in ("index.html", "app.js", "app.css", "chart.js"):
            assert f"tidemq/client/dashboard/static/{asset}" in archive.namelist(), asset
        for module in COMPILED_MODULES:
            stem = module.replace(".", "/")
            assert f"{stem}.pyi" in archive.namelist(), module
            built = [n for n in archive.namelist() if n.startswith(f"{stem}.")]
            assert any(n.endswith(".so") for n in built), built
    assert {top for top in tops if not top.endswith(".dist-info")} == {"tidemq"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True, timeout=300
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    probe = (
        "import importlib, importlib.util as u, tidemq\n"
        "from tidemq import Producer, PushConsumer, Message\n"
        "import tidemq.broker.daemons.brokerd, tidemq.ha.master, tidemq.store.message_store\n"
        "from tidemq.store import _hashing, index\n"
        "assert index.prefixed_key_hash is _hashing.prefixed_key_hash\n"
        f"for name in {COMPILED_MODULES!r}:\n"
        "    assert importlib.import_module(name).__file__.startswith(tidemq.__path__[0]), name\n"
        "from tidemq.client.dashboard.server import static_dir\n"
        "assert (static_dir() / 'index.html').is_file(), static_dir()\n"
        "assert str(static_dir()).startswith(tidemq.__path__[0])\n"
        "print(tidemq.__file__)\n"
        "print(sorted(n for n in ('client', 'store', 'broker', 'ha') if u.find_spec(n)))\n"
    )
    run = subprocess.run(
        [python, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    installed, old_names = run.stdout.splitlines()
    assert installed.startswith(purelib)
    assert old_names == "[]"
    for script in SCRIPTS:
        assert (venv / "bin" / script).is_file(), script
    help_text = subprocess.run(
        [venv / "bin" / "brokerd", "--help"], check=True, capture_output=True, text=True
    ).stdout
    assert "Usage: brokerd" in help_text


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
