"""Real daemons for integration tests: free ports, start, wait for the port, stop, kill.

`Daemon(args, port=..., log_path=...)` runs a command with stdout and stderr going to a log file,
and `start()` returns once its TCP port on 127.0.0.1 accepts connections (and, given a
`ready_text`, once that appeared in its log: a broker is started when it logged its boot, its
first registration done); if the process exits first, or it is not ready within
`start_timeout`, it is killed and `DaemonError` carries the end of its log. `stop()` sends
SIGTERM and waits, then SIGKILLs after `timeout`; `kill()` SIGKILLs. Both return the exit status
(negative: the signal). A `Daemon` is a context manager, and every daemon still running when the
interpreter exits is killed, so a test run never leaves processes behind.

`ProcessGroup` owns the daemons one test starts (`namesrvd(...)` builds and starts a name server
on a free port with bindAddress=127.0.0.1) and stops them all in `stop_all()`, which the
fixtures call even when the test failed.
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Self

__all__ = [
    "LOOPBACK",
    "RESERVED_PORTS",
    "Daemon",
    "DaemonError",
    "ProcessGroup",
    "brokerd_command",
    "free_port",
    "namesrvd_command",
    "port_open",
]

LOOPBACK: Final = "127.0.0.1"
# RocketMQ's defaults: a developer may have a real name server or broker running on them.
RESERVED_PORTS: Final = frozenset({9876, 10911, 10912})
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
# What brokerd logs once it has started every part, its first registration included.
BROKER_BOOTED: Final = ") boot success at "

# A bound, not a target: a daemon that exits is seen at once; one starting on a loaded machine
# (two test workers, builds beside them) took over 15 s to import.
START_TIMEOUT: Final = 60.0

_running: set[Daemon] = set()


def free_port(host: str = LOOPBACK, span: int = 1) -> int:
    """A TCP port nothing listens on right now, never one of RocketMQ's, never handed out twice
    (with `span`, the first of that many such ports in a row).

    Taken below the kernel's ephemeral range: a port from `bind(0)` comes from that range, the
    one outgoing connections take their source ports from, so between the pick and a daemon's
    bind a connection could take it ("address already in use"; seen with a slave started
    after its masters had connected out). Below the range only a listener can take a port.
    Under pytest-xdist each worker picks from its own slice of that range: two tests running
    at once never pick the same port.
    """
    low, high = _pick_range()
    if high - low < 100:
        if span != 1:
            raise RuntimeError(f"no room for {span} ports in a row below the ephemeral range")
        return _bound_port(host)
    for _ in range(200):
        port = _random.randrange(low, high - span + 1)
        ports = range(port, port + span)
        if any(p in RESERVED_PORTS or p in _handed_out for p in ports):
            continue
        if all(_bindable(host, p) for p in ports):
            _handed_out.update(ports)
            return port
    raise RuntimeError("no free port found")


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _bound_port(host: str) -> int:
    """The last resort of a machine whose ephemeral range starts low: a port from bind(0)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port: int = probe.getsockname()[1]
        if port not in RESERVED_PORTS and port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port found")


def _pick_range() -> tuple[int, int]:
    """[low, high) this process picks ports from: its xdist worker's slice of [20000, the
    ephemeral range)."""
    low, high = _PICK_FROM, _ephemeral_range()[0]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and workers > 1:
        index = int(worker[2:])
        width = (high - low) // workers
        low, high = low + index * width, low + (index + 1) * width
    return low, high


_PICK_FROM: Final = 20000
_random = random.Random()
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class DaemonError(RuntimeError):
    """A daemon did not start (its log's tail is in the message)."""


