"""Queue allocation strategies (client/consumer/allocate.py).

The expected tables are worked out by hand from RocketMQ's formulas (reference Part A §8), as
positions in the sorted queue list, one row per consumer in sorted client-id order:

AVG, N queues / M consumers, mod = N % M: consumer i < mod takes N//M + 1 queues from i*avg,
the others N//M from i*avg + mod; N <= M: consumer i < N takes queue i.
    8/3:  [0,1,2] [3,4,5] [6,7]            (mod 2: avg 3,3,2; starts 0,3, 2*2+2=6)
    10/4: [0,1,2] [3,4,5] [6,7] [8,9]      (mod 2: starts 0,3, 2*2+2=6, 3*2+2=8)
    16/5: [0-3] [4,5,6] [7,8,9] [10,11,12] [13,14,15]   (mod 1: starts 0, 3+1, 6+1, ...)
    5/3:  [0,1] [2,3] [4]
    3/8:  [0] [1] [2] then five empty rows
AVG_BY_CIRCLE: consumer i takes positions j with j % M == i.
    8/3:  [0,3,6] [1,4,7] [2,5]
    10/4: [0,4,8] [1,5,9] [2,6] [3,7]
"""

from __future__ import annotations

import hashlib
import logging
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateStrategy,
    PrefixMachineRoomResolver,
    md5_hash,
    message_queue_key,
)
from tidemq.client.errors import ClientError
from tidemq.client.protocol.heartbeat import MessageQueue

GROUP = "cg"


def queues(n: int, topic: str = "T") -> list[MessageQueue]:
    """n queues over two brokers, in RocketMQ's sorted order: broker-a's first, then broker-b's."""
    half = (n + 1) // 2
    return [MessageQueue(topic, "broker-a", i) for i in range(half)] + [
        MessageQueue(topic, "broker-b", i) for i in range(n - half)
    ]


def cids(m: int) -> list[str]:
    return [f"cid-{i:02d}" for i in range(m)]


def assignment(
    strategy: AllocateStrategy, mqs: list[MessageQueue], clients: list[str]
) -> list[list[MessageQueue]]:
    return [strategy.allocate(GROUP, cid, mqs, clients) for cid in clients]


def at(mqs: list[MessageQueue], table: list[list[int]]) -> list[list[MessageQueue]]:
    return [[mqs[pos] for pos in row] for row in table]


