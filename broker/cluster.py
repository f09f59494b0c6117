"""`tidemq-cluster`: run a whole topology on this machine, in the foreground, until Ctrl-C.

`tidemq-cluster run TOPOLOGY` reads a topology folder — `namesrv.properties` and one
`broker-*.properties` per broker, RocketMQ's sample layout — starts the name server, then the
masters, then the slaves (each `python -m broker.namesrv` / `python -m broker` with the file and
`namesrvAddr`/`storePathRootDir` filled in), waits until every broker is registered and every
slave replicates, then prints a status line (TPS in and out over all masters, each slave's HA
lag) until SIGINT or SIGTERM. Then it stops the slaves, the masters and the name server, in that
order (SIGTERM, SIGKILL after `STOP_TIMEOUT`), and exits 0; a second signal kills them at once.
If a daemon exits on its own, the others are stopped and the exit status is 1.

A topology with an `etcd.properties` (tidemq-cluster's own keys: `clientPort`, 2379, and
`peerPort`, 2380) runs its brokers in controller mode (issue 16): the launcher starts a
single-member etcd first (Debian's `etcd`, data in `DIR/etcd`; missing, it says how to install
it), fills in each broker's `controllerAddr`, and stops etcd last.

TOPOLOGY is a folder, or the name of one under the repository's `deploy/` (single,
2m-noslave, 2m-2s-async, 2m-2s-sync, local, controller). `--data DIR` holds the stores
(`DIR/<file stem>`) and every process's log (`DIR/logs/<file stem>.log`). `-o STEM:key=value`
overrides a key for one process (`namesrv`, `broker-a`, `etcd`, ...) and `-o all:key=value` for
every broker, so a test can run a topology on free ports.

The daemons run in their own sessions (a terminal's Ctrl-C reaches only the launcher, which
stops them in order) and on Linux are told to terminate if the launcher dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

import click

from tidemq.broker.config import DEFAULT_BROKER_PORT, DEFAULT_NAMESRV_PORT
from tidemq.client.admin import AdminClient
from tidemq.client.errors import TideMQError
from tidemq.store.errors import ConfigError
from tidemq.store.lifecycle import cancel_and_wait
from tidemq.store.properties import load_properties

__all__ = ["ClusterError", "Launcher", "Process", "Topology", "load_topology", "main"]

log = logging.getLogger(__name__)

DEPLOY_DIR: Final = Path(__file__).resolve().parents[1] / "deploy"
DEFAULT_ETCD_CLIENT_PORT: Final = 2379
DEFAULT_ETCD_PEER_PORT: Final = 2380
STOP_TIMEOUT: Final = 30.0
PR_SET_PDEATHSIG: Final = 1


class ClusterError(Exception):
    """The topology cannot be run (bad folder, a daemon that does not come up)."""


@dataclasses.dataclass(slots=True)
class Process:
    """One daemon of the topology: its name (file stem), command line and effective keys."""

    name: str
    args: list[str]
    props: dict[str, str]
    is_namesrv: bool = False
    is_etcd: bool = False
    process: asyncio.subprocess.Process | None = None
    log_file: IO[bytes] | None = None

    @property
    def port(self) -> int:
        if self.is_etcd:
            return int(self.props.get("clientPort", DEFAULT_ETCD_CLIENT_PORT))
        default = DEFAULT_NAMESRV_PORT if self.is_namesrv else DEFAULT_BROKER_PORT
        return int(self.props.get("listenPort", default))

    @property
    def controller_mode(self) -> bool:
        return self.props.get("enableControllerMode", "false").strip().lower() == "true"

    @property
    def is_slave(self) -> bool:
        return self.props.get("brokerRole", "ASYNC_MASTER").upper() == "SLAVE"

    @property
    def broker_name(self) -> str:
        return self.props.get("brokerName", self.name)

    @property
    def broker_id(self) -> int:
        if self.is_slave or self.controller_mode:
            return int(self.props.get("brokerId", "0"))
        return 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclasses.dataclass(slots=True)
class Topology:
    folder: Path
    namesrv: Process
    brokers: list[Process]
    etcd: Process | None = None

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    @property
    def processes(self) -> list[Process]:
        """Start order: etcd, the name server, the masters, then the slaves."""
        masters = [b for b in self.brokers if not b.is_slave]
        slaves = [b for b in self.brokers if b.is_slave]
        first = [self.etcd] if self.etcd is not None else []
        return [*first, self.namesrv, *masters, *slaves]


def find_topology(name: str) -> Path:
    for candidate in (Path(name), DEPLOY_DIR / name, Path.cwd() / "deploy" / name):
        if candidate.is_dir():
            return candidate
    known = (
        sorted(p.name for p in DEPLOY_DIR.iterdir() if p.is_dir()) if DEPLOY_DIR.is_dir() else []
    )
    raise ClusterError(
        f"no topology {name!r}: give a folder or one of {', '.join(known) or '(none found)'}"
    )


def parse_override(text: str) -> tuple[str, str, str]:
    target, sep, assignment = text.partition(":")
    key, eq, value = assignment.partition("=")
    if not sep or not eq or not target or not key.strip():
        raise ClusterError(f"override {text!r} is not NAME:key=value")
    return target, key.strip(), value.strip()


def load_topology(folder: Path, data_dir: Path, overrides: Sequence[str] = ()) -> Topology:
    """The processes of a topology folder with their command lines (ConfigError, ClusterError)."""
    parsed = [parse_override(o) for o in overrides]
    namesrv_file = folder / "namesrv.properties"
    broker_files = sorted(folder.glob("broker*.properties"))
    if not broker_files:
        raise ClusterError(f"{folder}: no broker*.properties file")
    etcd_file = folder / "etcd.properties"
    names = {"namesrv", "all", *(f.stem for f in broker_files)}
    if etcd_file.exists():
        names.add("etcd")
    for target, _, _ in parsed:
        if target not in names:
            raise ClusterError(f"override for unknown process {target!r} (known: {sorted(names)})")

    def props_of(file: Path | None, stem: str, is_broker: bool) -> tuple[dict[str, str], list[str]]:
        props = load_properties(file) if file is not None and file.exists() else {}
        extra = [
            f"{k}={v}"
            for target, k, v in parsed
            if target == stem or (is_broker and target == "all")
        ]
        for item in extra:
            key, _, value = item.partition("=")
            props[key] = value
        return props, extra

    ns_props, ns_extra = props_of(namesrv_file, "namesrv", False)
    ns_args = [sys.executable, "-m", "tidemq.broker.namesrv"]
    if namesrv_file.exists():
        ns_args += ["-c", str(namesrv_file)]
    namesrv = Process("namesrv", [*ns_args, *ns_extra], ns_props, is_namesrv=True)
    namesrv_addr = f"127.0.0.1:{namesrv.port}"
    etcd = None
    if etcd_file.exists():
        etcd_props, _ = props_of(etcd_file, "etcd", False)
        etcd = Process(
            "etcd", etcd_command(etcd_props, data_dir / "etcd"), etcd_props, is_etcd=True
        )
    brokers = []
    for file in broker_files:
        props, extra = props_of(file, file.stem, True)
        fixed = {"namesrvAddr": namesrv_addr, "storePathRootDir": str(data_dir / file.stem)}
        if etcd is not None:
            fixed["controllerAddr"] = f"127.0.0.1:{etcd.port}"
        fixed = {k: v for k, v in fixed.items() if not any(e.startswith(k + "=") for e in extra)}
        props.update(fixed)
        args = [sys.executable, "-m", "tidemq.broker", "-c", str(file)]
        args += [f"{k}={v}" for k, v in fixed.items()] + extra
        brokers.append(Process(file.stem, args, props))
    return Topology(folder, namesrv, brokers, etcd)


def etcd_command(props: dict[str, str], data_dir: Path) -> list[str]:
    """A single-member etcd on 127.0.0.1 (ClusterError when it is not installed)."""
    binary = shutil.which("etcd")
    if binary is None:
        raise ClusterError(
            "this topology needs etcd, which is not installed: run `apt-get install etcd-server`"
        )
    client = f"http://127.0.0.1:{props.get('clientPort', DEFAULT_ETCD_CLIENT_PORT)}"
    peer = f"http://127.0.0.1:{props.get('peerPort', DEFAULT_ETCD_PEER_PORT)}"
    name = props.get("name", "etcd")
    return [
        binary,
        "--name",
        name,
        "--data-dir",
        str(data_dir),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"{name}={peer}",
    ]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the launcher dies (Linux), best effort."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


async def _port_open(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _human_bytes(n: int) -> str:
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


class Launcher:
    def __init__(self, topology: Topology, data_dir: Path, *, start_timeout: float = 60.0) -> None:
        self.topology = topology
        self.data_dir = data_dir
        self.log_dir = data_dir / "logs"
        self.start_timeout = start_timeout
        self.stopping = False

    def echo(self, text: str) -> None:
        click.echo(text)

    # --- start ----------------------------------------------------------------------------

    async def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for process in self.topology.processes:
            await self._spawn(process)
            await self._wait_port(process)
        await self._wait_healthy()

    async def _spawn(self, process: Process) -> None:
        process.log_file = (self.log_dir / f"{process.name}.log").open("ab")
        process.process = await asyncio.create_subprocess_exec(
            *process.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=process.log_file,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self.echo(f"started {process.name} (pid {process.process.pid}, port {process.port})")

    def _log_tail(self, process: Process, lines: int = 10) -> str:
        path = self.log_dir / f"{process.name}.log"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def _wait_port(self, process: Process) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not process.running:
                raise ClusterError(
                    f"{process.name} exited before listening; its log ends with:\n"
                    f"{self._log_tail(process)}"
                )
            if await _port_open(process.port):
                return
            await asyncio.sleep(0.1)
        raise ClusterError(f"{process.name} did not listen on port {process.port}")

    async def _wait_healthy(self) -> None:
        """Every broker registered with the name server, every slave replicating."""
        wanted = {(b.broker_name, b.broker_id) for b in self.topology.brokers}
        slaves = {b.broker_name for b in self.topology.brokers if b.is_slave}
        deadline = time.monotonic() + self.start_timeout
        problem = "not checked"
        async with AdminClient(self.topology.namesrv_addr, timeout=3.0) as admin:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    problem = await self._health_problem(admin, wanted, slaves)
                except TideMQError as exc:
                    problem = str(exc)
                if problem == "":
                    return
                await asyncio.sleep(0.2)
        raise ClusterError(f"cluster not healthy after {self.start_timeout:.0f} s: {problem}")

    async def _health_problem(
        self, admin: AdminClient, wanted: set[tuple[str, int]], slaves: set[str]
    ) -> str:
        brokers = await admin.brokers()
        registered = {(b.broker_name, b.broker_id) for b in brokers}
        # Controller mode: one broker of each group is elected and registers as id 0 instead
        # of its own id; the others register with theirs.
        for group in {b.broker_name for b in self.topology.brokers if b.controller_mode}:
            members = [b for b in self.topology.brokers if b.broker_name == group]
            ids = {i for name, i in registered if name == group}
            if 0 not in ids or len(ids) < len(members):
                return f"group {group}: no master elected, or not every broker registered yet"
            wanted = {(name, i) for name, i in wanted if name != group}
        missing = wanted - registered
        if missing:
            return f"not registered yet: {sorted(missing)}"
        for broker in brokers:
            if broker.broker_id == 0 and broker.broker_name in slaves:
                info = await admin.ha_status(broker.address)
                if not info.ha_connection_info:
                    return f"no slave replicating from {broker.broker_name} yet"
        return ""

    def _check_alive(self) -> None:
        for process in self.topology.processes:
            if process.process is not None and not process.running:
                raise ClusterError(
                    f"{process.name} exited with status {process.process.returncode}; "
                    f"its log ends with:\n{self._log_tail(process)}"
                )

    # --- status ---------------------------------------------------------------------------

    async def status_line(self, admin: AdminClient) -> str:
        return await status_line(admin)

    async def watch(self, interval: float, stop: asyncio.Event) -> None:
        """Print the status line every `interval` until `stop` or a daemon dies."""
        tty = sys.stdout.isatty()
        async with AdminClient(self.topology.namesrv_addr, timeout=2.0) as admin:
            while not stop.is_set():
                self._check_alive()
                try:
                    line = await self.status_line(admin)
                except TideMQError as exc:
                    line = f"status unavailable: {exc}"
                stamp = time.strftime("%H:%M:%S")
                if tty:
                    sys.stdout.write(f"\r\x1b[2K[{stamp}] {line}")
                    sys.stdout.flush()
                else:
                    self.echo(f"[{stamp}] {line}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
        if tty:
            sys.stdout.write("\n")

    # --- stop -----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Slaves, masters, then the name server: SIGTERM, SIGKILL after STOP_TIMEOUT."""
        self.stopping = True
        for process in reversed(self.topology.processes):
            await self._stop_one(process)
            if process.log_file is not None:
                process.log_file.close()
                process.log_file = None

    async def _stop_one(self, process: Process) -> None:
        child = process.process
        if child is None:
            return
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), STOP_TIMEOUT)
            except TimeoutError:
                self.echo(f"{process.name} did not stop within {STOP_TIMEOUT:.0f} s: killed")
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
                await child.wait()
        self.echo(f"stopped {process.name} (exit status {child.returncode})")

    def kill_all(self) -> None:
        for process in self.topology.processes:
            if process.running and process.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    process.process.kill()


