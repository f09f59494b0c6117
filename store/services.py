"""The store's background services: commit, flush (async and group commit) and retention.

Each service is a `Service` (store/common/lifecycle.py) whose loop runs as a `BackgroundTask`; its
work at stop (a last commit or flush, releasing waiters) is a `Step` that runs once the loop has
ended.
Anything that can block (fdatasync, file deletion) runs in a worker thread through
`asyncio.to_thread`, so the event loop keeps appending and serving while the disk works.

- CommitService (transientStorePoolEnable): writes buffered appends into the segment files every
  commitIntervalCommitLog ms once commitCommitLogLeastPages pages are pending (all of them once
  commitCommitLogThoroughInterval has passed), then wakes dispatch and flush.
- FlushCommitLogService (ASYNC_FLUSH): every flushIntervalCommitLog ms, flushes once
  flushCommitLogLeastPages pages are pending (everything once flushCommitLogThoroughInterval has
  passed); records the flushed store time in the checkpoint.
- GroupCommitService (SYNC_FLUSH): a put waits for an fsync that covers its end offset; all
  waiters queued while one fsync runs share the next one; no answer within syncFlushTimeout is
  FLUSH_DISK_TIMEOUT.
- FlushConsumeQueueService: flushes ConsumeQueues and the index, then the checkpoint.
- CleanService: RocketMQ's CleanCommitLogService and CleanConsumeQueueService.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig

log = logging.getLogger(__name__)

DELETE_FILE_BATCH_MAX = 10


def _now_ms() -> int:
    return int(time.time() * 1000)


class PeriodicService(Service):
    """A task that runs `tick()` every `interval_ms`, or sooner when woken; `final()` at stop."""

    name = "service"

    def __init__(self, interval_ms: int) -> None:
        super().__init__()
        self.interval_ms = interval_ms
        self._wakeup = asyncio.Event()
        # Stop ends the loop, then does the last work: the Step is added first, so it runs last.
        self.add_child(Step(stop=self.final))
        self.add_child(BackgroundTask(self._run, self.name))

    def wakeup(self) -> None:
        self._wakeup.set()

    async def _run(self) -> None:
        # `running` turns False as stop begins, before the task is cancelled: the loop ends even
        # when a cancellation is lost (3.11's wait_for can drop one that races its timeout).
        while self.running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.interval_ms / 1000)
            self._wakeup.clear()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", self.name)

    async def tick(self) -> None:
        raise NotImplementedError

    async def final(self) -> None:
        """Work done once at stop (a last flush)."""


class Flusher(Protocol):
    """What the flush services call (store/flushing.py StoreFlusher)."""

    async def flush_commitlog(self, least_pages: int) -> bool:
        """fsync the CommitLog once that many pages are pending (0: all); True if it did."""

    async def flush_consume_queues(self, least_pages: int, *, one_syncfs: bool = False) -> None:
        """Flush ConsumeQueues, index and checkpoint (`one_syncfs`: see StoreFlusher's)."""


# Delete expired CommitLog files: (reserved ms, at once, at most that many) -> how many.
DeleteExpired = Callable[[int, bool, int], Awaitable[int]]


class CommitService(PeriodicService):
    name = "commit-commitlog"

    def __init__(
        self, config: StoreConfig, commitlog: CommitLog, on_committed: Callable[[], None]
    ) -> None:
        super().__init__(config.commit_interval_commit_log)
        self.config = config
        self.commitlog = commitlog
        self.on_committed = on_committed
        self._last_thorough = _now_ms()

    async def tick(self) -> None:
        config = self.config
        least = config.commit_commit_log_least_pages
        now = _now_ms()
        if now - self._last_thorough >= config.commit_commit_log_thorough_interval:
            least, self._last_thorough = 0, now
        if await asyncio.to_thread(self.commitlog.segments.commit, least):
            self.on_committed()

    async def final(self) -> None:
        if await asyncio.to_thread(self.commitlog.segments.commit, 0):
            self.on_committed()


class FlushCommitLogService(PeriodicService):
    name = "flush-commitlog"

    def __init__(self, config: StoreConfig, flusher: Flusher) -> None:
        super().__init__(config.flush_interval_commit_log)
        self.config = config
        self.flusher = flusher
        self._last_thorough = _now_ms()

    async def tick(self) -> None:
        config = self.config
        least = config.flush_commit_log_least_pages
        now = _now_ms()
        if now - self._last_thorough >= config.flush_commit_log_thorough_interval:
            least, self._last_thorough = 0, now
        await self.flusher.flush_commitlog(least)

    async def final(self) -> None:
        await self.flusher.flush_commitlog(0)


class GroupCommitService(Service):
    """SYNC_FLUSH: waiters share fsyncs; each waits at most syncFlushTimeout.

    At stop, once the loop has ended: a last flush, then every waiter left is answered flushed.
    """

    def __init__(self, config: StoreConfig, commitlog: CommitLog, flusher: Flusher) -> None:
        super().__init__()
        self.config = config
        self.commitlog = commitlog
        self.flusher = flusher
        self._waiting: list[tuple[int, asyncio.Future[bool]]] = []
        self._wakeup = asyncio.Event()
        self.add_child(Step(stop=self._flush_and_release))
        self.add_child(BackgroundTask(self._run, "group-commit"))

    def wakeup(self) -> None:
        """Flush what was appended without a waiter (a slave's replicated bytes), as RocketMQ's
        group commit flushes when no request waits; appends meanwhile share the next fsync."""
        self._wakeup.set()

    async def wait_flushed(self, offset: int) -> bool:
        """True once an fsync covers `offset`; False after syncFlushTimeout."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((offset, future))
        self._wakeup.set()
        try:
            return await asyncio.wait_for(future, self.config.sync_flush_timeout / 1000)
        except TimeoutError:
            return False

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._waiting = self._waiting, []
            try:
                await self.flusher.flush_commitlog(0)
            except Exception:
                log.exception("group commit flush failed")
                self._waiting = batch + self._waiting
                await asyncio.sleep(0.1)
                self._wakeup.set()
                continue
            flushed = self.commitlog.segments.flushed_where
            for offset, future in batch:
                if future.done():
                    continue
                if flushed >= offset:
                    future.set_result(True)
                else:
                    self._waiting.append((offset, future))
                    self._wakeup.set()

    async def _flush_and_release(self) -> None:
        await self.flusher.flush_commitlog(0)
        for _offset, future in self._waiting:
            if not future.done():
                future.set_result(True)
        self._waiting = []


class FlushConsumeQueueService(PeriodicService):
    name = "flush-consumequeue"

    def __init__(self, config: StoreConfig, flusher: Flusher) -> None:
        super().__init__(config.flush_interval_consume_queue)
        self.config = config
        self.flusher = flusher
        self._last_thorough = _now_ms()

    async def tick(self) -> None:
        config = self.config
        least = config.flush_consume_queue_least_pages
        now = _now_ms()
        if now - self._last_thorough >= config.flush_consume_queue_thorough_interval:
            least, self._last_thorough = 0, now
        await self.flusher.flush_consume_queues(least)

    async def final(self) -> None:
        # a stop after many new topics: one syncfs instead of a sync of each new file and folder
        await self.flusher.flush_consume_queues(0, one_syncfs=True)


DiskUsage = Callable[[Path], float]


def disk_used_ratio(path: Path) -> float:
    """Used fraction of the file system holding `path` (-1 if it cannot be read).

    As `df` and RocketMQ's getDiskPartitionSpaceUsedPercent count it: used / (used + available
    to us). Blocks reserved for root are neither: counting them as used reads a disk with a
    large reserve as full while it has room (seen: 91% "used" with most of the disk free).
    """
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    room = usage.used + usage.free  # shutil's free is what an unprivileged writer may use
    return usage.used / room if room else -1.0


class DiskState:
    """How full the CommitLog's disk is; writes are refused while `full`."""

    def __init__(self) -> None:
        self.full = False
        self.used_ratio = 0.0

    def set_full(self, full: bool, ratio: float) -> None:
        if full and not self.full:
            log.error("disk %.0f%% used: writes refused until space is freed", ratio * 100)
        elif not full and self.full:
            log.info("disk %.0f%% used: writes accepted again", ratio * 100)
        self.full = full


