"""FIFO consumer groups (`consumeMessageOrderly`): one batch per queue in flight, sans-IO.

A FIFO message group always lands in one queue (SendMessage: crc32 of the group), so holding a
queue's next messages back until its batch in flight is acknowledged delivers each message
group in order. Per (topic, group, queue) a `FifoLock` records the offsets handed out, until
when they are invisible and which delivery this is:

- pop: a queue with a lock whose offsets are not all acknowledged and whose deadline has not
  passed hands out nothing; past the deadline the same messages are handed out again (from the
  group's consumer offset, which a FIFO pop does not advance), one attempt more, never through
  the retry topic; past the group's maximum attempts they go to the DLQ and the offset passes
  them;
- ack: the offset leaves the lock; the last one moves the consumer offset past the batch;
- change of invisible time: the lock's deadline moves.

The locks live in memory: after a restart the consumer offset (persisted and replicated as
every offset) makes the unacknowledged batch come back, at-least-once, its attempt count
starting again at 1.
"""

from __future__ import annotations

import dataclasses

QueueKey = tuple[str, str, int]  # topic, group, queue id


@dataclasses.dataclass(slots=True)
class FifoLock:
    start_offset: int
    offsets: set[int]  # handed out and not acknowledged
    next_offset: int  # the consumer offset once all are acknowledged
    deadline: int  # ms
    attempt: int  # 1 for the first delivery


class FifoLocks:
    def __init__(self) -> None:
        self._locks: dict[QueueKey, FifoLock] = {}

    def blocked(self, key: QueueKey, now_ms: int) -> bool:
        """Nothing may be handed out of this queue now."""
        lock = self._locks.get(key)
        return lock is not None and bool(lock.offsets) and now_ms < lock.deadline

    def attempt_at(self, key: QueueKey, start_offset: int) -> int:
        """The delivery a pop from `start_offset` is: one more than the expired lock's when it
        hands out the same batch again, else the first."""
        lock = self._locks.get(key)
        if lock is not None and lock.offsets and lock.start_offset == start_offset:
            return lock.attempt + 1
        return 1

    def lock(
        self, key: QueueKey, offsets: list[int], next_offset: int, deadline: int, attempt: int
    ) -> None:
        self._locks[key] = FifoLock(offsets[0], set(offsets), next_offset, deadline, attempt)

    def ack(self, key: QueueKey, offset: int, pop_time: int) -> int | None:
        """Acknowledge `offset` (handed out at `pop_time`); the consumer offset to commit when
        it was the batch's last, else None. A handle of an earlier delivery of the same batch
        still acknowledges it."""
        lock = self._locks.get(key)
        if lock is None or offset not in lock.offsets:
            return None
        del pop_time
        lock.offsets.discard(offset)
        if lock.offsets:
            return None
        del self._locks[key]
        return lock.next_offset

    def extend(self, key: QueueKey, offset: int, deadline: int) -> bool:
        lock = self._locks.get(key)
        if lock is None or offset not in lock.offsets:
            return False
        lock.deadline = deadline
        return True

    def release(self, key: QueueKey) -> None:
        self._locks.pop(key, None)

    def in_flight(self, topic: str, group: str) -> int:
        return sum(len(v.offsets) for k, v in self._locks.items() if k[:2] == (topic, group))
