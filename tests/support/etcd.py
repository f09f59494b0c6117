"""Real etcd servers for tests: one member or a 3-member cluster on free 127.0.0.1 ports.

`EtcdCluster(members, data_dir, log_dir).start()` runs Debian's `etcd` (3.4, package
etcd-server) once per member, each with its own data directory under `data_dir` and its log in
`log_dir`, and returns once every member answers `GET /health` with `"health": "true"` on its
client URL (a member opens its peer port first, so each is started without waiting for the
others: a member of a 3-member cluster serves clients only once a quorum has formed).
`stop()` stops every member by its pid (SIGTERM, then SIGKILL), also when a start failed;
`kill(i)` SIGKILLs one member (its data directory stays, so `restart(i)` brings it back).
`endpoints` is the `host:port;host:port` text of controllerAddr.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.support.processes import LOOPBACK, Daemon, DaemonError, free_port

HEALTH_TIMEOUT = 60.0  # seconds: a loaded 2-core machine elects a raft leader slowly


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise DaemonError("etcd is not installed: run `apt-get install etcd-server` (make install)")
    return path


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    client_port: int
    peer_port: int
    host: str = LOOPBACK

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"


def etcd_command(member: Member, members: list[Member], data_dir: Path, state: str) -> list[str]:
    """etcd for `member` of the cluster `members` ("new" or "existing"), its data in
    data_dir/<name>, with fast raft timing (a lost leader is replaced within about a second)."""
    cluster = ",".join(f"{m.name}={m.peer_url}" for m in members)
    return [
        etcd_binary(),
        "--name",
        member.name,
        "--data-dir",
        str(data_dir / member.name),
        "--listen-client-urls",
        member.client_url,
        "--advertise-client-urls",
        member.client_url,
        "--listen-peer-urls",
        member.peer_url,
        "--initial-advertise-peer-urls",
        member.peer_url,
        "--initial-cluster",
        cluster,
        "--initial-cluster-state",
        state,
        "--initial-cluster-token",
        f"tidemq-test-{members[0].host}-{members[0].peer_port}",
        "--heartbeat-interval",
        "100",
        "--election-timeout",
        "1000",
    ]


class EtcdCluster:
    def __init__(self, members: int, data_dir: Path, log_dir: Path) -> None:
        self.members = [Member(f"etcd{i}", free_port(), free_port()) for i in range(members)]
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.daemons: list[Daemon | None] = [None] * members

    @property
    def endpoints(self) -> str:
        """controllerAddr: the client endpoints, `;`-separated."""
        return ";".join(f"{LOOPBACK}:{m.client_port}" for m in self.members)

    def _command(self, member: Member, state: str) -> list[str]:
        return etcd_command(member, self.members, self.data_dir, state)

    def _launch(self, index: int, state: str) -> Daemon:
        member = self.members[index]
        daemon = Daemon(
            self._command(member, state),
            port=member.peer_port,
            log_path=self.log_dir / f"{member.name}.log",
            name=member.name,
            start_timeout=HEALTH_TIMEOUT,
        )
        self.daemons[index] = daemon
        return daemon.start()

    def start(self) -> Self:
        try:
            for index in range(len(self.members)):
                self._launch(index, "new")
            self.wait_healthy(range(len(self.members)))
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, indexes: range | list[int], timeout: float = HEALTH_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        for index in indexes:
            member = self.members[index]
            while not healthy(member.client_url):
                daemon = self.daemons[index]
                if daemon is None or not daemon.running:
                    tail = "" if daemon is None else daemon.log_tail()
                    raise DaemonError(f"{member.name} exited before it was healthy:\n{tail}")
                if time.monotonic() > deadline:
                    tail = "" if daemon is None else daemon.log_tail()
                    raise DaemonError(f"{member.name} not healthy within {timeout} s:\n{tail}")
                time.sleep(0.05)

    def kill(self, index: int) -> None:
        daemon = self.daemons[index]
        if daemon is not None:
            daemon.kill()

    def restart(self, index: int) -> None:
        """A killed member again, with its data (it rejoins the cluster it was in)."""
        self._launch(index, "existing")
        self.wait_healthy([index])

    def leader_index(self) -> int | None:
        """Which member is the raft leader now (None when none answers)."""
        for index, member in enumerate(self.members):
            status = _get_json(f"{member.client_url}/v3/maintenance/status", b"{}")
            if status is None:
                continue
            header = status.get("header", {})
            if str(status.get("leader")) == str(header.get("member_id")):
                return index
        return None

    def stop(self) -> None:
        for daemon in self.daemons:
            if daemon is not None:
                daemon.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def healthy(client_url: str) -> bool:
    answer = _get_json(f"{client_url}/health", None)
    return answer is not None and answer.get("health") == "true"


def _get_json(url: str, post: bytes | None) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, data=post, timeout=2) as response:
            value = json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return value if isinstance(value, dict) else None
