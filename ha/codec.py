"""Sans-IO codecs for the HA replication stream (RocketMQ 4.x, byte for byte).

The stream has no handshake, magic or version. Every integer is big-endian and signed (Java
``ByteBuffer``); offsets are physical byte offsets in the global CommitLog.

Upstream, slave -> master: a stream of 8-byte longs, each the slave's max CommitLog offset::

    +---------------------+
    | max offset: int64   |   repeated; the first one is the slave's request offset,
    +---------------------+   every later one an ack

Downstream, master -> slave: frames of a 12-byte header and ``size`` raw CommitLog bytes::

    +---------------------+-----------------+------------------------+
    | offset: int64       | size: int32     | body: size bytes       |
    +---------------------+-----------------+------------------------+
      offset of the first   0 = heartbeat,    CommitLog bytes, shipped
      body byte             offset = the      as stored (never crosses
                            master's next     a CommitLog file)
                            transfer offset

The master sends at most ``haTransferBatchSize`` (32 KiB) per frame, but the slave only bounds a
frame by its read buffer (4 MiB in RocketMQ), so `TransferDecoder` takes the bound as an argument.

Nothing here does I/O: feed received bytes to a decoder and act on the events it returns; write
the bytes the encoders return. The slave reads the master's frames with `TransferBuffer`, the
same decoding in a buffer the transport reads into (no allocation or copy per read).
`SlaveStreamChecker` and `AckValidator` are the consistency rules of each side (reference Part
A §1.2, §1.4 and Part C), kept pure so they are tested without sockets.

Controller mode (issue 16) only, never in a RocketMQ 4.x group: the connection starts with an
epoch handshake, then the stream above follows unchanged. The slave speaks first::

    slave -> master: HELLO
    +--------------+----------------+-----------+--------------------------------------+
    | magic: int32 | brokerId: int32| n: int32  | n x (epoch: int32, startOffset: int64)|
    +--------------+----------------+-----------+--------------------------------------+
      0x54514831 ("TQH1")                          the slave's epoch file, oldest first

    master -> slave: EPOCHS
    +--------------+-----------+---------------------------------------+
    | magic: int32 | n: int32  | n x (epoch: int32, startOffset: int64) |
    +--------------+-----------+---------------------------------------+

Then the slave truncates its log at the first epoch where the two lists part (keeping the cut
bytes aside) and sends its first report. The master knows the slave's brokerId from the HELLO,
and no transfer frame crosses the start of an epoch. At most MAX_EPOCH_ENTRIES entries.

After the handshake the master also sends CONFIRM frames, a transfer header whose size is
`CONFIRM_SIZE` (-1, a size 4.x never sends and refuses) and whose offset is the master's
confirmed offset: the CommitLog end every member of its SyncStateSet has (RocketMQ 5's
confirmOffset, which its AutoSwitch HA protocol carries in every transfer header). The slave
makes readable nothing past it (a consumer directed to a slave must not read what an election
may cut). A decoder accepts CONFIRM frames only when made with ``confirm_frames=True``.

A decoder that raised `HAProtocolError` is dead: the peer is not speaking the protocol and the
only recovery is a new connection, which is cheap because replication resumes from the slave's
reported offset.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from tidemq.common.errors import DecodeError

__all__ = [
    "ACK_SIZE",
    "CONFIRM_SIZE",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_TRANSFER_BATCH_SIZE",
    "HANDSHAKE_MAGIC",
    "MAX_OFFSET",
    "MAX_WIRE_BODY_SIZE",
    "TRANSFER_HEADER_SIZE",
    "TRANSFER_READ_SIZE",
    "AckDecoder",
    "AckValidator",
    "BatchReceived",
    "ConfirmReceived",
    "Diverged",
    "EpochsDecoder",
    "HAProtocolError",
    "HeartbeatReceived",
    "HelloDecoder",
    "OffsetReported",
    "ReadableBuffer",
    "SlaveStreamChecker",
    "TransferBuffer",
    "TransferDecoder",
    "TransferEvent",
    "Verdict",
    "encode_ack",
    "encode_confirm",
    "encode_epochs",
    "encode_heartbeat",
    "encode_hello",
    "encode_transfer",
    "encode_transfer_header",
]

_ACK: Final = struct.Struct(">q")
_HEADER: Final = struct.Struct(">qi")

ACK_SIZE: Final = 8
"""Bytes in one slave report (RocketMQ ``REPORT_HEADER_SIZE``)."""
TRANSFER_HEADER_SIZE: Final = 8 + 4
"""Bytes in one master frame header (RocketMQ ``TRANSFER_HEADER_SIZE``)."""
assert _ACK.size == ACK_SIZE
assert _HEADER.size == TRANSFER_HEADER_SIZE

CONFIRM_SIZE: Final = -1
"""The size field of a CONFIRM frame (controller mode only; module docstring)."""
MAX_OFFSET: Final = 2**63 - 1
"""Largest CommitLog offset a Java long can carry."""
MAX_WIRE_BODY_SIZE: Final = 2**31 - 1
"""Largest body the int32 size field can announce."""
DEFAULT_TRANSFER_BATCH_SIZE: Final = 32 * 1024
"""RocketMQ ``haTransferBatchSize``: what a master puts in one frame."""
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
"""DoS bound of the slave: RocketMQ's slave read buffer, so a frame it could not hold is refused."""

