"""A release as deploy/README.md installs it, away from the checkout.

`make dist` builds the sdist and the wheel; the wheel is installed with pip (its dependencies
from the package index) into a fresh virtual environment under a temporary prefix that stands
for the machine's root: PREFIX/opt/tidemq is the environment, PREFIX/etc/tidemq the
configuration, PREFIX/var/lib/tidemq the state directory; the environment is made with the
system's Python (/usr/bin/python3), which every user may run. Each console script runs from
there with the checkout out of reach (another working directory, no PYTHONPATH).

Then the systemd units of deploy/systemd run as systemd would run them: their ExecStart lines
(the paths moved under PREFIX), as their User (here `nobody`, a user of every Linux system:
the units' `tidemq` user is made at install time) through setpriv, with their WorkingDirectory
and Environment, the state directory owned by that user as StateDirectory= makes it. The name
server and the broker come up, the broker registers, a message is stored and both stop
cleanly on SIGTERM. The prefix is world-readable, as /opt is; the checkout may lie anywhere.
What this cannot see: systemd itself (its sandboxing, Restart=, the [Install] section).
"""

from __future__ import annotations

import configparser
import os
import shutil
import signal
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.conditions import eventually_sync
from tests.support.processes import REPO_ROOT, free_port
from tests.support.release import compiled_modules, missing_modules
from tests.support.speedups_twins import COMPILED_MODULES

# make dist and a pip install of every dependency: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

NOBODY = 65534
UNITS = REPO_ROOT / "deploy" / "systemd"
SCRIPTS = ("namesrvd", "brokerd", "mqadmin", "tidemq-cluster", "tidemq-ingest", "tidemq-dashboard")


@dataclass(frozen=True)
class Release:
    prefix: Path
    wheel: Path
    sdist: Path

    @property
    def venv(self) -> Path:
        return self.prefix / "opt" / "tidemq"

    def moved(self, text: str) -> str:
        """A unit's path under the prefix."""
        for root in ("/opt/tidemq", "/etc/tidemq", "/var/lib/tidemq"):
            text = text.replace(root, f"{self.prefix}{root}")
        return text


def reachable_by_everyone(path: Path) -> bool:
    """Every folder on the way searchable, the file executable, by any user."""
    real = path.resolve()
    return all(folder.stat().st_mode & 0o001 for folder in real.parents) and bool(
        real.stat().st_mode & 0o001
    )


def system_python() -> str:
    """The system's Python 3.11+ that any user may run (Debian's /usr/bin/python3)."""
    for candidate in (Path("/usr/bin/python3"), Path("/usr/local/bin/python3")):
        if not candidate.exists() or not reachable_by_everyone(candidate):
            continue
        version = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info >= (3, 11))"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if version == "True":
            return str(candidate)
    pytest.fail("no Python 3.11+ every user may run (/usr/bin/python3): the units need one")


