"""Frames read straight into reused buffers: the receive side of a buffered remoting connection.

The frame format is `client.remoting.frame`'s. `FrameDecoder` is fed the bytes objects a
transport made (one allocation and one copy per read) and joins a large frame's chunks (another
allocation and copy). `FrameReceiver` is the `asyncio.BufferedProtocol` form: the transport reads
into the buffer `get_buffer` returns, and `received(nbytes)` returns the commands completed.

- Frames up to `LARGE_FRAME` bytes are read into one reused receive buffer and decoded in place
  (`parse_frames`); their bodies are copied out as `bytes`, as the decoder's are.
- A larger frame (a pull response of thousands of records) still incomplete after a read, once
  its 8-byte prefix is in, is read on into a buffer of its own from a pool, and its body is
  handed out as a `memoryview` of that buffer: the kernel's copy is the only one. (One that
  arrived whole in a read is decoded in place like a small one.) Fresh memory is what makes a
  large frame cost (on a virtual machine a first touch of a page costs about 3 us, more than
  copying it), so the pool (`BufferPool`, one per process) reuses a buffer once nothing refers
  to it any more: CPython counts every view of a buffer (a memoryview, a slice of one, an Arrow
  buffer over it) as a reference to it, so a buffer whose reference count is the pool's own is
  free. A body kept by its caller pins its buffer; the pool then makes another, and forgets the
  oldest ones beyond `POOL_BUFFERS` buffers or `POOL_BYTES` bytes.

Checks and errors are the decoder's (`FrameError`, and the receiver refuses everything after
one): a frame's prefix is checked as soon as it is in, before any buffer is sized for it, so no
buffer grows beyond `max_frame_size` + 4 bytes.
"""

from __future__ import annotations

import sys
import threading
from typing import Final

from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import FrameError
from tidemq.client.remoting.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    frame_parts,
    frame_size,
    parse_frames,
)
from tidemq.client.remoting.headers import decode_header

__all__ = [
    "FRAME_BUFFERS",
    "LARGE_FRAME",
    "POOL_BUFFERS",
    "POOL_BYTES",
    "RECEIVE_BUFFER",
    "BufferPool",
    "FrameReceiver",
]

RECEIVE_BUFFER: Final = 256 * 1024
# Frames (length field included) above this size get a buffer of their own.
LARGE_FRAME: Final = 64 * 1024
# The pool keeps at most this many buffers and bytes (it may hand out more: see `take`).
POOL_BUFFERS: Final = 8
POOL_BYTES: Final = 32 * 1024 * 1024
# Pooled buffers are sized in these steps, so one serves frames of similar sizes.
_POOL_STEP: Final = 1024 * 1024
_PREFIX_LEN: Final = 8  # the length field and the type-and-header-length word


def _unreferenced_count() -> int:
    """sys.getrefcount of a pooled buffer nothing else refers to, seen as `take` sees it (in a
    list, through a loop's name). Measured, not assumed: 3 on CPython 3.11 (the list, the
    name, getrefcount's argument), but an interpreter may borrow the loop's reference."""
    buffers = [bytearray(1)]
    for buffer in buffers:
        return sys.getrefcount(buffer)
    raise AssertionError("unreachable")


_UNREFERENCED: Final = _unreferenced_count()


