"""Name server, brokers and a client process each on its own host of a `Network` (netns.py).

`NetnsCluster(network, folder)` starts daemons inside the hosts' namespaces, each bound to its
host's address: `namesrvd()` on host "namesrv", `brokerd(host, name, role)` with its store in
`folder/<host>` (a slave is given its master's HA address); `etcd(hosts)` a member of one etcd
cluster on each of some hosts, `controller_broker(host, id, endpoints)` a broker of a group that
fails over on it (controller mode). `client()` starts the client
process (`netns_agent.py`) on host "client"; the test drives it with `await agent.call(op,
...)`. A daemon counts as started when its port listens in its own namespace (read from
/proc/<pid>/net/tcp: the test's namespace cannot connect to it) and, for a broker, once it
logged its boot. `close()` stops everything, the network last, also after a failure.

Ports are fixed: each host is a namespace of its own, so nothing else can hold them there;
they are not RocketMQ's defaults either.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from tests.support.conditions import eventually_sync
from tests.support.etcd import HEALTH_TIMEOUT, Member, etcd_command
from tests.support.failover import member_overrides
from tests.support.ha_brokers import HA_TIMING
from tests.support.netns import Network, listening
from tests.support.processes import BROKER_BOOTED, REPO_ROOT, TEST_STORE_OVERRIDES, Daemon

NAMESRV_PORT: Final = 20876
BROKER_PORT: Final = 20911
HA_PORT: Final = 20912
ETCD_CLIENT_PORT: Final = 20379
ETCD_PEER_PORT: Final = 20380
ETCD_READY: Final = "ready to serve client requests"
AGENT_TIMEOUT: Final = 120.0


class NetnsDaemon(Daemon):
    """A daemon started with `ip netns exec` (which execs it in place: `pid` is the daemon's)."""

    def listening(self) -> bool:
        return self.pid is not None and listening(self.pid, self.port)


class AgentError(RuntimeError):
    """The client process answered a request with an error (its text is the message)."""


class ClientAgent:
    """The client process (`netns_agent.py`) inside a host; `call` sends it one request."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[0] = ready
        with self.log_path.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=REPO_ROOT,
                limit=1 << 24,
            )
        self._reader = asyncio.create_task(self._read())
        try:
            await asyncio.wait_for(ready, 30)
        except TimeoutError:
            raise AgentError(f"the client process did not start: {self.log_tail()}") from None

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            reply = json.loads(line)
            future = self._waiting.pop(reply["id"], None)
            if future is None or future.done():
                continue
            if "error" in reply:
                future.set_exception(AgentError(reply["error"]))
            else:
                future.set_result(reply["result"])
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(AgentError(f"the client process ended: {self.log_tail()}"))

    async def call(self, op: str, *, timeout: float = AGENT_TIMEOUT, **args: Any) -> Any:
        assert self.process is not None and self.process.stdin is not None
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        line = json.dumps({"id": request_id, "op": op, "args": args}) + "\n"
        self.process.stdin.write(line.encode())
        await self.process.stdin.drain()
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise AgentError(f"{op} not answered within {timeout} s") from None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    async def close(self) -> None:
        if self.process is None:
            return
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self._reader is not None:
            await self._reader


class NetnsCluster:
    def __init__(self, network: Network, folder: Path) -> None:
        self.network = network
        self.folder = folder
        self.daemons: list[NetnsDaemon] = []
        self.agents: list[ClientAgent] = []

    @property
    def namesrv_addr(self) -> str:
        return f"{self.network.address('namesrv')}:{NAMESRV_PORT}"

    def broker_addr(self, host: str) -> str:
        return f"{self.network.address(host)}:{BROKER_PORT}"

    def store(self, host: str) -> Path:
        return self.folder / host

    def _start(
        self, host: str, argv: list[str], port: int, ready_text: str | None, name: str
    ) -> NetnsDaemon:
        daemon = NetnsDaemon(
            self.network.exec_args(host, argv),
            port=port,
            host=self.network.address(host),
            log_path=self.folder / "logs" / f"{name}.log",
            name=name,
            start_timeout=30,
            ready_text=ready_text,
        )
        self.daemons.append(daemon)
        return daemon.start()

    def namesrvd(self, *overrides: str) -> NetnsDaemon:
        address = self.network.address("namesrv")
        argv = [sys.executable, "-m", "tidemq.broker.namesrv"]
        argv += [f"bindAddress={address}", f"listenPort={NAMESRV_PORT}", *overrides]
        return self._start("namesrv", argv, NAMESRV_PORT, None, "namesrvd")

    def brokerd(
        self,
        host: str,
        broker_name: str,
        role: str,
        *overrides: str,
        master: str | None = None,
        name: str | None = None,
    ) -> NetnsDaemon:
        """A broker on `host`; a slave (`role` SLAVE) replicates from the broker on `master`."""
        address = self.network.address(host)
        argv = [
            sys.executable,
            "-m",
            "tidemq.broker",
            f"bindAddress={address}",
            f"brokerIP1={address}",
            f"listenPort={BROKER_PORT}",
            f"haListenPort={HA_PORT}",
            f"namesrvAddr={self.namesrv_addr}",
            f"storePathRootDir={self.store(host)}",
            f"brokerName={broker_name}",
            f"brokerRole={role}",
            f"brokerId={0 if master is None else 1}",
            "messageIndexWorkerEnable=false",  # two cores: no index process per broker
            "registerNameServerPeriod=10000",  # the least allowed: name servers expire quickly
            *TEST_STORE_OVERRIDES,
            *HA_TIMING,
        ]
        if master is not None:
            argv.append(f"haMasterAddress={self.network.address(master)}:{HA_PORT}")
        argv += overrides
        return self._start(host, argv, BROKER_PORT, BROKER_BOOTED, name or host)

    def etcd(self, hosts: Sequence[str]) -> str:
        """One etcd cluster, a member on each of `hosts` (data in `folder/etcd`); returns once
        every member serves clients (a quorum formed), with its endpoints (controllerAddr)."""
        members = [
            Member(f"etcd-{host}", ETCD_CLIENT_PORT, ETCD_PEER_PORT, self.network.address(host))
            for host in hosts
        ]
        started = []
        for host, member in zip(hosts, members, strict=True):
            argv = etcd_command(member, members, self.folder / "etcd", "new")
            # each is started without waiting: a member serves clients once a quorum formed
            started.append(self._start(host, argv, ETCD_PEER_PORT, None, member.name))
        for daemon in started:

            def ready(d: NetnsDaemon = daemon) -> bool:
                if not d.running:
                    raise AssertionError(f"{d.name} exited:\n{d.log_tail()}")
                return ETCD_READY in d.log_text()

            eventually_sync(ready, f"{daemon.name} serving clients", HEALTH_TIMEOUT)
        return ";".join(f"{m.host}:{m.client_port}" for m in members)

    def controller_broker(
        self, host: str, broker_id: int, controller_addr: str, *overrides: str
    ) -> NetnsDaemon:
        """Broker `broker_id` of group broker-a in controller mode (failover on the etcd at
        `controller_addr`), with the tests' lease and HA timing (tests/support/failover.py)."""
        return self.brokerd(
            host,
            "broker-a",
            "SYNC_MASTER",
            *member_overrides(controller_addr, broker_id),
            *overrides,
        )

    async def client(self, host: str = "client") -> ClientAgent:
        argv = self.network.exec_args(host, [sys.executable, "-m", "tests.support.netns_agent"])
        agent = ClientAgent(argv, self.folder / "logs" / f"agent-{len(self.agents)}.log")
        self.agents.append(agent)
        await agent.start()
        return agent

    async def close(self) -> None:
        try:
            for agent in self.agents:
                with contextlib.suppress(Exception):
                    await agent.close()
            for daemon in reversed(self.daemons):
                daemon.stop()
        finally:
            self.network.close()

    def logs(self) -> str:
        """The tail of every daemon's log (for a failing test's message)."""
        return "\n".join(f"--- {d.name}\n{d.log_tail(15)}" for d in self.daemons)
