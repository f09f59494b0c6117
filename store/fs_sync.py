"""One `syncfs(2)` of a file system instead of many `fsync`s of its files and folders.

The last flush pass of a stop after many new topics has, per new ConsumeQueue file, one
`fdatasync` of the file and one `fsync` of each new folder (the topic's, the queue's): each forces
a commit of the ext4 journal, a few ms apiece, so a clean stop after 10,000 new queues spent
10-21 s in them. Only that pass uses it (`StoreFlusher.flush_consume_queues(one_syncfs=True)`):
while sends are served, a syncfs would also write back every other dirty page of the file system.
`syncfs` writes back every dirty page and all metadata of the file system holding a descriptor
and waits for it: one journal commit for all of them.

Why that is as durable as the calls it replaces (`segment.Segment.note_synced`):

- Linux's `syncfs` returns after the file system's dirty data and metadata, as they were when it
  was called, are on the device (the same writeback and journal commit `sync` does, and
  `sync_filesystem` ends with the device's cache flush, as `fsync` does).
- A segment's bytes up to `committed` were `pwrite`n before the pass read `committed`, which it
  does before calling `syncfs`: they are among those dirty pages. Its folders' new entries were
  made before the segment existed (`create_sparse` runs before it is adopted), so before too.
- Only segments on the file system that was synced count (`st_dev` of the file and of each new
  folder); others keep their own `fdatasync`/`fsync`.
- Before Linux 5.8 `syncfs` did not report a failed writeback (it returned 0): it is used only
  from 5.8 on, and a failure (-1) marks nothing synced, so each file then gets its own calls.
- Only on file systems whose `syncfs` is their `fsync` of everything: ext4, xfs, btrfs
  (`statfs` f_type). On a FUSE file system the kernel writes the dirty pages to the daemon but
  asks it to sync nothing (only virtiofs implements it), so a power cut could lose what syncfs
  returned for: there, and on any other type, each file keeps its own `fsync`
  (tests/fault/test_power_cut.py cuts a FUSE disk after such a pass).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

__all__ = [
    "DURABLE_SYNCFS_TYPES",
    "SYNCFS_AT_SEGMENTS",
    "file_system_type",
    "sync_file_system",
    "syncfs_available",
]

# Segments to sync in one pass from which one syncfs replaces their fsyncs. Below it the
# per-file calls are cheap enough, and a syncfs also writes back what others dirtied on the
# same file system.
SYNCFS_AT_SEGMENTS: Final = 64


def _kernel_reports_errors(release: str) -> bool:
    """`syncfs` reports writeback errors since Linux 5.8."""
    try:
        major, minor = (int(part) for part in release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


def _load_syncfs() -> Callable[[int], int] | None:
    if platform.system() != "Linux" or not _kernel_reports_errors(platform.release()):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


class _StatFs(ctypes.Structure):
    # struct statfs of 64-bit Linux: f_type first, the rest only sized for
    _fields_ = (("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112))


def _load_fstatfs() -> Callable[[int, Any], int] | None:
    if ctypes.sizeof(ctypes.c_long) != 8:
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).fstatfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.POINTER(_StatFs)]
    function.restype = ctypes.c_int
    return function


# statfs f_type of the file systems whose syncfs makes everything durable (linux/magic.h).
DURABLE_SYNCFS_TYPES: Final = {
    0xEF53: "ext4",  # also ext2/ext3
    0x58465342: "xfs",
    0x9123683E: "btrfs",
}

_syncfs = _load_syncfs()
_fstatfs = _load_fstatfs()


def syncfs_available() -> bool:
    return _syncfs is not None and _fstatfs is not None


def file_system_type(fd: int) -> int:
    """statfs f_type of the file system holding `fd`."""
    assert _fstatfs is not None
    found = _StatFs()
    if _fstatfs(fd, ctypes.byref(found)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"fstatfs: {os.strerror(errno)}")
    return int(found.f_type) & 0xFFFFFFFF


def sync_file_system(folder: Path) -> int | None:
    """`syncfs` of the file system holding `folder`, and its `st_dev`; None (nothing done) when
    that file system is not one of `DURABLE_SYNCFS_TYPES`. Raises `OSError` when the call fails
    or is not available."""
    if _syncfs is None or _fstatfs is None:
        raise OSError("syncfs is not available here (Linux 5.8 or later)")
    fd = os.open(folder, os.O_RDONLY)
    try:
        if file_system_type(fd) not in DURABLE_SYNCFS_TYPES:
            return None
        if _syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs of {folder}: {os.strerror(errno)}")
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)