AVG_TABLES = [
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
    (16, 5, [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]),
    (5, 3, [[0, 1], [2, 3], [4]]),
    (3, 8, [[0], [1], [2], [], [], [], [], []]),
    (4, 4, [[0], [1], [2], [3]]),
    (8, 2, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (1, 3, [[0], [], []]),
    (7, 1, [[0, 1, 2, 3, 4, 5, 6]]),
]

CIRCLE_TABLES = [
    (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
    (16, 5, [[0, 5, 10, 15], [1, 6, 11], [2, 7, 12], [3, 8, 13], [4, 9, 14]]),
    (5, 3, [[0, 3], [1, 4], [2]]),
    (3, 8, [[0], [1], [2], [], [], [], [], []]),
    (4, 4, [[0], [1], [2], [3]]),
]


@pytest.mark.parametrize(("n", "m", "table"), AVG_TABLES)
def test_averagely_table(n: int, m: int, table: list[list[int]]) -> None:
    mqs = queues(n)
    assert assignment(AllocateMessageQueueAveragely(), mqs, cids(m)) == at(mqs, table)


@pytest.mark.parametrize(("n", "m", "table"), CIRCLE_TABLES)
def test_averagely_by_circle_table(n: int, m: int, table: list[list[int]]) -> None:
    mqs = queues(n)
    assert assignment(AllocateMessageQueueAveragelyByCircle(), mqs, cids(m)) == at(mqs, table)


def test_averagely_sorts_unsorted_input() -> None:
    mqs = queues(8)
    shuffled_mqs = mqs[:]
    random.Random(7).shuffle(shuffled_mqs)
    clients = cids(3)
    strategy = AllocateMessageQueueAveragely()
    for cid in clients:
        got = strategy.allocate(GROUP, cid, shuffled_mqs, list(reversed(clients)))
        assert got == strategy.allocate(GROUP, cid, mqs, clients)
    # Sorted as Java's compareTo: topic, then broker name, then queue id (not as a string).
    tens = [MessageQueue("T", "b", i) for i in (10, 2, 1)]
    assert strategy.allocate(GROUP, "c", tens, ["c"]) == [
        MessageQueue("T", "b", 1),
        MessageQueue("T", "b", 2),
        MessageQueue("T", "b", 10),
    ]


def test_client_ids_sort_as_strings() -> None:
    # "c10" < "c2" as strings: c10 is consumer 0.
    mqs = queues(4)
    strategy = AllocateMessageQueueAveragely()
    assert strategy.allocate(GROUP, "c10", mqs, ["c2", "c10"]) == mqs[:2]
    assert strategy.allocate(GROUP, "c2", mqs, ["c2", "c10"]) == mqs[2:]


def test_unknown_consumer_gets_nothing_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tidemq.client.consumer.allocate")
    for strategy in all_group_strategies():
        assert strategy.allocate(GROUP, "stranger", queues(4), cids(2)) == []
    assert "stranger" in caplog.text


def test_empty_inputs() -> None:
    for strategy in all_group_strategies():
        assert strategy.allocate(GROUP, "c", [], ["c"]) == []
        assert strategy.allocate(GROUP, "c", queues(3), []) == []
        with pytest.raises(ClientError):
            strategy.allocate(GROUP, "", queues(3), ["c"])


def test_duplicate_client_ids_count_once(caplog: pytest.LogCaptureFixture) -> None:
    mqs = queues(4)
    strategy = AllocateMessageQueueAveragely()
    clients = ["c0", "c0", "c1"]
    assert strategy.allocate(GROUP, "c0", mqs, clients) == mqs[:2]
    assert strategy.allocate(GROUP, "c1", mqs, clients) == mqs[2:]
    assert "duplicate" in caplog.text


def test_names() -> None:
    avg = AllocateMessageQueueAveragely()
    assert avg.name == "AVG"
    assert AllocateMessageQueueAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateMessageQueueConsistentHash().name == "CONSISTENT_HASH"
    assert AllocateMessageQueueByConfig([]).name == "CONFIG"
    assert AllocateMessageQueueByMachineRoom(["hz"]).name == "MACHINE_ROOM"
    nearby = AllocateMachineRoomNearby(avg, PrefixMachineRoomResolver())
    assert nearby.name == "MACHINE_ROOM_NEARBY-AVG"


# --- consistent hash ------------------------------------------------------------------------


def test_md5_hash_is_the_first_four_digest_bytes() -> None:
    # MD5("abc") = 900150983cd24fb0d6963f7d28e17f72 (RFC 1321 test suite).
    assert md5_hash("abc") == 0x90015098
    assert message_queue_key(MessageQueue("T", "broker-a", 3)) == (
        "MessageQueue [topic=T, brokerName=broker-a, queueId=3]"
    )


def test_consistent_hash_ring_by_hand() -> None:
    # One virtual node each: c0's point at 100, c1's at 200. A key goes to the first point at
    # or after its hash, wrapping around: 50 -> c0, 100 -> c0, 150 -> c1, 250 -> wraps to c0.
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    points = {"c0-0": 100, "c1-0": 200}
    key_hashes = dict(zip(map(message_queue_key, mqs), (50, 100, 150, 250), strict=True))
    hashes = points | key_hashes
    strategy = AllocateMessageQueueConsistentHash(1, hashes.__getitem__)
    assert strategy.allocate(GROUP, "c0", mqs, ["c0", "c1"]) == [mqs[0], mqs[1], mqs[3]]
    assert strategy.allocate(GROUP, "c1", mqs, ["c0", "c1"]) == [mqs[2]]


def nearest_clockwise_owner(mq: MessageQueue, clients: list[str], vnodes: int) -> str:
    """An independent statement of the ring: the point with the least clockwise distance."""
    key = int.from_bytes(hashlib.md5(message_queue_key(mq).encode()).digest()[:4], "big")
    best = min(
        ((int.from_bytes(hashlib.md5(f"{c}-{i}".encode()).digest()[:4], "big") - key) % 2**32, c)
        for c in clients
        for i in range(vnodes)
    )
    return best[1]


@pytest.mark.parametrize("vnodes", [1, 3, 10])
def test_consistent_hash_matches_nearest_clockwise_point(vnodes: int) -> None:
    mqs = queues(16)
    clients = [f"10.0.0.{i}@{1000 + i}#{i}" for i in range(5)]
    strategy = AllocateMessageQueueConsistentHash(vnodes)
    for cid in clients:
        expected = [mq for mq in mqs if nearest_clockwise_owner(mq, clients, vnodes) == cid]
        assert strategy.allocate(GROUP, cid, mqs, clients) == expected


def test_consistent_hash_rejects_negative_virtual_nodes() -> None:
    with pytest.raises(ClientError):
        AllocateMessageQueueConsistentHash(-1)


def test_consistent_hash_zero_virtual_nodes_gives_nothing() -> None:
    assert AllocateMessageQueueConsistentHash(0).allocate(GROUP, "c", queues(3), ["c"]) == []


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    clients=st.sets(
        st.text("abcdef0123456789@#.", min_size=1, max_size=12), min_size=2, max_size=8
    ),
    data=st.data(),
)
def test_consistent_hash_keeps_queues_when_a_consumer_leaves(
    n: int, clients: set[str], data: st.DataObject
) -> None:
    mqs = queues(n)
    before_ids = sorted(clients)
    leaver = data.draw(st.sampled_from(before_ids))
    after_ids = [c for c in before_ids if c != leaver]
    strategy = AllocateMessageQueueConsistentHash()
    before = {c: set(strategy.allocate(GROUP, c, mqs, before_ids)) for c in before_ids}
    after = {c: set(strategy.allocate(GROUP, c, mqs, after_ids)) for c in after_ids}
    for cid in after_ids:
        # Only the leaver's queues move; everyone keeps what they had.
        assert before[cid] <= after[cid]
        assert after[cid] - before[cid] <= before[leaver]


# --- every consumer together gets every queue once -------------------------------------------


def all_group_strategies() -> list[AllocateStrategy]:
    return [
        AllocateMessageQueueAveragely(),
        AllocateMessageQueueAveragelyByCircle(),
        AllocateMessageQueueConsistentHash(),
        AllocateMessageQueueConsistentHash(1),
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), PrefixMachineRoomResolver()),
        AllocateMachineRoomNearby(
            AllocateMessageQueueAveragelyByCircle(), PrefixMachineRoomResolver()
        ),
    ]


