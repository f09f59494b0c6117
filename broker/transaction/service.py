"""Half messages, and the end of their transactions (TransactionalMessageService).

The service keeps the pending table: transaction origin (see messages.py) -> queue offset of its
latest copy in the half queue. A prepared send adds its origin; an END_TRANSACTION applies only to
a pending origin and takes it out before it stores anything, so a second END, an END racing a
check's answer, or the answer to a check of a message already ended is answered "already
ended" instead of storing the message twice (apache/rocketmq #1517, #1566, #8158: RocketMQ looks
the half message up by offset and commits it again). The check service (check.py) reads the same
table, so it never asks about a transaction that has ended.

At start (the store loaded and dispatched) the table is rebuilt: the origins of the half queue
from the check's progress (CID_RMQ_SYS_TRANS's offset in the half queue) on, less the origins the
op queue's messages have ended. Only a master ends transactions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final

from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.transaction.messages import (
    CHECK_GROUP,
    HALF_QUEUE_ID,
    HALF_TOPIC,
    OP_TOPIC,
    commit_record,
    committed_message,
    op_half_offset,
    op_message,
    op_record,
    origin_of,
    read_half,
)
from tidemq.client.protocol.headers import EndTransactionRequestHeader
from tidemq.client.remoting.codes import ResponseCode
from tidemq.store.commitlog import AppendResult, PutStatus
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.message_store import MessageStore, PutMessageResult
from tidemq.store.record import (
    EncodedRecord,
    MessageToStore,
    RecordTooLargeError,
    StoredMessage,
)

log = logging.getLogger(__name__)

SCAN_BATCH: Final = 64
_PADDING_SIZE: Final = 0x7FFFFFFF
# A record bigger than this is not one the store could hold: the offset is not a record's start.
_MAX_RECORD: Final = 1 << 27

_HALF_TOPIC_RAW: Final = HALF_TOPIC.encode()
_NO_VIEW: Final = memoryview(b"")


def _refused_status(exc: RecordTooLargeError) -> PutStatus:
    """The status the store's put gives a record refused for `exc` (commitlog._refused)."""
    return PutStatus.PROPERTIES_SIZE_EXCEEDED if exc.properties else PutStatus.MESSAGE_ILLEGAL


_STATE_NAMES: Final = {
    TRANSACTION_NOT_TYPE: "UNKNOWN",
    TRANSACTION_COMMIT_TYPE: "COMMIT",
    TRANSACTION_ROLLBACK_TYPE: "ROLLBACK",
}


@dataclasses.dataclass(frozen=True, slots=True)
class EndOutcome:
    """What an END_TRANSACTION gets back: a response code and a remark."""

    code: int
    remark: str | None = None


# Frozen: one outcome for every END that succeeds.
_ENDED: Final = EndOutcome(ResponseCode.SUCCESS)


def _no_half(header: EndTransactionRequestHeader) -> EndOutcome:
    return EndOutcome(
        ResponseCode.SYSTEM_ERROR,
        f"no half message at commitLogOffset {header.commit_log_offset}: "
        "find prepared transaction message failed",
    )


def units_from(queue: ConsumeQueue, start: int) -> Iterator[tuple[int, int, int]]:
    """(queue offset, physical offset, size) of each unit of `queue` from `start` on."""
    offset = max(start, queue.min_offset)
    while offset < queue.max_offset:
        units = queue.units(offset, SCAN_BATCH)
        if not units:
            return
        for unit in units:
            offset = unit.queue_offset + 1
            if unit.size != _PADDING_SIZE:
                yield unit.queue_offset, unit.physical_offset, unit.size


class PendingTable:
    """Open transactions: origin -> queue offset of the latest copy, and the reverse, so that
    the check passes a unit that stands for no open transaction without reading its record."""

    def __init__(self) -> None:
        self._latest: dict[int, int] = {}
        self._origin_at: dict[int, int] = {}

    def put(self, origin: int, queue_offset: int) -> None:
        old = self._latest.get(origin)
        if old is not None:
            self._origin_at.pop(old, None)
        self._latest[origin] = queue_offset
        self._origin_at[queue_offset] = origin

    def pop(self, origin: int) -> int | None:
        latest = self._latest.pop(origin, None)
        if latest is not None:
            self._origin_at.pop(latest, None)
        return latest

    def get(self, origin: int) -> int | None:
        return self._latest.get(origin)

    def origin_at(self, queue_offset: int) -> int | None:
        """The transaction whose latest copy is at `queue_offset`, if it is open."""
        return self._origin_at.get(queue_offset)

    def clear(self) -> None:
        self._latest.clear()
        self._origin_at.clear()

    def as_dict(self) -> dict[int, int]:
        return dict(self._latest)

    def oldest(self) -> int | None:
        return min(self._latest, default=None)

    def __len__(self) -> int:
        return len(self._latest)


