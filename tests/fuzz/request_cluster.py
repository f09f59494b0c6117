"""The daemons a request-fuzzing run attacks, in a sandbox where "outside the store" is visible.

Layout under `base` (a folder of the run's own)::

    base/                    watched: nothing may appear or vanish here
      victim/keep, 0/000..0  a folder the hostile absolute paths and `../` names point at
      run/                   watched too
        victim/keep
        logs/                the daemons' logs (not watched)
        sandbox/
          store-master/      the master's storePathRootDir (not watched: the broker's own)
          store-slave/       the slave's

A name server, a SYNC_MASTER and its SLAVE run on free ports (never RocketMQ's), started and
stopped through tests/support/processes.py; `stop()` stops every one, also after a failure.
`FileWatch` snapshots the watched folders and a few shared places (the daemons' working
directory, the user's home, /tmp: there only entries carrying the fuzzer's MARK count, other
processes write there) and says what appeared or vanished since.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.fuzz.request_values import MARK
from tests.support.ha_brokers import HA_TIMING
from tests.support.processes import REPO_ROOT, Daemon, ProcessGroup, brokerd_command, free_port

__all__ = ["FileWatch", "FuzzCluster"]

# brokerd overrides of the run: fast HA and slave synchronisation; small files (processes.py)
_BROKER_OVERRIDES: Final = (*HA_TIMING, "autoCreateTopicEnable=true")
# what pytest, hypothesis, mypy and ruff may create in the daemons' working directory meanwhile
_CWD_NOISE: Final = frozenset(
    {".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "__pycache__", "fuzz-crashes"}
)
# the sdist's staging folder `tidemq-<version>`, which `make dist` makes and removes there
# (tests/integration/test_release.py, maybe running beside: a finding "appeared" in one run)
_CWD_BUILD_PREFIX: Final = "tidemq-"


def _cwd_noise(name: str) -> bool:
    return name in _CWD_NOISE or name.startswith(_CWD_BUILD_PREFIX)


def _tree(root: Path, skip: frozenset[Path]) -> set[str]:
    found: set[str] = set()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if here / d not in skip]
        found.update(str(here / name) for name in (*dirs, *files))
    return found


def _listing(folder: Path) -> set[str]:
    try:
        return {str(folder / name) for name in os.listdir(folder)}
    except OSError:
        return set()


@dataclass
class FileWatch:
    base: Path
    skip: frozenset[Path]
    before: set[str] = field(default_factory=set)

    def snapshot(self) -> set[str]:
        now = _tree(self.base, self.skip)
        now |= {p for p in _listing(REPO_ROOT) if not _cwd_noise(Path(p).name)}
        shared = (Path.home(), Path(tempfile.gettempdir()), Path("/"))
        now |= {p for folder in shared for p in _listing(folder) if MARK in Path(p).name}
        return now

    def reset(self) -> None:
        self.before = self.snapshot()

    def changes(self) -> tuple[list[str], list[str]]:
        """(appeared, vanished) since the last `reset`."""
        now = self.snapshot()
        return sorted(now - self.before), sorted(self.before - now)


class FuzzCluster:
    """namesrvd, a SYNC_MASTER and a SLAVE over a sandboxed `base`."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.run = base / "run"
        self.master_store = self.run / "sandbox" / "store-master"
        self.slave_store = self.run / "sandbox" / "store-slave"
        self.logs = self.run / "logs"
        for victim in (base / "victim", self.run / "victim"):
            # shaped like a topic's ConsumeQueue folder, which is what a delete removes
            (victim / "0").mkdir(parents=True, exist_ok=True)
            (victim / "keep").write_text("must survive the run\n")
            (victim / "0" / "00000000000000000000").write_bytes(bytes(20))
        self.master_store.mkdir(parents=True, exist_ok=True)
        self.slave_store.mkdir(parents=True, exist_ok=True)
        self.watch = FileWatch(base, frozenset({self.master_store, self.slave_store, self.logs}))
        self.processes = ProcessGroup(self.logs)
        self.namesrv: Daemon | None = None
        self.master: Daemon | None = None
        self.slave: Daemon | None = None
        self._master_port = free_port()
        self._slave_port = free_port()
        self._master_ha = free_port()
        self._slave_ha = free_port()
        self._starts = 0

    @property
    def victims(self) -> list[str]:
        return [str(self.base / "victim"), str(self.run / "victim")]

    def start(self) -> None:
        self.namesrv = self.processes.namesrvd(name="namesrvd")
        self.start_brokers()
        self.watch.reset()

    def _broker(self, store: Path, port: int, ha: int, role: str, name: str) -> Daemon:
        assert self.namesrv is not None
        args = brokerd_command(
            port,
            self.namesrv.address,
            store,
            f"haListenPort={ha}",
            *_BROKER_OVERRIDES,
            *role.split(),
        )
        return self.processes.start(
            args, port=port, name=f"{name}-{self._starts}", ready_text=") boot success at "
        )

    def start_brokers(self) -> None:
        self._starts += 1
        self.master = self._broker(
            self.master_store, self._master_port, self._master_ha, "brokerRole=SYNC_MASTER",
            "master",
        )  # fmt: skip
        self.slave = self._broker(
            self.slave_store, self._slave_port, self._slave_ha, "brokerRole=SLAVE brokerId=1",
            "slave",
        )  # fmt: skip

    def stop_brokers(self) -> dict[str, int | None]:
        """SIGTERM the slave, then the master: {name: exit status}."""
        codes = {}
        for daemon in (self.slave, self.master):
            if daemon is not None:
                codes[daemon.name] = daemon.stop(timeout=20)
        return codes

    def dead(self) -> list[str]:
        """The daemons that should run and do not, with their exit status."""
        return [
            f"{d.name} exited with status {d.returncode}"
            for d in (self.namesrv, self.master, self.slave)
            if d is not None and not d.running
        ]

    def logs_text(self) -> dict[str, str]:
        return {d.name: d.log_text() for d in self.processes.daemons}

    def stop(self) -> None:
        self.processes.stop_all()
