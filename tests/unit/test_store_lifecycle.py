"""MessageStore life cycle: load/start/stop, the lock, flushing, delay, disk full, retention and the
transient store pool.
"""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from tests.support.messages import message
from tests.support.stores import StoreFactory
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import BrokerRole, FlushDiskType
from tidemq.store.errors import StoreLockedError
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.message_store import MessageStore, PutMessageResult
from tidemq.store.record import MessageBatch, MessageToStore, decode_record

FILE = 4096

STORES = StoreFactory(
    mapped_file_size_commit_log=FILE,
    flush_interval_commit_log=20,
    flush_interval_consume_queue=20,
    commit_interval_commit_log=20,
)
make_config = STORES.config
open_store = STORES.open
T0 = 4_102_444_800_000  # 2100-01-01: store times set from here are ahead of the clock


async def put_ok(store: MessageStore, msg: MessageToStore) -> PutMessageResult:
    result = await store.put_message(msg)
    assert result.status is PutStatus.PUT_OK, result.remark
    assert result.append is not None
    return result


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [decode_record(m).body for m in r.messages]
        offset = r.next_begin_offset


# --- load / start / stop / reload ----------------------------------------------------------


async def test_restart_keeps_offsets_and_continues(tmp_path: Path) -> None:
    queues = [("A", 0), ("A", 1), ("B", 0)]
    sent: dict[tuple[str, int], list[bytes]] = {q: [] for q in queues}
    phy_end = 0
    for round_no in range(3):
        store = open_store(tmp_path)
        assert store.last_exit_ok
        await store.start()
        assert (tmp_path / "abort").exists()
        try:
            assert store.max_phy_offset == phy_end
            for q in queues:
                assert store.max_offset_in_queue(*q) == len(sent[q])
                assert bodies(store, *q) == sent[q]
            for i in range(24):
                topic, queue_id = queues[i % 3]
                msg = message(
                    100 * round_no + i, topic=topic, queue_id=queue_id, KEYS=f"key-{round_no}-{i}"
                )
                result = await put_ok(store, msg)
                assert result.append is not None
                assert result.append.queue_offset == len(sent[(topic, queue_id)])
                assert result.append.wrote_offset >= phy_end
                phy_end = result.append.end_offset
                sent[(topic, queue_id)].append(msg.body)
            await store.reput.wait_idle()
            for q in queues:
                assert bodies(store, *q) == sent[q]
            last_ts = store.commitlog.last_store_timestamp
        finally:
            await store.stop()
        assert not (tmp_path / "abort").exists()
        checkpoint = (tmp_path / "checkpoint").read_bytes()
        assert len(checkpoint) == 4096
        physic, logics, _index = struct.unpack_from(">qqq", checkpoint)
        assert physic == logics == last_ts
    assert len(list((tmp_path / "commitlog").iterdir())) >= 3
    store = open_store(tmp_path)
    try:
        assert store.commitlog.topic_queue_table == {f"{t}-{q}": 24 for t, q in queues}
        found = store.query_message("A", "key-1-3", 10, 0, 2**62)
        assert [m.body for m in found.messages] == [message(103, topic="A", queue_id=0).body]
    finally:
        await store.stop()


async def test_second_store_on_the_same_root_is_refused(tmp_path: Path) -> None:
    first = open_store(tmp_path)
    second = MessageStore(make_config(tmp_path))
    with pytest.raises(StoreLockedError) as info:
        second.load()
    assert str(tmp_path / "lock") in str(info.value)
    await first.stop()
    second.load()  # free again once the first has stopped
    await second.stop()


async def test_sync_flush_put_is_flushed(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    await store.start()
    try:
        for i in range(30):
            result = await put_ok(store, message(i, topic="S", queue_id=0))
            assert result.append is not None
            assert store.commitlog.segments.flushed_where >= result.append.end_offset
            last = store.commitlog.segments.last
            assert last is not None and last.flushed == last.wrote
        # Concurrent puts share flushes and all come back flushed.
        results = await asyncio.gather(
            *(store.put_message(message(i, topic="S", queue_id=1)) for i in range(20))
        )
        assert all(r.status is PutStatus.PUT_OK for r in results)
        end = max(r.append.end_offset for r in results if r.append is not None)
        assert store.commitlog.segments.flushed_where >= end
    finally:
        await store.stop()


async def test_sync_flush_timeout_still_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=50)
    await store.start()
    try:

        async def stuck(least_pages: int) -> bool:
            await asyncio.sleep(0.5)
            return False

        monkeypatch.setattr(store.flusher, "flush_commitlog", stuck)
        result = await store.put_message(message(0, topic="S", queue_id=0))
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert result.ok
        monkeypatch.undo()
    finally:
        await store.stop()


