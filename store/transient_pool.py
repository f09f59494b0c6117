"""transientStorePoolEnable: appends go to reusable buffers, committed to the files later.

RocketMQ's TransientStorePool: `transientStorePoolSize` buffers of one CommitLog file's size. The
segment being written borrows one; the commit service (store/services.py) writes it into the file
and gives it back once the segment is full and committed.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class TransientStorePool:
    def __init__(self, count: int, size: int) -> None:
        self.size = size
        self._free = [bytearray(size) for _ in range(count)]

    def borrow(self) -> bytearray | None:
        if not self._free:
            log.warning("transient store pool exhausted: appends go straight to the file")
            return None
        return self._free.pop()

    def give_back(self, buffer: bytearray) -> None:
        self._free.append(buffer)

    @property
    def available(self) -> int:
        return len(self._free)
