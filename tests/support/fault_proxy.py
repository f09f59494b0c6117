"""A TCP fault proxy for tests (the model is asyncpg's TCPFuzzingProxy; toxiproxy is unavailable).

`FaultProxy(target_host, target_port, seed=...)` listens on a free port of 127.0.0.1 and forwards
every connection it accepts to the target, both directions. It runs its own event loop in a
background thread, so sync and async tests alike control it with plain method calls; a mode
change is in effect when the call returns. Modes (`Mode`), switchable at run time:

- `PASS`: bytes are forwarded as they are read. A side's close reaches the other side once what
  it sent is delivered (a half-close); the connection ends when both directions ended, or at
  once on an error (a reset).
- `RECHUNK`: the byte stream is cut at random boundaries and written in random-sized pieces, with
  small random delays, so the receiver sees both frames split (down to single bytes) and frames
  coalesced (a piece may span several of the sender's writes). Sizes and delays come from a
  `random.Random` seeded per direction from ``seed``; which reads are coalesced still depends on
  timing, so runs with one seed are alike, not identical.
- `PARTITION`: nothing moves, and nothing is closed. Bytes are **held**, never dropped, as TCP
  retransmission holds them: the proxy stops reading from both sockets and stops writing what it
  read already, so the kernels' buffers fill and the senders block. A close on either side is
  not propagated either (it is not even seen). A connection accepted during the partition is
  held too: its upstream connection is made only when the partition heals. `heal()` (or any
  other mode) delivers everything held, in order, then any close that happened meanwhile; an
  endpoint that gave up during the partition sees its peer's close then.
- `DROP`: every open connection is aborted (both sides, at once), and connections accepted while
  the mode lasts are aborted as soon as they are accepted. `drop_connections()` aborts the open
  connections without changing the mode.

Counters (`accepted`, `open_connections`, `bytes_forwarded`, `splits`, `merges`) let tests check
that a fault really happened: a split is a write that ends inside one of the sender's reads, a
merge a write that spans a boundary between two reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import socket
import threading
from collections import deque
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Final, Self, TypeVar

__all__ = ["FaultProxy", "Mode"]

_T = TypeVar("_T")

READ_SIZE: Final = 64 * 1024
# A direction stops reading while this much is waiting to be written (backpressure).
BUFFER_LIMIT: Final = 256 * 1024
CONTROL_TIMEOUT: Final = 10.0


class Mode(enum.Enum):
    PASS = "pass"
    RECHUNK = "rechunk"
    PARTITION = "partition"
    DROP = "drop"


class _Pipe:
    """One direction of one connection: a reader task fills a buffer, a writer task empties it."""

    def __init__(
        self,
        proxy: FaultProxy,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        rng: random.Random,
    ) -> None:
        self.proxy = proxy
        self.reader = reader
        self.writer = writer
        self.rng = rng
        self.buffer = bytearray()
        self.pos = 0  # bytes of `buffer` already written
        self.read_total = 0  # stream offset of the end of what was read
        self.written_total = 0  # stream offset of the end of what was written
        self.read_ends: deque[int] = deque()  # stream offsets where the sender's reads ended
        self.eof = False
        self.changed = asyncio.Event()  # data arrived, EOF, or the buffer drained

    @property
    def pending(self) -> int:
        return len(self.buffer) - self.pos

    async def fill(self) -> None:
        while True:
            await self.proxy._flowing.wait()
            while self.pending >= BUFFER_LIMIT:
                self.changed.clear()
                await self.changed.wait()
            data = await self.reader.read(READ_SIZE)
            if not data:
                self.eof = True
                self.changed.set()
                return
            if self.pos > len(self.buffer) // 2:
                del self.buffer[: self.pos]
                self.pos = 0
            self.buffer += data
            self.read_total += len(data)
            self.read_ends.append(self.read_total)
            self.changed.set()

    async def drain(self) -> None:
        proxy = self.proxy
        rng = self.rng
        while True:
            while not self.pending and not self.eof:
                self.changed.clear()
                await self.changed.wait()
            await proxy._flowing.wait()
            if not self.pending:
                # EOF and everything delivered: pass the half-close on.
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                return
            if proxy.mode is Mode.RECHUNK:
                roll = rng.random()
                if roll < 0.1:
                    # Hold back until two of the sender's reads wait here (or max_delay has
                    # passed), then send all as one piece: a merge, whatever the timing.
                    await self._wait_for_reads(2, proxy.max_delay)
                    await proxy._flowing.wait()
                    size = self.pending
                else:
                    if roll < 0.4:
                        await asyncio.sleep(0)
                    await proxy._flowing.wait()
                    size = self._piece_size()
            else:
                size = self.pending
            self._write(size)
            await self.writer.drain()

    async def _wait_for_reads(self, count: int, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.eof and sum(1 for e in self.read_ends if e > self.written_total) < count:
            left = deadline - loop.time()
            if left <= 0:
                return
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                return

    def _piece_size(self) -> int:
        rng = self.rng
        pending = self.pending
        kind = rng.random()
        if kind < 0.4:
            size = rng.randint(1, 16)  # splits headers and 8-byte reports
        elif kind < 0.8:
            size = rng.randint(1, 4096)
        else:
            size = pending  # everything there is: coalesces what arrived meanwhile
        return min(size, pending)

    def _write(self, size: int) -> None:
        start, end = self.written_total, self.written_total + size
        ends = self.read_ends
        while ends and ends[0] <= start:
            ends.popleft()
        if ends and ends[0] < end:
            self.proxy.merges += 1  # the piece spans the end of a read
        while ends and ends[0] < end:
            ends.popleft()
        if ends and ends[0] != end:
            self.proxy.splits += 1  # the piece ends inside a read
        self.writer.write(bytes(self.buffer[self.pos : self.pos + size]))
        self.pos += size
        self.written_total = end
        self.proxy.bytes_forwarded += size
        if self.pending < BUFFER_LIMIT:
            self.changed.set()


class _Connection:
    def __init__(self, proxy: FaultProxy, index: int) -> None:
        self.proxy = proxy
        self.index = index
        self.writers: list[asyncio.StreamWriter] = []
        self.task: asyncio.Task[None] | None = None

    def abort(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


class FaultProxy:
    """A TCP proxy to ``target_host:target_port`` with switchable faults (see the module doc)."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        host: str = "127.0.0.1",
        seed: int = 0,
        mode: Mode = Mode.PASS,
        max_delay: float = 0.002,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.host = host
        self.port = 0
        self.seed = seed
        self.max_delay = max_delay
        self.mode = mode
        self.accepted = 0
        self.bytes_forwarded = 0
        self.splits = 0
        self.merges = 0
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event  # set unless partitioned; made on the proxy's loop

    # --- control (any thread) ---------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("the proxy was already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run_loop, args=(loop,), name=f"fault-proxy->{self.target_port}"
        )
        self._thread.daemon = True
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close the listener and every connection, stop the loop and join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if not loop.is_closed() and loop.is_running():
                self._call(self._shutdown())
        finally:
            if not loop.is_closed():
                loop.call_soon_threadsafe(loop.stop)
            thread.join(CONTROL_TIMEOUT)
            self._loop = None
            self._thread = None

    def set_mode(self, mode: Mode) -> None:
        """Switch the mode; in effect (connections dropped, partition holding) on return."""
        self._call(self._set_mode(mode))

    def pass_through(self) -> None:
        self.set_mode(Mode.PASS)

    def rechunk(self) -> None:
        self.set_mode(Mode.RECHUNK)

    def partition(self) -> None:
        self.set_mode(Mode.PARTITION)

    def heal(self, mode: Mode = Mode.PASS) -> None:
        """End a partition (or a drop): held bytes are delivered in order."""
        self.set_mode(mode)

    def drop_connections(self) -> int:
        """Abort every open connection (both sides) now; returns how many. The mode stays."""
        return self._call(self._drop_all())

    def __enter__(self) -> Self:
        return self if self._thread is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"<FaultProxy {self.address} -> {self.target_host}:{self.target_port} "
            f"{self.mode.value} open={self.open_connections}>"
        )

    def _call(self, work: Coroutine[Any, Any, _T]) -> _T:
        loop = self._loop
        if loop is None:
            work.close()
            raise RuntimeError("the proxy is not running")
        return asyncio.run_coroutine_threadsafe(work, loop).result(CONTROL_TIMEOUT)

    # --- the proxy's loop -----------------------------------------------------------------------

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        if self.mode is not Mode.PARTITION:
            self._flowing.set()
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        if mode is Mode.PARTITION:
            self._flowing.clear()
        else:
            self._flowing.set()
        if mode is Mode.DROP:
            await self._drop_all()

    def _dropping(self) -> bool:
        return self.mode is Mode.DROP

    async def _drop_all(self) -> int:
        dropped = list(self._connections)
        for connection in dropped:
            connection.abort()
        return len(dropped)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._drop_all()
        tasks = [c.task for c in self._connections if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        connection = _Connection(self, self.accepted)
        self.accepted += 1
        connection.writers.append(client_writer)
        self._connections.add(connection)
        # A task of our own: asyncio logs an error when a stream callback's task is cancelled.
        connection.task = asyncio.create_task(self._serve(connection, client_reader))

    async def _serve(self, connection: _Connection, client_reader: asyncio.StreamReader) -> None:
        client_writer = connection.writers[0]
        try:
            if self._dropping():
                connection.abort()
                return
            _nodelay(client_writer)
            await self._flowing.wait()
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
            except OSError:
                return  # the target is down: the client sees its connection close
            connection.writers.append(upstream_writer)
            _nodelay(upstream_writer)
            if self._dropping():  # switched while connecting
                connection.abort()
                return
            base = f"{self.seed}-{connection.index}"
            pipes = [
                _Pipe(self, client_reader, upstream_writer, random.Random(f"{base}-up")),
                _Pipe(self, upstream_reader, client_writer, random.Random(f"{base}-down")),
            ]
            await self._forward(pipes)
        finally:
            self._connections.discard(connection)
            for writer in connection.writers:
                writer.close()
            for writer in connection.writers:
                try:
                    await asyncio.wait_for(writer.wait_closed(), 1.0)
                except (OSError, TimeoutError):
                    writer.transport.abort()

    @staticmethod
    async def _forward(pipes: list[_Pipe]) -> None:
        """Until both directions ended and delivered everything, or either failed (reset, drop)."""
        fills = {asyncio.create_task(pipe.fill()) for pipe in pipes}
        drains = {asyncio.create_task(pipe.drain()) for pipe in pipes}
        try:
            await asyncio.wait(fills | drains, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in fills | drains:
                task.cancel()
            await asyncio.gather(*fills, *drains, return_exceptions=True)


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
