"""Framing of the RocketMQ remoting protocol, sans-IO: commands to bytes and bytes to commands.

A frame, big-endian (`RemotingCommand.encode`/`decode`, `NettyDecoder`)::

    int32 length           = 4 + headerLen + bodyLen   (the bytes after this field)
    uint32 typeAndHeaderLen = serializeType << 24 | headerLen   (headerLen: 24 bits)
    header                  headerLen bytes in that serialisation (`client.remoting.headers`)
    body                    the rest: length - 4 - headerLen bytes

`encode_command` gives a frame's bytes; `encode_command_parts` gives the prefix+header and the
body separately so a transport can `writelines` them without copying a large body. A command's
`body_views` follow its `body` in the frame (bodyLen counts both); `encode_command_parts` leaves
them to the caller, to be written after the body as they are. Both raise `EncodeError` for a
command no transport can write: a body that is not bytes, bytearray or a C-contiguous memoryview,
a header longer than 24 bits can say, a frame longer than its 32-bit length field.

`FrameDecoder` is fed whatever the socket delivered, split or coalesced anywhere, and returns the
commands completed so far; it buffers the incomplete tail. It checks a frame's prefix as soon as
it arrives, before waiting for the rest, and raises `FrameError` when the length field is below 4
or above `max_frame_size` (16 MiB by default, as RocketMQ's NettyDecoder), when the header length
exceeds `length - 4`, when the serialisation is unknown, or when the header does not decode
(`HeaderDecodeError`). A stream cannot be resynchronised after that: the decoder refuses further
input, commands completed earlier in the same `feed` call are dropped with the error, and the
connection is to be closed.

Decoded bodies are `bytes` copied out of the input, so they outlive the caller's buffers. A
large frame that arrives in many chunks (a 1 MiB pull response comes in a few reads) is not
grown in the buffer chunk by chunk: once its header is in, the chunks are kept as they are and
its body joined once it is complete, one copy of each byte. Chunks under 16 KiB (a peer
trickling its frame) are gathered into bytearrays of up to 256 KiB instead, so the memory held
stays close to `buffered`, the bytes received (a bytes object per 1-byte read would cost some 50
bytes of memory per byte); bytearrays grow by an eighth, the most memory held beyond it.

`discard(reason)` drops an incomplete frame at once and fails the decoder: its connection is
closed for a limit (broker.remoting.limits).
"""

from __future__ import annotations

import struct
from typing import Final

from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import EncodeError, FrameError
from tidemq.client.remoting.headers import decode_header, encode_header
from tidemq.common import speedups

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "encode_command",
    "encode_command_parts",
    "frame_parts",
    "frame_size",
]

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024

# the length field, then the serialize type and header length word
_PREFIX: Final = struct.Struct(">iI")
_LENGTH: Final = struct.Struct(">i")
_PREFIX_LEN: Final = _PREFIX.size
assert _PREFIX_LEN == 8
_MAX_HEADER_LEN: Final = 0xFFFFFF
_MAX_LENGTH: Final = 2**31 - 1
# A frame with at least this much still to come is collected as a list of the received chunks
# and joined once complete (one copy), instead of growing the buffer chunk by chunk.
_COLLECT_MIN: Final = 64 * 1024
_KNOWN_TYPES: Final = len(SerializeType)
# A frame in collection gathers chunks smaller than this into bytearrays of up to _GATHER_MAX.
_GATHER_BELOW: Final = 16 * 1024
_GATHER_MAX: Final = 256 * 1024


def _nbytes(body: Body) -> int:
    if isinstance(body, (bytes, bytearray)):
        return len(body)
    # A transport writes buffers, nothing else: anything else fails here, where the one request
    # it belongs to fails with it, not in the write that carries other requests' frames too.
    if not isinstance(body, memoryview):
        raise EncodeError(
            f"a body must be bytes, bytearray or memoryview, not {type(body).__name__}"
        )
    if not body.c_contiguous:
        raise EncodeError("a memoryview body must be C-contiguous to be written")
    # len() of a memoryview counts items, not bytes, when its format is wider than one byte
    return body.nbytes


