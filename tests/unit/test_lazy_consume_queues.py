"""ConsumeQueue files mapped on demand under a bound (store/map_budget.py, store/segment.py) and
a restart that maps none of them after a clean stop (store/queue_summary.py).

Maps are counted (MapBudget.maps_opened, and a count of `Segment._map_file` calls), never timed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import StoreFactory
from tidemq.common.errors import ConfigError
from tidemq.common.files import fsync_dir
from tidemq.common.settings import from_properties
from tidemq.store import segment as segment_module
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import ConsumeQueue, QueueState
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.map_budget import MapBudget
from tidemq.store.message_store import MessageStore, Recovery
from tidemq.store.queue_summary import SUMMARY_FILE, decode, encode
from tidemq.store.record import MessageToStore, decode_record, encode_properties

CQ_FILE = 20 * 8  # 8 units a file: a queue of 20 messages spans 3 files
BOUND = 5
STORES = StoreFactory(
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=CQ_FILE,
    max_mapped_consume_queue_files=BOUND,
    max_index_num=4096,
)
TOPICS = 12
QUEUES = 2
PER_QUEUE = 20


def body(topic: int, queue_id: int, i: int) -> bytes:
    return f"t{topic}/q{queue_id}/{i}".encode()


async def fill(store: MessageStore) -> None:
    """PER_QUEUE messages to each of TOPICS x QUEUES queues, interleaved across queues."""
    props = encode_properties({"TAGS": "a"})
    for i in range(PER_QUEUE):
        for topic in range(TOPICS):
            for queue_id in range(QUEUES):
                msg = MessageToStore(f"T{topic}", queue_id, body(topic, queue_id, i), props)
                result = await store.put_message(msg)
                assert result.status is PutStatus.PUT_OK
    await store.reput.wait_idle()


def read_all(store: MessageStore, topic: int, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset_in_queue(f"T{topic}", queue_id)
    while True:
        r = store.get_message("g", f"T{topic}", queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [decode_record(m).body for m in r.messages]
        offset = r.next_begin_offset


def expected(topic: int, queue_id: int) -> list[bytes]:
    return [body(topic, queue_id, i) for i in range(PER_QUEUE)]


def mapped_segments(store: MessageStore) -> int:
    return sum(s.mapped for q in store.consume_queues.values() for s in q.segments)


def open_maps_of_process() -> int:
    """ConsumeQueue files this process maps now (/proc/self/maps)."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return sum("/consumequeue/" in line for line in lines)


async def test_more_queues_than_the_bound_stay_within_it_and_read_right(tmp_path: Path) -> None:
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
        files = sum(len(q.segments) for q in store.consume_queues.values())
        assert files == TOPICS * QUEUES * 3 > 4 * BOUND
        maps = store.consume_queue_maps
        assert len(maps) <= BOUND
        assert mapped_segments(store) <= BOUND
        assert maps.maps_released >= files - BOUND  # every file was mapped once at least
        assert open_maps_of_process() <= BOUND  # unmapped for real, not only forgotten
        for topic in range(TOPICS):
            for queue_id in range(QUEUES):
                assert read_all(store, topic, queue_id) == expected(topic, queue_id)
                assert mapped_segments(store) <= BOUND
        # A flush reaches files that are no longer mapped: nothing is left unflushed.
        await store.flusher.flush_consume_queues(0)
        for queue in store.consume_queues.values():
            for segment in queue.segments:
                assert segment.flushed == segment.committed
    finally:
        await store.stop()
    # Unmapped files lost nothing: a check of every queue after a crash finds them whole.
    (tmp_path / SUMMARY_FILE).unlink()
    (tmp_path / "abort").write_bytes(b"")
    store = STORES.open(tmp_path)
    try:
        assert store.recovery is Recovery.OTHER_BOOT
        for topic in range(TOPICS):
            for queue_id in range(QUEUES):
                assert read_all(store, topic, queue_id) == expected(topic, queue_id)
        assert len(store.consume_queue_maps) <= BOUND
    finally:
        await store.stop()


async def test_a_reader_holding_a_slice_survives_the_unmap(tmp_path: Path) -> None:
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
        queue = store.consume_queues[("T0", 0)]
        raw = queue.raw_units(0, 8)
        assert raw is not None
        before = raw.tobytes()
        for topic in range(1, TOPICS):  # maps every other queue's files: T0-0's go
            read_all(store, topic, 1)
        assert not queue.segments.segments[0].mapped
        assert raw.tobytes() == before  # still mapped for the slice
    finally:
        await store.stop()