class TransactionalMessageService:
    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        store_host: Callable[[], bytes],
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.store_host = store_host
        self.pending = PendingTable()
        self.committed = 0
        self.rolled_back = 0

    # --- progress of the check --------------------------------------------------------------

    @property
    def check_offset(self) -> int:
        return max(self.offsets.query(CHECK_GROUP, HALF_TOPIC, HALF_QUEUE_ID), 0)

    def set_check_offset(self, offset: int) -> None:
        self.offsets.commit("broker", CHECK_GROUP, HALF_TOPIC, HALF_QUEUE_ID, offset)

    # --- the pending table --------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the pending table from the half and op queues (module docstring)."""
        self.pending.clear()
        half = self.store.find_consume_queue(HALF_TOPIC, HALF_QUEUE_ID)
        if half is None:
            return
        for queue_offset, physical, size in units_from(half, self.check_offset):
            stored = self.store.look_message_by_offset(physical, size)
            if stored is not None:
                self.pending.put(origin_of(stored), queue_offset)
        ops = self.store.find_consume_queue(OP_TOPIC, HALF_QUEUE_ID)
        oldest = self.pending.oldest()
        if ops is not None and oldest is not None:
            # An op is written after the half message it ends: those older than the oldest
            # open transaction end none of them.
            born = self.store.message_store_timestamp(HALF_TOPIC, HALF_QUEUE_ID, oldest)
            start = self.store.offset_in_queue_by_time(OP_TOPIC, HALF_QUEUE_ID, born - 1000)
            for _offset, physical, size in units_from(ops, start):
                op = self.store.look_message_by_offset(physical, size)
                ended = op_half_offset(op) if op is not None else None
                if ended is not None:
                    self._forget_ended(half, ended)
        log.info("transactions: %d half messages pending", len(self.pending))

    def _forget_ended(self, half: ConsumeQueue, ended: int) -> None:
        origin = self.pending.origin_at(ended)
        if origin is None and self.pending.get(ended) is not None:
            origin = ended  # the first copy itself
        if origin is None:  # an older copy: its record names the transaction
            unit = half.unit(ended)
            stored = (
                None
                if unit is None
                else self.store.look_message_by_offset(unit.physical_offset, unit.size)
            )
            origin = None if stored is None else origin_of(stored)
        if origin is not None:
            self.pending.pop(origin)

    def on_prepared(self, append: AppendResult) -> None:
        """A half message was appended: its transaction is open. Called before the put waits
        for its flush or slave, so that the check, which may see the half message in its
        queue meanwhile, never passes it as if it had ended."""
        self.pending.put(append.queue_offset, append.queue_offset)

    def is_current(self, half: StoredMessage) -> bool:
        """True when `half` is the latest copy of a pending transaction."""
        return self.pending.get(origin_of(half)) == half.queue_offset

    # --- END_TRANSACTION --------------------------------------------------------------------

    def half_message_at(self, physical_offset: int) -> StoredMessage | None:
        """The record at a CommitLog offset, or None when no record starts there."""
        view = self._record_view(physical_offset)
        if view is None:
            return None
        return self.store.look_message_by_offset(physical_offset, len(view))

    def _record_view(self, physical_offset: int) -> memoryview | None:
        """The bytes of the record at a CommitLog offset where they lie, or None when no
        record starts there."""
        return self.store.commitlog.record_at(physical_offset, _MAX_RECORD)

    async def end(self, header: EndTransactionRequestHeader) -> EndOutcome:
        """Commit or roll back the half message the header names (checkPrepareMessage's checks
        first); see the module docstring for why an origin must be pending."""
        outcome = self.end_now(header)
        return outcome if isinstance(outcome, EndOutcome) else await outcome

    def end_now(
        self, header: EndTransactionRequestHeader
    ) -> EndOutcome | Coroutine[Any, Any, EndOutcome]:
        """`end` without a coroutine when its put waits for nothing (most ENDs): the outcome,
        or an awaitable of it."""
        state = header.commit_or_rollback
        if state != TRANSACTION_COMMIT_TYPE and state != TRANSACTION_ROLLBACK_TYPE:
            if state == TRANSACTION_NOT_TYPE:
                return EndOutcome(
                    ResponseCode.SUCCESS, "state UNKNOWN: the transaction stays open for the check"
                )
            return EndOutcome(
                ResponseCode.ILLEGAL_OPERATION,
                f"commitOrRollback {state} is none of 0 (unknown), 8 (commit), 12 (rollback)",
            )
        # The records are made while the half record's view is held, and the view let go
        # before the first await: the mapped file must not be held past it.
        view = self.store.commitlog.record_at(header.commit_log_offset, _MAX_RECORD)  # inline
        if view is None:
            return _no_half(header)
        try:
            ending = self._ending(header, state, view)
        finally:
            view.release()
        if isinstance(ending, EndOutcome):
            return ending
        origin, current, half_queue_offset, records, parked, store_host = ending
        if parked is not None:
            return self._end_parked(origin, current, half_queue_offset, parked)
        result = self.store.put_encoded_now(records, store_host)
        if not isinstance(result, PutMessageResult):
            return self._end_put(result, origin, current, half_queue_offset, len(records))
        return self._ended(result, origin, current, half_queue_offset, len(records))

    async def _end_parked(
        self, origin: int, current: int, half_queue_offset: int, parked: MessageToStore
    ) -> EndOutcome:
        result = await self.store.put_message(parked)
        if not result.ok:
            return self._not_committed(origin, current, result.status, result.remark)
        self.committed += 1
        await self.write_op(half_queue_offset)
        return _ENDED

    async def _end_put(
        self,
        putting: Coroutine[Any, Any, PutMessageResult],
        origin: int,
        current: int,
        half_queue_offset: int,
        records: int,
    ) -> EndOutcome:
        return self._ended(await putting, origin, current, half_queue_offset, records)

    def _ended(
        self,
        result: PutMessageResult,
        origin: int,
        current: int,
        half_queue_offset: int,
        records: int,
    ) -> EndOutcome:
        """The outcome of the put of a commit and its op message (`records` 2), or of an op
        message alone (a rollback)."""
        if not result.ok:
            if records > 1:
                return self._not_committed(origin, current, result.status, result.remark)
            # A rollback: this process knows (the table); a restart would check it again.
            log.error(
                "op message for half message %d not stored: %s",
                half_queue_offset,
                result.status.value,
            )
        elif records > 1:
            self.committed += 1
        if records == 1:
            self.rolled_back += 1
        return _ENDED

    def _ending(
        self, header: EndTransactionRequestHeader, state: int, view: memoryview
    ) -> EndOutcome | tuple[int, int, int, list[EncodedRecord], MessageToStore | None, bytes]:
        """END's checks and records, from the half record's bytes in `view`: the refusal, or
        (origin, its queue offset in the table, the half's queue offset, the records to put,
        a commit the store must park instead, the store host)."""
        half = read_half(view)
        if half is None or half.topic != _HALF_TOPIC_RAW:
            return _no_half(header)
        if half.queue_offset != header.tran_state_table_offset:
            return EndOutcome(
                ResponseCode.SYSTEM_ERROR,
                f"the transaction state table offset wrong: {header.tran_state_table_offset}, "
                f"the half message's is {half.queue_offset}",
            )
        group = half.group
        if group != header.producer_group:
            return EndOutcome(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group wrong: {header.producer_group}, the half message's is {group}",
            )
        origin = origin_of(half)
        current = self.pending.pop(origin)
        if current is None:
            return EndOutcome(
                ResponseCode.TRANSACTION_FAILED,
                f"the transaction of half message {header.tran_state_table_offset} has already "
                f"ended: {_STATE_NAMES[state]} ignored",
            )
        # The origin is out of the table from here on: a concurrent END, or the check, finds it
        # ended. Put it back only if nothing could be stored.
        records: list[EncodedRecord] = []
        parked: MessageToStore | None = None  # a commit the store moves (delay, timer)
        if state == TRANSACTION_COMMIT_TYPE:
            try:
                commit = commit_record(half, self.store.config.max_message_size)
            except RecordTooLargeError as exc:
                return self._not_committed(origin, current, _refused_status(exc), str(exc))
            if commit is not None:
                records.append(commit)
            else:
                stored = self.store.look_message_by_offset(header.commit_log_offset, len(view))
                parked = None if stored is None else committed_message(stored)
                if parked is None:
                    log.warning(
                        "half message at %d has no REAL_TOPIC: rolled back", half.queue_offset
                    )
        half.view = _NO_VIEW
        store_host = self.store_host()
        if parked is None:
            records.append(op_record(half.queue_offset, store_host))
        return origin, current, half.queue_offset, records, parked, store_host

    def _not_committed(
        self, origin: int, current: int, status: PutStatus, remark: str
    ) -> EndOutcome:
        """Nothing was stored: the transaction is open again (for another END or the check)."""
        if self.pending.get(origin) is None:
            self.pending.put(origin, current)
        return EndOutcome(
            ResponseCode.SYSTEM_ERROR,
            f"commit not stored ({status.value}): {remark}".rstrip(": "),
        )

    async def write_op(self, half_queue_offset: int) -> None:
        """Record in the op queue that a transaction ended (so a restart knows)."""
        result = await self.store.put_message(op_message(half_queue_offset, self.store_host()))
        if not result.ok:
            # This process knows (the table); a restart would check the transaction again.
            log.error(
                "op message for half message %d not stored: %s",
                half_queue_offset,
                result.status.value,
            )
