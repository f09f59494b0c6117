"""Recovery edge cases that need no writer process: retention before a restart, crash leftovers.

The store is driven in-process here because the state to recover from is reached on purpose
(CommitLog files deleted by retention, a file creation cut short), not by killing a process.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import pytest

from tests.fault.store_fault_check import History, Writers, check_store
from tests.fault.store_writer import BASE_PROPS, store_config
from tidemq.store.commitlog import PutStatus
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, decode_record

SEGMENT = int(BASE_PROPS["mappedFileSizeCommitLog"])
CQ_FILE = int(BASE_PROPS["mappedFileSizeConsumeQueue"])


async def _put(store: MessageStore, topic: str, queue_id: int, body: bytes) -> int:
    result = await store.put_message(MessageToStore(topic=topic, queue_id=queue_id, body=body))
    assert result.status is PutStatus.PUT_OK and result.append is not None
    return result.append.queue_offset


@pytest.mark.parametrize("exit_kind", ["clean", "abort_file_left"])
def test_queue_whose_records_were_all_deleted_keeps_its_offsets(
    tmp_path: Path, exit_kind: str
) -> None:
    """An idle queue whose records retention deleted keeps its offsets over a restart.

    Its last ConsumeQueue file stays (the last file is never deleted) with units pointing below
    the CommitLog's minimum: recovery cannot check them against records that are gone and must
    not take them for garbage, or the queue's offsets would start again from its file start.
    """
    config = store_config(str(tmp_path / "store"))
    idle = 120  # more than two ConsumeQueue files: the idle queue keeps only its last one
    busy_body = bytes(40_000)

    async def fill() -> None:
        store = MessageStore(config)
        store.load()
        await store.start()
        try:
            for i in range(idle):
                assert await _put(store, "Idle", 0, b"idle %d" % i) == i
            while store.commitlog.segments.segments[-1].start_offset < 5 * SEGMENT:
                await _put(store, "Busy", 1, busy_body)
            deleted = await store.delete_expired_commitlog(0, True, 3)
            assert deleted == 3
            assert store.min_phy_offset == 3 * SEGMENT
            assert store.max_offset_in_queue("Idle", 0) == idle
            assert store.min_offset_in_queue("Idle", 0) == idle
        finally:
            await store.stop()

    asyncio.run(fill())
    if exit_kind == "abort_file_left":
        (tmp_path / "store" / "abort").touch()
    queue_files = sorted((tmp_path / "store" / "consumequeue" / "Idle" / "0").iterdir())
    assert len(queue_files) == 1 and queue_files[0].name != f"{0:020d}"

    async def reopen() -> None:
        store = MessageStore(config)
        store.load()
        await store.start()
        try:
            assert store.max_offset_in_queue("Idle", 0) == idle
            assert store.min_offset_in_queue("Idle", 0) == idle
            result = store.get_message("g", "Idle", 0, 0, 32)
            assert result.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert result.next_begin_offset == idle
            assert await _put(store, "Idle", 0, b"after restart") == idle
            found = store.get_message("g", "Idle", 0, idle, 32)
            assert found.status is GetMessageStatus.FOUND
            assert [decode_record(m).body for m in found.messages] == [b"after restart"]
            found.messages.clear()
        finally:
            await store.stop()

    asyncio.run(reopen())


def test_segment_creation_left_by_a_crash_is_removed(
    tmp_path: Path, writers: Writers, seed: int
) -> None:
    """A crash between creating a segment and giving it its size leaves only a `.tmp` file.

    Segments are sized under a temporary name and then linked to their own, so their real name
    never shows a short file; load removes the leftovers, which never held data.
    """
    store_dir = tmp_path / "store"
    history = History(seed)
    run = writers.run_to_end(store_dir, seed=seed, round_no=0, tasks=2, count=40)
    history.add_run(0, 2, run.acks())
    segments = sorted((store_dir / "commitlog").iterdir())
    next_name = f"{int(segments[-1].name) + SEGMENT:020d}"
    queue_dir = next(p for p in sorted((store_dir / "consumequeue").glob("*/*")) if p.is_dir())
    leftovers = [
        store_dir / "commitlog" / f"{next_name}.tmp",
        queue_dir / f"{CQ_FILE * 7:020d}.tmp",
    ]
    leftovers[0].write_bytes(b"")
    leftovers[1].write_bytes(bytes(CQ_FILE // 2))
    (store_dir / "abort").touch()
    check_store(store_dir, history, "with .tmp leftovers")
    assert not any(p.exists() for p in leftovers)

    run = writers.run_to_end(store_dir, seed=seed, round_no=1, tasks=2, count=40)
    history.add_run(1, 2, run.acks())
    check_store(store_dir, history, "after more appends")
    assert not list(store_dir.rglob("*.tmp"))


@pytest.mark.parametrize("damage", ["zeroed_page", "garbage_tail"])
def test_consume_queue_hole_is_rebuilt(
    tmp_path: Path, writers: Writers, seed: int, damage: str
) -> None:
    """Zeros in the middle of a ConsumeQueue (a page lost in a power cut) or a garbage tail.

    Units after the hole are cut and rebuilt from the CommitLog, not left as a silent gap.
    """
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    history = History(seed)
    run = writers.run_to_end(store_dir, seed=seed, round_no=0, tasks=3, count=200)
    history.add_run(0, 3, run.acks())
    queue_dir = max(
        (p for p in (store_dir / "consumequeue").glob("*/*") if p.is_dir()),
        key=lambda p: (len(list(p.iterdir())), str(p)),
    )
    files = sorted(queue_dir.iterdir())
    target = files[-2] if len(files) >= 2 else files[-1]
    data = bytearray(target.read_bytes())
    if damage == "zeroed_page":
        at = rng.randrange(1, CQ_FILE // 20 - 2) * 20
        data[at : at + 60] = bytes(60)
    else:
        at = rng.randrange(CQ_FILE // 40, CQ_FILE // 20) * 20
        data[at:] = rng.randbytes(len(data) - at)
    target.write_bytes(bytes(data))
    check_store(store_dir, history, f"{damage} in {target}")


def test_kill_inside_file_creation(tmp_path: Path, writers: Writers, seed: int) -> None:
    """SIGKILL while a new CommitLog, ConsumeQueue or index file is being sized.

    Before segments were created under a temporary name, this left a 0-byte CommitLog or
    ConsumeQueue file under its real name, and no later start-up could load the store.
    """
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    history = History(seed)
    kills = ["1:commitlog", "1:consumequeue", "2:commitlog", "1:index", "3:consumequeue"]
    kills += [f"{rng.randint(1, 4)}:commitlog", f"{rng.randint(1, 30)}:consumequeue"]
    for round_no, kill in enumerate(kills):
        tasks = rng.randint(1, 3)
        run = writers.start(
            store_dir, seed=seed, round_no=round_no, tasks=tasks, kill_at_ftruncate=kill
        )
        rc = run.proc.wait(timeout=60)
        assert rc == -signal.SIGKILL, f"{kill}: exit {rc}: {run.stderr()}"
        history.add_run(round_no, tasks, run.acks())
        check_store(store_dir, history, f"round {round_no}, killed at ftruncate {kill}")
        assert not list(store_dir.rglob("*.tmp")), "leftovers are removed at load"


@pytest.mark.slow
@pytest.mark.parametrize("boot", ["other", "same"])
def test_index_files_destroyed_by_a_crash_are_rebuilt_whole(
    tmp_path: Path, writers: Writers, seed: int, boot: str
) -> None:
    """After a crash, index files newer than the checkpoint are destroyed and rebuilt.

    Such a file can begin long before the CommitLog file that abnormal recovery restarts
    dispatch from (chosen by the checkpoint's store times, minus 3 s): the rebuild must start
    where the last kept index file ends, or the keys of the messages in between are lost.

    An index file here holds 2047 entries, about 680 messages (a unique key and two keys each).
    Round 0 stores 900 messages, so the second index file begins some 220 messages (several
    CommitLog files) before round 0 ends. Store time then moves on by more than 3 s; round 1
    adds 100 messages and stops cleanly, round 2 adds about 100 and is killed. The second index
    file ends after the checkpoint and is destroyed, while dispatch restarts in round 0's last
    CommitLog file.

    That is recovery after a machine restart ("other": the abort file is given another boot
    id). After a SIGKILL on the same boot ("same") the files hold everything dispatch put, are
    kept, and dispatch resumes where it stopped; every key must be found either way.
    """
    store_dir = tmp_path / "store"
    history = History(seed)
    for round_no, count in ((0, 450), (1, 50)):
        if round_no:
            time.sleep(3.5)
        run = writers.run_to_end(store_dir, seed=seed, round_no=round_no, tasks=2, count=count)
        history.add_run(round_no, 2, run.acks())
    run = writers.start(store_dir, seed=seed, round_no=2, tasks=2)
    try:
        run.wait_ready()
        run.wait_acks(100)
    finally:
        run.kill()
    if boot == "other":
        (store_dir / "abort").write_text("another-boot")
    history.add_run(2, 2, run.acks())
    check_store(store_dir, history, f"after a crash with index files to rebuild ({boot} boot)")
