"""One remoting connection on asyncio: the thin adapter between a socket and the frame codec.

Either side may send requests: a client sends requests and receives responses matched by
`opaque`, and also serves requests the broker initiates (NOTIFY_CONSUMER_IDS_CHANGED); a server
does the reverse. Every wait for a response has a timeout. A frame that does not decode closes
this connection (with a log line) and fails its pending calls; nothing else is affected. A
connection that closes in the middle of a frame logs how many bytes of it were discarded.

A server's connections are given a `FrameHold` (the protocol below; the server's is
broker/remoting/limits.py's, so the client never imports the broker): after a read that
leaves part of a frame, or empties one, the bytes the codec holds are counted there, and a
connection over a limit (its partial frame too large, the server's budget spent, the frame too
slow) drops those bytes and is aborted, with one line in the server's rate-limited `CloseLog`
(which also takes the "closed mid-frame" lines of those connections). A read that completes
its frames and leaves nothing pays a look at the codec's count (some 0.15 us).

A request is handled as soon as its frame is decoded, in the read callback: a processor that
answers without waiting (a send to an ASYNC_FLUSH master, most queries) completes there and no
task is made for it; a handler may also answer with the response itself instead of an awaitable
(the broker's END_TRANSACTION with nothing to wait for), and then no coroutine is made for the
request either. One that waits (a long-polling pull, a SYNC_MASTER send) continues in a task
of its own from where it stopped (`_resume`), so it does not hold up the requests behind it;
responses go back in whatever order they complete, as RocketMQ's do.

A read's requests are stored and answered in steps of `_GATHER_STEP` answered requests (oneway
requests and responses do not count: they get no answer), each step's appends written together
before its answers.

The broker's connections are read with `data_received` (uvloop hands over a `bytes` per read);
the client's are `BufferedRemotingConnection`s, read straight into reused buffers
(`receive.FrameReceiver`), so a large response's body comes as a view with no copy of its own.

Outgoing frames are gathered and written together once the event loop has run everything that was
ready: the requests that arrived in one read are answered in the same iteration, and one write
call for all their responses saves a system call per response (on loopback, the kernel's send
path is the largest single cost of a small request). The delay is that of one loop iteration.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import operator
import time
import typing
from collections.abc import Awaitable, Callable, Container, Coroutine
from typing import Any, Final

from tidemq.client.errors import ConnectError
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import FrameError
from tidemq.client.remoting.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_command_parts
from tidemq.client.transport.eager import Continuation
from tidemq.client.transport.receive import FrameReceiver

# A read's requests are stored and answered this many at a time: the peer starts on the first
# answers while the broker stores the next ones. A whole read at once (a client's window of 64)
# made the two sides take turns, each idle while the other worked: single sends went 35k -> 48k
# msg/s when this came in, for one more write per 16 requests.
_GATHER_STEP: Final = 16

log = logging.getLogger(__name__)

RequestHandler = Callable[
    ["RemotingConnection", RemotingCommand], Awaitable[RemotingCommand | None]
]
# A request's answer (None: none) when there is nothing to wait for, else an awaitable of it: the
# handler of the `now_codes` (a broker's END_TRANSACTION), with no coroutine for such a request.
RequestHandlerNow = Callable[
    ["RemotingConnection", RemotingCommand],
    Awaitable[RemotingCommand | None] | RemotingCommand | None,
]


class ReadScope(typing.Protocol):
    """Brackets the handling of the requests that arrived in one read (e.g. the store gathers
    their appends and writes them with one system call at `end_read`, before any response
    goes out: responses are written only after the read callback returns)."""

    def begin_read(self) -> None: ...

    def end_read(self) -> None: ...


class ClosingLog(typing.Protocol):
    """Where a connection closed for a limit says why (broker/remoting/close_log.py)."""

    def closed(self, reason: str, line: str, level: int = ...) -> None: ...


class FrameHold(typing.Protocol):
    """The account of one server connection's partial frame (broker/remoting/limits.py)."""

    @property
    def held(self) -> int: ...

    @property
    def close_log(self) -> ClosingLog: ...

    def update(self, held: int, completed: bool, now: float) -> tuple[str, str] | None: ...

    def overdue(self, now: float) -> tuple[str, str] | None: ...

    def release(self) -> None: ...


