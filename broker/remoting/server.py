"""A remoting server: accepts connections and hands each request to a dispatcher.

Requests are dispatched by code through a table (`register(code, processor)`); an unknown code
gets REQUEST_CODE_NOT_SUPPORTED. Connections idle for longer than `idle_timeout` are closed, as
Netty's idle handler does for RocketMQ (120 s). `stop()` stops accepting, lets requests in flight
finish (up to a grace period), then closes every connection.

The request pipeline (RocketMQ's NettyRequestProcessor with its RPCHooks):

- A processor refuses a request by raising `RequestRejected(code, remark)`; the dispatch answers
  it with that code and remark, in the request's serialisation. Any other exception is a bug:
  the connection logs it and answers SYSTEM_ERROR (see `RemotingConnection`).
- A gate (`gate`, broker/name_gate.py) checks the names of each request first; it refuses by
  raising `RequestRejected` like a processor.
- Hooks (`add_hook`) run around every request that has a processor, in the order they were
  added: `before_request` may refuse it by raising `RequestRejected` (the processor then does not
  run), `after_response` sees the response about to be sent (None for a processor that answers
  nothing). They are the place for checks and counts that apply to every request (access
  control, flow control, per-request statistics). Hooks are synchronous: they must not wait.
  With none added, a request pays one test of an empty tuple (no allocation, no extra call).

Limits on what connections may hold (`ReceiveLimits`, broker.remoting.limits, issue 30 item 4):
past `max_connections` a new connection is aborted as soon as it is accepted (on a TLS port
before its first byte is read); the bytes of partly received frames are counted per connection
and for the whole server (`partial_frames`); the periodic sweep that closes idle connections
also closes those whose frame is overdue. Every such close, and every idle close, is one line
of the server's `close_log`: at most ten a second, then one summary line.
"""

from __future__ import annotations

import asyncio
import logging
import time
import typing
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from tidemq.broker.remoting.close_log import CloseLog
from tidemq.broker.remoting.limits import DEFAULT_LIMITS, PartialFrames, ReceiveLimits
from tidemq.broker.remoting.tls import TlsAcceptor, TlsServerSettings
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.client.transport.connection import ReadScope, RemotingConnection
from tidemq.common.accept import listening_socket
from tidemq.common.errors import TideMQError

log = logging.getLogger(__name__)

Processor = Callable[[RemotingConnection, RemotingCommand], Awaitable[RemotingCommand | None]]
# A processor marked `answers_at_once`: its response itself (None: none) when it has nothing to
# wait for, else an awaitable of it; the connection then makes no coroutine for the request.
AtOnceProcessor = Callable[
    [RemotingConnection, RemotingCommand],
    Awaitable[RemotingCommand | None] | RemotingCommand | None,
]
_AT_ONCE: Final = "answers_at_once"
F = typing.TypeVar("F", bound=Callable[..., object])


def answers_at_once(method: F) -> F:
    """Mark a processor (method) as an `AtOnceProcessor`: `register` serves it through
    `dispatch_now`, with no coroutine for a request it answers at once (END_TRANSACTION)."""
    setattr(method, _AT_ONCE, True)
    return method


ConnectionListener = Callable[[RemotingConnection], None]


