"""The time wheel (RocketMQ 5's TimerWheel): slots by time, each the head of a linked list.

File `<storePathRootDir>/timerwheel`: `2 * slots_total` slots of 32 bytes, big-endian, in RocketMQ's
layout::

    [8 time / precision][8 first pos][8 last pos][4 num][4 magic]

A slot covers `precision` ms; the slot of time `t` is `t // precision % (2 * slots_total)`. It
holds the timer log positions of the first and last record put in it (the records link back
through their `prev pos`) and how many were put. A slot whose stored time is not the one asked
for is another lap's, i.e. blank. `slots_total` is 7 days of seconds (RocketMQ's
TIMER_WHEEL_TTL_DAY), whatever the precision: the file is 38.7 MB, mapped, and the broker holds
none of it in its own memory.

Sans-IO: the wheel works on any writable buffer (a `mmap` in production, a `bytearray` in tests).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

SLOT: Final = struct.Struct(">qqqii")
SLOT_SIZE: Final = 32
assert SLOT.size == SLOT_SIZE
TIMER_WHEEL_TTL_DAY: Final = 7
SLOTS_TOTAL: Final = TIMER_WHEEL_TTL_DAY * 24 * 3600
BLANK: Final = -1


@dataclass(frozen=True, slots=True)
class Slot:
    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int = 0


def wheel_size(slots_total: int) -> int:
    """Bytes of a wheel file."""
    return 2 * slots_total * SLOT_SIZE


class TimerWheel:
    """The slots over `buffer` (`wheel_size(slots_total)` bytes)."""

    def __init__(self, buffer: bytearray | memoryview, slots_total: int, precision_ms: int) -> None:
        if len(buffer) != wheel_size(slots_total):
            raise ValueError(
                f"timer wheel has {len(buffer)} bytes, expected {wheel_size(slots_total)}"
            )
        self.buffer = buffer
        self.slots_total = slots_total
        self.ring = 2 * slots_total
        self.precision = precision_ms

    def slot_start(self, time_ms: int) -> int:
        return time_ms // self.precision * self.precision

    def _at(self, time_ms: int) -> int:
        return time_ms // self.precision % self.ring * SLOT_SIZE

    def slot(self, time_ms: int) -> Slot | None:
        """The slot of `time_ms`, or None when it holds nothing of this lap."""
        stamp, first, last, num, magic = SLOT.unpack_from(self.buffer, self._at(time_ms))
        if stamp != time_ms // self.precision or last < 0:
            return None
        return Slot(stamp * self.precision, first, last, num, magic)

    def put(self, time_ms: int, first_pos: int, last_pos: int, num: int, magic: int = 0) -> None:
        SLOT.pack_into(
            self.buffer,
            self._at(time_ms),
            time_ms // self.precision,
            first_pos,
            last_pos,
            num,
            magic,
        )

    def add(self, time_ms: int, pos: int) -> int:
        """A record at timer log `pos` joins the slot of `time_ms`; returns its `prev pos` (the
        slot's last record before it, BLANK for the first)."""
        slot = self.slot(time_ms)
        if slot is None:
            self.put(time_ms, pos, pos, 1)
            return BLANK
        self.put(time_ms, slot.first_pos, pos, slot.num + 1, slot.magic)
        return slot.last_pos

    def revise(self, time_ms: int, pos: int) -> None:
        """Recovery: the record at `pos` (of the slot of `time_ms`) is the slot's last so far."""
        slot = self.slot(time_ms)
        if slot is None:
            self.put(time_ms, pos, pos, 1)
        elif pos > slot.last_pos:
            self.put(time_ms, slot.first_pos, pos, slot.num + 1, slot.magic)

    def pending(self, from_ms: int, to_ms: int) -> int:
        """Records in the slots of times from `from_ms` to `to_ms` (RocketMQ's getAllNum, over
        the span timers can be in rather than the whole lap)."""
        start = from_ms // self.precision
        end = min(to_ms // self.precision, start + self.ring - 1)
        buffer, ring, unpack = self.buffer, self.ring, SLOT.unpack_from
        total = 0
        for stamp in range(start, end + 1):
            got, _first, last, num, _magic = unpack(buffer, stamp % ring * SLOT_SIZE)
            if got == stamp and last >= 0:
                total += num
        return total
