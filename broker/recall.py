"""RecallMessage (RocketMQ 5.3's RecallMessageProcessor): a timer message cancelled before its time.

SendMessage answers a message parked in the timer wheel with a recall handle
(broker/recall_handle.py). `RecallService.recall(topic, handle)`:

1. refuses on a slave, with the timer wheel off, for a topic this broker does not have, for a
   handle that does not decode, names another topic or broker, or a time already past or beyond
   timerMaxDelaySec (RocketMQ's checks, each with its own `RecallRefusal`);
2. finds the timer message by its UNIQ_KEY in the index (tidemq's check: RocketMQ writes a
   tombstone for any id): a handle whose message never waited here is UNKNOWN. The lookup waits
   (at most INDEX_WAIT seconds) for the index to reach what the CommitLog held at the call; an
   index still behind then (a loaded broker) does not refuse: the recall goes on, as RocketMQ's;
3. stores the tombstone, as RocketMQ builds it: a timer message of the handle's topic and time,
   body "0", tag `_RECALL_TAG_`, TIMER_DEL_UNIQKEY = `<topic>+<UNIQ_KEY>`. It is a CommitLog
   record: flushed, replicated to the slave, and read into the wheel again after a restart;
4. waits (at most ENQUEUE_WAIT seconds) until the timer service has put the tombstone in the
   wheel, and answers TOO_LATE if the message's time was reached meanwhile (RocketMQ answers
   success and delivers it). Past this point the message is never delivered (broker/timer.py).

The answer is the recalled message's id. A second recall of one message succeeds again.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from typing import Final

from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.recall_handle import InvalidRecallHandle, RecallHandle
from tidemq.broker.timer import TimerMessageService
from tidemq.common.errors import TideMQError
from tidemq.store.commitlog import PutStatus
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageToStore,
    StoredMessage,
    encode_properties,
)
from tidemq.store.timer_message import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_TOPIC,
    recall_key,
)

RECALL_TAG: Final = "_RECALL_TAG_"
INDEX_WAIT: Final = 1.0
ENQUEUE_WAIT: Final = 3.0
_POLL: Final = 0.01
_LOOKUP_MAX: Final = 64  # index hits read for one id (its timer, rolled copies, tombstones)


class RecallRefusal(enum.Enum):
    """Which rule a `RecallRefused` names; each door answers its own code for it."""

    NOT_SERVED = "not served"  # a slave, or the timer wheel is off
    NO_TOPIC = "no topic"
    BAD_HANDLE = "bad handle"  # does not decode, or names another topic
    OTHER_BROKER = "other broker"
    TOO_LATE = "too late"  # the message's time has come: delivered
    TOO_FAR = "too far"  # a time beyond timerMaxDelaySec: no timer of this broker
    UNKNOWN = "unknown"  # no timer message of that id and topic waits here
    STORE = "store"  # the tombstone could not be stored


class RecallRefused(TideMQError):
    def __init__(self, reason: str, kind: RecallRefusal, status: PutStatus | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.status = status  # STORE: the store's


class RecallService:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        timer: Callable[[], TimerMessageService | None],
        broker_name: Callable[[], str],
        store_host: Callable[[], bytes],
    ) -> None:
        self.store = store
        self.topics = topics
        self._timer = timer
        self._broker_name = broker_name
        self._store_host = store_host

    def handle_of(self, topic: str, properties: dict[str, str]) -> str:
        """The recall handle of a message the store parked (its properties after the put), or
        "" for any other."""
        out = properties.get(PROPERTY_TIMER_OUT_MS, "")
        uniq = properties.get(PROPERTY_UNIQ_KEY, "")
        if not out.isdigit() or not uniq or PROPERTY_TIMER_DEL_UNIQKEY in properties:
            return ""
        return RecallHandle(topic, self._broker_name(), int(out), uniq).encode()

    async def recall(self, topic: str, handle_text: str, born_host: bytes) -> str:
        """Cancel the timer the handle names (module docstring); its message id."""
        timer = self._timer()
        if self.store.is_slave or timer is None:
            raise RecallRefused("a slave does not recall messages", RecallRefusal.NOT_SERVED)
        config = self.store.config
        if not config.timer_wheel_enable:
            raise RecallRefused("timerWheelEnable is false", RecallRefusal.NOT_SERVED)
        if self.topics.select(topic) is None:
            raise RecallRefused(f"topic {topic!r} does not exist", RecallRefusal.NO_TOPIC)
        try:
            handle = RecallHandle.decode(handle_text)
        except InvalidRecallHandle as exc:
            raise RecallRefused(str(exc), RecallRefusal.BAD_HANDLE) from None
        if handle.topic != topic:
            raise RecallRefused(
                f"the recall handle is of topic {handle.topic!r}, not {topic!r}",
                RecallRefusal.BAD_HANDLE,
            )
        broker = self._broker_name()
        if handle.broker_name != broker:
            raise RecallRefused(
                f"the recall handle is of broker {handle.broker_name!r}; this is {broker!r}",
                RecallRefusal.OTHER_BROKER,
            )
        left = handle.deliver_ms - int(time.time() * 1000)
        if left <= 0:
            raise RecallRefused(
                f"message {handle.message_id} was due {-left} ms ago: delivered, not recalled",
                RecallRefusal.TOO_LATE,
            )
        if left > config.timer_max_delay_sec * 1000:
            raise RecallRefused(
                f"the recall handle's time is {left} ms ahead, beyond timerMaxDelaySec "
                f"({config.timer_max_delay_sec} s)",
                RecallRefusal.TOO_FAR,
            )
        if config.message_index_enable and await self._timer_waits(handle) is False:
            raise RecallRefused(
                f"no timer message {handle.message_id} of topic {topic!r} waits on this "
                f"broker for {handle.deliver_ms}",
                RecallRefusal.UNKNOWN,
            )
        result = await self.store.put_message(self._tombstone(handle, born_host))
        append = result.append
        if not result.ok or append is None:
            if result.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL:
                raise RecallRefused(
                    f"message {handle.message_id} became due: delivered, not recalled",
                    RecallRefusal.TOO_LATE,
                )
            raise RecallRefused(
                result.remark or f"the recall was not stored: {result.status.value}",
                RecallRefusal.STORE,
                result.status,
            )
        await timer.wait_enqueued(append.queue_offset, ENQUEUE_WAIT)
        if timer.too_late_to_recall(handle.deliver_ms):
            raise RecallRefused(
                f"message {handle.message_id} became due before the recall: delivered",
                RecallRefusal.TOO_LATE,
            )
        return handle.message_id

    async def _timer_waits(self, handle: RecallHandle) -> bool | None:
        """Whether the index holds the timer message of `handle`; None: the index is still
        behind the CommitLog after INDEX_WAIT (see the module docstring)."""
        store = self.store
        target = store.max_phy_offset
        await store.index_keeper.wait_index(store.reput, INDEX_WAIT)
        for _attempt in range(int(INDEX_WAIT / _POLL)):
            found = store.query_message(
                TIMER_TOPIC, handle.message_id, _LOOKUP_MAX, 0, int(time.time() * 1000) + 60_000
            )
            if any(_is_timer_of(msg, handle) for msg in found.messages):
                return True
            if self._indexed_to() >= target:
                return False
            await asyncio.sleep(_POLL)  # the index is behind the CommitLog: it follows soon
        return None

    def _indexed_to(self) -> int:
        """Where the index has read the CommitLog to (dispatch's position when the index is
        built in this process, else the worker's confirmed one)."""
        store = self.store
        worker = store.index_keeper.worker
        dispatched = store.reput.reput_from_offset
        return dispatched if worker is None else min(dispatched, worker.indexed)

    def _tombstone(self, handle: RecallHandle, born_host: bytes) -> MessageToStore:
        now = int(time.time() * 1000)
        properties = {
            PROPERTY_TAGS: RECALL_TAG,
            PROPERTY_TIMER_DEL_UNIQKEY: recall_key(handle.topic, handle.message_id),
            PROPERTY_UNIQ_KEY: handle.message_id,
            PROPERTY_TIMER_DELIVER_MS: str(handle.deliver_ms),
        }
        return MessageToStore(
            handle.topic,
            0,
            b"0",
            encode_properties(properties),
            0,
            0,
            now,
            born_host,
            self._store_host(),
            0,
        )


def _is_timer_of(msg: StoredMessage, handle: RecallHandle) -> bool:
    props = msg.properties
    return (
        PROPERTY_TIMER_DEL_UNIQKEY not in props
        and props.get(PROPERTY_REAL_TOPIC) == handle.topic
        and props.get(PROPERTY_TIMER_OUT_MS) == str(handle.deliver_ms)
        and props.get(PROPERTY_UNIQ_KEY) == handle.message_id
    )
