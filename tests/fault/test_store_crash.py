"""Fault tests of the store on real processes: SIGKILL, torn and damaged files, wrong sizes.

A writer process (`store_writer.py`) appends messages with SYNC_FLUSH and prints an ACK line for
every PUT_OK; the tests kill it, damage files the way a crash or a disk can, and check with
`store_fault_check.check_store` that loading the store recovers exactly what was acknowledged and
nothing invalid: the writers' puts and each check's reads are one history, judged by the history
checker (tests/support/history.py), the store's files by check_store itself. Randomness comes
from one seed, printed by each test; rerun a failure with `TIDEMQ_FAULT_SEED=<seed>`.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.fault.store_fault_check import (
    History,
    RecordAt,
    WriterRun,
    Writers,
    check_store,
    last_record,
    tree_digest,
)
from tests.fault.store_writer import BASE_PROPS, message_spec, parse_identity, store_config
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.errors import CorruptStoreError
from tidemq.store.message_store import MessageStore

SEGMENT = int(BASE_PROPS["mappedFileSizeCommitLog"])
CQ_FILE = int(BASE_PROPS["mappedFileSizeConsumeQueue"])
ROUNDS = 24
VARIANTS: list[dict[str, str]] = [{}, {"appendMode": "mmap"}, {"flushDiskType": "ASYNC_FLUSH"}]


def _kill_after_acks(run: WriterRun, acks: int, timeout: float = 30.0) -> None:
    run.wait_acks(acks, timeout)
    assert run.kill() == -signal.SIGKILL


def _fill(
    writers: Writers,
    store_dir: Path,
    history: History,
    *,
    stop: str,
    round_no: int = 0,
    tasks: int = 3,
    count: int = 100,
) -> WriterRun:
    """A writer round that ends cleanly (`stop="clean"`) or by SIGKILL after `count` per task."""
    if stop == "clean":
        run = writers.run_to_end(
            store_dir, seed=history.seed, round_no=round_no, tasks=tasks, count=count
        )
        assert not (store_dir / "abort").exists()
    else:
        run = writers.start(store_dir, seed=history.seed, round_no=round_no, tasks=tasks)
        _kill_after_acks(run, tasks * count)
        assert (store_dir / "abort").exists()
    history.add_run(round_no, tasks, run.acks())
    return run


# --- 1. SIGKILL at random moments -----------------------------------------------------------


@pytest.mark.slow
def test_sigkill_rounds_keep_every_acknowledged_message(
    tmp_path: Path, writers: Writers, seed: int
) -> None:
    """ROUNDS writers on one store, each killed at a random moment, each crash checked.

    Some writers are killed before they are ready (during start-up or recovery), some stop by
    themselves first (a clean shutdown). Half of the checks run on a copy of the crashed store,
    so that the next writer recovers the crash itself rather than the checker's recovered files.
    A quarter of the kills are recovered as after a machine restart (another boot id in the
    abort file), the rest as the same boot (dispatch resumes where it stopped).
    """
    rng = random.Random(seed)
    reboots = random.Random(seed + 1)  # its own stream: rng's sequence is as before
    store_dir = tmp_path / "store"
    history = History(seed)
    for round_no in range(ROUNDS):
        tasks = rng.randint(1, 4)
        count = rng.randint(1, 30) if rng.random() < 0.15 else None
        early = rng.random() < 0.2
        delay = rng.uniform(0.0, 0.2)
        # Appends by copies into the map can be torn by a kill; ASYNC_FLUSH acknowledges
        # before any fsync (the page cache survives a SIGKILL, so nothing acked may be lost).
        overrides = rng.choice(VARIANTS)
        if overrides.get("flushDiskType") == "ASYNC_FLUSH":
            delay /= 8  # it appends some 8 times faster: keep the store small
        run = writers.start(
            store_dir,
            seed=seed,
            round_no=round_no,
            tasks=tasks,
            count=count,
            overrides=overrides,
        )
        if not early:
            run.wait_ready()
        time.sleep(delay)
        rc = run.kill()
        # (A writer killed very early may not even have created the store directory.)
        on_copy = rng.random() < 0.5 and store_dir.exists()
        context = (
            f"round {round_no} ({overrides or 'defaults'}, tasks {tasks}, count {count}, killed "
            f"{'from spawn' if early else 'after READY'} +{delay:.3f} s, exit {rc}, "
            f"checked {'on a copy' if on_copy else 'in place'})"
        )
        assert rc in (0, -signal.SIGKILL), f"[seed {seed}] {context}: {run.stderr()}"
        assert not any(line.startswith("FAIL") for line in run.lines()), run.lines()[-3:]
        acks = run.acks()
        # A queue offset given again, a message lost or stored twice, one an earlier check
        # read gone: the history check of each round (check_store) judges them all.
        history.add_run(round_no, tasks, acks)
        if rc == -signal.SIGKILL and reboots.random() < 0.25 and (store_dir / "abort").exists():
            # As if the machine had restarted with every page on the disk: the abort file's
            # boot id differs, so recovery takes RocketMQ's path (from the checkpoint).
            (store_dir / "abort").write_text("another-boot")
            context += " as after a reboot"
        target = store_dir
        if on_copy:
            target = tmp_path / "copy"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(store_dir, target)
        report = check_store(target, history, context)
        print(f"{context}: {len(acks)} acks, {report.records} records, end {report.max_phy}")
    # The last round may have been checked on a copy: the store itself must check out too.
    final = check_store(store_dir, history, "final")
    assert final.history.counts["acknowledged"] > 0
    print(final.history.summary())


# --- 2. a damaged last record ---------------------------------------------------------------


def _damage_last_record(store_dir: Path, damage: str, rng: random.Random) -> tuple[RecordAt, bytes]:
    rec = last_record(store_dir, SEGMENT)
    data = bytearray(rec.raw)
    if damage == "flip_body_byte":
        at = rec.body_position - rec.position + rng.randrange(len(rec.msg.body))
        data[at] ^= rng.randint(1, 255)
    else:  # zero the tail half, as if the write had been torn there
        half = len(data) // 2
        data[half:] = bytes(len(data) - half)
    with rec.path.open("r+b") as f:
        f.seek(rec.position)
        f.write(data)
    return rec, bytes(data)


@pytest.mark.parametrize("stop", ["clean", "killed"])
@pytest.mark.parametrize("damage", ["flip_body_byte", "zero_tail_half"])
def test_damaged_last_record_is_cut_kept_aside_and_appends_go_on(
    tmp_path: Path, writers: Writers, seed: int, stop: str, damage: str
) -> None:
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    history = History(seed)
    _fill(writers, store_dir, history, stop=stop, count=rng.randint(60, 120))
    rec, damaged = _damage_last_record(store_dir, damage, rng)
    # What recovery must set aside: the damaged record and anything written after it. A killed
    # writer can leave part of a batch there: a fatal signal stops a pwrite at a page boundary.
    tail = rec.path.read_bytes()[rec.position :].rstrip(b"\x00")
    assert tail.startswith(damaged.rstrip(b"\x00"))
    ident = parse_identity(rec.msg.body)
    assert ident is not None
    history.drop(ident)

    report = check_store(store_dir, history, f"after {damage} ({stop})")
    assert report.max_phy == rec.phy, "recovery must end where the damaged record starts"
    torn = rec.path.with_name(f"{rec.path.name}.{rec.position}.torn")
    torns = sorted(p.name for p in rec.path.parent.glob("*.torn"))
    assert torns == [torn.name]
    assert torn.read_bytes() == tail
    assert rec.path.stat().st_size == SEGMENT

    run = _fill(writers, store_dir, history, stop="clean", round_no=1, tasks=2, count=40)
    if not message_spec(seed, *ident).prepared:
        reused = [
            a.queue_offset
            for a in run.acks()
            if (a.topic, a.queue_id) == (rec.msg.topic, rec.msg.queue_id)
            and not message_spec(seed, *a.ident).prepared
        ]
        if reused:
            assert min(reused) == rec.msg.queue_offset, "the dropped message's offset is next"
    check_store(store_dir, history, "after more appends")
    assert torn.read_bytes() == tail, "the torn copy must be kept"


# --- 2b, 4. files of the wrong size ---------------------------------------------------------


def _segment_files(store_dir: Path) -> list[Path]:
    return sorted(p for p in (store_dir / "commitlog").iterdir() if p.suffix != ".torn")


@pytest.mark.parametrize(
    ("which", "delta"),
    [("last", -SEGMENT // 2), ("last", -1), ("first", 4096), ("middle", -SEGMENT // 3)],
)
def test_commitlog_file_of_wrong_size_stops_start_up(
    tmp_path: Path, writers: Writers, seed: int, which: str, delta: int
) -> None:
    store_dir = tmp_path / "store"
    history = History(seed)
    _fill(writers, store_dir, history, stop="clean", count=150)
    files = _segment_files(store_dir)
    assert len(files) >= 3
    path = {"first": files[0], "middle": files[len(files) // 2], "last": files[-1]}[which]
    os.truncate(path, SEGMENT + delta)
    before = tree_digest(store_dir)

    for _attempt in range(2):  # the lock is released: the second attempt fails the same way
        store = MessageStore(store_config(str(store_dir)))
        with pytest.raises(CorruptStoreError, match=re.escape(str(path))) as caught:
            store.load()
        assert f"{SEGMENT + delta} bytes" in str(caught.value)
    assert tree_digest(store_dir) == before, "a failed load must not change any file"

    # What a user sees: the writer process says why and exits non-zero, without a traceback.
    run = writers.start(store_dir, seed=seed, round_no=1, tasks=1)
    rc = run.proc.wait(timeout=30)
    err = run.stderr()
    assert rc == 2, err
    assert "CorruptStoreError" in err and str(path) in err and f"expected {SEGMENT}" in err, err
    assert "Traceback" not in err
    assert not run.lines()
    assert tree_digest(store_dir) == before

    if delta > 0:
        # Once the file has its size back (only zeros were added), everything is there again.
        os.truncate(path, SEGMENT)
        check_store(store_dir, history, "size restored")


@pytest.mark.parametrize("stop", ["killed", "clean"])
def test_consume_queue_file_of_wrong_size_stops_start_up(
    tmp_path: Path, writers: Writers, seed: int, stop: str
) -> None:
    """After a crash the load refuses it. After a clean stop the load looks at no queue file
    (store/lazy_check.py): the queue's first use refuses it, every time, naming it."""
    store_dir = tmp_path / "store"
    history = History(seed)
    _fill(writers, store_dir, history, stop=stop, count=30)
    path = next(
        p
        for p in sorted((store_dir / "consumequeue").rglob("*"))
        if p.is_file() and not p.parent.parent.name.startswith("%")
    )
    os.truncate(path, CQ_FILE - 20)
    store = MessageStore(store_config(str(store_dir)))
    if stop == "killed":
        with pytest.raises(CorruptStoreError, match=re.escape(str(path))):
            store.load()
        # (Not compared with the tree before: the index recovery after a crash makes a new
        # index file before the queues are listed, on main as well.)
        assert path.stat().st_size == CQ_FILE - 20
        return
    store.load()
    try:
        topic, queue_id = path.parent.parent.name, int(path.parent.name)
        low = store.min_offset_in_queue(topic, queue_id)
        for _ in range(2):
            with pytest.raises(CorruptStoreError, match=re.escape(str(path))):
                store.get_message("g", topic, queue_id, low, 32)
        assert path.stat().st_size == CQ_FILE - 20  # left as it was found
    finally:
        asyncio.run(store.stop())


