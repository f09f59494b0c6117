"""Routes to publish/subscribe queues, broker addresses, send queue selection and latency fault
tolerance (client/routing.py, client/latency.py)."""

from __future__ import annotations

import random

import pytest

from tidemq.client.errors import ClientError
from tidemq.client.latency import (
    LatencyFaultTolerance,
    MQFaultStrategy,
    compute_not_available_duration,
)
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.models import (
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    BrokerData,
    QueueData,
    TopicRouteData,
)
from tidemq.client.routing import (
    FindBrokerResult,
    SendQueueIndex,
    TopicPublishInfo,
    find_broker_address_in_publish,
    find_broker_address_in_subscribe,
    topic_route_to_subscribe_queues,
)


class FixedStart(random.Random):
    """A Random whose randrange gives `start`: the send counter's first value is start + 1."""

    def __init__(self, start: int) -> None:
        super().__init__(0)
        self.start = start

    def randrange(self, *args: object, **kwargs: object) -> int:
        return self.start


def mqs(topic: str, broker: str, n: int) -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def sample_route() -> TopicRouteData:
    """QueueData deliberately unsorted:

    broker-c RW 4/4 master   -> publish 4, subscribe 4
    broker-a RW r4/w2 master -> publish 2 (writeQueueNums), subscribe 4 (readQueueNums)
    broker-b RW slave only   -> publish none (no master), subscribe 4
    broker-d R- master       -> publish none (not writable), subscribe 2
    broker-e -W r2/w3 master -> publish 3, subscribe none (not readable)
    broker-f RW, no BrokerData -> publish none, subscribe 1
    """
    return TopicRouteData(
        queue_datas=[
            QueueData("broker-c", 4, 4, PERM_READ_WRITE),
            QueueData("broker-a", 4, 2, PERM_READ_WRITE),
            QueueData("broker-b", 4, 4, PERM_READ_WRITE),
            QueueData("broker-d", 2, 2, PERM_READ),
            QueueData("broker-e", 2, 3, PERM_WRITE),
            QueueData("broker-f", 1, 1, PERM_READ_WRITE),
        ],
        broker_datas=[
            BrokerData("c1", "broker-a", {0: "a:0", 1: "a:1"}),
            BrokerData("c1", "broker-b", {1: "b:1", 2: "b:2"}),
            BrokerData("c1", "broker-c", {0: "c:0"}),
            BrokerData("c1", "broker-d", {0: "d:0"}),
            BrokerData("c1", "broker-e", {0: "e:0"}),
        ],
    )


# --- publish and subscribe queues -------------------------------------------------------------


def test_publish_queues_masters_writable_sorted_by_broker() -> None:
    info = TopicPublishInfo.from_route("T", sample_route())
    assert list(info.queues) == mqs("T", "broker-a", 2) + mqs("T", "broker-c", 4) + mqs(
        "T", "broker-e", 3
    )
    assert info.ok
    assert not info.order_topic
    assert info.write_queue_count("broker-c") == 4
    assert info.write_queue_count("broker-b") == 0


def test_subscribe_queues_readable_masters_or_not() -> None:
    got = topic_route_to_subscribe_queues("T", sample_route())
    expected = (
        mqs("T", "broker-a", 4)
        + mqs("T", "broker-b", 4)
        + mqs("T", "broker-c", 4)
        + mqs("T", "broker-d", 2)
        + mqs("T", "broker-f", 1)
    )
    assert got == set(expected)


def test_route_without_masters_is_not_ok() -> None:
    route = TopicRouteData(
        [QueueData("broker-b", 4, 4, PERM_READ_WRITE)], [BrokerData("c", "broker-b", {1: "b:1"})]
    )
    info = TopicPublishInfo.from_route("T", route)
    assert not info.ok
    with pytest.raises(ClientError):
        info.select_one_message_queue()
    assert len(topic_route_to_subscribe_queues("T", route)) == 4


def test_order_topic_conf_is_taken_literally() -> None:
    route = sample_route()
    route.order_topic_conf = "broker-b:2;broker-a:3"
    info = TopicPublishInfo.from_route("T", route)
    assert info.order_topic
    assert list(info.queues) == mqs("T", "broker-b", 2) + mqs("T", "broker-a", 3)


def test_order_topic_conf_skips_malformed_items() -> None:
    route = TopicRouteData(order_topic_conf="x;broker-a:2;:3;broker-c:z;;broker-d:-1")
    info = TopicPublishInfo.from_route("T", route)
    assert list(info.queues) == mqs("T", "broker-a", 2)


