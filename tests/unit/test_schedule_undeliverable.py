"""A delayed message that can never be delivered does not hold back its level (issue 30 item 3).

A retry message whose `%RETRY%<group>` topic is over 127 bytes (what CONSUMER_SEND_MSG_BACK
parks for a long group name) is refused MESSAGE_ILLEGAL by the store at delivery: it is skipped,
counted and logged, and the next message of the same level is delivered. A unit whose delivery
raises is skipped after UNDELIVERABLE_AFTER attempts. On c82965c both tests time out: the level
retries the first unit every second forever.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.messages import message
from tests.support.stores import StoreFactory
from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.broker.schedule import UNDELIVERABLE_AFTER, ScheduleMessageService
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, encode_properties

STORES = StoreFactory(message_delay_level="1s 2s")
LONG_RETRY_TOPIC = "%RETRY%" + "g" * 125  # 132 bytes: a topic name holds at most 127


def parked(real_topic: str, real_queue: str = "0") -> MessageToStore:
    """A message as park_delayed leaves it in level 1's queue, for any real topic."""
    props = {"DELAY": "1", "REAL_TOPIC": real_topic, "REAL_QID": real_queue, "WAIT": "false"}
    return MessageToStore(SCHEDULE_TOPIC, 0, b"parked", encode_properties(props))


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, ScheduleMessageService]]:
    store = STORES.open(tmp_path)
    await store.start()
    service = ScheduleMessageService(
        store, DelayOffsetTable(tmp_path / "config"), lambda: b"\x7f\x00\x00\x01\x00\x00\x2a\xf8"
    )
    await service.start()
    try:
        yield store, service
    finally:
        await service.stop()
        await store.stop()


def delivered(store: MessageStore, topic: str) -> int:
    return store.max_offset_in_queue(topic, 0)


async def test_a_message_the_store_refuses_for_good_is_skipped(
    running: tuple[MessageStore, ScheduleMessageService], caplog: pytest.LogCaptureFixture
) -> None:
    store, service = running
    # Stored directly in the schedule queue: the store's append does not check REAL_TOPIC.
    assert store.commitlog.put(parked(LONG_RETRY_TOPIC)).status.value == "PUT_OK"
    store.reput.wakeup()
    with caplog.at_level(logging.ERROR):
        assert (await store.put_message(message(1, topic="Later", DELAY="1"))).ok
        await eventually(lambda: delivered(store, "Later") == 1, "the later message", 10)
    assert service.undeliverable == 1
    lines = [r.getMessage() for r in caplog.records if "can never be delivered" in r.getMessage()]
    assert len(lines) == 1 and "%RETRY%ggg" in lines[0] and "delay level 1" in lines[0]


async def test_a_delivery_that_raises_is_skipped_after_bounded_attempts(
    running: tuple[MessageStore, ScheduleMessageService],
) -> None:
    store, service = running
    assert store.commitlog.put(parked("Real", real_queue="not a number")).status.value == "PUT_OK"
    store.reput.wakeup()
    assert (await store.put_message(message(1, topic="Later", DELAY="1"))).ok
    # One attempt a second (ERROR_BACKOFF).
    await eventually(
        lambda: delivered(store, "Later") == 1, "the later message", UNDELIVERABLE_AFTER + 10
    )
    assert service.undeliverable == 1
