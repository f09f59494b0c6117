"""Send latency fault tolerance: brokers that were slow or failing are avoided for a while.

RocketMQ 4.x `client/latency/` (LatencyFaultToleranceImpl, MQFaultStrategy). Off by default
(`sendLatencyFaultEnable=false`): the producer then only avoids, on a retry, the broker that just
failed. When on:

- after every send the producer reports `update_fault_item(broker, latency_ms, isolation)`.
  The broker is unavailable for `notAvailableDuration[i]`, i the largest index with
  latency >= latencyMax[i]; a failed send reports isolation=True, which counts as 30 000 ms:

      latencyMax           50  100    550   1000    2000    3000    15000  (ms)
      notAvailableDuration  0    0  30000  60000  120000  180000   600000  (ms)

  (5.x changed the tables; pass them to MQFaultStrategy to get 5.x behaviour);
- `select_one_message_queue` takes the first queue in round-robin order whose broker is
  available. If none is, `pick_one_at_least` chooses the least bad of the topic's brokers
  (available first, then lower latency, then earlier recovery; a rotating choice among the
  better half) and the queue is rewritten to that broker with queue id = counter % its queue
  count.

The clock is injectable (milliseconds); the default is monotonic, so wall-clock jumps neither
extend nor cut an isolation.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.routing import SendQueueIndex, TopicPublishInfo

__all__ = [
    "ISOLATION_LATENCY_MS",
    "LATENCY_MAX_4X",
    "NOT_AVAILABLE_DURATION_4X",
    "FaultItem",
    "LatencyFaultTolerance",
    "MQFaultStrategy",
    "compute_not_available_duration",
    "monotonic_ms",
]

log = logging.getLogger(__name__)

LATENCY_MAX_4X: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_4X: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
# What a failed send counts as (MQFaultStrategy.updateFaultItem with isolation=true).
ISOLATION_LATENCY_MS = 30000


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def compute_not_available_duration(
    latency_ms: float,
    latency_max: Sequence[int] = LATENCY_MAX_4X,
    not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION_4X,
) -> int:
    """notAvailableDuration[i] for the largest i with latency >= latencyMax[i], else 0."""
    for threshold, duration in zip(
        reversed(latency_max), reversed(not_available_duration), strict=True
    ):
        if latency_ms >= threshold:
            return duration
    return 0


@dataclass(slots=True)
class FaultItem:
    """A broker's last send latency and when it may be used again (clock ms)."""

    name: str
    current_latency: float
    start_timestamp: float

    def is_available(self, now: float) -> bool:
        return now >= self.start_timestamp

    def sort_key(self, now: float) -> tuple[bool, float, float]:
        # FaultItem.compareTo: available ones first, then lower latency, then earlier recovery.
        return (not self.is_available(now), self.current_latency, self.start_timestamp)


class LatencyFaultTolerance:
    """RocketMQ's LatencyFaultToleranceImpl: a table of broker -> FaultItem.

    A broker never reported is available. Reporting a broker again overwrites its item.
    """

    def __init__(
        self,
        clock: Callable[[], float] = monotonic_ms,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self._rng = rng or random.Random()
        self._items: dict[str, FaultItem] = {}
        self._which_item_worst = SendQueueIndex(self._rng)

    def update_fault_item(
        self, name: str, current_latency: float, not_available_duration: float
    ) -> None:
        start = self._clock() + not_available_duration
        self._items[name] = FaultItem(name, current_latency, start)

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or item.is_available(self._clock())

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def items(self) -> list[FaultItem]:
        return list(self._items.values())

    def pick_one_at_least(self, among: Collection[str] | None = None) -> str | None:
        """The least bad reported broker (of `among` when given), or None when there is none.

        The items are shuffled (so ties fall randomly), sorted best first, and item
        `counter % (len // 2)` of the better half is taken (item 0 when there is one item).
        """
        items = [i for i in self._items.values() if among is None or i.name in among]
        if not items:
            return None
        now = self._clock()
        self._rng.shuffle(items)
        items.sort(key=lambda item: item.sort_key(now))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        return items[self._which_item_worst.increment_and_get() % half].name


class MQFaultStrategy:
    """Queue selection for a send, with latency fault tolerance when `enabled`."""

    def __init__(
        self,
        enabled: bool = False,
        *,
        latency_max: Sequence[int] = LATENCY_MAX_4X,
        not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION_4X,
        clock: Callable[[], float] = monotonic_ms,
        rng: random.Random | None = None,
    ) -> None:
        if len(latency_max) != len(not_available_duration):
            raise ValueError("latency_max and not_available_duration differ in length")
        self.enabled = enabled
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.fault_tolerance = LatencyFaultTolerance(clock, rng)

    def compute_not_available_duration(self, latency_ms: float) -> int:
        return compute_not_available_duration(
            latency_ms, self.latency_max, self.not_available_duration
        )

    def update_fault_item(self, broker_name: str, latency_ms: float, isolation: bool) -> None:
        """Record a send's latency (isolation=True: it failed). No-op when disabled."""
        if not self.enabled:
            return
        duration = self.compute_not_available_duration(
            ISOLATION_LATENCY_MS if isolation else latency_ms
        )
        self.fault_tolerance.update_fault_item(broker_name, latency_ms, duration)

    def is_available(self, broker_name: str) -> bool:
        return self.fault_tolerance.is_available(broker_name)

    def pick_one_at_least(self, among: Collection[str] | None = None) -> str | None:
        return self.fault_tolerance.pick_one_at_least(among)

    def select_one_message_queue(
        self, info: TopicPublishInfo, last_broker_name: str | None
    ) -> MessageQueue:
        """The queue for the next attempt (`last_broker_name`: the broker the last one used)."""
        if not self.enabled:
            return info.select_one_message_queue(last_broker_name)
        if not info.queues:
            return info.select_one_message_queue()  # raises ClientError: nothing to send to
        return self._first_available(info) or self._least_bad(info)

    def _first_available(self, info: TopicPublishInfo) -> MessageQueue | None:
        """The first queue in round-robin order whose broker is available.

        4.9.x dropped the last-broker test here: an available broker is good enough, even the
        one that was just used, since a failure would have made it unavailable.
        """
        index = info.next_index()
        size = len(info.queues)
        for step in range(size):
            mq = info.queues[(index + step) % size]
            if self.fault_tolerance.is_available(mq.broker_name):
                return mq
        return None

    def _least_bad(self, info: TopicPublishInfo) -> MessageQueue:
        """Every broker of the topic is isolated: send to the least bad one anyway.

        RocketMQ picks among all brokers the producer has reported, so it can pick one of
        another topic; it then drops that broker's item (ending its isolation early) and falls
        back to plain round robin. Picking among this topic's brokers avoids both.
        """
        brokers = {mq.broker_name for mq in info.queues}
        broker = self.fault_tolerance.pick_one_at_least(brokers)
        if broker is None:
            return info.select_one_message_queue()
        # RocketMQ first takes a round-robin queue and then rewrites it, moving the counter
        # twice; done the same so the sequence of queues matches Java's.
        info.next_index()
        return MessageQueue(info.topic, broker, info.next_index() % info.write_queue_count(broker))
