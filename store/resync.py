"""Resynchronising a slave with its master (haSlaveAutoTruncate, haSlaveAutoResync).

- `truncate_for_resync`: the slave's CommitLog diverged from its master's at `offset`: its bytes
  past there are kept aside in `<segment>.<position>.diverged` files and cut, ConsumeQueues and
  the index are cut to match, and dispatch (and the index worker) go back to the cut.
- `reset_for_resync`: the slave is behind its master's retention: the CommitLog, ConsumeQueues
  and index move to `<storePathRootDir>/resync-<ms>/` and the store starts empty.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from tidemq.store.commitlog import CommitLog
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.dispatch import ReputService
from tidemq.store.index_keeper import IndexKeeper
from tidemq.store.recovery import rebuild_queue_offsets
from tidemq.store.segment_queue import SegmentQueue

log = logging.getLogger(__name__)


def truncate_for_resync(
    offset: int,
    commitlog: CommitLog,
    consume_queues: dict[tuple[str, int], ConsumeQueue],
    index: IndexKeeper,
    reput: ReputService,
) -> None:
    """A diverged slave: keep its bytes past `offset` aside (`*.diverged`) and cut there."""
    log.warning("resync: truncating the CommitLog at %d (the tail is kept aside)", offset)
    commitlog.truncate_to(offset, "diverged")
    withdraw_dispatched(offset, commitlog, consume_queues, index, reput)


def withdraw_dispatched(
    offset: int,
    commitlog: CommitLog,
    consume_queues: dict[tuple[str, int], ConsumeQueue],
    index: IndexKeeper,
    reput: ReputService,
) -> None:
    """Undo dispatch past CommitLog `offset` (ConsumeQueue units, index entries): readers see
    no record from there on until dispatch passes it again; the CommitLog keeps its bytes."""
    for queue in consume_queues.values():
        queue.truncate_dirty(offset)
    worker = index.kill_worker()  # restarted below at the cut, which undoes what it had past there
    files = index.refreshed()
    if files is not None:
        files.truncate_after(offset)
    rebuild_queue_offsets(commitlog, consume_queues)
    reput.rewind(min(reput.reput_from_offset, offset))
    if worker is not None:
        worker.restart_at(min(worker.indexed, offset))


def reset_for_resync(
    root: Path,
    commitlog: CommitLog,
    consume_queues: dict[tuple[str, int], ConsumeQueue],
    index: IndexKeeper,
    reput: ReputService,
    close_files: Callable[[], None],
) -> Path:
    """A slave behind its master's retention: move all its data aside and start empty.

    Returns the folder the CommitLog, ConsumeQueues and index were moved to.
    """
    aside = root / f"resync-{int(time.time() * 1000)}"
    aside.mkdir(parents=True)
    worker = index.kill_worker()
    close_files()
    moves = [
        (commitlog.segments.directory, aside / "commitlog"),
        (root / "consumequeue", aside / "consumequeue"),
        (root / "index", aside / "index"),
    ]
    for source, target in moves:
        if source.exists():
            source.rename(target)
    log.warning("resync: the whole store was moved to %s; replication starts afresh", aside)
    old = commitlog.segments
    commitlog.segments = SegmentQueue(old.directory, old.segment_size, append_mode=old.append_mode)
    commitlog.topic_queue_table = {}
    consume_queues.clear()
    index.replace_index()
    reput.rewind(0)
    reput.stalled_at = -1
    if worker is not None:
        worker.restart_at(0)
    return aside
