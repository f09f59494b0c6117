"""Message trace: RocketMQ 4.x's trace records, and their sending off the hot path.

Record formats (TraceDataEncoder), fields separated by \\x01, records ended by \\x02:

    Pub            timestamp regionId group topic msgId tags keys storeHost bodyLength costTime
                   msgType offsetMsgId success
    SubBefore      timestamp regionId group requestId msgId retryTimes keys [slotWaitMs]
    SubAfter       requestId msgId costTime success keys contextCode timestamp group
    EndTransaction timestamp regionId group topic msgId tags keys storeHost msgType transactionId
                   transactionState fromTransactionCheck

SubBefore's timestamp is when the listener starts and SubAfter's costTime runs from then (the
listener's time over the batch, per message, as RocketMQ's consumeRT); slotWaitMs, tidemq's
addition after RocketMQ's fields (which RocketMQ's readers ignore), is how long the batch
waited for one of the consumer's max_concurrency slots before that.

msgType is the ordinal of Normal_Msg, Trans_Msg_Half, Trans_msg_Commit, Delay_Msg, Order_Msg;
contextCode of SUCCESS, TIME_OUT, EXCEPTION, RETURNNULL, FAILED; transactionState is
COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW; booleans are `true`/`false`.

Records travel as the bodies of messages to the trace topic (RMQ_SYS_TRACE_TOPIC unless the
user names one), several records to a message, with KEYS the message ids and keys the records
are about, so that the broker's index finds a message's records by its id (QUERY_MESSAGE).
`TraceDispatcher` queues records and sends them from its own task, in batches, with its own
producer (group `_INNER_TRACE_PRODUCER-<topic>`): a send or consume never waits for its trace,
and a trace that cannot be sent is dropped (logged), never retried into the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tidemq.client.errors import DecodeError, TideMQError
from tidemq.client.message import Message

log = logging.getLogger(__name__)

TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
PRODUCER_GROUP_PREFIX: Final = "_INNER_TRACE_PRODUCER-"
REGION: Final = "DefaultRegion"
CONTENT: Final = "\x01"
FIELD: Final = "\x02"
MAX_MESSAGE_BYTES: Final = 128 * 1024
BATCH_RECORDS: Final = 100
FLUSH_INTERVAL: Final = 0.05
QUEUE_LIMIT: Final = 20_000


class TraceType(enum.Enum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class MessageType(enum.IntEnum):
    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class ContextCode(enum.IntEnum):
    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclass(slots=True)
class TraceRecord:
    """One trace record; the fields a type does not have stay at their defaults."""

    type: TraceType
    msg_id: str
    timestamp: int = 0
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: int = MessageType.NORMAL
    offset_msg_id: str = ""
    success: bool = True
    request_id: str = ""
    retry_times: int = 0
    context_code: int = ContextCode.SUCCESS
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False
    region: str = REGION
    slot_wait_ms: int = 0

    def encode(self) -> str:
        fields: list[object]
        if self.type is TraceType.PUB:
            fields = [
                self.timestamp, self.region, self.group, self.topic, self.msg_id, self.tags,
                self.keys, self.store_host, self.body_length, self.cost_ms, self.msg_type,
                self.offset_msg_id, _bool(self.success),
            ]  # fmt: skip
        elif self.type is TraceType.SUB_BEFORE:
            fields = [
                self.timestamp, self.region, self.group, self.request_id, self.msg_id,
                self.retry_times, self.keys, self.slot_wait_ms,
            ]  # fmt: skip
        elif self.type is TraceType.SUB_AFTER:
            fields = [
                self.request_id, self.msg_id, self.cost_ms, _bool(self.success), self.keys,
                self.context_code, self.timestamp, self.group,
            ]  # fmt: skip
        else:
            fields = [
                self.timestamp, self.region, self.group, self.topic, self.msg_id, self.tags,
                self.keys, self.store_host, self.msg_type, self.transaction_id,
                self.transaction_state, _bool(self.from_transaction_check),
            ]  # fmt: skip
        return CONTENT.join([self.type.value, *map(str, fields)]) + FIELD

    @property
    def index_keys(self) -> list[str]:
        """What the trace message is indexed by for this record: its msgId and keys."""
        return [self.msg_id, *(k for k in self.keys.split(" ") if k)]

    @property
    def status(self) -> str:
        """As RocketMQ's trace views print it: an end's state, else success or failed."""
        if self.type is TraceType.END_TRANSACTION:
            return self.transaction_state
        if self.type is TraceType.SUB_BEFORE:
            return "-"
        return "success" if self.success else "failed"

    @property
    def detail(self) -> str:
        """The fields of its type that the common columns do not show, as key=value."""
        if self.type is TraceType.PUB:
            return (
                f"topic={self.topic} tags={self.tags} keys={self.keys} "
                f"storeHost={self.store_host} offsetMsgId={self.offset_msg_id} "
                f"bodyLength={self.body_length}"
            )
        if self.type is TraceType.SUB_BEFORE:
            return (
                f"requestId={self.request_id} retryTimes={self.retry_times} "
                f"slotWait={self.slot_wait_ms}ms"
            )
        if self.type is TraceType.SUB_AFTER:
            return f"requestId={self.request_id} contextCode={self.context_code}"
        return (
            f"topic={self.topic} transactionId={self.transaction_id} "
            f"fromTransactionCheck={str(self.from_transaction_check).lower()}"
        )

    def to_data(self) -> dict[str, Any]:
        """The record as JSON data (camelCase keys, as mqadmin --json prints)."""
        return {
            "type": self.type.value,
            "timestamp": self.timestamp,
            "group": self.group,
            "msgId": self.msg_id,
            "topic": self.topic,
            "tags": self.tags,
            "keys": self.keys,
            "storeHost": self.store_host,
            "costTime": self.cost_ms,
            "success": self.success,
            "offsetMsgId": self.offset_msg_id,
            "requestId": self.request_id,
            "retryTimes": self.retry_times,
            "slotWaitTime": self.slot_wait_ms,
            "contextCode": self.context_code,
            "transactionState": self.transaction_state,
            "fromTransactionCheck": self.from_transaction_check,
            "status": self.status,
            "detail": self.detail,
        }


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DecodeError(f"trace record: {what} is not a number: {text!r}") from None


def decode_records(data: str) -> list[TraceRecord]:
    """The records of one trace message's body; `DecodeError` names a record that does not
    parse (a type this reader does not know, Recall for one, is skipped)."""
    out: list[TraceRecord] = []
    for text in data.split(FIELD):
        if not text.strip():
            continue
        f = text.split(CONTENT)
        kind = f[0]
        try:
            if kind == TraceType.PUB.value:
                out.append(
                    TraceRecord(
                        TraceType.PUB, f[5], _int(f[1], "timestamp"), f[3], f[4], f[6], f[7],
                        f[8], _int(f[9], "bodyLength"), _int(f[10], "costTime"),
                        _int(f[11], "msgType"), f[12] if len(f) >= 14 else "",
                        f[-1 if len(f) < 15 else 13] == "true", region=f[2],
                    )
                )  # fmt: skip
            elif kind == TraceType.SUB_BEFORE.value:
                out.append(
                    TraceRecord(
                        TraceType.SUB_BEFORE, f[5], _int(f[1], "timestamp"), f[3], keys=f[7],
                        request_id=f[4], retry_times=_int(f[6], "retryTimes"), region=f[2],
                        slot_wait_ms=_int(f[8], "slotWaitMs") if len(f) >= 9 else 0,
                    )
                )  # fmt: skip
            elif kind == TraceType.SUB_AFTER.value:
                out.append(
                    TraceRecord(
                        TraceType.SUB_AFTER, f[2],
                        _int(f[7], "timestamp") if len(f) >= 9 else 0,
                        f[8] if len(f) >= 9 else "", keys=f[5], cost_ms=_int(f[3], "costTime"),
                        success=f[4] == "true", request_id=f[1],
                        context_code=_int(f[6], "contextCode") if len(f) >= 7 else 0,
                    )
                )  # fmt: skip
            elif kind == TraceType.END_TRANSACTION.value:
                out.append(
                    TraceRecord(
                        TraceType.END_TRANSACTION, f[5], _int(f[1], "timestamp"), f[3], f[4],
                        f[6], f[7], f[8], msg_type=_int(f[9], "msgType"), transaction_id=f[10],
                        transaction_state=f[11], from_transaction_check=f[12] == "true",
                        region=f[2],
                    )
                )  # fmt: skip
        except IndexError:
            raise DecodeError(f"trace record {kind!r} has too few fields: {text!r}") from None
    return out


def now_ms() -> int:
    return int(time.time() * 1000)


class TraceSender(Protocol):
    """What the dispatcher sends with: a producer of its own (an `AsyncProducer` of group
    PRODUCER_GROUP_PREFIX + topic, made by the producer or consumer that traces)."""

    async def start(self) -> None: ...

    async def send(self, msg: Message, *, timeout: float | None = None) -> Any: ...

    async def stop(self) -> None: ...


@dataclass
class TraceDispatcher:
    """Queues records and sends them, batched, from its own task (module docstring)."""

    topic: str = TRACE_TOPIC
    _queue: asyncio.Queue[TraceRecord] = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))
    _task: asyncio.Task[None] | None = None
    _producer: TraceSender | None = None
    dropped: int = 0
    sent: int = 0

    @property
    def producer_group(self) -> str:
        return PRODUCER_GROUP_PREFIX + self.topic

    async def start(self, producer: TraceSender) -> None:
        """Start `producer` and the sending task."""
        if self._task is not None:
            return
        self._producer = producer
        await producer.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="trace")

    def add(self, records: Iterable[TraceRecord]) -> None:
        """Queue records (never waits: when the queue is full they are dropped)."""
        for record in records:
            try:
                self._queue.put_nowait(record)
            except asyncio.QueueFull:
                self.dropped += 1

    async def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to `timeout`), then stop."""
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_INTERVAL):
                    while len(batch) < BATCH_RECORDS:
                        batch.append(await self._queue.get())
            try:
                await self._send(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _send(self, records: list[TraceRecord]) -> None:
        assert self._producer is not None
        body: list[str] = []
        keys: dict[str, None] = {}
        size = 0
        chunks: list[tuple[str, list[str]]] = []
        for record in records:
            text = record.encode()
            if body and size + len(text) > MAX_MESSAGE_BYTES:
                chunks.append(("".join(body), list(keys)))
                body, keys, size = [], {}, 0
            body.append(text)
            size += len(text)
            keys.update(dict.fromkeys(record.index_keys))
        if body:
            chunks.append(("".join(body), list(keys)))
        for text, index_keys in chunks:
            try:
                await self._producer.send(
                    Message(self.topic, text.encode(), keys=index_keys), timeout=5.0
                )
                self.sent += 1
            except TideMQError as exc:
                self.dropped += len(index_keys)
                log.info("trace message to %s dropped: %s", self.topic, exc)
