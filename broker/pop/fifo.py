"""FIFO consumer groups (`consumeMessageOrderly`): one message per message group in flight, sans-IO.

A message group (`__SHARDINGKEY`, the 5.x `message_group`; a message without one is in the
queue's group "") always lands in one queue, so a queue holds several groups interleaved. Per
(topic, group, queue) a `FifoQueue` records the messages in flight (offset -> its message group,
until when it is invisible, which delivery it is) and the offsets acknowledged beyond the
group's consumer offset. A pop walks the queue from the consumer offset (`FifoScan`):

- an acknowledged message is passed;
- a message whose message group has a message in flight (invisible), or met earlier in this
  walk, is held back: the next of a group goes only after the previous is acknowledged, while
  the other groups of the queue go on;
- a message in flight whose invisible time has passed is handed out again, one attempt more,
  never through the retry topic; past the group's maximum attempts it goes to the DLQ instead
  (`Verdict.DEAD`) and its group goes on;
- any other message is handed out (attempt 1) and its group is in flight.

The consumer offset is the lowest offset not acknowledged (offsets a filter passed count as
acknowledged): it moves when the walk passes acknowledged or filtered messages at its head, and
with an ack of the message at its head. The walk stops at `want` messages handed out or
`SCAN_LIMIT` read: a group further than that behind the consumer offset waits until the head
moves.

State survives a restart (`to_json` / `from_json`, RocketMQ's consumerOrderInfo.json has the
same role): `PopService` writes it with the other config files; a message in flight when the
broker stopped comes back with its attempt count going on. A crash loses what changed since the
last write: messages acknowledged since then come back (at least once), attempt counts restart
from the written ones.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Final

QueueKey = tuple[str, str, int]  # topic, group, queue id
SCAN_LIMIT: Final = 1024  # messages one pop reads from one queue at most


@dataclasses.dataclass(slots=True)
class Delivery:
    message_group: str
    deadline: int  # ms: visible again (handed out again) from then
    attempt: int  # 1 for the first delivery


@dataclasses.dataclass(slots=True)
class FifoQueue:
    in_flight: dict[int, Delivery] = dataclasses.field(default_factory=dict)
    acked: set[int] = dataclasses.field(default_factory=set)  # beyond the consumer offset


class Verdict(enum.Enum):
    DELIVER = "deliver"
    HOLD = "hold"  # acknowledged already, or its group waits
    DEAD = "dead"  # past the maximum attempts: to the DLQ


class FifoScan:
    """One pop's walk of one queue, from the consumer offset `start`, in offset order."""

    def __init__(
        self,
        state: FifoQueue,
        start: int,
        now_ms: int,
        invisible_ms: int,
        want: int,
        max_attempts: int,
    ) -> None:
        self.state = state
        self.now = now_ms
        self.invisible = invisible_ms
        self.want = want
        self.max_attempts = max_attempts
        self.commit = start  # the consumer offset this walk found
        self.attempt = 0  # of the last DELIVER
        self.handed_out = 0
        self.read = 0
        self._contiguous = True  # everything before `commit` is acknowledged or passed
        self._held: set[str] = set()  # groups in flight, or handed out by this walk

    def finished(self) -> bool:
        return self.handed_out >= self.want or self.read >= SCAN_LIMIT

    def offer(self, offset: int, message_group: str) -> Verdict:
        """What to do with the message at `offset` (offered in order, filtered ones left out)."""
        self.read += 1
        state = self.state
        if self._contiguous:
            self.commit = offset
        if offset in state.acked:
            if self._contiguous:
                state.acked.discard(offset)
                self.commit = offset + 1
            return Verdict.HOLD
        delivery = state.in_flight.get(offset)
        if message_group in self._held or (delivery is not None and self.now < delivery.deadline):
            self._held.add(message_group)
            self._contiguous = False
            return Verdict.HOLD
        attempt = delivery.attempt + 1 if delivery is not None else 1
        if attempt > self.max_attempts:
            state.in_flight.pop(offset, None)
            if self._contiguous:
                self.commit = offset + 1
            else:
                state.acked.add(offset)
            return Verdict.DEAD
        self._contiguous = False
        self._held.add(message_group)
        state.in_flight[offset] = Delivery(message_group, self.now + self.invisible, attempt)
        self.attempt = attempt
        self.handed_out += 1
        return Verdict.DELIVER

    def passed(self, next_offset: int) -> None:
        """Every message before `next_offset` was offered or filtered out."""
        if self._contiguous:
            self.commit = max(self.commit, next_offset)


