"""The timer checkpoint (RocketMQ 5's TimerCheckpoint): `<storePathRootDir>/config/timercheck`.

56 bytes, big-endian longs, RocketMQ's layout (and the GET_TIMER_CHECK_POINT body)::

    [8 last read time ms][8 timer log flushed pos][8 timer queue offset]
    [8 master timer queue offset][8 data version state][8 data version time][8 data version counter]

- last read time: every timer due before it has been delivered (tidemq: an exact millisecond;
  RocketMQ: a slot's start);
- timer log flushed pos: recovery reads the timer log again from the segment holding it;
- timer queue offset: the next unit of `rmq_sys_wheel_timer`'s ConsumeQueue to put in the wheel;
- master timer queue offset: the master's (a slave puts timers in its wheel up to there only).

Written in place with one pwrite (the page cache keeps it across a killed process) after every
step that moves it, and fsynced every timerFlushIntervalMs.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CHECKPOINT: Final = struct.Struct(">qqqqqqq")
CHECKPOINT_SIZE: Final = 56
assert CHECKPOINT.size == CHECKPOINT_SIZE
# The older form without the data version (RocketMQ before 5.1) is read too.
_SHORT: Final = struct.Struct(">qqqq")


@dataclass(slots=True)
class TimerProgress:
    last_read_time_ms: int = 0
    log_flushed_pos: int = 0
    queue_offset: int = 0
    master_queue_offset: int = 0
    state_version: int = 0
    version_time_ms: int = 0
    version_counter: int = 0

    def encode(self) -> bytes:
        return CHECKPOINT.pack(
            self.last_read_time_ms,
            self.log_flushed_pos,
            self.queue_offset,
            self.master_queue_offset,
            self.state_version,
            self.version_time_ms,
            self.version_counter,
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> TimerProgress:
        """Raises ValueError when `data` is not a checkpoint."""
        if len(data) >= CHECKPOINT_SIZE:
            return cls(*CHECKPOINT.unpack_from(data))
        if len(data) >= _SHORT.size:
            return cls(*_SHORT.unpack_from(data))
        raise ValueError(f"timer checkpoint of {len(data)} bytes (expected {CHECKPOINT_SIZE})")


class TimerCheckpointFile:
    """The checkpoint on disk: read at load, written in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def load(self) -> TimerProgress:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not existed:
            return TimerProgress()
        data = os.pread(self._fd, CHECKPOINT_SIZE, 0)
        if not data.strip(b"\0"):
            return TimerProgress()
        return TimerProgress.decode(data)

    def write(self, progress: TimerProgress) -> None:
        if self._fd >= 0:
            os.pwrite(self._fd, progress.encode(), 0)

    def sync(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
