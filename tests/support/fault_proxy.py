"""A TCP fault proxy for tests (the model is asyncpg's TCPFuzzingProxy; toxiproxy is unavailable).

`FaultProxy(target_host, target_port, seed=...)` listens on a free port of 127.0.0.1 and forwards
every connection it accepts to the target, both directions. It runs its own event loop in a
background thread, so sync and async tests alike control it with plain method calls; a mode
change is in effect when the call returns. Modes (`Mode`), switchable at run time:

- `PASS`: bytes are forwarded as they are read. A side's close reaches the other side once what
  it sent is delivered (a half-close); the connection ends when both directions ended, or at
  once on an error (a reset).
- `RECHUNK`: the proxy cuts every read of the sender into pieces, written one by one, and
  joins some reads' last piece to the next read's first. How a read is cut depends only on the
  seed, the connection's index (in accepted order), the direction, the read's index in that
  direction and its length (`rechunk_plan`), never on timing: how the kernel splits the stream
  into reads is the only thing left to chance, and the same reads always give the same writes.

  - A read is at most READ_SIZE bytes. A read of one byte (a lone byte) is joined to the read
    after it, so every read that is cut has at least 2 bytes.
  - A read is cut into at least 2 pieces of 1 to PIECE_MAX bytes each; no piece crosses the
    read's end. A write that ends inside a read is a split: a read of n bytes gives at least
    max(1, ceil(n / PIECE_MAX) - 1) >= n / (2 * PIECE_MAX) of them.
  - In every block of MERGE_EVERY consecutive reads (index // MERGE_EVERY), one read other than
    the block's last is a merge read: its last piece is held back and written in one piece
    together with the next read's first piece, a merge.
  - Held bytes (that last piece, a lone byte) wait for the next read. EOF releases them (written
    alone, before the half-close), and so does a mode change (written as the new mode says).
    A peer that waits for the answer to held bytes would wait for ever, so after ``max_hold``
    seconds (1 by default) without a read they are written alone and counted in
    `idle_releases`; ``max_hold=None`` waits for the next read however long it takes, for a
    stream with heartbeats (HA) or a sender that closes its side when done.

  Hence a direction that delivered D bytes in RECHUNK mode, with no idle release and no mode
  change, made at least `rechunk_minimum(D)` = (floor((D - 1) / (2 * PIECE_MAX)),
  floor((D - 1) / (READ_SIZE * MERGE_EVERY))) splits and merges: the reads that were cut hold
  all those bytes but a lone byte at EOF, and there are at least D / READ_SIZE of them. The
  counters add up every direction of every connection.
- `PARTITION`: nothing moves, and nothing is closed. Bytes are **held**, never dropped, as TCP
  retransmission holds them: the proxy stops reading from both sockets and stops writing what it
  read already, so the kernels' buffers fill and the senders block. A close on either side is
  not propagated either (it is not even seen). A connection accepted during the partition is
  held too: its upstream connection is made only when the partition heals. `heal()` (or any
  other mode) delivers everything held, in order, then any close that happened meanwhile; an
  endpoint that gave up during the partition sees its peer's close then.
- `partition_after(n)`: PASS until `n` more bytes have been forwarded (both directions counted),
  then PARTITION, exactly at that byte: what a test needs to stop a fast transfer (an HA
  catch-up on loopback) at a point of its choosing, which polling cannot do.
- `DROP`: every open connection is aborted (both sides, at once), and connections accepted while
  the mode lasts are aborted as soon as they are accepted. `drop_connections()` aborts the open
  connections without changing the mode.

Counters (`accepted`, `open_connections`, `bytes_forwarded`, `splits`, `merges`,
`idle_releases`) let tests check that a fault really happened. `splits` and `merges` count
RECHUNK's writes as defined above; the other modes write what they read as it comes.
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

__all__ = [
    "MERGE_EVERY",
    "PIECE_MAX",
    "READ_SIZE",
    "FaultProxy",
    "Mode",
    "rechunk_minimum",
    "rechunk_plan",
]

_T = TypeVar("_T")

READ_SIZE: Final = 64 * 1024
PIECE_MAX: Final = 16 * 1024
MERGE_EVERY: Final = 4
# A direction stops reading while this much is waiting to be written (backpressure).
BUFFER_LIMIT: Final = 256 * 1024
CONTROL_TIMEOUT: Final = 10.0


class Mode(enum.Enum):
    PASS = "pass"
    RECHUNK = "rechunk"
    PARTITION = "partition"
    DROP = "drop"


def rechunk_plan(stream: str, index: int, size: int) -> tuple[list[int], bool]:
    """The pieces read ``index`` (``size`` >= 2 bytes) of ``stream`` is cut into, in order, and
    whether it is a merge read; ``stream`` names the direction ("<seed>-<connection>-up")."""
    block, place = divmod(index, MERGE_EVERY)
    merge = random.Random(f"{stream}-block-{block}").randrange(MERGE_EVERY - 1) == place
    rng = random.Random(f"{stream}-read-{index}")
    pieces: list[int] = []
    left = size
    while left:
        kind = rng.random()
        if kind < 0.4:
            piece = rng.randint(1, 16)  # splits headers and 8-byte reports
        elif kind < 0.8:
            piece = rng.randint(1, PIECE_MAX)
        else:
            piece = PIECE_MAX
        if left == size and piece >= size:
            piece = rng.randint(1, size - 1)  # never the whole read: at least one split
        piece = min(piece, left)
        pieces.append(piece)
        left -= piece
    return pieces, merge


def rechunk_minimum(delivered: int) -> tuple[int, int]:
    """The fewest (splits, merges) RECHUNK makes in a direction that delivered ``delivered``
    bytes, with no idle release and no mode change (see the module doc)."""
    planned = max(delivered - 1, 0)  # but a lone byte released alone at EOF
    return planned // (2 * PIECE_MAX), planned // (READ_SIZE * MERGE_EVERY)


class _Pipe:
    """One direction of one connection: a reader task fills a buffer, a writer task empties it."""

    def __init__(
        self,
        proxy: FaultProxy,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        stream: str,
    ) -> None:
        self.proxy = proxy
        self.reader = reader
        self.writer = writer
        self.stream = stream
        self.buffer = bytearray()
        self.pos = 0  # bytes of `buffer` already written
        self.read_total = 0  # stream offset of the end of what was read
        self.written_total = 0  # stream offset of the end of what was written
        self.read_ends: deque[int] = deque()  # stream offsets where the sender's reads ended
        self.planned_total = 0  # stream offset of the end of the reads cut so far
        self.reads = 0  # reads cut in RECHUNK mode: the index of the next one
        self.eof = False
        self.changed = asyncio.Event()  # data arrived, EOF, the buffer drained, or a mode change

    @property
    def pending(self) -> int:
        return len(self.buffer) - self.pos

    async def fill(self) -> None:
        while True:
            await self.proxy._flowing.wait()
            while self.pending >= BUFFER_LIMIT:
                await self._wait(None)
            # One byte less, so that a lone byte joined to the next read makes at most READ_SIZE.
            data = await self.reader.read(READ_SIZE - 1)
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
        while True:
            while not self.pending and not self.eof:
                await self._wait(None)
            await proxy._flowing.wait()
            if proxy.mode is Mode.RECHUNK:
                read = self._next_read()
                if read is not None:
                    await self._rechunk(*read)
                    continue
                if self.pending and not self.eof:
                    # Held bytes (a merge read's last piece, a lone byte) wait for the next read.
                    if await self._wait(proxy.max_hold):
                        continue
                    proxy.idle_releases += 1
            if self.pending:
                # Everything read so far, as one write (also what RECHUNK releases alone), or
                # what is left of a partition_after budget.
                size = self.pending
                if proxy.partition_at is not None:
                    size = min(size, proxy.partition_at - proxy.bytes_forwarded)
                    if size <= 0:
                        await proxy._set_mode(Mode.PARTITION)
                        continue
                self._write(size)
                self.planned_total = self.written_total
                self.read_ends.clear()
                await self.writer.drain()
            elif self.eof:
                # EOF and everything delivered: pass the half-close on.
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                return

    def _next_read(self) -> tuple[int, int] | None:
        """The stream offsets of the next read to cut, a lone byte joined to the read after it;
        None while there is no such read yet."""
        ends = self.read_ends
        start = self.planned_total
        while ends and ends[0] <= start:
            ends.popleft()
        if not ends:
            return None
        if ends[0] - start > 1:
            return start, ends[0]
        return (start, ends[1]) if len(ends) > 1 else None

    async def _rechunk(self, start: int, end: int) -> None:
        proxy = self.proxy
        pieces, merge = rechunk_plan(self.stream, self.reads, end - start)
        self.reads += 1
        self.planned_total = end
        piece_end = start
        for piece in pieces:
            piece_end += piece
            if merge and piece_end == end:
                return  # held back: written with the next read's first piece
            await proxy._flowing.wait()
            if proxy.mode is not Mode.RECHUNK:
                return  # the rest goes out as the new mode says
            if self.written_total < start:
                proxy.merges += 1  # the previous read's held last piece goes in this write
            if piece_end < end:
                proxy.splits += 1
            self._write(piece_end - self.written_total)
            await self.writer.drain()
            await asyncio.sleep(0)  # let the other direction and the receiver run in between

    async def _wait(self, timeout: float | None) -> bool:
        """Wait for `changed`; False if ``timeout`` seconds passed first."""
        self.changed.clear()
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _write(self, size: int) -> None:
        # Counted before the bytes leave: a peer that has them sees them counted.
        self.proxy.bytes_forwarded += size
        self.writer.write(bytes(self.buffer[self.pos : self.pos + size]))
        self.pos += size
        self.written_total += size
        if self.pending < BUFFER_LIMIT:
            self.changed.set()


class _Connection:
    def __init__(self, proxy: FaultProxy, index: int) -> None:
        self.proxy = proxy
        self.index = index
        self.writers: list[asyncio.StreamWriter] = []
        self.pipes: list[_Pipe] = []
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
        max_hold: float | None = 1.0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.host = host
        self.port = 0
        self.seed = seed
        self.max_hold = max_hold
        self.mode = mode
        self.accepted = 0
        self.bytes_forwarded = 0
        self.splits = 0
        self.merges = 0
        self.idle_releases = 0
        self.partition_at: int | None = None  # bytes_forwarded at which to partition
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

    def partition_after(self, size: int) -> None:
        """Forward (in PASS mode) `size` more bytes, then partition at exactly that byte."""
        self._call(self._partition_after(size))

    async def _partition_after(self, size: int) -> None:
        await self._set_mode(Mode.PASS)  # does not yield for PASS: no byte moves in between
        self.partition_at = self.bytes_forwarded + size

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
        self.partition_at = None  # a mode change ends a partition_after budget
        self.mode = mode
        if mode is Mode.PARTITION:
            self._flowing.clear()
        else:
            self._flowing.set()
        for connection in self._connections:
            for pipe in connection.pipes:
                pipe.changed.set()  # held bytes go out as the new mode says
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
            connection.pipes = [
                _Pipe(self, client_reader, upstream_writer, f"{base}-up"),
                _Pipe(self, upstream_reader, client_writer, f"{base}-down"),
            ]
            await self._forward(connection.pipes)
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
