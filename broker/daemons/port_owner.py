"""Is a TCP port free, and if not, which process holds it (Linux: /proc).

`port_is_free(host, port)` binds a throw-away socket the way the daemons' servers bind
(SO_REUSEADDR on, so a port left in TIME_WAIT counts as free, as it is for them).
`holders(port)` names the processes with a socket bound to `port`: the socket inodes come from
`/proc/net/tcp` and `/proc/net/tcp6` (one line per socket: `sl local_address rem_address st
... uid timeout inode`, addresses as hex `IP:PORT`, state 0A = LISTEN), and a process holds an
inode when one of `/proc/<pid>/fd/*` links to `socket:[<inode>]`. Processes of other users
cannot be read: then the answer says that some process holds it, with the owner's uid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterable
from pathlib import Path

__all__ = ["PortHolder", "describe_holders", "holders", "listening_inodes", "port_is_free"]

PROC = Path("/proc")
LISTEN_STATE = "0A"


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could bind `host:port` now (any IPv4 address for 0.0.0.0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class PortHolder:
    """A process with a socket on the port; pid 0 when the process cannot be read."""

    pid: int
    command: str
    uid: int
    listening: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Socket:
    inode: int
    uid: int
    listening: bool


def _sockets_on(port: int) -> list[_Socket]:
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local_port = int(fields[1].rpartition(":")[2], 16)
            if local_port == port and fields[9] != "0":
                found.append(_Socket(int(fields[9]), int(fields[7]), fields[3] == LISTEN_STATE))
    return found


def listening_inodes(port: int) -> set[int]:
    """The inodes of the sockets listening on `port` (any address)."""
    return {s.inode for s in _sockets_on(port) if s.listening}


def _socket_inodes_of(pid: str) -> set[int]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.scandir(PROC / pid / "fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def pid_listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` itself has a socket listening on `port`."""
    return bool(listening_inodes(port) & _socket_inodes_of(str(pid)))


def _command_of(pid: str) -> str:
    try:
        raw = (PROC / pid / "cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "?"


def holders(port: int) -> list[PortHolder]:
    """The processes holding a socket on `port`, listeners first."""
    sockets = {s.inode: s for s in _sockets_on(port)}
    if not sockets:
        return []
    found: dict[int, PortHolder] = {}
    seen: set[int] = set()
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        for inode in _socket_inodes_of(entry.name) & sockets.keys():
            seen.add(inode)
            sock = sockets[inode]
            pid = int(entry.name)
            if pid not in found or sock.listening:
                found[pid] = PortHolder(pid, _command_of(entry.name), sock.uid, sock.listening)
    unseen = [s for inode, s in sockets.items() if inode not in seen]
    result = sorted(found.values(), key=lambda h: (not h.listening, h.pid))
    result += [PortHolder(0, "", s.uid, s.listening) for s in unseen[:1]]
    return result


def _shorten(command: str, limit: int = 100) -> str:
    return command if len(command) <= limit else command[: limit - 3] + "..."


def describe_holders(found: Iterable[PortHolder]) -> str:
    """`pid 123 (python -m ...)`, or who owns a process this user cannot read."""
    parts = [
        f"pid {h.pid} ({_shorten(h.command)})"
        if h.pid
        else f"a process of uid {h.uid} that this user cannot inspect"
        for h in found
    ]
    return ", ".join(parts) if parts else "an unknown process (no socket found in /proc/net/tcp)"
