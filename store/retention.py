"""Retention: deleting expired CommitLog files and what pointed into them.

The clean service (store/services.py CleanService) decides when; this deletes up to a batch of
the oldest CommitLog files (never the one being written), then moves every ConsumeQueue's and the
index's minimum past the new CommitLog minimum, and dispatch with it.
"""

from __future__ import annotations

import asyncio
import logging

from tidemq.store.commitlog import CommitLog
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.dispatch import ReputService
from tidemq.store.index_keeper import IndexKeeper

log = logging.getLogger(__name__)


class Retention:
    def __init__(
        self,
        commitlog: CommitLog,
        consume_queues: dict[tuple[str, int], ConsumeQueue],
        index: IndexKeeper,
        reput: ReputService,
    ) -> None:
        self.commitlog = commitlog
        self.consume_queues = consume_queues
        self.index = index
        self.reput = reput

    async def delete_expired_commitlog(
        self, reserved_ms: int, at_once: bool, batch_max: int
    ) -> int:
        """Delete up to `batch_max` expired files (all but the last when `at_once`)."""
        segments = self.commitlog.segments
        count = len(segments) - 1 if at_once else segments.expired_by_time(reserved_ms)
        count = min(count, batch_max)
        if count <= 0:
            return 0
        removed = segments.segments[:count]
        segments.segments = segments.segments[count:]
        for segment in removed:
            log.info("retention: deleting CommitLog file %s", segment.path.name)
            await asyncio.to_thread(segment.destroy)
        self.clean_consume_queues()
        return count

    def clean_consume_queues(self) -> None:
        commitlog_min = self.commitlog.min_offset
        for queue in self.consume_queues.values():
            queue.delete_expired(commitlog_min)
        index = self.index.refreshed()
        if index is not None:
            index.delete_expired(commitlog_min)
        if self.reput.reput_from_offset < commitlog_min:
            self.reput.reput_from_offset = commitlog_min
