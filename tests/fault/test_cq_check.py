"""The soak's ConsumeQueue checker (cq_check.py) on a store the real MessageStore wrote: clean,
it finds every unit and record in agreement; each kind of damage is named."""

from __future__ import annotations

import asyncio
import shutil
import struct
import time
from pathlib import Path

import pytest

from tests.fault.cq_check import check_consume_queues, segments
from tests.support.stores import StoreFactory
from tidemq.store.record import MessageToStore, encode_properties
from tidemq.store.timer_message import TIMER_TOPIC

STORES = StoreFactory(mapped_file_size_commit_log=16384, message_index_worker_enable=False)
COUNT = 120


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cq") / "store"

    async def write() -> None:
        store = STORES.open(root)
        await store.start()
        try:
            for i in range(COUNT):
                props = encode_properties({"TAGS": f"tag{i % 3}", "KEYS": f"k{i}"})
                msg = MessageToStore("Orders" if i % 2 else "Audit", i % 3, b"x" * (i % 90), props)
                result = await store.put_message(msg)
                assert result.append is not None, result.remark
            await store.reput.wait_idle()
        finally:
            await store.stop()

    asyncio.run(write())
    return root


def damaged(written: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(written, copy)
    return copy


def unit_file(store: Path, topic: str, queue: int) -> Path:
    return segments(store / "consumequeue" / topic / str(queue))[0][1]


def patch_unit(path: Path, index: int, fmt: str, offset: int, value: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, index * 20 + offset, value)
    path.write_bytes(bytes(data))


def test_a_clean_store_agrees(written: Path) -> None:
    check = check_consume_queues(written)
    assert check.problems == []
    assert (check.queues, check.units, check.records, check.undispatched) == (6, COUNT, COUNT, 0)


def test_timers_and_recall_tombstones_agree(tmp_path: Path) -> None:
    """A timer's tagsCode is its delivery time, a recall's tombstone's minus it: both agree."""
    root = tmp_path / "store"

    async def write() -> None:
        store = STORES.open(root)
        await store.start()
        try:
            at = str(int(time.time() * 1000) + 3_600_000)
            for extra in ({}, {"TIMER_DEL_UNIQKEY": "Orders+ID"}):
                props = encode_properties({"TIMER_DELIVER_MS": at, "UNIQ_KEY": "ID", **extra})
                result = await store.put_message(MessageToStore("Orders", 0, b"0", props))
                assert result.append is not None, result.remark
            await store.reput.wait_idle()
            queue = store.find_consume_queue(TIMER_TOPIC, 0)
            assert queue is not None
            codes = [unit.tags_code for unit in queue.units(0, 2) or []]
            assert codes == [int(at), -int(at)]
        finally:
            await store.stop()

    asyncio.run(write())
    check = check_consume_queues(root)
    assert check.problems == [] and check.units == 2
    patch_unit(unit_file(root, TIMER_TOPIC, 0), 1, ">q", 12, 12345)
    assert any("tagsCode 12345" in p for p in check_consume_queues(root).problems)


def test_a_wrong_size_is_named(written: Path, tmp_path: Path) -> None:
    store = damaged(written, tmp_path)
    patch_unit(unit_file(store, "Orders", 1), 3, ">i", 8, 7)
    assert any(
        "Orders/1 offset 3" in p and "size" in p for p in check_consume_queues(store).problems
    )


def test_a_wrong_tags_code_is_named(written: Path, tmp_path: Path) -> None:
    store = damaged(written, tmp_path)
    patch_unit(unit_file(store, "Audit", 0), 2, ">q", 12, 12345)
    assert any("tagsCode 12345" in p for p in check_consume_queues(store).problems)


def test_a_hole_is_named(written: Path, tmp_path: Path) -> None:
    store = damaged(written, tmp_path)
    path = unit_file(store, "Audit", 2)
    data = bytearray(path.read_bytes())
    data[5 * 20 : 6 * 20] = bytes(20)
    path.write_bytes(bytes(data))
    problems = check_consume_queues(store).problems
    assert any("Audit/2: unit 6 after the queue ended at 5" in p for p in problems), problems


def test_a_unit_pointing_at_another_queues_record_is_named(written: Path, tmp_path: Path) -> None:
    store = damaged(written, tmp_path)
    other = unit_file(store, "Orders", 2).read_bytes()[:8]
    path = unit_file(store, "Orders", 0)
    data = bytearray(path.read_bytes())
    data[0:8] = other
    path.write_bytes(bytes(data))
    problems = check_consume_queues(store).problems
    assert any("Orders/0 offset 0" in p and "belongs to Orders/2" in p for p in problems)
    assert any("has no unit" in p for p in problems), problems


def test_a_queue_behind_its_records_is_not_dispatched_yet(written: Path, tmp_path: Path) -> None:
    store = damaged(written, tmp_path)
    path = unit_file(store, "Orders", 1)
    data = bytearray(path.read_bytes())
    data[10 * 20 :] = bytes(len(data) - 10 * 20)
    path.write_bytes(bytes(data))
    check = check_consume_queues(store)
    assert check.problems == []
    assert check.undispatched == COUNT // 6 - 10