# --- 3. a ConsumeQueue file full of garbage -------------------------------------------------


def _queue_files(store_dir: Path) -> dict[Path, list[Path]]:
    queues: dict[Path, list[Path]] = {}
    for topic_dir in sorted((store_dir / "consumequeue").iterdir()):
        for queue_dir in sorted(topic_dir.iterdir()):
            queues[queue_dir] = sorted(queue_dir.iterdir())
    return queues


@pytest.mark.parametrize(
    ("which", "stop"),
    [
        ("first", "clean"),
        ("middle", "killed"),
        ("last", "clean"),
        ("last", "killed"),
        ("other_queue", "clean"),
    ],
)
def test_garbage_consume_queue_file_is_rebuilt_from_the_commitlog(
    tmp_path: Path, writers: Writers, seed: int, which: str, stop: str
) -> None:
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    history = History(seed)
    _fill(writers, store_dir, history, stop=stop, tasks=3, count=300)
    queues = _queue_files(store_dir)
    queue_dir, files = max(queues.items(), key=lambda item: (len(item[1]), str(item[0])))
    # Four files at least: the first is then older than the three checked unit by unit.
    assert len(files) >= 4, f"{queue_dir} has {len(files)} files"
    if which == "other_queue":
        # A file copied from another queue: every unit points at a real, valid record.
        target = files[1]
        donor = next(
            other[1]
            for q, other in queues.items()
            if q != queue_dir and len(other) >= 2 and other[1].name == target.name
        )
        target.write_bytes(donor.read_bytes())
    else:
        target = {"first": files[0], "middle": files[len(files) // 2], "last": files[-1]}[which]
        target.write_bytes(rng.randbytes(CQ_FILE))

    check_store(store_dir, history, f"{which} ConsumeQueue file of {queue_dir.name} replaced")
    _fill(writers, store_dir, history, stop="clean", round_no=1, tasks=2, count=30)
    check_store(store_dir, history, "after more appends")


def test_units_zeroed_inside_an_older_consume_queue_file_are_rebuilt_after_a_reboot(
    tmp_path: Path, writers: Writers, seed: int
) -> None:
    """A power cut can zero an unsynced page of any ConsumeQueue file written since the
    checkpoint, also in the middle of a file whose first and last units survived (the page
    before was lost, the page after kept: found by tests/fault/powercut.py). Recovery after a
    reboot must check those files whole, not only the last three, and rebuild the units."""
    store_dir = tmp_path / "store"
    history = History(seed)
    _fill(writers, store_dir, history, stop="killed", tasks=3, count=400)
    queues = _queue_files(store_dir)
    queue_dir, files = max(queues.items(), key=lambda item: (len(item[1]), str(item[0])))
    assert len(files) >= 4, f"{queue_dir} has {len(files)} files"
    older = files[len(files) - 4]  # not one of the last three
    with older.open("r+b") as f:
        f.seek(5 * 20)
        f.write(bytes(10 * 20))  # units 5..14 zeroed, the first and last intact
    # The machine restarted, and its checkpoint vouched for nothing yet.
    point = StoreCheckpoint(store_dir / "checkpoint")
    point.physic_msg_timestamp = point.logics_msg_timestamp = point.index_msg_timestamp = 1
    point.flush()
    (store_dir / "abort").write_text("another-boot")
    check_store(store_dir, history, f"units zeroed inside {older}")