@pytest.fixture(scope="module")
def release() -> Iterator[Release]:
    prefix = Path(tempfile.mkdtemp(prefix="tidemq-release-"))
    prefix.chmod(0o755)  # as / is: every user reaches /opt/tidemq
    try:
        dist = prefix / "dist"
        subprocess.run(
            ["make", "-s", "--no-print-directory", "dist", f"DIST={dist}"],
            cwd=REPO_ROOT,
            check=True,
            timeout=900,
        )
        (wheel,) = dist.glob("tidemq-*.whl")
        (sdist,) = dist.glob("tidemq-*.tar.gz")
        found = Release(prefix, wheel, sdist)
        venv = found.venv
        venv.parent.mkdir(parents=True)
        # The units' user runs this interpreter: one every user can execute (a venv links to
        # its base interpreter, and pyenv's under root's 0700 home is not one).
        subprocess.run([system_python(), "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [venv / "bin" / "python", "-m", "pip", "install", "-q", str(wheel)],
            check=True,
            timeout=900,
            cwd=prefix,
        )
        yield found
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def outside_env(home: Path) -> dict[str, str]:
    """What a unit's process has: no PYTHONPATH, no virtual environment of the checkout."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def test_make_dist_builds_an_sdist_and_a_wheel_with_the_compiled_modules(
    release: Release,
) -> None:
    assert missing_modules(release.wheel) == []
    assert len(compiled_modules()) == len(COMPILED_MODULES)
    assert release.sdist.name == "tidemq-0.1.0.tar.gz"


def test_the_wheel_holds_one_top_level_name_its_assets_and_typed_compiled_modules(
    release: Release,
) -> None:
    """`pip install` puts one new top-level import name into an environment: `tidemq`; the
    wheel (built from the sdist, which holds the .pyx and .pxi files but no generated .c) carries
    the Spark source, the dashboard's assets, py.typed, and each compiled module with its .pyi."""
    with zipfile.ZipFile(release.wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"tidemq"}
    assert "tidemq/client/spark/source.py" in names
    assert "tidemq/py.typed" in names
    for asset in ("index.html", "app.js", "app.css", "chart.js"):
        assert f"tidemq/client/dashboard/static/{asset}" in names, asset
    for module in COMPILED_MODULES:
        stem = module.replace(".", "/")
        assert f"{stem}.pyi" in names, module
        assert any(n.startswith(f"{stem}.") and n.endswith(".so") for n in names), module


def test_the_wheel_runs_from_a_fresh_environment_outside_the_checkout(release: Release) -> None:
    bin_dir = release.venv / "bin"
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
    where, old_names = subprocess.run(
        [bin_dir / "python", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=release.prefix,
        env=outside_env(release.prefix),
    ).stdout.splitlines()
    assert where.startswith(str(release.venv)), where
    assert old_names == "[]"
    for script in SCRIPTS:
        if script == "tidemq-ingest":
            continue  # the spark extra: below
        done = subprocess.run(
            [bin_dir / script, "--help"],
            capture_output=True,
            text=True,
            cwd=release.prefix,
            env=outside_env(release.prefix),
            timeout=120,
        )
        assert done.returncode == 0, f"{script}: {done.stderr}"
        assert f"Usage: {script}" in done.stdout, done.stdout
    # Without the spark extra (not installed here), one line saying what to install.
    ingest = subprocess.run(
        [bin_dir / "tidemq-ingest", "--help"],
        capture_output=True,
        text=True,
        cwd=release.prefix,
        env=outside_env(release.prefix),
    )
    assert ingest.returncode == 1
    assert ingest.stderr.splitlines() == [
        "tidemq-ingest: needs pyspark and pyarrow, the `spark` extra of tidemq: "
        "pip install 'tidemq[spark]' (and Java 17)"
    ]


def unit_service(name: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return dict(parser["Service"])


def start_as_unit(
    release: Release, unit: dict[str, str], instance: str, uid: int, log: Path
) -> subprocess.Popen[bytes]:
    """The unit's ExecStart (with %i), as its User, in its WorkingDirectory and Environment."""
    command = release.moved(unit["ExecStart"].replace("%i", instance)).split()
    env = outside_env(Path(release.moved(unit["WorkingDirectory"])))
    key, _, value = unit["Environment"].partition("=")
    env[key] = release.moved(value)
    with log.open("wb") as out:
        return subprocess.Popen(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=release.moved(unit["WorkingDirectory"]),
            env=env,
        )


def stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    return process.returncode


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another user (setpriv) needs root")
def test_the_units_run_namesrvd_and_brokerd_as_a_non_root_user(release: Release) -> None:
    namesrv_unit = unit_service("tidemq-namesrvd.service")
    broker_unit = unit_service("tidemq-brokerd@.service")
    # What the units' user executes: the environment's interpreter and what it links to.
    assert reachable_by_everyone(release.venv / "bin" / "python")
    for unit in (namesrv_unit, broker_unit):
        assert unit["User"] == "tidemq" and unit["Group"] == "tidemq"
        assert unit["ExecStart"].startswith("/opt/tidemq/bin/")
        assert unit["StateDirectory"] == "tidemq"
    etc = release.prefix / "etc" / "tidemq"
    etc.mkdir(parents=True)
    state = Path(release.moved("/var/lib/tidemq"))
    state.mkdir(parents=True)
    os.chown(state, NOBODY, NOBODY)  # StateDirectory=tidemq: made, owned by the unit's user
    namesrv_port, broker_port = free_port(), free_port()
    namesrv = f"127.0.0.1:{namesrv_port}"
    (etc / "namesrv.properties").write_text(f"listenPort={namesrv_port}\n")
    (etc / "broker-a.properties").write_text(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        f"brokerRole=ASYNC_MASTER\nnamesrvAddr={namesrv}\nbrokerIP1=127.0.0.1\n"
        f"listenPort={broker_port}\nhaListenPort={free_port()}\ngrpcServerPort={free_port()}\n"
        f"storePathRootDir={state}/broker-a\n"
        # deploy/local's laptop-sized store files
        "mappedFileSizeCommitLog=67108864\nmappedFileSizeConsumeQueue=600000\n"
        "maxHashSlotNum=500000\nmaxIndexNum=2000000\n"
    )
    logs = release.prefix / "logs"
    logs.mkdir()
    mqadmin = [release.venv / "bin" / "mqadmin"]
    processes = []
    try:
        processes.append(start_as_unit(release, namesrv_unit, "", NOBODY, logs / "namesrvd.log"))
        processes.append(
            start_as_unit(release, broker_unit, "broker-a", NOBODY, logs / "brokerd.log")
        )

        def registered() -> bool:
            for process in processes:
                assert process.poll() is None, (logs / "brokerd.log").read_text()
            listed = subprocess.run(
                [*mqadmin, "clusterList", "-n", namesrv],
                capture_output=True,
                text=True,
                env=outside_env(release.prefix),
            )
            return listed.returncode == 0 and "broker-a" in listed.stdout

        eventually_sync(registered, "broker-a registered with the name server", 120)
        for process in processes:
            owner = (Path("/proc") / str(process.pid) / "status").read_text()
            assert f"Uid:\t{NOBODY}\t{NOBODY}" in owner  # setpriv execs: the daemon itself
        made = subprocess.run(
            [*mqadmin, "updateTopic", "-n", namesrv, "-b", f"127.0.0.1:{broker_port}",
             "-t", "ReleaseTopic"],
            capture_output=True, text=True, env=outside_env(release.prefix), timeout=60,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        answers: list[str] = []

        def stored() -> bool:  # once the broker's next registration carries the topic's route
            sent = subprocess.run(
                [*mqadmin, "sendMessage", "-n", namesrv, "-t", "ReleaseTopic", "-p", "hello"],
                capture_output=True, text=True, env=outside_env(release.prefix), timeout=60,
            )  # fmt: skip
            answers.append(sent.stdout + sent.stderr)
            return sent.returncode == 0 and "SEND_OK" in sent.stdout

        try:
            eventually_sync(stored, "a message stored", 60, interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; mqadmin answered {answers[-1:]}") from None
    finally:
        codes = [stop(process) for process in reversed(processes)]
    assert codes == [0, 0], [p.read_text()[-2000:] for p in logs.iterdir()]
    commitlog = state / "broker-a" / "commitlog"
    assert {f.stat().st_uid for f in commitlog.iterdir()} == {NOBODY}
