"""The revive ledger of one revive queue: which popped messages must come back, sans-IO.

POP's state lives in records of the broker's revive topic (`rmq_sys_REVIVE_LOG_<cluster>`,
reviveQueueNum queues), as RocketMQ keeps it, so the CommitLog's flush and HA replication carry
it to disk and to the slaves with no mechanism of their own:

- a checkpoint (CK) for each pop: topic, group, queue, the offsets handed out, pop time and
  invisible time, written before the messages leave the broker;
- an ACK for each acknowledged offset, written to the same revive queue as its CK (the receipt
  handle names it), after it;
- a CLOSE when the revive service has revived what a CK left unacknowledged (written to
  %RETRY%<group> with one more attempt, or to %DLQ%<group> past the group's maximum).

The revive service reads a revive queue in order and feeds each record here, with its position
(the revive queue offset) and store time; `due(now)` says which CKs are to be revived now and
what of them; `revive_offset` is where to read from after a restart (persisted as the revive
queue's consumer offset, replicated to the slaves with the other offsets).

Against RocketMQ's reported failures:
- #7724 (acknowledged messages revived): a CK is judged only once a record stored after its
  deadline has been read (`watermark`), so every ACK stored before the deadline, which the
  queue holds before any later record, has been applied. An ACK stored after the deadline is
  too late by definition: the message was visible again.
- #5408 (revive offset stuck): the revive offset is the position of the oldest CK still open,
  recomputed from the open set, so a CK revived or fully acknowledged releases it at once;
  nothing waits on an ACK that never comes.
- duplicates after a restart (the revive offset behind CKs already revived): revival writes a
  CLOSE; re-reading after a restart applies it, and a closed CK is not revived twice.
- #9583 (receipt handle lost after ChangeInvisibleDuration): a change writes a new CK for the
  offset, then an ACK of the old; ACKs name (topic, group, queue, offset) and the CK they end,
  so the old handle acknowledging after the change still ends the message's new CK too
  (`ack` with `any_checkpoint=True`), and no handle is ever lost.
"""

from __future__ import annotations

import dataclasses
from typing import Final

CheckpointKey = tuple[str, str, int, int, int]  # topic, group, queue id, start offset, pop time
QueueKey = tuple[str, str, int, int]  # topic, group, queue id, queue offset

MAX_ORPHAN_ACKS: Final = 100_000  # ACKs read before their CK (bounded: the oldest go)
MAX_CLOSED: Final = 100_000  # CKs remembered as closed, so late ACKs are not orphans


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]  # the queue offsets handed out by this pop

    @property
    def key(self) -> CheckpointKey:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    offset: int
    # A change of invisible duration acknowledges the old CK only; an ACK from a consumer
    # ends the message wherever it is open (its handle may predate a change).
    any_checkpoint: bool = False

    @property
    def key(self) -> CheckpointKey:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time)


@dataclasses.dataclass(frozen=True, slots=True)
class Revival:
    """Offsets of `checkpoint` left unacknowledged at its deadline: to be put back."""

    checkpoint: Checkpoint
    offsets: tuple[int, ...]


@dataclasses.dataclass(slots=True)
class _Open:
    checkpoint: Checkpoint
    position: int
    pending: set[int]


