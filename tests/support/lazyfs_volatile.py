"""The unsynced state of a lossy file system's backing folder, and the power cut that drops it.

`Volatile(root)` is told of every change before it is made to the folder `root` (the FUSE
daemon of tests/support/lazyfs.py calls it; the rules are in that module's docstring):

- `before_write(ino, fd, start, end)` / `before_truncate(ino, fd, size)`: the first change to a
  file after its last sync records its durable size; each 4 KiB page changed records its bytes as
  they were (b"" for a page past the durable end); `synced_file(ino)` forgets the file's record.
- `before_dir_change(ino, path)`: the first change to a directory after its last sync records its
  entries (name -> (inode, is a directory)); `keep(path, ino)` hard-links a file about to lose a
  name into `root/.lazyfs-attic/<inode>`; `synced_dir(ino)` forgets the directory's record;
  `dir_entry_durable` patches a record for the changes taken as durable at once.
- `cut(rng)` puts the folder back: each recorded file to its durable size and pages (with `rng`,
  each page is kept new with probability 1/2 and a grown file may keep a size in between), then
  each recorded directory to its entries, parents first; the attic is emptied.

Torn sizes follow what a journalling file system can leave (ext4's i_disksize): growth by
writes past the end becomes durable as its pages are written back, so any page-aligned size up
to the end of those writes (or that end itself); growth by a truncate (a file sized by
ftruncate, as a sparse segment is) is one size change, so the file comes back at its durable
size or at one of the sizes it was truncated to, never at a page in between.

Keys are the backing folder's inode numbers.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

PAGE: Final = 4096
ATTIC: Final = ".lazyfs-attic"


@dataclass
class FileUndo:
    """What a cut puts back in one file: its durable size and pages as they were at the sync."""

    durable_size: int
    pages: dict[int, bytes] = field(default_factory=dict)  # b"": past the durable end
    written_to: int = 0  # the furthest end of a write past the file's end at the time
    truncated_to: set[int] = field(default_factory=set)  # sizes set by truncates


@dataclass
class CutSummary:
    files: int = 0
    pages_lost: int = 0
    pages_kept: int = 0
    dirs: int = 0
    # each file's first unsynced page at the cut, by its path under the root
    first_unsynced: dict[str, int] = field(default_factory=dict)


def torn_sizes(undo: FileUndo, current: int) -> set[int]:
    """The sizes a torn cut may leave a grown file at (module docstring), none past `current`."""
    durable = undo.durable_size
    sizes = {durable}
    if undo.written_to > durable:
        first = -(-durable // PAGE)
        sizes |= {page * PAGE for page in range(first, undo.written_to // PAGE + 1)}
        sizes.add(undo.written_to)
    sizes |= undo.truncated_to
    return {size for size in sizes if durable <= size <= current}


class Volatile:
    """The unsynced state of one backing folder, and the cut that drops it (no FUSE here).

    Keyed by the backing inode numbers; `paths` is kept by the caller (every path of a
    known inode).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.attic = root / ATTIC
        self.files: dict[int, FileUndo] = {}
        self.dirs: dict[int, dict[str, tuple[int, bool]]] = {}
        self.gone: list[int] = []  # inodes that lost their last name (the caller forgets them)

    # --- file data ----------------------------------------------------------------------

    def before_write(self, ino: int, fd: int, start: int, end: int) -> None:
        """Record the pages [start, end) will change, as they were at the last sync."""
        self._before_change(ino, fd, start, end)
        undo = self.files[ino]
        if end > os.fstat(fd).st_size:
            undo.written_to = max(undo.written_to, end)

    def _before_change(self, ino: int, fd: int, start: int, end: int) -> None:
        undo = self.files.get(ino)
        if undo is None:
            undo = self.files[ino] = FileUndo(os.fstat(fd).st_size)
        for page in range(start // PAGE, -(-end // PAGE)):
            if page not in undo.pages:
                at = page * PAGE
                undo.pages[page] = os.pread(fd, PAGE, at) if at < undo.durable_size else b""

    def before_truncate(self, ino: int, fd: int, size: int) -> None:
        current = os.fstat(fd).st_size
        undo = self.files.get(ino)
        durable = current if undo is None else undo.durable_size
        # Shrinking drops bytes that were durable (and zeroes the tail of the cut page).
        self._before_change(ino, fd, min(size, current), max(min(current, durable), size))
        self.files[ino].truncated_to.add(size)

    def synced_file(self, ino: int) -> None:
        self.files.pop(ino, None)

    # --- names --------------------------------------------------------------------------

    def before_dir_change(self, ino: int, path: Path) -> None:
        if ino not in self.dirs:
            self.dirs[ino] = self.entries(path)

    def entries(self, path: Path) -> dict[str, tuple[int, bool]]:
        with os.scandir(path) as scan:
            return {
                e.name: (e.inode(), e.is_dir(follow_symlinks=False))
                for e in scan
                if not (path == self.root and e.name == ATTIC)
            }

    def keep(self, path: Path, ino: int) -> Path:
        """Keep inode `ino` (a file at `path` about to lose that name) for a cut to put back;
        returns the name it is kept under."""
        self.attic.mkdir(exist_ok=True)
        kept = self.attic / str(ino)
        if not kept.exists():
            os.link(path, kept, follow_symlinks=False)
        return kept

    def dir_entry_durable(self, parent: int, name: str, entry: tuple[int, bool] | None) -> None:
        """A change taken as durable at once (rmdir, a directory's rename) in `parent`."""
        recorded = self.dirs.get(parent)
        if recorded is not None:
            if entry is None:
                recorded.pop(name, None)
            else:
                recorded[name] = entry

    def synced_dir(self, ino: int) -> None:
        self.dirs.pop(ino, None)
        if not self.dirs:
            self._empty_attic()

    def _empty_attic(self) -> None:
        """No record names a kept inode any more: those with no other name are gone for good
        (their numbers may be reused, so nothing may be remembered of them)."""
        if self.attic.exists():
            for kept in self.attic.iterdir():
                st = os.lstat(kept)
                if st.st_nlink == 1:
                    self.files.pop(st.st_ino, None)
                    self.gone.append(st.st_ino)
            shutil.rmtree(self.attic, ignore_errors=True)

    def sync_all(self) -> None:
        self.files.clear()
        self.dirs.clear()
        self._empty_attic()

    def stats(self) -> dict[str, int]:
        return {
            "files": len(self.files),
            "pages": sum(len(u.pages) for u in self.files.values()),
            "dirs": len(self.dirs),
        }

    # --- the cut ------------------------------------------------------------------------

    def cut(self, rng: random.Random | None) -> CutSummary:
        """Put the backing folder back to its durable state; `rng`: torn pages and sizes."""
        summary = CutSummary(files=len(self.files), dirs=len(self.dirs))
        where = self._inode_paths()
        for ino in sorted(self.files):
            undo = self.files[ino]
            path = where.get(ino)
            if path is None:
                continue  # unlinked for good (its directory was synced): nothing to restore
            if undo.pages:
                summary.first_unsynced[str(path.relative_to(self.root))] = min(undo.pages) * PAGE
            lost, kept = self._revert_file(path, undo, rng)
            summary.pages_lost += lost
            summary.pages_kept += kept
        # Every inode a directory record names must have a name to be linked back from.
        for recorded in self.dirs.values():
            for ino, is_dir in recorded.values():
                if not is_dir and ino in where and not (self.attic / str(ino)).exists():
                    self.keep(where[ino], ino)
        dirs = sorted(
            ((ino, where[ino]) for ino in self.dirs if ino in where),
            key=lambda item: len(item[1].parts),
        )
        for ino, path in dirs:
            if not path.is_dir() or os.lstat(path).st_ino != ino:
                continue  # removed by its parent's record: it did not survive the cut
            self._revert_dir(path, self.dirs[ino])
        self.files.clear()
        self.dirs.clear()
        shutil.rmtree(self.attic, ignore_errors=True)
        return summary

    def _inode_paths(self) -> dict[int, Path]:
        found: dict[int, Path] = {os.lstat(self.root).st_ino: self.root}
        attic: list[Path] = []
        for folder, subdirs, names in os.walk(self.root):
            base = Path(folder)
            for name in subdirs + names:
                path = base / name
                if path == self.attic or path.parent == self.attic:
                    attic.append(path)
                    continue
                found.setdefault(os.lstat(path).st_ino, path)
        # attic links last, whatever order the walk took: a name in the tree is preferred
        # (the cut's summary names files by it)
        for path in attic:
            found.setdefault(os.lstat(path).st_ino, path)
        return found

    def _revert_file(
        self, path: Path, undo: FileUndo, rng: random.Random | None
    ) -> tuple[int, int]:
        fd = os.open(path, os.O_RDWR)
        try:
            current = os.fstat(fd).st_size
            size = undo.durable_size
            if rng is not None and current > size and rng.random() < 0.5:
                size = rng.choice(sorted(torn_sizes(undo, current)))
            lost = kept = 0
            for page, old in sorted(undo.pages.items()):
                if rng is not None and rng.random() < 0.5:
                    kept += 1
                    continue
                lost += 1
                os.pwrite(fd, old.ljust(PAGE, b"\0"), page * PAGE)
            os.ftruncate(fd, size)
            return lost, kept
        finally:
            os.close(fd)

    def _revert_dir(self, path: Path, recorded: dict[str, tuple[int, bool]]) -> None:
        for name, (ino, is_dir) in self.entries(path).items():
            if recorded.get(name) != (ino, is_dir):
                target = path / name
                if is_dir:
                    shutil.rmtree(target)
                else:
                    target.unlink()
        now = self.entries(path)
        for name, (ino, is_dir) in recorded.items():
            if name in now:
                continue
            if is_dir:
                (path / name).mkdir()  # recorded but gone: cannot happen by the rules above
            else:
                os.link(self.attic / str(ino), path / name, follow_symlinks=False)