# A queued chunk costs ~40 bytes besides its data, so a master dripping 1-byte reads would make a
# 4 MiB body hold ~170 MiB. Reads below _SMALL_READ are appended to a shared bytearray of up to
# _MERGE_LIMIT bytes instead: they pay a second copy, which small reads can afford.
_SMALL_READ: Final = 4096
_MERGE_LIMIT: Final = 64 * 1024

# What one read into a `TransferBuffer` may take, so what the slave appends per write. Measured
# on the 2-core development machine (1 MiB of L2 a core), receiving and appending 1 GiB: 1 MiB
# reads ~0.46 s of CPU, 256 KiB ones ~0.55 s (more turns), 4 MiB ones ~1.2 s (the read has
# left the CPU's cache before its page-cache copy).
TRANSFER_READ_SIZE: Final = 1024 * 1024
# How far into a `TransferBuffer` reads go before the incomplete frame moves to the front.
_RECYCLE_AT: Final = 1024 * 1024

ReadableBuffer: TypeAlias = bytes | bytearray | memoryview
"""Byte buffers accepted as input (unsigned-byte format)."""


class HAProtocolError(DecodeError):
    """The peer broke the HA protocol; close the connection (and log the message)."""


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetReported:
    """The slave reported its max CommitLog offset (a request offset or an ack)."""

    offset: int


@dataclass(frozen=True, slots=True)
class HeartbeatReceived:
    """The master sent an empty frame; ``offset`` is its next transfer offset."""

    offset: int


@dataclass(frozen=True, slots=True)
class BatchReceived:
    """The master sent ``body``, the CommitLog bytes starting at ``offset``.

    ``body`` is read-only. It is often a memoryview into the chunk that was fed, so it keeps
    that chunk alive: append it to the log and drop it, or take ``bytes(body)`` to keep it.
    """

    offset: int
    # A 32 KiB body in every log line or assertion message helps nobody.
    body: bytes | memoryview = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.body)

    @property
    def end_offset(self) -> int:
        """The slave's max offset once the body is appended."""
        return self.offset + len(self.body)


@dataclass(frozen=True, slots=True)
class ConfirmReceived:
    """Controller mode: the master's confirmed offset (what its SyncStateSet has)."""

    offset: int


TransferEvent: TypeAlias = BatchReceived | HeartbeatReceived | ConfirmReceived


@dataclass(frozen=True, slots=True)
class Diverged:
    """The master sent data for ``master_offset`` but the slave's log ends at ``local_offset``."""

    local_offset: int
    master_offset: int


Verdict: TypeAlias = Diverged | None
"""What `SlaveStreamChecker.check` found: ``None`` means the frame continues the local log."""


# -- upstream: slave -> master ---------------------------------------------------------------


def encode_ack(offset: int) -> bytes:
    """Encode one slave report.

    Raises:
        ValueError: ``offset`` is negative or beyond a Java long (a local bug, not the peer's).
    """
    _check_offset(offset)
    return _ACK.pack(offset)