class BufferPool:
    """Large-frame buffers shared by every receiver of the process (a Spark worker runs task
    after task, each on new connections: a pool per connection would start cold each time).

    `take(size)` returns a buffer of at least `size` bytes that nothing refers to, or a new one.
    Thread-safe: event loops in several threads share it. A buffer taken is referenced by its
    taker before the lock is released, so no other thread can see it as free.
    """

    def __init__(self, max_buffers: int = POOL_BUFFERS, max_bytes: int = POOL_BYTES) -> None:
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._buffers: list[bytearray] = []
        self._lock = threading.Lock()

    @property
    def pooled_bytes(self) -> int:
        return sum(len(buffer) for buffer in self._buffers)

    def take(self, size: int) -> bytearray:
        with self._lock:
            buffers = self._buffers
            for buffer in buffers:
                if len(buffer) >= size and sys.getrefcount(buffer) == _UNREFERENCED:
                    return buffer
            buffer = bytearray(-(-size // _POOL_STEP) * _POOL_STEP)
            buffers.append(buffer)
            # Over the bounds, forget the oldest buffers (a busy one's memory goes with its
            # last view). A new buffer larger than max_bytes is handed out but not kept.
            while len(buffers) > self.max_buffers or (
                buffers and self.pooled_bytes > self.max_bytes
            ):
                del buffers[0]
            return buffer


FRAME_BUFFERS = BufferPool()


class FrameReceiver:
    """`get_buffer`/`received` of a BufferedProtocol; see the module docstring."""

    __slots__ = (
        "_buffer",
        "_end",
        "_error",
        "_frame",
        "_frame_filled",
        "_frame_size",
        "_max_frame_size",
        "_start",
        "_whole",
    )

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._max_frame_size = max_frame_size
        self._buffer = bytearray(RECEIVE_BUFFER)
        self._whole = memoryview(self._buffer)  # never resized, so a lasting view is safe
        self._start = 0  # undecoded bytes are self._buffer[_start:_end]
        self._end = 0
        # A large frame being read: its buffer, its whole size and how much of it is in.
        self._frame: bytearray | None = None
        self._frame_size = 0
        self._frame_filled = 0
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet complete a frame."""
        return self._end - self._start + self._frame_filled

    @property
    def held(self) -> int:
        """Memory held for a frame not yet complete: a large frame's buffer, taken whole when its
        prefix came, or the incomplete tail in the receive buffer."""
        return self._frame_size if self._frame is not None else self._end - self._start

    @property
    def failed(self) -> bool:
        """True once a `FrameError` was raised: the receiver accepts nothing more."""
        return self._error is not None

    def discard(self, reason: str) -> None:
        """Drop the incomplete frame now and accept nothing more (the connection closes)."""
        self._fail(FrameError(reason))

    def _fail(self, exc: FrameError) -> None:
        self._error = exc
        self._frame = None
        self._start = self._end = self._frame_filled = 0

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read goes: the rest of a large frame, or the receive buffer's room."""
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._frame_filled : self._frame_size]
        if self._error is not None:
            # A transport may read once more before it closes: into a buffer nobody parses.
            return memoryview(bytearray(_PREFIX_LEN))
        if RECEIVE_BUFFER - self._end < LARGE_FRAME:
            # Move the incomplete frame (under LARGE_FRAME bytes) to the front.
            start, end = self._start, self._end
            self._buffer[: end - start] = self._buffer[start:end]
            self._start, self._end = 0, end - start
        return self._whole[self._end :]

    def received(self, nbytes: int) -> list[RemotingCommand]:
        """`nbytes` were written into the last `get_buffer`: the commands they complete."""
        if self._error is not None:
            raise FrameError(f"receiver already failed: {self._error}")
        try:
            if self._frame is not None:
                return self._frame_received(nbytes)
            self._end += nbytes
            return self._parse()
        except FrameError as exc:
            self._fail(exc)
            raise

    def _parse(self) -> list[RemotingCommand]:
        start, end = self._start, self._end
        # parse_frames copies what it keeps (bodies, header values): the view dies here
        commands, used = parse_frames(self._whole[start:end], self._max_frame_size)
        start += used
        if start == end:
            self._start = self._end = 0
            return commands
        self._start = start
        if end - start >= _PREFIX_LEN:
            size = frame_size(self._buffer, start)  # its prefix was checked by parse_frames
            if size > LARGE_FRAME:
                self._begin_frame(size)
        return commands

    def _begin_frame(self, size: int) -> None:
        start, end = self._start, self._end
        frame = FRAME_BUFFERS.take(size)
        frame[: end - start] = self._buffer[start:end]
        self._frame, self._frame_size, self._frame_filled = frame, size, end - start
        self._start = self._end = 0

    def _frame_received(self, nbytes: int) -> list[RemotingCommand]:
        self._frame_filled += nbytes
        if self._frame_filled < self._frame_size:
            return []
        frame, size = self._frame, self._frame_size
        assert frame is not None
        self._frame = None
        self._frame_filled = 0
        view = memoryview(frame)
        kind, header, body_at = frame_parts(view)
        body = view[body_at:size] if body_at < size else b""
        return [decode_header(kind, header, body)]