async def test_a_new_queue_file_is_sparse(tmp_path: Path) -> None:
    stores = StoreFactory(mapped_file_size_consume_queue=300_000 * 20)
    store = stores.open(tmp_path)
    await store.start()
    try:
        msg = MessageToStore("Sparse", 0, b"x", encode_properties({}))
        assert (await store.put_message(msg)).status is PutStatus.PUT_OK
        await store.reput.wait_idle()
        path = store.consume_queues[("Sparse", 0)].segments.segments[0].path
        status = path.stat()
        assert status.st_size == 300_000 * 20  # the layout: full size
        assert status.st_blocks * 512 <= 64 * 1024  # a page or so, not 6 MB
    finally:
        await store.stop()


async def test_a_clean_restart_maps_no_queue_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
    finally:
        await store.stop()
    assert (tmp_path / SUMMARY_FILE).exists()
    maps: list[Path] = []
    original = segment_module.Segment._map_file

    def counting(self: segment_module.Segment, fd: int = -1) -> memoryview:
        maps.append(self.path)
        return original(self, fd)

    monkeypatch.setattr(segment_module.Segment, "_map_file", counting)
    store = STORES.open(tmp_path)
    try:
        assert store.recovery is Recovery.NORMAL
        assert maps == []  # 72 files, none mapped by the load
        assert not (tmp_path / SUMMARY_FILE).exists()  # taken: a crash cannot reuse it
        for topic in range(TOPICS):
            for queue_id in range(QUEUES):
                assert store.max_offset_in_queue(f"T{topic}", queue_id) == PER_QUEUE
                assert store.min_offset_in_queue(f"T{topic}", queue_id) == 0
        assert maps == []  # offsets come from the summary
        await store.start()
        # Sends continue every queue where it stopped; reads map on demand.
        props = encode_properties({})
        for topic in range(TOPICS):
            msg = MessageToStore(f"T{topic}", 0, body(topic, 0, PER_QUEUE), props)
            result = await store.put_message(msg)
            assert result.append is not None and result.append.queue_offset == PER_QUEUE
        await store.reput.wait_idle()
        for topic in range(TOPICS):
            assert read_all(store, topic, 0) == [*expected(topic, 0), body(topic, 0, PER_QUEUE)]
            assert read_all(store, topic, 1) == expected(topic, 1)
        assert maps  # mapped lazily
    finally:
        await store.stop()


async def test_a_file_changed_after_the_clean_stop_is_checked(tmp_path: Path) -> None:
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
    finally:
        await store.stop()
    victim = tmp_path / "consumequeue" / "T3" / "1" / f"{CQ_FILE:020d}"
    before = victim.read_bytes()
    victim.write_bytes(os.urandom(CQ_FILE))  # garbage in the middle file of T3-1
    store = STORES.open(tmp_path)
    try:
        # Checked at the queue's first use (store/lazy_check.py), not by the load.
        assert store.first_use_check.checked == 0
        assert read_all(store, 3, 1) == expected(3, 1)
        assert victim.read_bytes() == before  # rebuilt, not trusted
        assert (store.first_use_check.checked, store.first_use_check.rebuilt) == (1, 1)
        assert read_all(store, 3, 0) == expected(3, 0)  # unchanged: checked, not rebuilt
        assert (store.first_use_check.checked, store.first_use_check.rebuilt) == (2, 1)
    finally:
        await store.stop()


def test_the_summary_round_trips_and_refuses_damage() -> None:
    states = [
        (("A", 0), QueueState(0, 3, 47 * 20, 20, 9000, 123)),
        (("ß", 7), QueueState(0, 0, 0, 0, -1, 0)),
    ]
    data = encode(10, 99, states)
    summary = decode(data)
    assert (summary.commitlog_min, summary.commitlog_end) == (10, 99)
    assert dict(summary.queues) == dict(states)
    for cut in (len(data) - 1, 10):
        with pytest.raises(ValueError):
            decode(data[:cut])
    damaged = bytearray(data)
    damaged[30] ^= 1
    with pytest.raises(ValueError, match="checksum"):
        decode(bytes(damaged))


def test_the_bound_is_a_checked_key() -> None:
    config = from_properties(StoreConfig, {"maxMappedConsumeQueueFiles": "64"})
    assert config.max_mapped_consume_queue_files == 64
    for bad in ("0", "-3", "many"):
        with pytest.raises(ConfigError, match="maxMappedConsumeQueueFiles"):
            from_properties(StoreConfig, {"maxMappedConsumeQueueFiles": bad})


def test_the_budget_unmaps_the_least_recently_used() -> None:
    released: list[str] = []

    class Fake:
        def __init__(self, name: str) -> None:
            self.name = name

        def release_map(self) -> None:
            released.append(self.name)

    budget = MapBudget(2)
    a, b, c = Fake("a"), Fake("b"), Fake("c")
    budget.opened(a)
    budget.opened(b)
    budget.touch(a)
    budget.opened(c)
    assert released == ["b"] and len(budget) == 2
    budget.forget(a)
    assert len(budget) == 1
    with pytest.raises(ValueError):
        MapBudget(0)


