"""`tidemq-cluster`: run a whole topology on this machine, in the foreground, until Ctrl-C.

`tidemq-cluster run TOPOLOGY` reads a topology folder — `namesrv.properties` and one
`broker-*.properties` per broker, RocketMQ's sample layout — starts the name server, then the
masters, then the slaves (each `python -m broker.namesrv` / `python -m broker` with the file and
`namesrvAddr`/`storePathRootDir` filled in), waits until every broker is registered and every
slave replicates, then prints a status line (messages in and out per second over all masters
since the previous line, each slave's HA lag by broker name and id) until SIGINT or SIGTERM.
After the slaves it starts `tidemq-dashboard` over the name server, on `--dashboard-port` (8082;
0: none) at `--dashboard-bind` (127.0.0.1), and prints its address with "cluster ready"; it may
change the cluster when TIDEMQ_ACCESS_KEY/TIDEMQ_SECRET_KEY name an account, or without one when
it is bound to loopback and no broker checks ACL (`make run`); otherwise it is read-only (in a
topology with ACL it signs its reads with the brokers' account; it uses the checks' TLS, see
below). It stops the dashboard, the slaves, the masters and the name server, in that order
(SIGTERM, SIGKILL after `STOP_TIMEOUT`); a second signal kills them at once.

The launcher's own checks (health, status line, `status -t TOPOLOGY`) are signed with the
brokers' own account when they have aclEnable, and in TLS when the ports speak it
(broker/daemons/cluster_access.py). `tidemq-cluster secure-init DIR` makes a secure topology's
folder: certificates, plain_acl.yml and the files of deploy/secure (broker/daemons/secure_init.py).

Before starting anything it checks every fixed port of every process (listenPort, a master's
haListenPort, metricsPort, the dashboard's port; 0 means "any free port" and is not checked): a
port taken twice in the topology, or held by another process (named with its pid and command
line, from /proc), stops it with exit status 1 and nothing started. A daemon counts as started
once it listens itself on all of its fixed ports (its own sockets, from /proc: another program
answering on the port does not count); one that exits while starting stops the start: exit
status 1 with the end of its log. Once running, a daemon that dies is reported (one line, and
`DOWN` on the status line) while the others keep running; with `--restart` it is started again
(at most once per `RESTART_PAUSE` seconds). The exit status is 1 when a daemon is down at the
end, else 0.

A topology with an `etcd.properties` (tidemq-cluster's own keys: `clientPort`, 2379, and
`peerPort`, 2380) runs its brokers in controller mode (issue 16): the launcher starts a
single-member etcd first (Debian's `etcd`, data in `DIR/etcd`; missing, it says how to install
it), fills in each broker's `controllerAddr`, and stops etcd last.

TOPOLOGY is a folder, or the name of one under the repository's `deploy/` (single,
2m-noslave, 2m-2s-async, 2m-2s-sync, local, controller; secure is a template for
secure-init). `--data DIR` holds the stores
(`DIR/<file stem>`) and every process's log (`DIR/logs/<file stem>.log`, appended to; each
start of a daemon writes a `----- tidemq-cluster: started <time>` line first, and the log tails
the launcher quotes begin at the last one). `-o STEM:key=value` overrides a key for one process
(`namesrv`, `broker-a`, `etcd`, ...) and `-o all:key=value` for every broker, so a test can run
a topology on free ports.

`--port-base N` moves every port of the topology at once, in blocks of PORT_BLOCK: the name
server listens on N (its metricsPort N+2), the brokers in start order (masters, then slaves) on
N+10, N+20, ... (the haListenPort of a master the next port, its metricsPort the one after,
its grpcServerPort the one after that),
etcd's clientPort and peerPort on the block after the brokers, the dashboard on the last one.
A metricsPort is moved only where the file sets one, a grpcServerPort only where the broker
serves gRPC; `-o` still wins over the base.
`port_layout` lists the result; `run` prints it before it starts anything.

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
from tidemq.broker.daemons.cluster_access import ClusterAccess, access_of, dashboard_access
from tidemq.broker.daemons.port_owner import describe_holders, holders, pid_listens_on, port_is_free
from tidemq.broker.daemons.secure_init import SecureInitError, secure_init
from tidemq.broker.managers.config_export import export_config
from tidemq.broker.properties import load_properties
from tidemq.broker.proxy.config import DEFAULT_GRPC_SERVER_PORT
from tidemq.client.admin.api import AdminClient, BrokerAddress
from tidemq.client.dashboard.cli import DEFAULT_BIND as DASHBOARD_BIND
from tidemq.client.dashboard.cli import DEFAULT_PORT as DASHBOARD_PORT
from tidemq.client.dashboard.cli import command_line as dashboard_command
from tidemq.client.errors import TideMQError
from tidemq.client.version import version_option
from tidemq.common.errors import ConfigError
from tidemq.common.lifecycle import cancel_and_wait
from tidemq.store.errors import CorruptStoreError

__all__ = ["ClusterError", "Launcher", "Process", "Topology", "load_topology", "main"]

log = logging.getLogger(__name__)

DEPLOY_DIR: Final = Path(__file__).resolve().parents[2] / "deploy"
DEFAULT_ETCD_CLIENT_PORT: Final = 2379
DEFAULT_ETCD_PEER_PORT: Final = 2380
STOP_TIMEOUT: Final = 30.0
RESTART_PAUSE: Final = 5.0
START_MARK: Final = "----- tidemq-cluster: started"
PR_SET_PDEATHSIG: Final = 1
# --port-base: each process of the topology gets this many ports from the base on.
PORT_BLOCK: Final = 10


class ClusterError(Exception):
    """The topology cannot be run (bad folder, a daemon that does not come up)."""


@dataclasses.dataclass(slots=True)
class Process:
    """One daemon of the topology: its name (file stem), command line and effective keys."""

    name: str
    args: list[str]
    props: dict[str, str]
    is_namesrv: bool = False
    is_dashboard: bool = False
    is_etcd: bool = False
    process: asyncio.subprocess.Process | None = None
    # Added to the launcher's environment (the dashboard's account: no secret on a command line).
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    log_file: IO[bytes] | None = None
    # A death already reported (the status line says DOWN until it runs again).
    death_reported: bool = False
    last_start: float = 0.0

    def _int(self, key: str, default: int) -> int:
        text = self.props.get(key, str(default))
        try:
            return int(text)
        except ValueError:
            raise ClusterError(f"{self.name}: {key}: not an integer: {text!r}") from None

    @property
    def port(self) -> int:
        if self.is_etcd:
            return int(self.props.get("clientPort", DEFAULT_ETCD_CLIENT_PORT))
        default = DEFAULT_NAMESRV_PORT if self.is_namesrv else DEFAULT_BROKER_PORT
        return self._int("listenPort", default)

    @property
    def bind_host(self) -> str:
        return self.props.get("bindAddress", "0.0.0.0")

    def fixed_ports(self) -> list[tuple[str, int]]:
        """(key, port) of every port the daemon listens on that is not picked at start (0)."""
        if self.is_dashboard:
            return [("port", self.port)] if self.port > 0 else []
        if self.is_etcd:
            peer = self._int("peerPort", DEFAULT_ETCD_PEER_PORT)
            return [("clientPort", self.port), ("peerPort", peer)]
        ports = [("listenPort", self.port)]
        if not self.is_namesrv and not self.is_slave:  # a slave does not listen for HA
            ha = self._int("haListenPort", -1)
            ports.append(("haListenPort", ha if ha >= 0 else (self.port + 1 if self.port else 0)))
        ports.append(("metricsPort", self._int("metricsPort", -1)))
        if not self.is_namesrv:  # RocketMQ 5 clients (broker/proxy)
            ports.append(("grpcServerPort", self._int("grpcServerPort", DEFAULT_GRPC_SERVER_PORT)))
        return [(key, port) for key, port in ports if port > 0]

    def ports_listened_at_start(self) -> list[int]:
        """The fixed ports it listens on once started: a controller-mode broker opens its HA
        port only when etcd elects it."""
        return [
            port
            for key, port in self.fixed_ports()
            if not (key == "haListenPort" and self.controller_mode)
        ]

    @property
    def controller_mode(self) -> bool:
        return self.props.get("enableControllerMode", "false").strip().lower() == "true"

    @property
    def is_slave(self) -> bool:
        role = self.props.get("brokerRole", "ASYNC_MASTER")
        return not self.is_dashboard and role.upper() == "SLAVE"

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

    @property
    def exit_text(self) -> str:
        code = None if self.process is None else self.process.returncode
        if code is None:
            return "running"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"


@dataclasses.dataclass(slots=True)
class Topology:
    folder: Path
    namesrv: Process
    brokers: list[Process]
    etcd: Process | None = None
    # tidemq-dashboard over the name server, started last (None: not started).
    dashboard: Process | None = None
    # How the launcher's own checks reach the daemons: signed, in TLS
    # (broker/daemons/cluster_access.py).
    access: ClusterAccess = dataclasses.field(default_factory=ClusterAccess)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    @property
    def processes(self) -> list[Process]:
        """Start order: etcd, the name server, the masters, the slaves, then the dashboard."""
        masters = [b for b in self.brokers if not b.is_slave]
        slaves = [b for b in self.brokers if b.is_slave]
        first = [self.etcd] if self.etcd is not None else []
        last = [self.dashboard] if self.dashboard is not None else []
        return [*first, self.namesrv, *masters, *slaves, *last]

    @property
    def dashboard_url(self) -> str | None:
        dashboard = self.dashboard
        if dashboard is None:
            return None
        return f"http://{dashboard.bind_host}:{dashboard.port}/"


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


def load_topology(
    folder: Path,
    data_dir: Path,
    overrides: Sequence[str] = (),
    *,
    dashboard_port: int = 0,
    dashboard_bind: str = DASHBOARD_BIND,
    port_base: int | None = None,
) -> Topology:
    """The processes of a topology folder with their command lines (ConfigError, ClusterError);
    with `dashboard_port`, a tidemq-dashboard on that port too (read-only unless
    TIDEMQ_ACCESS_KEY/TIDEMQ_SECRET_KEY name an account, as for tidemq-dashboard itself); with
    `port_base`, every port moved to the blocks of --port-base (the dashboard's too, if any)."""
    namesrv_file = folder / "namesrv.properties"
    broker_files = sorted(folder.glob("broker*.properties"))
    if not broker_files:
        raise ClusterError(f"{folder}: no broker*.properties file")
    etcd_file = folder / "etcd.properties"
    if port_base is not None:
        based, dashboard_base = based_ports(port_base, namesrv_file, broker_files, etcd_file)
        overrides = [*based, *overrides]
        if dashboard_port > 0:
            dashboard_port = dashboard_base
    parsed = [parse_override(o) for o in overrides]
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
    check_secure_files([namesrv, *brokers])
    access = access_of(namesrv.props, [b.props for b in brokers])
    dashboard = None
    if dashboard_port > 0:
        options, env = dashboard_access(access)
        dashboard = Process(
            "dashboard",
            dashboard_command(namesrv_addr, dashboard_port, dashboard_bind, *options),
            {"listenPort": str(dashboard_port), "bindAddress": dashboard_bind},
            is_dashboard=True,
            env=env,
        )
    return Topology(folder, namesrv, brokers, etcd=etcd, dashboard=dashboard, access=access)


def based_ports(
    base: int, namesrv_file: Path, broker_files: Sequence[Path], etcd_file: Path
) -> tuple[list[str], int]:
    """The overrides (`NAME:key=port`) that put every process on its block from `base`, and the
    dashboard's port (ClusterError when the last block passes 65535)."""
    blocks = 1 + len(broker_files) + (1 if etcd_file.exists() else 0) + 1
    last = base + blocks * PORT_BLOCK - 1
    if base < 1 or last > 65535:
        raise ClusterError(
            f"--port-base {base}: the topology takes ports {base}-{last}, "
            f"so the base must be between 1 and {65536 - blocks * PORT_BLOCK}"
        )

    def has_metrics(file: Path) -> bool:
        if not file.exists():
            return False
        text = load_properties(file).get("metricsPort", "-1").strip()
        return text.lstrip("-").isdigit() and int(text) > 0

    def is_slave(file: Path) -> bool:
        role = load_properties(file).get("brokerRole", "ASYNC_MASTER")
        return role.strip().upper() == "SLAVE"

    def serves_grpc(file: Path) -> bool:
        props = load_properties(file)
        text = props.get("grpcServerPort", str(DEFAULT_GRPC_SERVER_PORT)).strip()
        return text.lstrip("-").isdigit() and int(text) > 0

    overrides = [f"namesrv:listenPort={base}"]
    if has_metrics(namesrv_file):
        overrides.append(f"namesrv:metricsPort={base + 2}")
    # In start order, as the launcher prints them: the masters, then the slaves.
    in_order = sorted(broker_files, key=is_slave)
    for number, file in enumerate(in_order, start=1):
        block = base + number * PORT_BLOCK
        overrides.append(f"{file.stem}:listenPort={block}")
        if not is_slave(file):
            overrides.append(f"{file.stem}:haListenPort={block + 1}")
        if has_metrics(file):
            overrides.append(f"{file.stem}:metricsPort={block + 2}")
        if serves_grpc(file):
            overrides.append(f"{file.stem}:grpcServerPort={block + 3}")
    if etcd_file.exists():
        block = base + (1 + len(broker_files)) * PORT_BLOCK
        overrides += [f"etcd:clientPort={block}", f"etcd:peerPort={block + 1}"]
    return overrides, base + (blocks - 1) * PORT_BLOCK


def port_layout(topology: Topology) -> list[tuple[str, str, int]]:
    """(process, key, port) of every fixed port, in start order: what `run` will take."""
    return [
        (process.name, key, port)
        for process in topology.processes
        for key, port in process.fixed_ports()
    ]


def check_secure_files(processes: Sequence[Process]) -> None:
    """ClusterError for a TLS port without a certificate: deploy/secure is a template that
    secure-init fills in (a daemon would stop on it, less helpfully)."""
    for process in processes:
        props = process.props
        mode = props.get("tls.server.mode", "disabled").strip()
        if mode not in ("", "disabled") and not props.get("tls.server.certPath"):
            raise ClusterError(
                f"{process.name}: tls.server.mode={mode} and no tls.server.certPath: make the "
                "certificates first (`tidemq-cluster secure-init DIR`, then "
                "`tidemq-cluster run DIR`)"
            )


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

    def check_ports(self) -> None:
        """ClusterError naming every fixed port taken twice or held by another process."""
        owners: dict[int, str] = {}
        problems = []
        for process in self.topology.processes:
            for key, port in process.fixed_ports():
                what = f"{process.name} {key}"
                if port in owners:
                    problems.append(f"port {port} is both {owners[port]} and {what}")
                    continue
                owners[port] = what
                if not port_is_free(process.bind_host, port):
                    problems.append(
                        f"port {port} ({what}) is in use by {describe_holders(holders(port))}"
                    )
        if problems:
            raise ClusterError("nothing started: " + "; ".join(problems))

    async def start(self) -> None:
        self.check_ports()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for process in self.topology.processes:
            await self._spawn(process)
            await self._wait_started(process)
        await self._wait_healthy()

    async def _spawn(self, process: Process) -> None:
        if process.log_file is None:
            process.log_file = (self.log_dir / f"{process.name}.log").open("ab")
        process.death_reported = False
        process.last_start = time.monotonic()
        # Logs are appended run after run: the tails quoted on a failure start at this line,
        # so they never show an earlier run's lines as this one's.
        process.log_file.write(f"{START_MARK} {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        process.log_file.flush()
        process.process = await asyncio.create_subprocess_exec(
            *process.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=process.log_file,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            env={**os.environ, **process.env} if process.env else None,
        )
        self.echo(f"started {process.name} (pid {process.process.pid}, port {process.port})")

    def _log_tail(self, process: Process, lines: int = 10) -> str:
        path = self.log_dir / f"{process.name}.log"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        _, mark, since = text.rpartition(START_MARK)
        this_run = since.partition("\n")[2] if mark else text
        return "\n".join(this_run.splitlines()[-lines:])

    async def _wait_started(self, process: Process) -> None:
        """Until the daemon itself listens on each of its fixed ports (not another program)."""
        deadline = time.monotonic() + self.start_timeout
        waiting = process.ports_listened_at_start()
        while time.monotonic() < deadline:
            if not process.running or process.process is None:
                raise ClusterError(
                    f"{process.name} exited while starting ({process.exit_text}); "
                    f"its log ends with:\n{self._log_tail(process)}"
                )
            pid = process.process.pid
            waiting = [port for port in waiting if not pid_listens_on(pid, port)]
            if not waiting:
                return
            await asyncio.sleep(0.1)
        raise ClusterError(
            f"{process.name} did not listen on port(s) {', '.join(map(str, waiting))} "
            f"within {self.start_timeout:.0f} s; its log ends with:\n{self._log_tail(process)}"
        )

    async def _wait_healthy(self) -> None:
        """Every broker registered with the name server, every slave replicating."""
        wanted = {(b.broker_name, b.broker_id) for b in self.topology.brokers}
        slaves = {b.broker_name for b in self.topology.brokers if b.is_slave}
        deadline = time.monotonic() + self.start_timeout
        problem = "not checked"
        async with self.topology.access.admin(self.topology.namesrv_addr, 3.0) as admin:
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
                    f"{process.name} exited while starting ({process.exit_text}); "
                    f"its log ends with:\n{self._log_tail(process)}"
                )

    # --- running --------------------------------------------------------------------------

    @property
    def down(self) -> list[Process]:
        return [p for p in self.topology.processes if p.process is not None and not p.running]

    def _report_deaths(self) -> None:
        """One line per daemon that died since the last look; the others keep running."""
        for process in self.down:
            if not process.death_reported:
                process.death_reported = True
                tty_break = "\n" if sys.stdout.isatty() else ""
                self.echo(
                    f"{tty_break}{process.name} died ({process.exit_text}); the others keep "
                    f"running; its log ends with:\n{self._log_tail(process, 5)}"
                )

    async def _restart_dead(self) -> None:
        for process in self.down:
            if time.monotonic() - process.last_start < RESTART_PAUSE:
                continue
            self.echo(f"restarting {process.name}")
            try:
                await self._spawn(process)
                await self._wait_started(process)
            except ClusterError as exc:
                self.echo(f"restart of {process.name} failed: {exc}")

    def down_text(self) -> str:
        return ", ".join(f"{p.name} ({p.exit_text})" for p in self.down)

    async def watch(self, interval: float, stop: asyncio.Event, *, restart: bool = False) -> None:
        """Print the status line every `interval` until `stop`; report (and restart) deaths."""
        tty = sys.stdout.isatty()
        meter = RateMeter()
        names = {b.broker_name for b in self.topology.brokers}
        async with self.topology.access.admin(self.topology.namesrv_addr, 2.0) as admin:
            with contextlib.suppress(TideMQError):
                await status_line(admin, meter, names)  # the rates' starting point
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            while not stop.is_set():
                self._report_deaths()
                if restart:
                    await self._restart_dead()
                try:
                    line = await status_line(admin, meter, names)
                except TideMQError as exc:
                    line = f"status unavailable: {exc}"
                down = self.down_text()
                if down:
                    line += f"  DOWN: {down}"
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


class RateMeter:
    """Messages per second from the masters' message totals (msgPutTotalTodayNow and
    msgGetTotalTodayNow, counted since each broker started) between two samples."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}
        self._at = 0.0

    def rates(self, totals: dict[str, tuple[int, int]], now: float) -> tuple[float, float, float]:
        """(in, out, seconds covered) since the previous call; (0, 0, 0) on the first."""
        previous, at = self._last, self._at
        self._last, self._at = totals, now
        span = now - at
        if not previous or span <= 0:
            return 0.0, 0.0, 0.0
        put = got = 0
        for address, (put_now, get_now) in totals.items():
            put_before, get_before = previous.get(address, (put_now, get_now))
            # A restarted broker counts from 0 again: its new total is what it did since.
            put += put_now - put_before if put_now >= put_before else put_now
            got += get_now - get_before if get_now >= get_before else get_now
        return put / span, got / span, span


async def status_line(
    admin: AdminClient, meter: RateMeter, broker_names: set[str] | None = None
) -> str:
    """`in X msg/s  out Y msg/s (last 1.0 s)  broker-a/1 lag 0 B ...`: the rates since the
    previous call over the masters of `broker_names` (all when None), each slave named by its
    broker name and id."""
    brokers: list[BrokerAddress] = [
        b for b in await admin.brokers() if broker_names is None or b.broker_name in broker_names
    ]
    masters = [b for b in brokers if b.broker_id == 0]
    totals: dict[str, tuple[int, int]] = {}
    parts: list[str] = []
    for master in masters:
        try:
            info = await admin.runtime_info(master.address)
            totals[master.address] = (
                int(info.get("msgPutTotalTodayNow", "0")),
                int(info.get("msgGetTotalTodayNow", "0")),
            )
            ha = await admin.ha_status(master.address)
        except TideMQError:
            parts.append(f"{master.broker_name} master unreachable")
            continue
        parts.extend(
            f"{master.broker_name}/{slave.slave_broker_id} lag {_human_bytes(slave.diff)}"
            if slave.slave_broker_id >= 0
            else f"{master.broker_name}<-{slave.addr} lag {_human_bytes(slave.diff)}"
            for slave in ha.ha_connection_info
        )
    rate_in, rate_out, span = meter.rates(totals, time.monotonic())
    live_masters = {m.broker_name for m in masters if m.address in totals}
    parts.extend(
        f"{slave.broker_name}/{slave.broker_id} serving reads, no master"
        for slave in brokers
        if slave.broker_id > 0 and slave.broker_name not in live_masters
    )
    window = f" (last {span:.1f} s)" if span else ""
    return (
        f"{len(totals)} master(s)  in {rate_in:.1f} msg/s  out {rate_out:.1f} msg/s{window}  "
        f"HA: {', '.join(parts) if parts else 'no slaves'}"
    )


async def run_cluster(
    topology: Topology,
    data_dir: Path,
    interval: float,
    start_timeout: float,
    *,
    restart: bool = False,
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

    try:
        launcher.check_ports()
    except ClusterError as exc:
        click.echo(f"tidemq-cluster: {exc}", err=True)
        return 1
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
                launcher.echo("interrupted while starting: the cluster never came up")
                status = 1
            else:
                waiter.cancel()
                start.result()
                names = ", ".join(
                    f"{p.name} (pid {p.process.pid})" for p in topology.processes if p.process
                )
                dashboard = topology.dashboard_url
                access = topology.access.description
                launcher.echo(
                    f"cluster ready: {names}; name server {topology.namesrv_addr}; "
                    + (f"dashboard {dashboard}; " if dashboard else "")
                    + (f"checks in {access}; " if access else "")
                    + f"logs in {launcher.log_dir}; Ctrl-C stops everything"
                )
                await launcher.watch(interval, stop, restart=restart)
                if launcher.down:
                    launcher.echo(f"down at the end: {launcher.down_text()}")
                    status = 1
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
@version_option("tidemq-cluster")
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
@click.option(
    "--restart",
    is_flag=True,
    help=f"Start a daemon that died again (at most once per {RESTART_PAUSE:.0f} s).",
)
@click.option(
    "--dashboard-port",
    type=click.IntRange(0, 65535),
    default=DASHBOARD_PORT,
    show_default=True,
    help="Port of the tidemq-dashboard started with the cluster (0: none).",
)
@click.option(
    "--dashboard-bind",
    default=DASHBOARD_BIND,
    show_default=True,
    help="Address the dashboard listens on.",
)
@click.option(
    "--port-base",
    type=click.IntRange(1, 65535),
    default=None,
    help=f"Move every port at once: the name server on N, each broker on N+{PORT_BLOCK}, "
    f"N+{2 * PORT_BLOCK}, ... (HA +1, metrics +2, gRPC +3), the dashboard on the last block.",
)
def run_command(
    topology: str,
    data_dir: Path | None,
    overrides: tuple[str, ...],
    interval: float,
    start_timeout: float,
    restart: bool,
    dashboard_port: int,
    dashboard_bind: str,
    port_base: int | None,
) -> None:
    """Start TOPOLOGY (a folder or a name under deploy/) and a dashboard, show status until
    Ctrl-C, stop them."""
    try:
        folder = find_topology(topology)
        data = (data_dir or Path("data") / folder.name).resolve()
        parsed = load_topology(
            folder,
            data,
            overrides,
            dashboard_port=dashboard_port,
            dashboard_bind=dashboard_bind,
            port_base=port_base,
        )
        layout = port_layout(parsed)  # a port key that is not a number: one line now
    except (ClusterError, ConfigError) as exc:
        click.echo(f"tidemq-cluster: {exc}", err=True)
        sys.exit(2)
    click.echo("ports: " + ", ".join(f"{name} {key} {port}" for name, key, port in layout))
    sys.exit(asyncio.run(run_cluster(parsed, data, interval, start_timeout, restart=restart)))


@main.command("status")
@click.option(
    "-n",
    "--namesrvAddr",
    "namesrv_addr",
    default=lambda: os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
    help="Name server [default: $NAMESRV_ADDR or 127.0.0.1:9876].",
)
@click.option(
    "-t",
    "--topology",
    "topology",
    default=None,
    help="The running topology (folder or name under deploy/): its ACL account signs the "
    "checks and its TLS files are used, as `run` does.",
)
def status_command(namesrv_addr: str, topology: str | None) -> None:
    """Print one status line of a running cluster (rates over one second)."""
    access = ClusterAccess()
    if topology is not None:
        try:
            folder = find_topology(topology)
            access = load_topology(folder, Path("data") / folder.name).access
        except (ClusterError, ConfigError) as exc:
            click.echo(f"tidemq-cluster status: {exc}", err=True)
            sys.exit(2)

    async def once() -> str:
        async with access.admin(namesrv_addr, 3.0) as admin:
            meter = RateMeter()
            await status_line(admin, meter)
            await asyncio.sleep(1.0)
            return await status_line(admin, meter)

    try:
        click.echo(asyncio.run(once()))
    except TideMQError as exc:
        click.echo(f"tidemq-cluster status: {exc}", err=True)
        sys.exit(1)


@main.command("export-config")
@click.argument("store_root", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder to write the files to [default: STORE_ROOT/config, where RocketMQ keeps them].",
)
def export_config_command(store_root: Path, out_dir: Path | None) -> None:
    """Write a broker's config tables (STORE_ROOT/config/tables.db) as RocketMQ's JSON files
    (topics.json, subscriptionGroup.json, consumerOffset.json, delayOffset.json); the broker may
    be running. A broker also writes them at every clean stop."""
    try:
        exported = export_config(store_root, out_dir)
    except (OSError, CorruptStoreError) as exc:
        click.echo(f"tidemq-cluster export-config: {exc}", err=True)
        sys.exit(1)
    for item in exported:
        click.echo(f"wrote {item.path} ({item.entries} entries)")


@main.command("secure-init")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--from",
    "template",
    default="secure",
    show_default=True,
    help="The topology to make FOLDER from (a folder or a name under deploy/).",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="HOST",
    help="Another IP or DNS name the certificates name (besides 127.0.0.1, localhost and the "
    "topology's brokerIP1, brokerIP2, bindAddress and name server hosts).",
)
@click.option("--force", is_flag=True, help="Replace the files FOLDER holds (new keys, secrets).")
def secure_init_command(folder: Path, template: str, hosts: tuple[str, ...], force: bool) -> None:
    """Write FOLDER: a CA and certificates, plain_acl.yml with random secrets and the topology's
    files naming them; then `tidemq-cluster run FOLDER` starts it."""
    try:
        written = secure_init(find_topology(template), folder, hosts, force=force)
    except (ClusterError, SecureInitError, ConfigError, OSError) as exc:
        click.echo(f"tidemq-cluster secure-init: {exc}", err=True)
        sys.exit(1)
    click.echo(
        f"wrote {written.folder}: certificates, plain_acl.yml (accounts "
        f"{written.brokers.access_key}, admin, and {written.app.access_key}), "
        f"application.properties; start it with `tidemq-cluster run {written.folder}`"
    )


if __name__ == "__main__":
    main()
