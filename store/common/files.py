"""Crash-safe replacement of a small file, the directory fsync that makes a rename durable, the
`mkdir -p` whose new directories are durable (`make_dirs`), and the one function the store builds
a path from a name with.

`path_inside(root, *names)` is `root/name/...` when every name is one plain path segment
(not empty, no `/` or NUL, not `.` or `..`) and the joined path, normalised, lies inside
`root`; otherwise it raises `StorePathError`. Requests are checked long before they reach the
store (broker/name_gate.py); this is the defense in depth, whatever a caller passes.

`write_file_safely(path, data, keep_backup=True)` writes, in this order:
1. `<path>.tmp` with `data`, fsynced;
2. when `path` exists and `keep_backup`: its current content as `<path>.bak`, through
   `<path>.bak.tmp` and a rename (a hard link, or a synced copy where the file system has none),
   so an older `.bak` is replaced atomically;
3. `<path>.tmp` renamed over `path`, then the directory fsynced.
Every rename is atomic, so after a crash at any point `path` holds the old or the new content
whole, and `<path>.bak` a whole earlier one. Nothing is left half-written under `path`.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from pathlib import Path

from tidemq.common.errors import StorePathError

log = logging.getLogger(__name__)


def path_inside(root: Path, *names: str) -> Path:
    """`root / names[0] / names[1] ...`, refused unless it stays inside `root` (see above)."""
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise StorePathError(f"refusing a path from name {name[:200]!r} under {root}")
    path = root.joinpath(*names)
    inside = os.path.normpath(path)
    base = os.path.normpath(root)
    if os.path.commonpath((base, inside)) != base or inside == base:
        raise StorePathError(f"refusing path {str(path)[:300]!r}: not inside {root}")
    return path


def sibling(path: Path, suffix: str) -> Path:
    """`path` with `suffix` appended to its name (`offsets.json` -> `offsets.json.bak`)."""
    return path.with_name(path.name + suffix)


def fsync_dir(directory: Path) -> None:
    """Make the names created, renamed or unlinked in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """`mkdir -p` whose new names are durable: each directory created is fsynced into its parent.

    A name created in a directory survives a power cut only once that directory is fsynced
    (POSIX; ext4 and XFS often commit it with a later fsync of a file, but nothing promises
    that): without this a new store, or a new ConsumeQueue, could lose all its files at once.
    """
    if directory.is_dir():
        return
    wanted = directory
    missing: list[Path] = []
    # As mkdir -p: up to the first name that exists, so that a file in the way is refused by
    # the mkdir below it with "Not a directory" (the error operators read in the log).
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    if not missing:
        raise FileExistsError(errno.EEXIST, "File exists (not a directory)", str(wanted))
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:
            if not new.is_dir():
                raise
            continue  # made meanwhile by another thread or process, which syncs its parent
        fsync_dir(new.parent)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _keep_backup(path: Path) -> None:
    staging = sibling(path, ".bak.tmp")
    staging.unlink(missing_ok=True)
    try:
        os.link(path, staging)
    except OSError:
        # No hard links here (some network or FUSE file systems): a synced copy does as well.
        shutil.copyfile(path, staging)
        with open(staging, "rb") as copied:
            os.fsync(copied.fileno())
    os.replace(staging, sibling(path, ".bak"))


_path_locks: dict[Path, threading.Lock] = {}
_path_locks_lock = threading.Lock()


def _lock_of(path: Path) -> threading.Lock:
    with _path_locks_lock:
        return _path_locks.setdefault(path, threading.Lock())


def write_file_safely(path: Path, data: bytes, *, keep_backup: bool = True) -> None:
    """Replace `path` with `data` crash-safely (the order is in the module docstring).

    Blocks on fsyncs: call it off the event loop when the file is large or written often.
    Raises `OSError` when the file cannot be written; the previous file is then left in place.
    Writes of one path in one process take turns, as they share `<path>.tmp` (one could
    rename the other's half-written file, or find it gone). Each path is meant to have one
    writer at a time (the store's checkpoint flushes hold their own lock; a consumer's offsets
    file is written by its one offset store): a second writer arriving while one writes is
    logged, since whichever writes last wins, and it may hold the older data.
    """
    lock = _lock_of(path)
    if not lock.acquire(blocking=False):
        log.warning("two writers of %s at once: the later waits, and its data wins", path)
        lock.acquire()
    try:
        make_dirs(path.parent)
        tmp = sibling(path, ".tmp")
        _write_synced(tmp, data)
        if keep_backup and path.exists():
            _keep_backup(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        lock.release()