room_queues = st.lists(
    st.builds(
        MessageQueue,
        st.sampled_from(["T", "U"]),
        st.sampled_from(["hz@a", "hz@b", "sh@c", "bj@d", "plain"]),
        st.integers(0, 15),
    ),
    min_size=1,
    max_size=40,
)
room_clients = st.lists(
    st.builds(
        lambda room, n: f"{room}@10.0.0.{n}",
        st.sampled_from(["hz", "sh", "gz"]),
        st.integers(0, 20),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(mqs=room_queues, clients=room_clients, index=st.integers(0, 5), seed=st.integers(0, 99))
def test_each_queue_goes_to_exactly_one_consumer(
    mqs: list[MessageQueue], clients: list[str], index: int, seed: int
) -> None:
    strategy = all_group_strategies()[index]
    shuffled = mqs[:]
    random.Random(seed).shuffle(shuffled)
    got = [q for cid in set(clients) for q in strategy.allocate(GROUP, cid, shuffled, clients)]
    assert sorted(got) == sorted(set(mqs))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 64), m=st.integers(1, 20))
def test_averagely_sizes_differ_by_at_most_one(n: int, m: int) -> None:
    rows = assignment(AllocateMessageQueueAveragely(), queues(n), cids(m))
    sizes = [len(r) for r in rows]
    assert sum(sizes) == n
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the extra queues go to the first consumers


