"""The message index (store/index.py) and Java's String.hashCode (store/javahash.py).

Small files (16 slots, 64 entries) make slot collisions, chains and file rolls happen after a
handful of messages. Expected bytes are built here with struct, independently of the module.
"""

from __future__ import annotations

import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.store.errors import CorruptStoreError
from tidemq.store.index import IndexService, index_key_hash
from tidemq.store.javahash import cached_java_string_hash, java_string_hash

SLOTS = 16
ENTRIES = 64
FILE_SIZE = 40 + SLOTS * 4 + ENTRIES * 20
T0 = 1_700_000_000_000  # a store timestamp in ms, on a whole second

# Values printed by a real JVM (String.hashCode), not by the code under test.
JAVA_HASHES = [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", -(2**31)),
    ("\u00e9", 233),  # é, one unit
    ("\u4e2d\u6587", 646394),  # 中文: 20013 * 31 + 25991
    ("\U0001f600", 1772899),  # 😀, surrogate pair D83D DE00: 55357 * 31 + 56832
    ("a\U0001f600b", 57849694),
    ("\ud800x", 1714296),  # a lone surrogate counts as its unit
    ("TopicTest#ORDER-1", -1111209712),
    ("ab" * 1000, 1895982568),  # longer than one internal chunk
    ("\u4e2d\U0001f600x" * 3000, -822750016),
]


def new_service(root: Path, slots: int = SLOTS, entries: int = ENTRIES) -> IndexService:
    svc = IndexService(root / "index", slots, entries)
    svc.load(True, 0)
    return svc


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[IndexService]:
    s = new_service(tmp_path)
    yield s
    s.close()


def index_files(root: Path) -> list[Path]:
    return sorted((root / "index").iterdir())


def header(path: Path) -> tuple[int, ...]:
    return struct.unpack(">qqqqii", path.read_bytes()[:40])


def query(
    s: IndexService, key: str, begin: int = 0, end: int = 2**62, n: int = 10_000
) -> list[int]:
    return s.query_offsets("T", key, n, begin, end).phy_offsets


