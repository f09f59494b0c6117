"""Consumer offset commits carried in the CommitLog (controller mode): an acknowledged commit
survives a failover.

Why: RocketMQ 4.x copies a master's consumerOffset table to its slaves every 10 s
(SlaveSynchronize), so a slave elected master answers the offsets of its last copy and the
group's consumers go back up to 10 s of messages they were told were committed. In controller
mode the CommitLog is already what a new master agrees on (epochs, truncation of unconfirmed
tails, a slave dispatching only its master's confirmed offset), so a commit written into it is
exactly as durable as a message, with no second replication path, and is cut with the log's
unconfirmed tail if it was never acknowledged. RocketMQ does the same with other state that must
follow the log: transaction op messages (RMQ_SYS_TRANS_OP_HALF_TOPIC) and POP's revive records.

Format: a record of topic `OFFSET_LOG_TOPIC`, queue 0, whose body is a consumerOffset.json
document (the same `{"offsetTable": {"topic@group": {"queueId": offset}}}` as the file and as
GET_ALL_CONSUMER_OFFSET); it carries every commit that arrived while the record before it was
being written (one record per replication round trip, not per commit). Removals ride in the
same document, in two more fields present only when not empty: `"removedTopics": [topic, ...]`
(every group's offsets of a topic: a deleted topic) and `"removedGroups": [group, ...]` (every
offset of a group: a subscription group deleted with its offsets); a record's removals are
applied before its offsets, and a removal drops the commits of what it removes that were still
waiting for a record, so the table ends as the requests came.

What goes through it: UPDATE_CONSUMER_OFFSET and a pull's piggybacked commit; an admin's offset
reset (INVOKE_BROKER_TO_RESET_OFFSET: every queue's offset in one record, answered once applied);
cloneGroupOffset (the source group's offsets as the master has applied them, committed for the
destination); DELETE_TOPIC_IN_BROKER's and DELETE_SUBSCRIPTIONGROUP's (with cleanOffset) removals.

The table is changed only by applying records, in log order, as dispatch makes them readable:
on a master once they are confirmed (with allAckInSyncStateSet, once every member of the
SyncStateSet has them), on a slave at its master's confirmed offset. So a master never answers
a committed offset its slaves lack, and a slave elected master has every offset that was
acknowledged. UPDATE_CONSUMER_OFFSET is answered once its record is applied; a pull's piggybacked
commit (PULL_FLAG_COMMIT_OFFSET) is written the same way without holding up the pull. How far the
records were applied is itself a row of the table (`APPLIER_GROUP` on `OFFSET_LOG_TOPIC`,
queue 0), persisted with the offsets it produced, so a restart applies what comes after it (a
record applied twice sets the same offsets again).

What it does not cover: commits a slave receives (refused in controller mode: it cannot promise
them), POP's own offsets (made on the master's table, copied by SlaveSynchronize as before: a
POP reads the offset it just moved at once, which a commit applied later would break), the
start's correction of offsets past a queue's end (each member corrects its own), and
ASYNC_MASTER, whose master confirms its whole log at once (its commits are as durable as its
messages: lost with them on a failover).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tidemq.broker.managers.consumer_offset import (
    OFFSET_LOG_TOPIC,
    ConsumerOffsetManager,
    OffsetTable,
    parse_offset_table,
)
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore

__all__ = [
    "APPLIER_GROUP",
    "OFFSET_LOG_TOPIC",
    "OffsetLog",
    "Removals",
    "decode_commits",
    "decode_removals",
    "encode_commits",
]

log = logging.getLogger(__name__)

APPLIER_GROUP: Final = "rmq_sys_OFFSET_LOG_APPLIER"
OFFSET_LOG_QUEUE: Final = 0
# How long a commit waits for its record to be applied once stored: a record stored but never
# confirmed (the slaves went away after it) is answered as not committed.
APPLY_TIMEOUT: Final = 5.0
# Records applied per loop turn (a catch-up after a restart gives the loop back between steps).
APPLY_STEP: Final = 256


@dataclass
class Removals:
    """What a record removes: every group's offsets of `topics`, every offset of `groups`."""

    topics: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.topics or self.groups)

    def removes(self, key: str) -> bool:
        split = _split(key)
        return split is not None and (split[0] in self.topics or split[1] in self.groups)