def test_for_topic_cuts_the_default_topic_route() -> None:
    # TBW102 on broker-a (8 queues) and broker-b (2 read queues): a new topic with
    # defaultTopicQueueNums 4 gets min(4, readQueueNums) queues per broker.
    route = TopicRouteData(
        [
            QueueData("broker-b", 2, 8, PERM_READ_WRITE),
            QueueData("broker-a", 8, 8, PERM_READ_WRITE),
        ],
        [BrokerData("c", "broker-a", {0: "a:0"}), BrokerData("c", "broker-b", {0: "b:0"})],
    )
    default = TopicPublishInfo.from_route("TBW102", route)
    info = default.for_topic("New", 4)
    assert list(info.queues) == mqs("New", "broker-a", 4) + mqs("New", "broker-b", 2)
    assert route.queue_datas[0].write_queue_nums == 8  # the cached route is not changed


# --- round robin ------------------------------------------------------------------------------


def test_select_round_robin_from_the_random_start() -> None:
    queues = mqs("T", "a", 2) + mqs("T", "b", 2)
    info = TopicPublishInfo("T", queues, rng=FixedStart(0))
    assert [info.select_one_message_queue() for _ in range(5)] == [
        queues[1],
        queues[2],
        queues[3],
        queues[0],
        queues[1],
    ]


def test_select_on_retry_avoids_the_last_broker() -> None:
    queues = mqs("T", "a", 2) + mqs("T", "b", 2)
    info = TopicPublishInfo("T", queues, rng=FixedStart(0))
    # Counter 1 -> a1 (broker a, skipped), counter 2 -> b0.
    assert info.select_one_message_queue("a") == queues[2]
    # Counter 3 -> b1 (skipped), 4 -> a0.
    assert info.select_one_message_queue("b") == queues[0]


def test_select_on_retry_with_one_broker_falls_back_to_round_robin() -> None:
    queues = mqs("T", "a", 3)
    info = TopicPublishInfo("T", queues, rng=FixedStart(0))
    # Counters 1, 2, 3 are all broker a; then plain round robin takes counter 4 -> queue 1.
    assert info.select_one_message_queue("a") == queues[1]
    assert info.select_one_message_queue("gone") == queues[2]


def test_send_index_wraps_to_non_negative() -> None:
    index = SendQueueIndex(FixedStart(2**31 - 2))
    assert [index.increment_and_get() for _ in range(3)] == [2**31 - 1, 0, 1]
    assert 0 <= SendQueueIndex().increment_and_get() < 2**31


# --- broker addresses -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addrs", "broker_id", "only_this", "expected"),
    [
        ({0: "m", 1: "s1"}, 0, True, FindBrokerResult("m", False)),
        ({0: "m", 1: "s1"}, 1, True, FindBrokerResult("s1", True)),
        ({1: "s1"}, 0, True, None),  # the master asked for only: nothing
        ({1: "s1", 2: "s2"}, 0, False, FindBrokerResult("s1", True)),  # lowest id
        ({0: "m", 2: "s2"}, 1, True, FindBrokerResult("s2", True)),  # slave id + 1
        ({0: "m", 3: "s3"}, 1, True, None),
        ({0: "m", 3: "s3"}, 1, False, FindBrokerResult("m", False)),  # master first
        ({3: "s3", 2: "s2"}, 5, False, FindBrokerResult("s2", True)),  # id order, not insertion
        ({}, 0, False, None),
    ],
)
def test_find_broker_address_in_subscribe(
    addrs: dict[int, str], broker_id: int, only_this: bool, expected: FindBrokerResult | None
) -> None:
    assert find_broker_address_in_subscribe(addrs, broker_id, only_this) == expected


def test_find_broker_address_in_publish_is_the_master_only() -> None:
    route = sample_route()
    assert find_broker_address_in_publish(route, "broker-a") == "a:0"
    assert find_broker_address_in_publish(route, "broker-b") is None
    assert find_broker_address_in_publish(route, "nope") is None
    table = {"broker-a": {0: "a:0", 1: "a:1"}, "broker-b": {1: "b:1"}}
    assert find_broker_address_in_publish(table, "broker-a") == "a:0"
    assert find_broker_address_in_publish(table, "broker-b") is None


# --- latency fault tolerance ------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("latency", "duration"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (100, 0),
        (549, 0),
        (550, 30_000),
        (999.9, 30_000),
        (1000, 60_000),
        (2000, 120_000),
        (3000, 180_000),
        (14_999, 180_000),
        (15_000, 600_000),
        (30_000, 600_000),
    ],
)
def test_not_available_duration_table(latency: float, duration: int) -> None:
    assert compute_not_available_duration(latency) == duration