def _body_length(cmd: RemotingCommand) -> int:
    return _nbytes(cmd.body) + sum([view.nbytes for view in cmd.body_views])


def _prefix_and_header(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    header = encode_header(cmd)
    header_len = len(header)
    if header_len > _MAX_HEADER_LEN:
        raise EncodeError(f"header of {header_len} bytes exceeds the 24-bit header length")
    length = 4 + header_len + _body_length(cmd)
    if length > _MAX_LENGTH:
        raise EncodeError(f"frame of {length} bytes exceeds the 32-bit length field")
    return _PREFIX.pack(length, (int(cmd.serialize_type) << 24) | header_len), header


def encode_command_parts(cmd: RemotingCommand) -> tuple[bytes, Body]:
    """The frame of `cmd` as (length, type word and header; body), for a vectored write; its
    `body_views` are the rest of the frame."""
    prefix, header = _prefix_and_header(cmd)
    return prefix + header, cmd.body


# The compiled twin (client/remoting/_codec.pyx) when built: a msgpack or JSON command's prefix and
# header are written into one bytes object (every response and request goes through here).
encode_command_parts = speedups.select(encode_command_parts, "tidemq.client.remoting._codec")


def encode_command(cmd: RemotingCommand) -> bytes:
    """The frame of `cmd` as one bytes object."""
    prefix, header = _prefix_and_header(cmd)
    return b"".join((prefix, header, cmd.body, *cmd.body_views))


class FrameDecoder:
    """Turns a byte stream into `RemotingCommand`s; see the module docstring for the checks.

    Usage: `for cmd in decoder.feed(chunk): ...` for every chunk read; `FrameError` means close.
    """

    __slots__ = ("_buffer", "_collected", "_error", "_max_frame_size", "_missing", "_parts")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not 4 <= max_frame_size <= _MAX_LENGTH:
            raise ValueError(f"max_frame_size must be in [4, {_MAX_LENGTH}], not {max_frame_size}")
        self._max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._error: FrameError | None = None
        # A large frame in collection: its chunks so far (the first holds the prefix and the
        # whole header), their size, and how many bytes the frame still misses (0: none).
        self._parts: list[bytes | bytearray] = []
        self._collected = 0
        self._missing = 0

    @property
    def max_frame_size(self) -> int:
        """The largest value of a frame's length field that is accepted."""
        return self._max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet complete a frame."""
        return len(self._buffer) + self._collected

    @property
    def failed(self) -> bool:
        """True once a `FrameError` was raised: the decoder accepts nothing more."""
        return self._error is not None

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Add received bytes; return the commands they complete, in stream order."""
        if self._error is not None:
            raise FrameError(f"decoder already failed: {self._error}")
        try:
            if self._missing:
                return self._feed_collecting(data)
            if self._buffer:
                return self._feed_buffered(data)
            return self._feed_direct(data)
        except FrameError as exc:
            self._fail(exc)
            raise

    def discard(self, reason: str) -> None:
        """Drop the incomplete frame now and accept nothing more (the connection closes)."""
        self._fail(FrameError(reason))

    def _fail(self, exc: FrameError) -> None:
        self._error = exc
        # a new object, not clear(): a view into the old buffer may still be alive here
        self._buffer = bytearray()
        self._parts, self._collected, self._missing = [], 0, 0

    def _feed_direct(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        # Nothing is pending: parse in place and copy only the incomplete tail.
        with memoryview(data) as view, view.cast("B") as octets:
            commands, used = parse_frames(octets, self._max_frame_size)
            if used < len(octets):
                self._buffer += octets[used:]
                self._start_collecting()
        return commands

    def _feed_buffered(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buffer = self._buffer
        buffer += data
        with memoryview(buffer) as view:
            commands, used = parse_frames(view, self._max_frame_size)
        # the view is released, so the buffer may shrink; deleting a prefix is cheap in CPython
        del buffer[:used]
        self._start_collecting()
        return commands

    def _start_collecting(self) -> None:
        # The buffer holds the start of a frame (its prefix checked by `_parse`). When much of
        # it is still to come and its header is here, collect the rest chunk by chunk.
        buffer = self._buffer
        if len(buffer) < _PREFIX_LEN:
            return
        length, word = _PREFIX.unpack_from(buffer, 0)
        missing = 4 + length - len(buffer)
        if missing < _COLLECT_MIN or len(buffer) < _PREFIX_LEN + (word & _MAX_HEADER_LEN):
            return
        self._parts = [bytes(buffer)]
        self._collected = len(buffer)
        self._missing = missing
        self._buffer = bytearray()

    def _feed_collecting(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        if size < self._missing:
            parts = self._parts
            if size >= _GATHER_BELOW:
                # bytes can be kept as they are; anything else may be reused by the caller
                parts.append(data if isinstance(data, bytes) else bytes(data))
            else:
                last = parts[-1]
                if type(last) is bytearray and len(last) + size <= _GATHER_MAX:
                    last += data
                else:
                    parts.append(bytearray(data))
            self._collected += size
            self._missing -= size
            return []
        with memoryview(data) as view, view.cast("B") as octets:
            missing = self._missing
            first, *rest = self._parts
            self._parts, self._collected, self._missing = [], 0, 0
            with memoryview(first) as head:
                kind, header, body_at = frame_parts(head)
                body = b"".join((head[body_at:], *rest, octets[:missing]))
                command = decode_header(kind, header, body)
            if missing == len(octets):
                return [command]
            return [command, *self._feed_direct(octets[missing:])]


def parse_frames(view: memoryview, max_frame_size: int) -> tuple[list[RemotingCommand], int]:
    """The whole frames at the start of `view` (one-byte items) as commands, and the bytes they
    take; `FrameError` for a bad prefix (also of a frame not yet complete) or header."""
    commands: list[RemotingCommand] = []
    append = commands.append
    pos = 0
    end = len(view)
    while end - pos >= _PREFIX_LEN:
        length, word = _PREFIX.unpack_from(view, pos)
        _check_prefix(length, word, max_frame_size)
        frame_end = pos + 4 + length
        if frame_end > end:
            break
        header_end = pos + _PREFIX_LEN + (word & _MAX_HEADER_LEN)
        body = bytes(view[header_end:frame_end]) if header_end < frame_end else b""
        append(decode_header(word >> 24, view[pos + _PREFIX_LEN : header_end], body))
        pos = frame_end
    if end - pos >= 4:  # fail fast on a bad length even before the type word arrives
        _check_length(_LENGTH.unpack_from(view, pos)[0], max_frame_size)
    return commands, pos


def frame_size(view: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The whole size (length field included) of the frame starting at `pos` (4 bytes in)."""
    return 4 + int(_LENGTH.unpack_from(view, pos)[0])


def frame_parts(view: memoryview) -> tuple[int, memoryview, int]:
    """(serialize type, header, where the body starts) of the frame at the start of `view`,
    whose prefix was checked and whose header is all in."""
    word = _PREFIX.unpack_from(view, 0)[1]
    header_end = _PREFIX_LEN + (word & _MAX_HEADER_LEN)
    return word >> 24, view[_PREFIX_LEN:header_end], header_end


def _check_prefix(length: int, word: int, max_frame_size: int) -> None:
    _check_length(length, max_frame_size)
    header_len = word & _MAX_HEADER_LEN
    if header_len > length - 4:
        raise FrameError(f"header length {header_len} exceeds frame length {length} - 4")
    if word >> 24 >= _KNOWN_TYPES:
        raise FrameError(f"unknown serialize type {word >> 24}")


def _check_length(length: int, max_frame_size: int) -> None:
    if length < 4:
        raise FrameError(f"frame length {length} is below the minimum of 4")
    if length > max_frame_size:
        raise FrameError(f"frame length {length} exceeds the maximum {max_frame_size}")


# The compiled twin (client/remoting/_codec.pyx) when built: the loop over a read's frames in C,
# with msgpack and JSON headers decoded in place.
parse_frames = speedups.select(parse_frames, "tidemq.client.remoting._codec")
