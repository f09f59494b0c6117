"""MessageStore.start/stop: the order its services start and stop in, what stop does at the end,
and a start that fails part way stopping what it had started; a periodic service's and group
commit's stop on their own.

The order is recorded by wrapping, before the store is built, the methods that start and stop
each part; a service's start or stop is recorded only when it changes whether it runs (a stop of
a service that is not running does nothing).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.stores import StoreFactory
from tidemq.store import message_store
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.config import FlushDiskType
from tidemq.store.dispatch import ReputService
from tidemq.store.index_keeper import IndexKeeper
from tidemq.store.message_store import MessageStore
from tidemq.store.services import (
    CleanService,
    CommitService,
    FlushCommitLogService,
    FlushConsumeQueueService,
    GroupCommitService,
    PeriodicService,
)
from tidemq.store.store_lock import StoreLock

# Long intervals: no periodic flush runs while the order is recorded.
STORES = StoreFactory(
    flush_interval_commit_log=600_000,
    flush_interval_consume_queue=600_000,
    commit_interval_commit_log=600_000,
    clean_resource_interval=600_000,
)
SERVICES = (
    GroupCommitService,
    FlushCommitLogService,
    CommitService,
    FlushConsumeQueueService,
    ReputService,
    CleanService,
)
# ASYNC_FLUSH with the transient store pool (commit service), and SYNC_FLUSH (group commit).
POOLED = {"flush_disk_type": FlushDiskType.ASYNC_FLUSH, "transient_store_pool_enable": True}
SYNC = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}

POOLED_START = [
    "start FlushCommitLogService",
    "start CommitService",
    "start FlushConsumeQueueService",
    "start index worker",
    "start ReputService",
    "start CleanService",
    "write abort file",
]
POOLED_STOP = [
    "stop CleanService",
    "stop CommitService",  # its last commit makes everything readable, before dispatch ends
    "wait until dispatch is idle",
    "stop ReputService",
    "stop index worker",
    "stop FlushCommitLogService",
    "stop FlushConsumeQueueService",  # after the CommitLog's last flush
    "flush checkpoint",  # FlushConsumeQueueService's last flush ends with it
    "flush checkpoint",  # the store's own, once every service has stopped
    "close files (abort file gone)",
    "release lock",
]
SYNC_START = [
    "start GroupCommitService",
    "start FlushConsumeQueueService",
    "start index worker",
    "start ReputService",
    "start CleanService",
    "write abort file",
]
SYNC_STOP = [
    "stop CleanService",
    "wait until dispatch is idle",
    "stop ReputService",
    "stop index worker",
    "stop GroupCommitService",
    "stop FlushConsumeQueueService",
    "flush checkpoint",
    "flush checkpoint",
    "close files (abort file gone)",
    "release lock",
]


def _journaled(
    monkeypatch: pytest.MonkeyPatch,
    journal: list[str],
    owner: Any,
    name: str,
    entry: Callable[..., str | None],
) -> None:
    """Replace `owner.name` (sync or async) with one that first journals `entry(*args)`."""
    original = getattr(owner, name)

    def note(args: tuple[Any, ...]) -> None:
        label = entry(*args)
        if label is not None:
            journal.append(label)

    if inspect.iscoroutinefunction(original):

        async def async_wrapper(*args: Any) -> Any:
            note(args)
            return await original(*args)

        monkeypatch.setattr(owner, name, async_wrapper)
    else:

        def wrapper(*args: Any) -> Any:
            note(args)
            return original(*args)

        monkeypatch.setattr(owner, name, wrapper)


def _close_files(store: MessageStore) -> str:
    return "close files (abort file " + ("kept)" if (store.root / "abort").exists() else "gone)")


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store parts' starts and stops, recorded from the store's build on."""
    journal: list[str] = []

    def wrap(owner: Any, name: str, entry: Callable[..., str | None]) -> None:
        _journaled(monkeypatch, journal, owner, name, entry)

    for cls in SERVICES:
        label = cls.__name__
        wrap(cls, "start", lambda s, n=label: None if s.running else f"start {n}")
        wrap(cls, "stop", lambda s, n=label: f"stop {n}" if s.running else None)
    wrap(ReputService, "wait_idle", lambda _s: "wait until dispatch is idle")
    wrap(IndexKeeper, "start_worker", lambda *_a: "start index worker")
    wrap(IndexKeeper, "stop_worker", lambda s, _d: "stop index worker" if s.worker else None)
    wrap(message_store, "write_abort_file", lambda _root: "write abort file")
    wrap(StoreCheckpoint, "flush", lambda *_a: "flush checkpoint")
    wrap(MessageStore, "close_files", _close_files)
    wrap(StoreLock, "release", lambda s: "release lock" if s._fd is not None else None)
    return journal


