"""Where timers wait (RocketMQ 5's TimerMessageStore, files and recovery): wheel, log, checkpoint.

Under `storePathRootDir`: `timerwheel` (store/timer_wheel.py), `timerlog/` (store/timer_log.py),
`config/timercheck` (store/timer_checkpoint.py). The timer messages themselves are in the
CommitLog under `rmq_sys_wheel_timer` (store/timer_message.py), which is what HA replicates; these
files are this broker's index of them, rebuilt from that topic's ConsumeQueue where they end.

Two positions move: `cursor` (ms: every timer due before it is delivered) and `queue_offset` (the
next ConsumeQueue unit to put in the wheel). A unit due before the cursor is delivered at once
and never written here; any other gets a record in the slot of its delivery time, or, when that is
more than `timerRollWindowSlot` slots ahead, a ROLL record in the window's last slots (written
again into the timer topic when it comes, as RocketMQ does). Memory: the wheel is a mapped file;
the broker holds only the records of the slot being delivered (RocketMQ holds the same).

Recovery (`load`): the log is read again from the segment of the checkpoint's flushed position,
each record revising its slot (idempotent: a slot already past it stays) and the log cut after the
last good record; the queue offset is the larger of the checkpoint's and one past the last
record's; the cursor is the checkpoint's, but never older than the wheel can hold (one lap).
"""

from __future__ import annotations

import logging
import mmap
import os

from tidemq.store.config import StoreConfig
from tidemq.store.timer_checkpoint import TimerCheckpointFile, TimerProgress
from tidemq.store.timer_log import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    MIN_BLANK_LEN,
    UNIT_SIZE,
    TimerLog,
    TimerUnit,
)
from tidemq.store.timer_wheel import BLANK, SLOTS_TOTAL, TimerWheel, wheel_size

log = logging.getLogger(__name__)

TIMER_BLANK_SLOTS = 60  # RocketMQ: slots kept clear between the roll window and the lap's end


