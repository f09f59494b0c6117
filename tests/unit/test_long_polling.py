"""PullRequestHoldService: what ends a held pull, as `ended_by` (and the metric) counts it."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.conditions import eventually
from tidemq.broker.long_polling import PullRequestHoldService
from tidemq.store.tags import parse_tag_expression

pytestmark = pytest.mark.asyncio

EVERY_TAG = parse_tag_expression("*")
ONLY_A = parse_tag_expression("A")
[CODE_A] = ONLY_A.codes
[CODE_B] = parse_tag_expression("B").codes
NEVER = 3600.0


async def started(
    max_offsets: dict[tuple[str, int], int], check_interval: float = NEVER
) -> PullRequestHoldService:
    service = PullRequestHoldService(
        lambda topic, queue: max_offsets.get((topic, queue), 0), check_interval
    )
    await service.start()
    return service


async def test_an_arrival_past_the_offset_wakes_the_pull() -> None:
    holds = await started({})
    try:
        pull = asyncio.create_task(holds.hold("T", 0, 5, ONLY_A, NEVER))
        await eventually(lambda: holds.held_count == 1, "the pull held")
        holds.notify_arrival("T", 0, 5, CODE_A, 0)  # not past the offset
        holds.notify_arrival("T", 1, 9, CODE_A, 0)  # another queue
        holds.notify_arrival("T", 0, 9, CODE_B, 0)  # a tag the filter refuses
        await asyncio.sleep(0)
        assert not pull.done()
        holds.notify_arrival("T", 0, 6, CODE_A, 0)
        await pull
        assert holds.ended_by == {"arrival": 1, "check": 0, "release": 0, "timeout": 0, "stop": 0}
        assert holds.held_count == 0
    finally:
        await holds.stop()


async def test_the_periodic_check_finds_what_no_arrival_announced() -> None:
    max_offsets = {("T", 0): 5}
    holds = await started(max_offsets, check_interval=0.01)
    try:
        pull = asyncio.create_task(holds.hold("T", 0, 5, EVERY_TAG, NEVER))
        await eventually(lambda: holds.held_count == 1, "the pull held")
        max_offsets["T", 0] = 6  # as a slave's replicated bytes arrive, without a wake-up
        await pull
        assert holds.ended_by["check"] == 1 and holds.ended_by["arrival"] == 0
    finally:
        await holds.stop()


async def test_timeout_release_and_stop_are_counted_apart() -> None:
    holds = await started({})
    await holds.hold("T", 0, 0, EVERY_TAG, 0.01)
    assert holds.ended_by["timeout"] == 1
    released = asyncio.create_task(holds.hold_any([("T", 0, 0), ("T", 1, 0)], EVERY_TAG, NEVER))
    await eventually(lambda: holds.held_count == 1, "the POP held")
    holds.wake_queue("T", 1, 1)
    holds.wake_queue("T", 0, 1)  # the same POP: counted once
    await released
    assert holds.ended_by["release"] == 1
    stopped = asyncio.create_task(holds.hold("T", 0, 0, EVERY_TAG, NEVER))
    await eventually(lambda: holds.held_count == 1, "the pull held")
    await holds.stop()
    await stopped
    assert holds.ended_by == {"arrival": 0, "check": 0, "release": 1, "timeout": 1, "stop": 1}
