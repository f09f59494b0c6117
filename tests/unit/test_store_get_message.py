"""getMessage (store/get_message.py): every status of the table, nextBeginOffset, the caps.

Every test runs twice: with the compiled scan of the units (store/_get_message.pyx) and with its
pure-Python twin, so both give the same results on every case here (the random one included).

`corr(old, new)` is `new` except on a slave without offsetCheckInSlave, where a client's offset is
never moved. The transfer caps are RocketMQ's: 32 messages / 256 KiB while the data is in memory,
8 / 64 KiB once it is older than RAM * accessMessageInMemoryMaxRatio (`physical_memory_bytes`
fixes the RAM size here).
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.speedups_twins import selected
from tests.support.stores import StoreFactory
from tidemq.broker.sql92 import Sql92Filter, compile_sql92
from tidemq.common import speedups
from tidemq.store import get_message
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.config import BrokerRole
from tidemq.store.consume_queue import iter_units
from tidemq.store.get_message import GetMessageResult, GetMessageStatus, TransferLimits
from tidemq.store.message_store import MessageStore
from tidemq.store.property_predicate import UNDECIDED
from tidemq.store.record import MessageBatch, MessageToStore, decode_record, encode_properties
from tidemq.store.tags import MATCH_ALL, parse_tag_expression

S = GetMessageStatus
SCAN_KEY = "tidemq.store.get_message.scan_units"
FILE = 4096
CQ_UNITS = 16
HUGE_RAM = 1 << 50

STORES = StoreFactory(
    mapped_file_size_commit_log=FILE,
    mapped_file_size_consume_queue=20 * 1000,
    message_index_enable=False,
    physical_memory_bytes=HUGE_RAM,
)
make_config = STORES.config
open_store = STORES.open


@pytest.fixture(autouse=True, params=["compiled", "pure"])
def scan_twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    pure = speedups.PURE_TWINS[SCAN_KEY]
    if request.param == "pure":
        monkeypatch.setattr(get_message, "scan_units", pure)
    else:
        assert get_message.scan_units is selected(SCAN_KEY) is not pure
        # the compiled loop must not hand well-formed units to the pure twin
        monkeypatch.setitem(speedups.PURE_TWINS, SCAN_KEY, _refuse)
    return str(request.param)


def _refuse(*_args: Any) -> None:
    raise AssertionError("the compiled scan handed its units to the pure twin")


def test_units_of_a_broken_length_go_to_the_pure_twin(scan_twin: str) -> None:
    # Not whole 20-byte units: the compiled loop hands them over, and the pure twin fails.
    limits = TransferLimits(1 << 18, 32, 1 << 16, 8, HUGE_RAM)
    args = (GetMessageResult(S.FOUND, 0), memoryview(bytes(21)), 0, 32)
    rest = (parse_tag_expression("*"), SimpleNamespace(max_offset=0), limits, None)
    if scan_twin == "compiled":
        with pytest.raises(AssertionError, match="handed its units"):
            get_message.scan_units(*args, *rest)
    else:
        with pytest.raises(struct.error):
            get_message.scan_units(*args, *rest)


async def fill(
    store: MessageStore, topic: str, count: int, body: int = 100, tags: list[str] | None = None
) -> None:
    for i in range(count):
        props = {"TAGS": tags[i % len(tags)]} if tags else {}
        msg = MessageToStore(topic, 0, bytes([65 + i % 26]) * body, encode_properties(props))
        result = await store.put_message(msg)
        assert result.ok
    store.reput.dispatch_available(1 << 62)


def check_found(store: MessageStore, result: GetMessageResult, first: int, count: int) -> None:
    assert result.status is S.FOUND
    assert result.message_count == count
    assert result.queue_offsets == list(range(first, first + count))
    total = 0
    for queue_offset, raw in zip(result.queue_offsets, result.messages, strict=True):
        msg = decode_record(raw)
        assert msg.queue_offset == queue_offset
        again = store.look_message_by_offset(msg.physical_offset)
        assert again is not None and again.body == msg.body
        total += len(raw)
    assert result.buffer_total_size == total


# --- the status table on a master and on slaves --------------------------------------------

ROLES = [
    pytest.param(BrokerRole.ASYNC_MASTER, False, True, id="master"),
    pytest.param(BrokerRole.SYNC_MASTER, False, True, id="sync-master"),
    pytest.param(BrokerRole.SLAVE, False, False, id="slave"),
    pytest.param(BrokerRole.SLAVE, True, True, id="slave-offsetCheckInSlave"),
]


async def _queue_with_min_42(tmp_path: Path, role: BrokerRole, check: bool) -> MessageStore:
    """Queue Q-0 with units 42..59 (min 42, max 60) over two ConsumeQueue files (32.., 48..)."""
    master = open_store(tmp_path / "master", mapped_file_size_consume_queue=20 * CQ_UNITS)
    await fill(master, "Q", 60)  # 192-byte records: 21 per CommitLog file
    await fill(master, "Z", 1)
    if role is not BrokerRole.SLAVE:
        assert await master.delete_expired_commitlog(0, True, 2) == 2
        assert master.commitlog.min_offset == 2 * FILE
        return master
    slave = open_store(
        tmp_path / "slave",
        broker_role=role,
        offset_check_in_slave=check,
        mapped_file_size_consume_queue=20 * CQ_UNITS,
    )
    end = master.max_phy_offset
    offset = 2 * FILE
    while offset < end:
        got = master.get_commitlog_data(offset)
        assert got is not None
        slave.append_to_commitlog(offset, bytes(got[1]))
        offset += len(got[1])
    slave.reput.dispatch_available(1 << 62)
    await master.stop()
    return slave


@pytest.mark.parametrize(("role", "check", "moves"), ROLES)
async def test_status_table(tmp_path: Path, role: BrokerRole, check: bool, moves: bool) -> None:
    store = await _queue_with_min_42(tmp_path, role, check)

    def corr(old: int, new: int) -> int:
        return new if moves else old

    def get(topic: str, offset: int, max_msgs: int = 32) -> GetMessageResult:
        return store.get_message("group", topic, 0, offset, max_msgs)

    try:
        queue = store.find_consume_queue("Q", 0)
        assert queue is not None
        assert (queue.min_offset, queue.max_offset) == (42, 60)

        r = store.get_message("group", "Unknown", 0, 7, 32)
        assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_LOGIC_QUEUE, corr(7, 0))

        store.find_or_create_consume_queue("Empty", 0)
        r = get("Empty", 3)
        assert (r.status, r.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, corr(3, 0))

        r = get("Q", 5)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, corr(5, 42))
        assert (r.min_offset, r.max_offset, r.message_count) == (42, 60, 0)

        r = get("Q", 60)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 60)

        r = get("Q", 75)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, corr(75, 60))
        assert (r.min_offset, r.max_offset) == (42, 60)

        r = get("Q", 42, 5)
        check_found(store, r, 42, 5)
        assert r.next_begin_offset == 47
        assert (r.min_offset, r.max_offset) == (42, 60)

        r = get("Q", 44)  # a read never crosses a ConsumeQueue file: 44..47
        check_found(store, r, 44, 4)
        assert r.next_begin_offset == 48

        # The ConsumeQueue file holding the offset is gone, its minimum not yet corrected.
        queue.segments.delete_head(1)
        r = get("Q", 42)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_FOUND_NULL, corr(42, 48))
    finally:
        await store.stop()


async def test_overflow_badly_with_min_zero_goes_to_max_not_zero(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        await fill(store, "Q", 10)
        r = store.get_message("g", "Q", 0, 1000, 32)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 10)
        assert (r.min_offset, r.max_offset) == (0, 10)
        r = store.get_message("g", "Q", 0, 11, 32)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 10)
    finally:
        await store.stop()


# --- found, filters and the scan limit -----------------------------------------------------


async def test_found_returns_the_stored_records(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        await fill(store, "Q", 30, body=150)
        r = store.get_message("g", "Q", 0, 0, 32)
        check_found(store, r, 0, 30)
        assert r.next_begin_offset == 30
        assert not r.suggest_pulling_from_slave
        # The views are the bytes in the CommitLog, not copies of something else.
        data = b"".join(p.read_bytes() for p in sorted((tmp_path / "commitlog").iterdir()))
        first = decode_record(r.messages[0])
        assert bytes(r.messages[0]) == data[first.physical_offset : first.physical_offset + 242]
        r = store.get_message("g", "Q", 0, 10, 4)
        check_found(store, r, 10, 4)
        assert r.next_begin_offset == 14
    finally:
        await store.stop()


async def test_tag_filter(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        await fill(store, "Q", 30, tags=["TagA", "TagB", "TagC"])
        r = store.get_message("g", "Q", 0, 0, 32, parse_tag_expression("TagX || TagY"))
        assert (r.status, r.next_begin_offset, r.message_count) == (S.NO_MATCHED_MESSAGE, 30, 0)
        r = store.get_message("g", "Q", 0, 0, 4, parse_tag_expression("TagB"))
        assert r.status is S.FOUND
        assert r.queue_offsets == [1, 4, 7, 10]
        assert r.next_begin_offset == 11  # filtered units count as scanned
        assert all(decode_record(m).tags == "TagB" for m in r.messages)
        r = store.get_message("g", "Q", 0, 0, 32, parse_tag_expression("TagA || TagC"))
        assert r.queue_offsets == [i for i in range(30) if i % 3 != 1]
        assert r.next_begin_offset == 30
        r = store.get_message("g", "Q", 0, 0, 32, parse_tag_expression("*"))
        assert r.message_count == 30
    finally:
        await store.stop()


async def test_record_filter_sees_each_record_and_found_ones_are_those_records(
    tmp_path: Path,
) -> None:
    """A record filter (SQL92's) is given each record the tag filter passed, whole; what it
    passes comes back as exactly those records, in spans (a record the filter already read is
    not looked up again), across CommitLog files."""
    store = open_store(tmp_path)
    try:
        await fill(store, "Q", 60, body=150, tags=["TagA", "TagB", "TagC"])
        seen: list[int] = []

        def every_other(record: memoryview) -> bool:
            msg = decode_record(record)
            assert len(record) == msg.total_size
            seen.append(msg.queue_offset)
            return msg.queue_offset % 2 == 0

        r = store.get_message("g", "Q", 0, 0, 64, MATCH_ALL, every_other)
        assert seen == list(range(60))
        assert r.queue_offsets == list(range(0, 60, 2))
        assert [decode_record(m).queue_offset for m in r.messages] == r.queue_offsets
        assert r.buffer_total_size == sum(len(m) for m in r.messages)
        seen.clear()
        r = store.get_message("g", "Q", 0, 0, 5, parse_tag_expression("TagB"), every_other)
        assert seen == [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]
        assert r.queue_offsets == [4, 10, 16, 22, 28]
        assert r.next_begin_offset == 29
        assert all(decode_record(m).tags == "TagB" for m in r.messages)
    finally:
        await store.stop()


class CountingFilter:
    """An SQL92 filter (its predicate and its general evaluation), counting the records the
    scan gives to the general evaluation."""

    def __init__(self, expression: str) -> None:
        self.sql = compile_sql92(expression)
        self.predicate = self.sql.predicate
        self.calls = 0

    def __call__(self, record: memoryview) -> bool:
        self.calls += 1
        return self.sql.matches_record(record)


async def test_an_sql92_scan_finds_what_the_expression_matches(
    tmp_path: Path, scan_twin: str
) -> None:
    """The compiled scan answers records with the filter's predicate in C, across CommitLog
    files, and hands the general evaluation only those the predicate leaves undecided; both
    twins find exactly the records the expression matches, in the same spans."""
    store = open_store(tmp_path)
    values = ["1", "3", "x", "9" * 19, "", "4", "2.0"]  # "9" * 19: undecided (its range)
    regions = ["eu", "us", "ap", "\u00e9"]  # "\u00e9" is undecided for IN
    try:
        for i in range(90):
            props = {"region": regions[i % 4]}
            if i % 11:
                props["a"] = values[i % 7]
            msg = MessageToStore(
                "Q", 0, bytes([65 + i % 26]) * (60 + i % 50), encode_properties(props)
            )
            assert (await store.put_message(msg)).ok
        await fill(store, "Z", 5)  # another queue's records between: spans break there
        await fill(store, "Q", 5)
        store.reput.dispatch_available(1 << 62)
        assert store.commitlog.max_offset > 3 * FILE
        counting = CountingFilter("a BETWEEN 0 AND 4 AND region IN ('eu', 'us')")
        assert counting.predicate is not None
        stored: list[tuple[int, memoryview]] = []
        while len(stored) < 95:
            r = store.get_message("g", "Q", 0, len(stored), 32)
            stored += zip(r.queue_offsets, r.messages, strict=True)
        expected = [(q, bytes(raw)) for q, raw in stored if counting.sql.matches_record(raw)]
        undecided = sum(counting.predicate.test(raw) == UNDECIDED for _q, raw in stored)
        assert undecided > 0 and len(expected) > 10
        offset, found, spans = 0, [], 0
        while offset < 95:
            r = store.get_message("g", "Q", 0, offset, 7, MATCH_ALL, counting)
            found += [(q, bytes(m)) for q, m in zip(r.queue_offsets, r.messages, strict=True)]
            assert b"".join(r.spans) == b"".join(bytes(m) for m in r.messages)
            spans += len(r.spans)
            offset = r.next_begin_offset
        assert found == expected
        assert spans < len(found)  # records next to each other share a span
        assert counting.calls == (undecided if scan_twin == "compiled" else 95)
    finally:
        await store.stop()


async def test_tag_filter_is_by_hash_code_as_in_rocketmq(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        await fill(store, "Q", 4, tags=["Aa", "BB", "Cc", "BB"])  # "Aa" and "BB" share a hash
        r = store.get_message("g", "Q", 0, 0, 32, parse_tag_expression("Aa"))
        assert r.queue_offsets == [0, 1, 3]
    finally:
        await store.stop()


async def test_scan_is_limited_to_800_units_or_max_msg_nums(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        await fill(store, "Q", 1000, body=8, tags=["TagA"])
        nothing = parse_tag_expression("TagZ")
        r = store.get_message("g", "Q", 0, 0, 32, nothing)
        assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 800)
        r = store.get_message("g", "Q", 0, 100, 900, nothing)
        assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1000)
        r = store.get_message("g", "Q", 0, 0, 900, nothing)
        assert r.next_begin_offset == 900
    finally:
        await store.stop()


# --- MESSAGE_WAS_REMOVING ---------------------------------------------------------------------


async def test_message_was_removing_while_commitlog_files_are_deleted(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        for i in range(42):  # CommitLog files 0 and 1: A and M alternately
            await fill(store, "A" if i % 2 else "M", 1)
        await fill(store, "M", 21)  # file 2
        await fill(store, "B", 5)  # file 3
        assert store.commitlog.segments.last is not None
        assert store.commitlog.segments.last.start_offset == 3 * FILE

        task = asyncio.create_task(store.delete_expired_commitlog(0, False, 2))
        await asyncio.sleep(0)
        # The files are out of the CommitLog, the ConsumeQueues not yet corrected.
        assert not task.done()
        assert store.commitlog.min_offset == 2 * FILE
        removing = store.get_message("g", "A", 0, 0, 32)
        skipping = store.get_message("g", "M", 0, 0, 32)
        # An SQL92 filter passing every record reads them where they lie: the same answers.
        everything = compile_sql92("a IS NULL")
        assert everything.predicate is not None
        for topic, without in (("A", removing), ("M", skipping)):
            r = store.get_message("g", topic, 0, 0, 32, MATCH_ALL, everything)
            assert (r.status, r.next_begin_offset, r.queue_offsets, r.sizes) == (
                without.status,
                without.next_begin_offset,
                without.queue_offsets,
                without.sizes,
            )
        assert await task == 2

        assert (removing.status, removing.message_count) == (S.MESSAGE_WAS_REMOVING, 0)
        assert removing.next_begin_offset == 21
        # Removed units are skipped file by file; what follows is found.
        check_found(store, skipping, 21, 21)
        assert skipping.next_begin_offset == 42

        # Afterwards the minimums have followed the CommitLog.
        assert store.min_offset_in_queue("A", 0) == 21
        assert store.min_offset_in_queue("M", 0) == 21
        r = store.get_message("g", "M", 0, 0, 32)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, 21)
        r = store.get_message("g", "A", 0, 0, 32)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, 21)
    finally:
        await store.stop()


# --- transfer caps and pulling from the slave ----------------------------------------------


def expected_batch(sizes: list[int], max_msgs: int, max_bytes: int, max_count: int) -> int:
    """RocketMQ's isTheBatchFull, applied to records of the given sizes."""
    count = total = 0
    for size in sizes:
        if count and (count >= max_msgs or total + size > max_bytes or count > max_count - 1):
            break
        count += 1
        total += size
    return count


CAPS = [
    pytest.param(HUGE_RAM, 40, 100, 64, 32, id="memory-count"),
    pytest.param(HUGE_RAM, 20, 16 * 1024, 64, 15, id="memory-bytes"),
    pytest.param(HUGE_RAM, 40, 100, 5, 5, id="max-msg-nums"),
    pytest.param(1, 40, 100, 64, 8, id="disk-count"),
    pytest.param(1, 20, 16 * 1024, 64, 3, id="disk-bytes"),
    pytest.param(1, 20, 100, 2, 2, id="disk-max-msg-nums"),
]


@pytest.mark.parametrize(("ram", "count", "body", "max_msgs", "expected"), CAPS)
async def test_transfer_caps(
    tmp_path: Path, ram: int, count: int, body: int, max_msgs: int, expected: int
) -> None:
    store = open_store(
        tmp_path,
        mapped_file_size_commit_log=1024 * 1024,
        max_message_size=64 * 1024,
        physical_memory_bytes=ram,
        access_message_in_memory_max_ratio=40,
    )
    try:
        await fill(store, "Q", count, body=body)
        size = 91 + body + 1
        in_disk = ram == 1
        caps = (64 * 1024, 8) if in_disk else (256 * 1024, 32)
        assert expected_batch([size] * count, max_msgs, *caps) == expected
        r = store.get_message("g", "Q", 0, 0, max_msgs)
        check_found(store, r, 0, expected)
        assert r.next_begin_offset == expected
        assert r.suggest_pulling_from_slave is in_disk
    finally:
        await store.stop()


async def test_suggest_pulling_from_slave(tmp_path: Path) -> None:
    # RAM 10000 bytes * 40 % = 4000 bytes "in memory"; the queue spans ~11.5 KB.
    store = open_store(tmp_path, physical_memory_bytes=10_000)
    try:
        await fill(store, "Q", 60)
        r = store.get_message("g", "Q", 0, 0, 1)
        assert r.suggest_pulling_from_slave
        r = store.get_message("g", "Q", 0, 0, 32)
        assert r.message_count == 8  # the oldest records are "on disk"
        assert r.suggest_pulling_from_slave  # judged by the last unit scanned
        r = store.get_message("g", "Q", 0, 45, 32)
        assert r.message_count == 15
        assert not r.suggest_pulling_from_slave
        r = store.get_message("g", "Q", 0, 59, 32)
        assert not r.suggest_pulling_from_slave
    finally:
        await store.stop()


# --- spans: records that follow each other in the CommitLog share one view ----------------------


def reference_scan(
    store: MessageStore,
    topic: str,
    offset: int,
    max_msgs: int,
    tags: str,
    sql: Sql92Filter | None = None,
) -> Any:
    """The scan one record at a time (one `get_record` each, the SQL92 filter's general
    evaluation on it): what the spans must equal."""
    queue = store.find_consume_queue(topic, 0)
    assert queue is not None
    units = queue.raw_units(offset, max(800, max_msgs))
    assert units is not None
    tag_filter, limits, commitlog = parse_tag_expression(tags), store.limits, store.commitlog
    status, records, offsets, total, scanned, last_phy, next_file = (
        S.NO_MATCHED_MESSAGE,
        [],
        [],
        0,
        0,
        0,
        -1,
    )
    for phy, size, tags_code in iter_units(units):
        last_phy = phy
        if next_file != -1 and phy < next_file:
            scanned += 1
            continue
        in_disk = commitlog.max_offset - phy > limits.memory_bytes
        cap_bytes, cap_count = (
            (limits.bytes_in_disk, limits.count_in_disk)
            if in_disk
            else (limits.bytes_in_memory, limits.count_in_memory)
        )
        if records and (
            len(records) >= max_msgs or total + size > cap_bytes or len(records) >= cap_count
        ):
            break
        scanned += 1
        if not tag_filter.matches_all and not tag_filter.match_code(tags_code):
            continue
        record = commitlog.get_record(phy, size)
        if record is None:
            status = S.MESSAGE_WAS_REMOVING if not records else status
            next_file = commitlog.next_segment_offset(phy)
            continue
        if sql is not None and not sql.matches_record(record):
            continue
        records.append(bytes(record))
        offsets.append(offset + scanned - 1)
        total += size
        status, next_file = S.FOUND, -1
    suggest = commitlog.max_offset - last_phy > limits.memory_bytes
    return status, offset + scanned, records, offsets, total, suggest


# Each record's property n, and SQL92 filters on it: "9" * 19 is left undecided by the
# compiled scan's predicate (the general evaluation answers it).
SPAN_VALUES = ["0", "1", "2", "3", "4", "5", "6", "9" * 19, "x"]
SPAN_SQL = ["n BETWEEN 1 AND 4", "TAGS = 'TagB' OR n > 5", "n IN ('x', '2') OR n IS NULL"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(["Q", "R"]), st.integers(1, 12), st.booleans()),
        min_size=1,
        max_size=25,
    ),
    pulls=st.lists(
        st.tuples(
            st.integers(0, 150),
            st.integers(1, 40),
            st.sampled_from(["*", "TagA", "TagA||TagB"]),
            st.sampled_from([None, *SPAN_SQL]),
        ),
        min_size=1,
        max_size=8,
    ),
    ram=st.sampled_from([HUGE_RAM, 6000]),
)
def test_spans_hold_the_records_a_scan_one_by_one_finds(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[str, int, bool]],
    pulls: list[tuple[int, int, str, str | None]],
    ram: int,
) -> None:
    """Batches and single sends of two topics interleave, so records of a queue sit in runs of
    every length, across CommitLog files; every pull must match the record-by-record scan."""
    root = tmp_path_factory.mktemp("spans")

    async def scenario() -> None:
        store = open_store(root, physical_memory_bytes=ram)
        try:
            sent = 0
            for topic, count, batched in writes:
                props = [
                    encode_properties(
                        {
                            "TAGS": "TagA" if (sent + i) % 3 else "TagB",
                            "n": SPAN_VALUES[(sent + i) % len(SPAN_VALUES)],
                        }
                    )
                    for i in range(count)
                ]
                bodies = [
                    bytes([65 + (sent + i) % 26]) * (20 + (sent + i) % 90) for i in range(count)
                ]
                if batched:
                    body = encode_batch_body(
                        [(0, b, p) for b, p in zip(bodies, props, strict=True)]
                    )
                    assert (await store.put_message_batch(MessageBatch(topic, 0, body))).ok
                else:
                    for b, p in zip(bodies, props, strict=True):
                        assert (await store.put_message(MessageToStore(topic, 0, b, p))).ok
                sent += count
            store.reput.dispatch_available(1 << 62)
            for topic in ("Q", "R"):
                queue = store.find_consume_queue(topic, 0)
                if queue is None:
                    continue
                for offset, max_msgs, tags, expression in pulls:
                    if offset >= queue.max_offset:
                        continue
                    sql = None if expression is None else compile_sql92(expression)
                    r = store.get_message(
                        "g", topic, 0, offset, max_msgs, parse_tag_expression(tags), sql
                    )
                    got = (
                        r.status,
                        r.next_begin_offset,
                        [bytes(m) for m in r.messages],
                        r.queue_offsets,
                        r.buffer_total_size,
                        r.suggest_pulling_from_slave,
                    )
                    assert got == reference_scan(store, topic, offset, max_msgs, tags, sql)
                    assert b"".join(r.spans) == b"".join(got[2])
                    assert sum(r.span_counts) == r.message_count == len(r.sizes)
        finally:
            await store.stop()

    asyncio.run(scenario())


async def test_a_batch_comes_back_as_one_span(tmp_path: Path) -> None:
    store = open_store(tmp_path, mapped_file_size_commit_log=1 << 20)
    try:
        body = encode_batch_body([(0, bytes([i]) * 50, "") for i in range(20)])
        assert (await store.put_message_batch(MessageBatch("Q", 0, body))).ok
        await fill(store, "Q", 3)  # single sends right after: the same run
        r = store.get_message("g", "Q", 0, 0, 32)
        check_found(store, r, 0, 23)
        assert (len(r.spans), r.span_counts) == (1, [23])
    finally:
        await store.stop()