@pytest.mark.parametrize(
    ("overrides", "start_order", "stop_order"),
    [(POOLED, POOLED_START, POOLED_STOP), (SYNC, SYNC_START, SYNC_STOP)],
    ids=["async-flush-with-pool", "sync-flush"],
)
async def test_services_start_in_order_and_stop_in_the_store_order(
    tmp_path: Path,
    journal: list[str],
    overrides: dict[str, Any],
    start_order: list[str],
    stop_order: list[str],
) -> None:
    store = STORES.open(tmp_path, **overrides)
    journal.clear()  # load's own flushes are not the subject here
    await store.start()
    assert journal == start_order
    assert (tmp_path / "abort").exists()
    journal.clear()
    await store.stop()
    assert journal == stop_order
    journal.clear()
    await store.stop()  # stopped already: only load's files and lock are let go (again)
    assert journal == ["close files (abort file gone)"]
    MessageStore(STORES.config(tmp_path, **overrides)).load()  # the lock is free


@pytest.mark.parametrize(
    ("failing", "started_then_stopped"),
    [
        (
            (IndexKeeper, "start_worker"),
            [
                *POOLED_START[:3],
                "stop CommitService",
                "stop FlushCommitLogService",
                "stop FlushConsumeQueueService",
                "flush checkpoint",
            ],
        ),
        (
            (CleanService, "start"),
            [
                *POOLED_START[:5],
                "stop CommitService",
                "wait until dispatch is idle",
                "stop ReputService",
                "stop index worker",
                "stop FlushCommitLogService",
                "stop FlushConsumeQueueService",
                "flush checkpoint",
            ],
        ),
    ],
    ids=["index-worker-fails", "clean-service-fails"],
)
async def test_a_failed_start_stops_what_it_started_and_stop_then_closes(
    tmp_path: Path,
    journal: list[str],
    monkeypatch: pytest.MonkeyPatch,
    failing: tuple[type, str],
    started_then_stopped: list[str],
) -> None:
    async def refuse(*_args: Any) -> None:
        raise OSError("cannot start")

    monkeypatch.setattr(*failing, refuse)
    store = STORES.open(tmp_path, **POOLED)
    journal.clear()
    with pytest.raises(OSError, match="cannot start"):
        await store.start()
    # What started stopped, in the store's stop order; the store is loaded still (no abort file:
    # it was never written, and nothing is marked as cleanly stopped).
    assert journal == started_then_stopped
    assert not (tmp_path / "abort").exists()
    assert store.index_worker is None
    journal.clear()
    await store.stop()
    assert journal == ["close files (abort file gone)", "release lock"]
    MessageStore(STORES.config(tmp_path, **POOLED)).load()  # the lock is free


# --- one service on its own ----------------------------------------------------------------


async def test_a_periodic_service_ends_its_loop_before_its_final_work() -> None:
    events: list[str] = []

    class Ticking(PeriodicService):
        name = "ticking"

        async def tick(self) -> None:
            events.append("tick")
            try:
                await asyncio.Event().wait()  # a tick in progress when stop comes
            finally:
                events.append("tick ended")

        async def final(self) -> None:
            events.append("final")

    service = Ticking(600_000)
    await service.stop()
    assert events == []  # never started: no final work either
    await service.start()
    service.wakeup()
    await eventually(lambda: events == ["tick"], "the woken tick")
    await service.stop()
    assert events == ["tick", "tick ended", "final"]
    await service.stop()
    assert events == ["tick", "tick ended", "final"]


class _StuckFirstFlush:
    """A flusher whose first CommitLog flush never returns; the later ones flush everything."""

    def __init__(self, segments: SimpleNamespace) -> None:
        self.segments = segments
        self.calls = 0

    async def flush_commitlog(self, least_pages: int) -> bool:
        self.calls += 1
        if self.calls == 1:
            await asyncio.Event().wait()
        self.segments.flushed_where = 1 << 40
        return True

    async def flush_consume_queues(self, least_pages: int, *, one_syncfs: bool = False) -> None:
        raise AssertionError("group commit flushes the CommitLog only")


async def test_group_commit_stop_flushes_once_more_and_answers_the_waiters_left(
    tmp_path: Path,
) -> None:
    segments = SimpleNamespace(flushed_where=0)
    flusher = _StuckFirstFlush(segments)
    config = STORES.config(tmp_path, sync_flush_timeout=60_000)
    service = GroupCommitService(config, SimpleNamespace(segments=segments), flusher)  # type: ignore[arg-type]
    await service.stop()
    assert flusher.calls == 0  # never started: no last flush
    await service.start()
    in_flight = asyncio.create_task(service.wait_flushed(10))
    await eventually(lambda: flusher.calls == 1, "the first flush")
    left = asyncio.create_task(service.wait_flushed(20))
    await eventually(lambda: len(service._waiting) == 1, "a waiter queued behind the flush")
    await service.stop()
    assert flusher.calls == 2
    assert await asyncio.wait_for(left, 5) is True  # answered by stop, long before its timeout
    in_flight.cancel()  # its flush was the loop's, cancelled by stop: it is not answered
