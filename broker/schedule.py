"""Delayed delivery (RocketMQ's ScheduleMessageService).

A message with DELAY=n is stored in SCHEDULE_TOPIC_XXXX queue n-1 with its real topic and queue
in REAL_TOPIC / REAL_QID, and its ConsumeQueue tagsCode is its delivery time (the store does
both). One task per level walks that queue from the level's delay offset: a unit whose time has
come is re-put to its real topic and queue (DELAY removed, tags code from TAGS), and the level's
offset advances; otherwise the task sleeps until the first unit is due or a new message arrives.

A unit that cannot be delivered must not hold back its level (issue 30 item 3): the store
refusing the message for what it is (MESSAGE_ILLEGAL, e.g. a `%RETRY%` topic over 127 bytes;
PROPERTIES_SIZE_EXCEEDED) will refuse it forever, so it is skipped at once; a delivery that
raises is retried, and skipped after UNDELIVERABLE_AFTER failed attempts in a row on the same
unit. Both are counted (`undeliverable`) and logged with the unit's physical offset, level and
real topic; its bytes stay in the CommitLog. Not the DLQ: `%DLQ%<group>` is longer than the
`%RETRY%<group>` that was refused, and a message the store refuses in one topic it refuses in
another. A refusal of the store itself (disk full, not writable, busy) refuses every later unit
too, so the level waits and retries, logging at most once per REPORT_INTERVAL.

Delay offsets (`delayOffset.json`, level -> next unit) are persisted with the consumer
offsets (every flushConsumerOffsetInterval) and at stop. Slaves do not deliver: they take the
master's offsets through SlaveSynchronize, so a slave promoted by hand continues where the
master stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.store.commitlog import PutStatus
from tidemq.store.consume_queue import CQUnit
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT,
    MessageToStore,
    StoredMessage,
)

log = logging.getLogger(__name__)

MAX_WAIT = 1.0  # re-check a level at least this often (clock changes, lost wake-ups)
ERROR_BACKOFF = 1.0
BATCH_UNITS = 32
UNDELIVERABLE_AFTER = 5  # failed attempts on one unit that raises before it is skipped
REPORT_INTERVAL = 30.0  # seconds between two lines about a level that keeps being refused
# What the store refuses a message for, whatever the moment: retrying cannot succeed.
REFUSED_FOR_GOOD = frozenset((PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED))


def delivered_message(stored: StoredMessage, store_host: bytes) -> MessageToStore | None:
    """The message to put when a delayed one is due (RocketMQ's messageTimeup)."""
    props = dict(stored.properties)
    real_topic = props.pop(PROPERTY_REAL_TOPIC, None)
    real_queue = props.pop(PROPERTY_REAL_QUEUE_ID, None)
    if not real_topic or real_queue is None:
        return None
    props.pop(PROPERTY_DELAY, None)
    props[PROPERTY_WAIT] = "false"
    return stored.moved(real_topic, int(real_queue), props, store_host)


class ScheduleMessageService(Service):
    """Children: the arrival listener and, at stop, a last persist of the delay offsets; one
    delivery task per delay level."""

    def __init__(
        self,
        store: MessageStore,
        offsets: DelayOffsetTable,
        store_host: Callable[[], bytes],
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.store_host = store_host
        self.levels = len(store.delay_levels)
        self._wakeups = [asyncio.Event() for _ in range(self.levels)]
        self.delivered = 0
        self.undeliverable = 0  # units skipped because they can never be delivered
        # level -> (queue offset of the unit that raised, failed attempts on it in a row)
        self._failures: dict[int, tuple[int, int]] = {}
        self._refusal_reported = float("-inf")  # time.monotonic() of the last refusal line
        super().__init__()
        self.add_child(Step(start=self._listen, stop=self.offsets.persist_quietly))
        for level in range(1, self.levels + 1):
            self.add_child(
                BackgroundTask(
                    functools.partial(self._deliver_level, level), f"schedule-level-{level}"
                )
            )

    def _listen(self) -> None:
        self.store.add_arrival_listener(self._on_arrival)

    def _on_arrival(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int, ts: int
    ) -> None:
        del max_offset, tags_code, ts
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < self.levels:
            self._wakeups[queue_id].set()

    async def _deliver_level(self, level: int) -> None:
        wakeup = self._wakeups[level - 1]
        while True:
            wakeup.clear()
            try:
                wait = await self._deliver_due(level)
            except Exception:
                log.exception("delivery of delay level %d failed", level)
                wait = ERROR_BACKOFF
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), min(wait, MAX_WAIT))

    async def _deliver_due(self, level: int) -> float:
        """Deliver every due unit of a level; returns seconds until the next one is due."""
        queue = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
        if queue is None:
            return MAX_WAIT
        offset = max(self.offsets.get(level, 0), queue.min_offset)
        while offset < queue.max_offset:
            units = queue.units(offset, BATCH_UNITS)
            if not units:
                return MAX_WAIT
            for unit in units:
                if unit.size == 0x7FFFFFFF:  # head padding of a queue that started late
                    offset = unit.queue_offset + 1
                    continue
                now = int(time.time() * 1000)
                if unit.tags_code > now:
                    self.offsets.update(level, offset)
                    return (unit.tags_code - now) / 1000
                if not await self._deliver_or_skip(level, unit.queue_offset, unit):
                    self.offsets.update(level, offset)
                    return ERROR_BACKOFF
                offset = unit.queue_offset + 1
            self.offsets.update(level, offset)
        self.offsets.update(level, offset)
        return MAX_WAIT

    async def _deliver_or_skip(self, level: int, queue_offset: int, unit: CQUnit) -> bool:
        """`_deliver`, where a unit that raised UNDELIVERABLE_AFTER times in a row is skipped
        (True: the level moves on)."""
        try:
            delivered = await self._deliver(unit.physical_offset, unit.size)
        except Exception as exc:
            last_offset, attempts = self._failures.get(level, (-1, 0))
            attempts = attempts + 1 if last_offset == queue_offset else 1
            if attempts < UNDELIVERABLE_AFTER:
                self._failures[level] = (queue_offset, attempts)
                log.exception(
                    "delayed message at %d (delay level %d) not delivered, attempt %d of %d",
                    unit.physical_offset,
                    level,
                    attempts,
                    UNDELIVERABLE_AFTER,
                )
                return False
            self._failures.pop(level, None)
            self._skip(unit.physical_offset, level, "?", f"{type(exc).__name__}: {exc}")
            return True
        self._failures.pop(level, None)
        return delivered

    def _skip(self, physical_offset: int, level: int, topic: str, why: str) -> None:
        self.undeliverable += 1
        log.error(
            "delayed message at physical offset %d (delay level %d, real topic %r) can never be "
            "delivered: %s; skipped, the level goes on (%d skipped since start)",
            physical_offset,
            level,
            topic,
            why,
            self.undeliverable,
        )

    async def _deliver(self, physical_offset: int, size: int) -> bool:
        stored = self.store.look_message_by_offset(physical_offset, size)
        if stored is None:
            log.warning("delayed message at %d is gone: skipped", physical_offset)
            return True
        msg = delivered_message(stored, self.store_host())
        if msg is None:
            log.warning("delayed message at %d has no REAL_TOPIC: skipped", physical_offset)
            return True
        result = await self.store.put_message(msg)
        if result.status in REFUSED_FOR_GOOD:
            level = stored.queue_id + 1
            self._skip(physical_offset, level, msg.topic, result.remark or result.status.value)
            return True
        if not result.ok:
            now = time.monotonic()
            if now - self._refusal_reported >= REPORT_INTERVAL:  # not one line a second
                self._refusal_reported = now
                log.error(
                    "delayed message at %d not delivered (%s: %s): its level waits and retries",
                    physical_offset,
                    result.status.value,
                    result.remark,
                )
            return False
        self.delivered += 1
        return True