# Pause reading from a peer when this much of our output to it is waiting to be sent.
WRITE_HIGH_WATER = 4 * 1024 * 1024


class ConnectionClosedError(ConnectError):
    """The connection closed while a call was waiting for its response."""


class RemotingConnection(asyncio.BaseProtocol):
    """A connection read with `data_received` (the broker's; `BufferedRemotingConnection` for
    the client's). A BaseProtocol, not an asyncio.Protocol: uvloop treats anything that is an
    asyncio.Protocol as one even when it is also a BufferedProtocol, so the buffered subclass
    could not be one."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        on_close: Callable[[RemotingConnection], None] | None = None,
        name: str = "",
        read_scope: ReadScope | None = None,
        hold: FrameHold | None = None,
        handler_now: RequestHandlerNow | None = None,
        now_codes: Container[int] = (),
    ) -> None:
        self._handler = handler
        # Requests of these codes go to `handler_now` (the server's live table of them).
        self._handler_now = handler_now
        self._now_codes = now_codes
        self._read_scope = read_scope
        self._hold = hold  # a server's connection: the account of its partial frame
        self._decoder = FrameDecoder(max_frame_size)
        # What turns a read's delivery into commands (the buffered subclass swaps in its own).
        self._decode: Callable[[Any], list[RemotingCommand]] = self._decoder.feed
        self._on_close = on_close
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # (deadline, opaque) of requests in sending order, while their deadlines come in that
        # order too (one timeout for every request, the usual case): one timer, armed for the
        # first, serves them all, instead of a timer made and cancelled per request.
        self._deadlines: collections.deque[tuple[float, int]] = collections.deque()
        self._expiry: asyncio.TimerHandle | None = None
        self._opaques = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        # The loop this connection runs on, taken at its first use: asyncio.get_running_loop()
        # makes a getpid() system call (CPython 3.11's fork check) each time it is asked.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outgoing: list[Body] = []  # frames sent since the last flush, written together
        self._handling: set[asyncio.Task[None]] = set()
        # The futures of requests waiting without a task (`_StepOnce`).
        self._stepped: set[asyncio.Future[Any]] = set()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.closed = asyncio.Event()
        self.name = name
        self.peer = ""
        self.last_activity = time.monotonic()
        # Free-form slot for the owner (e.g. the broker's client channel info).
        self.attachment: Any = None

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses (not even BaseTransport), so
        # no isinstance check here: a stream transport has every method this class calls.
        self._transport = typing.cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.last_activity = time.monotonic()

    def _received(self, received: Any) -> None:
        """A read's delivery (the bytes, or, buffered, how many reached the buffer): the commands
        it completes are handled; a malformed frame closes the connection."""
        self.last_activity = now = time.monotonic()
        try:
            commands = self._decode(received)
        except FrameError as exc:
            log.warning("closing connection %s: malformed frame: %s", self.peer, exc)
            self.close()
            return
        hold = self._hold
        if hold is not None:
            held = self._held_bytes()
            if (held or hold.held) and self._over_limit(hold.update(held, bool(commands), now)):
                return
        if not commands:
            return
        scope = self._read_scope
        if scope is None or len(commands) < 2:
            self._take(commands)
            return
        count = len(commands)
        # Counted steps only for a read with a oneway request (a scan in C, for plain sends)
        counted = count > _GATHER_STEP and _ONEWAY in map(_FLAG, commands)
        start = 0
        while start < count:
            scope.begin_read()
            try:
                if counted:
                    start = self._take_step(commands, start)
                else:
                    end = start + _GATHER_STEP
                    self._take(commands[start:end] if count > _GATHER_STEP else commands)
                    start = end
            finally:
                try:
                    scope.end_read()
                except Exception:
                    # What these requests stored did not reach the file: their answers must not go
                    # out as successes. The peer sees the connection fail instead.
                    log.exception("closing connection %s: its requests' appends failed", self.peer)
                    self._outgoing.clear()
                    self.abort()
                    return
            if start < count:
                self._flush()  # the stored part's answers go out now

    # The read path itself under the protocol's name: the broker's reads make no extra call.
    data_received = _received

    def _take(self, commands: list[RemotingCommand]) -> None:
        for command in commands:
            if command.flag & 1:  # is_response, inline: a property call per response
                future = self._pending.pop(command.opaque, None)
                if future is None:
                    log.debug("response %d from %s matches no request", command.opaque, self.peer)
                elif not future.done():
                    future.set_result(command)
            else:
                self._start_handling(command)

    def _take_step(self, commands: list[RemotingCommand], start: int) -> int:
        """`_take` of `commands` from `start` on, up to `_GATHER_STEP` requests that get an
        answer: a oneway request (a transaction's END) or a response gets none, so it does not
        count toward a step, and goes with the answers around it instead of a write and an
        append of its own. Where it stopped (before the next answered request)."""
        answered = 0
        for at in range(start, len(commands)):
            command = commands[at]
            flag = command.flag
            if flag & 1:
                self._take([command])  # a response, rare on a server's connection
                continue
            if not flag & 2:  # answered: neither a response nor oneway
                if answered == _GATHER_STEP:
                    return at
                answered += 1
            self._start_handling(command)
        return len(commands)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._outgoing.clear()
        cut_short = self._buffered_bytes()  # a failed decoder has buffered nothing
        if self._hold is not None:
            self._hold.release()
            if cut_short:
                self._hold.close_log.closed(
                    "closed by the peer mid-frame",
                    f"connection {self.peer} closed with an incomplete frame: "
                    f"{cut_short} bytes discarded",
                )
        elif cut_short:
            log.warning(
                "connection %s closed with an incomplete frame: %d bytes discarded",
                self.peer,
                cut_short,
            )
        reason = f"connection to {self.peer or self.name} closed"
        for future in self._pending.values():
            if not future.done():
                # One exception per waiter: it reaches the caller as it is, with its own traceback.
                future.set_exception(ConnectionClosedError(reason))
        self._pending.clear()
        self._deadlines.clear()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._can_write.set()
        self.closed.set()
        if self._on_close is not None:
            self._on_close(self)

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost follows

    def _buffered_bytes(self) -> int:
        return self._decoder.buffered

    def _held_bytes(self) -> int:
        """The memory held for an incomplete frame (here the bytes received of it)."""
        return self._decoder.buffered

    def _discard_partial(self, reason: str) -> None:
        self._decoder.discard(reason)

    def _over_limit(self, refusal: tuple[str, str] | None) -> bool:
        """Close for `refusal` (reason, detail) when there is one; whether it closed."""
        if refusal is None:
            return False
        assert self._hold is not None
        reason, detail = refusal
        self._discard_partial(reason)  # the memory goes now, not when the object does
        self._hold.release()
        self._hold.close_log.closed(reason, f"closing connection {self.peer}: {reason}: {detail}")
        self._outgoing.clear()
        self.abort()
        return True

    def close_if_frame_overdue(self, now: float) -> bool:
        """Close when a frame has been arriving for longer than the frame timeout (the server's
        sweep calls this: a peer that stopped sending is not read again)."""
        return self._hold is not None and self._over_limit(self._hold.overdue(now))

    def pause_writing(self) -> None:
        # A peer that does not read its responses stops being read: our buffer stays bounded.
        self._can_write.clear()
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._can_write.set()
        if self._transport is not None:
            self._transport.resume_reading()

    # --- requests served here ------------------------------------------------------------

    def _start_handling(self, request: RemotingCommand) -> None:
        if self._handler is None:
            if not request.is_oneway:
                self.send(
                    RemotingCommand.response_to(
                        request,
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f"request code {request.code} not supported",
                    )
                )
            return
        if request.code in self._now_codes:
            now = self._answer_now(request)
            if now is None:
                return  # answered, with no coroutine
            handling = now
        else:
            handling = self._handle(request)
        try:
            # Step the handler here, as Python 3.12's eager tasks do: a task costs more than
            # most requests' whole processing, and most never wait.
            waiting_on = handling.send(None)
        except StopIteration:
            return
        if type(waiting_on) is _FUTURE and not waiting_on.done():
            # Waiting on one future (a SYNC_MASTER send on its slave's ack, a flush): stepped
            # again by the future's callback, still without a task; a second wait gets one.
            self._stepped.add(waiting_on)
            waiting_on.add_done_callback(_StepOnce(self, handling))
            return
        self._resume_in_task(handling, waiting_on)

    def _resume_in_task(self, handling: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        task = asyncio.get_running_loop().create_task(_resume(handling, waiting_on))
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

    async def _handle(self, request: RemotingCommand) -> None:
        assert self._handler is not None
        try:
            response = await self._handler(self, request)
        except Exception as exc:
            log.exception("request code %d from %s failed", request.code, self.peer)
            response = _system_error(request, exc)
        if response is not None and not request.is_oneway:
            self.send(response)

    def _answer_now(self, request: RemotingCommand) -> Coroutine[Any, Any, None] | None:
        """`handler_now`'s answer sent (unless oneway), None; or, for an awaitable, the
        coroutine that sends it once it comes (stepped as `_handle`'s)."""
        assert self._handler_now is not None
        try:
            answer = self._handler_now(self, request)
        except Exception as exc:
            log.exception("request code %d from %s failed", request.code, self.peer)
            answer = _system_error(request, exc)
        if answer is None or isinstance(answer, RemotingCommand):
            if answer is not None and not request.flag & 2:  # is_oneway, inline
                self.send(answer)
            return None
        return self._handle_later(request, answer)

    async def _handle_later(
        self, request: RemotingCommand, answer: Awaitable[RemotingCommand | None]
    ) -> None:
        try:
            response = await answer
        except Exception as exc:
            log.exception("request code %d from %s failed", request.code, self.peer)
            response = _system_error(request, exc)
        if response is not None and not request.is_oneway:
            self.send(response)

    @property
    def requests_in_flight(self) -> int:
        return len(self._handling) + len(self._stepped)

    async def wait_requests_done(self, timeout: float) -> None:
        if self._handling or self._stepped:
            await asyncio.wait([*self._handling, *self._stepped], timeout=timeout)

    # --- sending -------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, command: RemotingCommand) -> None:
        """Queue a command for sending (responses, oneway requests); dropped if closed.

        The frame is written with the others queued in this loop iteration (`_flush`).
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        head, body = encode_command_parts(command)
        outgoing = self._outgoing
        if not outgoing:
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._flush)
        outgoing.append(head)
        if body:
            outgoing.append(body)
        if command.body_views:
            outgoing.extend(command.body_views)

    def _flush(self) -> None:
        outgoing = self._outgoing
        if not outgoing:
            return  # closed meanwhile, or flushed by close()
        # A new list, not clear(): the transport may keep the one it was given until written.
        # Taken before writing: a write that raised used to leave these frames queued, so no
        # later send scheduled a flush (it saw frames already waiting) and every request after
        # it on this connection timed out.
        self._outgoing = []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            if len(outgoing) == 1:
                transport.write(outgoing[0])
            else:
                transport.writelines(outgoing)
        except Exception:
            # `send` queues only what the codec encoded, so this is a transport's failure. Part
            # of the frames may be in its buffer already (uvloop buffers part by part): the
            # stream is out of step with the peer. Abort: the requests waiting fail now, not at
            # their timeouts, and the next request gets a new connection.
            log.exception("closing connection %s: a write failed", self.peer or self.name)
            self.abort()

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait up to `timeout` seconds for its response."""
        transport = self._transport  # is_open, inline
        if transport is None or transport.is_closing():
            raise ConnectionClosedError(f"connection to {self.peer or self.name} is closed")
        if not self._can_write.is_set():
            await asyncio.wait_for(self._can_write.wait(), timeout)
        started = self.start_request(command, timeout)
        if started is None:  # closed while it waited to write
            raise ConnectionClosedError(f"connection to {self.peer or self.name} is closed")
        future, timer = started
        try:
            return await future
        finally:
            self.end_request(command.opaque, timer)

    def start_request(
        self, command: RemotingCommand, timeout: float
    ) -> tuple[asyncio.Future[RemotingCommand], asyncio.TimerHandle | None] | None:
        """`request` without its coroutine, for the hottest callers (a producer's send): the
        request is sent and its future and timer returned; the caller awaits the future and
        then calls `end_request(command.opaque, timer)` whatever happened. None when the
        connection is closed or paused: the caller uses `request` (which raises or waits)."""
        transport = self._transport
        if transport is None or transport.is_closing() or not self._can_write.is_set():
            return None
        command.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        head, body = encode_command_parts(command)  # raises before anything is registered
        return self.start_encoded(opaque, head, body, timeout, command.body_views)

    def writable_opaque(self) -> int | None:
        """The opaque of a request about to be written as a frame already encoded
        (`start_encoded`), when the connection takes writes now; None when it is closed or paused
        (the caller uses `request`, which raises or waits)."""
        transport = self._transport
        if transport is None or transport.is_closing() or not self._can_write.is_set():
            return None
        return next(self._opaques) & 0x7FFFFFFF

    def start_encoded(
        self,
        opaque: int,
        head: bytes,
        body: Body,
        timeout: float,
        body_views: tuple[memoryview, ...] = (),
    ) -> tuple[asyncio.Future[RemotingCommand], asyncio.TimerHandle | None]:
        """`start_request` of a request whose frame is encoded already (`head`: its prefix and
        header, with an opaque from `writable_opaque` asked just before; then `body` and
        `body_views`): its future and timer; queued as `send` queues a frame."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = future
        # Timers on the future itself: asyncio.wait_for would wrap every call in a task.
        deadline = loop.time() + timeout
        deadlines = self._deadlines
        timer = None
        if not deadlines or deadline >= deadlines[-1][0]:
            deadlines.append((deadline, opaque))
            if self._expiry is None:
                self._expiry = loop.call_at(deadline, self._expire)
        else:  # sooner than a request sent before it: a timer of its own
            timer = loop.call_at(deadline, _time_out, future)
        transport = self._transport
        if transport is None or transport.is_closing():
            return future, timer  # dropped, as send drops it: the request fails or times out
        outgoing = self._outgoing
        if not outgoing:
            loop.call_soon(self._flush)
        outgoing.append(head)
        if body:
            outgoing.append(body)
        if body_views:
            outgoing.extend(body_views)
        return future, timer

    def end_request(self, opaque: int, timer: asyncio.TimerHandle | None) -> None:
        """A request's bookkeeping after its future: answered, failed or cancelled."""
        if timer is not None:
            timer.cancel()
        pending = self._pending
        pending.pop(opaque, None)
        # Forget the answered requests at the front: the queue holds no more than the
        # requests sent since the oldest one still waiting.
        deadlines = self._deadlines
        while deadlines and deadlines[0][1] not in pending:
            deadlines.popleft()

    def _expire(self) -> None:
        """Fail the requests whose deadline has passed; arm the timer for the next one."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines, pending = self._deadlines, self._pending
        while deadlines:
            deadline, opaque = deadlines[0]
            if deadline > now:
                self._expiry = loop.call_at(deadline, self._expire)
                return
            deadlines.popleft()
            future = pending.get(opaque)  # None: answered meanwhile
            if future is not None:
                _time_out(future)

    async def oneway(self, command: RemotingCommand, timeout: float | None = None) -> None:
        """Send without waiting for an answer; a paused connection is waited for, up to
        `timeout` seconds when given (TimeoutError)."""
        command.flag |= 2
        command.opaque = next(self._opaques) & 0x7FFFFFFF
        if not self._can_write.is_set():
            await asyncio.wait_for(self._can_write.wait(), timeout)
        self.send(command)

    def oneway_now(self, command: RemotingCommand) -> bool:
        """`oneway` without a coroutine when the connection takes writes now (open, not
        paused): True once queued; False, with nothing sent, otherwise (await `oneway`)."""
        if not self._can_write.is_set() or not self.is_open:
            return False
        command.flag |= 2
        command.opaque = next(self._opaques) & 0x7FFFFFFF
        self.send(command)
        return True

    def close(self) -> None:
        """Close after writing whatever is queued."""
        self._flush()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class BufferedRemotingConnection(RemotingConnection, asyncio.BufferedProtocol):
    """A connection whose socket is read straight into reused buffers (`receive.FrameReceiver`).

    The client's connections: a large response's body (a pull of thousands of records) arrives
    as a `memoryview` of a pooled buffer the kernel wrote it into, with no copy and no fresh
    memory per response. Requests and small frames are handled as `RemotingConnection` does.
    """

    _receiver: FrameReceiver

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._receiver = FrameReceiver(self._decoder.max_frame_size)
        self._decode = self._receiver.received
        super().connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._received(nbytes)

    def _buffered_bytes(self) -> int:
        return self._receiver.buffered

    def _held_bytes(self) -> int:
        return self._receiver.held

    def _discard_partial(self, reason: str) -> None:
        self._receiver.discard(reason)


_FUTURE: Final = asyncio.Future
_FLAG: Final = operator.attrgetter("flag")
_ONEWAY: Final = 2  # the flag of a oneway request (RemotingCommand.is_oneway's bit, alone)


class _StepOnce:
    """A request's handler waiting on one future, stepped on by that future's callback (what a
    task would do, without the task: its creation, its first turn of the event loop and its
    wrapper coroutine cost more than the rest of a SYNC_MASTER send's wait). The handler then
    runs until it ends or waits again; a second wait continues in a task (`_resume`), so only
    the part between its first and second wait runs outside a task, as the first step does."""

    __slots__ = ("_connection", "_handling")

    def __init__(self, connection: RemotingConnection, handling: Coroutine[Any, Any, None]) -> None:
        self._connection = connection
        self._handling = handling

    def __call__(self, future: asyncio.Future[Any]) -> None:
        connection = self._connection
        connection._stepped.discard(future)
        handling = self._handling
        try:
            if future.cancelled():
                waiting_on = handling.throw(asyncio.CancelledError())
            else:
                waiting_on = handling.send(None)
        except StopIteration:
            return
        except asyncio.CancelledError:
            return  # cancelled where it waited, as a cancelled task ends
        connection._resume_in_task(handling, waiting_on)


async def _resume(coroutine: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    """Run the rest of a started `coroutine`, which is waiting on `waiting_on`, in this task."""
    await Continuation(coroutine, waiting_on)


def _system_error(request: RemotingCommand, exc: Exception) -> RemotingCommand:
    """The answer to a request whose handler raised `exc` (a bug, logged by the caller)."""
    return RemotingCommand.response_to(
        request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
    )


def _time_out(future: asyncio.Future[RemotingCommand]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())