# --- config and machine rooms -----------------------------------------------------------------


def test_by_config_returns_the_fixed_list() -> None:
    fixed = [MessageQueue("T", "broker-b", 3), MessageQueue("T", "broker-a", 0)]
    strategy = AllocateMessageQueueByConfig(fixed)
    assert strategy.allocate(GROUP, "c0", queues(8), cids(3)) == fixed
    assert strategy.allocate(GROUP, "c9", [], []) == fixed
    fixed.clear()  # the strategy kept its own copy
    assert strategy.allocate(GROUP, "c0", queues(8), cids(3)) != []


def machine_room_queues() -> list[MessageQueue]:
    # Sorted: "a@b@c" < "bj@broker-c" < "hz@" < "hz@broker-a" < "plain" < "sh@broker-b".
    return sorted(
        [MessageQueue("T", "hz@broker-a", i) for i in range(4)]
        + [MessageQueue("T", "sh@broker-b", i) for i in range(4)]
        + [MessageQueue("T", "bj@broker-c", i) for i in range(2)]
        + [MessageQueue("T", "plain", i) for i in range(2)]
        + [MessageQueue("T", "a@b@c", 0), MessageQueue("T", "hz@", 0)]
    )


def test_by_machine_room_table() -> None:
    # Kept (rooms hz and sh, "room@name" only): k0-k3 = hz@broker-a 0-3, k4-k7 = sh@broker-b
    # 0-3. 8 kept / 3 consumers: d = 2, rest = 2 -> [k0,k1,k6] [k2,k3,k7] [k4,k5].
    a = [MessageQueue("T", "hz@broker-a", i) for i in range(4)]
    b = [MessageQueue("T", "sh@broker-b", i) for i in range(4)]
    strategy = AllocateMessageQueueByMachineRoom({"hz", "sh"})
    got = assignment(strategy, machine_room_queues(), cids(3))
    assert got == [[a[0], a[1], b[2]], [a[2], a[3], b[3]], [b[0], b[1]]]


def test_by_machine_room_fewer_queues_than_consumers() -> None:
    # Kept: bj@broker-c 0,1. 2 kept / 4 consumers: d = 0, rest = 2 -> [k0] [k1] [] [].
    c = [MessageQueue("T", "bj@broker-c", i) for i in range(2)]
    strategy = AllocateMessageQueueByMachineRoom({"bj"})
    assert assignment(strategy, machine_room_queues(), cids(4)) == [[c[0]], [c[1]], [], []]


def test_machine_room_nearby_table() -> None:
    # hz queues among hz clients (AVG 4/2), sh queues to the sh client, and bj's queues (no bj
    # client) among all three clients (AVG 3/3).
    hz = [MessageQueue("T", "hz@a", i) for i in range(4)]
    sh = [MessageQueue("T", "sh@b", i) for i in range(2)]
    bj = [MessageQueue("T", "bj@c", i) for i in range(3)]
    clients = ["hz@c1", "hz@c2", "sh@c3"]
    strategy = AllocateMachineRoomNearby(
        AllocateMessageQueueAveragely(), PrefixMachineRoomResolver()
    )
    got = assignment(strategy, hz + sh + bj, clients)
    assert got == [
        [hz[0], hz[1], bj[0]],
        [hz[2], hz[3], bj[1]],
        [sh[0], sh[1], bj[2]],
    ]


def test_machine_room_nearby_rejects_an_empty_room() -> None:
    strategy = AllocateMachineRoomNearby(
        AllocateMessageQueueAveragely(), PrefixMachineRoomResolver()
    )
    with pytest.raises(ClientError):
        strategy.allocate(GROUP, "hz@c1", [MessageQueue("T", "@x", 0)], ["hz@c1"])
