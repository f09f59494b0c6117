"""Recovery at load: a plan computed from what is on disk, then a step that applies it.

`plan_recovery` changes nothing: it decides the kind of recovery, the CommitLog file the check
starts from, checks records from there (CRC) to find where valid data ends, lists the bytes
past that end to keep aside (`<segment>.<position>.torn`), checks every ConsumeQueue against the
CommitLog as the cut will leave it (where each is cut: its valid prefix, see
ConsumeQueue.check_recovery) and computes where dispatch must restart (`redispatch_start`, a pure
function of what the checks found). `apply_recovery` copies the tails aside, zeroes them and cuts
the CommitLog, cuts each ConsumeQueue where the plan says, destroys and opens the index files
as planned (`IndexService.plan_load`, `apply_load`) and undoes index entries past the end.
The model is ZODB FileStorage's read_index then _truncate: scan, stop at the first short or bad
record, copy the torn bytes aside, truncate.

Kinds. The abort file (`<storePathRootDir>/abort`) exists while a store runs and holds the boot id
of the machine (`/proc/sys/kernel/random/boot_id`; nothing when it cannot be read):

- normal (no abort file): the check starts at the third file from the end; dispatch restarts at M.
- abnormal, other boot (the abort file holds no boot id or another one: the machine restarted,
  and pages not yet on the disk may be lost): RocketMQ's recovery. The check starts at S, the
  newest file whose first record is older than the checkpoint's store times (minus 3 s; the
  index's too with messageIndexSafe); index files newer than the checkpoint are destroyed (the
  plan names them, IndexService.plan_load); dispatch restarts at min(M, S, R) with R where the kept
  index files end.
- abnormal, same boot (the abort file holds this boot's id: the process died, SIGKILL or a crash,
  but the machine kept running): every byte the process wrote, by pwrite or through a map, is in
  the page cache, so the ConsumeQueues and the index are exactly as dispatch (and the index
  worker) left them. The CommitLog check still starts at S, but no index file is destroyed,
  and dispatch restarts where it had got to: min(M, max(R, S)) with R the newest indexed record
  (the last index file's endPhyOffset); without the index, min(M, S).

M is the highest end of a ConsumeQueue's last unit and S the start of the CommitLog file the
check started from. Re-dispatching more than needed is harmless (units and entries that exist are
skipped), less would lose them.

Why those are safe. Records are indexed in CommitLog order, and a record's index entries are
written only after the ConsumeQueue units of every record up to it: dispatch writes a record's unit
before its entries (in a batch: all units, queue by queue, then all entries), and the index worker
(store/index_worker.py) indexes only below the offset dispatch has finished. So every record below
R has its unit and its entries; R's own record is dispatched again, as its entries may be half
written (those it has are added twice, which queries absorb). M alone proves nothing: a batch
writes queue by queue, so one queue can end at M while another still lacks units below it, and
records without a unit (transaction PREPARED and ROLLBACK ones) matter to the index only. Taking
the minimum with M only ever starts lower (when no queue got that far, e.g. after PREPARED
records). S is safe by RocketMQ's reasoning (the checkpoint holds store times dispatched and
flushed, and store times grow along the CommitLog); max(R, S) keeps an index that stopped long ago
(no keyed message since) from sending dispatch back further than S. Without an index nothing shows
where dispatch got to, hence S. In every kind dispatch restarts lower still where a damaged queue
must be rebuilt (at the end of its valid prefix), and never below the CommitLog's minimum. The
warning logged on an abnormal load names the kind.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tidemq.common.files import write_file_safely
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import CommitLog, KeptTail
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import ConsumeQueue, QueueCut, UnitChecker
from tidemq.store.index import IndexLoadPlan, IndexService
from tidemq.store.layout import MAGIC_V1
from tidemq.store.queue_summary import QueueSummary, known_state
from tidemq.store.record import RECORD_MIN_SIZE, read_queue_position, read_topic

log = logging.getLogger(__name__)


class Recovery(enum.Enum):
    """Which recovery load() ran (module docstring)."""

    NORMAL = "normal"  # clean shutdown: no abort file
    SAME_BOOT = "same boot"  # the process died, the machine kept running: pages intact
    OTHER_BOOT = "other boot"  # the machine restarted, or the abort file holds no boot id


BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id() -> str:
    """This boot's id (Linux), "" when it cannot be read; tests replace this function."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def write_abort_file(root: Path) -> None:
    """The store runs: a load that finds this file recovers abnormally (module docstring).

    Synced, name and content, before the store takes any write: a power cut that took it
    would make the next load a normal one, which trusts the ConsumeQueues and checks only the
    last CommitLog files.
    """
    write_file_safely(root / "abort", read_boot_id().encode(), keep_backup=False)


