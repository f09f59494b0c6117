"""Who writes the message index: this process, or the index worker child (store/index_worker.py).

While the store is loaded but not started, this process owns the index and holds `index.lock`
(recovery and re-dispatch write it here). `start_worker` hands it, with the lock, to a child
that indexes what dispatch has finished; `stop_worker` takes it back. Queries then read files
another process writes, so they `refresh()` the index first.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tidemq.store.config import StoreConfig
from tidemq.store.index import IndexService
from tidemq.store.index_worker import LOCK_WAIT, IndexWorker, WorkerSpec, release_lock, take_lock

if TYPE_CHECKING:
    from tidemq.store.dispatch import ReputService


class IndexKeeper:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.index: IndexService | None = None
        if config.message_index_enable:
            self.index = self._new_index()
        # The child process that builds the index while the store runs.
        self.worker: IndexWorker | None = None
        self._lock: int | None = None  # index.lock while this process writes the index

    def _new_index(self) -> IndexService:
        config = self.config
        return IndexService(config.root / "index", config.max_hash_slot_num, config.max_index_num)

    def in_process(self) -> IndexService | None:
        """The index dispatch builds here: none when it is off or the worker builds it."""
        return self.index if self.worker is None else None

    def advance(self, dispatched: int) -> None:
        """Dispatch has finished everything below `dispatched`: the worker may index it."""
        worker = self.worker
        if worker is not None:
            worker.advance(dispatched)

    def refreshed(self) -> IndexService | None:
        """The index, its files re-read when the worker writes them (for queries and deletes)."""
        index = self.index
        if index is not None and self.worker is not None:
            index.refresh()
        return index

    # --- the lock and the child ------------------------------------------------------------

    def take_lock(self) -> None:
        """At load: a worker left by a killed predecessor finishes its batch and exits first."""
        if self.index is not None:
            self._lock = take_lock(self.index.index_dir, LOCK_WAIT)

    def release_lock(self) -> None:
        if self._lock is not None:
            release_lock(self._lock)
            self._lock = None

    async def start_worker(self, commitlog_dir: Path, start: int) -> None:
        """Hand the index to a child process that indexes from `start` on."""
        index = self.index
        if index is None or not self.config.message_index_worker_enable:
            return
        # What recovery indexed here must be on disk before the worker's flushes vouch for it.
        await asyncio.to_thread(index.flush)
        worker = IndexWorker(self._worker_spec(index, commitlog_dir, start))
        # The lock passes to the child, never free in between (store/index_worker.py).
        worker.start(self._lock)
        self._lock = None
        self.worker = worker

    def _worker_spec(self, index: IndexService, commitlog_dir: Path, start: int) -> WorkerSpec:
        config = self.config
        return WorkerSpec(
            commitlog_dir=str(commitlog_dir.resolve()),
            commitlog_file_size=config.mapped_file_size_commit_log,
            index_dir=str(index.index_dir.resolve()),
            max_hash_slot_num=config.max_hash_slot_num,
            max_index_num=config.max_index_num,
            start=start,
            nice=config.message_index_worker_nice,
        )

    async def stop_worker(self, dispatched: int) -> None:
        """Let the worker index up to `dispatched`, stop it, and own the index here again."""
        worker = self.worker
        if worker is None or self.index is None:
            return
        worker.advance(dispatched)
        await worker.stop()
        self.worker = None
        self._lock = take_lock(self.index.index_dir, LOCK_WAIT)
        self.index.refresh()

    async def wait_index(self, reput: ReputService, timeout: float) -> None:
        """Until the index covers what is dispatched now, at most `timeout` seconds."""
        worker = self.worker
        if worker is None:
            return
        deadline = time.monotonic() + timeout
        target = reput.limit()
        # Dispatch first: the worker never indexes past it (recovery relies on that).
        while reput.reput_from_offset < target and reput.stalled_at < 0:
            if time.monotonic() >= deadline:
                break
            reput.wakeup()
            await asyncio.sleep(0.001)
        left = max(0.0, deadline - time.monotonic())
        await worker.wait_indexed(min(target, reput.reput_from_offset), left)

    # --- resync ----------------------------------------------------------------------------

    def kill_worker(self) -> IndexWorker | None:
        """Stop the worker at once (a resync cuts under it); restart it with `restart_at`."""
        worker = self.worker
        if worker is not None:
            worker.kill()
        return worker

    def replace_index(self) -> None:
        """An empty index in place of the one moved aside (a slave's full resync)."""
        if self.index is not None:
            self.index = self._new_index()
            self.index.load(True, 0)

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
        self.release_lock()
