"""UNIQ_KEY ids as RocketMQ's MessageClientIDSetter lays them out (tidemq.client.message)."""

from __future__ import annotations

import itertools
import os
import threading
import time

from tidemq.client.message import UniqueIdGenerator


def fields(message_id: str) -> tuple[bytes, int, bytes, int, int]:
    raw = bytes.fromhex(message_id)
    assert len(raw) == 16 and message_id == raw.hex().upper()
    return (
        raw[:4],
        int.from_bytes(raw[4:6], "big"),
        raw[6:10],
        int.from_bytes(raw[10:14], "big"),
        int.from_bytes(raw[14:], "big"),
    )


def test_ids_carry_ip_pid_random_clock_and_counter() -> None:
    ids = UniqueIdGenerator(b"\x0a\x01\x02\x03")
    first, second = fields(ids.next_id()), fields(ids.next_id())
    assert first[0] == second[0] == b"\x0a\x01\x02\x03"
    assert first[1] == second[1] == os.getpid() & 0xFFFF
    assert first[2] == second[2]  # random per generator
    assert second[4] == (first[4] + 1) & 0xFFFF
    now = time.localtime()
    month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    elapsed = int(time.time() * 1000 - month_start * 1000) & 0xFFFFFFFF
    assert 0 <= elapsed - first[3] < 60_000


def test_ids_are_unique_across_threads() -> None:
    ids = UniqueIdGenerator(b"\x7f\x00\x00\x01")
    made: list[list[str]] = [[] for _ in range(4)]

    def make(into: list[str]) -> None:
        into.extend(ids.next_id() for _ in range(5000))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [one for into in made for one in into]
    # the counter is 16 bits: 20,000 ids made within one millisecond-clock tick stay distinct
    assert len(set(every)) == len(every)


def test_ids_made_in_one_millisecond_differ_only_in_their_counter() -> None:
    ids = UniqueIdGenerator(b"\x7f\x00\x00\x01")
    made = [fields(ids.next_id()) for _ in range(300)]
    for before, after in itertools.pairwise(made):
        assert after[:3] == before[:3]
        assert after[4] == (before[4] + 1) & 0xFFFF
        assert 0 <= after[3] - before[3] < 60_000
