"""ConsumeQueues (store/consume_queue.py) as the dispatch builds them.

Units are `[8 phy][4 size][8 tagsCode]`, big-endian. tagsCode is Java's String.hashCode of the
TAGS property, computed here with a plain loop over UTF-16 code units, independently of
store/javahash.py.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.stores import StoreFactory
from tidemq.store.config import BrokerRole
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, encode_properties

FILE = 4096
UNITS_PER_FILE = 16
CQ_FILE = 20 * UNITS_PER_FILE

STORES = StoreFactory(
    mapped_file_size_commit_log=FILE,
    mapped_file_size_consume_queue=CQ_FILE,
    message_index_enable=False,
)
make_config = STORES.config
T0 = 4_102_444_800_000  # 2100-01-01: store times are set from here, ahead of the clock


def java_hash(text: str) -> int:
    """String.hashCode: h = 31*h + unit over UTF-16 code units, 32-bit signed wrapping."""
    raw = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        unit = (raw[i] << 8) | raw[i + 1]
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_reference_hash_matches_known_jvm_values() -> None:
    # Printed by a JVM; guards the reference loop itself.
    assert java_hash("") == 0
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(2**31)
    assert java_hash("\u4e2d\u6587") == 646394
    assert java_hash("\U0001f600") == 1772899


def unit(phy: int, size: int, tags_code: int) -> bytes:
    return struct.pack(">qiq", phy, size, tags_code)


BLANK_UNIT = unit(0, 0x7FFFFFFF, 0)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    s = MessageStore(make_config(tmp_path))
    s.load()
    yield s
    await s.stop()


async def put(
    s: MessageStore,
    topic: str,
    queue_id: int,
    body: bytes,
    store_ts: int | None = None,
    **props: str,
) -> tuple[int, int]:
    if store_ts is not None:
        s.commitlog.last_store_timestamp = store_ts
    result = await s.put_message(MessageToStore(topic, queue_id, body, encode_properties(props)))
    assert result.append is not None and result.ok
    if store_ts is not None:
        assert result.append.store_timestamp == store_ts
    s.reput.dispatch_available(1 << 62)
    return result.append.wrote_offset, result.append.wrote_bytes


TAGS = [
    None,
    "TagA",
    "",
    "\u6807\u7b7e",  # 标签
    "caf\u00e9",
    "T\U0001f600g",  # a surrogate pair
    "polygenelubricants",  # hashes to Integer.MIN_VALUE
    "a" * 300,
]


async def test_units_are_byte_exact_with_java_tag_hashes(store: MessageStore) -> None:
    expected = b""
    for i in range(40):
        tag = TAGS[i % len(TAGS)]
        props = {"TAGS": tag} if tag is not None else {}
        phy, size = await put(store, "Q", 1, f"body{i}".encode() * (i % 9 + 1), **props)
        expected += unit(phy, size, java_hash(tag) if tag else 0)
    folder = store.root / "consumequeue" / "Q" / "1"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [f"{k * CQ_FILE:020d}" for k in range(3)]  # 40 units, 16 per file
    data = b"".join((folder / n).read_bytes() for n in names)
    assert all((folder / n).stat().st_size == CQ_FILE for n in names)
    assert data[: len(expected)] == expected
    assert data[len(expected) :] == bytes(len(data) - len(expected))
    queue = store.find_consume_queue("Q", 1)
    assert queue is not None
    assert (queue.min_offset, queue.max_offset) == (0, 40)
    assert store.max_offset_in_queue("Q", 1) == 40
    assert store.min_offset_in_queue("Q", 1) == 0
    assert store.max_offset_in_queue("Q", 9) == 0
    assert store.commitlog_offset_in_queue("Q", 1, 17) == struct.unpack_from(">q", data, 17 * 20)[0]


async def test_queues_are_separate_per_topic_and_queue_id(store: MessageStore) -> None:
    a = await put(store, "X", 0, b"1")
    b = await put(store, "X", 1, b"2", TAGS="t")
    c = await put(store, "Y", 0, b"3")
    d = await put(store, "X", 0, b"4")
    cq = store.root / "consumequeue"
    assert (cq / "X" / "0" / f"{0:020d}").read_bytes()[:40] == unit(*a, 0) + unit(*d, 0)
    assert (cq / "X" / "1" / f"{0:020d}").read_bytes()[:20] == unit(*b, java_hash("t"))
    assert (cq / "Y" / "0" / f"{0:020d}").read_bytes()[:20] == unit(*c, 0)
    assert sorted(store.queues()) == [("X", 0), ("X", 1), ("Y", 0)]


def test_file_size_is_rounded_up_to_whole_units(tmp_path: Path) -> None:
    assert make_config(tmp_path, mapped_file_size_consume_queue=30).consume_queue_file_size == 40
    assert make_config(tmp_path, mapped_file_size_consume_queue=40).consume_queue_file_size == 40


# --- padding ----------------------------------------------------------------------------------


def test_first_unit_not_at_zero_is_padded_with_blank_units(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "P", 0, CQ_FILE)
    queue.load()
    queue.put(5000, 120, 77, 21)
    queue.put(5120, 130, 0, 22)
    folder = tmp_path / "P" / "0"
    assert [p.name for p in folder.iterdir()] == [f"{CQ_FILE:020d}"]  # holds units 16..31
    data = (folder / f"{CQ_FILE:020d}").read_bytes()
    assert data[: 5 * 20] == BLANK_UNIT * 5
    assert data[100:140] == unit(5000, 120, 77) + unit(5120, 130, 0)
    assert (queue.min_offset, queue.max_offset) == (21, 23)
    assert queue.units(20, 5) is None
    found = queue.units(21, 5) or []
    assert [(u.queue_offset, u.physical_offset) for u in found] == [(21, 5000), (22, 5120)]
    # A repeat and an older unit change nothing.
    queue.put(5120, 130, 0, 22)
    queue.put(4000, 10, 0, 3)
    assert queue.max_offset == 23
    queue.close()


async def test_slave_starting_at_a_later_file_pads_its_queue(tmp_path: Path) -> None:
    master = MessageStore(make_config(tmp_path / "m"))
    master.load()
    slave = MessageStore(make_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    slave.load()
    try:
        for i in range(45):
            await put(master, "S", 0, b"m" * 140, TAGS=f"t{i % 3}")
        last = master.commitlog.segments.last
        assert last is not None and last.start_offset > 0
        start = last.start_offset
        got = master.get_commitlog_data(start)
        assert got is not None
        slave.append_to_commitlog(start, bytes(got[1]))
        slave.reput.dispatch_available(1 << 62)
        mq = master.find_consume_queue("S", 0)
        sq = slave.find_consume_queue("S", 0)
        assert mq is not None and sq is not None
        every = [mq.unit(o) for o in range(mq.max_offset)]
        first = next(u for u in every if u is not None and u.physical_offset >= start)
        assert first.queue_offset % UNITS_PER_FILE != 0  # so that padding is needed
        assert (sq.min_offset, sq.max_offset) == (first.queue_offset, mq.max_offset)
        file_start = first.queue_offset - first.queue_offset % UNITS_PER_FILE
        folder = slave.root / "consumequeue" / "S" / "0"
        data = (folder / f"{file_start * 20:020d}").read_bytes()
        pad = first.queue_offset - file_start
        assert data[: pad * 20] == BLANK_UNIT * pad
        master_folder = master.root / "consumequeue" / "S" / "0"
        master_data = (master_folder / f"{file_start * 20:020d}").read_bytes()
        assert data[pad * 20 :] == master_data[pad * 20 :]
        result = slave.get_message("g", "S", 0, first.queue_offset, 32)
        assert result.status.name == "FOUND"
        assert result.queue_offsets[0] == first.queue_offset
        assert slave.get_message("g", "S", 0, 0, 32).status.name == "OFFSET_TOO_SMALL"
    finally:
        await master.stop()
        await slave.stop()
    again = MessageStore(make_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    again.load()
    try:
        sq = again.find_consume_queue("S", 0)
        assert sq is not None
        assert (sq.min_offset, sq.max_offset) == (first.queue_offset, mq.max_offset)
    finally:
        await again.stop()


# --- lookups by time --------------------------------------------------------------------------


async def test_offset_in_queue_by_time(store: MessageStore) -> None:
    times = [T0 + 10 * i for i in range(20)]
    times[7] = times[8] = times[9] = T0 + 75  # three messages in the same millisecond
    times[10:] = [t + 1000 for t in times[10:]]
    for i, ts in enumerate(times):
        await put(store, "Time", 0, f"{i}".encode(), store_ts=ts)
        await put(store, "Other", 0, b"noise", store_ts=ts)
    lookup = store.offset_in_queue_by_time
    assert lookup("Time", 0, 0) == 0
    assert lookup("Time", 0, T0) == 0
    assert lookup("Time", 0, T0 + 1) == 1
    assert lookup("Time", 0, T0 + 70) == 7  # the first of the three
    assert lookup("Time", 0, T0 + 75) == 7
    assert lookup("Time", 0, T0 + 76) == 10
    assert lookup("Time", 0, times[10]) == 10
    assert lookup("Time", 0, times[19]) == 19
    assert lookup("Time", 0, times[19] + 1) == 20  # past every message: max offset
    assert lookup("Nope", 0, T0) == 0
    assert store.message_store_timestamp("Time", 0, 12) == times[12]
    assert store.earliest_message_time("Time", 0) == T0
    assert store.message_store_timestamp("Time", 0, 20) == -1
