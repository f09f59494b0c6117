"""The CommitLog (store/commitlog.py): file roll, batches, transactions and raw appends.

Segments are 4 KiB and bodies at most 1 KiB, so a handful of messages crosses a file boundary.
Positions are predicted by an independent model of RocketMQ's rule: a record goes into the current
file only if the record plus the 8-byte end-of-file blank fits, otherwise the rest of the file
starts with `[4 remaining][4 0xCBD43194]` and the record opens the next file.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stores import StoreFactory
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.commitlog import AppendResult, CommitLog, PutStatus
from tidemq.store.config import BrokerRole, FlushDiskType
from tidemq.store.errors import OffsetMismatchError
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageBatch, MessageToStore, decode_record, encode_properties
from tidemq.store.segment import Segment, offset_to_name
from tidemq.store.segment_queue import SegmentQueue

FILE = 4096
MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
CQ_FILE = 20 * 16

STORES = StoreFactory(
    mapped_file_size_commit_log=FILE,
    mapped_file_size_consume_queue=CQ_FILE,
    message_index_enable=False,
)
make_config = STORES.config


@pytest.fixture
def log(tmp_path: Path) -> Iterator[CommitLog]:
    config = make_config(tmp_path)
    segments = SegmentQueue(config.commit_log_dir, FILE)
    segments.load()
    yield CommitLog(config, segments)
    segments.close()


def record_size(body_len: int, topic: str = "T", props: str = "") -> int:
    return 91 + body_len + len(topic.encode()) + len(props.encode())


def body_for(size: int, topic: str = "T") -> bytes:
    """A body that makes a record of exactly `size` bytes."""
    return b"b" * (size - record_size(0, topic))


def batch_of(topic: str, queue_id: int, bodies: list[bytes]) -> MessageBatch:
    """A SEND_BATCH_MESSAGE of messages without properties (records as `MessageToStore`'s)."""
    return MessageBatch(topic, queue_id, encode_batch_body([(0, body, "") for body in bodies]))


def append_batch(log: CommitLog, batch: MessageBatch) -> AppendResult:
    """What `MessageStore.put_message_batch` does with the CommitLog: encode, then append."""
    encoded = log.encode_message_batch(batch)
    if isinstance(encoded, AppendResult):
        return encoded
    return log.append_batch(encoded, batch.store_host)


def read_file(directory: Path, start: int) -> bytes:
    return (directory / f"{start:020d}").read_bytes()


@dataclass
class Model:
    """Where RocketMQ puts records: the position rule, applied without the store's code."""

    pos: int = 0

    def place(self, size: int) -> tuple[int, int | None]:
        """(record offset, offset of an end-of-file blank written first or None)."""
        file_start = self.pos - self.pos % FILE
        remaining = file_start + FILE - self.pos
        blank = None
        if size + 8 > remaining:
            blank = self.pos
            self.pos = file_start + FILE
        at = self.pos
        self.pos += size
        return at, blank


# --- file roll ----------------------------------------------------------------------------


def test_roll_writes_blank_and_opens_file_named_by_offset(log: CommitLog) -> None:
    model = Model()
    sizes = [record_size(100 + 37 * (i % 23)) for i in range(40)]
    blanks = []
    for i, size in enumerate(sizes):
        at, blank = model.place(size)
        result = log.put(MessageToStore("T", 0, body_for(size)))
        assert result.status is PutStatus.PUT_OK
        assert (result.wrote_offset, result.wrote_bytes, result.queue_offset) == (at, size, i)
        if blank is not None:
            blanks.append(blank)
    assert len(blanks) >= 3
    directory = log.segments.directory
    names = sorted(p.name for p in directory.iterdir())
    assert names == [f"{k * FILE:020d}" for k in range(len(blanks) + 1)]
    for name in names:
        assert (directory / name).stat().st_size == FILE  # created at full size
    for blank in blanks:
        data = read_file(directory, blank - blank % FILE)
        position = blank % FILE
        remaining = FILE - position
        assert remaining >= 8
        assert data[position : position + 8] == struct.pack(">iI", remaining, BLANK_MAGIC)
        assert data[position + 8 :] == bytes(remaining - 8)  # the rest is left as it is
    # Every record is where the model says, with its own offsets inside.
    model = Model()
    for i, size in enumerate(sizes):
        at, _ = model.place(size)
        data = read_file(directory, at - at % FILE)
        msg = decode_record(data, at % FILE)
        assert (msg.physical_offset, msg.queue_offset, msg.total_size) == (at, i, size)
    assert log.max_offset == model.pos


def test_exact_fit_leaves_an_8_byte_blank(log: CommitLog) -> None:
    for _ in range(3):
        log.put(MessageToStore("T", 0, b"x" * 1000))  # 3 x 1092 = 3276
    remaining = FILE - 3276
    result = log.put(MessageToStore("T", 0, body_for(remaining - 8)))
    assert result.wrote_offset == 3276  # record + 8 fits exactly
    nxt = log.put(MessageToStore("T", 0, b""))
    assert nxt.wrote_offset == FILE
    assert read_file(log.segments.directory, 0)[FILE - 8 :] == struct.pack(">iI", 8, BLANK_MAGIC)


def test_one_byte_too_many_goes_to_next_file(log: CommitLog) -> None:
    for _ in range(3):
        log.put(MessageToStore("T", 0, b"x" * 1000))
    remaining = FILE - 3276
    result = log.put(MessageToStore("T", 0, body_for(remaining - 7)))
    assert result.wrote_offset == FILE
    data = read_file(log.segments.directory, 0)
    assert data[3276:3284] == struct.pack(">iI", remaining, BLANK_MAGIC)


# --- batches --------------------------------------------------------------------------------


def test_batch_is_contiguous_with_consecutive_offsets(log: CommitLog) -> None:
    log.put(MessageToStore("B", 2, b"first"))
    bodies = [f"m{i}".encode() for i in range(5)]
    result = append_batch(log, batch_of("B", 2, bodies))
    assert result.status is PutStatus.PUT_OK
    assert (result.queue_offset, result.msg_num, len(result.msg_ids)) == (1, 5, 5)
    start = record_size(5, "B")
    size = record_size(2, "B")
    assert (result.wrote_offset, result.wrote_bytes) == (start, 5 * size)
    data = read_file(log.segments.directory, 0)
    for i in range(5):
        msg = decode_record(data, start + i * size)
        assert (msg.queue_offset, msg.physical_offset, msg.body) == (
            1 + i,
            start + i * size,
            bodies[i],
        )
        assert result.msg_ids[i] == msg.msg_id
    assert log.topic_queue_table["B-2"] == 6


def test_batch_that_does_not_fit_goes_whole_into_next_file(log: CommitLog) -> None:
    for _ in range(3):
        log.put(MessageToStore("T", 0, b"x" * 1000))
    remaining = FILE - 3276  # 820: one 400-byte record would fit, three do not
    result = append_batch(log, batch_of("T", 0, [body_for(400)] * 3))
    assert result.status is PutStatus.PUT_OK
    assert result.wrote_offset == FILE
    data = read_file(log.segments.directory, 0)
    assert data[3276:3284] == struct.pack(">iI", remaining, BLANK_MAGIC)
    nxt = read_file(log.segments.directory, FILE)
    assert [decode_record(nxt, 400 * i).queue_offset for i in range(3)] == [3, 4, 5]
    assert [decode_record(nxt, 400 * i).physical_offset for i in range(3)] == [
        FILE,
        FILE + 400,
        FILE + 800,
    ]


def test_batch_larger_than_a_file_is_illegal(log: CommitLog) -> None:
    log.put(MessageToStore("T", 0, b"x"))
    before = log.max_offset
    result = append_batch(log, batch_of("T", 0, [b"y" * 1000] * 4))  # 4368 bytes
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert log.max_offset == before
    assert log.topic_queue_table == {"T-0": 1}
    assert len(log.segments) == 1
    # A batch of exactly file - 8 bytes fits into an empty file.
    exact = batch_of("T", 0, [body_for(1022)] * 4)
    assert append_batch(log, exact).wrote_offset == FILE
    assert log.max_offset == 2 * FILE - 8


async def test_put_message_batch_through_the_store(tmp_path: Path) -> None:
    store = MessageStore(make_config(tmp_path))
    store.load()
    try:
        await store.put_message(MessageToStore("T", 1, b"x" * 1000))
        await store.put_message(MessageToStore("T", 1, b"x" * 1000))
        await store.put_message(MessageToStore("T", 1, b"x" * 1000))
        result = await store.put_message_batch(batch_of("T", 1, [body_for(500)] * 2))
        assert result.status is PutStatus.PUT_OK
        assert result.append is not None and result.append.wrote_offset == FILE
        too_big = batch_of("T", 1, [b"z" * 1000] * 4)
        assert (await store.put_message_batch(too_big)).status is PutStatus.MESSAGE_ILLEGAL
        store.reput.dispatch_available(1 << 62)
        queue = store.find_consume_queue("T", 1)
        assert queue is not None and queue.max_offset == 5
        assert [u.physical_offset for u in queue.units(3, 10) or []] == [FILE, FILE + 500]
    finally:
        await store.stop()


# --- transactions ---------------------------------------------------------------------------


async def test_prepared_and_rollback_take_no_queue_offset(tmp_path: Path) -> None:
    store = MessageStore(make_config(tmp_path))
    store.load()
    try:
        flags = [0x0, 0x4, 0x8, 0xC, 0x0, 0x4, 0x8]
        results = []
        for i, flag in enumerate(flags):
            result = await store.put_message(
                MessageToStore("TX", 0, f"m{i}".encode(), sys_flag=flag)
            )
            assert result.append is not None
            results.append(result.append)
        assert [r.queue_offset for r in results] == [0, 0, 1, 0, 2, 0, 3]
        assert store.commitlog.topic_queue_table["TX-0"] == 4
        size = record_size(2, "TX")
        assert [r.wrote_offset for r in results] == [size * i for i in range(7)]
        data = read_file(store.config.commit_log_dir, 0)
        stored = [decode_record(data, r.wrote_offset) for r in results]
        assert [m.queue_offset for m in stored] == [0, 0, 1, 0, 2, 0, 3]
        assert [m.sys_flag for m in stored] == flags
        store.reput.dispatch_available(1 << 62)
        queue = store.find_consume_queue("TX", 0)
        assert queue is not None and queue.max_offset == 4
        units = queue.units(0, 10) or []
        assert [u.physical_offset for u in units] == [size * i for i in (0, 2, 4, 6)]
    finally:
        await store.stop()


# --- raw appends ----------------------------------------------------------------------------


def test_append_raw_refuses_an_offset_that_is_not_the_end(log: CommitLog) -> None:
    log.put(MessageToStore("T", 0, b"abc"))
    end = log.max_offset
    for wrong in (0, end - 1, end + 1, FILE):
        with pytest.raises(OffsetMismatchError) as info:
            log.append_raw(wrong, b"\x00" * 4)
        assert (info.value.expected, info.value.got) == (end, wrong)
        assert str(end) in str(info.value) and str(wrong) in str(info.value)
    assert log.max_offset == end
    log.append_raw(end, b"\x01\x02")
    assert log.max_offset == end + 2


@pytest.mark.parametrize("offset", [0, FILE, 5 * FILE])
def test_empty_log_accepts_an_offset_at_a_file_boundary(log: CommitLog, offset: int) -> None:
    log.append_raw(offset, b"\x07" * 10)
    assert [s.start_offset for s in log.segments] == [offset]
    path = log.segments.directory / f"{offset:020d}"
    assert path.stat().st_size == FILE
    assert log.min_offset == offset
    assert log.max_offset == offset + 10
    assert path.read_bytes()[:10] == b"\x07" * 10
    with pytest.raises(OffsetMismatchError):
        log.append_raw(offset, b"\x07")
    log.append_raw(offset + 10, b"\x08" * (FILE + 5))  # crosses into the next file
    end = offset + 10 + FILE + 5
    assert log.max_offset == end
    last = (end - 1) // FILE * FILE
    assert [s.start_offset for s in log.segments] == list(range(offset, last + 1, FILE))


@pytest.mark.parametrize("offset", [1, FILE - 1, 5 * FILE + 123])
def test_empty_log_refuses_an_offset_inside_a_file(log: CommitLog, offset: int) -> None:
    # Zeros before the first record would read as the end of the log to recovery and dispatch.
    with pytest.raises(OffsetMismatchError) as raised:
        log.append_raw(offset, b"\x07" * 10)
    assert raised.value.expected == offset - offset % FILE
    assert list(log.segments) == []


# A master with every kind of record: several topics and queues, tags (non-ASCII too), keys,
# transactions, a delayed message, a batch, and enough of them to fill several files.
TOPICS = ["A", "B", "\u4e3b\u9898"]  # "主题"


@dataclass(frozen=True)
class Master:
    commitlog: dict[str, bytes]
    consumequeue: dict[str, bytes]
    log_bytes: bytes
    # (end offset, goes to a ConsumeQueue) of every record, in log order
    records: list[tuple[int, bool]]


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


async def _build_master(root: Path) -> Master:
    store = MessageStore(make_config(root))
    store.load()
    records: list[tuple[int, bool]] = []
    try:
        for i in range(60):
            topic = TOPICS[i % 3]
            props: dict[str, str] = {"KEYS": f"k{i}"}
            if i % 4:
                props["TAGS"] = ["TagA", "\u6807\u7b7e", "T\U0001f600"][i % 3]
            if i % 17 == 5:
                props["DELAY"] = str(3 + i)
            tran = [0x0, 0x4, 0x8, 0xC][i % 4] if i % 5 == 0 else 0
            msg = MessageToStore(
                topic, i % 2, f"body-{i}".encode() * (1 + i % 7), encode_properties(props)
            )
            msg.sys_flag = tran
            result = await store.put_message(msg)
            assert result.status is PutStatus.PUT_OK and result.append is not None
            records.append((result.append.end_offset, tran not in (0x4, 0xC)))
            if i % 20 == 19:
                result = await store.put_message_batch(batch_of("B", 3, [b"batch" * 30] * 4))
                assert result.status is PutStatus.PUT_OK and result.append is not None
                size = result.append.wrote_bytes // 4
                start = result.append.wrote_offset
                records += [(start + size * (k + 1), True) for k in range(4)]
        store.reput.dispatch_available(1 << 62)
        assert len(store.commitlog.segments) >= 3
        end = store.max_phy_offset
    finally:
        await store.stop()
    commitlog = tree(root / "commitlog")
    log_bytes = b"".join(commitlog.values())[:end]
    return Master(commitlog, tree(root / "consumequeue"), log_bytes, records)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Master:
    return asyncio.run(_build_master(tmp_path_factory.mktemp("master")))


def _open_slave(root: Path) -> MessageStore:
    store = MessageStore(make_config(root, broker_role=BrokerRole.SLAVE))
    store.load()
    return store


def _units(store: MessageStore) -> int:
    return sum(q.max_offset - q.min_offset for q in store.consume_queues.values())


def _deliver(store: MessageStore, master: Master, cuts: list[int]) -> None:
    data = master.log_bytes
    bounds = [0, *cuts, len(data)]
    for start, end in itertools.pairwise(bounds):
        store.append_to_commitlog(start, data[start:end])
        store.reput.dispatch_available(1 << 62)
        complete = sum(1 for rec_end, to_cq in master.records if to_cq and rec_end <= end)
        assert _units(store) == complete, f"after delivering up to {end}"
        assert store.reput.stalled_at < 0


def _assert_identical(store: MessageStore, master: Master) -> None:
    root = store.root
    assert tree(root / "commitlog") == master.commitlog
    assert tree(root / "consumequeue") == master.consumequeue


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_raw_copy_in_arbitrary_splits_builds_identical_store(master: Master, data: Any) -> None:
    length = len(master.log_bytes)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, length - 1), max_size=40))))
    with tempfile.TemporaryDirectory() as tmp:
        slave = _open_slave(Path(tmp))
        try:
            _deliver(slave, master, cuts)
            _assert_identical(slave, master)
        finally:
            asyncio.run(slave.stop())


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_raw_copy_as_lists_of_spans_builds_identical_store(master: Master, data: Any) -> None:
    """A slave appends a read's frames as one list of spans (some empty, some crossing a file,
    some filling one exactly): the same files as one append per piece."""
    log_bytes = master.log_bytes
    length = len(log_bytes)
    special = [FILE, 2 * FILE, FILE - 1, FILE + 1]
    cuts = sorted(
        set(data.draw(st.lists(st.integers(1, length - 1) | st.sampled_from(special), max_size=60)))
    )
    reads = sorted(set(data.draw(st.lists(st.sampled_from(cuts), max_size=8)))) if cuts else []
    bounds = [0, *cuts, length]
    spans = [log_bytes[a:b] for a, b in itertools.pairwise(bounds)]
    # Empty spans here and there (a heartbeat between frames adds nothing).
    spans = [piece for span in spans for piece in (span, b"")[: 1 + len(span) % 2]]
    with tempfile.TemporaryDirectory() as tmp:
        slave = _open_slave(Path(tmp))
        try:
            at = 0
            pending: list[bytes | memoryview] = []
            for span in spans:
                pending.append(memoryview(span))
                if at + sum(map(len, pending)) in reads:
                    slave.append_to_commitlog(at, pending)
                    at += sum(map(len, pending))
                    pending = []
            slave.append_to_commitlog(at, pending)
            assert slave.max_phy_offset == length
            slave.reput.dispatch_available(1 << 62)
            assert slave.reput.stalled_at < 0
            _assert_identical(slave, master)
        finally:
            asyncio.run(slave.stop())