class AckDecoder:
    """Decodes the slave's reports on the master.

    Reads may split and coalesce reports; the incomplete tail (< 8 bytes) is kept for the next
    feed. `feed` returns every report; `feed_last` returns only the last complete one of the
    read, which is what RocketMQ's master uses: a report is the slave's cumulative max offset,
    so a later value supersedes the earlier ones of the same read. Both reject a negative value
    anywhere in the read, since it means the stream is not made of offsets at all.
    """

    __slots__ = ("_failed", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete report held back (0 on a report boundary)."""
        return len(self._tail)

    def feed(self, data: ReadableBuffer) -> list[OffsetReported]:
        """Decode received bytes into one event per complete report.

        Raises:
            HAProtocolError: a report is negative (this and every later call).
        """
        return [OffsetReported(value) for value in self._decode(data)]

    def feed_last(self, data: ReadableBuffer) -> OffsetReported | None:
        """Decode received bytes; return only the last complete report, or None if there is none.

        Skipped reports are never acted on, so they cannot release a replicated write; checking
        every report (`AckValidator` per value) is what `feed` is for.

        Raises:
            HAProtocolError: a report is negative (this and every later call).
        """
        values = self._decode(data)
        return OffsetReported(values[-1]) if values else None

    def _decode(self, data: ReadableBuffer) -> list[int]:
        if self._failed:
            raise HAProtocolError("the report stream already failed")
        if self._tail:
            # Only the < 8-byte tail is joined: reports are tiny and rare next to the body stream.
            data = self._tail + data
        end = len(data) - len(data) % ACK_SIZE
        values = [_ACK.unpack_from(data, pos)[0] for pos in range(0, end, ACK_SIZE)]
        # Copied: the caller may reuse its read buffer.
        self._tail = bytes(data[end:])
        if values and (lowest := min(values)) < 0:
            self._failed = True
            raise HAProtocolError(f"slave reported a negative offset {lowest}")
        return values


# -- downstream: master -> slave -------------------------------------------------------------


def encode_transfer_header(offset: int, size: int) -> bytes:
    """Encode a frame header; ``size`` 0 makes a heartbeat.

    Raises:
        ValueError: an offset or size the field cannot carry, or a batch ending past
            `MAX_OFFSET` (local bugs, not the peer's).
    """
    _check_offset(offset)
    if not 0 <= size <= MAX_WIRE_BODY_SIZE:
        raise ValueError(f"body size {size} is outside 0..{MAX_WIRE_BODY_SIZE}")
    if offset > MAX_OFFSET - size:
        raise ValueError(f"batch at {offset} of {size} bytes ends past {MAX_OFFSET}")
    return _HEADER.pack(offset, size)


def encode_confirm(offset: int) -> bytes:
    """Encode a CONFIRM frame (controller mode only): the master's confirmed offset.

    Raises:
        ValueError: a negative offset or one beyond a Java long (local bugs).
    """
    _check_offset(offset)
    return _HEADER.pack(offset, CONFIRM_SIZE)


def encode_heartbeat(offset: int) -> bytes:
    """Encode a heartbeat; ``offset`` is the master's next transfer offset."""
    return encode_transfer_header(offset, 0)


def encode_transfer(offset: int, body: ReadableBuffer) -> list[bytes | memoryview]:
    """Encode a frame as buffers for ``writelines``: the header, then ``body`` uncopied.

    The body view aliases ``body`` (typically a slice of the mapped CommitLog file), so the
    caller must not change it until the transport has sent it. An empty body gives a heartbeat
    (the header alone).

    Raises:
        ValueError: as `encode_transfer_header`.
    """
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    header = encode_transfer_header(offset, view.nbytes)
    return [header, view] if view.nbytes else [header]


class TransferDecoder:
    """Decodes the master's frames on the slave.

    Strategy: fed chunks are queued, not appended to a buffer, so a body that lies inside one
    fed ``bytes`` chunk is returned as a memoryview of it (no copy) and a body spread over
    several chunks is joined once (one copy). Chunks that are not ``bytes`` are copied once on
    feed because the caller may reuse them (``recv_into``, asyncio buffered protocols). Small
    reads are merged into one buffer so that many tiny reads cannot multiply the memory held.

    A header is validated as soon as its 12 bytes are in, so a frame larger than
    ``max_body_size`` is refused before its body is buffered: the decoder never holds more than
    one incomplete frame plus the chunk it arrived in.

    Args:
        max_body_size: the largest body accepted; the master's ``haTransferBatchSize`` must
            not exceed it.

    Raises:
        ValueError: ``max_body_size`` is outside 1..`MAX_WIRE_BODY_SIZE`.
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_failed",
        "_header",
        "_pos",
        "confirm_frames",
        "max_body_size",
    )

    def __init__(
        self, max_body_size: int = DEFAULT_MAX_BODY_SIZE, *, confirm_frames: bool = False
    ) -> None:
        if not 1 <= max_body_size <= MAX_WIRE_BODY_SIZE:
            raise ValueError(f"max_body_size {max_body_size} is outside 1..{MAX_WIRE_BODY_SIZE}")
        self.max_body_size: Final = max_body_size
        self.confirm_frames = confirm_frames  # controller mode: CONFIRM frames accepted
        # bytes are fed chunks kept as they came; a bytearray holds merged small reads.
        self._chunks: deque[bytes | bytearray] = deque()
        self._pos = 0  # bytes of _chunks[0] already consumed
        self._buffered = 0  # bytes queued and not yet consumed
        self._header: tuple[int, int] | None = None  # parsed, waiting for its body
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back (0 on a frame boundary).

        At end of stream a nonzero value means the master closed in the middle of a frame.
        """
        return self._buffered + (TRANSFER_HEADER_SIZE if self._header is not None else 0)

    def feed(self, data: ReadableBuffer) -> list[TransferEvent]:
        """Decode received bytes into the frames they complete, in stream order.

        If a header is invalid the frames completed earlier in the same call are not returned;
        the slave reconnects and the master resends from the slave's reported offset.

        Raises:
            HAProtocolError: a negative offset or size, a size above ``max_body_size``, or a
                batch ending past `MAX_OFFSET` (this and every later call).
        """
        if self._failed:
            raise HAProtocolError("the transfer stream already failed")
        if data:
            self._enqueue(data)
        events: list[TransferEvent] = []
        while True:
            if self._header is None:
                if self._buffered < TRANSFER_HEADER_SIZE:
                    return events
                self._header = self._parse_header(self._take(TRANSFER_HEADER_SIZE))
            offset, size = self._header
            if size == CONFIRM_SIZE:
                self._header = None
                events.append(ConfirmReceived(offset))
                continue
            if self._buffered < size:
                return events
            self._header = None
            if size:
                events.append(BatchReceived(offset, self._take(size)))
            else:
                events.append(HeartbeatReceived(offset))

    def _parse_header(self, raw: bytes | memoryview) -> tuple[int, int]:
        offset, size = _HEADER.unpack(raw)
        reason = _bad_header(offset, size, self.max_body_size, self.confirm_frames)
        if reason is None:
            return offset, size
        self._failed = True
        raise HAProtocolError(f"master sent a bad frame header: {reason}")

    def _enqueue(self, data: ReadableBuffer) -> None:
        size = len(data)
        self._buffered += size
        if size >= _SMALL_READ:
            self._chunks.append(data if type(data) is bytes else bytes(data))
            return
        last = self._chunks[-1] if self._chunks else None
        if isinstance(last, bytearray) and len(last) < _MERGE_LIMIT:
            last += data
        else:
            self._chunks.append(bytearray(data))

    def _take(self, n: int) -> bytes | memoryview:
        """Consume ``n`` queued bytes (the caller checked they are there)."""
        self._buffered -= n
        first = self._chunks[0]
        start = self._pos
        end = start + n
        if end <= len(first):
            if end == len(first):
                self._chunks.popleft()
                self._pos = 0
            else:
                self._pos = end
            if isinstance(first, bytearray):
                # A view would pin a buffer that later reads append to (resizing it would raise).
                return bytes(memoryview(first)[start:end])
            return first if start == 0 and end == len(first) else memoryview(first)[start:end]
        parts: list[memoryview] = []
        while n:
            chunk = self._chunks[0]
            available = len(chunk) - self._pos
            if available <= n:
                parts.append(memoryview(chunk)[self._pos :])
                self._chunks.popleft()
                self._pos = 0
                n -= available
            else:
                parts.append(memoryview(chunk)[self._pos : self._pos + n])
                self._pos += n
                n = 0
        return b"".join(parts)


def _bad_header(
    offset: int, size: int, max_body_size: int, confirm_frames: bool = False
) -> str | None:
    """Why a frame header is refused (None: it is not)."""
    if offset < 0:
        return f"negative offset {offset}"
    if size == CONFIRM_SIZE and confirm_frames:
        return None
    if size < 0:
        return f"negative body size {size} at offset {offset}"
    if size > max_body_size:
        return f"body size {size} at offset {offset} exceeds {max_body_size}"
    if offset > MAX_OFFSET - size:
        return f"batch at {offset} of {size} bytes ends past {MAX_OFFSET}"
    return None


class TransferBuffer:
    """Decodes the master's frames in a buffer the transport reads into (the slave's receive
    path: asyncio's BufferedProtocol), so no read allocates or copies anything.

    `get_buffer` gives the free space for the next read (at most ``read_size`` bytes),
    `received` decodes what the read put there and returns the frames it completed, in stream
    order, with the same events and the same refusals as `TransferDecoder`. A body is a
    read-only view of the buffer, valid until the next `get_buffer`: append it before then
    (or copy it). The bytes of an incomplete frame stay where they are; once the decoded part
    of the buffer passes ``_RECYCLE_AT`` (or the next read would not fit), they are moved to
    the front, which copies at most one frame. So the buffer is reused from the front while
    the reads are still in the CPU's cache, and it never holds more than one incomplete frame
    and one read: ``TRANSFER_HEADER_SIZE + max_body_size + read_size`` bytes, allocated once.

    A header is validated as soon as its 12 bytes are in, so a frame larger than
    ``max_body_size`` is refused before its body arrives.

    Raises:
        ValueError: ``max_body_size`` is outside 1..`MAX_WIRE_BODY_SIZE`, or ``read_size`` is
            not positive.
    """

    __slots__ = (
        "_buffer",
        "_end",
        "_failed",
        "_read_only",
        "_start",
        "_writable",
        "confirm_frames",
        "max_body_size",
        "read_size",
    )

    def __init__(
        self,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        read_size: int = TRANSFER_READ_SIZE,
        *,
        confirm_frames: bool = False,
    ) -> None:
        if not 1 <= max_body_size <= MAX_WIRE_BODY_SIZE:
            raise ValueError(f"max_body_size {max_body_size} is outside 1..{MAX_WIRE_BODY_SIZE}")
        if read_size < 1:
            raise ValueError(f"read_size {read_size} is not positive")
        self.max_body_size: Final = max_body_size
        self.read_size: Final = read_size
        self.confirm_frames = confirm_frames  # controller mode: CONFIRM frames accepted
        self._buffer = bytearray(TRANSFER_HEADER_SIZE + max_body_size + read_size)
        self._writable = memoryview(self._buffer)
        self._read_only = self._writable.toreadonly()
        self._start = 0  # first byte not decoded yet
        self._end = 0  # end of the bytes received
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back (0 on a frame boundary)."""
        return self._end - self._start

    def get_buffer(self) -> memoryview:
        """Where the next read goes (1..``read_size`` bytes); ends the life of the bodies
        `received` returned before."""
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = end = 0
        elif start >= _RECYCLE_AT or end + self.read_size > len(self._buffer):
            pending = end - start
            self._writable[:pending] = self._writable[start:end]
            self._start, self._end = 0, pending
            end = pending
        return self._writable[end : end + self.read_size]

    def received(self, nbytes: int) -> list[TransferEvent]:
        """Decode the ``nbytes`` the last read put at the start of `get_buffer`'s view.

        If a header is invalid the frames completed earlier in the same call are not returned;
        the slave reconnects and the master resends from the slave's reported offset.

        Raises:
            HAProtocolError: as `TransferDecoder.feed` (this and every later call).
            ValueError: ``nbytes`` is more than the view had room for.
        """
        if self._failed:
            raise HAProtocolError("the transfer stream already failed")
        end = self._end + nbytes
        if not 0 <= nbytes <= self.read_size or end > len(self._buffer):
            raise ValueError(f"{nbytes} bytes received into a view of at most {self.read_size}")
        self._end = end
        buffer, view, max_body = self._buffer, self._read_only, self.max_body_size
        unpack = _HEADER.unpack_from
        pos = self._start
        events: list[TransferEvent] = []
        while end - pos >= TRANSFER_HEADER_SIZE:
            offset, size = unpack(buffer, pos)
            if offset < 0 or not 0 <= size <= max_body or offset > MAX_OFFSET - size:
                if size == CONFIRM_SIZE and offset >= 0 and self.confirm_frames:
                    events.append(ConfirmReceived(offset))
                    pos += TRANSFER_HEADER_SIZE
                    continue
                self._failed = True
                reason = _bad_header(offset, size, max_body, self.confirm_frames)
                raise HAProtocolError(f"master sent a bad frame header: {reason}")
            body = pos + TRANSFER_HEADER_SIZE
            stop = body + size
            if stop > end:
                break
            if size:
                events.append(BatchReceived(offset, view[body:stop]))
            else:
                events.append(HeartbeatReceived(offset))
            pos = stop
        self._start = pos
        return events


# -- consistency rules -----------------------------------------------------------------------


class SlaveStreamChecker:
    """The slave's check that each frame continues its local CommitLog (Part A §1.4).

    Every frame, heartbeats included, must start at the slave's max offset; an empty slave
    (max 0) accepts any offset, which is how it adopts the start of the master's last file.
    RocketMQ closes on a mismatch with one log line and reconnects forever (#323); returning
    `Diverged` with both offsets lets the service report it and stop retrying (Part C).

    Raises:
        ValueError: ``local_max_offset`` is negative.
    """

    __slots__ = ("_local",)

    def __init__(self, local_max_offset: int) -> None:
        _check_offset(local_max_offset)
        self._local = local_max_offset

    @property
    def local_max_offset(self) -> int:
        return self._local

    def check(self, event: TransferEvent) -> Verdict:
        """Return `Diverged` if ``event`` does not start at the local max offset, else None (a
        CONFIRM frame continues nothing: always None)."""
        if isinstance(event, ConfirmReceived):
            return None
        if self._local != 0 and event.offset != self._local:
            return Diverged(self._local, event.offset)
        return None

    def applied(self, batch: BatchReceived) -> None:
        """Record that ``batch`` was appended to the local log.

        Takes the batch rather than its size because an empty slave's log starts at the
        batch's offset, not at 0.

        Raises:
            ValueError: ``batch`` diverges (it should never have been appended).
        """
        verdict = self.check(batch)
        if verdict is not None:
            raise ValueError(f"cannot apply a diverged batch: {verdict}")
        self._local = batch.end_offset


class AckValidator:
    """The master's check of one connection's reports (Part C, RocketMQ #3015).

    The first report is the slave's request offset: where to start sending. Every later report
    is an ack and is the only kind that may release SYNC_MASTER writes, so a slave that
    reconnects cannot vouch for data with its first word. An ack above the master's max offset,
    or any report below the connection's previous one, is a violation. A first report above the
    master's max is not: it is a slave that holds more than its master (diverged), and the
    master answers it with a heartbeat at its own max so that the slave sees and reports the
    divergence instead of reconnecting forever (RocketMQ 4.9.2+ exempts it the same way).
    """

    __slots__ = ("_last", "slave_ack_offset", "slave_request_offset")

    def __init__(self) -> None:
        # The first report; None until there is one.
        self.slave_request_offset: int | None = None
        # The last report that counts as an ack; None until the second report.
        self.slave_ack_offset: int | None = None
        # The previous report, request included: reports never go backwards.
        self._last: int | None = None

    def report(self, offset: int, master_max_offset: int) -> int | None:
        """Validate and record a report; return it if it counts as an ack, None for the first.

        State is unchanged when the report is refused.

        Raises:
            HAProtocolError: the report is above ``master_max_offset`` or below the previous
                report of this connection.
        """
        if offset > master_max_offset and self._last is not None:
            raise HAProtocolError(
                f"slave ack {offset} is above the master's max offset {master_max_offset}"
            )
        if self._last is not None and offset < self._last:
            raise HAProtocolError(f"slave ack {offset} is below its previous report {self._last}")
        self._last = offset
        if self.slave_request_offset is None:
            self.slave_request_offset = offset
            return None
        self.slave_ack_offset = offset
        return offset


def _check_offset(offset: int) -> None:
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset {offset} is outside 0..{MAX_OFFSET}")


# --- controller mode's epoch handshake (module docstring) ---------------------------------------

HANDSHAKE_MAGIC: Final = 0x54514831  # "TQH1"
MAX_EPOCH_ENTRIES: Final = 100_000
_ENTRY: Final = struct.Struct(">iq")
_INT: Final = struct.Struct(">i")


def _encode_entries(entries: list[tuple[int, int]]) -> bytes:
    if len(entries) > MAX_EPOCH_ENTRIES:
        raise ValueError(f"{len(entries)} epoch entries, at most {MAX_EPOCH_ENTRIES}")
    return _INT.pack(len(entries)) + b"".join(_ENTRY.pack(e, o) for e, o in entries)


def encode_hello(broker_id: int, entries: list[tuple[int, int]]) -> bytes:
    """The slave's HELLO: its brokerId and its epoch file as (epoch, start offset) pairs."""
    return _INT.pack(HANDSHAKE_MAGIC) + _INT.pack(broker_id) + _encode_entries(entries)


def encode_epochs(entries: list[tuple[int, int]]) -> bytes:
    """The master's answer: its epoch file."""
    return _INT.pack(HANDSHAKE_MAGIC) + _encode_entries(entries)


class _EntriesDecoder:
    """Accumulates one handshake message; `feed` returns the bytes after it once complete."""

    def __init__(self, fixed: int) -> None:
        self._fixed = fixed  # int32 fields before the count, magic included
        self._buffer = bytearray()
        self.fields: list[int] = []
        self.entries: list[tuple[int, int]] = []
        self.done = False

    def feed(self, data: bytes) -> bytes | None:
        """None until the message is complete; then the bytes that followed it."""
        if self.done:
            return bytes(data)
        self._buffer += data
        head = 4 * (self._fixed + 1)
        if len(self._buffer) < head:
            return None
        values = [_INT.unpack_from(self._buffer, 4 * i)[0] for i in range(self._fixed + 1)]
        if values[0] != HANDSHAKE_MAGIC:
            raise HAProtocolError(f"epoch handshake: bad magic 0x{values[0] & 0xFFFFFFFF:08x}")
        count = values[-1]
        if not 0 <= count <= MAX_EPOCH_ENTRIES:
            raise HAProtocolError(f"epoch handshake: {count} entries")
        end = head + count * _ENTRY.size
        if len(self._buffer) < end:
            return None
        self.fields = values[1:-1]
        self.entries = [
            _ENTRY.unpack_from(self._buffer, head + i * _ENTRY.size) for i in range(count)
        ]
        for (epoch, start), (next_epoch, next_start) in zip(
            self.entries, self.entries[1:], strict=False
        ):
            if next_epoch <= epoch or next_start < start:
                raise HAProtocolError("epoch handshake: entries out of order")
        self.done = True
        rest = bytes(self._buffer[end:])
        self._buffer.clear()
        return rest


class HelloDecoder(_EntriesDecoder):
    """The master's side: the slave's HELLO (`broker_id`, `entries`)."""

    def __init__(self) -> None:
        super().__init__(fixed=2)

    @property
    def broker_id(self) -> int:
        return self.fields[0]


class EpochsDecoder(_EntriesDecoder):
    """The slave's side: the master's EPOCHS (`entries`)."""

    def __init__(self) -> None:
        super().__init__(fixed=1)
