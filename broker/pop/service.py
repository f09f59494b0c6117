"""POP consumption in the broker: pop, ack, change of invisible time, and the revive service.

The state lives in the revive topic (broker/pop/records.py, broker/pop/ledger.py): a pop
writes its checkpoint (CK) before the messages leave, an ack an ACK, the revive service a
CLOSE after putting back what a CK left. Where a group pops next in a queue is the group's
consumer offset of that queue, advanced by the pop itself (as RocketMQ's PopMessageProcessor
commits it), so it is persisted and replicated as every other offset; what a pop handed out and
was not acknowledged comes back through the revive service, not through that offset.

- pop: per (topic, group, queue), or every readable queue of the topic from a rotating start
  (queue -1); every queue of the group's retry topic `%RETRY%<group>` is popped too, first one
  pop in five (as RocketMQ), else when the topic has too few. Nothing found: the request
  waits in the long-polling service (woken by an arrival in any of the queues, the retry
  topic's included while the first put-back has yet to make it) up to its poll time.
  A group's first pop of a queue starts at its first message while the queue was never
  truncated (RocketMQ's initPopOffsetByCheckMsgInMem), else per the request's init mode.
- ack: an ACK naming the message's CK (the receipt handle) and its queue offset, to the CK's
  revive queue; it ends the offset in any open CK (a handle from before a change still acks).
- change of invisible time: a CK for the one offset with the new times, then an ACK of the
  old CK (this one ends only the old CK), answered with the new handle; an expired handle is
  refused (its message may be revived already).
- revive: one task reads every revive queue in order into a `ReviveLedger`; when the end of a
  queue is reached, everything stored up to `ARRIVAL_MARGIN_MS` ago has been read, so the
  ledger's watermark moves there (without traffic in the revive queue, CKs are still judged).
  A due CK's unacknowledged messages are stored in `%RETRY%<group>` with reconsume times + 1
  (RETRY_TOPIC = the topic they came from), or in `%DLQ%<group>` once they were delivered
  retryMaxTimes + 1 times; then its CLOSE is written and the revive offset (the revive
  queue's consumer offset of `CID_RMQ_SYS_REVIVE_GROUP`) moves to the oldest open CK.
  Only a master revives; a slave holds the records (replicated) and revives after promotion.
- FIFO groups (`consumeMessageOrderly`, broker/pop/fifo.py): no CK and no revive; a queue is
  walked from the consumer offset, one message per message group in flight, its redelivery
  handed out from the queue itself; the state is kept in `fifo_path` (`save_fifo`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tidemq.broker.long_polling import PullRequestHoldService
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.pop import records
from tidemq.broker.pop.fifo import FifoLocks, Verdict
from tidemq.broker.pop.ledger import Ack, Checkpoint, CheckpointKey, ReviveLedger
from tidemq.broker.pop.receipt import InvalidReceiptHandle, ReceiptHandle, TopicType
from tidemq.broker.processors.retry import DLQ_PREFIX, DLQ_QUEUE_NUMS, RETRY_PREFIX
from tidemq.client.protocol.models import PERM_READ, PERM_READ_WRITE, PERM_WRITE
from tidemq.common.errors import TideMQError
from tidemq.common.lifecycle import BackgroundTask
from tidemq.store.get_message import GetMessageStatus, RecordFilter
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageToStore,
    RecordFormatError,
    StoredMessage,
    decode_record,
    encode_properties,
)
from tidemq.store.tags import MATCH_ALL, TagFilter

log = logging.getLogger(__name__)

PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_POP_CK: Final = "POP_CK"  # the receipt handle, on a message popped over remoting
RETRY_FIRST_ONE_IN: Final = 5  # RocketMQ: the retry topic first in one pop out of five
ARRIVAL_MARGIN_MS: Final = 1000  # a record appended this long ago is readable by now
REVIVE_INTERVAL: Final = 0.2  # s between reads of the revive queues when idle
REVIVE_BATCH: Final = 64
CATCH_UP_SECONDS: Final = 10.0
WAKE_ALL: Final = 2**63 - 1  # past any offset a held pop waits beyond
FIFO_READ: Final = 32  # messages a FIFO walk reads at a time
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"  # the message group
INIT_MODE_MIN: Final = 1  # PopMessageRequestHeader.initMode: ConsumeInitMode.MIN


class Refusal(enum.Enum):
    """Which kind of rule a `PopRefused` names: each door answers its own code for it."""

    OTHER = "other"
    NO_TOPIC = "no topic"
    NO_GROUP = "no group"
    BAD_HANDLE = "bad handle"  # a receipt handle that does not decode or names no revive queue
    POLLING_FULL = "polling full"  # the long-polling service holds its maximum already


class PopRefused(TideMQError):
    """A pop, ack or change this broker does not serve; `reason` says which rule, `kind` its
    kind (the codes are chosen by kind, never by the reason's words)."""

    def __init__(self, reason: str, kind: Refusal = Refusal.OTHER) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclasses.dataclass(frozen=True, slots=True)
class Popped:
    message: StoredMessage
    record: bytes  # the stored record, as a pull answers it
    handle: ReceiptHandle
    attempt: int  # which delivery of the message this is (1: the first)


@dataclasses.dataclass(slots=True)
class PopResult:
    pop_time: int
    invisible_time: int
    revive_queue_id: int
    messages: list[Popped]
    rest: int  # messages left in the queues read (RocketMQ's restNum)


class PopService:
    def __init__(
        self,
        broker_name: Callable[[], str],
        cluster: Callable[[], str],
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        holds: PullRequestHoldService,
        store_host: Callable[[], bytes],
        revive_queue_num: int = 8,
        fifo_path: Path | None = None,
    ) -> None:
        """`fifo_path`: where FIFO groups' deliveries are kept across restarts
        (broker/pop/fifo.py; None: in memory only)."""
        self.broker_name = broker_name
        self._cluster = cluster
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.holds = holds
        self._store_host = store_host
        self.revive_queue_num = max(1, revive_queue_num)
        self._next_revive_queue = 0
        self._rotation = 0
        self.ledgers: dict[int, ReviveLedger] = {}
        self._positions: dict[int, int] = {}
        self.revived = 0  # messages put back (retry or DLQ) since start
        # Set once the revive service has read every revive queue to its end after a start:
        # pops wait for it, so they start past what the checkpoints say was handed out.
        self.caught_up = asyncio.Event()
        self.fifo_path = fifo_path
        self.fifo = self._load_fifo()  # FIFO groups' deliveries (broker/pop/fifo.py)

    def _load_fifo(self) -> FifoLocks:
        path = self.fifo_path
        if path is None or not path.exists():
            return FifoLocks()
        try:
            return FifoLocks.from_json(json.loads(path.read_bytes()))
        except (OSError, ValueError) as exc:
            # At least once: the group's consumer offsets bring every message back.
            log.error("%s is unreadable (%s): FIFO attempt counts start again", path, exc)
            return FifoLocks()

    def save_fifo(self) -> None:
        """Write the FIFO groups' deliveries if they changed (atomically: a crash keeps the
        previous file)."""
        path = self.fifo_path
        if path is None or not self.fifo.changed:
            return
        data = json.dumps(self.fifo.to_json(), separators=(",", ":")).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(path.name + ".tmp")
        scratch.write_bytes(data)
        os.replace(scratch, path)

    @property
    def revive_topic(self) -> str:
        return records.revive_topic(self._cluster())

    def ensure_revive_topic(self) -> None:
        topic = self.revive_topic
        if self.topics.select(topic) is None:
            self.topics.create_in_send_back(topic, self.revive_queue_num, PERM_READ_WRITE, 0)

    # --- pop ------------------------------------------------------------------------------

    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_nums: int,
        invisible_ms: int,
        poll_ms: int,
        tag_filter: TagFilter = MATCH_ALL,
        record_filter: RecordFilter | None = None,
        init_mode: int = 0,
    ) -> PopResult:
        """Up to `max_nums` messages, each invisible for `invisible_ms`; waits up to `poll_ms`
        for the first when there is none."""
        config = self.topics.select(topic)
        if config is None:
            raise PopRefused(f"topic[{topic}] not exist, apply first please!", Refusal.NO_TOPIC)
        if not config.perm & PERM_READ:
            raise PopRefused(f"the topic[{topic}] pop message is forbidden")
        if queue_id >= config.read_queue_nums or queue_id < -1:
            raise PopRefused(f"queueId[{queue_id}] is illegal, topic {topic}")
        group_config = self.groups.find(group)
        if group_config is None:
            raise PopRefused(f"subscription group [{group}] does not exist", Refusal.NO_GROUP)
        if not group_config.consume_enable:
            raise PopRefused(f"subscription group no permission, {group}")
        if self.store.is_slave:
            raise PopRefused("a slave does not serve POP (its checkpoints cannot be written)")
        if max_nums <= 0 or invisible_ms <= 0:
            raise PopRefused("maxMsgNums and invisibleTime must be positive")
        self.ensure_revive_topic()
        if not self.caught_up.is_set():
            try:
                await asyncio.wait_for(self.caught_up.wait(), CATCH_UP_SECONDS)
            except TimeoutError:
                raise PopRefused("the POP checkpoints are still being read: retry") from None
        deadline = time.monotonic() + max(0, poll_ms) / 1000
        while True:
            result, waits = await self._pop_once(
                group_config.consume_message_orderly,
                group_config.retry_max_times + 1,
                group,
                topic,
                config.read_queue_nums,
                queue_id,
                max_nums,
                invisible_ms,
                tag_filter,
                record_filter,
                init_mode,
            )
            left = deadline - time.monotonic()
            if result.messages or left <= 0 or not waits:
                return result
            if self.holds.full:  # as a pull's long poll: held requests are bounded
                raise PopRefused("polling full: too many requests held", Refusal.POLLING_FULL)
            await self.holds.hold_any(waits, tag_filter, left)
            if not self.holds.running:
                return result  # the broker stops: held requests answer now

    async def _pop_once(
        self,
        orderly: bool,
        max_attempts: int,
        group: str,
        topic: str,
        queue_nums: int,
        queue_id: int,
        max_nums: int,
        invisible_ms: int,
        tag_filter: TagFilter,
        record_filter: RecordFilter | None,
        init_mode: int,
    ) -> tuple[PopResult, list[tuple[str, int, int]]]:
        pop_time = int(time.time() * 1000)
        # One revive queue for every CK of a pop: a remoting answer names one (reviveQid).
        revive_qid = self._next_revive_queue
        self._next_revive_queue = (revive_qid + 1) % self.revive_queue_num
        result = PopResult(pop_time, invisible_ms, revive_qid, [], 0)
        waits: list[tuple[str, int, int]] = []
        retry_topic = RETRY_PREFIX + group
        sources: list[tuple[str, TopicType, list[int], TagFilter, RecordFilter | None]] = []
        if queue_id < 0:
            self._rotation += 1
            start = self._rotation % queue_nums
            queues = [(start + i) % queue_nums for i in range(queue_nums)]
        else:
            queues = [queue_id]
        sources.append((topic, TopicType.NORMAL, queues, tag_filter, record_filter))
        if orderly:
            for qid in queues:
                if len(result.messages) >= max_nums:
                    break
                await self._pop_fifo_queue(
                    result, group, topic, qid, max_nums - len(result.messages), tag_filter,
                    record_filter, init_mode, waits, max_attempts,
                )  # fmt: skip
            return result, waits
        retry_config = self.topics.select(retry_topic)
        if retry_config is not None and not topic.startswith(RETRY_PREFIX):
            # Every queue of the retry topic, whichever queue of the topic was asked (the 5.x
            # clients ask one queue at a time); revived messages passed the filter already.
            retry_queues = list(range(retry_config.read_queue_nums))
            sources.append((retry_topic, TopicType.RETRY, retry_queues, MATCH_ALL, None))
            if random.randrange(RETRY_FIRST_ONE_IN) == 0:
                sources.reverse()
        elif not topic.startswith(RETRY_PREFIX):
            # The first put-back makes the retry topic: a pop held now must wake on it (as
            # RocketMQ wakes a group's pops on an arrival in its retry topic), or a 5.x push
            # consumer's first redelivery waits out its whole long poll, not its backoff.
            waits.extend((retry_topic, qid, 0) for qid in range(self._retry_queue_nums(group)))
        for source_topic, kind, source_queues, tags, record in sources:
            for qid in source_queues:
                if len(result.messages) >= max_nums:
                    break
                await self._pop_queue(
                    result,
                    group,
                    source_topic,
                    kind,
                    qid,
                    max_nums - len(result.messages),
                    tags,
                    record,
                    init_mode,
                    waits,
                )
        return result, waits

    def _start_offset(
        self, group: str, topic: str, queue_id: int, init_mode: int
    ) -> tuple[int, bool]:
        """Where the group's pop of the queue starts, and whether that offset is committed
        (if not, it comes from `init_mode` and the pop commits it)."""
        offset = self.offsets.query(group, topic, queue_id)
        if offset >= 0:
            return offset, True
        low = self.store.min_offset_in_queue(topic, queue_id)
        if low == 0 or init_mode == INIT_MODE_MIN or topic.startswith(RETRY_PREFIX):
            return low, False
        return self.store.max_offset_in_queue(topic, queue_id), False

    async def _pop_queue(
        self,
        result: PopResult,
        group: str,
        topic: str,
        kind: TopicType,
        queue_id: int,
        count: int,
        tag_filter: TagFilter,
        record_filter: RecordFilter | None,
        init_mode: int,
        waits: list[tuple[str, int, int]],
    ) -> None:
        offset, committed = self._start_offset(group, topic, queue_id, init_mode)
        found = self.store.get_message(
            group, topic, queue_id, offset, count, tag_filter, record_filter
        )
        max_offset = self.store.max_offset_in_queue(topic, queue_id)
        next_offset = found.next_begin_offset
        if found.status is GetMessageStatus.OFFSET_FOUND_NULL and next_offset <= offset:
            next_offset = offset
        result.rest += max(0, max_offset - next_offset)
        if next_offset != offset or not committed:
            # Advanced before the CK's write yields the loop: no other pop reads these.
            self.offsets.commit("", group, topic, queue_id, next_offset)
        if not found.message_count:
            waits.append((topic, queue_id, next_offset))
            return
        stored = [decode_record(view, check_crc=False) for view in found.messages]
        revive_qid = result.revive_queue_id
        checkpoint = Checkpoint(
            topic,
            group,
            queue_id,
            offset,
            result.pop_time,
            result.invisible_time,
            tuple(m.queue_offset for m in stored),
        )
        try:
            await self._write(revive_qid, *records.encode_checkpoint(checkpoint))
        except PopRefused:
            if self.offsets.query(group, topic, queue_id) == next_offset:
                self.offsets.commit("", group, topic, queue_id, offset)  # nothing left
            raise
        broker = self.broker_name()
        for view, message in zip(found.messages, stored, strict=True):
            handle = ReceiptHandle(
                offset,
                result.pop_time,
                result.invisible_time,
                revive_qid,
                kind,
                broker,
                queue_id,
                message.queue_offset,
                message.physical_offset,
            )
            result.messages.append(
                Popped(message, bytes(view), handle, message.reconsume_times + 1)
            )

    async def _pop_fifo_queue(
        self,
        result: PopResult,
        group: str,
        topic: str,
        queue_id: int,
        count: int,
        tag_filter: TagFilter,
        record_filter: RecordFilter | None,
        init_mode: int,
        waits: list[tuple[str, int, int]],
        max_attempts: int,
    ) -> None:
        """A FIFO group's pop of one queue (broker/pop/fifo.py): nothing while its batch is in
        flight; the same batch again, one attempt more, once that batch is visible again."""
        key = (topic, group, queue_id)
        start, _ = self._start_offset(group, topic, queue_id, init_mode)
        scan = self.fifo.scan(
            key, start, result.pop_time, result.invisible_time, count, max_attempts
        )
        broker = self.broker_name()
        offset = start
        while not scan.finished():
            found = self.store.get_message(
                group, topic, queue_id, offset, FIFO_READ, tag_filter, record_filter
            )
            if not found.message_count:
                scan.passed(found.next_begin_offset)  # filtered out, or the end
                break
            for view, message in zip(found.messages, self._decoded(found.messages), strict=True):
                message_group = message.properties.get(PROPERTY_SHARDING_KEY, "")
                verdict = scan.offer(message.queue_offset, message_group)
                if verdict is Verdict.DEAD:
                    await self._put_back(message, group, dead=True)
                elif verdict is Verdict.DELIVER:
                    handle = ReceiptHandle(
                        message.queue_offset,
                        result.pop_time,
                        result.invisible_time,
                        result.revive_queue_id,
                        TopicType.NORMAL,
                        broker,
                        queue_id,
                        message.queue_offset,
                        message.physical_offset,
                    )
                    result.messages.append(Popped(message, bytes(view), handle, scan.attempt))
                if scan.finished():
                    break
            else:
                scan.passed(found.next_begin_offset)
            offset = found.next_begin_offset
        if scan.commit != start:
            self.offsets.commit("", group, topic, queue_id, scan.commit)
        if not scan.handed_out:
            waits.append((topic, queue_id, self.store.max_offset_in_queue(topic, queue_id)))

    @staticmethod
    def _decoded(views: list[memoryview]) -> list[StoredMessage]:
        return [decode_record(view, check_crc=False) for view in views]

    def _orderly(self, group: str, handle: ReceiptHandle) -> bool:
        config = self.groups.get(group)
        return (
            config is not None
            and config.consume_message_orderly
            and handle.topic_type is TopicType.NORMAL
        )

    # --- ack and change ------------------------------------------------------------------

    def _handle(self, text: str) -> ReceiptHandle:
        try:
            handle = ReceiptHandle.decode(text)
        except InvalidReceiptHandle as exc:
            raise PopRefused(f"invalid receipt handle: {exc}", Refusal.BAD_HANDLE) from None
        if handle.revive_queue_id >= self.revive_queue_num:
            raise PopRefused(
                f"invalid receipt handle: revive queue {handle.revive_queue_id}",
                Refusal.BAD_HANDLE,
            )
        if handle.broker_name != self.broker_name():
            raise PopRefused(f"receipt handle of broker {handle.broker_name}, not this one")
        return handle

    async def ack(self, group: str, topic: str, handle_text: str) -> ReceiptHandle:
        """Acknowledge the message `handle_text` names (popped from `topic` by `group`)."""
        handle = self._handle(handle_text)
        if self._orderly(group, handle):
            key = (topic, group, handle.queue_id)
            committed = self.offsets.query(group, topic, handle.queue_id)
            next_offset = self.fifo.ack(key, handle.offset, committed)
            if next_offset is not None:
                self.offsets.commit("", group, topic, handle.queue_id, next_offset)
            # The message group's next may go now: a pop held on this queue looks again.
            self.holds.wake_queue(topic, handle.queue_id, WAKE_ALL)
            return handle
        real = handle.topic_type.real_topic(topic, group)
        ack = Ack(
            real, group, handle.queue_id, handle.start_offset, handle.pop_time, handle.offset, True
        )
        await self._write(handle.revive_queue_id, *records.encode_ack(ack))
        return handle

    async def ack_all(
        self, group: str, topic: str, handle_texts: list[str]
    ) -> list[ReceiptHandle | PopRefused]:
        """Acknowledge several messages (one AckMessage): the acks of one checkpoint go in one
        `back` record, not one record each. Per handle: it, or why it is refused."""
        answers: list[ReceiptHandle | PopRefused] = []
        batches: dict[tuple[int, CheckpointKey], list[tuple[int, Ack]]] = {}
        for text in handle_texts:
            try:
                handle = self._handle(text)
                if self._orderly(group, handle):
                    answers.append(await self.ack(group, topic, text))
                    continue
            except PopRefused as refused:
                answers.append(refused)
                continue
            real = handle.topic_type.real_topic(topic, group)
            ack = Ack(
                real,
                group,
                handle.queue_id,
                handle.start_offset,
                handle.pop_time,
                handle.offset,
                True,
            )
            batches.setdefault((handle.revive_queue_id, ack.key), []).append((len(answers), ack))
            answers.append(handle)
        for (revive_qid, _key), acks in batches.items():
            for start in range(0, len(acks), records.MAX_OFFSETS):
                chunk = acks[start : start + records.MAX_OFFSETS]
                try:
                    if len(chunk) == 1:
                        await self._write(revive_qid, *records.encode_ack(chunk[0][1]))
                    else:
                        await self._write(
                            revive_qid, *records.encode_batch_ack([a for _i, a in chunk])
                        )
                except PopRefused as refused:
                    for index, _ack in chunk:
                        answers[index] = refused
        return answers

    async def change_invisible(
        self, group: str, topic: str, handle_text: str, invisible_ms: int
    ) -> ReceiptHandle:
        """The message stays invisible `invisible_ms` from now; the new handle names it."""
        handle = self._handle(handle_text)
        if invisible_ms < 0:  # 0: visible again now (revived with its next attempt)
            raise PopRefused("invisibleTime must not be negative")
        now = int(time.time() * 1000)
        if handle.expired(now):
            raise PopRefused("receipt handle is expired: the message is visible again")
        if self._orderly(group, handle):
            key = (topic, group, handle.queue_id)
            if not self.fifo.extend(key, handle.offset, now + invisible_ms):
                raise PopRefused("receipt handle is expired: the message is not in flight")
            return dataclasses.replace(handle, pop_time=now, invisible_time=invisible_ms)
        real = handle.topic_type.real_topic(topic, group)
        # A CK is known by (topic, group, queue, start offset, pop time): a change within the
        # pop's millisecond of its first offset would otherwise name the old CK.
        now = max(now, handle.pop_time + 1)
        checkpoint = Checkpoint(
            real, group, handle.queue_id, handle.offset, now, invisible_ms, (handle.offset,)
        )
        await self._write(handle.revive_queue_id, *records.encode_checkpoint(checkpoint))
        old = Ack(real, group, handle.queue_id, handle.start_offset, handle.pop_time, handle.offset)
        await self._write(handle.revive_queue_id, *records.encode_ack(old))
        return dataclasses.replace(
            handle, start_offset=handle.offset, pop_time=now, invisible_time=invisible_ms
        )

    async def forward_to_dead_letter(self, group: str, topic: str, handle_text: str) -> None:
        """Store the message in `%DLQ%<group>` now, then acknowledge it.

        The group is looked up as a pop looks it up (made when subscription groups are
        auto-created): a handle does not name its group, so without this any name would make
        a `%DLQ%` topic."""
        if self.groups.find(group) is None:
            raise PopRefused(f"subscription group [{group}] does not exist", Refusal.NO_GROUP)
        handle = self._handle(handle_text)
        real = handle.topic_type.real_topic(topic, group)
        message = self._message_at(real, handle.queue_id, handle.offset)
        if message is None:
            raise PopRefused(f"no message at {real} queue {handle.queue_id} {handle.offset}")
        await self._put_back(message, group, dead=True)
        await self.ack(group, topic, handle_text)

    async def _write(self, revive_qid: int, tag: str, body: bytes) -> None:
        host = self._store_host()
        message = MessageToStore(
            self.revive_topic,
            revive_qid,
            body,
            encode_properties({PROPERTY_TAGS: tag}),
            born_timestamp=int(time.time() * 1000),
            born_host=host,
            store_host=host,
        )
        result = await self.store.put_message(message)
        if not result.ok:
            raise PopRefused(f"cannot write the POP {tag} record: {result.remark or result.status}")

    # --- revive ---------------------------------------------------------------------------

    def revive_task(self) -> BackgroundTask:
        return BackgroundTask(self._revive_loop, "pop-revive")

    async def _revive_loop(self) -> None:
        # The revive topic is made by the first pop (a broker nobody pops from keeps its topic
        # table as it was); until then there is nothing to read.
        self.caught_up.clear()
        try:
            await self._revive_rounds()
        finally:
            self.caught_up.clear()

    async def _revive_rounds(self) -> None:
        while True:
            try:
                busy = await self.revive_round(int(time.time() * 1000))
            except PopRefused as exc:  # the store refuses writes (a fenced master, a full disk)
                log.warning("POP revive: %s", exc.reason)
                busy = False
            if not busy:
                self.caught_up.set()
                await asyncio.sleep(REVIVE_INTERVAL)

    async def revive_round(self, now_ms: int) -> bool:
        """Read what is new in every revive queue, revive what is due; True when a queue had
        more to read than one batch."""
        if self.topics.select(self.revive_topic) is None:
            return False
        busy = False
        for qid in range(self.revive_queue_num):
            busy |= await self._revive_queue(qid, now_ms)
        return busy

    def _ledger(self, qid: int) -> ReviveLedger:
        ledger = self.ledgers.get(qid)
        if ledger is None:
            start = max(0, self.offsets.query(records.REVIVE_GROUP, self.revive_topic, qid))
            start = max(start, self.store.min_offset_in_queue(self.revive_topic, qid))
            ledger = self.ledgers[qid] = ReviveLedger(start)
            self._positions[qid] = start
        return ledger

    async def _revive_queue(self, qid: int, now_ms: int) -> bool:
        ledger = self._ledger(qid)
        topic = self.revive_topic
        position = self._positions[qid]
        found = self.store.get_message(records.REVIVE_GROUP, topic, qid, position, REVIVE_BATCH)
        for view in found.messages:
            self._apply(ledger, view)
        if found.next_begin_offset > position:
            self._positions[qid] = found.next_begin_offset
        more = found.message_count >= REVIVE_BATCH
        if not more:
            ledger.watermark = max(ledger.watermark, now_ms - ARRIVAL_MARGIN_MS)
        for revival in ledger.due(now_ms):
            checkpoint = revival.checkpoint
            for offset in revival.offsets:
                message = self._message_at(checkpoint.topic, checkpoint.queue_id, offset)
                if message is not None:
                    await self._revive(message, checkpoint.group)
            await self._write(qid, *records.encode_close(checkpoint.key))
        committed = self.offsets.query(records.REVIVE_GROUP, topic, qid)
        if ledger.revive_offset != committed:
            self.offsets.commit("", records.REVIVE_GROUP, topic, qid, ledger.revive_offset)
        return more

    def _apply(self, ledger: ReviveLedger, view: memoryview) -> None:
        try:
            stored = decode_record(view, check_crc=False)
            record = records.decode(stored.properties.get(PROPERTY_TAGS, ""), stored.body)
        except (RecordFormatError, records.PopRecordError) as exc:
            log.warning("POP revive: a damaged record is passed over: %s", exc)
            return
        position, stamp = stored.queue_offset, stored.store_timestamp
        if isinstance(record, Checkpoint):
            ledger.checkpoint(record, position, stamp)
            # After a crash the pop offsets on disk may be older than this CK (they are
            # persisted every flushConsumerOffsetInterval): what it handed out is not popped
            # again; unacknowledged, it comes back through revival instead.
            past = max(record.offsets) + 1
            key = (record.group, record.topic, record.queue_id)
            if self.offsets.query(*key) < past:
                self.offsets.commit("", *key, past)
        elif isinstance(record, Ack):
            ledger.ack(record, position, stamp)
        elif isinstance(record, list):
            for ack in record:
                ledger.ack(ack, position, stamp)
        else:
            ledger.close(record, position, stamp)

    def _message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        found = self.store.get_message("", topic, queue_id, offset, 1)
        for view in found.messages:
            message = decode_record(view, check_crc=False)
            if message.queue_offset == offset:
                return message
        log.warning("POP revive: %s queue %d offset %d is gone", topic, queue_id, offset)
        return None

    async def _revive(self, message: StoredMessage, group: str) -> None:
        config = self.groups.find(group)
        max_times = config.retry_max_times if config is not None else 16
        await self._put_back(message, group, dead=message.reconsume_times >= max_times)

    async def _put_back(self, message: StoredMessage, group: str, *, dead: bool) -> None:
        props = dict(message.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, message.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, props.get(PROPERTY_UNIQ_KEY, ""))
        props.pop(PROPERTY_DELAY, None)
        props.pop(PROPERTY_POP_CK, None)
        if dead:
            topic, queue_nums = DLQ_PREFIX + group, DLQ_QUEUE_NUMS
            log.warning(
                "POP: message %s of group %s moved to %s after %d deliveries",
                props.get(PROPERTY_UNIQ_KEY, message.msg_id),
                group,
                topic,
                message.reconsume_times + 1,
            )
        else:
            topic, queue_nums = RETRY_PREFIX + group, self._retry_queue_nums(group)
        config = self.topics.create_in_send_back(
            topic, max(1, queue_nums), PERM_READ | PERM_WRITE, 0
        )
        copy = message.moved(
            topic,
            random.randrange(max(1, config.write_queue_nums)),
            props,
            self._store_host(),
            reconsume_times=min(message.reconsume_times + 1, 2**31 - 1),
        )
        result = await self.store.put_message(copy)
        if not result.ok:
            raise PopRefused(f"cannot put back a message: {result.remark or result.status}")
        self.revived += 1

    def _retry_queue_nums(self, group: str) -> int:
        """The queues of a retry topic that a put-back makes."""
        config = self.groups.find(group)
        return max(1, config.retry_queue_nums if config is not None else 1)

    def in_flight(self, topic: str, group: str) -> int:
        """Messages of `topic` (and of the group's retry topic) handed out to `group` and
        neither acknowledged nor revived, as far as the revive service has read."""
        retry = RETRY_PREFIX + group
        return self.fifo.in_flight(topic, group) + sum(
            ledger.in_flight(topic, group) + ledger.in_flight(retry, group)
            for ledger in self.ledgers.values()
        )