async def test_an_empty_queue_file_left_by_a_power_cut_is_rebuilt(tmp_path: Path) -> None:
    """A file created sparse and never flushed may come back empty after a power cut."""
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
    finally:
        await store.stop()
    victim = tmp_path / "consumequeue" / "T5" / "0" / f"{2 * CQ_FILE:020d}"
    os.truncate(victim, 0)
    (tmp_path / "abort").write_bytes(b"")  # another boot
    store = STORES.open(tmp_path)
    try:
        assert victim.stat().st_size == CQ_FILE
        assert read_all(store, 5, 0) == expected(5, 0)
    finally:
        await store.stop()


async def test_recovery_after_a_crash_reads_and_writes_only_the_data_of_sparse_files(
    tmp_path: Path,
) -> None:
    """The check and the cut of an abnormal load touch a sparse file's data extents only: its
    never-written tail (nearly all of a 6 MB file) stays a hole, unread and unallocated."""
    stores = StoreFactory(mapped_file_size_consume_queue=300_000 * 20)
    store = stores.open(tmp_path)
    await store.start()
    props = encode_properties({})
    try:
        for queue_id in range(8):
            msg = MessageToStore("Sparse", queue_id, b"x", props)
            assert (await store.put_message(msg)).status is PutStatus.PUT_OK
        await store.reput.wait_idle()
    finally:
        await store.stop()
    (tmp_path / SUMMARY_FILE).unlink()
    (tmp_path / "abort").write_bytes(b"")
    store = stores.open(tmp_path)
    try:
        assert store.recovery is Recovery.OTHER_BOOT
        for queue_id in range(8):
            assert store.max_offset_in_queue("Sparse", queue_id) == 1
            path = store.consume_queues[("Sparse", queue_id)].segments.segments[0].path
            assert path.stat().st_blocks * 512 <= 64 * 1024
    finally:
        await store.stop()


