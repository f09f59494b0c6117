"""Delayed messages: levels, and where a delayed message waits.

Levels come from `messageDelayLevel`, a space-separated list like `1s 5s 10s 30s 1m 2h 1d`. A
message with DELAY=n waits in queue n-1 of SCHEDULE_TOPIC_XXXX, its own topic and queue kept in
REAL_TOPIC and REAL_QID, until the schedule service (broker/schedule.py) delivers it.
"""

from __future__ import annotations

from typing import Final

from tidemq.common.errors import ConfigError
from tidemq.store.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from tidemq.store.record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    MessageToStore,
    decode_properties,
    encode_properties,
)

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
DELAY_MARKER: Final = PROPERTY_DELAY + NAME_VALUE_SEPARATOR

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """Milliseconds for levels 1..n (index 0 is level 1)."""
    levels: list[int] = []
    for item in text.split():
        unit = _UNIT_MS.get(item[-1:])
        try:
            amount = int(item[:-1])
        except ValueError:
            amount = -1
        if unit is None or amount < 0:
            raise ConfigError(f"messageDelayLevel: bad level {item!r} in {text!r}")
        levels.append(amount * unit)
    if not levels:
        raise ConfigError("messageDelayLevel: no levels")
    return levels


def park_delayed(msg: MessageToStore, levels: list[int]) -> None:
    """A DELAY=n message is parked in SCHEDULE_TOPIC_XXXX queue n-1 (levels beyond clamp)."""
    if DELAY_MARKER not in msg.properties:
        return
    tran = msg.sys_flag & TRANSACTION_MASK
    if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
        return
    props = decode_properties(msg.properties)
    try:
        level = int(props.get(PROPERTY_DELAY, "0"))
    except ValueError:
        return
    if level <= 0:
        return
    level = min(level, len(levels))
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.properties = encode_properties(props)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1
