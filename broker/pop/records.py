"""The records POP keeps in its revive topic, sans-IO: their tags and JSON bodies.

Revive topic `rmq_sys_REVIVE_LOG_<cluster>` (RocketMQ's name), consumed by the revive service
as group `CID_RMQ_SYS_REVIVE_GROUP`. Each record's TAGS says what it is; its body is JSON with
RocketMQ's short field names where RocketMQ has the record (PopCheckPoint, AckMsg):

| tag     | body                                                                         |
|---------|------------------------------------------------------------------------------|
| `ck`    | {"so": start offset, "pt": pop time, "it": invisible time, "q": queue id,     |
|         |  "t": topic, "c": group, "d": [offset - start offset, ...]}                   |
| `ack`   | {"so", "pt", "q", "t", "c" of its CK, "ao": acknowledged offset,              |
|         |  "any": true when it ends the offset in any CK (a consumer's ack)}           |
| `back`  | {"so", "pt", "q", "t", "c" of one CK, "aol": [acknowledged offset, ...],     |
|         |  "any"}: the acks of one AckMessage / BATCH_ACK in one record (tidemq's;      |
|         |  RocketMQ 5 has a BatchAckMsg of its own for the same purpose)               |
| `close` | the CK's key: {"so", "pt", "q", "t", "c"} (tidemq's: the CK was revived)      |

`decode(tag, body)` refuses anything else with `PopRecordError` naming what is wrong (a
revive queue holds only what the broker wrote, but a damaged record must stop nothing: the
revive service logs it and reads on).
"""

from __future__ import annotations

import json
from typing import Any, Final

from tidemq.broker.pop.ledger import Ack, Checkpoint, CheckpointKey
from tidemq.common.errors import DecodeError

REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
BATCH_ACK_TAG: Final = "back"
CLOSE_TAG: Final = "close"
MAX_OFFSETS: Final = 1024  # offsets one pop hands out, at most (a batch is 32 by default)


class PopRecordError(DecodeError, ValueError):
    """A revive topic record that is not one POP writes."""


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


def _key_fields(topic: str, group: str, queue_id: int, start: int, pop_time: int) -> dict[str, Any]:
    return {"so": start, "pt": pop_time, "q": queue_id, "t": topic, "c": group}


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[str, bytes]:
    c = checkpoint
    body = _key_fields(c.topic, c.group, c.queue_id, c.start_offset, c.pop_time)
    body["it"] = c.invisible_time
    body["d"] = [offset - c.start_offset for offset in c.offsets]
    return CK_TAG, _dumps(body)


def encode_ack(ack: Ack) -> tuple[str, bytes]:
    body = _key_fields(ack.topic, ack.group, ack.queue_id, ack.start_offset, ack.pop_time)
    body["ao"] = ack.offset
    if ack.any_checkpoint:
        body["any"] = True
    return ACK_TAG, _dumps(body)


def encode_batch_ack(acks: list[Ack]) -> tuple[str, bytes]:
    """One record for acks of one CK (same key and `any_checkpoint`), 1..MAX_OFFSETS of them."""
    first = acks[0] if acks else None
    if (
        first is None
        or len(acks) > MAX_OFFSETS
        or any(a.key != first.key or a.any_checkpoint != first.any_checkpoint for a in acks)
    ):
        raise ValueError("a batch ack holds 1..MAX_OFFSETS acks of one checkpoint")
    body = _key_fields(first.topic, first.group, first.queue_id, first.start_offset, first.pop_time)
    body["aol"] = [a.offset for a in acks]
    if first.any_checkpoint:
        body["any"] = True
    return BATCH_ACK_TAG, _dumps(body)


def encode_close(key: CheckpointKey) -> tuple[str, bytes]:
    topic, group, queue_id, start, pop_time = key
    return CLOSE_TAG, _dumps(_key_fields(topic, group, queue_id, start, pop_time))


def decode(tag: str, body: bytes) -> Checkpoint | Ack | list[Ack] | CheckpointKey:
    """The record a revive topic message holds (a close is its CK's key, a batch ack a list)."""
    if tag not in (CK_TAG, ACK_TAG, BATCH_ACK_TAG, CLOSE_TAG):
        raise PopRecordError(f"tag {tag!r} is none of ck, ack, back, close")
    try:
        fields = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PopRecordError(f"{tag} body is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise PopRecordError(f"{tag} body is not a JSON object")
    key = (
        _text(fields, "t"),
        _text(fields, "c"),
        _number(fields, "q", bits=32),
        _number(fields, "so"),
        _number(fields, "pt"),
    )
    if tag == CLOSE_TAG:
        return key
    if tag in (ACK_TAG, BATCH_ACK_TAG):
        any_checkpoint = fields.get("any", False)
        if not isinstance(any_checkpoint, bool):
            raise PopRecordError(f"{tag} field 'any' is not a boolean")
        if tag == ACK_TAG:
            return Ack(*key, _number(fields, "ao"), any_checkpoint)
        offsets = fields.get("aol")
        if not isinstance(offsets, list) or not 0 < len(offsets) <= MAX_OFFSETS:
            raise PopRecordError(f"back field 'aol' is not a list of 1..{MAX_OFFSETS} offsets")
        return [Ack(*key, _number({"aol": o}, "aol"), any_checkpoint) for o in offsets]
    diffs = fields.get("d")
    if not isinstance(diffs, list) or not 0 < len(diffs) <= MAX_OFFSETS:
        raise PopRecordError(f"ck field 'd' is not a list of 1..{MAX_OFFSETS} offsets")
    start = key[3]
    offsets = tuple(start + _number({"d": d}, "d") for d in diffs)
    return Checkpoint(*key, _number(fields, "it"), offsets)


def _dumps(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise PopRecordError(f"field {name!r} is not a non-empty string")
    return value


def _number(fields: dict[str, Any], name: str, *, bits: int = 64) -> int:
    value = fields.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << (bits - 1):
        raise PopRecordError(f"field {name!r} is not a number of {bits} bits: {value!r}")
    return value
