"""New ConsumeQueue files while the store runs (store/dispatch.py, `segment.create_sparse`,
`MapBudget.creating`): a backlog's files are made in one trip to a worker thread, a single new
file (a send to a new queue, a roll-over) on the loop without a trip; dispatch goes on from the
record that needed it, and a file nobody adopted is removed.

Which thread creates each file is recorded (an `os.open` with O_CREAT under consumequeue/),
never timed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.stores import StoreFactory
from tidemq.store import dispatch as dispatch_module
from tidemq.store.commitlog import PutStatus
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.map_budget import MapBudget
from tidemq.store.message_store import MessageStore, Recovery
from tidemq.store.queue_summary import SUMMARY_FILE
from tidemq.store.record import MessageToStore, decode_record, encode_properties
from tidemq.store.segment import SparseFile, create_sparse

CQ_FILE = 20 * 4  # 4 units a file: 10 messages a queue span 3 files (two roll-overs)
STORES = StoreFactory(
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=CQ_FILE,
    max_mapped_consume_queue_files=6,
)
TOPICS = 6
QUEUES = 2
PER_QUEUE = 10


def body(topic: int, queue_id: int, i: int) -> bytes:
    return f"t{topic}/q{queue_id}/{i}".encode()


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [decode_record(m).body for m in r.messages]
        offset = r.next_begin_offset


@pytest.fixture
def creations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(file name, made on the main thread) of every ConsumeQueue file created from now on."""
    made: list[tuple[str, bool]] = []
    original = os.open

    def recording(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_CREAT and "consumequeue" in str(path):
            made.append((str(path), threading.current_thread() is threading.main_thread()))
        return original(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", recording)
    return made


async def test_a_put_dispatched_alone_has_its_one_file_made_on_the_loop(
    tmp_path: Path, creations: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """New queues and roll-overs to a queue's next file (each put dispatched alone, so every
    file is needed at the start of a run, and no other): each made on the loop, no trip to a
    worker, every unit in order."""
    trips: list[int] = []

    async def counting(self: dispatch_module.ReputService) -> None:
        trips.append(1)

    monkeypatch.setattr(dispatch_module.ReputService, "_make_files", counting)
    store = STORES.open(tmp_path)
    await store.start()
    props = encode_properties({})
    try:
        for i in range(PER_QUEUE):
            for topic in range(TOPICS):
                for queue_id in range(QUEUES):
                    msg = MessageToStore(f"T{topic}", queue_id, body(topic, queue_id, i), props)
                    result = await store.put_message(msg)
                    assert result.status is PutStatus.PUT_OK
                    await store.reput.wait_idle()
        files = sum(len(q.segments) for q in store.consume_queues.values())
        assert files == TOPICS * QUEUES * 3
        assert len(creations) == files
        assert [path for path, on_loop in creations if not on_loop] == []
        assert trips == []
        assert store.consume_queue_maps.creating == {}  # every one adopted
        for topic in range(TOPICS):
            for queue_id in range(QUEUES):
                want = [body(topic, queue_id, i) for i in range(PER_QUEUE)]
                assert read_all(store, f"T{topic}", queue_id) == want
    finally:
        await store.stop()
    # Made off the loop and durable as any other: a crash-style reload finds every unit.
    (tmp_path / SUMMARY_FILE).unlink()
    (tmp_path / "abort").write_bytes(b"")
    store = STORES.open(tmp_path)
    try:
        assert store.recovery is Recovery.OTHER_BOOT
        for topic in range(TOPICS):
            for queue_id in range(QUEUES):
                want = [body(topic, queue_id, i) for i in range(PER_QUEUE)]
                assert read_all(store, f"T{topic}", queue_id) == want
    finally:
        await store.stop()


async def test_a_batch_to_new_queues_is_dispatched_whole_and_in_order(
    tmp_path: Path, creations: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many records to many new queues in one chunk: dispatch stops before the first new
    queue's first record, has its file made with those of the records after it (one trip to
    the worker), and takes up again from there (no record lost or repeated)."""
    trips: list[int] = []
    original = dispatch_module.ReputService._make_files

    async def counting(self: dispatch_module.ReputService) -> None:
        trips.append(1 + len(self._files_ahead))
        await original(self)

    monkeypatch.setattr(dispatch_module.ReputService, "_make_files", counting)
    store = StoreFactory(mapped_file_size_consume_queue=20 * 1000).open(tmp_path)
    props = encode_properties({})
    try:
        for i in range(3):  # appended before dispatch runs: one backlog
            for queue in range(40):
                msg = MessageToStore(f"N{queue}", 0, body(queue, 0, i), props)
                assert (await store.put_message(msg)).status is PutStatus.PUT_OK
        await store.start()
        await store.reput.wait_idle()
        assert trips == [40]
        assert len(creations) == 40
        assert [path for path, on_loop in creations if on_loop] == []
        for queue in range(40):
            assert read_all(store, f"N{queue}", 0) == [body(queue, 0, i) for i in range(3)]
    finally:
        await store.stop()


async def test_recovery_dispatch_adopts_a_file_still_being_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dispatch_all` on the loop (a slave's cut) while the worker is still making a queue's
    file: it waits for that file and adopts it (no second creation, no EEXIST); the running
    service then goes on without making it again."""
    release = threading.Event()
    made: list[str] = []

    def slow_create(path: Path, size: int) -> SparseFile:
        release.wait(30)
        made.append(path.name)
        return create_sparse(path, size)

    monkeypatch.setattr(dispatch_module, "create_sparse", slow_create)
    monkeypatch.setattr(dispatch_module, "FILES_MADE_ON_LOOP", 0)  # even one goes to the worker
    store = StoreFactory(mapped_file_size_consume_queue=20 * 1000).open(tmp_path)
    await store.start()
    try:
        msg = MessageToStore("Slow", 3, b"first", encode_properties({}))
        # The send is answered once its record is readable: after the file is made.
        put = asyncio.create_task(store.put_message(msg))
        maps = store.consume_queue_maps
        await eventually(lambda: maps.creating, "a file being made", 30)
        assert not put.done()
        threading.Timer(0.05, release.set).start()  # the loop is about to wait on the worker
        store.reput.dispatch_all()
        assert read_all(store, "Slow", 3) == [b"first"]
        assert (await put).status is PutStatus.PUT_OK
        await store.reput.wait_idle()
        assert made == ["0" * 20] and maps.creating == {}
        assert read_all(store, "Slow", 3) == [b"first"]
    finally:
        release.set()
        await store.stop()


def test_a_file_made_for_nobody_is_removed(tmp_path: Path) -> None:
    budget = MapBudget(2)
    path = tmp_path / "q" / ("0" * 20)
    future: Future[SparseFile] = Future()
    future.set_result(create_sparse(path, 4096))
    budget.creating[path] = future
    failed: Future[SparseFile] = Future()
    failed.set_exception(OSError(28, "No space left on device"))
    budget.creating[tmp_path / "full"] = failed
    fd = future.result()[0]
    budget.discard_creations()
    assert not path.exists()
    assert budget.creating == {}
    with pytest.raises(OSError):
        os.fstat(fd)  # closed


async def test_a_send_to_a_new_queue_is_readable_once_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read your writes: the first send to a queue made its file off the loop and was answered
    before dispatch had made its record readable (a pull right after it found nothing: 11
    tests of make test, a 4.x consumer started after the send)."""

    def slow_create(path: Path, size: int) -> SparseFile:
        time.sleep(0.2)  # a busy disk: the worker's trip outlasts the send's own path
        return create_sparse(path, size)

    monkeypatch.setattr(dispatch_module, "create_sparse", slow_create)
    monkeypatch.setattr(dispatch_module, "FILES_MADE_ON_LOOP", 0)  # even one goes to the worker
    store = StoreFactory(mapped_file_size_consume_queue=20 * 1000).open(tmp_path)
    await store.start()
    try:
        for queue in range(3):
            body = f"first of {queue}".encode()
            msg = MessageToStore("Fresh", queue, body, encode_properties({}))
            assert (await store.put_message(msg)).status is PutStatus.PUT_OK
            assert read_all(store, "Fresh", queue) == [body]
    finally:
        await store.stop()


def test_a_new_file_names_every_folder_whose_entry_is_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the first flush syncs (`Segment._unsynced_dirs`): the file's folder, and the parent
    of each folder made for it: a new topic's first queue, another queue of it, another file of
    that queue. A folder another thread makes between the failed mkdir below it and this one's
    own still counts as new here (its maker's file may never be adopted)."""
    root = tmp_path / "consumequeue"
    root.mkdir()
    name = "0" * 20
    fd, folders = create_sparse(root / "T" / "0" / name, 4096)
    os.close(fd)
    assert folders == (root / "T" / "0", root / "T", root)
    fd, folders = create_sparse(root / "T" / "1" / name, 4096, first_page=False)
    os.close(fd)
    assert folders == (root / "T" / "1", root / "T")
    fd, folders = create_sparse(root / "T" / "1" / ("1" + name[1:]), 4096)
    os.close(fd)
    assert folders == (root / "T" / "1",)
    assert (root / "T" / "1" / name).stat().st_size == 4096

    original = os.mkdir
    tries: list[str] = []

    def raced(path: object, *args: object, **kwargs: object) -> None:
        tries.append(str(path))
        if str(path) == str(root / "U" / "0") and len(tries) == 3:
            original(path)  # type: ignore[arg-type]  # another thread was first
        original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "mkdir", raced)
    fd, folders = create_sparse(root / "U" / "0" / name, 4096)
    os.close(fd)
    assert folders == (root / "U" / "0", root / "U", root)
    assert tries == [str(root / "U" / "0"), str(root / "U"), str(root / "U" / "0")]
