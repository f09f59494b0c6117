"""POP receipt handles: which popped message a consumer acknowledges, sans-IO.

A message handed out by POP carries a receipt handle (RocketMQ 5's `ReceiptHandle`, the
`POP_CK` property over remoting, `receipt_handle` over gRPC, and ACK_MESSAGE's `extraInfo`):
nine fields joined by one space,

    startOffset popTime invisibleTime reviveQueueId topicType brokerName queueId offset
    commitLogOffset   (on the same line)

- startOffset: the queue offset the pop began at (its checkpoint's key);
- popTime, invisibleTime (ms): the message is invisible until popTime + invisibleTime;
- reviveQueueId: the queue of the broker's revive topic that holds the checkpoint;
- topicType: "0" the topic itself, "1" its `%RETRY%<group>` topic, "2" the 5.x retry topic
  `%RETRY%<group>+<topic>`;
- brokerName, queueId, offset: where the message is; commitLogOffset: its physical offset
  (RocketMQ 5 added it; eight fields are still read, as -1).

`decode` refuses anything else with `InvalidReceiptHandle` naming the field (the gRPC endpoint
answers INVALID_RECEIPT_HANDLE, remoting ACK_MESSAGE an error remark), so a forged or damaged
handle never reaches a checkpoint.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from tidemq.client.protocol.names import RETRY_GROUP_TOPIC_PREFIX
from tidemq.common.errors import DecodeError

SEPARATOR: Final = " "
MAX_LENGTH: Final = 1024  # a handle is ~100 characters; a broker name at most 255


class InvalidReceiptHandle(DecodeError, ValueError):
    """A receipt handle that is not one this protocol writes."""


class TopicType(enum.Enum):
    NORMAL = "0"
    RETRY = "1"  # %RETRY%<group>
    RETRY_V2 = "2"  # %RETRY%<group>+<topic>

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message was popped from, for a pop of `topic` by `group`."""
        if self is TopicType.RETRY:
            return f"{RETRY_GROUP_TOPIC_PREFIX}{group}"
        if self is TopicType.RETRY_V2:
            return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"
        return topic


@dataclasses.dataclass(frozen=True, slots=True)
class ReceiptHandle:
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_queue_id: int
    topic_type: TopicType
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int = -1

    @property
    def next_visible_time(self) -> int:
        return self.pop_time + self.invisible_time

    def expired(self, now_ms: int) -> bool:
        """True once the message is visible again (its pop may be revived by now)."""
        return self.next_visible_time <= now_ms

    def encode(self) -> str:
        return SEPARATOR.join(
            (
                str(self.start_offset),
                str(self.pop_time),
                str(self.invisible_time),
                str(self.revive_queue_id),
                self.topic_type.value,
                self.broker_name,
                str(self.queue_id),
                str(self.offset),
                str(self.commit_log_offset),
            )
        )

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        if len(text) > MAX_LENGTH:
            raise InvalidReceiptHandle(f"receipt handle longer than {MAX_LENGTH} characters")
        parts = text.split(SEPARATOR)
        if len(parts) not in (8, 9):
            raise InvalidReceiptHandle(f"receipt handle has {len(parts)} fields, not 8 or 9")
        try:
            topic_type = TopicType(parts[4])
        except ValueError:
            raise InvalidReceiptHandle(f"topic type {parts[4]!r} is not 0, 1 or 2") from None
        if not parts[5]:
            raise InvalidReceiptHandle("broker name is empty")
        names = ("startOffset", "popTime", "invisibleTime", "reviveQueueId")
        head = [_number(names[i], parts[i]) for i in range(4)]
        queue_id = _number("queueId", parts[6], bits=32)
        offset = _number("offset", parts[7])
        physical = _number("commitLogOffset", parts[8], low=-1) if len(parts) == 9 else -1
        if head[3] >= 1 << 31:
            raise InvalidReceiptHandle(f"reviveQueueId {head[3]} does not fit 32 bits")
        return cls(
            head[0], head[1], head[2], head[3], topic_type, parts[5], queue_id, offset, physical
        )


def _number(name: str, text: str, *, bits: int = 64, low: int = 0) -> int:
    if not text.lstrip("-").isdigit() or text.startswith("+"):
        raise InvalidReceiptHandle(f"{name} {text!r} is not a number")
    value = int(text)
    if not low <= value < 1 << (bits - 1):
        raise InvalidReceiptHandle(f"{name} {value} is out of range")
    return value
