"""One `syncfs(2)` of a file system instead of many `fsync`s of its files and folders.

A flush pass after many new topics has, per new ConsumeQueue file, one `fdatasync` of the file
and one `fsync` of each new folder (the topic's, the queue's): each forces a commit of the ext4
journal, a few ms apiece, so a clean stop after 10,000 new queues spent 10-21 s in them.
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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["SYNCFS_AT_SEGMENTS", "sync_file_system", "syncfs_available"]

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


_syncfs = _load_syncfs()


def syncfs_available() -> bool:
    return _syncfs is not None


def sync_file_system(folder: Path) -> int:
    """`syncfs` of the file system holding `folder`; its `st_dev`. Raises `OSError` when the
    call fails or is not available."""
    if _syncfs is None:
        raise OSError("syncfs is not available here (Linux 5.8 or later)")
    fd = os.open(folder, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs of {folder}: {os.strerror(errno)}")
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)