async def status_line(admin: AdminClient) -> str:
    """`in X msg/s  out Y msg/s  HA lag broker-a 0 B ...` over the cluster's masters."""
    masters = await admin.masters()
    total_in = total_out = 0.0
    lags: list[str] = []
    for master in masters:
        info = await admin.runtime_info(master.address)
        total_in += float(info.get("putTps", "0").split()[0])
        total_out += float(info.get("getTransferedTps", "0").split()[0])
        ha = await admin.ha_status(master.address)
        lags.extend(
            f"{master.broker_name}<-{slave.addr} {_human_bytes(slave.diff)}"
            for slave in ha.ha_connection_info
        )
    lag_text = ", ".join(lags) if lags else "no slaves"
    return (
        f"{len(masters)} master(s)  in {total_in:.1f} msg/s  out {total_out:.1f} msg/s  "
        f"HA lag: {lag_text}"
    )


async def run_cluster(
    topology: Topology, data_dir: Path, interval: float, start_timeout: float
) -> int:
    launcher = Launcher(topology, data_dir, start_timeout=start_timeout)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal(sig: signal.Signals) -> None:
        if launcher.stopping or stop.is_set():
            launcher.echo(f"{sig.name} again: killing every daemon now")
            launcher.kill_all()
            return
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    status = 0
    try:
        try:
            start = asyncio.ensure_future(launcher.start())
            waiter = asyncio.ensure_future(stop.wait())
            await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not start.done():
                with contextlib.suppress(ClusterError):
                    await cancel_and_wait(start)
                launcher.echo("interrupted while starting")
            else:
                waiter.cancel()
                start.result()
                launcher.echo(
                    f"cluster ready: name server {topology.namesrv_addr}, "
                    f"{len(topology.brokers)} broker(s); logs in {launcher.log_dir}; "
                    "Ctrl-C stops everything"
                )
                await launcher.watch(interval, stop)
        except ClusterError as exc:
            click.echo(f"tidemq-cluster: {exc}", err=True)
            status = 1
        launcher.echo("stopping...")
    finally:
        await launcher.stop()
        for sig in signals:
            loop.remove_signal_handler(sig)
    launcher.echo(f"stopped; stores and logs kept in {data_dir}")
    return status


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run a tidemq topology on this machine (name server, brokers, etcd when it has one)."""


@main.command("run")
@click.argument("topology")
@click.option(
    "-d",
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Stores and logs [default: ./data/TOPOLOGY].",
)
@click.option(
    "-o",
    "--override",
    "overrides",
    multiple=True,
    metavar="NAME:KEY=VALUE",
    help="Set a key for one process (namesrv, broker-a, ...) or 'all' brokers.",
)
@click.option(
    "-i", "--interval", type=float, default=1.0, show_default=True, help="Status line period (s)."
)
@click.option(
    "--start-timeout", type=float, default=60.0, show_default=True, help="Seconds to be healthy."
)
def run_command(
    topology: str,
    data_dir: Path | None,
    overrides: tuple[str, ...],
    interval: float,
    start_timeout: float,
) -> None:
    """Start TOPOLOGY (a folder or a name under deploy/), show status until Ctrl-C, stop it."""
    try:
        folder = find_topology(topology)
        data = (data_dir or Path("data") / folder.name).resolve()
        parsed = load_topology(folder, data, overrides)
    except (ClusterError, ConfigError) as exc:
        click.echo(f"tidemq-cluster: {exc}", err=True)
        sys.exit(2)
    sys.exit(asyncio.run(run_cluster(parsed, data, interval, start_timeout)))


@main.command("status")
@click.option(
    "-n",
    "--namesrvAddr",
    "namesrv_addr",
    default=lambda: os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
    help="Name server [default: $NAMESRV_ADDR or 127.0.0.1:9876].",
)
def status_command(namesrv_addr: str) -> None:
    """Print one status line of a running cluster."""

    async def once() -> str:
        async with AdminClient(namesrv_addr, timeout=3.0) as admin:
            return await status_line(admin)

    try:
        click.echo(asyncio.run(once()))
    except TideMQError as exc:
        click.echo(f"tidemq-cluster status: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
