"""Recovery at load (store/commitlog.py, store/consume_queue.py, store/recovery.py).

A stopped store is damaged on disk, then loaded again: with the abort file absent (normal
recovery) and present (abnormal recovery, as after a crash).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.stores import StoreFactory
from tidemq.store import recovery
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import PutStatus
from tidemq.store.errors import CorruptStoreError
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.message_store import MessageStore, Recovery
from tidemq.store.record import MessageToStore, decode_record, encode_properties

FILE = 4096
CQ_FILE = 20 * 8

STORES = StoreFactory(
    mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=CQ_FILE, max_index_num=512
)
make_config = STORES.config
open_store = STORES.open
T0 = 4_102_444_800_000  # store times are set from here: files' first records are seconds apart


@dataclass
class Sent:
    topic: str
    queue_id: int
    body: bytes
    phy: int
    size: int
    queue_offset: int


async def put(store: MessageStore, topic: str, queue_id: int, i: int, ts: int) -> Sent:
    store.commitlog.last_store_timestamp = ts
    body = f"{topic}/{queue_id}/{i}:".encode() * (1 + i % 5)
    props = encode_properties({"TAGS": f"t{i % 3}", "KEYS": f"key{i}"})
    result = await store.put_message(MessageToStore(topic, queue_id, body, props))
    assert result.status is PutStatus.PUT_OK and result.append is not None
    a = result.append
    return Sent(topic, queue_id, body, a.wrote_offset, a.wrote_bytes, a.queue_offset)


def queue_bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [decode_record(m).body for m in r.messages]
        offset = r.next_begin_offset


def segment_path(root: Path, phy: int) -> Path:
    return root / "commitlog" / f"{phy - phy % FILE:020d}"


def flip(path: Path, position: int, mask: int = 0x01) -> bytes:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(data)
    return bytes(data)


async def build(root: Path, count: int, last_first_in_file: bool = False) -> list[Sent]:
    """`count` messages over queues R-0 and R-1 (several files); the last one goes to R-1."""
    store = open_store(root)
    await store.start()
    sent: list[Sent] = []
    try:
        for i in range(count):
            sent.append(await put(store, "R", i % 2, i, T0 + 1000 * i))
        if last_first_in_file:
            i = count
            while sent[-1].phy % FILE != 0 or sent[-1].queue_id != 1:
                sent.append(await put(store, "R", i % 2, i, T0 + 1000 * i))
                i += 1
        elif sent[-1].queue_id != 1:
            sent.append(await put(store, "R", 1, count, T0 + 1000 * count))
        assert sent[-1].phy >= 2 * FILE
    finally:
        await store.stop()
    return sent


# --- a corrupt last record --------------------------------------------------------------------

# Where to flip a bit, relative to the record's start.
CORRUPTIONS = {
    "body": 90,  # the third byte of the body, which starts at 88 (IPv4 hosts)
    "magic": 5,
    "total-size": 2,
    "crc": 9,
}


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("where", ["body", "magic", "total-size", "crc"])
async def test_corrupt_last_record_is_cut_and_kept_aside(
    tmp_path: Path, abort: bool, where: str
) -> None:
    sent = await build(tmp_path, 90)
    last = sent[-1]
    path = segment_path(tmp_path, last.phy)
    at = last.phy % FILE + CORRUPTIONS[where]
    if where == "body":
        assert path.read_bytes()[at - 2 : at + 3] == last.body[:5]
    damaged = flip(path, at)
    record = damaged[last.phy % FILE : last.phy % FILE + last.size]
    assert record[-1] == 0x02  # the properties end the record: nothing of it is a zero tail
    if abort:
        (tmp_path / "abort").touch()

    store = open_store(tmp_path)
    try:
        assert store.last_exit_ok is not abort
        assert store.max_phy_offset == last.phy
        assert store.max_offset_in_queue("R", 1) == last.queue_offset
        assert store.max_offset_in_queue("R", 0) == sum(1 for s in sent if s.queue_id == 0)
        torn = sorted((tmp_path / "commitlog").glob("*.torn"))
        assert [p.name for p in torn] == [f"{path.name}.{last.phy % FILE}.torn"]
        assert torn[0].read_bytes() == record
        # The index forgets the cut message.
        assert store.query_message("R", f"key{len(sent) - 1}", 10, 0, 2**62).messages == []
        for q in (0, 1):
            assert queue_bodies(store, "R", q) == [s.body for s in sent[:-1] if s.queue_id == q]
        # Appends continue where the valid data ends, with the right queue offsets.
        again = await put(store, "R", 1, 999, T0 + 10**7)
        assert (again.phy, again.queue_offset) == (last.phy, last.queue_offset)
        nxt = await put(store, "R", 0, 1000, T0 + 10**7 + 1)
        assert nxt.queue_offset == sum(1 for s in sent if s.queue_id == 0)
        store.reput.dispatch_available(1 << 62)
        assert queue_bodies(store, "R", 1)[-1] == again.body
    finally:
        await store.stop()
    store = open_store(tmp_path)
    try:
        assert store.max_phy_offset == nxt.phy + nxt.size
        assert queue_bodies(store, "R", 1) == [
            *(s.body for s in sent[:-1] if s.queue_id == 1),
            again.body,
        ]
    finally:
        await store.stop()


def zero(path: Path, start: int, end: int) -> bytes:
    data = bytearray(path.read_bytes())
    data[start:end] = bytes(end - start)
    path.write_bytes(data)
    return bytes(data)


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("zeroed", ["last byte", "last 7 bytes", "all properties", "topic end"])
async def test_a_last_record_ending_in_zeros_is_cut_and_kept_aside(
    tmp_path: Path, abort: bool, zeroed: str
) -> None:
    """A power cut that takes the page holding a record's end leaves its size, magic and body
    CRC whole, and zeros where its topic or properties were (found by tests.fault.powercut:
    the record was served without its KEYS, so no query by key found it)."""
    sent = await build(tmp_path, 90)
    last = sent[-1]
    path = segment_path(tmp_path, last.phy)
    start, end = last.phy % FILE, last.phy % FILE + last.size
    props_len = len(encode_properties(decode_record(path.read_bytes()[start:end]).properties))
    assert path.read_bytes()[end - props_len - 3 : end - props_len] == b"R\0" + bytes([props_len])
    span = {
        "last byte": (end - 1, end),
        "last 7 bytes": (end - 7, end),
        "all properties": (end - props_len, end),
        "topic end": (end - props_len - 3, end),
    }[zeroed]
    damaged = zero(path, *span)
    if abort:
        (tmp_path / "abort").touch()

    store = open_store(tmp_path)
    try:
        assert store.max_phy_offset == last.phy
        torn = sorted((tmp_path / "commitlog").glob("*.torn"))
        assert [p.read_bytes() for p in torn] == [damaged[start:end].rstrip(b"\0")]
        assert store.query_message("R", "key0", 10, 0, 2**62).messages != []
        for q in (0, 1):
            assert queue_bodies(store, "R", q) == [s.body for s in sent[:-1] if s.queue_id == q]
    finally:
        await store.stop()


async def test_a_last_record_without_properties_whose_topic_ends_in_zeros_is_cut(
    tmp_path: Path,
) -> None:
    sent = await build(tmp_path, 90)
    store = open_store(tmp_path)
    await store.start()
    try:
        store.commitlog.last_store_timestamp = T0 + 10**6
        result = await store.put_message(MessageToStore("R", 1, b"no properties", ""))
        assert result.ok and result.append is not None
        phy, size = result.append.wrote_offset, result.append.wrote_bytes
    finally:
        await store.stop()
    path = segment_path(tmp_path, phy)
    end = phy % FILE + size
    assert path.read_bytes()[end - 3 : end] == b"R\0\0"  # the topic, no properties
    zero(path, end - 3, end - 2)
    (tmp_path / "abort").write_text("another boot")
    store = open_store(tmp_path)
    try:
        assert store.max_phy_offset == phy
        assert queue_bodies(store, "R", 1) == [s.body for s in sent if s.queue_id == 1]
    finally:
        await store.stop()


async def test_a_record_ending_in_nul_is_refused(tmp_path: Path) -> None:
    """Recovery would take it for a torn one (`has_zeroed_tail`); a NUL elsewhere is stored."""
    store = open_store(tmp_path)
    await store.start()
    try:
        ends_in_nul = [("R", encode_properties({"KEYS": "k"}) + "v\0"), ("R\0", "")]
        for topic, props in ends_in_nul:
            result = await store.put_message(MessageToStore(topic, 0, b"body", props))
            assert result.status is PutStatus.MESSAGE_ILLEGAL
        assert store.max_phy_offset == 0
        for topic, props in [("R", "K\x01\0v\x02"), ("R\0", "K\x01v\x02"), ("\0R", "")]:
            assert (await store.put_message(MessageToStore(topic, 0, b"body", props))).ok
    finally:
        await store.stop()


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
async def test_corrupt_first_record_of_the_last_file(tmp_path: Path, abort: bool) -> None:
    sent = await build(tmp_path, 70, last_first_in_file=True)
    last = sent[-1]
    assert last.phy % FILE == 0
    flip(segment_path(tmp_path, last.phy), 40)  # born timestamp: a CRC-clean field...
    flip(segment_path(tmp_path, last.phy), 5)  # ...and the magic
    if abort:
        (tmp_path / "abort").touch()
    store = open_store(tmp_path)
    try:
        assert store.max_phy_offset == last.phy  # the end of the previous file
        assert store.max_offset_in_queue("R", 1) == last.queue_offset
        again = await put(store, "R", 1, 5000, T0 + 10**7)
        assert (again.phy, again.queue_offset) == (last.phy, last.queue_offset)
    finally:
        await store.stop()


async def test_a_queue_whose_only_message_was_cut(tmp_path: Path) -> None:
    sent = await build(tmp_path, 70)
    store = open_store(tmp_path)
    await store.start()
    try:
        solo = await put(store, "Solo", 0, 1, T0 + 10**6)
        await store.reput.wait_idle()
    finally:
        await store.stop()
    flip(segment_path(tmp_path, solo.phy), solo.phy % FILE + 5)
    store = open_store(tmp_path)
    try:
        assert store.max_phy_offset == solo.phy == sent[-1].phy + sent[-1].size
        r = store.get_message("g", "Solo", 0, 0, 32)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
        assert (await put(store, "Solo", 0, 2, T0 + 10**6 + 1)).queue_offset == 0
    finally:
        await store.stop()


# --- a ConsumeQueue file of garbage ----------------------------------------------------------


def cq_tree(root: Path) -> dict[str, bytes]:
    folder = root / "consumequeue"
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("which", [0, 2, -1], ids=["first", "middle", "last"])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_garbage_consume_queue_file_is_rebuilt(
    tmp_path: Path, abort: bool, which: int, seed: int
) -> None:
    sent = await build(tmp_path, 90)
    before = cq_tree(tmp_path)
    folder = tmp_path / "consumequeue" / "R" / "1"
    files = sorted(folder.iterdir())
    assert len(files) >= 5
    victim = files[which]
    victim.write_bytes(random.Random(seed).randbytes(CQ_FILE))
    if abort:
        (tmp_path / "abort").touch()
    store = open_store(tmp_path)
    try:
        for q in (0, 1):
            assert queue_bodies(store, "R", q) == [s.body for s in sent if s.queue_id == q]
        # After a normal stop the queue is checked at its first use (store/lazy_check.py).
        assert cq_tree(tmp_path) == before
    finally:
        await store.stop()


async def test_all_consume_queues_deleted_are_rebuilt(tmp_path: Path) -> None:
    await build(tmp_path, 90)
    before = cq_tree(tmp_path)
    for path in sorted((tmp_path / "consumequeue").rglob("*"), reverse=True):
        if path.is_file():
            path.unlink()
    store = open_store(tmp_path)
    try:
        # After a normal stop each queue is rebuilt at its first use (store/lazy_check.py).
        for topic, queue_id in {tuple(name.split("/")[:2]) for name in before}:
            queue_bodies(store, topic, int(queue_id))
        assert cq_tree(tmp_path) == before
    finally:
        await store.stop()


# --- files that cannot be loaded -------------------------------------------------------------


@pytest.mark.parametrize("size", [FILE - 1, FILE + 1, 0])
async def test_commitlog_segment_of_the_wrong_size(tmp_path: Path, size: int) -> None:
    await build(tmp_path, 90)
    path = tmp_path / "commitlog" / f"{FILE:020d}"
    original = path.read_bytes()
    path.write_bytes(original[:size] if size < FILE else original + b"\x00")
    with pytest.raises(CorruptStoreError) as info:
        open_store(tmp_path)
    assert str(path) in str(info.value)
    path.write_bytes(original)
    store = open_store(tmp_path)  # the failed load released the lock
    await store.stop()


async def test_a_missing_middle_segment_is_refused(tmp_path: Path) -> None:
    await build(tmp_path, 90)
    (tmp_path / "commitlog" / f"{FILE:020d}").unlink()
    with pytest.raises(CorruptStoreError, match=f"{2 * FILE:020d}"):
        open_store(tmp_path)


# --- after a crash: the same boot or another ------------------------------------------------

BOOT = "5b0a7c1e-3f2d-4c6b-9e8a-1d2c3b4a5f60"


@pytest.fixture
def boot(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(recovery, "read_boot_id", lambda: BOOT)
    return BOOT


def safe_start(store: MessageStore) -> int:
    """Start of the CommitLog file that abnormal recovery checks from (the checkpoint's)."""
    assert store.recovery_plan is not None
    return store.recovery_plan.check_from


def check_contents(store: MessageStore, sent: list[Sent]) -> None:
    for q in (0, 1):
        assert queue_bodies(store, "R", q) == [s.body for s in sent if s.queue_id == q]
    for i in (0, len(sent) // 2, *range(len(sent) - 8, len(sent))):
        found = store.query_message("R", f"key{i}", 10, 0, 2**62).messages
        assert [m.physical_offset for m in found] == [sent[i].phy], i


async def test_the_abort_file_holds_the_boot_id(tmp_path: Path, boot: str) -> None:
    store = open_store(tmp_path)
    await store.start()
    try:
        assert (tmp_path / "abort").read_text() == boot
    finally:
        await store.stop()
    assert not (tmp_path / "abort").exists()


async def test_without_a_boot_id_the_abort_file_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recovery, "read_boot_id", lambda: "")
    store = open_store(tmp_path)
    await store.start()
    try:
        assert (tmp_path / "abort").read_text() == ""
    finally:
        await store.stop()
    (tmp_path / "abort").touch()  # a crash
    store = open_store(tmp_path)
    try:
        assert store.recovery is Recovery.OTHER_BOOT
    finally:
        await store.stop()


@pytest.mark.parametrize(
    ("written", "kind"),
    [(BOOT, Recovery.SAME_BOOT), ("another-boot", Recovery.OTHER_BOOT), ("", Recovery.OTHER_BOOT)],
    ids=["same-boot", "other-boot", "no-boot-id"],
)
async def test_redispatch_starts_where_dispatch_stopped_only_on_the_same_boot(
    tmp_path: Path, boot: str, written: str, kind: Recovery
) -> None:
    sent = await build(tmp_path, 90)
    (tmp_path / "abort").write_text(written)
    store = open_store(tmp_path)
    try:
        assert not store.last_exit_ok
        assert store.recovery is kind
        assert safe_start(store) < sent[-1].phy
        if kind is Recovery.SAME_BOOT:
            # min(M, max(R, S)): R, the newest indexed record, is dispatched again.
            assert store.redispatch_from == sent[-1].phy
        else:
            assert store.redispatch_from == safe_start(store)  # RocketMQ's start
        check_contents(store, sent)
    finally:
        await store.stop()


async def test_same_boot_recovery_dispatches_what_dispatch_had_not_reached(
    tmp_path: Path, boot: str
) -> None:
    sent = await build(tmp_path, 90)
    store = open_store(tmp_path)  # loaded, not started: nothing dispatches the appends below
    sent += [await put(store, "R", i % 2, i, T0 + 1000 * i) for i in range(90, 130)]
    assert store.max_offset_in_queue("R", 1) < sum(1 for s in sent if s.queue_id == 1)
    (tmp_path / "abort").write_text(boot)  # what start() writes
    await store.stop()  # not started: closes the files and leaves the abort file, as a crash
    store = open_store(tmp_path)
    try:
        assert store.recovery is Recovery.SAME_BOOT
        assert store.redispatch_from < sent[90].phy
        check_contents(store, sent)
    finally:
        await store.stop()


async def test_same_boot_recovery_indexes_what_the_index_missed(tmp_path: Path, boot: str) -> None:
    """Dispatch killed after a batch's ConsumeQueue units, before its index entries."""
    sent = await build(tmp_path, 90)
    store = open_store(tmp_path)
    assert store.index is not None
    store.index.truncate_after(sent[-6].phy)
    assert store.query_message("R", f"key{len(sent) - 1}", 10, 0, 2**62).messages == []
    await store.stop()
    (tmp_path / "abort").write_text(boot)
    (tmp_path / "checkpoint").write_bytes(bytes(4096))  # dispatched store times: none
    store = open_store(tmp_path)
    try:
        assert store.recovery is Recovery.SAME_BOOT
        assert store.redispatch_from == sent[-7].phy  # R, below M
        check_contents(store, sent)
    finally:
        await store.stop()


@pytest.mark.parametrize("which", [0, 2, -1], ids=["first", "middle", "last"])
async def test_garbage_consume_queue_file_is_rebuilt_on_the_same_boot(
    tmp_path: Path, boot: str, which: int
) -> None:
    sent = await build(tmp_path, 90)
    before = cq_tree(tmp_path)
    files = sorted((tmp_path / "consumequeue" / "R" / "1").iterdir())
    files[which].write_bytes(random.Random(which).randbytes(CQ_FILE))
    (tmp_path / "abort").write_text(boot)
    store = open_store(tmp_path)
    try:
        assert store.recovery is Recovery.SAME_BOOT
        assert cq_tree(tmp_path) == before
        check_contents(store, sent)
    finally:
        await store.stop()


async def test_a_partial_consume_queue_flush_does_not_move_the_checkpoint(tmp_path: Path) -> None:
    """flushConsumeQueueLeastPages > 0 syncs only queues with that many dirty pages: the
    checkpoint's logicsMsgTimestamp on disk must not claim the others' new units (recovery after
    a power cut would check the CommitLog from past their records and never dispatch them)."""
    await build(tmp_path, 90)
    before = StoreCheckpoint(tmp_path / "checkpoint").logics_msg_timestamp
    store = open_store(tmp_path)
    await store.start()
    try:
        late = T0 + 1000 * 500
        ends = [store.max_offset_in_queue("R", q) for q in (0, 1)]
        await put(store, "R", 0, 500, late)
        await put(store, "R", 1, 501, late)
        await eventually(
            lambda: [store.max_offset_in_queue("R", q) for q in (0, 1)] == [e + 1 for e in ends],
            "the new messages dispatched",
        )
        assert store.checkpoint.logics_msg_timestamp >= late  # dispatch's newest, in memory
        await store.flusher.flush_consume_queues(2)  # one unit each: neither queue is synced
        assert StoreCheckpoint(tmp_path / "checkpoint").logics_msg_timestamp == before
        await store.flusher.flush_consume_queues(0)  # every queue synced
        assert StoreCheckpoint(tmp_path / "checkpoint").logics_msg_timestamp >= late
    finally:
        await store.stop()
