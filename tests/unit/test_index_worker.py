"""The index worker process: the same index as dispatch builds in process, queries see it,
a killed worker is replaced without duplicates, one writer at a time."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

import pytest

import tidemq.store.index_keeper as index_keeper_module
from tests.support.conditions import eventually
from tests.support.stores import StoreFactory
from tidemq.store.errors import StoreLockedError
from tidemq.store.index_worker import take_lock
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, encode_properties, pack_host

STORES = StoreFactory(
    mapped_file_size_commit_log=16384,
    max_message_size=2048,
    max_index_num=200,
    flush_interval_consume_queue=50,
    message_index_worker_enable=True,
)
make_config = STORES.config


def order(i: int) -> MessageToStore:
    """Order `i`: two topics (one not ASCII), two queues, keys to look up, some IPv6 hosts."""
    props = {"UNIQ_KEY": f"U{i:08d}", "KEYS": f"order-{i} 键{i % 7}", "TAGS": "A"}
    return MessageToStore(
        topic="Orders" if i % 3 else "话题",
        queue_id=i % 2,
        body=b"x" * (i % 100),
        properties=encode_properties(props),
        born_host=pack_host("fe80::1", 1) if i % 11 == 0 else pack_host("10.0.0.1", 1),
    )


async def put(store: MessageStore, first: int, count: int) -> None:
    for i in range(first, first + count):
        result = await store.put_message(order(i))
        assert result.append is not None, result.remark


def index_contents(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir()) if p.name.isdigit()]


def built_in_process(tmp_path: Path, source: Path) -> list[bytes]:
    """The index that load() builds in process from a copy of `source`'s CommitLog."""
    root = tmp_path / "reference"
    shutil.copytree(source / "commitlog", root / "commitlog")
    reference = MessageStore(make_config(root, message_index_worker_enable=False))
    reference.load()
    reference.close_files()
    return index_contents(root)


async def test_worker_builds_what_dispatch_builds_and_queries_see_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(make_config(root))
    store.load()
    await store.start()
    try:
        assert store.index_worker is not None and store.index_worker.running
        await put(store, 0, 300)
        await store.wait_index(timeout=10)
        found = store.query_message("Orders", "order-299", 10, 0, 2**62)
        assert [m.properties["UNIQ_KEY"] for m in found.messages] == ["U00000299"]
        found = store.query_message("话题", "U00000297", 10, 0, 2**62)
        assert [m.queue_offset for m in found.messages] == [49]  # 3, 9, ... 297 in queue 1
    finally:
        await store.stop()
    assert store.index_worker is None
    assert store.checkpoint.index_msg_timestamp > 0
    contents = index_contents(root)
    assert len(contents) > 1  # rolled over
    assert contents == built_in_process(tmp_path, root)


async def test_a_killed_worker_is_replaced_without_duplicates(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(make_config(root))
    store.load()
    await store.start()
    try:
        worker = store.index_worker
        assert worker is not None
        await put(store, 0, 150)
        await store.wait_index(timeout=10)
        process = worker._process
        assert process is not None
        # Killed while it is likely inside a batch: its torn entries are undone by the next one.
        worker.advance(store.reput.limit())
        store.reput.wakeup()
        await put(store, 150, 20)
        await asyncio.sleep(0.002)
        os.kill(process.pid, signal.SIGKILL)
        await put(store, 170, 130)
        await eventually(
            lambda: worker.running and worker._process is not process, "a new index worker"
        )
        assert worker.running and worker._process is not process
        await store.wait_index(timeout=10)
        found = store.query_message("Orders", "order-298", 10, 0, 2**62)
        assert len(found.messages) == 1
    finally:
        await store.stop()
    assert index_contents(root) == built_in_process(tmp_path, root)


async def test_load_waits_for_the_index_writer_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_keeper_module, "LOCK_WAIT", 0.2)
    root = tmp_path / "store"
    held = take_lock(root / "index", 0)
    try:
        with pytest.raises(StoreLockedError, match=r"index\.lock"):
            MessageStore(make_config(root)).load()
    finally:
        os.close(held)
    store = MessageStore(make_config(root))
    store.load()  # free now
    store.close_files()


