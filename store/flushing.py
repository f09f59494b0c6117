"""Flushing the store to disk: the CommitLog (async flush and group commit), then the rest.

The flush services (store/services.py) call these. The checkpoint (store/checkpoint.py) records
the newest store time of what each flush covered: the CommitLog's when its fsync returned, the
ConsumeQueues' and the index's after theirs, so that recovery after a crash of the machine knows
which CommitLog file to check from.
"""

from __future__ import annotations

import asyncio
import logging

from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import CommitLog
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.fs_sync import SYNCFS_AT_SEGMENTS, sync_file_system, syncfs_available
from tidemq.store.index_keeper import IndexKeeper
from tidemq.store.segment import SyncedDirs

log = logging.getLogger(__name__)


def sync_file_system_once(queues: list[ConsumeQueue]) -> int:
    """With at least `SYNCFS_AT_SEGMENTS` segments of `queues` to sync, one `syncfs` of their
    file system makes them durable (store/fs_sync.py: why it is as safe as their own calls);
    the flushes that follow then find nothing left of them but what was written since. Returns
    the segments it covered. Runs in a worker thread."""
    if not syncfs_available():
        return 0
    # Lazily mapped segments only (every ConsumeQueue's): the bytes each has committed, read
    # before the syncfs begins.
    targets = [
        (segment, segment.committed)
        for queue in queues
        for segment in queue.segments.segments
        if segment.maps is not None and not segment.closed and segment.flushed < segment.committed
    ]
    if len(targets) < SYNCFS_AT_SEGMENTS:
        return 0
    folder = targets[0][0].path.parent
    try:
        device = sync_file_system(folder)
    except OSError as exc:
        log.warning(
            "one syncfs for %d ConsumeQueue files failed, each is synced: %s", len(targets), exc
        )
        return 0
    if device is None:  # not a file system whose syncfs is durable (fs_sync.py)
        return 0
    covered = sum(segment.note_synced(target, device) for segment, target in targets)
    log.info("%d ConsumeQueue files synced by one syncfs of the file system of %s", covered, folder)
    return covered


class StoreFlusher:
    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: StoreCheckpoint,
        consume_queues: dict[tuple[str, int], ConsumeQueue],
        index: IndexKeeper,
        dirty: set[ConsumeQueue] | None = None,
    ) -> None:
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.consume_queues = consume_queues
        # The queues written since they were last flushed (ConsumeQueue.dirty); None: every
        # queue is looked at each pass.
        self.dirty = dirty
        # Queues a pass left unflushed with fewer than its `least_pages` pages to sync: only a
        # write (which puts them in `dirty` again) or a pass with least_pages 0 (the thorough
        # one, the stop's) can flush them, so other passes do not look at them. Sends to
        # 10,000 new queues left each with one unit: every pass went over all of them again,
        # on a worker thread holding the GIL against the event loop (send p99 ~5 ms, the
        # switch interval).
        self.below_least_pages: set[ConsumeQueue] = set()
        self.index = index
        # the dispatch time every ConsumeQueue's units are synced up to (what the file claims)
        self.logics_durable = checkpoint.logics_msg_timestamp
        self._lock = asyncio.Lock()

    async def flush_commitlog(self, least_pages: int) -> bool:
        """fsync the CommitLog off the loop; records the flushed store time in the checkpoint."""
        async with self._lock:
            store_ts = self.commitlog.last_store_timestamp
            flushed = await asyncio.to_thread(self.commitlog.segments.flush, least_pages)
            if flushed:
                self.checkpoint.physic_msg_timestamp = store_ts
            return flushed

    async def flush_consume_queues(self, least_pages: int, *, one_syncfs: bool = False) -> None:
        """ConsumeQueues and the index (or the worker's), then the checkpoint. `one_syncfs`
        (the last pass of a stop): many ConsumeQueue files to sync are synced by one syncfs
        (`sync_file_system_once`). Running passes keep their per-file syncs: a syncfs writes
        back all of the file system's dirty pages (the CommitLog's, other programs') while
        sends are being served."""
        checkpoint = self.checkpoint
        logics_ts = checkpoint.logics_msg_timestamp
        # Only the queues written since the last pass: a pass over every queue held the GIL
        # against the event loop for its length, each second, whatever was written.
        dirty = self.dirty
        if dirty is None:
            queues = list(self.consume_queues.values())
        elif least_pages == 0:
            queues = list(dirty | self.below_least_pages)
            dirty.clear()
            self.below_least_pages.clear()
        else:
            queues = list(dirty)
            dirty.clear()
        worker = self.index.worker
        index = self.index.index if worker is None else None

        def work() -> int:
            if one_syncfs:
                sync_file_system_once(queues)
            synced: SyncedDirs = {}  # each folder synced once a pass (segment.SyncedDirs)
            for queue in queues:
                queue.flush(least_pages, synced)
            return index.flush() if index is not None else 0

        flushed = False
        try:
            index_ts = await asyncio.to_thread(work)
            flushed = True
        finally:
            if dirty is not None:
                left = [queue for queue in queues if queue.unflushed]
                # After a failure: all again at the next pass. Else those left had fewer than
                # `least_pages` pages (or were written meanwhile, and are in `dirty` again).
                (self.below_least_pages if flushed and least_pages > 0 else dirty).update(left)
        if least_pages == 0:
            self.logics_durable = max(logics_ts, self.logics_durable)
        if index is not None:
            checkpoint.index_msg_timestamp = index_ts
        elif worker is not None:
            worker_ts = await worker.flush()
            if worker_ts is not None:
                checkpoint.index_msg_timestamp = worker_ts
        # Only a thorough flush (every queue synced) moves logicsMsgTimestamp on the disk: a
        # flush of the queues with `least_pages` dirty pages leaves the others' newest units
        # unsynced, and a checkpoint claiming them would make recovery after a power cut check
        # the CommitLog from a file past their records, which would never be dispatched again
        # (as RocketMQ's FlushConsumeQueueService moves it only when flushConsumeQueueLeastPages
        # is 0).
        checkpoint.note_confirmed()
        await asyncio.to_thread(checkpoint.flush, self.logics_durable)
