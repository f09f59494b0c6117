"""A remoting server: accepts connections and hands each request to a dispatcher.

Requests are dispatched by code through a table (`register(code, processor)`); an unknown code
gets REQUEST_CODE_NOT_SUPPORTED. Connections idle for longer than `idle_timeout` are closed, as
Netty's idle handler does for RocketMQ (120 s). `stop()` stops accepting, lets requests in flight
finish (up to a grace period), then closes every connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from client.remoting.codes import ResponseCode
from client.remoting.command import RemotingCommand
from client.remoting.connection import RemotingConnection
from client.remoting.frame import DEFAULT_MAX_FRAME_SIZE

log = logging.getLogger(__name__)

Processor = Callable[[RemotingConnection, RemotingCommand], Awaitable[RemotingCommand | None]]
ConnectionListener = Callable[[RemotingConnection], None]


class RemotingServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float = 120.0,
        name: str = "remoting",
    ) -> None:
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.idle_timeout = idle_timeout
        self.name = name
        self.processors: dict[int, Processor] = {}
        self.default_processor: Processor | None = None
        self.connections: set[RemotingConnection] = set()
        self.on_connection_closed: list[ConnectionListener] = []
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.host, self.port, reuse_address=True, backlog=1024
        )
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._idle_task = loop.create_task(self._close_idle(), name=f"{self.name}-idle")
        log.info("%s listening on %s:%d", self.name, self.host, self.port)

    def _new_connection(self) -> RemotingConnection:
        connection = RemotingConnection(
            self._dispatch,
            max_frame_size=self.max_frame_size,
            on_close=self._closed,
            name=self.name,
        )
        self.connections.add(connection)
        return connection

    def _closed(self, connection: RemotingConnection) -> None:
        self.connections.discard(connection)
        for listener in self.on_connection_closed:
            try:
                listener(connection)
            except Exception:
                log.exception("connection-closed listener failed")

    async def _dispatch(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        processor = self.processors.get(request.code, self.default_processor)
        if processor is None:
            log.warning(
                "%s: request code %d from %s not supported",
                self.name,
                request.code,
                connection.peer,
            )
            return RemotingCommand.response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request type {request.code} not supported",
            )
        return await processor(connection, request)

    async def _close_idle(self) -> None:
        interval = max(0.5, min(10.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for connection in list(self.connections):
                if (
                    now - connection.last_activity > self.idle_timeout
                    and not connection.requests_in_flight
                ):
                    log.info("%s: closing idle connection %s", self.name, connection.peer)
                    connection.close()

    async def stop(self, grace: float = 5.0) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        if self._server is not None:
            self._server.close()
        connections = list(self.connections)
        if connections:
            await asyncio.gather(*(c.wait_requests_done(grace) for c in connections))
        for connection in connections:
            connection.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), grace)
            except TimeoutError:
                for connection in list(self.connections):
                    connection.abort()
            self._server = None