class FifoLocks:
    def __init__(self) -> None:
        self._queues: dict[QueueKey, FifoQueue] = {}
        self.changed = False  # since the last `to_json`

    def scan(
        self,
        key: QueueKey,
        start: int,
        now_ms: int,
        invisible_ms: int,
        want: int,
        max_attempts: int,
    ) -> FifoScan:
        self.changed = True
        state = self._queues.setdefault(key, FifoQueue())
        # Below the consumer offset nothing is in flight (an offset reset, a DLQ): forgotten.
        for offset in [o for o in state.in_flight if o < start]:
            del state.in_flight[offset]
        state.acked = {o for o in state.acked if o >= start}
        return FifoScan(state, start, now_ms, invisible_ms, want, max_attempts)

    def ack(self, key: QueueKey, offset: int, committed: int) -> int | None:
        """Acknowledge `offset` (any delivery's handle of it); the consumer offset to commit
        when it moves (from `committed`), else None."""
        state = self._queues.get(key)
        if state is None or state.in_flight.pop(offset, None) is None:
            return None
        self.changed = True
        state.acked.add(offset)
        moved = committed
        while moved in state.acked:
            state.acked.discard(moved)
            moved += 1
        if not state.in_flight and not state.acked:
            del self._queues[key]
        return moved if moved != committed else None

    def extend(self, key: QueueKey, offset: int, deadline: int) -> bool:
        state = self._queues.get(key)
        delivery = state.in_flight.get(offset) if state is not None else None
        if delivery is None:
            return False
        self.changed = True
        delivery.deadline = deadline
        return True

    def in_flight(self, topic: str, group: str) -> int:
        return sum(len(v.in_flight) for k, v in self._queues.items() if k[:2] == (topic, group))

    # --- persistence -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """{"table": [{"topic", "group", "queueId", "inFlight": [[offset, messageGroup,
        deadline, attempt]...], "acked": [offset...]}...]}"""
        self.changed = False
        table = []
        for (topic, group, queue_id), state in self._queues.items():
            if not state.in_flight and not state.acked:
                continue
            in_flight = [
                [offset, d.message_group, d.deadline, d.attempt]
                for offset, d in sorted(state.in_flight.items())
            ]
            table.append(
                {
                    "topic": topic,
                    "group": group,
                    "queueId": queue_id,
                    "inFlight": in_flight,
                    "acked": sorted(state.acked),
                }
            )
        return {"table": table}

    @classmethod
    def from_json(cls, data: Any) -> FifoLocks:
        """The state `to_json` wrote; ValueError naming what is wrong."""
        locks = cls()
        table = data.get("table") if isinstance(data, dict) else None
        rows: list[Any] | None = table if isinstance(table, list) else None
        if rows is None:
            raise ValueError("no table")
        for row in rows:
            try:
                key = (str(row["topic"]), str(row["group"]), _int(row["queueId"]))
                state = FifoQueue()
                for offset, message_group, deadline, attempt in row["inFlight"]:
                    state.in_flight[_int(offset)] = Delivery(
                        str(message_group), _int(deadline), _int(attempt)
                    )
                state.acked = {_int(o) for o in row["acked"]}
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"bad row {str(row)[:200]}: {exc}") from None
            locks._queues[key] = state
        return locks


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not a whole number")
    return value