class TimerStore:
    def __init__(self, config: StoreConfig, slots_total: int = SLOTS_TOTAL) -> None:
        root = config.root
        self.precision = config.timer_precision
        self.slots_total = slots_total
        window = config.timer_roll_window_slot
        if window > slots_total - TIMER_BLANK_SLOTS:
            window = slots_total - TIMER_BLANK_SLOTS
        self.roll_window_ms = window * self.precision
        self.wheel_path = root / "timerwheel"
        self.log = TimerLog(root / "timerlog", config.mapped_file_size_timer_log)
        self.checkpoint = TimerCheckpointFile(root / "config" / "timercheck")
        self._wheel_fd = -1
        self._map: mmap.mmap | None = None
        self.wheel: TimerWheel | None = None
        self.cursor = 0
        self.queue_offset = 0
        self.master_queue_offset = 0
        self.pending = 0  # records waiting in the wheel (RocketMQ's timerCongestNum)
        self.latest = 0  # the latest slot time a record was put in (bounds a count of the wheel)
        self.segment_units = (config.mapped_file_size_timer_log - MIN_BLANK_LEN) // UNIT_SIZE

    # --- life cycle -----------------------------------------------------------------------

    def load(self, now_ms: int, queue_min: int, queue_max: int) -> None:
        """Open the files and recover (module docstring)."""
        progress = self.checkpoint.load()
        self.log.load()
        if self.wheel_path.exists() or self.log.segments.segments:
            self._open_wheel()
        last_queue_offset = -1
        for pos, unit in self.log.recover(progress.log_flushed_pos):
            self._writable_wheel().revise(unit.deliver_ms, pos)
            last_queue_offset = max(last_queue_offset, unit.queue_offset)
        self.queue_offset = max(progress.queue_offset, last_queue_offset + 1)
        self.queue_offset = min(max(self.queue_offset, queue_min), max(queue_max, queue_min))
        self.master_queue_offset = progress.master_queue_offset
        slot_now = now_ms // self.precision * self.precision
        oldest = slot_now - (self.slots_total - TIMER_BLANK_SLOTS) * self.precision
        cursor = progress.last_read_time_ms or now_ms
        if cursor < oldest:
            log.warning(
                "timer: the checkpoint is older than the wheel holds; reading from %d", oldest
            )
            cursor = oldest
        self.cursor = cursor
        self.latest = now_ms + self.roll_window_ms + self.precision
        self.pending = self.count_pending()
        log.info(
            "timer store loaded: cursor %d, queue offset %d, %d timers pending, log ends at %d",
            self.cursor,
            self.queue_offset,
            self.pending,
            self.log.max_offset,
        )

    def _open_wheel(self) -> None:
        size = wheel_size(self.slots_total)
        fd = os.open(self.wheel_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            actual = os.fstat(fd).st_size
            if actual not in (0, size):
                raise ValueError(
                    f"timer wheel {self.wheel_path} has {actual} bytes, expected {size}"
                )
            if actual == 0:
                os.ftruncate(fd, size)  # sparse: blocks come as slots are written
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._wheel_fd = fd
        self.wheel = TimerWheel(memoryview(self._map), self.slots_total, self.precision)

    def count_pending(self) -> int:
        """Records in the wheel from the cursor's slot on, counted slot by slot (a slave's
        number: its cursor is the master's, which it does not follow record by record)."""
        if self.wheel is None:
            return 0
        return self.wheel.pending(self.cursor, self.latest)

    def _writable_wheel(self) -> TimerWheel:
        """The wheel, its file created by the first timer (a broker without any has none)."""
        if self.wheel is None:
            self._open_wheel()
        assert self.wheel is not None
        return self.wheel

    def progress(self) -> TimerProgress:
        return TimerProgress(
            last_read_time_ms=self.cursor,
            log_flushed_pos=self.log.segments.flushed_where,
            queue_offset=self.queue_offset,
            master_queue_offset=max(self.master_queue_offset, self.queue_offset),
        )

    def save_progress(self) -> None:
        """The checkpoint now (into the page cache: a killed process keeps it)."""
        self.checkpoint.write(self.progress())

    def flush(self) -> None:
        """fsync log, wheel and checkpoint (in a worker thread)."""
        self.log.flush()
        if self._wheel_fd >= 0:
            # fdatasync writes back what the map dirtied too, and releases the GIL, where
            # mmap.flush (msync) holds it, stopping the event loop for the disk's time.
            os.fdatasync(self._wheel_fd)
        self.checkpoint.sync()  # what the loop wrote last (a write here could be older)

    def close(self) -> None:
        self.checkpoint.write(self.progress())
        self.checkpoint.close()
        self.log.close()
        if self.wheel is not None and isinstance(self.wheel.buffer, memoryview):
            self.wheel.buffer.release()
        self.wheel = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._wheel_fd >= 0:
            os.close(self._wheel_fd)
            self._wheel_fd = -1

    # --- timers -----------------------------------------------------------------------------

    def add(
        self,
        phy_offset: int,
        size: int,
        deliver_ms: int,
        queue_offset: int,
        now_ms: int,
        tombstone: bool = False,
    ) -> int:
        """Put the timer of ConsumeQueue unit `queue_offset` in the wheel (a recall's
        `tombstone`: DELETE); returns when its slot is read (its own time, or the roll window's
        end for a ROLL record)."""
        wheel = self._writable_wheel()
        magic = MAGIC_DEFAULT | (MAGIC_DELETE if tombstone else 0)
        at = deliver_ms
        window = self.roll_window_ms
        if deliver_ms - now_ms >= window:
            magic |= MAGIC_ROLL
            # RocketMQ: just past the window, half a window on; else the window's end
            at = now_ms + (window // 2 if deliver_ms - now_ms - window < window // 3 else window)
        pos = self.log.next_position()
        prev = wheel.add(at, pos)
        written = self.log.append(
            TimerUnit(prev, magic, now_ms, at, phy_offset, size, queue_offset)
        )
        if written != pos:  # never: next_position is where append writes
            raise RuntimeError(f"timer log wrote at {written}, expected {pos}")
        self.pending += 1
        self.latest = max(self.latest, at)
        return at

    def slot_units(self, slot_ms: int, after_pos: int) -> tuple[int, list[tuple[int, TimerUnit]]]:
        """The records of the slot of `slot_ms` written after log position `after_pos`, oldest
        first, and the slot's last position now (`after_pos` when nothing is new)."""
        wheel = self.wheel
        slot = wheel.slot(slot_ms) if wheel is not None else None
        if slot is None or slot.last_pos <= after_pos:
            return after_pos, []
        found: list[tuple[int, TimerUnit]] = []
        pos = slot.last_pos
        while pos != BLANK and pos > after_pos:
            unit = self.log.read(pos)
            if unit is None:
                log.error(
                    "timer log: no record at %d (slot %d): the rest of the slot is lost",
                    pos,
                    slot_ms,
                )
                break
            found.append((pos, unit))
            pos = unit.prev_pos
        found.reverse()
        return slot.last_pos, found

    def delete_delivered_segments(self) -> int:
        """Remove timer log segments whose every record is delivered; returns how many."""
        removed = 0
        segments = self.log.segments
        while len(segments) > 1:
            first = segments.first
            assert first is not None
            unit = self.log.read(first.start_offset + (self.segment_units - 1) * UNIT_SIZE)
            if (
                unit is not None
                and unit.write_ms + self.roll_window_ms + self.precision >= self.cursor
            ):
                break
            segments.delete_head(1)
            removed += 1
        return removed
