"""Timer delivery (RocketMQ 5's TimerMessageStore services): the wheel filled and emptied.

Enqueue follows `rmq_sys_wheel_timer` queue 0 (woken by its arrivals): each unit's tagsCode is
its delivery time (store/timer_message.py). On a master, a unit due before the cursor is
delivered at once; any other is put in the wheel (store/timer_store.py). On a slave, units up to
the master's timer queue offset are put in the wheel, except those due before the master's cursor
(the master delivered them), so that a slave elected master delivers what its master had not
(both positions come from the master's checkpoint, GET_TIMER_CHECK_POINT, broker/slave_sync.py).

Dequeue (a master only) reads the slot of the cursor, delivers each record at its own
millisecond (records of one slot in time order), and moves the cursor only right after it has
read the slot again, so a timer put in the wheel meanwhile is never passed over. A delivered
message goes to its REAL_TOPIC / REAL_QID with TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS added and
TIMER_OUT_MS kept (which stops it being parked again); a ROLL record's message goes back into
the timer topic with TIMER_ROLL_TIMES + 1. A store refusal for good (MESSAGE_ILLEGAL,
PROPERTIES_SIZE_EXCEEDED) skips the timer, counted as undeliverable; any other refusal is retried
every RETRY_INTERVAL (the order of one slot is kept).

Recall (broker/recall.py): a tombstone is a unit whose tagsCode is minus its time; it gets a
DELETE record in the slot of the recalled message's own time. When dequeue reads a slot it reads
the tombstones' messages first (their TIMER_DEL_UNIQKEY, `<real topic>+<UNIQ_KEY>`), before any
record of the slot is delivered, and a due record whose message has a recalled key is dropped,
counted as recalled. Tombstone and message share the slot, and both are in the wheel's files, so
a recall survives a restart as the timer does. A tombstone that comes after its message's time
(the cursor passed it) is dropped: the message was delivered.

Delivery is at least once: the checkpoint is written after every step (a killed broker repeats
at most the deliveries of the step it was in when killed: one batch) and fsynced every
timerFlushIntervalMs (a machine crash repeats up to that much). A clean stop repeats nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable

from tidemq.broker.timer_metrics import TimerMetrics
from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.common.retry_log import RetryLog
from tidemq.store.commitlog import PutStatus
from tidemq.store.consume_queue import CQUnit
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageToStore,
    StoredMessage,
    find_property,
    read_properties,
)
from tidemq.store.timer_log import TimerUnit
from tidemq.store.timer_message import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    TIMER_TOPIC,
    read_timer_tags_code,
    recall_key,
)
from tidemq.store.timer_store import TimerStore

log = logging.getLogger(__name__)

ENQUEUE_BATCH = 256
ENQUEUE_IDLE_WAIT = 0.1  # RocketMQ's enqueue polls every 100 ms too (besides arrivals)
RETRY_INTERVAL = 0.5
REPORT_INTERVAL = 30.0
CATCH_UP_YIELD = 1000  # empty slots walked before letting the loop run others
REFUSED_FOR_GOOD = frozenset((PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED))
_PADDING_SIZE = 0x7FFFFFFF
_REAL_TOPIC_KEY = PROPERTY_REAL_TOPIC.encode()


def now_ms() -> int:
    return int(time.time() * 1000)


def delivered_message(
    stored: StoredMessage, enqueue_ms: int, dequeue_ms: int, store_host: bytes
) -> MessageToStore | None:
    """The message to put in its own topic when its time comes (RocketMQ's convert)."""
    props = dict(stored.properties)
    real_topic = props.pop(PROPERTY_REAL_TOPIC, None)
    real_queue = props.pop(PROPERTY_REAL_QUEUE_ID, None)
    if not real_topic or real_queue is None or not real_queue.strip().isdigit():
        return None
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
    props[PROPERTY_WAIT] = "false"
    return stored.moved(real_topic, int(real_queue), props, store_host)


def rolled_message(stored: StoredMessage, store_host: bytes) -> MessageToStore:
    """A timer beyond the roll window, written into the timer topic again."""
    props = dict(stored.properties)
    rolls = props.get(PROPERTY_TIMER_ROLL_TIMES, "0")
    props[PROPERTY_TIMER_ROLL_TIMES] = str(int(rolls) + 1 if rolls.isdigit() else 1)
    props[PROPERTY_WAIT] = "false"
    return stored.moved(TIMER_TOPIC, 0, props, store_host)


class TimerMessageService(Service):
    """Enqueue (master and slave) and, on a master, dequeue and the periodic flush."""

    def __init__(
        self,
        store: MessageStore,
        timers: TimerStore,
        store_host: Callable[[], bytes],
        *,
        deliver: bool,
        flush_interval_ms: int = 1000,
        metrics: TimerMetrics | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.timers = timers
        # Per real topic, counted where timers are delivered (broker/timer_metrics.py).
        self.metrics = metrics if deliver else None
        self.store_host = store_host
        self.deliver = deliver
        self.flush_interval = flush_interval_ms / 1000
        self._arrived = asyncio.Event()
        self._dequeue_wakeup = asyncio.Event()
        self._slot_end = 0
        self.enqueued = 0
        self.delivered = 0
        self.undeliverable = 0
        self.recalled = 0  # timers dropped by a recall
        # TIMER_DEL_UNIQKEY -> time, of the tombstones of the slots being read
        self._recalls: dict[str, int] = {}
        # The latest time whose records are being delivered now (a recall after it is late).
        self.delivering_until = 0
        self._enqueue_moved = asyncio.Event()  # set (and replaced) when the queue offset moves
        self._refusal_reported = float("-inf")
        if deliver:  # a slave's count was the master's cursor on: this broker's now
            self.add_child(Step(start=self._recount))
        self.add_child(Step(start=self._listen, stop=self._unlisten))
        self.add_child(BackgroundTask(self._enqueue_loop, "timer-enqueue"))
        if deliver:
            self.add_child(BackgroundTask(self._dequeue_loop, "timer-dequeue"))
        self.add_child(BackgroundTask(self._flush_loop, "timer-flush"))
        self.add_child(Step(stop=self.timers.save_progress))
        if self.metrics is not None:
            self.add_child(Step(stop=self.metrics.save))

    def _recount(self) -> None:
        self.timers.pending = self.timers.count_pending()

    def _listen(self) -> None:
        self.store.add_arrival_listener(self._on_arrival)

    def _unlisten(self) -> None:
        listeners = self.store.reput.listeners
        if self._on_arrival in listeners:
            listeners.remove(self._on_arrival)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags: int, ts: int) -> None:
        del queue_id, max_offset, tags, ts
        if topic == TIMER_TOPIC:
            self._arrived.set()

    # --- enqueue ----------------------------------------------------------------------------

    async def _enqueue_loop(self) -> None:
        failures = RetryLog(log, "timer enqueue")
        while True:
            self._arrived.clear()
            try:
                moved = await self.enqueue_available()
            except Exception as exc:  # noqa: BLE001 - logged with its traceback by `failures`
                failures.failed(exc, "it is tried again")
                moved = False
            else:
                failures.succeeded()
            if not moved:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), ENQUEUE_IDLE_WAIT)

    async def enqueue_available(self) -> bool:
        """Put the units that arrived in the wheel (or deliver them); True if any moved."""
        queue = self.store.find_consume_queue(TIMER_TOPIC, 0)
        if queue is None:
            return False
        timers = self.timers
        if timers.queue_offset > queue.max_offset:
            # The queue is shorter than the wheel has seen: its CommitLog was cut (a deposed
            # master resynchronised with the new one). Go on from its end, as RocketMQ does.
            log.warning(
                "timer queue offset %d is past the timer topic's end %d: going on from there",
                timers.queue_offset,
                queue.max_offset,
            )
            timers.queue_offset = queue.max_offset
        offset = max(timers.queue_offset, queue.min_offset)
        limit = queue.max_offset
        if not self.deliver:
            limit = min(limit, timers.master_queue_offset)
        if offset >= limit:
            return False
        units = queue.units(offset, min(ENQUEUE_BATCH, limit - offset)) or []
        for unit in units:
            if unit.size != _PADDING_SIZE:
                await self._enqueue_one(unit)
            timers.queue_offset = unit.queue_offset + 1
        timers.save_progress()
        if units:
            moved, self._enqueue_moved = self._enqueue_moved, asyncio.Event()
            moved.set()
        return bool(units)

    async def wait_enqueued(self, queue_offset: int, timeout: float) -> bool:
        """Wait (at most `timeout` s) until the timer topic's unit `queue_offset` is enqueued."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.timers.queue_offset <= queue_offset:
                    await self._enqueue_moved.wait()
        return self.timers.queue_offset > queue_offset

    async def _enqueue_one(self, unit: CQUnit) -> None:
        timers = self.timers
        deliver_ms, tombstone = read_timer_tags_code(unit.tags_code)
        if self.metrics is not None and not tombstone:  # a recall's tombstone waits for nothing
            self.metrics.add(self._real_topic(unit.physical_offset, unit.size), 1)
        if deliver_ms < timers.cursor:
            if tombstone:
                return  # its message's time has passed: delivered already
            if self.deliver:  # due already: now, before the queue offset passes it
                await self._deliver(
                    unit.physical_offset, unit.size, rolls=False, enqueue_ms=now_ms()
                )
            return  # a slave: the master delivered it
        at = timers.add(
            unit.physical_offset, unit.size, deliver_ms, unit.queue_offset, now_ms(), tombstone
        )
        self.enqueued += 1
        if at < self._slot_end:
            self._dequeue_wakeup.set()

    def _real_topic(self, phy_offset: int, size: int) -> str:
        """The timer message's REAL_TOPIC, read from its record's properties alone (the
        enqueue path: no decode of the whole message)."""
        record = self.store.commitlog.get_record(phy_offset, size)
        if record is None:
            return ""
        value = find_property(read_properties(record), _REAL_TOPIC_KEY)
        return value.decode("utf-8", "replace") if value is not None else ""

    # --- dequeue ----------------------------------------------------------------------------

    async def _dequeue_loop(self) -> None:
        """`_dequeue`, restarted (from the cursor) after anything it did not expect."""
        failures = RetryLog(log, "timer delivery")
        while True:
            try:
                await self._dequeue()
            except Exception as exc:  # noqa: BLE001 - logged with its traceback by `failures`
                failures.failed(exc, "it starts again from the cursor")
                await asyncio.sleep(RETRY_INTERVAL)

    async def _dequeue(self) -> None:
        timers = self.timers
        precision = timers.precision
        slot = timers.cursor // precision * precision
        loaded = -1
        due: list[tuple[int, int, TimerUnit]] = []
        walked = 0
        while True:
            self._slot_end = slot + precision
            self._dequeue_wakeup.clear()
            loaded, units = timers.slot_units(slot, loaded)
            for pos, unit in units:
                if unit.recalls:  # whatever the cursor: its message may still wait
                    self._note_recall(unit)
                    continue
                if unit.deliver_ms >= timers.cursor:  # below it: delivered before a restart
                    heapq.heappush(due, (unit.deliver_ms, pos, unit))
            now = now_ms()
            if due and due[0][0] <= now:
                self.delivering_until = now
                while due and due[0][0] <= now:
                    _at, _pos, unit = heapq.heappop(due)
                    try:
                        await self._deliver(
                            unit.phy_offset, unit.size, unit.rolls, unit.write_ms, unit.queue_offset
                        )
                    except Exception as exc:  # this record, not the ones after it
                        log.exception("timer record at %d", _pos)
                        self._skip(unit.phy_offset, "?", f"{type(exc).__name__}: {exc}")
                    timers.pending = max(0, timers.pending - 1)
                timers.save_progress()
                continue  # read the slot again before the cursor moves
            # Nothing due, and the slot was just read: every timer before now + 1 is delivered.
            timers.cursor = max(timers.cursor, min(now + 1, self._slot_end))
            if timers.cursor >= self._slot_end:
                slot, loaded = self._slot_end, -1
                if self._recalls:  # a slot's tombstones matter to that slot only
                    self._recalls = {k: t for k, t in self._recalls.items() if t >= slot}
                walked += 1
                if walked % CATCH_UP_YIELD == 0:
                    timers.save_progress()
                    await asyncio.sleep(0)
                continue
            timers.save_progress()
            wake_at = min(due[0][0], self._slot_end) if due else self._slot_end
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dequeue_wakeup.wait(), max(wake_at - now, 1) / 1000)

    def _note_recall(self, unit: TimerUnit) -> None:
        """A tombstone of the slot being read: its key, dropped from the slot's deliveries."""
        self.timers.pending = max(0, self.timers.pending - 1)
        stored = self.store.look_message_by_offset(unit.phy_offset, unit.size)
        key = stored.properties.get(PROPERTY_TIMER_DEL_UNIQKEY) if stored is not None else None
        if stored is None or stored.topic != TIMER_TOPIC or not key:
            log.error("timer: the recall at physical offset %d is unreadable", unit.phy_offset)
            return
        self._recalls[key] = unit.deliver_ms

    def is_recalled(self, stored: StoredMessage) -> bool:
        if not self._recalls:
            return False
        real_topic = stored.properties.get(PROPERTY_REAL_TOPIC, "")
        uniq = stored.properties.get(PROPERTY_UNIQ_KEY, "")
        return bool(uniq) and recall_key(real_topic, uniq) in self._recalls

    def too_late_to_recall(self, deliver_ms: int) -> bool:
        """Whether the timers of `deliver_ms` are delivered, or being delivered, already."""
        return self.timers.cursor > deliver_ms or self.delivering_until >= deliver_ms

    async def _deliver(
        self, phy_offset: int, size: int, rolls: bool, enqueue_ms: int, queue_offset: int = -1
    ) -> None:
        """Put the timer message at `phy_offset` into its topic (or back into the timer topic,
        `rolls`); a record of the wheel names its unit's `queue_offset`, which the message at
        that place must have (a cut and rewritten CommitLog holds other messages there)."""
        stored = self.store.look_message_by_offset(phy_offset, size)
        if stored is None:
            self._skip(phy_offset, "?", "its message is gone from the CommitLog")
            return
        if queue_offset >= 0 and (
            stored.topic != TIMER_TOPIC or stored.queue_offset != queue_offset
        ):
            self._skip(phy_offset, "?", "the CommitLog holds another message there now")
            return
        if self.metrics is not None:  # it leaves the wheel: delivered, rolled on or recalled
            self.metrics.add(stored.properties.get(PROPERTY_REAL_TOPIC, ""), -1)
        if not rolls and self.is_recalled(stored):
            self.recalled += 1
            log.info(
                "timer message %s of topic %s recalled: not delivered",
                stored.properties.get(PROPERTY_UNIQ_KEY),
                stored.properties.get(PROPERTY_REAL_TOPIC),
            )
            return
        host = self.store_host()
        if rolls:
            msg: MessageToStore | None = rolled_message(stored, host)
        else:
            msg = delivered_message(stored, enqueue_ms, now_ms(), host)
        if msg is None:
            self._skip(phy_offset, "?", "it has no REAL_TOPIC / REAL_QID")
            return
        while True:
            result = await self.store.put_message(msg)
            if result.ok:
                if not rolls:
                    self.delivered += 1
                return
            if result.status in REFUSED_FOR_GOOD:
                self._skip(phy_offset, msg.topic, result.remark or result.status.value)
                return
            now = time.monotonic()
            if now - self._refusal_reported >= REPORT_INTERVAL:
                self._refusal_reported = now
                log.error(
                    "timer message at %d not delivered (%s: %s): retried every %.1f s",
                    phy_offset,
                    result.status.value,
                    result.remark,
                    RETRY_INTERVAL,
                )
            await asyncio.sleep(RETRY_INTERVAL)

    def _skip(self, phy_offset: int, topic: str, why: str) -> None:
        self.undeliverable += 1
        log.error(
            "timer message at physical offset %d (real topic %r) can never be delivered: %s; "
            "skipped (%d since start)",
            phy_offset,
            topic,
            why,
            self.undeliverable,
        )

    # --- flush ------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            try:
                await asyncio.to_thread(self.timers.flush)
                snapshot = self.metrics.snapshot() if self.metrics is not None else None
                if snapshot is not None and self.metrics is not None:
                    await asyncio.to_thread(self.metrics.write, snapshot)
                removed = self.timers.delete_delivered_segments()
                if removed:
                    log.info("timer log: %d delivered segment(s) removed", removed)
            except OSError as exc:
                log.error("timer store flush failed: %s", exc)

    # --- what operators see -----------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's timer keys of GET_BROKER_RUNTIME_INFO (timerCongestNum: timers waiting;
        on a slave counted in its wheel from the master's cursor on, slot by slot)."""
        timers = self.timers
        queue = self.store.find_consume_queue(TIMER_TOPIC, 0)
        behind = (queue.max_offset - timers.queue_offset) if queue is not None else 0
        pending = timers.pending if self.deliver else timers.count_pending()
        return {
            "timerReadBehind": str(max(0, now_ms() - timers.cursor) // 1000),
            "timerOffsetBehind": str(max(behind, 0)),
            "timerCongestNum": str(pending),
            # tidemq's: the cursor itself (a slave's is its master's, from the checkpoint)
            "timerCursorMs": str(timers.cursor),
        }
