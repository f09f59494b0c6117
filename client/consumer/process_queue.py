"""A push consumer's process queue: the messages pulled from one queue and not consumed yet.

Messages are kept by queue offset, in the order they were pulled (offsets increase), so the
lowest offset not consumed yet (what is committed) is the first key. Two loops run once per
message of every pull: `put_messages` (a pull's messages in) and `forget_messages` (a consumed
batch out). Both have compiled twins (client/consumer/_received.pyx).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.common import speedups


def put_messages(
    messages: dict[int, ReceivedMessage], msgs: list[ReceivedMessage], highest: int
) -> tuple[list[ReceivedMessage], int, int]:
    """Add to `messages` those of `msgs` whose offset it lacks (a repeated offset keeps the
    message seen first). Returns them, the sum of their body lengths, and the highest offset
    of `highest` and every offset in `msgs`."""
    added = []
    size = 0
    for msg in msgs:
        offset = msg.queue_offset
        if offset not in messages:
            messages[offset] = msg
            size += len(msg.body)
            added.append(msg)
        if offset > highest:
            highest = offset
    return added, size, highest


def forget_messages(messages: dict[int, ReceivedMessage], msgs: list[ReceivedMessage]) -> int:
    """Remove `msgs`' offsets from `messages`; the sum of the body lengths of the messages of
    `msgs` whose offset was there."""
    pop = messages.pop
    size = 0
    for msg in msgs:
        if pop(msg.queue_offset, None) is not None:
            size += len(msg.body)
    return size


put_messages = speedups.select(put_messages, "tidemq.client.consumer._received")
forget_messages = speedups.select(forget_messages, "tidemq.client.consumer._received")


@dataclass(eq=False)
class ProcessQueue:
    """Messages pulled from one queue and not yet consumed, in offset order."""

    queue: MessageQueue
    messages: dict[int, ReceivedMessage] = field(default_factory=dict)
    size_bytes: int = 0
    max_offset_seen: int = -1
    dropped: bool = False
    locked: bool = False
    last_pull: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    # The pull loop waiting for consumption to make room (flow control), woken when it does.
    room: asyncio.Future[None] | None = None
    ordered_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def put(self, msgs: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """Add a pull's messages; returns those that were not here already."""
        added, size, self.max_offset_seen = put_messages(self.messages, msgs, self.max_offset_seen)
        self.size_bytes += size
        return added

    def forget(self, msg: ReceivedMessage) -> None:
        """Forget a consumed message."""
        if self.messages.pop(msg.queue_offset, None) is not None:
            self.size_bytes -= len(msg.body)

    def forget_all(self, msgs: list[ReceivedMessage]) -> None:
        """Forget consumed messages (`forget` of each)."""
        self.size_bytes -= forget_messages(self.messages, msgs)

    def commit_offset(self) -> int:
        """The lowest offset not consumed yet (-1: nothing pulled)."""
        if self.messages:
            # Offsets are inserted in increasing order, so the first key is the lowest.
            return next(iter(self.messages))
        return self.max_offset_seen + 1 if self.max_offset_seen >= 0 else -1

    @property
    def span(self) -> int:
        if not self.messages:
            return 0
        return self.max_offset_seen - next(iter(self.messages))
