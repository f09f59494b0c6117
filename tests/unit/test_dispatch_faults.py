"""A record whose dispatch fails does not hold back the records after it (issue 30 item 3).

The policy (store/dispatch_faults.py) on its own, then on a real store: a plain file where a
topic's ConsumeQueue folder goes and a topic with a NUL byte (the two found from outside) are
quarantined after a bounded number of attempts, whichever path (fast, general, an appended
batch's layout) meets them, while every other queue keeps flowing, also across a restart; a full
disk is retried while it lasts and never quarantined. On c82965c the store tests fail: dispatch
stops at the poisoned record for good and a reload raises "[Errno 17] File exists" or "Not a
directory" (the policy tests fail on the missing module).
"""

from __future__ import annotations

import asyncio
import errno
import logging
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.messages import message
from tests.support.stores import StoreFactory
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.config import BrokerRole
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.dispatch_faults import (
    QUARANTINE_AFTER,
    QUARANTINE_FILE,
    DispatchFailure,
    DispatchFaults,
)
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageBatch, MessageToStore

STORES = StoreFactory(mapped_file_size_commit_log=64 * 1024)
POISON = "Poison"


def failure(topic: str, queue_id: int, offset: int, exc: Exception) -> DispatchFailure:
    result = DispatchFailure(topic, queue_id, offset)
    result.__cause__ = exc
    return result


# --- the policy, sans IO ----------------------------------------------------------------------


def test_a_record_bound_failure_is_quarantined_after_the_bounded_attempts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    faults = DispatchFaults()
    cause = FileExistsError(errno.EEXIST, "File exists", "consumequeue/Poison/0")
    with caplog.at_level(logging.ERROR):
        for attempt in range(1, QUARANTINE_AFTER):
            assert not faults.failed(failure(POISON, 0, 4096, cause), float(attempt))
            assert faults.stuck is not None and "physical offset 4096" in faults.stuck
        assert faults.failed(failure(POISON, 0, 4096, cause), float(QUARANTINE_AFTER))
    assert faults.stuck is None
    assert faults.errors_total == QUARANTINE_AFTER
    assert list(faults.quarantined) == [(POISON, 0)]
    assert "'Poison'-0 from physical offset 4096: FileExistsError" in faults.listing()
    stuck_lines = [r for r in caplog.records if "dispatch stuck" in r.getMessage()]
    assert len(stuck_lines) == 1 and "File exists" in stuck_lines[0].getMessage()
    assert any("quarantined queue 'Poison'-0" in r.getMessage() for r in caplog.records)
    for queue_offset in (0, 1, 2, 1, 2):  # dispatch going over 1 and 2 again counts them once
        faults.skipped((POISON, 0), 8192 + queue_offset, queue_offset, 100.0)
    assert faults.quarantined_records == 3 and faults.quarantined[(POISON, 0)].records == 3
    restored = DispatchFaults()
    restored.restore(faults.encode())
    assert restored.quarantined == faults.quarantined and restored.quarantined_records == 3
    with pytest.raises(ValueError, match="not a dispatch quarantine file"):
        restored.restore(b'{"queues": [{"topic": "T"}]}')


def test_a_full_disk_is_retried_while_it_lasts_and_reported_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    faults = DispatchFaults()
    full = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.ERROR):
        for second in range(0, 95):  # one attempt a second, as the reput service retries
            assert not faults.failed(failure("T", 1, 0, full), float(second))
    assert not faults.quarantined
    assert faults.disk_refused and faults.stuck is not None and "No space" in faults.stuck
    # The first line, then one every 30 s: at 30, 60 and 90.
    lines = [r.getMessage() for r in caplog.records if "dispatch" in r.getMessage()]
    assert len(lines) == 4, lines
    assert "still stuck" in lines[-1] and "95 failed attempts" not in lines[-1]
    faults.succeeded()
    assert faults.stuck is None and not faults.disk_refused


def test_a_failure_tied_to_no_queue_is_never_quarantined() -> None:
    faults = DispatchFaults()
    bug = DispatchFailure("", -1, 0, skippable=False)
    bug.__cause__ = RuntimeError("listener broke")
    for second in range(3 * QUARANTINE_AFTER):
        assert not faults.failed(bug, float(second))
    assert not faults.quarantined and faults.stuck is not None


# --- on a store -------------------------------------------------------------------------------


def poison_folder(root: Path, topic: str = POISON) -> None:
    """A plain file where `topic`'s ConsumeQueue folder goes."""
    (root / "consumequeue").mkdir(parents=True, exist_ok=True)
    (root / "consumequeue" / topic).write_bytes(b"not a folder")


async def put_all(store: MessageStore, messages: list[MessageToStore]) -> None:
    for msg in messages:
        assert (await store.put_message(msg)).ok


