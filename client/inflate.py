"""Inflating a compressed message body (sysFlag COMPRESSED: the producer's zlib stream).

A pulled body is bytes from outside: it is inflated to at most `MAX_INFLATED_BODY` bytes (a
small stream can inflate a thousandfold), and a stream that is not zlib or inflates to more is a
`RecordFormatError`, the pull decoders' documented error.

`readable_body` is what tools that show a stored message to a person use (mqadmin, the
dashboard): the body its producer gave, or, for a compressed body that does not inflate, the
bytes as stored with the reason, so that one damaged message does not hide the others.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Final

from tidemq.store.layout import FLAG_COMPRESSED
from tidemq.store.record import RecordFormatError, StoredMessage

__all__ = ["MAX_INFLATED_BODY", "ReadableBody", "inflate_body", "producer_body", "readable_body"]

# RocketMQ's producers compress bodies of at most maxMessageSize (4 MiB by default) before
# sending; a broker configured higher stays within its 16 MiB frames.
MAX_INFLATED_BODY: Final = 16 * 1024 * 1024


def inflate_body(data: bytes | memoryview, limit: int = MAX_INFLATED_BODY) -> bytes:
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(data, limit)
    except zlib.error as exc:
        raise RecordFormatError(f"compressed message body is not zlib: {exc}") from exc
    if inflater.unconsumed_tail:
        raise RecordFormatError(f"compressed message body inflates to more than {limit} bytes")
    if not inflater.eof:
        raise RecordFormatError("compressed message body is not zlib: the stream is cut short")
    return inflated


def producer_body(msg: StoredMessage) -> bytes:
    """The body as its producer gave it: inflated when its sysFlag says compressed.

    Raises `RecordFormatError` for a compressed body that does not inflate."""
    if msg.sys_flag & FLAG_COMPRESSED:
        return inflate_body(msg.body)
    return bytes(msg.body)


@dataclass(frozen=True, slots=True)
class ReadableBody:
    """A stored body for a person: `data` as the producer gave it, or, when `error` says why
    a compressed body did not inflate, as stored."""

    data: bytes
    error: str | None = None

    @property
    def size(self) -> int:
        return len(self.data)

    def text(self, charset: str = "utf-8", limit: int | None = None) -> str:
        """The body decoded (undecodable bytes replaced), its first `limit` bytes when given;
        a body that did not inflate is named as such instead."""
        if self.error is not None:
            return f"<{self.error}: {len(self.data)} bytes as stored>"
        shown = self.data if limit is None else self.data[:limit]
        return shown.decode(charset, errors="replace")


def readable_body(msg: StoredMessage) -> ReadableBody:
    """`msg`'s body for a person (module docstring)."""
    try:
        return ReadableBody(producer_body(msg))
    except RecordFormatError as exc:
        return ReadableBody(bytes(msg.body), str(exc))
