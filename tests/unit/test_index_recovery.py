"""The index after a crash (store/index.py): files kept on the same boot, torn puts undone.

Small files (16 slots, 64 entries) make every key share its slot with others.
"""

from __future__ import annotations

from pathlib import Path

from tidemq.store.index import IndexLoadPlan, IndexService

SLOTS = 16
ENTRIES = 64
T0 = 1_700_000_000_000


def new_service(root: Path, slots: int = SLOTS, entries: int = ENTRIES) -> IndexService:
    svc = IndexService(root / "index", slots, entries)
    svc.load(True, 0)
    return svc


def query(s: IndexService, key: str) -> list[int]:
    return s.query_offsets("T", key, 10_000, 0, 2**62).phy_offsets


def test_same_boot_load_keeps_files_newer_than_the_checkpoint(tmp_path: Path) -> None:
    s = new_service(tmp_path, slots=4, entries=3)
    for i in range(6):
        s.build_index("T", "k", None, i, T0 + i * 1_000, 0)
    s.close()
    again = IndexService(tmp_path / "index", 4, 3)
    again.load(False, 0, keep_newer=True)
    assert again.files == 3
    assert query(again, "k") == [5, 4, 3, 2, 1, 0]
    assert again.rebuild_from == 5  # the newest indexed record: dispatched again
    again.close()


def test_torn_puts_are_undone_and_chains_stay_whole(tmp_path: Path) -> None:
    s = new_service(tmp_path)
    for i in range(10):
        s.build_index("T", f"a{i}", None, i * 10, T0 + i * 1_000, 0)
    s.close()
    path = next((tmp_path / "index").iterdir())
    header = path.read_bytes()[:40]
    s = new_service(tmp_path)
    for i in range(10):
        s.build_index("T", f"a{i}", None, 100 + i * 10, T0 + (10 + i) * 1_000, 0)
    s.close()
    # A process killed before the header write: entries and slots written, indexCount not.
    raw = bytearray(path.read_bytes())
    raw[:40] = header
    path.write_bytes(bytes(raw))

    again = IndexService(tmp_path / "index", SLOTS, ENTRIES)
    again.load(False, 2**62, keep_newer=True)
    try:
        assert query(again, "a3") == [30]
        assert again.rebuild_from == 90
        # Re-dispatch puts them again; the older entries stay reachable through the chains.
        for i in range(10):
            again.build_index("T", f"a{i}", None, 100 + i * 10, T0 + (10 + i) * 1_000, 0)
        for i in range(10):
            assert query(again, f"a{i}") == [100 + i * 10, i * 10]
    finally:
        again.close()
    entries_end = 40 + SLOTS * 4 + 21 * 20  # entries 1..20 are in use
    assert bytes(path.read_bytes()[entries_end : entries_end + 20]) == bytes(20)


def test_torn_puts_are_undone_on_another_boot_too(tmp_path: Path) -> None:
    s = new_service(tmp_path)
    s.build_index("T", "a", None, 10, T0, 0)
    s.close()
    path = next((tmp_path / "index").iterdir())
    header = path.read_bytes()[:40]
    s = new_service(tmp_path)
    s.build_index("T", "a", None, 20, T0 + 1_000, 0)
    s.close()
    raw = bytearray(path.read_bytes())
    raw[:40] = header
    path.write_bytes(bytes(raw))
    again = IndexService(tmp_path / "index", SLOTS, ENTRIES)
    again.load(False, 2**62)
    try:
        again.build_index("T", "a", None, 30, T0 + 2_000, 0)
        assert query(again, "a") == [30, 10]
    finally:
        again.close()


def test_the_load_plan_names_the_files_and_changes_nothing_then_apply_does_it(
    tmp_path: Path,
) -> None:
    s = new_service(tmp_path, slots=4, entries=3)
    for i in range(6):
        s.build_index("T", "k", None, i, T0 + i * 1_000, 0)
    s.close()
    folder = tmp_path / "index"
    (folder / "99999999999999999").write_bytes(b"")  # created, never sized: a crash
    names = sorted(p.name for p in folder.iterdir() if p.stat().st_size)
    assert len(names) == 3
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    again = IndexService(folder, 4, 3)
    # Another boot, a checkpoint between the first file's end and the second's: the second and
    # every later file are destroyed, the dispatch rebuilds from where the first ends.
    plan = again.plan_load(False, T0 + 1_500)
    assert plan == IndexLoadPlan(
        kept=(folder / names[0],),
        destroyed=(folder / names[1], folder / names[2]),
        empty=(folder / "99999999999999999",),
        undo_torn_puts=True,
        rebuild_from=1,
    )
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    again.apply_load(plan)
    try:
        assert sorted(p.name for p in folder.iterdir()) == [names[0]]
        assert (again.files, again.rebuild_from) == (1, 1)
        assert query(again, "k") == [1, 0]
    finally:
        again.close()
