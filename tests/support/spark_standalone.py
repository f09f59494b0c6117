"""A Spark standalone cluster from the installed pyspark: one master and one worker process.

`SparkStandalone(root).start()` runs `bin/spark-class org.apache.spark.deploy.master.Master` and
`...deploy.worker.Worker` of the pyspark package (its jars are the whole Spark distribution the
two need; nothing is downloaded) as `Daemon`s on 127.0.0.1, each on free ports (master RPC and
web UI, worker RPC and web UI), and returns once the master's status page
(`http://127.0.0.1:<ui>/json`, a JSON object with `aliveworkers` and a `workers` list whose
entries carry `id`, `state`, `cores`, `memory`) lists the worker as ALIVE. `master_url` is then
`spark://127.0.0.1:<port>`, for a driver's `SparkSession.builder.master(...)`.

`stop()` stops the worker (which kills the executors it launched), then the master, and kills
any executor process still left (an executor JVM and its Python workers are children of the
worker); it is safe to call after a failed start, and more than once. Under `root`: `logs/`
(one log per daemon) and `work/` (the worker's directory: one folder per application, with each
executor's stdout and stderr, the first place to look when a task failed).

Sizes for a 2-core machine: the worker offers CORES cores and WORKER_MEMORY; each application's
executors ask for EXECUTOR_MEMORY (`driver_conf()`), so two small applications fit at once when
each caps its cores (`spark.cores.max`). The daemons' JVMs start fast (C1 only, serial GC).

The worker gets PYTHONPATH=<repository> (executors inherit the worker's environment, not the
driver's): a test's or a bench's own data source classes are pickled by reference to their
module under `tests`, and executors must import them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from tests.support.conditions import eventually_sync
from tests.support.processes import LOOPBACK, REPO_ROOT, Daemon, free_port

__all__ = ["EXECUTOR_MEMORY", "SparkStandalone", "spark_home"]

CORES: Final = 2
WORKER_MEMORY: Final = "3g"
EXECUTOR_MEMORY: Final = "1g"
DAEMON_JAVA_OPTS: Final = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
START_TIMEOUT: Final = 60.0


def spark_home() -> Path:
    """The installed pyspark package: its bin/ and jars/ are a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    """A master and a worker on loopback; `start()`, `master_url`, `stop()` (or `with`)."""

    def __init__(
        self,
        root: Path,
        *,
        cores: int = CORES,
        memory: str = WORKER_MEMORY,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.root = root
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.port = free_port()
        self.ui_port = free_port()
        self.master: Daemon | None = None
        self.worker: Daemon | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ui_port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_MASTER_HOST=LOOPBACK,
            SPARK_PUBLIC_DNS=LOOPBACK,
            SPARK_DAEMON_MEMORY="512m",
            SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTS,
            # No conf dir of the machine's Spark (if any): the defaults, and our arguments.
            SPARK_CONF_DIR=str(self.root / "conf"),
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
            PYTHONPATH=os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        )
        return env

    def _daemon(self, main_class: str, args: list[str], port: int, name: str) -> Daemon:
        command = [str(spark_home() / "bin" / "spark-class"), main_class, *args]
        return Daemon(
            command,
            port=port,
            log_path=self.root / "logs" / f"{name}.log",
            name=name,
            env=self._env(),
            start_timeout=self.start_timeout,
        )

    def start(self) -> Self:
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        work = self.root / "work"
        work.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._daemon(
                "org.apache.spark.deploy.master.Master",
                ["--host", LOOPBACK, "--port", str(self.port), "--webui-port", str(self.ui_port)],
                self.port,
                "spark-master",
            ).start()
            worker_port = free_port()
            self.worker = self._daemon(
                "org.apache.spark.deploy.worker.Worker",
                [
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(worker_port),
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(work),
                    self.master_url,
                ],
                worker_port,
                "spark-worker",
            ).start()
            eventually_sync(self._worker_alive, "the Spark worker to register", self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications, cores, memory)."""
        with urllib.request.urlopen(f"{self.ui_url}/json", timeout=5) as answer:
            status: dict[str, Any] = json.load(answer)
            return status

    def _worker_alive(self) -> bool:
        for daemon in (self.master, self.worker):
            if daemon is not None and not daemon.running:
                raise AssertionError(
                    f"{daemon.name} exited ({daemon.returncode}); log {daemon.log_path}:\n"
                    f"{daemon.log_tail()}"
                )
        try:
            status = self.status()
        except (OSError, urllib.error.URLError, ValueError):
            return False  # the UI starts after the RPC port
        return any(w.get("state") == "ALIVE" for w in status.get("workers", []))

    def driver_conf(self, *, fast_start: bool = True) -> dict[str, str]:
        """Spark settings for a driver of this cluster (client mode, on loopback).

        `fast_start`: executor JVMs that start fast and stay slower (C1 only), for tests.
        """
        conf = {
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.executor.memory": EXECUTOR_MEMORY,
            # Executors inherit the worker's environment; this adds to it.
            "spark.executorEnv.PYTHONPATH": self._env()["PYTHONPATH"],
        }
        if fast_start:
            conf["spark.executor.extraJavaOptions"] = DAEMON_JAVA_OPTS
        return conf

    def executor_pids(self) -> list[int]:
        """Processes the worker started (executor JVMs and their Python workers), any depth."""
        if self.worker is None or self.worker.pid is None or not self.worker.running:
            return []
        return _descendants(self.worker.pid)

    def stop(self) -> None:
        left = self.executor_pids()
        for daemon in (self.worker, self.master):
            if daemon is not None:
                daemon.stop(timeout=20)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Self:
        return self if self.master is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(stat[1])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out