def encode_commits(table: OffsetTable, removals: Removals | None = None) -> bytes:
    """A record's body: the commits as a consumerOffset.json document (compact), with the
    removals' fields when there are any."""
    body: dict[str, object] = {
        "offsetTable": {
            key: {str(q): o for q, o in queues.items()} for key, queues in table.items()
        }
    }
    if removals is not None and removals.topics:
        body["removedTopics"] = sorted(removals.topics)
    if removals is not None and removals.groups:
        body["removedGroups"] = sorted(removals.groups)
    return json.dumps(body, separators=(",", ":")).encode()


def decode_commits(body: bytes) -> OffsetTable:
    """The commits of a record's body; raises BodyDecodeError for a body that is not one."""
    return parse_offset_table(body)


def decode_removals(body: bytes) -> Removals:
    """The removals of a record's body (none in a body without their fields); raises
    BodyDecodeError for fields that are not lists of names."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise BodyDecodeError(f"consumer offsets: {exc}") from exc
    removals = Removals()
    for name, into in (("removedTopics", removals.topics), ("removedGroups", removals.groups)):
        names = document.get(name, []) if isinstance(document, dict) else []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BodyDecodeError(f"consumer offsets: {name} is not a list of names")
        into.update(names)
    return removals


def _split(key: str) -> tuple[str, str] | None:
    parts = key.split("@")
    return (parts[0], parts[1]) if len(parts) == 2 else None


class OffsetLog:
    """Writes commits into the CommitLog and applies the records dispatch made readable."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        store_host: Callable[[], bytes],
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.store_host = store_host
        self._pending: OffsetTable = {}
        self._pending_removals = Removals()
        self._pending_waiters: list[asyncio.Future[str | None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._apply_scheduled = False
        self.records_written = 0
        self.records_applied = 0

    # --- writing ----------------------------------------------------------------------------

    def on_slave(self, what: str) -> str | None:
        """Why `what` is refused here: a slave's table follows its master's log, so a change
        made on it would be lost to the master's (None on a master)."""
        if self.store.role is BrokerRole.SLAVE:
            return f"{what} refused: this broker is a slave in controller mode, ask the master"
        return None

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> str | None:
        """Commit through the log; None once applied, else why it was not committed."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._add(group, topic, queue_id, offset, future)
        return await future

    async def commit_table(self, table: OffsetTable) -> str | None:
        """Commit every offset of `table` (topic@group keys) in one record; None once
        applied, else why it was not committed."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        for key, queues in table.items():
            self._pending.setdefault(key, {}).update(queues)
        self._wait_for_record(future)
        return await future

    async def remove(self, *, topic: str | None = None, group: str | None = None) -> str | None:
        """Remove every group's offsets of `topic`, or every offset of `group`, through the
        log; None once applied, else why not."""
        if topic is not None:
            self._pending_removals.topics.add(topic)
        if group is not None:
            self._pending_removals.groups.add(group)
        for key in [k for k in self._pending if self._pending_removals.removes(k)]:
            del self._pending[key]
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._wait_for_record(future)
        return await future

    def commit_later(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit through the log without waiting (a pull's piggybacked commit)."""
        self._add(group, topic, queue_id, offset, None)

    def _add(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        future: asyncio.Future[str | None] | None,
    ) -> None:
        self._pending.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        self._wait_for_record(future)

    def _wait_for_record(self, future: asyncio.Future[str | None] | None) -> None:
        if future is not None:
            self._pending_waiters.append(future)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_pending())

    async def _write_pending(self) -> None:
        # One record at a time: commits arriving meanwhile go into the next, in log order.
        while self._pending or self._pending_removals or self._pending_waiters:
            table, removals, waiters = self._pending, self._pending_removals, self._pending_waiters
            self._pending, self._pending_removals, self._pending_waiters = {}, Removals(), []
            try:
                error = await self._write(table, removals)
            except Exception as exc:
                log.exception("offset commit record not written")
                error = f"offset commit not stored: {exc}"
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(error)

    async def _write(self, table: OffsetTable, removals: Removals) -> str | None:
        host = self.store_host()
        now = int(time.time() * 1000)
        result = await self.store.put_message(
            MessageToStore(
                topic=OFFSET_LOG_TOPIC,
                queue_id=OFFSET_LOG_QUEUE,
                body=encode_commits(table, removals),
                born_timestamp=now,
                born_host=host,
                store_host=host,
            )
        )
        if result.status is not PutStatus.PUT_OK or result.append is None:
            # Stored but unconfirmed counts as not committed: it may be cut by the next master.
            return f"offset commit not replicated ({result.status.value})" + (
                f": {result.remark}" if result.remark else ""
            )
        self.records_written += 1
        try:
            await asyncio.wait_for(
                self._until_applied(result.append.queue_offset + 1), APPLY_TIMEOUT
            )
        except TimeoutError:
            return f"offset commit stored but not confirmed within {APPLY_TIMEOUT:.0f} s"
        return None

    async def _until_applied(self, position: int) -> None:
        if self.applied_position() >= position:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((position, future))
        self.schedule_apply()
        await future

    # --- applying ---------------------------------------------------------------------------

    def applied_position(self) -> int:
        """The log queue offset up to which records were applied (-1 read as none yet)."""
        return max(0, self.offsets.query(APPLIER_GROUP, OFFSET_LOG_TOPIC, OFFSET_LOG_QUEUE))

    def on_arrival(self, topic: str, queue_id: int, *_rest: object) -> None:
        """The store's arrival listener: a record of the log became readable."""
        if topic == OFFSET_LOG_TOPIC:
            self.schedule_apply()

    def schedule_apply(self) -> None:
        if not self._apply_scheduled:
            self._apply_scheduled = True
            asyncio.get_running_loop().call_soon(self._apply_step)

    def _apply_step(self) -> None:
        self._apply_scheduled = False
        if self.apply_available(APPLY_STEP):
            self.schedule_apply()

    def apply_available(self, limit: int | None = None) -> bool:
        """Apply readable records past the applied position (at most `limit`); True when more
        are readable."""
        queue = self.store.find_consume_queue(OFFSET_LOG_TOPIC, OFFSET_LOG_QUEUE)
        position = self.applied_position()
        if queue is None:
            self._release(position)
            return False
        end = queue.max_offset
        if position > end:
            # The log was cut below records applied here (a slave's divergent tail set aside):
            # their offsets stay, the position follows the log.
            log.warning(
                "offset log cut below its applied position %d: applying on from %d", position, end
            )
            position = end
        position = max(position, queue.min_offset)  # retention removed older records
        stop = end if limit is None else min(end, position + limit)
        while position < stop:
            unit = queue.unit(position)
            if unit is None:
                break
            record = self.store.look_message_by_offset(unit.physical_offset, unit.size)
            if record is not None and record.topic == OFFSET_LOG_TOPIC:
                self._apply(record.body, unit.physical_offset)
            position += 1
        if position != self.offsets.query(APPLIER_GROUP, OFFSET_LOG_TOPIC, OFFSET_LOG_QUEUE):
            self.offsets.commit(
                "offset-log", APPLIER_GROUP, OFFSET_LOG_TOPIC, OFFSET_LOG_QUEUE, position
            )
        self._release(position)
        return position < end

    def _apply(self, body: bytes, physical_offset: int) -> None:
        try:
            table = decode_commits(body)
            removals = decode_removals(body)
        except BodyDecodeError as exc:
            log.error("offset log record at %d is not a commit, skipped: %s", physical_offset, exc)
            return
        for topic in sorted(removals.topics):
            self.offsets.remove_topic(topic)
        for group in sorted(removals.groups):
            self.offsets.remove_group(group)
        for key, queues in table.items():
            split = _split(key)
            if split is None:
                continue
            topic, group = split
            for queue_id, offset in queues.items():
                self.offsets.commit("offset-log", group, topic, queue_id, offset)
        self.records_applied += 1

    def _release(self, position: int) -> None:
        if not self._applied_waiters:
            return
        waiting, self._applied_waiters = self._applied_waiters, []
        for wanted, future in waiting:
            if wanted <= position:
                if not future.done():
                    future.set_result(None)
            else:
                self._applied_waiters.append((wanted, future))
