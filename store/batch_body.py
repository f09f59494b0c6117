"""The body of SEND_BATCH_MESSAGE (320): RocketMQ's MessageDecoder.encodeMessages layout.

Messages back to back, each big-endian:

    [4 total size][4 magic (0)][4 body CRC (0)][4 flag][4 body length][body]
    [2 properties length][properties]

Topic and queue come from the request header; every size is checked when reading. The producer
encodes it (`encode_batch_body`); the broker's store reads it in place (`read_batch_message`,
used by `store.record.encode_batch`), never decoding a message it only copies.
"""

from __future__ import annotations

import struct

from tidemq.common.errors import DecodeError

BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body CRC, flag, body length
_SHORT = struct.Struct(">h")
HEAD_SIZE = BATCH_HEAD.size


class BatchDecodeError(DecodeError, ValueError):
    """A batch body's sizes or magic do not add up; the message says where."""


def read_batch_message(view: memoryview, pos: int) -> tuple[int, int, int, int]:
    """(body start, properties start, end, flag) of the message at `pos`; sizes are checked.

    The body is `view[body_start:properties_start - 2]`, its 4-byte length just before it; the
    properties are `view[properties_start:end]`, and the next message starts at `end`.
    """
    size = len(view)
    if pos + HEAD_SIZE > size:
        raise BatchDecodeError("batch body ends inside a message header")
    total, _magic, _crc, flag, body_len = BATCH_HEAD.unpack_from(view, pos)
    end = pos + total
    body_at = pos + HEAD_SIZE
    if total < HEAD_SIZE + 2 or end > size or body_len < 0:
        raise BatchDecodeError(f"batch message at {pos} has a bad size {total}")
    props_at = body_at + body_len + 2
    if props_at > end:
        raise BatchDecodeError(f"batch message at {pos}: body length {body_len} too large")
    props_len = _SHORT.unpack_from(view, props_at - 2)[0]
    if props_len < 0 or props_at + props_len != end:
        raise BatchDecodeError(f"batch message at {pos}: properties length mismatch")
    return body_at, props_at, end, flag


def decode_batch_body(body: bytes | bytearray | memoryview) -> list[tuple[int, bytes, str]]:
    """(flag, body, properties) per message of a SEND_BATCH_MESSAGE body; sizes are checked."""
    view = memoryview(body)
    out: list[tuple[int, bytes, str]] = []
    pos = 0
    while pos < len(view):
        body_at, props_at, end, flag = read_batch_message(view, pos)
        props = str(view[props_at:end], "utf-8", "replace")
        out.append((flag, bytes(view[body_at : props_at - 2]), props))
        pos = end
    return out


def encode_batch_body(messages: list[tuple[int, bytes, str]]) -> bytes:
    parts = []
    for flag, body, props in messages:
        raw_props = props.encode()
        total = BATCH_HEAD.size + len(body) + 2 + len(raw_props)
        parts.append(BATCH_HEAD.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_SHORT.pack(len(raw_props)))
        parts.append(raw_props)
    return b"".join(parts)