# -- java_string_hash ---------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES)
def test_java_string_hash_matches_the_jvm(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected
    assert cached_java_string_hash(text) == expected


def test_index_key_hash_is_non_negative_like_index_file() -> None:
    assert index_key_hash("TopicTest#ORDER-1") == 1111209712  # abs of the negative hashCode
    assert index_key_hash("hello") == 99162322
    # Math.abs(Integer.MIN_VALUE) stays negative; IndexFile turns it into 0.
    assert index_key_hash("polygenelubricants") == 0


# -- byte layout --------------------------------------------------------------------------


def test_byte_layout_of_header_slots_and_entries(tmp_path: Path, svc: IndexService) -> None:
    # "T#a" hashes to 81906 (slot 2), "T#b" to 81907 (slot 3), "T#q" to 81922 (slot 2 again).
    svc.build_index("T", "a", None, 100, T0, 0)
    svc.build_index("T", "b q", None, 200, T0 + 5_500, 0)

    expected = bytearray(FILE_SIZE)
    # beginTs, endTs, beginPhy, endPhy, hashSlotCount (slots 2 and 3), indexCount (next entry)
    struct.pack_into(">qqqqii", expected, 0, T0, T0 + 5_500, 100, 200, 2, 4)
    struct.pack_into(">i", expected, 40 + 2 * 4, 3)  # slot 2 -> newest entry 3
    struct.pack_into(">i", expected, 40 + 3 * 4, 2)  # slot 3 -> entry 2
    entries = 40 + SLOTS * 4  # entry 0 is never written
    struct.pack_into(">iqii", expected, entries + 1 * 20, 81906, 100, 0, 0)
    struct.pack_into(">iqii", expected, entries + 2 * 20, 81907, 200, 5, 0)
    struct.pack_into(">iqii", expected, entries + 3 * 20, 81922, 200, 5, 1)  # chains to 1

    [path] = index_files(tmp_path)
    assert path.read_bytes() == bytes(expected)


def test_file_is_named_by_its_local_creation_time(tmp_path: Path, svc: IndexService) -> None:
    before = time.time()
    svc.build_index("T", "a", None, 0, T0, 0)
    [path] = index_files(tmp_path)
    assert len(path.name) == 17
    assert path.name.isdigit()
    created = time.mktime(time.strptime(path.name[:14], "%Y%m%d%H%M%S"))
    assert before - 2 <= created <= time.time() + 1


def test_rolled_file_starts_from_the_previous_end(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=4, entries=3)  # two entries per file
    s.build_index("T", "a b", None, 100, T0, 0)
    s.build_index("T", "c", None, 200, T0 + 3_000, 0)
    s.close()
    first, second = index_files(tmp_path)
    assert header(first) == (T0, T0, 100, 100, 2, 3)
    # The header is seeded with the previous end; the first put then moves the begin values.
    assert header(second) == (T0 + 3_000, T0 + 3_000, 200, 200, 1, 2)
    # RocketMQ would write timeDiff 3 here (taken against the seeded begin T0); tidemq writes
    # the diff against the begin this entry sets, so it reads back at its own store time.
    entry1 = second.read_bytes()[40 + 4 * 4 + 20 : 40 + 4 * 4 + 40]
    assert struct.unpack(">iqii", entry1) == (index_key_hash("T#c"), 200, 0, 0)


def test_rolled_file_seed_before_its_first_put(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=4, entries=2)  # one entry per file
    s.build_index("T", "a", None, 100, T0, 0)
    s.build_index("T", None, None, 200, T0 + 1_000, 0)  # rolls, nothing to index
    _first, second = index_files(tmp_path)
    # IndexFile's constructor writes only the four begin/end fields.
    assert second.read_bytes()[:40] == struct.pack(">qqqqii", T0, T0, 100, 100, 0, 0)
    s.build_index("T", "b", None, 50, T0, 0)  # behind the seeded end offset: already indexed
    assert query(s, "b") == []
    s.close()


# -- put / query --------------------------------------------------------------------------


def test_round_trip_with_collisions_chains_and_rolls(tmp_path: Path, svc: IndexService) -> None:
    keys_by_offset = {}
    for i in range(300):
        keys = f"k{i} shared{i % 7}"
        uniq = f"U{i:08X}"
        svc.build_index("T", keys, uniq, i * 100, T0 + i * 250, 0)
        keys_by_offset[i * 100] = {f"k{i}", f"shared{i % 7}", uniq}
    assert svc.files > 5  # 900 keys, 63 entries per file

    for i in range(300):
        for key in (f"k{i}", f"U{i:08X}"):
            found = query(svc, key)
            assert i * 100 in found
            # Anything else is a hash collision (16 slots): same index hash, different key.
            for off in found:
                assert any(
                    index_key_hash(f"T#{k}") == index_key_hash(f"T#{key}")
                    for k in keys_by_offset[off]
                )
    shared = query(svc, "shared3")
    assert {i * 100 for i in range(3, 300, 7)} <= set(shared)


def test_file_names_sort_in_creation_order(tmp_path: Path, svc: IndexService) -> None:
    for i in range(200):  # many rolls within the same millisecond
        svc.build_index("T", f"a{i} b{i}", None, i, T0 + i, 0)
    paths = index_files(tmp_path)
    assert len(paths) == svc.files
    begins = [header(p)[2] for p in paths]
    assert begins == sorted(begins)


def test_results_are_newest_first_and_capped(svc: IndexService) -> None:
    for i in range(10):
        svc.build_index("T", "same", None, i * 10, T0 + i * 1_000, 0)
    assert query(svc, "same") == [i * 10 for i in reversed(range(10))]
    assert query(svc, "same", n=3) == [90, 80, 70]


def test_hash_collisions_return_other_keys_for_the_caller_to_recheck(svc: IndexService) -> None:
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" do too.
    svc.build_index("T", "Aa", None, 10, T0, 0)
    svc.build_index("T", "BB", None, 20, T0, 0)
    assert query(svc, "Aa") == [20, 10]


def test_topic_is_part_of_the_key(svc: IndexService) -> None:
    svc.build_index("T", "a", None, 10, T0, 0)
    svc.build_index("U", "a", None, 20, T0, 0)
    assert svc.query_offsets("U", "a", 10, 0, 2**62).phy_offsets == [20]


def test_time_range_filters_entries(svc: IndexService) -> None:
    for i in range(3):
        svc.build_index("T", "k", None, i, T0 + i * 10_000, 0)
    assert query(svc, "k", T0 + 5_000, T0 + 15_000) == [1]
    assert query(svc, "k", T0, T0 + 10_000) == [1, 0]
    assert query(svc, "k", T0 + 21_000, T0 + 30_000) == []
    assert query(svc, "k", T0 - 10_000, T0 - 1) == []


def test_time_range_across_files(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=4, entries=3)  # two entries per file
    for i in range(10):
        s.build_index("T", "k", None, i, T0 + i * 10_000, 0)
    assert s.files == 5
    assert query(s, "k", T0 + 25_000, T0 + 65_000) == [6, 5, 4, 3]
    assert query(s, "k") == list(reversed(range(10)))
    s.close()


def test_query_reports_the_last_update(svc: IndexService) -> None:
    empty = svc.query_offsets("T", "a", 10, 0, 2**62)
    assert (empty.phy_offsets, empty.last_update_timestamp, empty.last_update_phy_offset) == (
        [],
        0,
        0,
    )
    svc.build_index("T", "a", None, 10, T0, 0)
    svc.build_index("T", "b", None, 20, T0 + 7, 0)
    r = svc.query_offsets("T", "missing", 10, 0, 2**62)
    assert (r.last_update_timestamp, r.last_update_phy_offset) == (T0 + 7, 20)


def test_which_keys_are_indexed(svc: IndexService) -> None:
    svc.build_index("T", " a  b ", "U1", 10, T0, 0)
    assert query(svc, "a") == [10]
    assert query(svc, "b") == [10]
    assert query(svc, "U1") == [10]
    svc.build_index("T", None, None, 20, T0, 0)
    svc.build_index("T", "", None, 30, T0, 0)
    assert query(svc, "") == []  # empty keys are never indexed...
    svc.build_index("T", None, "", 40, T0, 0)
    assert query(svc, "") == [40]  # ...but a present, empty UNIQ_KEY is, as in RocketMQ


@pytest.mark.parametrize(
    ("sys_flag", "indexed"), [(0x0, True), (0x4, True), (0x8, True), (0xC, False)]
)
def test_transaction_types(svc: IndexService, sys_flag: int, indexed: bool) -> None:
    # IndexService.buildIndex returns only for ROLLBACK; PREPARED is indexed (4.9.7).
    svc.build_index("T", "k", None, 10, T0, sys_flag | 0x1)
    assert query(svc, "k") == ([10] if indexed else [])


def test_already_indexed_offsets_are_skipped(svc: IndexService) -> None:
    svc.build_index("T", "k", None, 100, T0, 0)
    svc.build_index("T", "k", None, 50, T0, 0)  # re-dispatch of an older message
    assert query(svc, "k") == [100]


def test_time_diff_is_clamped(tmp_path: Path, svc: IndexService) -> None:
    svc.build_index("T", "a", None, 1, T0, 0)
    svc.build_index("T", "b", None, 2, T0 - 5_000, 0)  # store time before the file's begin
    svc.build_index("T", "c", None, 3, T0 + 2**31 * 1000 + 5_000, 0)
    data = index_files(tmp_path)[0].read_bytes()
    entries = 40 + SLOTS * 4
    diffs = [struct.unpack_from(">i", data, entries + n * 20 + 12)[0] for n in (1, 2, 3)]
    assert diffs == [0, 0, 2**31 - 1]


# -- load / reload ------------------------------------------------------------------------


def test_reload_in_a_new_service(tmp_path: Path) -> None:
    s = new_service(tmp_path)
    for i in range(100):
        s.build_index("T", f"k{i % 10}", f"U{i}", i * 10, T0 + i * 1_000, 0)
    files = s.files
    s.flush()
    s.close()

    again = new_service(tmp_path)
    assert again.files == files
    assert query(again, "k3") == [i * 10 for i in reversed(range(3, 100, 10))]
    assert query(again, "U42") == [420]
    # Writing continues in the last file: its chains and its end offset were restored.
    again.build_index("T", "k3", None, 5, T0, 0)  # older than the end offset: skipped
    again.build_index("T", "k3", None, 2_000, T0 + 200_000, 0)
    assert query(again, "k3")[:2] == [2_000, 930]
    again.close()


def test_abnormal_load_destroys_files_newer_than_the_checkpoint(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=4, entries=3)
    for i in range(6):
        s.build_index("T", "k", None, i, T0 + i * 1_000, 0)
    s.close()
    paths = index_files(tmp_path)
    assert len(paths) == 3
    checkpoint = header(paths[0])[1]  # end timestamp of the first file

    again = IndexService(tmp_path / "index", 4, 3)
    again.load(False, checkpoint)
    assert again.files == 1
    assert index_files(tmp_path) == paths[:1]
    assert query(again, "k") == [1, 0]
    # Re-dispatch rebuilds the destroyed part. Like RocketMQ, only offsets below the end offset
    # count as already indexed, so the last indexed message (1) is indexed a second time.
    for i in range(6):
        again.build_index("T", "k", None, i, T0 + i * 1_000, 0)
    assert query(again, "k") == [5, 4, 3, 2, 1, 1, 0]
    again.close()


def test_normal_load_keeps_files_newer_than_the_checkpoint(tmp_path: Path) -> None:
    s = new_service(tmp_path)
    s.build_index("T", "k", None, 1, T0, 0)
    s.close()
    again = IndexService(tmp_path / "index", SLOTS, ENTRIES)
    again.load(True, 0)
    assert again.files == 1
    again.close()


def test_load_rejects_a_file_of_the_wrong_size(tmp_path: Path) -> None:
    s = new_service(tmp_path)
    s.build_index("T", "k", None, 1, T0, 0)
    s.close()
    with pytest.raises(CorruptStoreError, match="bytes, expected"):
        IndexService(tmp_path / "index", SLOTS * 2, ENTRIES).load(True, 0)


def test_load_skips_foreign_names_and_removes_empty_files(tmp_path: Path) -> None:
    d = tmp_path / "index"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    (d / "20240101000000000").write_bytes(b"")  # crashed between create and ftruncate
    s = IndexService(d, SLOTS, ENTRIES)
    s.load(True, 0)
    assert s.files == 0
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]
    s.close()