def test_disabled_strategy_ignores_latency() -> None:
    clock = Clock()
    fault = MQFaultStrategy(clock=clock)
    fault.update_fault_item("a", 20_000, isolation=True)
    assert fault.is_available("a")
    info = TopicPublishInfo("T", mqs("T", "a", 2) + mqs("T", "b", 2), rng=FixedStart(0))
    assert fault.select_one_message_queue(info, "a").broker_name == "b"


def test_broker_unavailable_for_the_duration() -> None:
    clock = Clock()
    fault = MQFaultStrategy(True, clock=clock)
    fault.update_fault_item("a", 600, isolation=False)  # >= 550 ms: 30 s
    fault.update_fault_item("b", 80, isolation=False)  # < 550 ms: never isolated
    assert not fault.is_available("a")
    assert fault.is_available("b")
    assert fault.is_available("never-seen")
    clock.now = 29_999
    assert not fault.is_available("a")
    clock.now = 30_000
    assert fault.is_available("a")


def test_isolation_counts_as_30_seconds_of_latency() -> None:
    clock = Clock()
    fault = MQFaultStrategy(True, clock=clock)
    fault.update_fault_item("a", 12, isolation=True)
    clock.now = 599_999
    assert not fault.is_available("a")
    clock.now = 600_000
    assert fault.is_available("a")
    [item] = fault.fault_tolerance.items()
    assert item.current_latency == 12  # the real latency is kept for ranking


def test_select_skips_unavailable_brokers() -> None:
    clock = Clock()
    fault = MQFaultStrategy(True, clock=clock, rng=random.Random(1))
    info = TopicPublishInfo("T", mqs("T", "a", 2) + mqs("T", "b", 2), rng=FixedStart(0))
    fault.update_fault_item("a", 2000, isolation=False)
    picked = [fault.select_one_message_queue(info, None) for _ in range(8)]
    assert {q.broker_name for q in picked} == {"b"}
    clock.now = 120_000
    picked = [fault.select_one_message_queue(info, None) for _ in range(8)]
    assert {q.broker_name for q in picked} == {"a", "b"}


def test_all_isolated_picks_the_least_bad_broker() -> None:
    clock = Clock()
    fault = MQFaultStrategy(True, clock=clock, rng=random.Random(1))
    info = TopicPublishInfo("T", mqs("T", "a", 2) + mqs("T", "b", 4), rng=FixedStart(0))
    fault.update_fault_item("a", 600, isolation=False)  # 30 s, lower latency: least bad
    fault.update_fault_item("b", 2000, isolation=False)  # 120 s
    fault.update_fault_item("other-topic", 1, isolation=True)  # not a broker of this topic
    # Two candidates: half = 1, so always the best: a, queue id = counter % 2.
    picked = [fault.select_one_message_queue(info, None) for _ in range(4)]
    assert {q.broker_name for q in picked} == {"a"}
    assert {q.queue_id for q in picked} == {0, 1}
    assert all(q.topic == "T" for q in picked)


def test_pick_one_at_least_order_and_rotation() -> None:
    clock = Clock()
    tolerance = LatencyFaultTolerance(clock, random.Random(3))
    assert tolerance.pick_one_at_least() is None
    tolerance.update_fault_item("slow", 5000, 180_000)
    tolerance.update_fault_item("slower", 9000, 180_000)
    tolerance.update_fault_item("fast", 100, 30_000)
    tolerance.update_fault_item("ok", 40, 0)  # available now: ranked first
    assert tolerance.pick_one_at_least(["slow"]) == "slow"
    assert tolerance.pick_one_at_least(["missing"]) is None
    # Four items: half = 2, the pick rotates over the best two, "ok" and "fast".
    assert {tolerance.pick_one_at_least() for _ in range(6)} == {"ok", "fast"}
    tolerance.remove("ok")
    tolerance.remove("ok")
    # Three items: half = 1, the best unavailable one: lowest latency.
    assert {tolerance.pick_one_at_least() for _ in range(4)} == {"fast"}


def test_fault_tables_must_match() -> None:
    with pytest.raises(ValueError):
        MQFaultStrategy(True, latency_max=[1, 2], not_available_duration=[0])
    fault = MQFaultStrategy(True, latency_max=[50, 1800], not_available_duration=[0, 5000])
    assert fault.compute_not_available_duration(2000) == 5000
