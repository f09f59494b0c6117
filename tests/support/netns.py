"""Hosts on one machine: a Linux network namespace each, joined through a router namespace.

`Network(["namesrv", "master", ...])` as a context manager builds:

    router namespace  <name>-router   one veth `h<i>` per host, 198.18.<i>.1/24, IPv4 forwarding
    host namespace    <name>-<host>   `eth0` (the veth's other end) 198.18.<i>.2/24, default
                                       route via 198.18.<i>.1; `lo` up

where `<name>` is `tidemq-net-<pid>-<n>`. The addresses are in 198.18.0.0/15 (RFC 2544's range
for test networks) and exist only inside these namespaces: nothing is added to the machine's
own namespace, which cannot reach them. `exec_args(host, argv)` is the command that runs `argv`
inside a host (`ip netns exec`, which execs in place: the pid is the program's).

Faults are rules in the router, on the forward path, so both ends see what a real network does
(silence, not an error from their own stack):

- `cut(a, b)` drops everything from a to b and from b to a; `cut(a, b, both=False)` only a to b;
- `loss(a, b, percent)` drops that share of a's packets to b (nftables `numgen random`);
- `delay(a, b, ms)` holds a's packets to b that long: there is no netem qdisc in this kernel, so
  an iptables NFQUEUE rule hands them to `nfqueue_delay.py`, run in the router namespace, which
  gives each its verdict `ms` later (see that module);
- `restore(a, b)` removes the cuts between a and b, `heal()` every fault; `flap(a, b, down, up)`
  cuts a link for `down` seconds and restores it for `up`, again and again until its task is
  cancelled (and leaves it restored).

The drop rules are one nftables table `inet tidemq`, rewritten whole in one transaction at each
change. `close()` kills the delayers and every process still inside the namespaces, and deletes
them, also after a failure; `clean_leftovers()` (run by every build) does the same for the
namespaces of an earlier run whose process is gone (a crash, a SIGKILLed pytest).
`skip_reason()` says in one line why this machine cannot build networks, or None.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from tests.support.processes import REPO_ROOT

PREFIX: Final = "tidemq-net-"
NETNS_DIR: Final = Path("/run/netns")
SUBNET: Final = "198.18"
COMMANDS: Final = ("ip", "nft", "iptables")
_numbers = itertools.count()
_LEFTOVER = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")


class NetworkError(RuntimeError):
    """A command that builds or changes the network failed (its output is in the message)."""


def run(*args: str, netns: str | None = None, stdin: str | None = None) -> str:
    argv = ["ip", "netns", "exec", netns, *args] if netns else list(args)
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


_skip_reason: list[str | None] = []


def skip_reason() -> str | None:
    """Why network namespace tests cannot run here (one line), or None when they can."""
    if not _skip_reason:
        _skip_reason.append(_find_skip_reason())
    return _skip_reason[0]


def _find_skip_reason() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "network namespaces and nftables need root (CI runs as root)"
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return f"missing commands {', '.join(missing)} (make system-packages installs them)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        run("ip", "netns", "add", probe)
        run("nft", "list", "tables", netns=probe)
    except NetworkError as exc:
        return f"cannot create a network namespace with nftables: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def namespace_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(pid) for pid in out.stdout.split()]


def delete_namespace(netns: str) -> None:
    """Kill what still runs inside `netns` (processes a test put there), then delete it."""
    for _ in range(50):
        pids = namespace_pids(netns)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


def clean_leftovers() -> list[str]:
    """Delete the namespaces an earlier run left (its pid is gone); returns their names."""
    if not NETNS_DIR.is_dir():
        return []
    removed = []
    for entry in sorted(NETNS_DIR.iterdir()):
        match = _LEFTOVER.match(entry.name)
        if match is None or _alive(int(match[1])):
            continue
        delete_namespace(entry.name)
        removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netns_inode(netns: str) -> int:
    return (NETNS_DIR / netns).stat().st_ino


def process_netns_inode(pid: int) -> int:
    """The inode of the network namespace `pid` runs in (equal to `netns_inode` of its name)."""
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on `port` in the network namespace of `pid` (read from
    /proc/<pid>/net/tcp, which shows that process's namespace, not ours)."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    wanted = f":{port:04X}"
    return any(f[1].endswith(wanted) and f[3] == "0A" for f in (ln.split() for ln in lines))


@dataclass(frozen=True)
class Delayer:
    process: subprocess.Popen[bytes]
    queue: int
    rule: tuple[str, ...]  # the iptables match, to delete it


class Network:
    def __init__(self, hosts: Sequence[str], log_dir: Path) -> None:
        if len(set(hosts)) != len(hosts) or not hosts:
            raise ValueError(f"host names must be distinct: {hosts}")
        self.name = f"{PREFIX}{os.getpid()}-{next(_numbers)}"
        self.hosts = list(hosts)
        self.log_dir = log_dir
        self.router = f"{self.name}-router"
        self._drops: list[str] = []  # nftables rule bodies in the forward chain
        self._delayers: list[Delayer] = []
        self._built: list[str] = []
        self.flaps = 0

    # --- names and addresses ----------------------------------------------------------------

    def netns(self, host: str) -> str:
        self._index(host)
        return f"{self.name}-{host}"

    def address(self, host: str) -> str:
        return f"{SUBNET}.{self._index(host) + 1}.2"

    def _index(self, host: str) -> int:
        try:
            return self.hosts.index(host)
        except ValueError:
            raise KeyError(f"no host {host!r} in {self.hosts}") from None

    def exec_args(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns(host), *argv]

    # --- life cycle -------------------------------------------------------------------------

    def build(self) -> Self:
        clean_leftovers()
        try:
            self._add_namespace(self.router)
            run("sysctl", "-qw", "net.ipv4.ip_forward=1", netns=self.router)
            for i, host in enumerate(self.hosts):
                self._add_host(i, host)
            self._apply()
        except BaseException:
            self.close()
            raise
        return self

    def _add_namespace(self, netns: str) -> None:
        run("ip", "netns", "add", netns)
        self._built.append(netns)
        run("ip", "-n", netns, "link", "set", "lo", "up")

    def _add_host(self, i: int, host: str) -> None:
        netns = self.netns(host)
        self._add_namespace(netns)
        side = f"h{i}"
        run("ip", "-n", self.router, "link", "add", side, "type", "veth", "peer", "name", "eth0",
            "netns", netns)  # fmt: skip
        run("ip", "-n", self.router, "addr", "add", f"{SUBNET}.{i + 1}.1/24", "dev", side)
        run("ip", "-n", self.router, "link", "set", side, "up")
        run("ip", "-n", netns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
        run("ip", "-n", netns, "link", "set", "eth0", "up")
        run("ip", "-n", netns, "route", "add", "default", "via", f"{SUBNET}.{i + 1}.1")

    def close(self) -> None:
        for delayer in self._delayers:
            _stop(delayer.process)
        self._delayers.clear()
        for netns in reversed(self._built):
            delete_namespace(netns)
        self._built.clear()

    def __enter__(self) -> Self:
        return self.build()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- faults -----------------------------------------------------------------------------

    def _match(self, a: str, b: str) -> str:
        return f"ip saddr {self.address(a)} ip daddr {self.address(b)}"

    def _apply(self) -> None:
        rules = "".join(f"add rule inet tidemq forward {r}\n" for r in self._drops)
        script = (
            "table inet tidemq {}\ndelete table inet tidemq\n"
            "table inet tidemq {\n chain forward {\n"
            " type filter hook forward priority -10;\n }\n}\n"
            f"{rules}"
        )
        run("nft", "-f", "-", netns=self.router, stdin=script)

    def cut(self, a: str, b: str, *, both: bool = True) -> None:
        """Drop a's packets to b (and b's to a unless `both` is False)."""
        self._drops.append(f"{self._match(a, b)} drop")
        if both:
            self._drops.append(f"{self._match(b, a)} drop")
        self._apply()

    def restore(self, a: str, b: str) -> None:
        """Remove the cuts between a and b (both ways); losses and delays stay."""
        cuts = {f"{self._match(a, b)} drop", f"{self._match(b, a)} drop"}
        self._drops = [rule for rule in self._drops if rule not in cuts]
        self._apply()

    def loss(self, a: str, b: str, percent: int) -> None:
        """Drop `percent` % of a's packets to b, at random."""
        self._drops.append(f"{self._match(a, b)} numgen random mod 100 < {percent} drop")
        self._apply()

    def delay(self, a: str, b: str, ms: float) -> None:
        """Hold each of a's packets to b for `ms` milliseconds (NFQUEUE and nfqueue_delay.py)."""
        queue = len(self._delayers) + 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"delay-{a}-{b}.log").open("wb")
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.router, sys.executable, "-m",
             "tests.support.nfqueue_delay", "--queue", str(queue), "--delay-ms", str(ms)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT,
        )  # fmt: skip
        log.close()
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        if not line.startswith("bound"):
            _stop(process)
            raise NetworkError(f"the delayer did not start: {line!r} (log {log.name})")
        rule = ("FORWARD", "-s", self.address(a), "-d", self.address(b))
        self._delayers.append(Delayer(process, queue, rule))
        run("iptables", "-t", "mangle", "-A", *rule, "-j", "NFQUEUE", "--queue-num", str(queue),
            netns=self.router)  # fmt: skip

    def heal(self) -> None:
        """Remove every cut, loss and delay."""
        for delayer in self._delayers:
            run("iptables", "-t", "mangle", "-D", *delayer.rule, "-j", "NFQUEUE",
                "--queue-num", str(delayer.queue), netns=self.router)  # fmt: skip
            _stop(delayer.process)
        self._delayers.clear()
        self._drops.clear()
        self._apply()

    async def flap(self, a: str, b: str, down: float, up: float) -> None:
        """Cut the a-b link for `down` s, restore it for `up` s, and again, until cancelled;
        the link is left restored. Counts its cuts in `flaps`."""
        try:
            while True:
                self.cut(a, b)
                self.flaps += 1
                await asyncio.sleep(down)
                self.restore(a, b)
                await asyncio.sleep(up)
        finally:
            self.restore(a, b)

    def ruleset(self) -> str:
        """The router's nftables and iptables rules (for a failing test's message)."""
        nft = run("nft", "list", "ruleset", netns=self.router)
        ipt = run("iptables", "-t", "mangle", "-S", netns=self.router)
        return nft + ipt


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()