async def test_raw_copy_byte_by_byte_then_reload(tmp_path: Path, master: Master) -> None:
    first_records = master.records[2][0] + 3  # a little into the fourth record
    blank_at = max(end for end, _ in master.records if end <= FILE)  # file 0's end-of-file blank
    assert FILE - blank_at >= 8
    cuts = [*range(1, first_records), blank_at + 3, blank_at + 6, 2 * FILE - 3, 2 * FILE + 5]
    slave = _open_slave(tmp_path)
    try:
        _deliver(slave, master, cuts)
        _assert_identical(slave, master)
    finally:
        await slave.stop()
    again = _open_slave(tmp_path)
    try:
        _assert_identical(again, master)
        assert again.max_phy_offset == len(master.log_bytes)
    finally:
        await again.stop()


# --- gathered appends (the sends of one read, one pwritev) ----------------------------------


def test_gathered_appends_are_written_in_order_and_unseen_before(
    log: CommitLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tidemq.store.segment._IOV_MAX", 2)  # several pwritev calls
    ungathered = [log.put(MessageToStore("T", 0, bytes([i]) * 100)) for i in range(2)]
    log.gathering = True
    gathered = [log.put(MessageToStore("T", 0, bytes([i]) * 100)) for i in range(2, 7)]
    segment = log.segments.last
    assert segment is not None
    written = ungathered[-1].end_offset
    assert segment.read_position == written  # gathered: not readable yet
    assert segment.wrote == gathered[-1].end_offset
    assert read_file(log.segments.directory, 0)[written : written + 4] == b"\0" * 4
    log.gathering = False
    assert log.write_gathered()
    assert not log.write_gathered()  # nothing left
    assert segment.read_position == gathered[-1].end_offset
    data = read_file(log.segments.directory, 0)
    for i, result in enumerate(ungathered + gathered):
        record = decode_record(data[result.wrote_offset : result.end_offset])
        assert (record.body, record.queue_offset) == (bytes([i]) * 100, i)


def test_a_file_roll_writes_what_was_gathered_before_its_blank(log: CommitLog) -> None:
    model = Model()
    log.gathering = True
    results = [log.put(MessageToStore("T", 0, body_for(1000))) for _ in range(5)]
    log.gathering = False
    log.write_gathered()
    places = [model.place(1000)[0] for _ in range(5)]
    assert [r.wrote_offset for r in results] == places
    first = read_file(log.segments.directory, 0)
    for result in results[:4]:
        assert decode_record(first[result.wrote_offset : result.end_offset]).queue_offset >= 0
    blank_at = results[3].end_offset
    assert struct.unpack_from(">iI", first, blank_at) == (FILE - blank_at, BLANK_MAGIC)
    second = read_file(log.segments.directory, FILE)
    assert decode_record(second[: results[4].wrote_bytes]).queue_offset == 4


async def test_the_store_gathers_only_between_begin_and_end(tmp_path: Path) -> None:
    store = STORES.open(tmp_path)
    try:
        store.begin_gathering()
        results = [await store.put_message(MessageToStore("T", 0, b"x" * 10)) for _ in range(3)]
        assert store.reput.dispatch_available(1 << 62) == 0  # nothing readable yet
        store.end_gathering()
        assert store.reput.dispatch_available(1 << 62) > 0
        got = store.get_message("G", "T", 0, 0, 32)
        offsets = [decode_record(bytes(m)).queue_offset for m in got.messages]
        assert offsets == [r.append.queue_offset for r in results if r.append] == [0, 1, 2]
        assert not store.commitlog.gathering
    finally:
        await store.stop()


async def test_a_sync_flush_store_does_not_gather(tmp_path: Path) -> None:
    store = STORES.open(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    try:
        await store.start()
        store.begin_gathering()
        assert not store.commitlog.gathering  # its puts wait for a flush of what they wrote
        store.end_gathering()
    finally:
        await store.stop()


async def test_a_batch_stored_while_gathering_wakes_dispatch(tmp_path: Path) -> None:
    # A batch is written at once: nothing is left for end_gathering to write, so its readers
    # must be woken at its append (a read of batches only once left the last ones undispatched).
    store = STORES.open(tmp_path)
    try:
        store.reput._wakeup.clear()
        store.begin_gathering()
        result = await store.put_message_batch(batch_of("T", 0, [b"a", b"b"]))
        assert result.ok
        store.end_gathering()
        assert store.reput._wakeup.is_set()
        store.reput._wakeup.clear()
        store.begin_gathering()  # a single put gathered, then a batch: woken once written
        await store.put_message(MessageToStore("T", 0, b"c"))
        await store.put_message_batch(batch_of("T", 0, [b"d"]))
        assert not store.reput._wakeup.is_set()
        store.end_gathering()
        assert store.reput._wakeup.is_set()
        assert store.reput.dispatch_available(1 << 62) > 0
        assert store.get_message("G", "T", 0, 0, 32).next_begin_offset == 4
    finally:
        await store.stop()


def test_a_segment_destroyed_while_a_pull_still_holds_its_records_keeps_them_readable(
    tmp_path: Path,
) -> None:
    # A pull response carries views of the map until the socket takes them; the file's
    # retention may delete the segment meanwhile.
    segment = Segment(tmp_path / offset_to_name(0), 4096, create=True)
    segment.append(b"record one|record two")
    span = segment.select(0, 21)
    assert span is not None
    pending = span[11:]  # what a queued write holds
    segment.destroy()
    assert not segment.path.exists()
    assert bytes(pending) == b"record two"
    pending.release()
    span.release()