# -- cleanup ------------------------------------------------------------------------------


def test_delete_expired_drops_leading_files_but_never_the_last(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=4, entries=3)
    for i in range(8):
        s.build_index("T", "k", None, i * 100, T0 + i, 0)
    assert s.files == 4  # file ends: 100, 300, 500, 700
    assert s.delete_expired(100) == 0
    assert s.delete_expired(301) == 2
    assert s.files == 2
    assert len(index_files(tmp_path)) == 2
    assert query(s, "k") == [700, 600, 500, 400]
    assert s.delete_expired(10**9) == 1
    assert s.files == 1
    s.close()


@pytest.mark.parametrize("cut", [50, 2_300, 2_350, 3_000, 3_950])
def test_truncate_after_gives_back_the_index_as_it_was_before(tmp_path: Path, cut: int) -> None:
    full = new_service(tmp_path / "a", slots=4, entries=5)
    short = new_service(tmp_path / "b", slots=4, entries=5)
    for i in range(40):
        keys = " ".join(f"k{i % 3} x{i} y{i}".split()[: 1 + i % 3])  # messages span files
        args = ("T", keys, None, i * 100, T0 + i * 1_000, 0)
        full.build_index(*args)
        if i * 100 < cut:
            short.build_index(*args)
    full.truncate_after(cut)
    assert full.files == short.files
    for a, b in zip(index_files(tmp_path / "a"), index_files(tmp_path / "b"), strict=True):
        assert a.read_bytes() == b.read_bytes()
    assert all(off < cut for off in query(full, "k0"))
    # New messages written over the cut are indexed, not taken for already indexed ones.
    full.build_index("T", "new", None, cut, T0 + 99_000, 0)
    assert query(full, "new") == [cut]
    full.close()
    short.close()


