"""Delayed delivery (RocketMQ's ScheduleMessageService).

A message with DELAY=n is stored in SCHEDULE_TOPIC_XXXX queue n-1 with its real topic and queue
in REAL_TOPIC / REAL_QID, and its ConsumeQueue tagsCode is its delivery time (the store does
both). One task per level walks that queue from the level's delay offset: a unit whose time has
come is re-put to its real topic and queue (DELAY removed, tags code from TAGS), and the level's
offset advances; otherwise the task sleeps until the first unit is due or a new message arrives.

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
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.lifecycle import BackgroundTask, Service, Step
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT,
    MessageToStore,
    StoredMessage,
    encode_properties,
    pack_host,
)

log = logging.getLogger(__name__)

MAX_WAIT = 1.0  # re-check a level at least this often (clock changes, lost wake-ups)
ERROR_BACKOFF = 1.0
BATCH_UNITS = 32


def delivered_message(stored: StoredMessage, store_host: bytes) -> MessageToStore | None:
    """The message to put when a delayed one is due (RocketMQ's messageTimeup)."""
    props = dict(stored.properties)
    real_topic = props.pop(PROPERTY_REAL_TOPIC, None)
    real_queue = props.pop(PROPERTY_REAL_QUEUE_ID, None)
    if not real_topic or real_queue is None:
        return None
    props.pop(PROPERTY_DELAY, None)
    props[PROPERTY_WAIT] = "false"
    return MessageToStore(
        topic=real_topic,
        queue_id=int(real_queue),
        body=stored.body,
        properties=encode_properties(props),
        flag=stored.flag,
        sys_flag=stored.sys_flag,
        born_timestamp=stored.born_timestamp,
        born_host=pack_host(*stored.born_host),
        store_host=store_host,
        reconsume_times=stored.reconsume_times,
    )


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
                if not await self._deliver(unit.physical_offset, unit.size):
                    self.offsets.update(level, offset)
                    return ERROR_BACKOFF
                offset = unit.queue_offset + 1
            self.offsets.update(level, offset)
        self.offsets.update(level, offset)
        return MAX_WAIT

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
        if not result.ok:
            log.warning(
                "delayed message at %d not delivered (%s): retried",
                physical_offset,
                result.status.value,
            )
            return False
        self.delivered += 1
        return True