async def test_abort_file_is_kept_when_dispatch_is_stalled(tmp_path: Path) -> None:
    store = open_store(tmp_path, broker_role=BrokerRole.SLAVE)
    refused = await store.put_message(message(0, topic="S", queue_id=0))
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "slave" in refused.remark
    await store.start()
    try:
        store.append_to_commitlog(0, b"\xaa" * 300)  # a complete, malformed "record"
        await store.reput.wait_idle()
        assert store.reput.stalled_at == 0
    finally:
        await store.stop()
    assert (tmp_path / "abort").exists()  # the next load recovers abnormally


# --- delayed messages -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "level", "delay_ms"),
    [("1", 1, 1000), ("3", 3, 10_000), ("18", 18, 7_200_000), ("99", 18, 7_200_000)],
)
async def test_delay_moves_message_to_schedule_topic(
    tmp_path: Path, delay: str, level: int, delay_ms: int
) -> None:
    store = open_store(tmp_path)
    try:
        store.commitlog.last_store_timestamp = T0
        result = await put_ok(
            store, message(0, topic="Real", queue_id=5, TAGS="TagA", DELAY=delay, KEYS="k")
        )
        assert result.append is not None and result.append.store_timestamp == T0
        store.reput.dispatch_available(1 << 62)
        stored = store.look_message_by_offset(result.append.wrote_offset)
        assert stored is not None
        assert (stored.topic, stored.queue_id) == ("SCHEDULE_TOPIC_XXXX", level - 1)
        assert stored.properties["REAL_TOPIC"] == "Real"
        assert stored.properties["REAL_QID"] == "5"
        assert stored.properties["DELAY"] == str(level)
        assert stored.properties["TAGS"] == "TagA"
        assert store.find_consume_queue("Real", 5) is None
        queue = store.find_consume_queue("SCHEDULE_TOPIC_XXXX", level - 1)
        assert queue is not None
        unit = queue.unit(0)
        assert unit is not None
        assert unit.tags_code == T0 + delay_ms  # the delivery time
        assert unit.physical_offset == result.append.wrote_offset
    finally:
        await store.stop()


