"""One segment file of a log (RocketMQ's MappedFile).

A segment is a file of fixed size named by the 20-digit zero-padded offset of its first byte in
the log. It is created at full size and read through a shared memory map. Three positions track
its bytes: `wrote` (appended), `committed` (reached the file; differs from `wrote` only when a
transient write buffer is used) and `flushed` (made durable by fsync).

Appends reach the file by positioned writes into the page cache (`AppendMode.pwrite`) or by copies
into the map (`AppendMode.mmap`). In pwrite mode, appends may also be gathered (`gather`) and
written together by one pwritev (`write_gathered`): the requests of one read then cost one system
call, not one each. Gathered bytes count as appended (`wrote`) but not as committed until written,
so no reader sees them before they are in the file. Either way readers see the written bytes
through the map at once: on Linux both paths land in the same page cache. `flush()` calls
fdatasync on the descriptor, which also writes back pages dirtied through the map, and releases
the GIL, so the flush services run it in a worker thread.

Lazily mapped segments (made with a `MapBudget`: the ConsumeQueues) open and map their file
only when read or written; the budget closes and unmaps the least recently used past its bound,
and the next use opens it again. They append by pwrite: the first store into a page of a map
takes a write fault (page_mkwrite), measured at 1.5-2 ms on this machine's loaded ext4 against
3-10 us for a pwrite of the same bytes, and a new queue's first unit always lands on a new
page. A full disk is then an error of the append, not a SIGBUS of a store into the map, so the
file is created sparse (`create_sparse`: its size set, no blocks, no sync on the event loop);
its name and size become durable at its first flush, before any of its bytes are called
flushed. A power cut before that may leave the file empty: `SegmentQueue.load` extends it with
zeros, which recovery reads as never written.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from tidemq.common.files import fsync_dir
from tidemq.store.config import AppendMode
from tidemq.store.errors import CorruptStoreError
from tidemq.store.map_budget import MapBudget

log = logging.getLogger(__name__)

PAGE_SIZE = 4096
NAME_DIGITS = 20
TMP_SUFFIX = ".tmp"
# Buffers one pwritev takes (Linux IOV_MAX).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
# Orders lazily mapped segments' creation against folder syncs (`SyncedDirs`).
_SEQUENCE = itertools.count()
# The folders one flush pass has synced: folder -> a `_SEQUENCE` number taken just before its
# fsync began. A segment made (its number taken after its file existed) before that number
# needs no second sync of that folder: the first covered its entry. One pass of a clean stop
# after 20,000 new topics synced the `consumequeue` folder 20,000 times without it.
SyncedDirs = dict[Path, int]


def offset_to_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"


def name_to_offset(name: str) -> int | None:
    if len(name) != NAME_DIGITS or not name.isdigit():
        return None
    return int(name)


def preallocate(fd: int, size: int) -> None:
    """Size the file to `size` bytes and reserve its blocks, as RocketMQ's warmed mapped files do.

    Appends into a sparse file make the file system allocate blocks as they go: on ext4 that
    costs over ten times the copy itself (measured: 116 us of CPU per 32 KiB pwrite into a sparse
    file, 8.6 us into a preallocated one), on the broker's event loop. Reserving the blocks is a
    metadata operation (under 1 ms for 1 GiB), reads still see zeros, and a store into the map
    can no longer fail with SIGBUS on a full disk. File systems without fallocate keep the file
    sparse.
    """
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def _create_full_size(path: Path, size: int) -> int:
    """Create `path` at its full size, atomically: a crash never leaves a short file there.

    The file is sized under a temporary name, then linked to its own name, which fails if that
    exists (as O_EXCL would). A temporary file left by a crash never held data; load removes it.
    Against a power cut: the size is synced before the link (else the name could come back with
    a file of 0 bytes, which stops the next load), and the directory after it (else the name
    could be lost, and with it every record a later fdatasync of the file "made durable": a
    SYNC_FLUSH acknowledgement).
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        preallocate(fd, size)
        os.fdatasync(fd)
        os.link(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    try:
        fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


# A lazily mapped file made by `create_sparse`: its descriptor, and the folders whose new
# entries its first flush syncs.
SparseFile = tuple[int, tuple[Path, ...]]


def create_sparse(path: Path, size: int, *, first_page: bool = True) -> SparseFile:
    """Create `path` at its full size without syncs; returns its descriptor and the folders
    whose entries are new (the file's, and the parent of each folder made for it), for the
    first flush to sync. A crash between the creation and the sizing leaves an empty file, as a
    power cut before that flush may: load extends it (module docstring).

    `first_page`: the first page (where the first append lands: a queue starting past a
    file's start pads it from there) is written with zeros, so that the file system allocates
    its block here: dispatch makes a backlog's files in a worker thread (store/dispatch.py), and
    the event loop's first append then finds the page in the cache. A file made on the loop
    right before its first append skips it (the append does the same). The rest of the file
    stays a hole."""
    made = _make_folders(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.ftruncate(fd, size)
        if first_page:
            os.pwrite(fd, bytes(min(PAGE_SIZE, size)), 0)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd, (path.parent, *(folder.parent for folder in made))


def _make_folders(folder: Path) -> list[Path]:
    """`mkdir -p folder` in as few system calls as it takes (one for an existing topic's new
    queue, three for a new topic's first); the folders that were missing, deepest first. One
    made meanwhile by another thread counts as missing all the same: its entry is synced by
    this file's first flush too (its maker's file may never be adopted)."""
    try:
        os.mkdir(folder)
    except FileExistsError:
        return []
    except FileNotFoundError:
        made = _make_folders(folder.parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder)
        return [folder, *made]
    return [folder]


class Segment:
    """A fixed-size file mapped into memory, appended to at its wrote position."""

    def __init__(
        self,
        path: Path,
        size: int,
        *,
        append_mode: AppendMode = AppendMode.pwrite,
        create: bool = False,
        write_buffer: bytearray | None = None,
        maps: MapBudget | None = None,
        created: SparseFile | None = None,
    ) -> None:
        """`created`: a lazily mapped file `create_sparse` made (in a worker thread), to adopt
        instead of creating one (`create` then)."""
        start = name_to_offset(path.name)
        if start is None:
            raise CorruptStoreError(f"segment file name {path} is not a 20-digit offset")
        self.path = path
        self.size = size
        self.start_offset = start
        self.append_mode = append_mode
        self.maps = maps
        self._fd = -1
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self.wrote = 0
        self._committed = 0
        self.flushed = 0
        # Transient store pool: appends land here and `commit()` writes them to the file.
        self._write_buffer = write_buffer
        # Appends gathered for one pwritev, and their size (see `gather`).
        self._gathered: list[bytes | bytearray] = []
        self._gathered_bytes = 0
        self.closed = False
        # Flushes run in worker threads; this keeps close() from pulling the descriptor away.
        self._io_lock = threading.Lock()
        # Lazily mapped: folders whose new entries the first flush syncs (module docstring),
        # and when the file was made, after it existed (`SyncedDirs`).
        self._unsynced_dirs: tuple[Path, ...] = ()
        self._made = -1
        if maps is not None:
            if append_mode is not AppendMode.pwrite or write_buffer is not None:
                raise ValueError("a lazily mapped segment appends by pwrite, unbuffered")
            if create:
                fd, self._unsynced_dirs = created or create_sparse(path, size)
                self._made = next(_SEQUENCE)
                # Open for its appends, mapped at its first read (`view`): a queue written
                # and evicted before anyone reads it never costs a map and its unmapping.
                self._fd = fd
                maps.opened(self)
            return
        fd = _create_full_size(path, size) if create else os.open(path, os.O_RDWR)
        try:
            self._map_descriptor(fd)
        except BaseException:
            os.close(fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self._fd = fd

    def _map_descriptor(self, fd: int) -> memoryview:
        actual = os.fstat(fd).st_size
        if actual != self.size:
            raise CorruptStoreError(
                f"segment file {self.path} has {actual} bytes, expected {self.size}; "
                "fix or move the file aside (or the configured file size) and start again"
            )
        self._map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        view = self._view = memoryview(self._map)
        return view

    def _map_file(self, fd: int = -1) -> memoryview:
        """Map a lazily mapped segment's file: through the descriptor it holds open for its
        appends, else through `fd` or one opened now (then counted by the budget). Two
        descriptors then: ours for appends and the one the map keeps."""
        if self.closed:
            raise ValueError(f"segment {self.path.name} is closed")
        assert self.maps is not None
        if fd < 0 and self._fd >= 0:
            view = self._map_descriptor(self._fd)
            self.maps.touch(self)
            return view
        if fd < 0:
            fd = os.open(self.path, os.O_RDWR)
        try:
            view = self._map_descriptor(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.maps.opened(self)
        return view

    def _open_file(self) -> None:
        """Open a lazily mapped segment's file for appends, without a map (counted by the
        budget as an open file)."""
        if self.closed:
            raise ValueError(f"segment {self.path.name} is closed")
        assert self.maps is not None
        self._fd = os.open(self.path, os.O_RDWR)
        self.maps.opened(self)

    @property
    def mapped(self) -> bool:
        return self._view is not None

    def release_map(self) -> None:
        """Close and unmap the file (a lazily mapped segment, for its budget); the next use
        opens it again. A reader still holding a slice keeps the pages mapped until it drops
        it."""
        # Flushes never use this descriptor (`_sync_lazy`): no lock, no wait on a sync.
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        view, mapped = self._view, self._map
        self._view = self._map = None
        # A slice still alive keeps the map: it goes when the slice does.
        if view is not None:
            with contextlib.suppress(BufferError):
                view.release()
        if mapped is not None:
            with contextlib.suppress(BufferError):
                mapped.close()

    @property
    def view(self) -> memoryview:
        """The whole file as a writable view (mapped now if the budget had unmapped it)."""
        view = self._view
        if view is None:
            if self.maps is None:
                raise ValueError(f"segment {self.path.name} is closed")
            return self._map_file()
        if self.maps is not None:
            self.maps.touch(self)
        return view

    @property
    def map(self) -> mmap.mmap:
        """The shared map, for readers that search it (`mmap.find`) without copying."""
        self.view  # maps a lazily mapped segment, or counts it as used  # noqa: B018
        assert self._map is not None
        return self._map

    # --- positions --------------------------------------------------------------------------

    @property
    def committed(self) -> int:
        if self._write_buffer is None:
            return self.wrote - self._gathered_bytes
        return self._committed

    @property
    def read_position(self) -> int:
        """How far readers (dispatch, HA, pulls) may read: what has reached the file."""
        return self.committed

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    @property
    def free(self) -> int:
        return self.size - self.wrote

    @property
    def is_full(self) -> bool:
        return self.wrote >= self.size

    def set_positions(self, position: int) -> None:
        """Recovery: everything up to `position` is valid and durable, the rest is not ours."""
        self.wrote = position
        self._committed = position
        self.flushed = position

    # --- writing ----------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append at the wrote position; returns the file position the data starts at."""
        if self._gathered:
            self.write_gathered()
        at = self.wrote
        n = len(data)
        if at + n > self.size:
            raise ValueError(f"append of {n} bytes at {at} overflows segment {self.path.name}")
        if self._write_buffer is not None:
            self._write_buffer[at : at + n] = data
        elif self.append_mode is AppendMode.pwrite:
            if self._fd < 0:
                self._open_file()  # a lazily mapped segment's, closed by its budget
            elif self.maps is not None:
                self.maps.touch(self)
            written = os.pwrite(self._fd, data, at)
            if written != n:
                raise OSError(f"short write to {self.path}: {written} of {n} bytes")
        else:
            self.map[at : at + n] = data
        self.wrote = at + n
        return at

    def gather(self, data: bytes | bytearray) -> None:
        """Append `data` to be written by the next `write_gathered` (pwrite mode; in another
        mode, or with a write buffer, this is `append`). `data` must not change meanwhile."""
        if self.append_mode is not AppendMode.pwrite or self._write_buffer is not None:
            self.append(data)
            return
        n = len(data)
        if self.wrote + n > self.size:
            raise ValueError(
                f"append of {n} bytes at {self.wrote} overflows segment {self.path.name}"
            )
        self._gathered.append(data)
        self._gathered_bytes += n
        self.wrote += n

    def write_gathered(self) -> None:
        """Write the gathered appends to the file in order: one pwritev per IOV_MAX of them."""
        gathered = self._gathered
        if not gathered:
            return
        self._pwritev(gathered, self.wrote - self._gathered_bytes)
        self._gathered = []
        self._gathered_bytes = 0

    def append_spans(self, spans: Sequence[bytes | bytearray | memoryview], total: int) -> int:
        """Append `spans` (`total` bytes in all) back to back, in as few writes as the OS takes
        (one pwritev of up to IOV_MAX spans); returns the file position they start at."""
        if self._gathered:
            self.write_gathered()
        at = self.wrote
        if at + total > self.size:
            raise ValueError(f"append of {total} bytes at {at} overflows segment {self.path.name}")
        if self._write_buffer is not None or self.append_mode is not AppendMode.pwrite:
            for span in spans:
                self.append(span)
            return at
        self.wrote = self._pwritev(spans, at)
        return at

    def _pwritev(self, spans: Sequence[bytes | bytearray | memoryview], position: int) -> int:
        """Write `spans` back to back from `position`, one pwritev per IOV_MAX of them; returns
        the position after them."""
        for first in range(0, len(spans), _IOV_MAX):
            group = spans[first : first + _IOV_MAX]
            size = sum(map(len, group))
            written = os.pwritev(self._fd, group, position)
            if written != size:
                # A short write (rare on regular files): finish it span by span.
                self._pwrite_rest(group, position, written)
            position += size
        return position

    def _pwrite_rest(
        self, spans: Sequence[bytes | bytearray | memoryview], position: int, done: int
    ) -> None:
        for span in spans:
            n = len(span)
            if done >= n:
                done -= n
                position += n
                continue
            view = memoryview(span)[done:]
            done = 0
            while view:
                written = os.pwrite(self._fd, view, position + n - len(view))
                if written <= 0:
                    raise OSError(f"short write to {self.path}")
                view = view[written:]
            position += n

    def fill_to_end(self) -> None:
        """Mark the segment full (after an end-of-file blank: the tail is left as it is).

        A reused transient buffer still holds an older segment's bytes there: zero them, so that
        the committed file is the same as one written directly.
        """
        if self._gathered:
            self.write_gathered()
        if self._write_buffer is not None:
            self._write_buffer[self.wrote : self.size] = bytes(self.size - self.wrote)
        self.wrote = self.size

    def commit(self, least_pages: int) -> bool:
        """Write buffered appends to the file; returns True if something was written."""
        buffer = self._write_buffer
        if buffer is None:
            return False
        start, end = self._committed, self.wrote
        if end <= start or not self._enough_pages(end - start, least_pages, full=end == self.size):
            return False
        os.pwrite(self._fd, memoryview(buffer)[start:end], start)
        self._committed = end
        return True

    def take_write_buffer(self) -> bytearray | None:
        """The transient buffer, once the segment no longer needs it (for reuse by the pool)."""
        if self._write_buffer is None or self._committed < self.size:
            return None
        buffer, self._write_buffer = self._write_buffer, None
        return buffer

    def flush(self, least_pages: int, synced: SyncedDirs | None = None) -> bool:
        """fdatasync what is committed; safe in a worker thread while the loop appends.
        `synced`: the folders this flush pass synced already (lazily mapped segments)."""
        target = self.committed
        if target <= self.flushed:
            return False
        if not self._enough_pages(target - self.flushed, least_pages, full=target == self.size):
            return False
        with self._io_lock:
            if self.closed:
                return False
            if self.maps is None:
                os.fdatasync(self._fd)
            else:
                self._sync_lazy(synced)
        self.flushed = max(self.flushed, target)
        return True

    def note_synced(self, target: int, device: int) -> bool:
        """A `syncfs` of file system `device` began after `committed` was `target` (read before
        it): the bytes up to `target` and the new names this segment was created with are
        durable if they are on that file system (store/fs_sync.py says why). False when this
        segment is not all there (or was closed): its own flush then syncs it."""
        with self._io_lock:
            if self.closed or self.maps is None:
                return False
            try:
                if os.stat(self.path).st_dev != device or any(
                    os.stat(folder).st_dev != device for folder in self._unsynced_dirs
                ):
                    return False
            except OSError:
                return False
            self._unsynced_dirs = ()
            self.flushed = max(self.flushed, target)
        return True

    def _sync_lazy(self, synced: SyncedDirs | None) -> None:
        """fdatasync a lazily mapped segment through a descriptor of its own (the dirty pages
        are the file's, whoever wrote them; the loop may close its descriptor meanwhile), then
        the new names it was created with, unless this pass synced their folder since
        (`SyncedDirs`). Runs under `_io_lock`, in a worker thread."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        for folder in self._unsynced_dirs:
            if synced is not None and synced.get(folder, -1) > self._made:
                continue
            started = next(_SEQUENCE)
            fsync_dir(folder)
            if synced is not None:
                synced[folder] = started
        self._unsynced_dirs = ()

    @staticmethod
    def _enough_pages(pending: int, least_pages: int, *, full: bool) -> bool:
        if full or least_pages <= 0:
            return pending > 0
        return pending // PAGE_SIZE >= least_pages

    # --- reading ----------------------------------------------------------------------------

    def select(self, position: int, size: int | None = None) -> memoryview | None:
        """A view of readable bytes from `position` (to the read position if `size` is None)."""
        limit = self.read_position
        if position < 0 or position >= limit:
            return None
        end = limit if size is None else position + size
        if end > limit:
            return None
        # Always the map: committed bytes are in the file, and a write buffer gets reused.
        return self.view[position:end]

    def data_extents(self, start: int) -> list[tuple[int, int]]:
        """The ranges of [start, size) that may hold data: the file system's holes (never
        written: zeros) left out, as SEEK_DATA / SEEK_HOLE tell them (the whole range where the
        file system cannot). Lets a check of a sparse file past its data read none of it."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            extents: list[tuple[int, int]] = []
            position = start
            while position < self.size:
                try:
                    data = os.lseek(fd, position, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:
                        break  # nothing but a hole from `position` on
                    return [(start, self.size)]
                if data >= self.size:
                    break
                hole = min(os.lseek(fd, data, os.SEEK_HOLE), self.size)
                extents.append((data, hole))
                position = hole
            return extents
        finally:
            os.close(fd)

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        if self._gathered and not self.closed:
            self.write_gathered()
        with self._io_lock:
            if self.closed:
                return
            self.closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        if self.maps is not None:
            self.maps.forget(self)
            self.release_map()
            return
        assert self._view is not None and self._map is not None
        self._view.release()
        try:
            self._map.close()
        except BufferError:
            # A reader still holds a view; the mapping goes away when the last view does.
            log.debug("segment %s still has readers; its map is released later", self.path.name)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"Segment({self.path.name}, wrote={self.wrote}, flushed={self.flushed})"
