"""The timer log (RocketMQ 5's TimerLog): one fixed-size record per timer put in the wheel.

Folder `<storePathRootDir>/timerlog/`, segments of `mappedFileSizeTimerLog` bytes named by their
20-digit start offset (store/segment_queue.py). A record is 52 bytes, big-endian, in RocketMQ's
layout::

    [4 size = 52][8 prev pos][4 magic][8 write time ms][4 delay ms][8 commitlog offset]
    [4 record size][4 real topic hash][8 reserved]

`prev pos` links the records of one wheel slot (BLANK = -1 ends the list); the delivery time is
`write time + delay` (delay is signed). `magic` is RocketMQ's bit set: 1 (a timer), 2 (ROLL:
not due yet, written again into the timer topic when its slot comes), 4 (DELETE: a recall's
tombstone, broker/recall.py). tidemq keeps the queue
offset of the record's unit in `rmq_sys_wheel_timer`'s ConsumeQueue in `reserved` (RocketMQ
reads it back from the message), so that recovery knows where enqueueing stopped; `real topic
hash` is 0 (RocketMQ's per-topic metrics are not kept).

A record that does not fit before the segment's end is preceded by a blank:
`[4 remaining][8 zero][4 TIMER_LOG_BLANK_MAGIC]`, and the next segment starts. Recovery
(`scan_units`) reads from a known good position and stops at the first record that is not one
(zeros, a torn write): the log is cut there.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidemq.store.config import AppendMode
from tidemq.store.segment_queue import SegmentQueue

log = logging.getLogger(__name__)

UNIT: Final = struct.Struct(">iqiqiqiiq")
UNIT_SIZE: Final = 52
assert UNIT.size == UNIT_SIZE
_BLANK: Final = struct.Struct(">iqi")
MIN_BLANK_LEN: Final = 16
assert _BLANK.size == MIN_BLANK_LEN
# RocketMQ's `0xBBCCDDEE ^ 1880681586 + 8` (Java's + binds first), as a signed int.
TIMER_LOG_BLANK_MAGIC: Final[int] = struct.unpack(
    ">i", struct.pack(">I", 0xBBCCDDEE ^ (1880681586 + 8))
)[0]
MAGIC_DEFAULT: Final = 1
MAGIC_ROLL: Final = 1 << 1
MAGIC_DELETE: Final = 1 << 2


@dataclass(frozen=True, slots=True)
class TimerUnit:
    """One record: a timer at `deliver_ms` for the message at `phy_offset` (`size` bytes)."""

    prev_pos: int
    magic: int
    write_ms: int
    deliver_ms: int
    phy_offset: int
    size: int
    queue_offset: int

    @property
    def rolls(self) -> bool:
        return bool(self.magic & MAGIC_ROLL)

    @property
    def recalls(self) -> bool:
        """A recall's tombstone whose time has come (a rolling one is written again first)."""
        return bool(self.magic & MAGIC_DELETE) and not self.magic & MAGIC_ROLL


def encode_unit(unit: TimerUnit) -> bytes:
    return UNIT.pack(
        UNIT_SIZE,
        unit.prev_pos,
        unit.magic,
        unit.write_ms,
        unit.deliver_ms - unit.write_ms,
        unit.phy_offset,
        unit.size,
        0,
        unit.queue_offset,
    )


def magic_ok(magic: int) -> bool:
    return (magic | 0xF) == 0xF and magic != 0


def decode_unit(buf: bytes | bytearray | memoryview, pos: int = 0) -> TimerUnit | None:
    """The record at `pos`, or None when the bytes there are not one (blank, zeros, torn)."""
    if len(buf) - pos < UNIT_SIZE:
        return None
    size, prev, magic, write_ms, delay, phy, msg_size, _hash, queue_offset = UNIT.unpack_from(
        buf, pos
    )
    if size != UNIT_SIZE or not magic_ok(magic) or msg_size <= 0 or phy < 0 or prev < -1:
        return None
    return TimerUnit(prev, magic, write_ms, write_ms + delay, phy, msg_size, queue_offset)


def scan_units(
    buf: bytes | bytearray | memoryview, base: int, start: int = 0
) -> Iterator[tuple[int, TimerUnit]]:
    """(log position, record) of the records of one segment from `start`; stops at a blank or
    at the first bytes that are not a record (the caller cuts the log at the last one's end)."""
    pos = start
    while pos + UNIT_SIZE <= len(buf):
        unit = decode_unit(buf, pos)
        if unit is None:
            return
        yield base + pos, unit
        pos += UNIT_SIZE


def is_blank(buf: bytes | bytearray | memoryview, pos: int) -> bool:
    if len(buf) - pos < MIN_BLANK_LEN:
        return True
    magic: int = _BLANK.unpack_from(buf, pos)[2]
    return magic == TIMER_LOG_BLANK_MAGIC


class TimerLog:
    """The timer log's segments: append a record, read one back, recover the end."""

    def __init__(
        self, directory: Path, segment_size: int, append_mode: AppendMode = AppendMode.pwrite
    ) -> None:
        self.segments = SegmentQueue(directory, segment_size, append_mode=append_mode)

    def load(self) -> None:
        self.segments.load()

    def append(self, unit: TimerUnit) -> int:
        """Append `unit`; returns its log position (where its `prev pos` chain starts)."""
        return self.append_bytes(encode_unit(unit))

    def next_position(self) -> int:
        """Where the next record lands (after a blank when the last segment is too full)."""
        last = self.segments.last
        if last is None or last.is_full:
            return self.segments.max_wrote_offset
        if last.free < UNIT_SIZE + MIN_BLANK_LEN:
            return last.end_offset
        return last.start_offset + last.wrote

    def append_bytes(self, data: bytes) -> int:
        segment = self.segments.last_for_append(0)
        if segment.free < UNIT_SIZE + MIN_BLANK_LEN:
            segment.append(_BLANK.pack(segment.free, 0, TIMER_LOG_BLANK_MAGIC))
            segment.fill_to_end()
            segment = self.segments.last_for_append(0)
        at = segment.append(data)
        return segment.start_offset + at

    def read(self, pos: int) -> TimerUnit | None:
        segment = self.segments.find(pos)
        if segment is None:
            return None
        return decode_unit(segment.view, pos - segment.start_offset)

    def recover(self, from_pos: int) -> Iterator[tuple[int, TimerUnit]]:
        """The records from the segment holding `from_pos` to the end; once exhausted, the log
        is cut after the last good one (RocketMQ's recoverAndRevise)."""
        segments = self.segments
        if not segments.segments:
            return
        start_index = 0
        for index, segment in enumerate(segments.segments):
            if segment.start_offset <= from_pos:
                start_index = index
        end = segments.segments[start_index].start_offset
        for segment in segments.segments[start_index:]:
            pos = 0
            for at, unit in scan_units(segment.view, segment.start_offset):
                yield at, unit
                pos = at - segment.start_offset + UNIT_SIZE
            end = segment.start_offset + pos
            if not is_blank(segment.view, pos):
                break
            end = segment.end_offset
        if end < segments.max_wrote_offset:
            log.info("timer log: cut at %d (records end there)", end)
        segments.truncate_after(end)

    def flush(self) -> None:
        self.segments.flush(0)

    def close(self) -> None:
        self.segments.close()

    @property
    def max_offset(self) -> int:
        return self.segments.max_wrote_offset
