"""Inflating a compressed message body (sysFlag COMPRESSED: the producer's zlib stream).

A pulled body is bytes from outside: it is inflated to at most `MAX_INFLATED_BODY` bytes (a
small stream can inflate a thousandfold), and a stream that is not zlib or inflates to more is a
`RecordFormatError`, the pull decoders' documented error.
"""

from __future__ import annotations

import zlib
from typing import Final

from tidemq.store.record import RecordFormatError

__all__ = ["MAX_INFLATED_BODY", "inflate_body"]

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
