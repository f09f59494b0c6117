"""The local cluster launcher (`python -m tidemq.broker.daemons.cluster run ...`) as a test
fixture would use it.

`LaunchedCluster.start(topology, data_dir, overrides)` runs the launcher (or `make run`) in its
own session with its output in `data_dir/launcher.out`, and returns once it prints "cluster
ready" (every broker registered, every slave replicating); with `wait_ready=False` it returns at
once (a test of a launch that fails). Every process gets free ports (`choose_ports`, or the
ones given), passed as `-o NAME:key=value` overrides (etcd's too, for a topology that has
one). `interrupt()` sends SIGINT to the
launcher's process group, as a terminal's Ctrl-C does; `stop()` interrupts, waits, and kills
whatever is left (the launcher and the daemons it reported, restarted ones included), so a
failing test never leaves processes behind.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.support.processes import REPO_ROOT, TEST_STORE_OVERRIDES, free_port

DEPLOY: Final = REPO_ROOT / "deploy"
_STARTED = re.compile(r"started (\S+) \(pid (\d+), port (\d+)\)")


@dataclass
class Ports:
    listen: int
    ha: int
    metrics: int
    grpc: int = 0  # 0: the topology's own grpcServerPort


def choose_ports(topology: str) -> tuple[int, dict[str, Ports]]:
    """Free ports for the name server and each broker of a topology under deploy/."""
    names = sorted(p.stem for p in (DEPLOY / topology).glob("broker*.properties"))
    return free_port(), {
        n: Ports(free_port(), free_port(), free_port(), free_port()) for n in names
    }


@dataclass
class LaunchedCluster:
    process: subprocess.Popen[bytes]
    output_path: Path
    namesrv_port: int
    ports: dict[str, Ports]
    namesrv_metrics_port: int = 0
    dashboard_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name].listen}"

    def output(self) -> str:
        return self.output_path.read_text(encoding="utf-8", errors="replace")

    @classmethod
    def start(
        cls,
        topology: str,
        data_dir: Path,
        *overrides: str,
        timeout: float = 90.0,
        via_make: bool = False,
        launcher_args: tuple[str, ...] = (),
        ports: tuple[int, dict[str, Ports]] | None = None,
        wait_ready: bool = True,
    ) -> LaunchedCluster:
        """`via_make`: run `make run RUN_ARGS=...` (topology `local`) instead of the module;
        `launcher_args`: more options of `run` (e.g. `--restart`)."""
        folder = DEPLOY / topology
        namesrv_port, ports = ports or choose_ports(topology)
        namesrv_metrics_port = free_port()
        dashboard_port = free_port()
        args = [
            sys.executable,
            "-m",
            "tidemq.broker.daemons.cluster",
            "run",
            str(folder),
            "--data",
            str(data_dir),
            "--interval",
            "1",
            "--dashboard-port",
            str(dashboard_port),
            *launcher_args,
            "-o",
            f"namesrv:listenPort={namesrv_port}",
            "-o",
            "namesrv:bindAddress=127.0.0.1",
            "-o",
            f"namesrv:metricsPort={namesrv_metrics_port}",
        ]
        if (folder / "etcd.properties").exists():  # a controller-mode topology
            args += ["-o", f"etcd:clientPort={free_port()}", "-o", f"etcd:peerPort={free_port()}"]
        for name, p in ports.items():
            args += ["-o", f"{name}:listenPort={p.listen}", "-o", f"{name}:haListenPort={p.ha}"]
            args += ["-o", f"{name}:metricsPort={p.metrics}"]
            if p.grpc:
                args += ["-o", f"{name}:grpcServerPort={p.grpc}"]
        for item in (*TEST_STORE_OVERRIDES, "bindAddress=127.0.0.1", *overrides):
            args += ["-o", f"all:{item}"]
        if via_make:
            assert topology == "local", "make run runs the local topology"
            args = ["make", "-s", "--no-print-directory", "run", f"RUN_ARGS={shlex.join(args[5:])}"]
        data_dir.mkdir(parents=True, exist_ok=True)
        output_path = data_dir / "launcher.out"
        with output_path.open("wb") as out:
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                start_new_session=True,
            )
        cluster = cls(
            process, output_path, namesrv_port, ports, namesrv_metrics_port, dashboard_port
        )
        if not wait_ready:
            return cluster
        try:
            cluster._wait_ready(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def refresh_pids(self) -> dict[str, int]:
        """The pids the launcher reported, the latest start of each name (after a restart)."""
        self.pids = {m[1]: int(m[2]) for m in _STARTED.finditer(self.output())}
        return self.pids

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output()
            self.pids = {m[1]: int(m[2]) for m in _STARTED.finditer(text)}
            if "cluster ready" in text:
                return
            if self.process.poll() is not None:
                raise AssertionError(f"launcher exited {self.process.returncode}:\n{text}")
            time.sleep(0.1)
        raise AssertionError(f"launcher not ready within {timeout} s:\n{self.output()}")

    def interrupt(self) -> None:
        """Ctrl-C in a terminal: SIGINT to the launcher's process group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.process.poll() is None:
            self.interrupt()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in self.refresh_pids().values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        return self.process.returncode


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def children_of(pid: int) -> set[int]:
    """Every process whose parent is `pid` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.add(int(entry))
    return found


def index_workers_of(pid: int) -> set[int]:
    """The children of `pid` that run the store's index worker (store/index_worker.py)."""
    found = set()
    for child in children_of(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"tidemq.store.index_worker" in cmdline.read():
                    found.add(child)
        except FileNotFoundError:
            continue
    return found
