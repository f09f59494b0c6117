"""Power cuts on lossy file systems (tests/support/lazyfs.py).

- A SYNC_FLUSH store writer process (tests/fault/store_writer.py: 256 KiB CommitLog files,
  20-unit ConsumeQueue files, so files are created all the time) cut under load, then the store
  loaded and checked offline (`store_fault_check.check_store`: every acknowledged message at its
  place, in its queue and index, nothing invalid). Without the store's directory fsyncs (a new
  store, CommitLog or ConsumeQueue file, or queue directory, lost whole) and the fsync of a new
  file's size (a ConsumeQueue file back with 0 bytes stopped the load) it fails.
- A few seeded rounds of each scenario of tests/fault/powercut.py with brokerd processes (its
  docstring states what each scenario promises), every send and read judged by the history
  checker (tests/support/history.py); `make powercut` is the long run.

Rerun a failure with TIDEMQ_FAULT_SEED=<seed>.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from tests.fault.powercut import (
    TOPIC,
    VICTIMS,
    body_number,
    body_of,
    differing_ranges,
    key_of,
    power_cut,
    run,
    torn_records,
)
from tests.fault.store_fault_check import History, Writers, check_store
from tests.support.history import Recorder, check
from tests.support.lazy_mounts import NEEDS_FUSE, LazyMount, can_mount
from tests.support.stores import StoreFactory
from tidemq.store.commitlog import PutStatus
from tidemq.store.record import MessageToStore, encode_properties

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)

ROUNDS = 3
WRITER_ROUNDS = 4


@pytest.mark.parametrize("mode", ["all", "torn"])
def test_sync_flush_writer_keeps_every_acknowledged_message(
    tmp_path: Path, writers: Writers, seed: int, mode: str
) -> None:
    rng = random.Random(seed)
    mount = LazyMount(tmp_path, "disk")
    history = History(seed)
    try:
        for round_no in range(WRITER_ROUNDS):
            mount.start()
            tasks = rng.randint(1, 4)
            # appends by pwrite (the default) or by copies into the shared map (msync'd)
            overrides = rng.choice([{}, {"appendMode": "mmap"}])
            run_ = writers.start(
                mount.path / "store", seed=seed, round_no=round_no, tasks=tasks, overrides=overrides
            )
            run_.wait_acks(rng.randint(20, 300))
            summary = power_cut(mount, mode, rng.randrange(2**31))
            run_.kill()
            acks = run_.acks()
            history.add_run(round_no, tasks, acks)
            lost, kept = summary["pages_lost"], summary["pages_kept"]
            context = (
                f"round {round_no} ({overrides or 'pwrite'}): {len(acks)} acks, {mode} cut "
                f"({lost} pages lost, {kept} kept)"
            )
            report = check_store(mount.backing / "store", history, context)
            print(f"{context}: {report.records} records")
    finally:
        mount.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("scenario", ["sync-flush", "async-flush", "ha", "ha-async-flush"])
async def test_power_cut_rounds(tmp_path: Path, seed: int, scenario: str) -> None:
    report = await run(scenario, ROUNDS, tmp_path, seed)
    print(report.line())
    assert report.rounds == ROUNDS
    assert report.in_flight_at_cut > 0, "every cut came with sends in flight"
    assert not report.violations, report.line()
    if scenario not in ("async-flush", "ha-async-flush"):
        assert report.lost == 0
    if scenario == "ha-async-flush":  # the master, the slave and both, once each
        assert sorted(c.split()[0] for c in report.cuts.elements()) == sorted(
            "+".join(victims) for victims in VICTIMS
        ), report.cuts


def test_a_served_body_not_exactly_the_one_sent_is_judged_never_sent() -> None:
    """What the rounds' history makes of a half-written or foreign body: an id no send has, so
    the checker's `duplicate` rule reports it (`never sent`); an exact body is its number."""
    recorder = Recorder(None, "test")
    op = recorder.invoke("send", topic=TOPIC, body=7, attempts=1)
    recorder.complete(op, "ok", "send", broker_name="b", queue=0, offset=0, broker="h")
    torn = bytearray(body_of(7))
    torn[-1] ^= 1
    read = recorder.invoke("read", topic=TOPIC, broker_name="b", final=True)
    served = [
        ["b", 0, 0, body_number(body_of(7)), "h", 0],
        ["b", 0, 1, body_number(bytes(torn)), "h", 0],
    ]
    recorder.complete(read, "ok", "read", messages=served)
    judged = check(recorder.events)
    assert body_number(body_of(7)) == 7
    assert judged.counts["lost"] == 0
    assert any("never sent" in text for text in judged.violations["duplicate"]), judged.summary()


async def test_a_record_torn_after_its_body_is_found_in_the_files(tmp_path: Path) -> None:
    """What a torn cut can leave that recovery keeps (the CRC covers the body only): a record
    whose body is intact and whose properties past a page boundary are zeros. `torn_records`
    names it (the history cannot: it names a message by its body), and `differing_ranges`
    shows where it differs from an intact copy."""
    factory = StoreFactory(mapped_file_size_commit_log=65536, max_message_size=4096)
    ends = []
    store = factory.open(tmp_path / "master")
    await store.start()
    try:
        for number in range(3):
            props = encode_properties({"KEYS": key_of(number)})
            message = MessageToStore(TOPIC, number % 4, body_of(number), props)
            result = await store.put_message(message)
            assert result.status is PutStatus.PUT_OK and result.append is not None
            ends.append(result.append.wrote_offset + result.append.wrote_bytes)
    finally:
        await store.stop()
    shutil.copytree(tmp_path / "master", tmp_path / "slave")
    assert torn_records(tmp_path / "slave") == []
    assert differing_ranges(tmp_path / "master", tmp_path / "slave", ends[2]) == []
    # the second record's last 4 bytes (its KEYS value, pc1) as a dropped page leaves them
    segment = tmp_path / "slave" / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[ends[1] - 4 : ends[1]] = bytes(4)
    segment.write_bytes(bytes(data))
    torn = torn_records(tmp_path / "slave")
    assert [phy for phy, _ in torn] == [ends[0]], torn
    assert "body 1 with KEYS" in torn[0][1]
    assert differing_ranges(tmp_path / "master", tmp_path / "slave", ends[2]) == [
        (ends[1] - 4, ends[1])
    ]