class Daemon:
    def __init__(
        self,
        args: Sequence[str],
        *,
        port: int,
        log_path: Path,
        host: str = LOOPBACK,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = START_TIMEOUT,
        ready_text: str | None = None,
    ) -> None:
        """`ready_text`: started means this also appeared in the log, after the port opened."""
        self.args = list(args)
        self.port = port
        self.host = host
        self.log_path = log_path
        self.name = name or Path(self.args[0]).name
        self.env = dict(os.environ if env is None else env)
        self.start_timeout = start_timeout
        self.ready_text = ready_text
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0  # the log is appended to: what this start wrote begins here

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Self:
        if self.process is not None:
            raise DaemonError(f"{self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        self.process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=REPO_ROOT,
        )
        _running.add(self)
        try:
            self._wait_listening()
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            code = self.returncode
            if code is not None:
                raise DaemonError(
                    f"{self.name} exited with status {code} before listening on "
                    f"{self.address}; log {self.log_path}:\n{self.log_tail()}"
                )
            if self.listening() and self._ready():
                return
            time.sleep(0.05)
        raise DaemonError(
            f"{self.name} did not listen on {self.address} within {self.start_timeout} s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def listening(self) -> bool:
        """Whether the daemon's port accepts connections (a subclass may look elsewhere)."""
        return port_open(self.host, self.port)

    def _ready(self) -> bool:
        if self.ready_text is None:
            return True
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return self.ready_text.encode() in log.read()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self._finish()

    def kill(self) -> int | None:
        """SIGKILL at once. Returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        return self._finish()

    def signal(self, sig: signal.Signals, timeout: float = 10.0) -> int | None:
        """Send `sig` and wait up to `timeout` for the process to exit (SIGKILL after)."""
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()
        return self._finish()

    def _finish(self) -> int | None:
        _running.discard(self)
        if self._log is not None:
            self._log.close()
            self._log = None
        return None if self.process is None else self.process.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self if self.process is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Daemon {self.name} {self.address} pid={self.pid} rc={self.returncode}>"


@atexit.register
def _kill_leftovers() -> None:
    for daemon in list(_running):
        daemon.kill()


def namesrvd_command(port: int, *overrides: str, config_file: Path | None = None) -> list[str]:
    """`python -m broker.namesrv` on 127.0.0.1:`port`, with `key=value` overrides."""
    args = [sys.executable, "-m", "tidemq.broker.namesrv"]
    if config_file is not None:
        args += ["-c", str(config_file)]
    return [*args, f"bindAddress={LOOPBACK}", f"listenPort={port}", *overrides]


# Small files so tests cross segment boundaries and never allocate 1 GiB sparse files.
TEST_STORE_OVERRIDES: Final = (
    "mappedFileSizeCommitLog=4194304",
    "mappedFileSizeConsumeQueue=6000",
    "maxHashSlotNum=5000",
    "maxIndexNum=20000",
    "maxMessageSize=1048576",
)


def brokerd_command(
    port: int, namesrv: str, store_dir: Path, *overrides: str, config_file: Path | None = None
) -> list[str]:
    """`python -m broker` on 127.0.0.1:`port` with its store in `store_dir`."""
    args = [sys.executable, "-m", "tidemq.broker"]
    if config_file is not None:
        args += ["-c", str(config_file)]
    return [
        *args,
        f"bindAddress={LOOPBACK}",
        f"brokerIP1={LOOPBACK}",
        f"listenPort={port}",
        f"haListenPort={free_port()}",
        f"grpcServerPort={free_port()}",
        f"namesrvAddr={namesrv}",
        f"storePathRootDir={store_dir}",
        "brokerName=broker-a",
        *TEST_STORE_OVERRIDES,
        *overrides,
    ]


class ProcessGroup:
    """The daemons of one test, logging under `log_dir`; `stop_all()` stops every one."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.daemons: list[Daemon] = []

    def start(
        self, args: Sequence[str], *, port: int, name: str, ready_text: str | None = None
    ) -> Daemon:
        daemon = Daemon(
            args,
            port=port,
            log_path=self.log_dir / f"{name}.log",
            name=name,
            ready_text=ready_text,
        )
        self.daemons.append(daemon)
        return daemon.start()

    def namesrvd(self, *overrides: str, name: str | None = None) -> Daemon:
        port = free_port()
        name = name or f"namesrvd-{len(self.daemons)}"
        return self.start(namesrvd_command(port, *overrides), port=port, name=name)

    def brokerd(
        self,
        namesrv: str,
        store_dir: Path,
        *overrides: str,
        port: int | None = None,
        name: str | None = None,
    ) -> Daemon:
        """A broker registered with `namesrv`; later `key=value` overrides win.

        Started means booted: the port opens before the broker first registers with its name
        servers, and a client asking for a route in between would find none.
        """
        port = port or free_port()
        name = name or f"brokerd-{len(self.daemons)}"
        return self.start(
            brokerd_command(port, namesrv, store_dir, *overrides),
            port=port,
            name=name,
            ready_text=BROKER_BOOTED,
        )

    def stop_all(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()
