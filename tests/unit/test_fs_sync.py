"""One syncfs for a flush pass over many new ConsumeQueue files (store/fs_sync.py): the pass
then makes none of their own fdatasync or folder fsync calls, every unit reads back after a
crash-style reload, and below the threshold or off the synced file system nothing changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.stores import StoreFactory
from tidemq.store import flushing as flushing_module
from tidemq.store import fs_sync
from tidemq.store import segment as segment_module
from tidemq.store.commitlog import PutStatus
from tidemq.store.fs_sync import SYNCFS_AT_SEGMENTS, _kernel_reports_errors
from tidemq.store.message_store import MessageStore
from tidemq.store.queue_summary import SUMMARY_FILE
from tidemq.store.record import MessageToStore, decode_record, encode_properties

# The periodic ConsumeQueue flush is kept out of the way (a pass every 10 min): the tests count
# the syncs of their own passes, and a thorough periodic pass (every 60 s) that ran while a slow
# machine was still putting took one file's fdatasync away from them (127 of 128 counted; with
# every tick thorough it fails each time).
STORES = StoreFactory(mapped_file_size_consume_queue=20 * 60, flush_interval_consume_queue=600_000)

pytestmark = pytest.mark.skipif(not fs_sync.syncfs_available(), reason="no syncfs (Linux 5.8+)")


class Calls:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.syncfs: list[Path] = []
        self.fdatasync = 0
        self.folders: list[Path] = []
        real_syncfs, real_fdatasync, real_dir = (
            fs_sync.sync_file_system,
            os.fdatasync,
            segment_module.fsync_dir,
        )

        def syncfs(folder: Path) -> int:
            self.syncfs.append(folder)
            return real_syncfs(folder)

        def fdatasync(fd: int) -> None:
            # ConsumeQueue files only (not the index's or the checkpoint's)
            self.fdatasync += "/consumequeue/" in os.readlink(f"/proc/self/fd/{fd}")
            real_fdatasync(fd)

        def fsync_dir(folder: Path) -> None:
            self.folders.append(folder)
            real_dir(folder)

        monkeypatch.setattr(flushing_module, "sync_file_system", syncfs)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(segment_module, "fsync_dir", fsync_dir)


async def put_to_new_queues(store: MessageStore, topics: int) -> None:
    props = encode_properties({})
    for topic in range(topics):
        for queue_id in range(2):
            msg = MessageToStore(f"New{topic}", queue_id, f"{topic}-{queue_id}".encode(), props)
            assert (await store.put_message(msg)).status is PutStatus.PUT_OK
    await store.reput.wait_idle()


def queue_files(root: Path) -> int:
    return sum(1 for path in (root / "consumequeue").rglob("0*") if path.is_file())


async def test_a_pass_over_many_new_queue_files_is_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    store = STORES.open(tmp_path)
    await store.start()
    topics = SYNCFS_AT_SEGMENTS  # 2 queues each: twice the threshold
    try:
        await put_to_new_queues(store, topics)
        calls.fdatasync, calls.folders = 0, []
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
        assert len(calls.syncfs) == 1
        assert calls.fdatasync == 0 and calls.folders == []  # all covered by the syncfs
        assert not any(queue.unflushed for queue in store.consume_queues.values())
        # written after it: synced on its own by the next pass
        await put_to_new_queues(store, 1)
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
        assert len(calls.syncfs) == 1 and calls.fdatasync >= 1
    finally:
        await store.stop()
    assert queue_files(tmp_path) == topics * 2
    # a crash-style reload reads the files themselves
    (tmp_path / SUMMARY_FILE).unlink()
    (tmp_path / "abort").write_bytes(b"")
    reopened = STORES.open(tmp_path)
    try:
        for topic in (1, topics - 1):
            found = reopened.get_message("g", f"New{topic}", 1, 0, 32)
            assert [decode_record(m).body for m in found.messages] == [f"{topic}-1".encode()]
    finally:
        await reopened.stop()


async def test_a_pass_over_few_files_syncs_each_and_no_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await put_to_new_queues(store, SYNCFS_AT_SEGMENTS // 2 - 1)
        calls.fdatasync = 0
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
        assert calls.syncfs == []
        assert calls.fdatasync == SYNCFS_AT_SEGMENTS - 2
    finally:
        await store.stop()


async def test_files_on_another_file_system_keep_their_own_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    monkeypatch.setattr(flushing_module, "sync_file_system", lambda folder: -1)  # no st_dev
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await put_to_new_queues(store, SYNCFS_AT_SEGMENTS)
        calls.fdatasync = 0
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
        assert calls.fdatasync == 2 * SYNCFS_AT_SEGMENTS
    finally:
        await store.stop()


async def test_a_failed_syncfs_marks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)

    def failing(folder: Path) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(flushing_module, "sync_file_system", failing)
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await put_to_new_queues(store, SYNCFS_AT_SEGMENTS)
        calls.fdatasync = 0
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
        assert calls.fdatasync == 2 * SYNCFS_AT_SEGMENTS
    finally:
        await store.stop()


def test_syncfs_is_used_from_linux_5_8() -> None:
    assert not _kernel_reports_errors("5.4.0-150-generic")
    assert not _kernel_reports_errors("4.19.0")
    assert _kernel_reports_errors("5.8.0") and _kernel_reports_errors("6.1.0-13-amd64")
    assert not _kernel_reports_errors("weird")


async def test_a_file_system_whose_syncfs_is_not_durable_gets_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    monkeypatch.setattr(fs_sync, "file_system_type", lambda fd: 0x65735546)  # FUSE
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await put_to_new_queues(store, SYNCFS_AT_SEGMENTS)
        calls.fdatasync = 0
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
        assert calls.fdatasync == 2 * SYNCFS_AT_SEGMENTS
    finally:
        await store.stop()


async def test_a_running_pass_syncs_each_file_and_the_stop_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While sends are served a syncfs would write back the whole file system's dirty pages:
    only the stop's last pass takes it."""
    calls = Calls(monkeypatch)
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await put_to_new_queues(store, SYNCFS_AT_SEGMENTS)
        calls.fdatasync = 0
        await store.flusher.flush_consume_queues(0)
        assert calls.syncfs == [] and calls.fdatasync == 2 * SYNCFS_AT_SEGMENTS
        await put_to_new_queues(store, 2 * SYNCFS_AT_SEGMENTS)  # 64 more topics, 128 files
    finally:
        calls.fdatasync = 0
        await store.stop()
    assert len(calls.syncfs) == 1 and calls.fdatasync == 0
