"""ConsumeQueues taken from a clean stop's summary, their files checked at first use.

A normal load with a summary that fits the CommitLog (store/queue_summary.py) builds every queue
the summary lists from it alone: no folder listed, no file opened or stat'ed at start, whatever
the number of queues. What the load used to check for each queue, that its files are the ones
the summary lists (names, sizes, the newest inode change time), is checked instead right before
the queue's files are first read or written (`ConsumeQueue.checked`): one listing of its folder
and a stat per file, once per queue.

A file the load would have refused (a wrong size, a name that is not an offset) is refused then,
by every use of its queue, with the same error naming it (CorruptStoreError: dispatch
quarantines the queue, a read answers an error); nothing is written. A queue whose files
changed after the clean stop (overwritten, restored from a backup, a file added or gone) is
then recovered as the load would have: listed and loaded from the disk,
checked against the CommitLog (`ConsumeQueue.check_recovery`), cut at its valid prefix, and
the units past that rebuilt from the CommitLog, up to where dispatch has got, by a dispatch of
its own that skips every other queue's records (`rebuild_from_commitlog`). Dispatch then goes
on from there as for any queue. That runs on the caller's thread (the event loop) and reads the
CommitLog from the queue's last valid unit: a cost paid only by a queue changed behind the
store's back, which before cost every start a check of every queue.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from tidemq.store.consume_queue import ConsumeQueue, QueueState
from tidemq.store.segment import name_to_offset, offset_to_name
from tidemq.store.segment_queue import SegmentQueue

if TYPE_CHECKING:
    from tidemq.store.checkpoint import StoreCheckpoint
    from tidemq.store.commitlog import CommitLog
    from tidemq.store.index import IndexService

log = logging.getLogger(__name__)


def files_as_listed(queue: ConsumeQueue, state: QueueState) -> bool:
    """Whether `queue`'s folder holds exactly the files `state` lists, each of the queue's file
    size, the newest changed at the time recorded."""
    segments = queue.segments
    expected = [
        offset_to_name(state.first_file + index * segments.segment_size)
        for index in range(state.file_count)
    ]
    try:
        with os.scandir(segments.directory) as listing:
            names = sorted(
                entry.name
                for entry in listing
                if entry.is_file() and name_to_offset(entry.name) is not None
            )
    except FileNotFoundError:
        names = []
    if names != expected:
        return False
    newest = 0
    for name in names:
        status = (segments.directory / name).stat()
        if status.st_size != segments.segment_size:
            return False
        newest = max(newest, status.st_ctime_ns)
    return newest == state.newest_change_ns


class FirstUseCheck:
    """`ConsumeQueue.check_first` for the queues of a summary (module docstring)."""

    def __init__(
        self,
        commitlog: CommitLog,
        dispatched_to: Callable[[], int],
        delay_levels: list[int],
    ) -> None:
        self.commitlog = commitlog
        self.dispatched_to = dispatched_to  # where the store's dispatch has got
        self.delay_levels = delay_levels
        self.checked = 0  # queues checked, for tests
        self.rebuilt = 0  # of which changed since the stop, and recovered

    def __call__(self, queue: ConsumeQueue, state: QueueState) -> None:
        self.checked += 1
        if files_as_listed(queue, state):
            return
        self.rebuilt += 1
        log.warning(
            "ConsumeQueue %s-%d: its files changed since the clean stop that recorded them; "
            "checked against the CommitLog and rebuilt",
            queue.topic,
            queue.queue_id,
        )
        try:
            self.recover(queue)
        except BaseException:
            # A file the load would have refused (wrong size, stray name): every use fails
            # the same way, naming it, until an operator fixes it; nothing is written.
            queue.check_first, queue.unchecked = self, state
            raise

    def recover(self, queue: ConsumeQueue) -> None:
        """Load `queue` from its folder, cut it at its valid prefix and rebuild the rest."""
        from tidemq.store.recovery import unit_checker

        old = queue.segments
        segments = SegmentQueue(
            old.directory, old.segment_size, append_mode=old.append_mode, maps=old.maps
        )
        segments.load()  # a file the load would refuse is refused here, the queue untouched
        old.close()
        queue.segments = segments
        queue.max_physical_offset = -1
        queue.min_logic_offset = 0
        commitlog = self.commitlog
        end = self.dispatched_to()
        cut = queue.check_recovery(unit_checker(commitlog, queue, end), end)
        queue.apply_recovery(cut)
        queue.correct_min_offset(commitlog.min_offset)
        start = max(cut.max_physical_offset, commitlog.min_offset)
        rebuild_from_commitlog(commitlog, queue, start, end, self.delay_levels)


class _Built:
    """Every queue but the one rebuilt: dispatch finds each of its records built already."""

    max_physical_offset = 1 << 62


class _NoIndex:
    def in_process(self) -> IndexService | None:
        return None

    def advance(self, dispatched: int) -> None:
        pass


def rebuild_from_commitlog(
    commitlog: CommitLog, queue: ConsumeQueue, start: int, end: int, delay_levels: list[int]
) -> None:
    """Put `queue`'s units of the CommitLog's records in [start, end) it lacks."""
    from tidemq.store.dispatch import ReputService

    key = (queue.topic, queue.queue_id)
    built = cast(ConsumeQueue, _Built())

    def only(topic: str, queue_id: int) -> ConsumeQueue:
        return queue if (topic, queue_id) == key else built

    # Its own checkpoint: the store's keeps the dispatch time of what the store dispatched.
    scratch = cast("StoreCheckpoint", SimpleNamespace(logics_msg_timestamp=0))
    dispatch = ReputService(commitlog, scratch, only, _NoIndex(), delay_levels)
    dispatch.reput_from_offset = start
    dispatch.dispatch_cap = lambda: end
    dispatch.dispatch_all()
