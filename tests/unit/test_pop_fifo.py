"""FIFO groups' walk of a queue (broker/pop/fifo.py), sans-IO: one message per message group in
flight, the other groups of the queue going on; redelivery with one attempt more; the DLQ past
the maximum; the consumer offset at the lowest offset not acknowledged; the state through JSON."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.pop.fifo import FifoLocks, Verdict

KEY = ("T", "G", 0)


def walk(
    locks: FifoLocks,
    queue: list[str],
    start: int,
    now: int,
    want: int = 32,
    max_attempts: int = 3,
    invisible: int = 1000,
) -> tuple[list[tuple[int, int]], list[int], int]:
    """(offset, attempt) handed out, offsets sent to the DLQ, and the consumer offset."""
    scan = locks.scan(KEY, start, now, invisible, want, max_attempts)
    out, dead = [], []
    for offset in range(start, len(queue)):
        verdict = scan.offer(offset, queue[offset])
        if verdict is Verdict.DELIVER:
            out.append((offset, scan.attempt))
        elif verdict is Verdict.DEAD:
            dead.append(offset)
        if scan.finished():
            break
    else:
        scan.passed(len(queue))
    return out, dead, scan.commit


def test_one_message_per_group_in_flight_and_the_others_go_on() -> None:
    queue = ["a", "b", "a", "c", "b", "a"]
    locks = FifoLocks()
    out, _dead, commit = walk(locks, queue, 0, now=0)
    assert out == [(0, 1), (1, 1), (3, 1)] and commit == 0
    assert walk(locks, queue, 0, now=10)[0] == []  # all three groups wait for their acks
    assert locks.ack(KEY, 1, committed=0) is None  # b's: offset 0 (a) is not acknowledged
    assert walk(locks, queue, 0, now=20)[0] == [(4, 1)]  # b's next; a and c still wait
    assert locks.ack(KEY, 0, committed=0) == 2  # 0 and 1 acknowledged: the offset moves
    out, _dead, commit = walk(locks, queue, 2, now=30)
    assert out == [(2, 1)] and commit == 2
    assert locks.in_flight("T", "G") == 3  # a's 2, c's 3, b's 4


def test_an_unacknowledged_message_comes_back_with_one_attempt_more_then_to_the_dlq() -> None:
    queue = ["a", "a", "b"]
    locks = FifoLocks()
    assert walk(locks, queue, 0, now=0, max_attempts=2)[0] == [(0, 1), (2, 1)]
    assert locks.ack(KEY, 2, committed=0) is None
    # Past its invisible time: the same message again, its second attempt; a's next waits.
    assert walk(locks, queue, 0, now=1000, max_attempts=2)[0] == [(0, 2)]
    # Past the maximum: to the DLQ, and a's next goes out at once.
    out, dead, commit = walk(locks, queue, 0, now=2000, max_attempts=2)
    assert dead == [0] and out == [(1, 1)] and commit == 1
    assert locks.ack(KEY, 1, committed=1) == 3  # 2 was acknowledged before


def test_a_change_of_invisible_time_holds_the_group_longer() -> None:
    queue = ["a", "a"]
    locks = FifoLocks()
    walk(locks, queue, 0, now=0)
    assert locks.extend(KEY, 0, 5000) and not locks.extend(KEY, 1, 5000)
    assert walk(locks, queue, 0, now=3000)[0] == []
    assert walk(locks, queue, 0, now=5000)[0] == [(0, 2)]


def test_the_state_survives_json_and_bad_json_is_refused() -> None:
    queue = ["a", "b", "a"]
    locks = FifoLocks()
    walk(locks, queue, 0, now=0)
    locks.ack(KEY, 1, committed=0)
    again = FifoLocks.from_json(json.loads(json.dumps(locks.to_json())))
    assert not locks.changed
    assert walk(again, queue, 0, now=10)[0] == []  # a still in flight after the "restart"
    assert walk(again, queue, 0, now=1000)[0] == [(0, 2)]  # its attempt count went on
    for bad in ({}, {"table": 3}, {"table": [{"topic": "T"}]}, [], {"table": [{"topic": "T",
        "group": "G", "queueId": "0", "inFlight": [], "acked": []}]}):  # fmt: skip
        with pytest.raises(ValueError):
            FifoLocks.from_json(bad)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from("abcd"), min_size=1, max_size=30),
    st.integers(0, 2**32),
)
def test_each_group_is_delivered_in_order_one_at_a_time(groups: list[str], seed: int) -> None:
    """Random acks and pops: a group never has two in flight, its messages are acknowledged
    in queue order, and in the end everything is, with the consumer offset at the end."""
    rng = random.Random(seed)
    locks = FifoLocks()
    committed, acked_order = 0, []
    in_flight: dict[int, str] = {}
    for now in range(0, 10_000, 10):
        out, dead, commit = walk(locks, groups, committed, now, want=rng.randint(1, 4))
        assert not dead
        committed = max(committed, commit)
        for offset, _attempt in out:
            assert groups[offset] not in in_flight.values()
            in_flight[offset] = groups[offset]
        if in_flight and rng.random() < 0.7:
            offset = rng.choice(sorted(in_flight))
            del in_flight[offset]
            acked_order.append(offset)
            moved = locks.ack(KEY, offset, committed)
            committed = moved if moved is not None else committed
        if committed == len(groups):
            break
    assert committed == len(groups)
    for group in set(groups):
        mine = [o for o in acked_order if groups[o] == group]
        assert mine == sorted(mine) == [o for o, g in enumerate(groups) if g == group]
