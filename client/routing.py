"""From a topic's route to the queues a client sends to and reads from, and broker addresses.

A route (GET_ROUTEINFO_BY_TOPIC, `TopicRouteData`) lists per broker group ("brokerName") its
queue counts and permission (`QueueData`) and its members (`BrokerData.broker_addrs`, broker id
-> "host:port", id 0 the master). RocketMQ's MQClientInstance turns it into:

- **publish queues** (`TopicPublishInfo.from_route`, topicRouteData2TopicPublishInfo): QueueData
  sorted by brokerName; of each writable one whose group has a master (id 0) in brokerAddrs,
  queues 0 .. writeQueueNums-1. A group without a master cannot take writes, so it is left out
  even if slaves are up. An order topic's route carries `orderTopicConf` "brokerA:4;brokerB:4"
  instead, taken literally (4 queues of brokerA, then 4 of brokerB), so that a message key always
  maps to the same queue;
- **subscribe queues** (`topic_route_to_subscribe_queues`, topicRouteData2TopicSubscribeInfo):
  queues 0 .. readQueueNums-1 of every readable QueueData, master or not, since consumers can
  read from slaves;
- **addresses**: `find_broker_address_in_publish` is the master or nothing;
  `find_broker_address_in_subscribe` prefers the asked id and falls back (see there).

`TopicPublishInfo.select_one_message_queue` is the round robin a producer sends with.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidemq.client.errors import ClientError
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.models import MASTER_ID, PERM_READ, PERM_WRITE, TopicRouteData

__all__ = [
    "FindBrokerResult",
    "SendQueueIndex",
    "TopicPublishInfo",
    "find_broker_address_in_publish",
    "find_broker_address_in_subscribe",
    "parse_order_topic_conf",
    "topic_route_to_publish_queues",
    "topic_route_to_subscribe_queues",
]

log = logging.getLogger(__name__)

_POSITIVE_MASK = 0x7FFFFFFF


class SendQueueIndex:
    """RocketMQ's ThreadLocalIndex: a counter from a random start, always in [0, 2**31).

    The random start spreads producers that start together over different queues. Java keeps
    one per thread; an asyncio client has one thread, so one per TopicPublishInfo.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._value = (rng or random.Random()).randrange(_POSITIVE_MASK + 1)

    def increment_and_get(self) -> int:
        # Java's int wraps and is masked to non-negative; the same without overflow.
        self._value = (self._value + 1) & _POSITIVE_MASK
        return self._value


def parse_order_topic_conf(topic: str, conf: str) -> list[MessageQueue]:
    """'brokerA:4;brokerB:4' -> brokerA queues 0-3, then brokerB queues 0-3, in that order.

    Malformed items are skipped and logged (RocketMQ would throw while refreshing the route).
    """
    queues = []
    for item in conf.split(";"):
        if not item.strip():
            continue
        name, sep, count = item.partition(":")
        try:
            nums = int(count)
        except ValueError:
            nums = -1
        if not sep or not name or nums < 0:
            log.warning("topic %s: bad orderTopicConf item %r in %r", topic, item, conf)
            continue
        queues += [MessageQueue(topic, name, i) for i in range(nums)]
    return queues


