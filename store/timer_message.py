"""Timer messages: a delivery time of any millisecond (RocketMQ 5's HookUtils timer transform).

A producer sets one of three properties (RocketMQ 5's MessageConst names):

    TIMER_DELIVER_MS   the delivery time, epoch milliseconds
    TIMER_DELAY_SEC    seconds from now          (read first when several are set)
    TIMER_DELAY_MS     milliseconds from now     (read second)

At put, a message carrying one (not a prepared or rolled-back transaction half, not a DELAY=n
message: a delay level wins and the timer properties are dropped, as in RocketMQ) is parked:

- a value that is not a whole number: refused, WHEEL_TIMER_MSG_ILLEGAL;
- timerWheelEnable=false: refused, WHEEL_TIMER_NOT_ENABLE;
- a delivery time at or before now: stored in its own topic at once (delivered now);
- more than timerMaxDelaySec ahead: refused, WHEEL_TIMER_MSG_ILLEGAL;
- otherwise stored in TIMER_TOPIC (`rmq_sys_wheel_timer`) queue 0 with TIMER_OUT_MS = the
  delivery time and its own topic and queue in REAL_TOPIC / REAL_QID. Its ConsumeQueue tagsCode
  is TIMER_OUT_MS (store/dispatch.py), so the timer service (broker/timer.py) learns every
  delivery time from the ConsumeQueue alone.

Unlike RocketMQ, TIMER_OUT_MS keeps the exact millisecond (RocketMQ rounds it down to
timerPrecisionMs and delivers up to one precision late); the wheel's slots only say where a
timer waits, and the service delivers each at its own time. Refusals carry a remark naming the
property and the limit. The messages of a SEND_BATCH_MESSAGE are not parked (RocketMQ's batch
path does not either).

Recall (RocketMQ 5.3's RecallMessage, broker/recall.py): a tombstone is a timer message of the
recalled message's time carrying TIMER_DEL_UNIQKEY = `<real topic>+<UNIQ_KEY>` (RocketMQ's
TimerMessageStore.buildDeleteKey). It is parked like any timer, but never stored in a real
topic: one whose time has passed is refused (WHEEL_TIMER_MSG_ILLEGAL), as RocketMQ refuses a
TIMER_DEL_UNIQKEY message it does not park. Its ConsumeQueue tagsCode is minus its time
(store/dispatch.py), so the timer service tells tombstones from timers by the ConsumeQueue alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tidemq.store.commitlog import PutStatus
from tidemq.store.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    MessageToStore,
    decode_properties,
    encode_properties,
)

TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
# The three request properties share this prefix: one substring test per put.
TIMER_MARKER: Final = "TIMER_DEL"
_OUT_MARKER: Final = PROPERTY_TIMER_OUT_MS + "\x01"
_REQUEST_PROPERTIES: Final = (
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
)


@dataclass(frozen=True, slots=True)
class TimerLimits:
    """What the store accepts (timerWheelEnable, timerMaxDelaySec)."""

    enabled: bool = True
    max_delay_sec: int = 3600 * 24 * 3


@dataclass(frozen=True, slots=True)
class TimerRefusal:
    status: PutStatus
    remark: str


def delivery_time(props: dict[str, str], now_ms: int) -> int | str:
    """The delivery time the properties ask for, or why it cannot be read (the remark)."""
    for name in _REQUEST_PROPERTIES:
        raw = props.get(name)
        if raw is None:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            return f"timer message illegal: {name}={raw!r} is not a whole number"
        if name == PROPERTY_TIMER_DELAY_SEC:
            return now_ms + value * 1000
        if name == PROPERTY_TIMER_DELAY_MS:
            return now_ms + value
        return value
    return "timer message illegal: no timer property"


def park_timer(msg: MessageToStore, now_ms: int, limits: TimerLimits) -> TimerRefusal | None:
    """Park a timer message in TIMER_TOPIC (see the module docstring); a refusal, or None."""
    if TIMER_MARKER not in msg.properties or msg.topic == TIMER_TOPIC:
        return None
    if _OUT_MARKER in msg.properties:
        return None  # delivered already (or rolled): never parked twice
    tran = msg.sys_flag & TRANSACTION_MASK
    if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
        return None
    props = decode_properties(msg.properties)
    if not any(name in props for name in _REQUEST_PROPERTIES):
        return None
    if PROPERTY_TIMER_OUT_MS in props:
        return None  # delivered already (or rolled): never parked twice
    level = props.get(PROPERTY_DELAY, "")
    if level.strip().isdigit() and int(level) > 0:
        for name in _REQUEST_PROPERTIES:  # a delay level wins, as in RocketMQ
            props.pop(name, None)
        msg.properties = encode_properties(props)
        return None
    if not limits.enabled:
        return TimerRefusal(
            PutStatus.WHEEL_TIMER_NOT_ENABLE,
            "accurate timer message is not enabled, timerWheelEnable is false",
        )
    deliver = delivery_time(props, now_ms)
    if isinstance(deliver, str):
        return TimerRefusal(PutStatus.WHEEL_TIMER_MSG_ILLEGAL, deliver)
    if deliver <= now_ms:
        if PROPERTY_TIMER_DEL_UNIQKEY in props:  # a tombstone never reaches a real topic
            return TimerRefusal(
                PutStatus.WHEEL_TIMER_MSG_ILLEGAL,
                f"timer message illegal: the recalled message's time {deliver} has passed",
            )
        return None  # due: stored in its own topic now
    if deliver - now_ms > limits.max_delay_sec * 1000:
        return TimerRefusal(
            PutStatus.WHEEL_TIMER_MSG_ILLEGAL,
            f"timer message illegal: delivery in {deliver - now_ms} ms is beyond "
            f"timerMaxDelaySec ({limits.max_delay_sec} s)",
        )
    props[PROPERTY_TIMER_OUT_MS] = str(deliver)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.properties = encode_properties(props)
    msg.topic = TIMER_TOPIC
    msg.queue_id = 0
    return None


def recall_key(real_topic: str, uniq_key: str) -> str:
    """What a tombstone's TIMER_DEL_UNIQKEY names: RocketMQ's `<topic>+<UNIQ_KEY>`."""
    return f"{real_topic}+{uniq_key}"


def timer_tags_code(deliver_ms: int, tombstone: bool) -> int:
    """The ConsumeQueue tagsCode of a unit of TIMER_TOPIC: its time, negated for a tombstone."""
    return -deliver_ms if tombstone else deliver_ms


def read_timer_tags_code(tags_code: int) -> tuple[int, bool]:
    """(delivery time, is a tombstone) of a TIMER_TOPIC unit's tagsCode."""
    return (-tags_code, True) if tags_code < 0 else (tags_code, False)