def bodies(store: MessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    """The raw records the queue serves."""
    result = store.get_message("g", topic, queue_id, 0, 1000)
    return [bytes(m) for m in result.messages]


def mixed(poison: str, count: int) -> list[MessageToStore]:
    """Good and poisoned messages interleaved, the poisoned one first."""
    out: list[MessageToStore] = []
    for i in range(count):
        out.append(message(i, topic=poison))
        out.append(message(i, topic="Good"))
    return out


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("poison", [POISON, "bad\x00topic"])
async def test_recovery_quarantines_and_the_store_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_path: bool, poison: str
) -> None:
    monkeypatch.setattr("tidemq.store.dispatch.ReputService.fast_path", fast_path)
    poison_folder(tmp_path)
    store = STORES.open(tmp_path)
    try:
        for msg in mixed(poison, 20):  # appended, not dispatched yet
            assert store.commitlog.put(msg).status.value == "PUT_OK"
    finally:
        await store.stop()
    # As after a crash: recovery checks the CommitLog and dispatches it (c82965c: the load
    # raises "[Errno 20] Not a directory" or "embedded null byte": the broker cannot start).
    for restart in range(2):
        (tmp_path / "abort").write_text("another boot")
        store = STORES.open(tmp_path)
        try:
            assert len(bodies(store, "Good")) == 20
            assert store.reput.behind_bytes == 0
            assert list(store.reput.faults.quarantined) == [(poison, 0)]
            assert store.reput.faults.quarantined_records == 20
            # The second time the quarantine file says so before dispatch meets the record.
            assert store.reput.faults.errors_total == (QUARANTINE_AFTER if restart == 0 else 0)
            assert store.commitlog.topic_queue_table[f"{poison}-0"] == 20
        finally:
            await store.stop()
        assert (tmp_path / QUARANTINE_FILE).exists()


async def test_running_dispatch_goes_past_a_poisoned_queue(tmp_path: Path) -> None:
    poison_folder(tmp_path)
    store = STORES.open(tmp_path)
    await store.start()
    try:
        await put_all(store, [message(0, topic="Good"), *mixed(POISON, 5)])
        # An appended batch of the poisoned topic: its layout must not get past the check.
        batch = MessageBatch(
            POISON, 0, encode_batch_body([(0, f"p{i}".encode(), "") for i in range(5, 8)])
        )
        assert (await store.put_message_batch(batch)).ok
        await put_all(store, [message(9, topic="Good")])
        # QUARANTINE_AFTER attempts, one a second.
        await eventually(
            lambda: len(bodies(store, "Good")) == 7, "Good dispatched", QUARANTINE_AFTER + 5
        )
        assert store.reput.faults.quarantined_records == 8
        assert store.reput.faults.stuck is None and not store.reput.failing
        assert "'Poison'-0" in store.reput.faults.listing()
    finally:
        await store.stop()
    # A clean restart: recovery starts past the poisoned records, the file keeps the quarantine.
    store = STORES.open(tmp_path)
    await store.start()
    try:
        assert len(bodies(store, "Good")) == 7
        assert store.reput.faults.quarantined[(POISON, 0)].records == 8
        result = await store.put_message(message(10, topic=POISON))
        assert result.ok and result.append is not None
        assert result.append.queue_offset == 8  # offsets go on, none is handed out twice
        await put_all(store, [message(10, topic="Good")])
        await eventually(lambda: len(bodies(store, "Good")) == 8, "Good dispatched at once", 1)
        assert store.reput.faults.errors_total == 0  # skipped without a new attempt
        assert store.reput.faults.quarantined_records == 9
        # Deleting the topic lifts its quarantine.
        store.delete_topics({POISON})
        assert not store.reput.faults.quarantined
        assert not (tmp_path / QUARANTINE_FILE).exists()
    finally:
        await store.stop()


async def test_a_full_disk_holds_dispatch_and_is_not_quarantined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = STORES.open(tmp_path)
    await store.start()
    real_put = ConsumeQueue.put
    full = True

    def put(self: ConsumeQueue, *args: int) -> bool:
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_put(self, *args)

    monkeypatch.setattr(ConsumeQueue, "put", put)
    try:
        await put_all(store, [message(i, topic="T") for i in range(3)])
        await eventually(lambda: store.reput.faults.disk_refused, "the disk refusal", 5)
        await eventually(
            lambda: store.reput.faults.errors_total > QUARANTINE_AFTER,
            "more attempts than a quarantine takes",
            QUARANTINE_AFTER + 5,
        )
        assert not store.reput.faults.quarantined
        full = False
        await eventually(lambda: len(bodies(store, "T")) == 3, "T dispatched once space is back")
        # the stall is cleared once the chunk that dispatched them has ended, a turn later
        await eventually(lambda: store.reput.faults.stuck is None, "the stall cleared", 5)
    finally:
        full = False
        await asyncio.wait_for(store.stop(), 10)


async def test_a_malformed_record_is_a_stall_reported_at_a_bounded_rate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A slave's CommitLog with a complete record that is not one: dispatch cannot know where
    # the next record starts, so it stops there; every append wakes it up to it again.
    store = STORES.open(tmp_path, broker_role=BrokerRole.SLAVE)
    await store.start()
    try:
        with caplog.at_level(logging.ERROR):
            store.append_to_commitlog(0, b"\xaa" * 300)
            for _ in range(20):
                store.reput.wakeup()
                await asyncio.sleep(0.01)
        assert store.reput.stalled_at == 0
        lines = [r for r in caplog.records if "malformed record" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in lines]
    finally:
        await store.stop()


async def test_an_unreadable_quarantine_file_does_not_stop_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    poison_folder(tmp_path)
    (tmp_path / QUARANTINE_FILE).write_text("{not json")
    store = STORES.open(tmp_path)
    try:
        for msg in mixed(POISON, 3):
            assert store.commitlog.put(msg).status.value == "PUT_OK"
        store.reput.dispatch_all()
        assert len(bodies(store, "Good")) == 3
        assert list(store.reput.faults.quarantined) == [(POISON, 0)]
    finally:
        await store.stop()
    assert (tmp_path / f"{QUARANTINE_FILE}.unreadable").read_text() == "{not json"
    assert any("moved to" in r.getMessage() for r in caplog.records)
    restored = DispatchFaults()
    restored.restore((tmp_path / QUARANTINE_FILE).read_bytes())  # written again, whole
    assert restored.quarantined[(POISON, 0)].records == 3