def topic_route_to_publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues of broker groups with a master, groups in brokerName order."""
    with_master = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    queues = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and qd.broker_name in with_master:
            queues += [MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums)]
    return queues


def topic_route_to_subscribe_queues(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """readQueueNums queues of every readable QueueData; slaves-only groups included."""
    return {
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if qd.perm & PERM_READ
        for i in range(qd.read_queue_nums)
    }


class TopicPublishInfo:
    """The queues a producer sends a topic's messages to, and its round-robin position."""

    def __init__(
        self,
        topic: str,
        queues: Iterable[MessageQueue],
        *,
        order_topic: bool = False,
        route: TopicRouteData | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.topic = topic
        self.queues: tuple[MessageQueue, ...] = tuple(queues)
        self.order_topic = order_topic
        self.route = route
        self.send_which_queue = SendQueueIndex(rng)

    @classmethod
    def from_route(
        cls, topic: str, route: TopicRouteData, rng: random.Random | None = None
    ) -> TopicPublishInfo:
        """topicRouteData2TopicPublishInfo: orderTopicConf when present, else the QueueData."""
        if route.order_topic_conf:
            queues = parse_order_topic_conf(topic, route.order_topic_conf)
            return cls(topic, queues, order_topic=True, route=route, rng=rng)
        return cls(topic, topic_route_to_publish_queues(topic, route), route=route, rng=rng)

    @property
    def ok(self) -> bool:
        """RocketMQ's ok(): there is at least one queue to send to."""
        return bool(self.queues)

    def for_topic(self, topic: str, default_queue_nums: int) -> TopicPublishInfo:
        """Queues for a topic not created yet, from this (the default topic TBW102's) route.

        RocketMQ's producer, asked for a topic without a route, takes TBW102's route with each
        QueueData's read and write counts cut to min(defaultTopicQueueNums, readQueueNums); the
        broker creates the topic on the first message with that many queues.
        """
        if self.route is None:
            # Built from a queue list, not a route: cut each broker's queue ids instead.
            return TopicPublishInfo(
                topic,
                [
                    MessageQueue(topic, q.broker_name, q.queue_id)
                    for q in self.queues
                    if q.queue_id < default_queue_nums
                ],
            )
        queue_datas = []
        for qd in self.route.queue_datas:
            nums = min(default_queue_nums, qd.read_queue_nums)
            queue_datas.append(dataclasses.replace(qd, read_queue_nums=nums, write_queue_nums=nums))
        route = dataclasses.replace(self.route, queue_datas=queue_datas, order_topic_conf=None)
        return TopicPublishInfo.from_route(topic, route)

    def write_queue_count(self, broker_name: str) -> int:
        """How many of the publish queues are on `broker_name` (0 when none or no master)."""
        return sum(1 for q in self.queues if q.broker_name == broker_name)

    def next_index(self) -> int:
        return self.send_which_queue.increment_and_get()

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """Round robin; on a retry (`last_broker_name` set) a queue of another broker if any.

        idx = counter % len(queues) with the counter advanced on every try, so that a retry
        tries up to len(queues) positions before settling for plain round robin (every queue
        is on the failed broker).
        """
        queues = self.queues
        if not queues:
            raise ClientError(f"no queue to send topic {self.topic} to")
        if last_broker_name is not None:
            for _ in range(len(queues)):
                mq = queues[self.next_index() % len(queues)]
                if mq.broker_name != last_broker_name:
                    return mq
        # next_index() of a first try, inline: the call per send of two frames
        index = self.send_which_queue
        index._value = value = (index._value + 1) & _POSITIVE_MASK
        return queues[value % len(queues)]

    def __repr__(self) -> str:
        return (
            f"TopicPublishInfo(topic={self.topic!r}, order_topic={self.order_topic}, "
            f"queues={len(self.queues)})"
        )


@dataclass(frozen=True, slots=True)
class FindBrokerResult:
    """A broker address for reading, and whether it is a slave's (RocketMQ's FindBrokerResult)."""

    address: str
    is_slave: bool


def find_broker_address_in_publish(
    route_or_table: TopicRouteData | Mapping[str, Mapping[int, str]], broker_name: str
) -> str | None:
    """The master's address of `broker_name`, from a route or a brokerName -> {id: addr} table.

    Only the master takes writes, so there is no fallback.
    """
    if isinstance(route_or_table, TopicRouteData):
        for broker in route_or_table.broker_datas:
            if broker.broker_name == broker_name:
                return broker.broker_addrs.get(MASTER_ID)
        return None
    return route_or_table.get(broker_name, {}).get(MASTER_ID)


def find_broker_address_in_subscribe(
    broker_addrs: Mapping[int, str], broker_id: int, only_this_broker: bool
) -> FindBrokerResult | None:
    """Where to read from in a broker group (RocketMQ's findBrokerAddressInSubscribe).

    1. the member `broker_id`;
    2. else, if `broker_id` is a slave id, member `broker_id + 1` (the next slave);
    3. else, unless `only_this_broker`, the member with the lowest id: the master when up.
       (Java takes the first entry of a HashMap, which for small Long keys is the lowest id.)

    `is_slave` tells whether the address found is not the master's. None: nothing fits.
    """
    for candidate in _subscribe_candidates(broker_addrs, broker_id, only_this_broker):
        address = broker_addrs.get(candidate)
        if address is not None:
            return FindBrokerResult(address, candidate != MASTER_ID)
    return None


def _subscribe_candidates(
    broker_addrs: Mapping[int, str], broker_id: int, only_this_broker: bool
) -> list[int]:
    candidates = [broker_id]
    if broker_id != MASTER_ID:
        candidates.append(broker_id + 1)
    if not only_this_broker and broker_addrs:
        candidates.append(min(broker_addrs))
    return candidates
