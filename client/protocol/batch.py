"""The body of SEND_BATCH_MESSAGE (320): RocketMQ's MessageDecoder.encodeMessages layout.

Messages back to back, each big-endian:

    [4 total size][4 magic (0)][4 body CRC (0)][4 flag][4 body length][body]
    [2 properties length][properties]

Topic and queue come from the request header; every size is checked when decoding.
"""

from __future__ import annotations

import struct

_BATCH_HEAD = struct.Struct(">iiiii")
_SHORT = struct.Struct(">h")


class BatchDecodeError(ValueError):
    pass


def decode_batch_body(body: bytes | bytearray | memoryview) -> list[tuple[int, bytes, str]]:
    """(flag, body, properties) per message of a SEND_BATCH_MESSAGE body; sizes are checked."""
    view = memoryview(body)
    out: list[tuple[int, bytes, str]] = []
    pos = 0
    while pos < len(view):
        if pos + _BATCH_HEAD.size > len(view):
            raise BatchDecodeError("batch body ends inside a message header")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        end = pos + total
        start = pos + _BATCH_HEAD.size
        if total < _BATCH_HEAD.size + 2 or end > len(view) or body_len < 0:
            raise BatchDecodeError(f"batch message at {pos} has a bad size {total}")
        if start + body_len + 2 > end:
            raise BatchDecodeError(f"batch message at {pos}: body length {body_len} too large")
        msg_body = bytes(view[start : start + body_len])
        props_len = _SHORT.unpack_from(view, start + body_len)[0]
        props_start = start + body_len + 2
        if props_len < 0 or props_start + props_len != end:
            raise BatchDecodeError(f"batch message at {pos}: properties length mismatch")
        props = bytes(view[props_start:end]).decode("utf-8", "replace")
        out.append((flag, msg_body, props))
        pos = end
    return out


def encode_batch_body(messages: list[tuple[int, bytes, str]]) -> bytes:
    parts = []
    for flag, body, props in messages:
        raw_props = props.encode()
        total = _BATCH_HEAD.size + len(body) + 2 + len(raw_props)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_SHORT.pack(len(raw_props)))
        parts.append(raw_props)
    return b"".join(parts)