class RequestRejected(TideMQError):
    """A request refused with a response `code` and a `remark` saying why (h11's
    `RemoteProtocolError(error_status_hint=)`): raised by processors and hooks, answered by the
    server's dispatch. Not an error of the server: nothing is logged."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class RequestGate(Protocol):
    """Checks a request before its processor and hooks run (broker/name_gate.py's NameGate)."""

    def check(self, request: RemotingCommand) -> None:
        """Raise `RequestRejected` to refuse `request`."""


class RequestHook(Protocol):
    """Runs around every dispatched request (RocketMQ's RPCHook)."""

    def before_request(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        """Called before the processor; raise `RequestRejected` to refuse the request."""

    def after_response(
        self,
        connection: RemotingConnection,
        request: RemotingCommand,
        response: RemotingCommand | None,
    ) -> None:
        """Called with the response before it is sent (also a rejection's)."""


class RemotingServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float = 120.0,
        name: str = "remoting",
        tls: TlsServerSettings | None = None,
        limits: ReceiveLimits = DEFAULT_LIMITS,
    ) -> None:
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.idle_timeout = idle_timeout
        self.name = name
        self.limits = limits
        self.close_log = CloseLog(log, name)
        self.partial_frames = PartialFrames(limits, self.close_log)
        self.processors: dict[int, Processor] = {}
        # The processors marked `answers_at_once`, by code (also in `processors`, awaited):
        # the connections call `dispatch_now` for these codes.
        self.now_processors: dict[int, AtOnceProcessor] = {}
        self.default_processor: Processor | None = None
        self.connections: set[RemotingConnection] = set()
        self.on_connection_closed: list[ConnectionListener] = []
        # Brackets the requests of each read of every connection accepted after it is set.
        self.read_scope: ReadScope | None = None
        # A tuple, rebuilt on each add: the dispatch tests it for emptiness and iterates it
        # without a copy or an allocation per request.
        self.hooks: tuple[RequestHook, ...] = ()
        # The first step of every dispatched request: it refuses hostile names before any
        # hook or processor sees them.
        self.gate: RequestGate | None = None
        self._server: asyncio.Server | None = None
        # TLS ports accept connections themselves (broker/remoting/tls.py); plaintext ones
        # through asyncio's server.
        self.tls = tls if tls is not None and tls.enabled else None
        self._tls_acceptor: TlsAcceptor | None = None
        self._sweep_task: asyncio.Task[None] | None = None

    def register(self, code: int, processor: Processor | AtOnceProcessor) -> None:
        code = int(code)
        if getattr(processor, _AT_ONCE, False):
            self.now_processors[code] = processor
            self.processors[code] = _awaiting(processor)
        else:
            self.now_processors.pop(code, None)
            self.processors[code] = typing.cast(Processor, processor)

    def add_hook(self, hook: RequestHook) -> None:
        """Run `hook` around every request from now on, after the hooks added before it."""
        self.hooks = (*self.hooks, hook)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.tls is not None:
            context = self.tls.context()
            sock = listening_socket(self.host, self.port)
            self.port = sock.getsockname()[1]
            self._tls_acceptor = TlsAcceptor(
                sock, self._new_connection, context, self.tls.mode, self.name, self._has_room
            )
            self._tls_acceptor.start()
        else:
            self._server = await loop.create_server(
                self._new_connection, self.host, self.port, reuse_address=True, backlog=1024
            )
            sockets = self._server.sockets
            if sockets:
                self.port = sockets[0].getsockname()[1]
        self._sweep_task = loop.create_task(self._sweep(), name=f"{self.name}-sweep")
        tls = f" (TLS {self.tls.mode.value})" if self.tls is not None else ""
        log.info("%s listening on %s:%d%s", self.name, self.host, self.port, tls)

    def _new_connection(self) -> asyncio.BaseProtocol:
        if len(self.connections) >= self.limits.max_connections:
            return _Refused(self.close_log, self.limits.max_connections)
        connection = RemotingConnection(
            self.dispatch,
            handler_now=self.dispatch_now,
            now_codes=self.now_processors,
            max_frame_size=self.max_frame_size,
            on_close=self._closed,
            name=self.name,
            read_scope=self.read_scope,
            hold=self.partial_frames.hold(),
        )
        self.connections.add(connection)
        return connection

    def _has_room(self, peer: str) -> bool:
        """Whether a TLS port may take a connection from `peer` (those still in their
        handshake count too); if not, the refusal is logged."""
        admitting = self._tls_acceptor.admitting if self._tls_acceptor is not None else 0
        if len(self.connections) + admitting < self.limits.max_connections:
            return True
        self.close_log.closed(*_too_many(peer, self.limits.max_connections))
        return False

    def _closed(self, connection: RemotingConnection) -> None:
        self.connections.discard(connection)
        for listener in self.on_connection_closed:
            try:
                listener(connection)
            except Exception:
                log.exception("connection-closed listener failed")

    async def dispatch(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        """The response to `request` (None: the processor answers nothing). Exceptions other
        than `RequestRejected` propagate to the connection, which logs them and answers
        SYSTEM_ERROR."""
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
        hooks = self.hooks
        response: RemotingCommand | None
        try:  # free in 3.11 unless something raises
            if self.gate is not None:
                self.gate.check(request)
            if hooks:  # in this frame: a coroutine layer fewer for every request (ACL's)
                for hook in hooks:
                    hook.before_request(connection, request)
            response = await processor(connection, request)
        except RequestRejected as rejected:
            response = RemotingCommand.response_to(request, rejected.code, rejected.remark)
        if hooks:
            for hook in hooks:
                hook.after_response(connection, request, response)
        return response

    def dispatch_now(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        """`dispatch` of a request whose processor `answers_at_once` (the connections call it
        for those codes): the response when the processor answered at once, with no coroutine
        made, else an awaitable of it."""
        processor = self.now_processors.get(request.code)
        if processor is None:  # not (or no longer) one
            return self.dispatch(connection, request)
        hooks = self.hooks
        try:  # free in 3.11 unless something raises
            if self.gate is not None:
                self.gate.check(request)
            if hooks:
                for hook in hooks:
                    hook.before_request(connection, request)
            answer = processor(connection, request)
        except RequestRejected as rejected:
            answer = RemotingCommand.response_to(request, rejected.code, rejected.remark)
        if answer is not None and not isinstance(answer, RemotingCommand):
            return self._finish(connection, request, answer, hooks)
        if hooks:
            for hook in hooks:
                hook.after_response(connection, request, answer)
        return answer

    async def _finish(
        self,
        connection: RemotingConnection,
        request: RemotingCommand,
        answer: Awaitable[RemotingCommand | None],
        hooks: tuple[RequestHook, ...],
    ) -> RemotingCommand | None:
        """The rest of `dispatch_now` for a processor that answers with an awaitable."""
        response: RemotingCommand | None
        try:
            response = await answer
        except RequestRejected as rejected:
            response = RemotingCommand.response_to(request, rejected.code, rejected.remark)
        if hooks:
            for hook in hooks:
                hook.after_response(connection, request, response)
        return response

    async def _sweep(self) -> None:
        """Close idle connections and those whose frame is overdue; log the closes' summary."""
        interval = max(0.25, min(10.0, self.idle_timeout / 4, self.limits.frame_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for connection in list(self.connections):
                if connection.close_if_frame_overdue(now):
                    continue
                if (
                    now - connection.last_activity > self.idle_timeout
                    and not connection.requests_in_flight
                ):
                    self.close_log.closed(
                        "idle", f"closing idle connection {connection.peer}", logging.INFO
                    )
                    connection.close()
            self.close_log.flush()

    async def stop(self, grace: float = 5.0) -> None:
        if self._sweep_task is not None:
            self._sweep_task.cancel()
            self._sweep_task = None
        if self._server is not None:
            self._server.close()
        if self._tls_acceptor is not None:
            await self._tls_acceptor.stop()
            self._tls_acceptor = None
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
        self.close_log.flush(final=True)


def _awaiting(processor: AtOnceProcessor) -> Processor:
    """An `AtOnceProcessor` as a `Processor` (for `dispatch`)."""

    async def awaited(
        connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        answer = processor(connection, request)
        if answer is None or isinstance(answer, RemotingCommand):
            return answer
        return await answer

    return awaited


def _too_many(peer: str, limit: int) -> tuple[str, str]:
    reason = "too many connections"
    return reason, f"closing connection {peer}: {reason}: serverMaxConnections={limit} open"


class _Refused(asyncio.Protocol):
    """A connection over `max_connections`: aborted as soon as it is made, with one line."""

    def __init__(self, close_log: CloseLog, limit: int) -> None:
        self._close_log = close_log
        self._limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._close_log.closed(*_too_many(text, self._limit))
        typing.cast(asyncio.Transport, transport).abort()
