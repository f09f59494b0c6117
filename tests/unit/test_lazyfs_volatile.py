"""The lossy file system's bookkeeping without FUSE (tests/support/lazyfs_volatile.py): the hooks
are called as the daemon calls them, before each change to a plain folder, then a cut."""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.support.lazyfs_volatile import ATTIC, PAGE, Volatile


def write(volatile: Volatile, path: Path, data: bytes, at: int = 0) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        volatile.before_write(os.fstat(fd).st_ino, fd, at, at + len(data))
        os.pwrite(fd, data, at)
    finally:
        os.close(fd)


def test_a_cut_restores_pages_and_size_as_of_the_sync(tmp_path: Path) -> None:
    volatile = Volatile(tmp_path)
    path = tmp_path / "f"
    path.write_bytes(b"a" * (2 * PAGE))  # there before: durable
    write(volatile, path, b"b" * (3 * PAGE), PAGE // 2)
    assert volatile.stats() == {"files": 1, "pages": 4, "dirs": 0}
    summary = volatile.cut(None)
    assert (summary.pages_lost, summary.pages_kept) == (4, 0)
    assert summary.first_unsynced == {"f": 0}
    assert path.read_bytes() == b"a" * (2 * PAGE)


def test_a_synced_file_keeps_what_it_had_at_the_sync(tmp_path: Path) -> None:
    volatile = Volatile(tmp_path)
    path = tmp_path / "f"
    path.write_bytes(b"")
    write(volatile, path, b"x" * 100)
    volatile.synced_file(os.stat(path).st_ino)
    write(volatile, path, b"y" * 100, 100)
    volatile.cut(None)
    assert path.read_bytes() == b"x" * 100


def test_a_torn_cut_is_decided_by_its_seed(tmp_path: Path) -> None:
    results = []
    for attempt in range(2):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        volatile = Volatile(folder)
        path = folder / "f"
        path.write_bytes(bytes(32 * PAGE))
        write(volatile, path, b"\xff" * (32 * PAGE))
        summary = volatile.cut(random.Random(42))
        data = path.read_bytes()
        pages = [data[i * PAGE : (i + 1) * PAGE] for i in range(32)]
        assert all(p in (bytes(PAGE), b"\xff" * PAGE) for p in pages)
        results.append((summary.pages_kept, data))
    assert results[0] == results[1]
    assert 0 < results[0][0] < 32


def test_names_come_back_as_the_directory_was_at_its_sync(tmp_path: Path) -> None:
    volatile = Volatile(tmp_path)
    root_ino = os.stat(tmp_path).st_ino
    kept = tmp_path / "kept"
    kept.write_bytes(b"k")
    (tmp_path / "other").write_bytes(b"o")
    # unlink "kept", rename "other" over a new name, create "new": none synced
    volatile.before_dir_change(root_ino, tmp_path)
    volatile.keep(kept, os.stat(kept).st_ino)
    kept.unlink()
    volatile.keep(tmp_path / "other", os.stat(tmp_path / "other").st_ino)
    os.rename(tmp_path / "other", tmp_path / "renamed")
    (tmp_path / "new").write_bytes(b"n")
    assert sorted(os.listdir(tmp_path)) == sorted([ATTIC, "new", "renamed"])
    summary = volatile.cut(None)
    assert summary.dirs == 1
    assert sorted(os.listdir(tmp_path)) == ["kept", "other"]
    assert (tmp_path / "kept").read_bytes() == b"k"


def test_a_directory_sync_makes_its_names_durable_and_empties_the_attic(tmp_path: Path) -> None:
    volatile = Volatile(tmp_path)
    root_ino = os.stat(tmp_path).st_ino
    gone = tmp_path / "gone"
    gone.write_bytes(b"g")
    volatile.before_dir_change(root_ino, tmp_path)
    volatile.keep(gone, os.stat(gone).st_ino)
    gone.unlink()
    (tmp_path / "new").write_bytes(b"n")
    volatile.synced_dir(root_ino)
    assert not (tmp_path / ATTIC).exists()
    volatile.cut(None)
    assert os.listdir(tmp_path) == ["new"]


def test_the_summary_names_a_file_by_its_name_in_the_tree_not_its_attic_link(
    tmp_path: Path,
) -> None:
    """A file whose directory entry is not durable has an attic link too (kept so that a cut can
    restore it); its first unsynced page is reported under its name in the tree, which callers
    read (tests/fault/powercut.py's durable_end looks for commitlog/<offset>), whatever order
    the walk meets the attic and the tree in (found: a fresh store's CommitLog file reported as
    `.lazyfs-attic/<inode>`, so a cut seemed to leave nothing of the CommitLog unsynced)."""
    for name in ("a", "store", "zzz"):  # before and after the attic in any listing order
        root = tmp_path / name
        (root / name / "commitlog").mkdir(parents=True)
        volatile = Volatile(root)
        path = root / name / "commitlog" / "00000000000000000000"
        path.write_bytes(bytes(2 * PAGE))  # there before, size durable
        folder = path.parent
        volatile.before_dir_change(os.stat(folder).st_ino, folder)
        volatile.keep(path, os.stat(path).st_ino)  # as the daemon does for a name not synced
        write(volatile, path, b"r" * 100, PAGE + 10)
        summary = volatile.cut(None)
        assert summary.first_unsynced == {f"{name}/commitlog/00000000000000000000": PAGE}


def test_a_file_grown_by_a_truncate_comes_back_whole_sized_or_at_its_durable_size(
    tmp_path: Path,
) -> None:
    """A sparse segment (ftruncate to its size, then pages written inside it): a torn cut
    leaves it empty or at its full size, never at a page in between (one size change, as a
    journalling file system records it); a file grown by writes may keep any page in between."""
    sizes: dict[str, set[int]] = {"truncated": set(), "written": set()}
    for seed in range(16):
        folder = tmp_path / str(seed)
        folder.mkdir()
        volatile = Volatile(folder)
        for how in sizes:
            path = folder / how
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if how == "truncated":
                    volatile.before_truncate(os.fstat(fd).st_ino, fd, 6000)
                    os.ftruncate(fd, 6000)
                    inode = os.fstat(fd).st_ino
                    volatile.before_write(inode, fd, 0, 4096)  # inside the file: no growth
                    os.pwrite(fd, b"u" * 4096, 0)
                else:
                    volatile.before_write(os.fstat(fd).st_ino, fd, 0, 6000)
                    os.pwrite(fd, b"w" * 6000, 0)
            finally:
                os.close(fd)
        volatile.cut(random.Random(seed))
        for how in sizes:
            sizes[how].add((folder / how).stat().st_size)
    assert sizes["truncated"] == {0, 6000}, sizes
    assert PAGE in sizes["written"] and sizes["written"] <= {0, PAGE, 6000}, sizes