def index_lock_is_held(root: Path) -> bool:
    try:
        fd = take_lock(root / "index", 0)
    except StoreLockedError:
        return True
    os.close(fd)
    return False


async def test_the_index_lock_passes_to_the_worker_without_a_free_moment(tmp_path: Path) -> None:
    """From the store to its worker, and from a worker to its replacement, the index lock is
    never free: each child holds it before it has run a line of its own (it is stopped at once).

    With a free moment there, a worker that was slow to start (a loaded machine) and whose store
    was killed meanwhile took the lock only after the next store had loaded and indexed; it then
    truncated the index at its own stale start and re-indexed only what its dead store had asked
    for, so queries by key no longer found messages indexed in between (one run in about thirty
    of tests/fault/test_store_crash.py -k killed).
    """
    root = tmp_path / "store"
    store = MessageStore(make_config(root))
    store.load()
    await store.start()
    await put(store, 0, 30)
    await store.stop()
    store = MessageStore(make_config(root))
    store.load()
    assert index_lock_is_held(root)  # the loaded store's own
    stopped: list[int] = []
    try:
        await store.start_index_worker()  # on a loaded store, as the benchmarks do
        worker = store.index_worker
        assert worker is not None and worker.pid is not None
        os.kill(worker.pid, signal.SIGSTOP)
        stopped.append(worker.pid)
        assert index_lock_is_held(root), "free between the store and its worker"
        os.kill(stopped.pop(), signal.SIGCONT)
        worker.kill()
        assert not index_lock_is_held(root)  # the worker's exit freed it
        worker.restart_at(0)
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGSTOP)
        stopped.append(worker.pid)
        assert index_lock_is_held(root), "free between a worker and its replacement"
        os.kill(stopped.pop(), signal.SIGCONT)
        # It works with the lock it was handed: it indexes everything again from 0.
        assert await worker.wait_indexed(store.max_phy_offset, timeout=10)
        found = store.query_message("Orders", "order-29", 10, 0, 2**62)
        assert [m.properties["UNIQ_KEY"] for m in found.messages] == ["U00000029"]
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        await store.stop()
    assert not index_lock_is_held(root)  # taken back from the worker, released with the files


async def test_restart_keeps_the_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(make_config(root))
    store.load()
    await store.start()
    await put(store, 0, 100)
    await store.stop()
    store = MessageStore(make_config(root))
    store.load()
    assert store.last_exit_ok
    await store.start()
    try:
        await put(store, 100, 50)
        await store.wait_index(timeout=10)
        for key in ("order-5", "order-121"):  # i % 3 != 0: topic Orders
            assert len(store.query_message("Orders", key, 10, 0, 2**62).messages) == 1
    finally:
        await store.stop()
    assert index_contents(root) == built_in_process(tmp_path, root)


async def test_the_worker_runs_below_the_broker_priority_also_after_a_restart(
    tmp_path: Path,
) -> None:
    store = MessageStore(make_config(tmp_path / "store"))
    store.load()
    await store.start()
    own = os.getpriority(os.PRIO_PROCESS, 0)
    expected = min(19, own + store.config.message_index_worker_nice)
    try:
        worker = store.index_worker
        assert worker is not None
        assert store.config.message_index_worker_nice == 10  # the default
        for first in (0, 10):
            await put(store, first, 10)
            await store.wait_index(timeout=10)  # the child is up and has indexed them
            uniq = f"U{first + 9:08d}"
            found = store.query_message(order(first + 9).topic, uniq, 10, 0, 2**62)
            assert [m.properties["UNIQ_KEY"] for m in found.messages] == [uniq]
            assert worker.pid is not None
            assert os.getpriority(os.PRIO_PROCESS, worker.pid) == expected
            worker.kill()
            worker.restart_at(worker.indexed)
    finally:
        await store.stop()