class ReviveLedger:
    def __init__(self, start_position: int = 0) -> None:
        self._open: dict[CheckpointKey, _Open] = {}
        self._by_queue: dict[tuple[str, str, int], set[CheckpointKey]] = {}
        self._closed: dict[CheckpointKey, None] = {}  # insertion-ordered, bounded
        self._orphans: dict[CheckpointKey, set[int]] = {}
        self._next_position = start_position
        self.watermark = 0  # the latest store time read
        # Acknowledgements applied per (topic, group, queue), for operators (GET_POP_PROGRESS).
        self.acked: dict[tuple[str, str, int], int] = {}

    def _read(self, position: int, store_time: int) -> None:
        self._next_position = max(self._next_position, position + 1)
        self.watermark = max(self.watermark, store_time)

    def checkpoint(self, checkpoint: Checkpoint, position: int, store_time: int) -> None:
        self._read(position, store_time)
        key = checkpoint.key
        if key in self._closed or key in self._open:
            return  # read again after a restart
        pending = set(checkpoint.offsets) - self._orphans.pop(key, set())
        if pending:
            self._open[key] = _Open(checkpoint, position, pending)
            self._by_queue.setdefault(key[:3], set()).add(key)
        else:
            self._mark_closed(key)

    def ack(self, ack: Ack, position: int, store_time: int) -> None:
        self._read(position, store_time)
        keys = [ack.key]
        if ack.any_checkpoint:
            keys += sorted(self._by_queue.get(ack.key[:3], set()) - {ack.key})
        hit = False
        for key in keys:
            entry = self._open.get(key)
            if entry is not None and ack.offset in entry.pending:
                entry.pending.discard(ack.offset)
                hit = True
                if not entry.pending:
                    self._remove(key)
        if hit:
            self.acked[ack.key[:3]] = self.acked.get(ack.key[:3], 0) + 1
        elif ack.key not in self._closed:
            self._remember_orphan(ack)

    def _remove(self, key: CheckpointKey) -> _Open | None:
        entry = self._open.pop(key, None)
        if entry is not None:
            siblings = self._by_queue.get(key[:3])
            if siblings is not None:
                siblings.discard(key)
                if not siblings:
                    del self._by_queue[key[:3]]
        self._mark_closed(key)
        return entry

    def _mark_closed(self, key: CheckpointKey) -> None:
        if len(self._closed) >= MAX_CLOSED:
            del self._closed[next(iter(self._closed))]
        self._closed[key] = None

    def close(self, key: CheckpointKey, position: int, store_time: int) -> None:
        """A CLOSE record: the CK of `key` was revived (or read after a restart)."""
        self._read(position, store_time)
        self._remove(key)

    def _remember_orphan(self, ack: Ack) -> None:
        if sum(len(v) for v in self._orphans.values()) >= MAX_ORPHAN_ACKS:
            self._orphans.pop(next(iter(self._orphans)))
        self._orphans.setdefault(ack.key, set()).add(ack.offset)

    def due(self, now_ms: int) -> list[Revival]:
        """The CKs whose deadline has passed, both by the clock and by what has been read
        (`watermark`), with what they left unacknowledged; they leave the open set (the caller
        writes their CLOSE after putting the offsets back)."""
        horizon = min(now_ms, self.watermark)
        ready = [e for e in self._open.values() if e.checkpoint.deadline < horizon]
        ready.sort(key=lambda e: (e.checkpoint.deadline, e.position))
        for entry in ready:
            self._remove(entry.checkpoint.key)
        return [Revival(e.checkpoint, tuple(sorted(e.pending))) for e in ready]

    @property
    def revive_offset(self) -> int:
        """Where a restart reads from: the oldest open CK, else past everything read."""
        if not self._open:
            return self._next_position
        return min(entry.position for entry in self._open.values())

    def queue_progress(self, now_ms: int) -> dict[tuple[str, str, int], tuple[int, int]]:
        """(topic, group, queue id) -> (messages in flight, those of them still invisible at
        `now_ms`): a read for operators."""
        progress: dict[tuple[str, str, int], tuple[int, int]] = {}
        for key, entry in self._open.items():
            flying, hidden = progress.get(key[:3], (0, 0))
            pending = len(entry.pending)
            invisible = pending if entry.checkpoint.deadline >= now_ms else 0
            progress[key[:3]] = (flying + pending, hidden + invisible)
        return progress

    def in_flight(self, topic: str, group: str) -> int:
        """Messages of `group` on `topic` handed out and neither acknowledged nor revived."""
        return sum(
            len(entry.pending)
            for key, entry in self._open.items()
            if key[0] == topic and key[1] == group
        )
