"""The one accept loop of a listening socket: remoting's TLS ports (broker/remoting/tls.py) and
guarded HA ports (ha/transport.py) both accept their sockets through it.

The loop accepts each socket itself, so that a peer is judged before its connection has a
transport: `screen(address)` is asked first (False: the socket is closed before a byte is read
or sent; the caller logs why), then, when `max_pending` is set and that many sockets already
wait for their admission, the socket is closed with one log line. Each socket that passes is
handed to `admit(conn, address)` in a task of its own: the caller peeks at it, runs its TLS
handshake or its proof, and hands it to asyncio (`connect_accepted_socket`); `admit` owns the
socket and closes it when it refuses it or fails. An accept that fails (EMFILE and the like) is
logged and retried after `ACCEPT_RETRY` seconds: the port stays open.

`close()` cancels the loop and the admissions still running and closes the socket at once;
`stop()` cancels them, waits for them to end, then closes the socket. A connection that its
admission has handed over belongs to its service, not to this loop: `handed_over()`, called from
the admission's task, takes that task out of the loop's care.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any, Final

log = logging.getLogger(__name__)

ACCEPT_RETRY: Final = 0.1

Screen = Callable[[str], bool]
Admit = Callable[[socket.socket, str], Coroutine[Any, Any, None]]


def peer_text(address: object) -> str:
    """ "host:port" of an accepted socket's address."""
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def listening_socket(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A bound, listening TCP socket, as `create_server` makes one (SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


class AcceptLoop:
    """Accepts on `sock` and hands each screened socket to `admit` (see the module docstring).
    `name` starts the loop's log lines ("HA", "broker-remoting")."""

    def __init__(
        self,
        sock: socket.socket,
        admit: Admit,
        name: str,
        *,
        screen: Screen | None = None,
        max_pending: int | None = None,
    ) -> None:
        self.sock = sock
        self.name = name
        self._admit = admit
        self._screen = screen
        self._max_pending = max_pending
        self._task: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.sock.setblocking(False)
        self._task = asyncio.get_running_loop().create_task(
            self._accept_loop(), name=f"{self.name}-accept"
        )

    @property
    def admitting(self) -> int:
        """Sockets accepted and not yet handed over (peeked at, in their handshake)."""
        return len(self._admitting)

    def handed_over(self) -> None:
        """Called by an admission: its connection now belongs to its service."""
        current = asyncio.current_task()
        if current is not None:
            self._admitting.discard(current)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(self.sock)
            except OSError as exc:  # EMFILE and the like: the port stays open
                log.warning("%s: accept failed: %s", self.name, exc)
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            peer = peer_text(address)
            if self._screen is not None and not self._screen(peer):
                conn.close()
                continue
            if self._max_pending is not None and len(self._admitting) >= self._max_pending:
                log.warning(
                    "%s: connection from %s refused: %d connections already wait for admission",
                    self.name,
                    peer,
                    self._max_pending,
                )
                conn.close()
                continue
            task = loop.create_task(self._admit(conn, peer))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    def _tasks(self) -> list[asyncio.Task[None]]:
        return [task for task in (self._task, *self._admitting) if task is not None]

    def close(self) -> None:
        """Cancel the loop and the admissions; close the socket now."""
        for task in self._tasks():
            task.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._tasks(), return_exceptions=True)

    async def stop(self) -> None:
        """Cancel the loop and the admissions, wait for them, then close the socket."""
        tasks = self._tasks()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        self.sock.close()