def test_truncate_before_everything_removes_all_files(svc: IndexService, tmp_path: Path) -> None:
    svc.build_index("T", "k", None, 100, T0, 0)
    svc.truncate_after(100)
    assert svc.files == 0
    assert index_files(tmp_path) == []
    svc.build_index("T", "k", None, 100, T0, 0)
    assert query(svc, "k") == [100]


# -- flush --------------------------------------------------------------------------------


def test_flush_returns_the_durable_end_timestamp(svc: IndexService) -> None:
    assert svc.flush() == 0
    svc.build_index("T", "k", None, 1, T0, 0)
    svc.build_index("T", "k", None, 2, T0 + 42, 0)
    assert svc.flush() == T0 + 42
    assert svc.flush() == T0 + 42  # nothing new: nothing to fsync, same answer


def test_flush_in_a_worker_thread_while_putting(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=8, entries=16)
    stop = threading.Event()
    errors: list[BaseException] = []
    results: list[int] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                results.append(s.flush())
        except BaseException as e:  # surfaced by the assert below
            errors.append(e)

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for i in range(3_000):
            s.build_index("T", f"k{i}", None, i, T0 + i, 0)
            if i % 500 == 499:
                s.delete_expired(i - 100)
    finally:
        stop.set()
        worker.join()
    assert errors == []
    assert results == sorted(results)
    assert s.flush() == T0 + 2_999
    s.close()


# -- property -----------------------------------------------------------------------------

_keys = st.text(st.characters(codec="utf-8", exclude_characters=" "), min_size=1, max_size=6)
_messages = st.lists(
    st.tuples(
        st.lists(_keys, max_size=3),
        st.one_of(st.none(), _keys),
        st.integers(min_value=0, max_value=3_000),  # ms since the previous message
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_messages, slots=st.integers(1, 8), entries=st.integers(2, 12))
def test_every_key_put_is_found(
    messages: list[tuple[list[str], str | None, int]], slots: int, entries: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        s = new_service(Path(d), slots, entries)
        ts = T0
        for n, (keys, uniq, gap) in enumerate(messages):
            ts += gap
            s.build_index("T", " ".join(keys), uniq, n * 10, ts, 0)
        for n, (keys, uniq, _gap) in enumerate(messages):
            for key in [*keys, *([uniq] if uniq is not None else [])]:
                assert n * 10 in query(s, key)
        s.close()