def recovery_kind(root: Path) -> Recovery:
    abort = root / "abort"
    if not abort.exists():
        return Recovery.NORMAL
    try:
        written = abort.read_text(errors="replace").strip()
    except OSError:
        return Recovery.OTHER_BOOT
    same = bool(written) and written == read_boot_id()
    return Recovery.SAME_BOOT if same else Recovery.OTHER_BOOT


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What recovery checks, cuts and keeps aside; computed without changing anything."""

    kind: Recovery
    check_from_segment: int  # index of the CommitLog file the check starts at
    check_from: int  # S: that file's start offset (0 without files)
    commitlog_end: int  # where valid records end: the CommitLog is cut there
    kept_aside: tuple[KeptTail, ...]  # non-zero bytes past the end, copied aside before the cut
    queue_cuts: Mapping[tuple[str, int], QueueCut]  # per (topic, queue id): where it is cut
    index_load: IndexLoadPlan | None  # index files kept, destroyed, removed (None: no index)
    redispatch_from: int  # where dispatch restarts, never below the CommitLog's minimum


@dataclass(frozen=True, slots=True)
class RecoveredQueues:
    end: int  # the highest end (offset + size) of a ConsumeQueue's last unit, 0 if none
    damaged_from: int  # the lowest such end of a queue that lost units to rebuild, -1 if none


def check_start_index(
    kind: Recovery, commitlog: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig
) -> int:
    """The CommitLog file the check starts at: the third from the end after a clean stop, else
    the newest whose first record is older than the checkpoint says is safe."""
    segments = commitlog.segments.segments
    if kind is Recovery.NORMAL:
        return max(0, len(segments) - 3)
    safe = checkpoint.min_timestamp
    if config.message_index_enable and config.message_index_safe:
        safe = checkpoint.min_timestamp_index
    for index in range(len(segments) - 1, -1, -1):
        ts = commitlog.first_record_timestamp(segments[index])
        if 0 < ts <= safe:
            return index
    return 0


def plan_recovery(
    kind: Recovery,
    commitlog: CommitLog,
    checkpoint: StoreCheckpoint,
    config: StoreConfig,
    consume_queues: Mapping[tuple[str, int], ConsumeQueue],
    index_load: IndexLoadPlan | None,
    summary: QueueSummary | None = None,
) -> RecoveryPlan:
    """Check the CommitLog from the safe file on and decide every cut; nothing is written.

    `index_load` is `IndexService.plan_load` for this load (None without an index); `summary`
    the clean stop's queue summary, used on a normal load only (store/queue_summary.py).
    """
    start_index, end = check_commitlog(kind, commitlog, checkpoint, config)
    summary = fitting_summary(summary, kind, commitlog, end)
    return plan_cut(kind, commitlog, start_index, end, consume_queues, index_load, summary)


def check_commitlog(
    kind: Recovery, commitlog: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig
) -> tuple[int, int]:
    """(The index of the CommitLog file the check starts at, where the valid records end)."""
    start_index = check_start_index(kind, commitlog, checkpoint, config)
    return start_index, commitlog.scan_valid_end(start_index)


def fitting_summary(
    summary: QueueSummary | None, kind: Recovery, commitlog: CommitLog, end: int
) -> QueueSummary | None:
    """`summary` if this load may use it: a normal load, the CommitLog as the stop left it."""
    if summary is not None and (
        kind is not Recovery.NORMAL or not summary.matches(commitlog.min_offset, end)
    ):
        log.warning(
            "ConsumeQueue summary of CommitLog [%d, %d) does not fit [%d, %d) (%s load): "
            "every ConsumeQueue is checked",
            summary.commitlog_min,
            summary.commitlog_end,
            commitlog.min_offset,
            end,
            kind.value,
        )
        return None
    return summary


def plan_cut(
    kind: Recovery,
    commitlog: CommitLog,
    check_from_segment: int,
    end: int,
    consume_queues: Mapping[tuple[str, int], ConsumeQueue],
    index_load: IndexLoadPlan | None,
    summary: QueueSummary | None = None,
) -> RecoveryPlan:
    """The plan for a CommitLog cut at `end`: tails kept aside, queue cuts, re-dispatch."""
    segments = commitlog.segments.segments
    check_from = segments[check_from_segment].start_offset if segments else 0
    tails = tuple(commitlog.tails_past(end)) if segments else ()
    # After a machine restart units of records from S on may have lost unsynced pages anywhere.
    suspect_from = check_from if kind is Recovery.OTHER_BOOT else None
    queue_cuts, queues = check_consume_queues(consume_queues, commitlog, end, suspect_from, summary)
    rebuild_from = index_load.rebuild_from if index_load is not None else None
    reput_from = redispatch_start(kind, queues, check_from, rebuild_from)
    # The cut keeps the CommitLog's first file (end lies at or past its start): same minimum.
    redispatch_from = max(reput_from, commitlog.min_offset)
    return RecoveryPlan(
        kind, check_from_segment, check_from, end, tails, queue_cuts, index_load, redispatch_from
    )


def redispatch_start(
    kind: Recovery, queues: RecoveredQueues, check_from: int, index_rebuild_from: int | None
) -> int:
    """Where dispatch must restart for the ConsumeQueues and the index to be complete.

    M = `queues.end`, S = `check_from`, R = `index_rebuild_from` (None without an index); see
    the module docstring for the rules and why they are safe.
    """
    if kind is Recovery.NORMAL:
        reput_from = queues.end
    elif kind is Recovery.SAME_BOOT:
        if index_rebuild_from is not None:
            # R is the start of the newest indexed record, which is dispatched again: its
            # entries may be half written (UNIQ_KEY but not all KEYS); those it has are
            # added twice, which queries absorb (query_message lists an offset once).
            reput_from = min(queues.end, max(index_rebuild_from, check_from))
        else:
            reput_from = min(queues.end, check_from)
    else:
        reput_from = min(queues.end, check_from)
        if index_rebuild_from is not None and index_rebuild_from >= 0:
            # Index files destroyed by load() may hold entries older than check_from.
            reput_from = min(reput_from, index_rebuild_from)
    if queues.damaged_from >= 0:
        reput_from = min(reput_from, queues.damaged_from)
    return reput_from


def apply_recovery(
    plan: RecoveryPlan,
    commitlog: CommitLog,
    consume_queues: Mapping[tuple[str, int], ConsumeQueue],
    index: IndexService | None,
    root: Path,
) -> int:
    """Cut as planned: index files, CommitLog, ConsumeQueues, index entries past the end;
    returns where dispatch restarts."""
    end = plan.commitlog_end
    if index is not None and plan.index_load is not None:
        index.apply_load(plan.index_load)
    if commitlog.segments.segments:
        commitlog.cut_recovered(end, plan.kept_aside)
    for key, cut in plan.queue_cuts.items():
        consume_queues[key].apply_recovery(cut)
    if index is not None:
        index.truncate_after(end)
    if plan.kind is not Recovery.NORMAL:
        how = (
            "same boot: the pages it wrote are intact, dispatch resumes where it stopped"
            if plan.kind is Recovery.SAME_BOOT
            else "another boot (or no boot id): RocketMQ's recovery from the checkpoint"
        )
        log.warning(
            "store %s was not shut down cleanly; abnormal recovery, %s: CommitLog checked "
            "from %d, ends at %d, re-dispatch from %d",
            root,
            how,
            plan.check_from,
            end,
            plan.redispatch_from,
        )
    return plan.redispatch_from


def check_consume_queues(
    consume_queues: Mapping[tuple[str, int], ConsumeQueue],
    commitlog: CommitLog,
    end: int,
    suspect_from: int | None = None,
    summary: QueueSummary | None = None,
) -> tuple[dict[tuple[str, int], QueueCut], RecoveredQueues]:
    """Check every queue against a CommitLog cut at `end` (reads only): each queue's cut, where
    their units then end, and where damaged ones need rebuilding. `suspect_from`: see
    ConsumeQueue.check_recovery. A queue that `summary` (a clean stop's, fitting this CommitLog)
    knows, with the files it lists, is taken from it unchecked and unmapped."""
    cuts: dict[tuple[str, int], QueueCut] = {}
    queues_end = 0
    damaged_from: list[int] = []
    for key, queue in consume_queues.items():
        state = summary.queues.get(key) if summary is not None else None
        if state is not None and known_state(queue, state):
            cut = QueueCut(
                state.wrote_end, state.min_logic_offset, state.max_physical_offset, -1, True, True
            )
        else:
            cut = queue.check_recovery(unit_checker(commitlog, queue, end), end, suspect_from)
        cuts[key] = cut
        if not cut.clean:
            damaged_from.append(max(cut.max_physical_offset, 0))
        queues_end = max(queues_end, cut.max_physical_offset)
    return cuts, RecoveredQueues(queues_end, min(damaged_from, default=-1))


def unit_checker(commitlog: CommitLog, queue: ConsumeQueue, end: int) -> UnitChecker:
    """Does the CommitLog, cut at `end`, hold this queue's record of this size and queue offset
    there? (A record past `end` is gone after the cut, whatever the bytes hold before it.)"""
    commitlog_min = commitlog.min_offset
    topic = queue.topic.encode()
    queue_id = queue.queue_id

    def check(phy: int, size: int, queue_offset: int) -> bool:
        if phy < commitlog_min:
            return True  # deleted by retention: nothing left to check it against
        if phy + size > end:
            return False
        record = commitlog.get_record(phy, size) if size >= RECORD_MIN_SIZE else None
        if record is None:
            return False
        total, magic, stored_queue_id, stored_offset = read_queue_position(record, 0)
        if magic != MAGIC_V1 or total != size:
            return False
        return (
            stored_queue_id == queue_id
            and stored_offset == queue_offset
            and read_topic(record, 0, size) == topic
        )

    return check


def rebuild_queue_offsets(
    commitlog: CommitLog,
    consume_queues: Mapping[tuple[str, int], ConsumeQueue],
    corrected: Mapping[tuple[str, int], QueueCut] | None = None,
) -> None:
    """The CommitLog's next queue offset per queue, from the ConsumeQueues (after a cut).

    Queues whose cut in `corrected` is `known` keep their minimum: the clean stop's summary
    gave it, against the same CommitLog minimum (their files stay unmapped).
    """
    table: dict[str, int] = {}
    commitlog_min = commitlog.min_offset
    for key, queue in consume_queues.items():
        topic, queue_id = key
        cut = corrected.get(key) if corrected is not None else None
        if cut is None or not cut.known:
            queue.correct_min_offset(commitlog_min)
        table[f"{topic}-{queue_id}"] = queue.max_offset
    commitlog.topic_queue_table = table
