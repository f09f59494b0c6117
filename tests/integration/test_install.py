"""`pip install .` puts one new top-level import name into an environment: `tidemq`.

The wheel carries the compiled tier (store/_hashing.pyx and its siblings, one module per
subsystem, built by the package build from the .pyx and .pxi files alone: the copied sources
leave out the work tree's generated .c and .so), and the installed package runs it.

The wheel is built from a copy of the sources (so the work tree gets no build/ or egg-info) and
installed without its dependencies into a fresh virtual environment, which reaches them through
a path entry to this environment's site-packages (a path entry only: this environment's editable
finder is not installed there, so nothing of the repository can leak in).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.support.speedups_twins import COMPILED_MODULES

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "store", "ha", "client", "broker")
SCRIPTS = ("namesrvd", "brokerd", "mqadmin", "tidemq-cluster", "tidemq-ingest", "tidemq-dashboard")


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(
                path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.so")
            )
        else:
            shutil.copy(path, source / name)
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