class CleanService(PeriodicService):
    """Retention: expired files at deleteWhen, sooner when the disk fills; refuse writes at 90 %."""

    name = "clean-files"

    def __init__(
        self,
        config: StoreConfig,
        disk: DiskState,
        delete_expired: DeleteExpired,
        disk_usage: DiskUsage = disk_used_ratio,
    ) -> None:
        super().__init__(config.clean_resource_interval)
        self.config = config
        self.disk = disk
        self.delete_expired = delete_expired
        self.disk_usage = disk_usage
        self.manual_delete_times = 0
        self.clean_immediately = False

    def delete_now(self, times: int = 20) -> None:
        """Admin request: delete on the next `times` ticks whatever the hour.

        RocketMQ's executeDeleteFilesManually.
        """
        self.manual_delete_times = times

    def _space_to_delete(self) -> bool:
        config = self.config
        ratio = self.disk_usage(config.commit_log_dir)
        self.disk.used_ratio = ratio
        self.clean_immediately = False
        if ratio > config.disk_space_warning_level_ratio:
            self.disk.set_full(True, ratio)
            self.clean_immediately = True
        elif ratio > config.disk_space_clean_forcibly_ratio:
            self.clean_immediately = True
            self.disk.set_full(False, ratio)
        else:
            self.disk.set_full(False, ratio)
        return ratio < 0 or ratio > config.disk_max_used_space_ratio / 100

    def _time_to_delete(self) -> bool:
        return time.localtime().tm_hour in self.config.delete_hours

    async def tick(self) -> None:
        time_up = self._time_to_delete()
        space_full = self._space_to_delete()
        manual = self.manual_delete_times > 0
        if not (time_up or space_full or manual):
            return
        if manual:
            self.manual_delete_times -= 1
        config = self.config
        at_once = config.clean_file_forcibly_enable and self.clean_immediately
        reserved_ms = config.file_reserved_time * 3_600_000
        await self.delete_expired(reserved_ms, at_once, DELETE_FILE_BATCH_MAX)


AsyncAction = Callable[[], Awaitable[None]]
