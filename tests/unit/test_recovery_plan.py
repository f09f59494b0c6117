"""Recovery's two halves on their own (store/recovery.py): the plan changes nothing, the step
applies exactly the plan, and the re-dispatch rule is a function of what they found.

A store is filled and stopped cleanly, then its parts are opened by hand (the CommitLog, its
ConsumeQueue, the checkpoint) as `MessageStore.load` opens them, without the façade.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.stores import StoreFactory
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import CommitLog, KeptTail
from tidemq.store.config import CQ_UNIT_SIZE
from tidemq.store.consume_queue import ConsumeQueue, QueueCut
from tidemq.store.index import IndexLoadPlan, IndexService
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, decode_record
from tidemq.store.recovery import (
    RecoveredQueues,
    Recovery,
    RecoveryPlan,
    apply_recovery,
    check_start_index,
    plan_cut,
    plan_recovery,
    redispatch_start,
)
from tidemq.store.segment_queue import SegmentQueue

FILE = 4096
CQ_FILE = 20 * 8
T0 = 4_102_444_800_000  # 2100-01-01: store times set from here are ahead of the clock
GARBAGE = bytes(range(1, 101))  # a torn record: non-zero bytes that are no record


STORES = StoreFactory(
    mapped_file_size_commit_log=FILE,
    mapped_file_size_consume_queue=CQ_FILE,
    message_index_enable=False,
)
make_config = STORES.config


async def fill(root: Path, count: int) -> list[int]:
    """`count` messages into queue T-0 of a store stopped cleanly; their physical offsets."""
    store = MessageStore(make_config(root))
    store.load()
    await store.start()
    offsets = []
    try:
        for i in range(count):
            # Store times a second apart: each file's first record has its own.
            store.commitlog.last_store_timestamp = T0 + 1000 * i
            result = await store.put_message(MessageToStore("T", 0, b"m%03d" % i * 40))
            assert result.append is not None
            offsets.append(result.append.wrote_offset)
        offsets.append(store.max_phy_offset)
    finally:
        await store.stop()
    return offsets


def open_commitlog(root: Path) -> CommitLog:
    config = make_config(root)
    segments = SegmentQueue(config.commit_log_dir, FILE)
    segments.load()
    return CommitLog(config, segments)


def open_queue(root: Path) -> ConsumeQueue:
    queue = ConsumeQueue(root / "consumequeue", "T", 0, CQ_FILE)
    queue.load()
    return queue


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def tear(root: Path, end: int) -> Path:
    """Write GARBAGE where the CommitLog ends (a record torn by a crash); the file written."""
    path = root / "commitlog" / f"{end - end % FILE:020d}"
    with path.open("r+b") as f:
        f.seek(end % FILE)
        f.write(GARBAGE)
    return path


async def test_the_plan_finds_the_cut_and_the_torn_tail_and_changes_nothing(
    tmp_path: Path,
) -> None:
    offsets = await fill(tmp_path, 60)  # 16 records a file: 4 files
    end = offsets[-1]
    segment = tear(tmp_path, end)
    before = files(tmp_path)
    commitlog = open_commitlog(tmp_path)
    queue = open_queue(tmp_path)
    try:
        config = make_config(tmp_path)
        checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
        plan = plan_recovery(
            Recovery.NORMAL, commitlog, checkpoint, config, {("T", 0): queue}, None
        )
    finally:
        commitlog.segments.close()
        queue.close()
    start = end % FILE
    assert plan == RecoveryPlan(
        kind=Recovery.NORMAL,
        check_from_segment=1,  # the third file from the end
        check_from=FILE,
        commitlog_end=end,
        kept_aside=(
            KeptTail(
                end - start,
                start,
                start + len(GARBAGE),
                segment.with_name(f"{segment.name}.{start}.torn"),
            ),
        ),
        # The queue is sound: kept whole, and dispatch restarts where its units end.
        queue_cuts={("T", 0): QueueCut(60 * CQ_UNIT_SIZE, 0, end, -1, True)},
        index_load=None,
        redispatch_from=end,
    )
    assert end // FILE == 3
    assert files(tmp_path) == before  # nothing written, nothing kept aside yet


async def test_applying_a_plan_keeps_the_tail_aside_cuts_there_and_redispatches_from_the_queues(
    tmp_path: Path,
) -> None:
    offsets = await fill(tmp_path, 60)
    cut = offsets[20]  # a plan that cuts below the real end: apply follows the plan only
    before = files(tmp_path)
    commitlog = open_commitlog(tmp_path)
    queue = open_queue(tmp_path)
    try:
        plan = plan_cut(Recovery.NORMAL, commitlog, 0, cut, {("T", 0): queue}, None)
        assert plan.kept_aside == tuple(commitlog.tails_past(cut, "torn"))
        # Units past the cut are not clean: the queue is rebuilt from its cut on.
        assert plan.queue_cuts == {("T", 0): QueueCut(20 * CQ_UNIT_SIZE, 0, cut, -1, False)}
        assert files(tmp_path) == before  # planned, not applied yet
        redispatch_from = apply_recovery(plan, commitlog, {("T", 0): queue}, None, tmp_path)
        assert commitlog.max_offset == cut
        # The queue keeps the units of the records left, and dispatch restarts where they end.
        assert (queue.max_offset, queue.max_physical_offset) == (20, cut)
        assert redispatch_from == cut
    finally:
        commitlog.segments.close()
        queue.close()
    after = files(tmp_path)
    segment_name = f"commitlog/{cut - cut % FILE:020d}"
    original = before[segment_name]
    start = cut % FILE
    assert after[f"{segment_name}.{start}.torn"] == original[start:].rstrip(b"\0")
    assert after[segment_name][start:] == bytes(FILE - start)
    assert after[segment_name][:start] == original[:start]
    assert decode_record(after[segment_name], offsets[19] % FILE).queue_offset == 19
    # Later files were removed by the cut, their bytes kept aside too.
    later = [n for n in before if n.startswith("commitlog/") and int(n[10:]) > cut]
    assert len(later) == 2
    for name in later:
        assert name not in after
        assert after[f"{name}.0.torn"] == before[name].rstrip(b"\0")


@pytest.mark.parametrize(
    ("kind", "queues", "rebuild_from", "expected"),
    [
        # Normal: M, or lower where a damaged queue must be rebuilt.
        (Recovery.NORMAL, RecoveredQueues(900, -1), 100, 900),
        (Recovery.NORMAL, RecoveredQueues(900, 700), None, 700),
        # Same boot: min(M, max(R, S)); without an index min(M, S).
        (Recovery.SAME_BOOT, RecoveredQueues(900, -1), 800, 800),
        (Recovery.SAME_BOOT, RecoveredQueues(900, -1), 100, 500),
        (Recovery.SAME_BOOT, RecoveredQueues(600, -1), 800, 600),
        (Recovery.SAME_BOOT, RecoveredQueues(900, -1), None, 500),
        (Recovery.SAME_BOOT, RecoveredQueues(900, 300), 800, 300),
        # Other boot: min(M, S, R), R only where index files remain.
        (Recovery.OTHER_BOOT, RecoveredQueues(900, -1), 800, 500),
        (Recovery.OTHER_BOOT, RecoveredQueues(900, -1), 200, 200),
        (Recovery.OTHER_BOOT, RecoveredQueues(900, -1), -1, 500),
        (Recovery.OTHER_BOOT, RecoveredQueues(400, -1), None, 400),
        (Recovery.OTHER_BOOT, RecoveredQueues(900, 100), 200, 100),
    ],
)
def test_redispatch_start_follows_the_rules(
    kind: Recovery, queues: RecoveredQueues, rebuild_from: int | None, expected: int
) -> None:
    assert redispatch_start(kind, queues, 500, rebuild_from) == expected


async def test_an_abnormal_check_starts_at_the_newest_file_older_than_the_checkpoint(
    tmp_path: Path,
) -> None:
    await fill(tmp_path, 60)
    commitlog = open_commitlog(tmp_path)
    try:
        config = make_config(tmp_path)
        segments = commitlog.segments.segments
        assert len(segments) >= 4
        firsts = [commitlog.first_record_timestamp(s) for s in segments]
        checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
        # The checkpoint's times as if the third file's first record were the last flushed.
        checkpoint.physic_msg_timestamp = checkpoint.logics_msg_timestamp = firsts[2] + 3000
        assert check_start_index(Recovery.OTHER_BOOT, commitlog, checkpoint, config) == 2
        assert check_start_index(Recovery.SAME_BOOT, commitlog, checkpoint, config) == 2
        assert (
            check_start_index(Recovery.NORMAL, commitlog, checkpoint, config) == len(segments) - 3
        )
        checkpoint.physic_msg_timestamp = checkpoint.logics_msg_timestamp = 0
        assert check_start_index(Recovery.OTHER_BOOT, commitlog, checkpoint, config) == 0
    finally:
        commitlog.segments.close()


async def test_applying_a_hand_made_plan_cuts_each_queue_exactly_where_it_says(
    tmp_path: Path,
) -> None:
    offsets = await fill(tmp_path, 60)
    end = offsets[-1]
    before = files(tmp_path)
    commitlog = open_commitlog(tmp_path)
    queue = open_queue(tmp_path)
    try:
        # The CommitLog is kept whole; the queue is cut at unit 10 (in its second file), with a
        # minimum and a last record end that the plan states, not that a check would find.
        queue_cut = QueueCut(10 * CQ_UNIT_SIZE, 2 * CQ_UNIT_SIZE, offsets[10], -1, False)
        plan = RecoveryPlan(Recovery.NORMAL, 0, 0, end, (), {("T", 0): queue_cut}, None, 12345)
        assert apply_recovery(plan, commitlog, {("T", 0): queue}, None, tmp_path) == 12345
        assert commitlog.max_offset == end
        assert (queue.min_offset, queue.max_offset) == (2, 10)
        assert queue.max_physical_offset == offsets[10]
    finally:
        commitlog.segments.close()
        queue.close()
    after = files(tmp_path)
    units_per_file = CQ_FILE // CQ_UNIT_SIZE
    cut_file = f"consumequeue/T/0/{CQ_FILE:020d}"
    assert after[cut_file][: 2 * CQ_UNIT_SIZE] == before[cut_file][: 2 * CQ_UNIT_SIZE]
    assert after[cut_file][2 * CQ_UNIT_SIZE :] == bytes(CQ_FILE - 2 * CQ_UNIT_SIZE)
    queue_files = sorted(n for n in before if n.startswith("consumequeue/"))
    assert len(queue_files) == -(-60 // units_per_file)
    for name in queue_files:
        if int(name.rsplit("/", 1)[1]) > CQ_FILE:
            assert name not in after  # past the cut: removed
        elif name != cut_file:
            assert after[name] == before[name]
    # Everything else (the CommitLog, the checkpoint) is as it was.
    assert {n: b for n, b in after.items() if not n.startswith("consumequeue/")} == {
        n: b for n, b in before.items() if not n.startswith("consumequeue/")
    }


async def test_after_a_machine_restart_the_plan_names_the_index_files_and_changes_nothing(
    tmp_path: Path,
) -> None:
    offsets = await fill(tmp_path, 60)
    # Index files with entries newer than the checkpoint (store times in 2100): another boot
    # destroys them all, and dispatch rebuilds from the start.
    index = IndexService(tmp_path / "index", 4, 3)
    index.load(True, 0)
    for i, phy in enumerate(offsets[:6]):
        index.build_index("T", f"k{i}", None, phy, T0 + 1000 * i, 0)
    index.flush()
    index.close()
    index_files = tuple(sorted((tmp_path / "index").iterdir()))
    assert len(index_files) == 3
    tear(tmp_path, offsets[-1])
    before = files(tmp_path)
    commitlog = open_commitlog(tmp_path)
    queue = open_queue(tmp_path)
    index = IndexService(tmp_path / "index", 4, 3)
    try:
        checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
        index_load = index.plan_load(False, checkpoint.index_msg_timestamp)
        plan = plan_recovery(
            Recovery.OTHER_BOOT,
            commitlog,
            checkpoint,
            make_config(tmp_path),
            {("T", 0): queue},
            index_load,
        )
        assert plan.index_load == IndexLoadPlan((), index_files, (), True, 0)
        assert plan.redispatch_from == 0
        assert plan.queue_cuts[("T", 0)].cut_at == 60 * CQ_UNIT_SIZE
        assert files(tmp_path) == before  # nothing destroyed, cut or kept aside yet
        assert apply_recovery(plan, commitlog, {("T", 0): queue}, index, tmp_path) == 0
        assert index.files == 0
        assert not any((tmp_path / "index").iterdir())
    finally:
        commitlog.segments.close()
        queue.close()
        index.close()
