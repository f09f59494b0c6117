"""A remoting client: one connection per broker or name-server address, opened on demand.

`invoke(addr, request, timeout)` sends a request and returns the response; `invoke_oneway`
sends without waiting. A broken connection is dropped and the next call reconnects. Requests the
peer initiates (NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET, ...) go to the
handler given at construction. Connections unused for `idle_timeout` are closed. With a `tls`
context every connection is TLS, the server's certificate checked as the context says. With a
`signer` every request it sends is signed just before it goes (RocketMQ's RPC hook on its
NettyRemotingClient): what a broker sends on its own behalf.

Failures are `client.errors` exceptions, raised here and nowhere translated again: `ConnectError`
(the address cannot be reached, or `ConnectionClosedError`: the connection closed while a call
waited) and `RequestTimeoutError`. They keep the builtin bases `ConnectionError` and
`TimeoutError`, so `except TimeoutError` still catches a call that timed out.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

from tidemq.client.errors import ConnectError, RequestTimeoutError
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.client.remoting.signing import Signer
from tidemq.client.transport.connection import (
    BufferedRemotingConnection,
    RemotingConnection,
    RequestHandler,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT = 3.0


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def timeout_error(address: str, code: int, timeout: float) -> RequestTimeoutError:
    """What a request of `code` to `address` raises when no response came in `timeout` s."""
    return RequestTimeoutError(
        f"no response from {address} to request code {code} in {timeout:.1f} s"
    )


class RemotingClient:
    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float = 120.0,
        tls: ssl.SSLContext | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._handler = handler
        self._signer = signer
        # Connections are TLS with this context (broker/remoting/tls.py), verifying the server.
        self.tls = tls
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.idle_timeout = idle_timeout
        self._connections: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._idle_task: asyncio.Task[None] | None = None
        self._closed = False

    async def connection(self, address: str) -> RemotingConnection:
        existing = self._connections.get(address)
        if existing is not None and existing.is_open:
            return existing
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:
            existing = self._connections.get(address)
            if existing is not None and existing.is_open:
                return existing
            return await self._connect(address)

    async def _connect(self, address: str) -> RemotingConnection:
        if self._closed:
            raise ConnectError("client is shut down")
        host, port = split_address(address)
        loop = asyncio.get_running_loop()

        def factory() -> RemotingConnection:
            return BufferedRemotingConnection(
                self._handler,
                max_frame_size=self.max_frame_size,
                on_close=lambda c: self._forget(address, c),
                name=address,
            )

        try:
            _transport, connection = await asyncio.wait_for(
                loop.create_connection(
                    factory,
                    host,
                    port,
                    ssl=self.tls,
                    server_hostname=host if self.tls is not None else None,
                ),
                self.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise ConnectError(f"cannot connect to {address}: {exc}") from exc
        self._connections[address] = connection
        if self._idle_task is None and self.idle_timeout > 0:
            self._idle_task = loop.create_task(self._close_idle(), name="remoting-client-idle")
        return connection

    def _forget(self, address: str, connection: RemotingConnection) -> None:
        if self._connections.get(address) is connection:
            del self._connections[address]

    async def invoke(
        self, address: str, request: RemotingCommand, timeout: float
    ) -> RemotingCommand:
        """Send `request` to `address` and return its response within `timeout` seconds."""
        if self._signer is not None:
            self._signer.sign(request)
        connection = self._connections.get(address)
        if connection is not None and connection.is_open:
            remaining = timeout  # connected: nothing of the timeout spent yet
        else:
            deadline = time.monotonic() + timeout
            connection = await self.connection(address)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeoutError(f"timed out connecting to {address}")
        try:
            return await connection.request(request, remaining)
        except TimeoutError:
            raise self.timed_out(address, request, timeout) from None

    def ready_connection(self, address: str) -> RemotingConnection | None:
        """The open connection to `address` when a request can go on it as it is (this client
        signs nothing of its own); else None, and `invoke` connects or signs. A hot caller
        awaits its `request` directly, with `timed_out` for its TimeoutError, as invoke does."""
        if self._signer is not None:
            return None
        connection = self._connections.get(address)
        if connection is not None and connection.is_open:
            return connection
        return None

    @staticmethod
    def timed_out(address: str, request: RemotingCommand, timeout: float) -> RequestTimeoutError:
        return timeout_error(address, request.code, timeout)

    async def invoke_oneway(
        self, address: str, request: RemotingCommand, timeout: float | None = None
    ) -> None:
        """Send `request` without waiting for an answer: after a connect (bounded by the
        connect timeout) and, on a paused connection, a wait of at most `timeout` seconds."""
        if self._signer is not None:
            self._signer.sign(request)
        connection = await self.connection(address)
        await connection.oneway(request, timeout)

    def close_connection(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    @property
    def addresses(self) -> list[str]:
        return list(self._connections)

    async def _close_idle(self) -> None:
        interval = max(0.5, min(10.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for address, connection in list(self._connections.items()):
                if (
                    now - connection.last_activity > self.idle_timeout
                    and not connection.requests_in_flight
                ):
                    self.close_connection(address)

    async def close(self) -> None:
        self._closed = True
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        for connection in connections:
            try:
                await asyncio.wait_for(connection.closed.wait(), 1.0)
            except TimeoutError:
                connection.abort()