async def test_no_delay_for_level_zero_or_prepared_transactions(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        plain = await put_ok(store, message(0, topic="Real", queue_id=0, DELAY="0"))
        prepared = message(1, topic="Real", queue_id=0, DELAY="2")
        prepared.sys_flag = 0x4
        tran = await put_ok(store, prepared)
        for result in (plain, tran):
            assert result.append is not None
            stored = store.look_message_by_offset(result.append.wrote_offset)
            assert stored is not None and stored.topic == "Real"
            assert "REAL_TOPIC" not in stored.properties
    finally:
        await store.stop()


# --- disk full and retention ----------------------------------------------------------------


def not_this_hour() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


async def test_disk_full_refuses_writes_until_space_is_back(tmp_path: Path) -> None:
    usage = [0.5]
    store = open_store(tmp_path, disk_usage=lambda p: usage[0], delete_when=not_this_hour())
    try:
        for i in range(5):
            await put_ok(store, message(i, topic="D", queue_id=0))
        await store.cleaner.tick()
        assert not store.disk_full
        usage[0] = 0.95
        await store.cleaner.tick()
        assert store.disk_full
        end = store.max_phy_offset
        result = await store.put_message(message(99, topic="D", queue_id=0))
        assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "disk is full" in result.remark
        assert not result.ok
        one = message(100, topic="D", queue_id=0)
        batch = await store.put_message_batch(
            MessageBatch("D", 0, encode_batch_body([(0, one.body, one.properties)]))
        )
        assert batch.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert store.max_phy_offset == end
        usage[0] = 0.5
        await store.cleaner.tick()
        assert not store.disk_full
        result = await put_ok(store, message(101, topic="D", queue_id=0))
        assert result.append is not None and result.append.queue_offset == 5
    finally:
        await store.stop()


async def _fill_files(store: MessageStore, files: int) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    i = 0
    while len(store.commitlog.segments) < files:
        q = ("R", i % 2)
        await put_ok(store, message(i, topic="R", queue_id=i % 2))
        counts[q] = counts.get(q, 0) + 1
        i += 1
    for k in range(6):  # both queues get messages in the last file
        q = ("R", k % 2)
        await put_ok(store, message(i + k, topic="R", queue_id=k % 2))
        counts[q] += 1
    assert len(store.commitlog.segments) == files
    store.reput.dispatch_available(1 << 62)
    return counts


async def test_retention_deletes_expired_files_and_queue_minimums_follow(tmp_path: Path) -> None:
    store = open_store(
        tmp_path,
        file_reserved_time=0,
        delete_when=not_this_hour(),
        disk_usage=lambda p: 0.1,
        mapped_file_size_consume_queue=20 * 8,
    )
    try:
        counts = await _fill_files(store, 5)
        await store.cleaner.tick()  # not the hour, disk fine, no request: nothing goes
        assert len(store.commitlog.segments) == 5
        store.cleaner.delete_now()
        await store.cleaner.tick()
        last = store.commitlog.segments.last
        assert last is not None
        assert store.commitlog.min_offset == last.start_offset == 4 * FILE
        assert sorted(p.name for p in (tmp_path / "commitlog").iterdir()) == [f"{4 * FILE:020d}"]
        for (topic, queue_id), count in counts.items():
            queue = store.find_consume_queue(topic, queue_id)
            assert queue is not None
            first = queue.unit(queue.min_offset)
            before = queue.unit(queue.min_offset - 1)
            assert first is not None and first.physical_offset >= 4 * FILE
            assert before is None or before.physical_offset < 4 * FILE
            assert queue.max_offset == count
            r = store.get_message("g", topic, queue_id, 0, 32)
            assert (r.status, r.next_begin_offset) == (
                GetMessageStatus.OFFSET_TOO_SMALL,
                queue.min_offset,
            )
            # Whole ConsumeQueue files below the minimum are gone too.
            assert queue.segments.min_offset <= queue.min_offset * 20
            assert queue.segments.min_offset > 0
        minimums = {q: store.min_offset_in_queue(*q) for q in counts}
    finally:
        await store.stop()
    store = open_store(tmp_path, mapped_file_size_consume_queue=20 * 8)
    try:
        assert {q: store.min_offset_in_queue(*q) for q in counts} == minimums
        assert {q: store.max_offset_in_queue(*q) for q in counts} == counts
    finally:
        await store.stop()


async def test_fresh_files_are_kept_by_a_manual_delete(tmp_path: Path) -> None:
    store = open_store(tmp_path, delete_when=not_this_hour(), disk_usage=lambda p: 0.1)
    try:
        await _fill_files(store, 3)
        store.cleaner.delete_now()
        await store.cleaner.tick()  # fileReservedTime 72 h: nothing has expired
        assert len(store.commitlog.segments) == 3
    finally:
        await store.stop()


# --- transient store pool ---------------------------------------------------------------------


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


async def _put_fixed_time(store: MessageStore, msgs: list[MessageToStore]) -> None:
    for msg in msgs:
        store.commitlog.last_store_timestamp = T0
        await put_ok(store, msg)


async def test_transient_store_pool_reads_after_commit_and_matches_normal_store(
    tmp_path: Path,
) -> None:
    pooled = open_store(
        tmp_path / "pool", transient_store_pool_enable=True, message_index_enable=False
    )
    normal = open_store(tmp_path / "plain", message_index_enable=False)
    assert pooled.pool is not None and normal.pool is None
    try:
        for round_no in range(3):  # commit between rounds: buffers go back and are reused
            msgs = [
                message(50 * round_no + i, topic="P", queue_id=i % 2, TAGS="t") for i in range(45)
            ]
            before = pooled.max_phy_offset
            await _put_fixed_time(pooled, msgs)
            await _put_fixed_time(
                normal,
                [
                    message(50 * round_no + i, topic="P", queue_id=i % 2, TAGS="t")
                    for i in range(45)
                ],
            )
            pooled.reput.dispatch_available(1 << 62)
            normal.reput.dispatch_available(1 << 62)
            # Nothing is readable before the commit.
            assert pooled.reput.reput_from_offset == before
            assert pooled.get_commitlog_data(before) is None
            assert pooled.commitlog.get_record(before, 8) is None
            assert pooled.max_offset_in_queue("P", 0) == 23 * round_no
            assert pooled.commitlog.segments.commit(0)
            pooled.on_committed()
            pooled.reput.dispatch_available(1 << 62)
            assert pooled.max_phy_offset == normal.max_phy_offset
            for q in (0, 1):
                assert bodies(pooled, "P", q) == bodies(normal, "P", q)
        assert pooled.pool.available >= 1
        assert len(pooled.commitlog.segments) > pooled.config.transient_store_pool_size
    finally:
        await pooled.stop()
        await normal.stop()
    assert tree(tmp_path / "pool" / "commitlog") == tree(tmp_path / "plain" / "commitlog")
    assert tree(tmp_path / "pool" / "consumequeue") == tree(tmp_path / "plain" / "consumequeue")


async def test_transient_store_pool_commit_service(tmp_path: Path) -> None:
    store = open_store(tmp_path, transient_store_pool_enable=True)
    arrived = asyncio.Event()
    seen: list[int] = []

    def on_arrival(topic: str, queue_id: int, max_offset: int, tags_code: int, ts: int) -> None:
        seen.append(max_offset)
        if max_offset == 30:
            arrived.set()

    store.add_arrival_listener(on_arrival)
    await store.start()
    try:
        for i in range(30):
            await put_ok(store, message(i, topic="C", queue_id=0))
        await asyncio.wait_for(arrived.wait(), 5)  # the commit service made them readable
        # One call per queue and tagsCode for each run of units dispatch writes together.
        assert seen == sorted(set(seen))
        assert seen[-1] == 30
        assert len(bodies(store, "C", 0)) == 30
    finally:
        await store.stop()
    store = open_store(tmp_path)
    try:
        assert store.max_offset_in_queue("C", 0) == 30
    finally:
        await store.stop()


# --- checkpoint -------------------------------------------------------------------------------


def test_checkpoint_layout_and_concurrent_flushes(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    checkpoint = StoreCheckpoint(path)
    assert checkpoint.min_timestamp == 0
    checkpoint.physic_msg_timestamp = 9000
    checkpoint.logics_msg_timestamp = 5000
    checkpoint.index_msg_timestamp = 1000
    errors: list[BaseException] = []

    def work() -> None:
        # Flushes from worker threads overlap when a service is stopped mid-flush.
        for _ in range(25):
            try:
                checkpoint.flush()
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]
    data = path.read_bytes()
    assert len(data) == 4096
    assert data == struct.pack(">qqq", 9000, 5000, 1000) + bytes(4096 - 24)
    again = StoreCheckpoint(path)
    assert (again.physic_msg_timestamp, again.logics_msg_timestamp) == (9000, 5000)
    assert again.min_timestamp == 2000  # min(physic, logics) - 3 s
    assert again.min_timestamp_index == 1000


async def test_segment_and_index_files_have_their_blocks_reserved(tmp_path: Path) -> None:
    """Created files are preallocated (store.segment.preallocate) where the file system can."""
    probe = tmp_path / "probe"
    with probe.open("wb") as f:
        try:
            os.posix_fallocate(f.fileno(), 0, 1 << 20)
            can_reserve = True
        except OSError:
            can_reserve = False
    probe.unlink()
    store = open_store(tmp_path, message_index_enable=True)
    try:
        await put_ok(store, message(0, topic="T", queue_id=0, KEYS="k"))
        store.reput.dispatch_available(1 << 62)
        files = [
            path
            for folder in ("commitlog", "consumequeue", "index")
            for path in (tmp_path / folder).rglob("*")
            if path.is_file()
        ]
        assert {path.relative_to(tmp_path).parts[0] for path in files} == {
            "commitlog",
            "consumequeue",
            "index",
        }
        for path in files:
            stat = path.stat()
            assert (stat.st_blocks * 512 >= stat.st_size) is can_reserve, path
    finally:
        await store.stop()