async def test_a_clean_start_lists_opens_and_stats_no_queue_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the summary, the load touches nothing under consumequeue/; a queue's first use
    lists its folder and stats its files once; a stop writes untouched queues back unstat'ed."""
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
    finally:
        await store.stop()
    touched: list[str] = []
    for name in ("scandir", "stat", "open", "listdir", "lstat"):
        original = getattr(os, name)

        def recording(
            path: object, *args: object, _original: object = original, **kwargs: object
        ) -> object:
            name = str(path)
            if "/consumequeue/" in name or name.endswith("/consumequeue"):
                touched.append(name)
            return _original(path, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(os, name, recording)
    store = STORES.open(tmp_path)
    try:
        assert touched == []  # 24 queues, 72 files: not one name looked at
        assert store.max_offset_in_queue("T3", 1) == PER_QUEUE
        assert touched == []
        assert read_all(store, 3, 1) == expected(3, 1)
        folder = str(tmp_path / "consumequeue" / "T3" / "1")
        # One listing of its folder and a stat per file before its first map.
        assert sorted(p for p in touched if not p.startswith(folder + "/0")) == [folder]
        assert store.first_use_check.checked == 1
        touched.clear()
        await store.start()
    finally:
        await store.stop()
    # The stop summed up the 23 queues never used without a stat (only T3-1's files).
    assert {p.rsplit("/", 1)[0] for p in touched if "/consumequeue/T" in p} <= {folder}
    monkeypatch.undo()
    victim = tmp_path / "consumequeue" / "T7" / "0" / f"{CQ_FILE:020d}"
    victim.write_bytes(os.urandom(CQ_FILE))
    store = STORES.open(tmp_path)  # the summary passed on unstat'ed still catches a change
    try:
        assert read_all(store, 7, 0) == expected(7, 0)
        assert store.first_use_check.rebuilt == 1
    finally:
        await store.stop()


async def test_a_file_added_after_the_clean_stop_is_found_at_first_use(tmp_path: Path) -> None:
    """A queue's folder holding a file the summary does not list (here: a copy of another
    queue's next file) is recovered at first use: the file's units fail the CommitLog check."""
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
    finally:
        await store.stop()
    donor = tmp_path / "consumequeue" / "T1" / "0" / f"{2 * CQ_FILE:020d}"
    extra = tmp_path / "consumequeue" / "T2" / "0" / f"{3 * CQ_FILE:020d}"
    extra.write_bytes(donor.read_bytes())
    store = STORES.open(tmp_path)
    try:
        assert read_all(store, 2, 0) == expected(2, 0)
        assert store.first_use_check.rebuilt == 1
        assert store.max_offset_in_queue("T2", 0) == PER_QUEUE
        await store.start()
        props = encode_properties({})
        msg = MessageToStore("T2", 0, body(2, 0, PER_QUEUE), props)
        result = await store.put_message(msg)
        assert result.append is not None and result.append.queue_offset == PER_QUEUE
        await store.reput.wait_idle()
        assert read_all(store, 2, 0) == [*expected(2, 0), body(2, 0, PER_QUEUE)]
    finally:
        await store.stop()


async def test_a_flush_syncs_each_new_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 new topics of 2 queues: each queue folder, each topic folder and consumequeue/ once
    (31 syncs), not once per file that made them (50)."""
    synced: list[Path] = []
    original = fsync_dir

    def counting(folder: Path) -> None:
        synced.append(folder)
        original(folder)

    monkeypatch.setattr(segment_module, "fsync_dir", counting)
    store = STORES.open(tmp_path)
    await store.start()
    props = encode_properties({})
    try:
        (tmp_path / "consumequeue").mkdir(exist_ok=True)
        for topic in range(10):
            for queue_id in range(2):
                msg = MessageToStore(f"New{topic}", queue_id, b"x", props)
                assert (await store.put_message(msg)).status is PutStatus.PUT_OK
        await store.reput.wait_idle()
        await store.flusher.flush_consume_queues(0)
        queue_folders = [p for p in synced if "consumequeue" in str(p)]
        assert len(queue_folders) == len(set(queue_folders)) == 10 * 2 + 10 + 1
    finally:
        await store.stop()


def test_a_file_made_after_its_folder_was_synced_gets_its_own_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    original = fsync_dir

    def counting(folder: Path) -> None:
        synced.append(folder)
        original(folder)

    monkeypatch.setattr(segment_module, "fsync_dir", counting)
    budget = MapBudget(4)
    folder = tmp_path / "q"
    first = segment_module.Segment(folder / f"{0:020d}", 40, create=True, maps=budget)
    first.append(b"a" * 20)
    one_pass: segment_module.SyncedDirs = {}
    first.flush(0, one_pass)
    assert synced == [folder, tmp_path]
    second = segment_module.Segment(folder / f"{40:020d}", 40, create=True, maps=budget)
    second.append(b"b" * 20)
    second.flush(0, one_pass)  # made after the pass synced `folder`: synced again
    assert synced == [folder, tmp_path, folder]
    first.close()
    second.close()


async def test_a_flush_pass_looks_at_the_queues_written_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 queues; after one put, a flush pass flushes that queue alone. A queue a pass left
    with fewer pages than its least pages is not looked at by the next such pass (nothing could
    have changed that), only after it is written again, and by a pass of least pages 0."""
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await fill(store)
        await store.flusher.flush_consume_queues(0)
        assert store.dirty_queues == set()
        flushed: list[tuple[str, int]] = []
        original = ConsumeQueue.flush

        def counting(queue: ConsumeQueue, *args: Any) -> bool:
            flushed.append((queue.topic, queue.queue_id))
            return original(queue, *args)

        monkeypatch.setattr(ConsumeQueue, "flush", counting)

        async def put(queue_id: int) -> None:
            msg = MessageToStore("T4", queue_id, body(4, 1, PER_QUEUE), encode_properties({}))
            assert (await store.put_message(msg)).status is PutStatus.PUT_OK
            await store.reput.wait_idle()

        await put(1)
        await store.flusher.flush_consume_queues(1000)  # 1,000 pages least: not flushed
        assert flushed == [("T4", 1)]
        t4_1 = store.consume_queues[("T4", 1)]
        assert store.dirty_queues == set() and store.flusher.below_least_pages == {t4_1}
        await store.flusher.flush_consume_queues(1000)
        assert flushed == [("T4", 1)]  # not looked at again
        await put(2)
        t4_2 = store.consume_queues[("T4", 2)]
        await store.flusher.flush_consume_queues(1000)
        assert flushed == [("T4", 1), ("T4", 2)]
        assert store.flusher.below_least_pages == {t4_1, t4_2}
        await put(1)  # written again: looked at again
        await store.flusher.flush_consume_queues(1000)
        assert flushed == [("T4", 1), ("T4", 2), ("T4", 1)]
        await store.flusher.flush_consume_queues(0)  # the thorough pass: every one left
        assert sorted(flushed[3:]) == [("T4", 1), ("T4", 2)]
        assert store.dirty_queues == set() and store.flusher.below_least_pages == set()
        assert not t4_1.unflushed and not t4_2.unflushed
    finally:
        await store.stop()
