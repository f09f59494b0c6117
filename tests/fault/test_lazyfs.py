"""The lossy file system itself (tests/support/lazyfs.py): what a power cut keeps and drops.

Each test writes through a real FUSE mount, cuts (`all`: every unsynced byte lost; `torn`: a
seeded part of the unsynced pages kept) and reads the backing folder, which is what the next
mount serves. Controls show the same steps with the sync, or a clean unmount, keep the data: a
file system that dropped everything would fail them.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.lazy_mounts import NEEDS_FUSE, LazyMount, can_mount

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)

PAGE = 4096


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyMount]:
    mount = LazyMount(tmp_path, "disk")
    try:
        yield mount.start()
    finally:
        mount.stop()


def write(path: Path, data: bytes, at: int = 0, *, sync: bool = False) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, at)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_file(lazy: LazyMount, name: str, data: bytes) -> Path:
    path = lazy.path / name
    write(path, data, sync=True)
    sync_dir(lazy.path)
    return path


def on_disk(lazy: LazyMount, name: str) -> bytes:
    return (lazy.backing / name).read_bytes()


def test_unsynced_writes_are_lost_synced_ones_kept(lazy: LazyMount) -> None:
    path = durable_file(lazy, "f", b"a" * 10_000)
    write(path, b"b" * 3000, 2000, sync=True)  # synced: kept
    write(path, b"c" * 9000, 8000)  # unsynced, and grows the file: lost
    assert path.read_bytes() == b"a" * 2000 + b"b" * 3000 + b"a" * 3000 + b"c" * 9000
    assert lazy.stats() == {"files": 1, "pages": 4, "dirs": 0}  # pages 1-4
    summary = lazy.cut("all")
    assert summary["pages_lost"] == 4 and summary["pages_kept"] == 0
    assert on_disk(lazy, "f") == b"a" * 2000 + b"b" * 3000 + b"a" * 5000
    lazy.start()  # the next boot serves what the disk kept
    assert path.read_bytes() == on_disk(lazy, "f")


def test_clean_unmount_keeps_everything(lazy: LazyMount) -> None:
    path = durable_file(lazy, "f", b"a" * 100)
    write(path, b"b" * 100, 100)
    write(lazy.path / "new", b"n")
    lazy.stop()
    assert on_disk(lazy, "f") == b"a" * 100 + b"b" * 100
    assert on_disk(lazy, "new") == b"n"


def test_torn_cut_keeps_a_seeded_part_of_the_unsynced_pages_whole(lazy: LazyMount) -> None:
    pages = 64
    old = b"".join(bytes([i]) * PAGE for i in range(pages))
    new = b"".join(bytes([100 + i]) * PAGE for i in range(pages))
    path = durable_file(lazy, "f", old)
    write(path, new)
    summary = lazy.cut("torn", seed=7)
    data = on_disk(lazy, "f")
    assert len(data) == pages * PAGE
    kept = [
        i for i in range(pages) if data[i * PAGE : (i + 1) * PAGE] == new[i * PAGE : (i + 1) * PAGE]
    ]
    lost = [
        i for i in range(pages) if data[i * PAGE : (i + 1) * PAGE] == old[i * PAGE : (i + 1) * PAGE]
    ]
    assert len(kept) + len(lost) == pages, "every page is wholly old or wholly new"
    assert kept and lost, "64 pages, each kept with probability 1/2"
    assert (summary["pages_kept"], summary["pages_lost"]) == (len(kept), len(lost))


def test_torn_cut_of_a_grown_file_keeps_a_page_aligned_size_in_between(tmp_path: Path) -> None:
    sizes = set()
    mount = LazyMount(tmp_path, "disk")
    for seed in range(12):
        mount.start()
        path = mount.path / f"f{seed}"
        write(path, b"a" * PAGE, sync=True)
        sync_dir(mount.path)
        write(path, b"b" * 8 * PAGE, PAGE)
        mount.cut("torn", seed=seed)
        size = len(on_disk(mount, f"f{seed}"))
        assert size % PAGE == 0 and PAGE <= size <= 9 * PAGE
        sizes.add(size)
    assert PAGE in sizes and len(sizes) > 2


def test_rename_without_a_directory_fsync_is_undone(lazy: LazyMount) -> None:
    target = durable_file(lazy, "config", b"old")
    staged = lazy.path / "config.tmp"
    write(staged, b"new", sync=True)
    os.replace(staged, target)
    assert target.read_bytes() == b"new"
    lazy.cut("all")
    assert sorted(os.listdir(lazy.backing)) == ["config"]
    assert on_disk(lazy, "config") == b"old"

    lazy.start()  # the same with the directory synced: the rename is durable
    write(staged, b"new", sync=True)
    os.replace(staged, target)
    sync_dir(lazy.path)
    lazy.cut("all")
    assert sorted(os.listdir(lazy.backing)) == ["config"]
    assert on_disk(lazy, "config") == b"new"


def test_create_link_and_unlink_are_durable_with_their_directory_only(lazy: LazyMount) -> None:
    gone = durable_file(lazy, "gone", b"g" * 10)
    (lazy.path / "sub").mkdir()
    write(lazy.path / "sub" / "synced", b"s", sync=True)  # its directory is never synced
    write(lazy.path / "created", b"c", sync=True)
    os.link(lazy.path / "created", lazy.path / "linked")
    gone.unlink()
    lazy.cut("all")
    assert sorted(os.listdir(lazy.backing)) == ["gone"]
    assert on_disk(lazy, "gone") == b"g" * 10

    lazy.start()
    (lazy.path / "sub").mkdir()
    write(lazy.path / "sub" / "synced", b"s", sync=True)
    sync_dir(lazy.path / "sub")
    write(lazy.path / "created", b"c", sync=True)
    (lazy.path / "gone").unlink()
    sync_dir(lazy.path)
    lazy.cut("all")
    assert sorted(os.listdir(lazy.backing)) == ["created", "sub"]
    assert on_disk(lazy, "sub/synced") == b"s"


def test_truncate_and_size_changes_are_undone(lazy: LazyMount) -> None:
    data = os.urandom(3 * PAGE + 100)
    shrunk = durable_file(lazy, "shrunk", data)
    grown = durable_file(lazy, "grown", data)
    os.truncate(shrunk, 1000)
    write(shrunk, b"x" * 10, 500)
    os.truncate(grown, 10 * PAGE)
    assert shrunk.stat().st_size == 1000 and grown.stat().st_size == 10 * PAGE
    lazy.cut("all")
    assert on_disk(lazy, "shrunk") == data
    assert on_disk(lazy, "grown") == data

    lazy.start()  # synced, the new sizes stay
    for path, size in ((shrunk, 1000), (grown, 10 * PAGE)):
        fd = os.open(path, os.O_RDWR)
        os.ftruncate(fd, size)
        os.fsync(fd)
        os.close(fd)
    lazy.cut("all")
    assert on_disk(lazy, "shrunk") == data[:1000]
    assert on_disk(lazy, "grown") == data + bytes(10 * PAGE - len(data))


def test_msync_keeps_the_mapped_pages_it_covers(lazy: LazyMount) -> None:
    """A shared writable map works on the mount; msync is the sync of the pages it covers."""
    path = durable_file(lazy, "mapped", bytes(2 * PAGE))
    fd = os.open(path, os.O_RDWR)
    mapped = mmap.mmap(fd, 2 * PAGE, mmap.MAP_SHARED)
    try:
        mapped[0:5] = b"first"
        mapped.flush(0, PAGE)  # msync: kept
        mapped[PAGE : PAGE + 6] = b"second"  # dirty in the page cache only: lost
        assert os.pread(fd, 6, PAGE) == b"second"
        lazy.cut("all")
    finally:
        mapped.close()
        with contextlib.suppress(OSError):  # after a cut: "transport endpoint is not connected"
            os.close(fd)
    assert on_disk(lazy, "mapped") == b"first" + bytes(2 * PAGE - 5)


WRITER = textwrap.dedent(
    """
    import mmap, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    mapped = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
    mapped[0:5] = b"dirty"
    print("written", flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.parametrize("end", ["cut", "clean unmount"])
def test_dirty_pages_of_a_killed_process_are_lost_by_a_cut_only(lazy: LazyMount, end: str) -> None:
    """SIGKILL leaves a map's dirty pages to the kernel: a cut drops them, as power loss does."""
    path = durable_file(lazy, "mapped", bytes(PAGE))
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as writer:
        try:
            assert writer.stdout is not None and writer.stdout.readline() == b"written\n"
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
    if end == "cut":
        lazy.cut("all")
        assert on_disk(lazy, "mapped") == bytes(PAGE)
    else:
        lazy.stop()
        assert on_disk(lazy, "mapped") == b"dirty" + bytes(PAGE - 5)
