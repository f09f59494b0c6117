"""An ordered run of same-size segment files forming one log (RocketMQ's MappedFileQueue).

Offsets are log offsets: segment `k` holds `[start_k, start_k + size)`, and its file name is
`start_k` as 20 digits. The queue finds the segment holding an offset, creates the next one when
the last is full, truncates after a recovery point and deletes expired files from the head.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tidemq.common.files import make_dirs
from tidemq.store.config import AppendMode
from tidemq.store.errors import CorruptStoreError
from tidemq.store.map_budget import MapBudget
from tidemq.store.segment import (
    TMP_SUFFIX,
    Segment,
    SyncedDirs,
    name_to_offset,
    offset_to_name,
)

log = logging.getLogger(__name__)

BufferSource = Callable[[], bytearray | None]


class SegmentQueue:
    def __init__(
        self,
        directory: Path,
        segment_size: int,
        *,
        append_mode: AppendMode = AppendMode.pwrite,
        write_buffers: BufferSource | None = None,
        maps: MapBudget | None = None,
    ) -> None:
        self.directory = directory
        self.maps = maps  # lazily mapped segments under this budget (store/map_budget.py)
        self.segment_size = segment_size
        self.append_mode = append_mode
        self._write_buffers = write_buffers
        self.segments: list[Segment] = []
        # Lazily mapped: the newest inode change time (st_ctime_ns) of the files at load.
        self.loaded_change_ns = 0

    # --- loading ----------------------------------------------------------------------------

    def load(self) -> None:
        """Open every segment file; a file of the wrong size or name stops the load.

        Lazily mapped segments are only listed and their sizes checked, not opened
        (`_check_lazy_size`).
        """
        # scandir: the file type comes with the listing (no stat per name; a store start lists
        # every queue's folder).
        try:
            listing = os.scandir(self.directory)
        except FileNotFoundError:
            make_dirs(self.directory)
            listing = os.scandir(self.directory)
        with listing:
            names = sorted(entry.name for entry in listing if entry.is_file())
        for name in names:
            path = self.directory / name
            if name_to_offset(path.name) is None:
                if path.name.endswith((".torn", ".diverged")):
                    continue  # tails kept aside by recovery, and by a diverged slave's resync
                if path.name.endswith(TMP_SUFFIX) and name_to_offset(path.stem) is not None:
                    log.warning("removing %s: a segment creation cut short by a crash", path)
                    path.unlink()
                    continue
                raise CorruptStoreError(f"unexpected file {path} in segment folder")
            if self.maps is not None:
                self.loaded_change_ns = max(self.loaded_change_ns, self._check_lazy_size(path))
            segment = Segment(path, self.segment_size, append_mode=self.append_mode, maps=self.maps)
            # Loaded segments count as fully written until recovery says otherwise.
            segment.set_positions(self.segment_size)
            self.segments.append(segment)
        for prev, nxt in zip(self.segments, self.segments[1:], strict=False):
            if nxt.start_offset != prev.start_offset + self.segment_size:
                raise CorruptStoreError(
                    f"segment {nxt.path} does not follow {prev.path.name}: a file is missing"
                )

    def assume(self, first_file: int, file_count: int, newest_change_ns: int) -> None:
        """Take the files as a clean stop's summary lists them, without looking at the disk
        (lazily mapped segments open nothing until used; store/lazy_check.py checks the files
        before then). Like `load`, the segments count as fully written until recovery sets
        their positions."""
        if self.maps is None:
            raise ValueError("only lazily mapped segments are taken from a summary")
        self.segments = []
        for index in range(file_count):
            path = self.directory / offset_to_name(first_file + index * self.segment_size)
            segment = Segment(path, self.segment_size, append_mode=self.append_mode, maps=self.maps)
            segment.set_positions(self.segment_size)
            self.segments.append(segment)
        self.loaded_change_ns = newest_change_ns

    def _check_lazy_size(self, path: Path) -> int:
        """Check the size of a lazily mapped file; returns its inode change time.

        Empty is the one wrong size accepted: a file created sparse whose size a power cut
        took before its first flush synced it (nothing in it was ever synced; recovery rebuilds
        its units from the CommitLog). Any other size stops the load, as for every segment.
        """
        status = path.stat()
        actual = status.st_size
        if actual == 0:
            log.warning(
                "segment file %s is empty: created unsynced before a power cut; extended to "
                "%d bytes of zeros (recovery rebuilds its units)",
                path,
                self.segment_size,
            )
            os.truncate(path, self.segment_size)
            return path.stat().st_ctime_ns
        if actual != self.segment_size:
            raise CorruptStoreError(
                f"segment file {path} has {actual} bytes, expected {self.segment_size}; "
                "fix or move the file aside (or the configured file size) and start again"
            )
        return status.st_ctime_ns

    def newest_change_ns(self) -> int:
        """The newest inode change time (st_ctime_ns) of the files, 0 without files."""
        return max((segment.path.stat().st_ctime_ns for segment in self.segments), default=0)

    # --- lookup -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    def __len__(self) -> int:
        return len(self.segments)

    @property
    def first(self) -> Segment | None:
        return self.segments[0] if self.segments else None

    @property
    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    @property
    def min_offset(self) -> int:
        return self.segments[0].start_offset if self.segments else 0

    @property
    def max_offset(self) -> int:
        """End of what readers may see (the committed position of the last segment)."""
        last = self.last
        return last.start_offset + last.read_position if last else 0

    @property
    def max_wrote_offset(self) -> int:
        last = self.last
        return last.start_offset + last.wrote if last else 0

    @property
    def flushed_where(self) -> int:
        for segment in self.segments:
            if segment.flushed < self.segment_size:
                return segment.start_offset + segment.flushed
        return self.segments[-1].end_offset if self.segments else 0

    def find(self, offset: int, *, return_first_on_not_found: bool = False) -> Segment | None:
        """The segment holding `offset` (by arithmetic: all segments have the same size)."""
        if not self.segments:
            return None
        index = (offset - self.segments[0].start_offset) // self.segment_size
        if 0 <= index < len(self.segments):
            return self.segments[index]
        return self.segments[0] if return_first_on_not_found else None

    # --- growing ----------------------------------------------------------------------------

    def last_for_append(self, start_offset: int = 0) -> Segment:
        """The segment to append to, creating it (at `start_offset`'s file) when needed."""
        last = self.last
        if last is not None and not last.is_full:
            return last
        if last is None:
            create_at = start_offset - start_offset % self.segment_size
        else:
            create_at = last.start_offset + self.segment_size
        return self._create(create_at)

    def file_needed(self, start_offset: int = 0) -> Path | None:
        """The file `last_for_append(start_offset)` would create now; None when the last file
        has room."""
        last = self.last
        if last is not None and not last.is_full:
            return None
        if last is None:
            start = start_offset - start_offset % self.segment_size
        else:
            start = last.start_offset + self.segment_size
        return self.directory / offset_to_name(start)

    def _create(self, start: int) -> Segment:
        if self.maps is not None:
            # Sparse, its folders synced at its first flush, off the event loop (segment.py);
            # made in a worker thread already when dispatch asked for it (`file_needed`).
            path = self.directory / offset_to_name(start)
            segment = Segment(
                path,
                self.segment_size,
                append_mode=self.append_mode,
                create=True,
                maps=self.maps,
                created=self.maps.adopt(path),
            )
            self.segments.append(segment)
            return segment
        make_dirs(self.directory)
        buffer = self._write_buffers() if self._write_buffers else None
        segment = Segment(
            self.directory / offset_to_name(start),
            self.segment_size,
            append_mode=self.append_mode,
            create=True,
            write_buffer=buffer,
        )
        self.segments.append(segment)
        return segment

    def reset_empty_at(self, offset: int) -> None:
        """An empty log that must continue at `offset` (a slave starting from its master's file)."""
        if self.segments:
            raise ValueError("reset_empty_at on a log that has segments")
        segment = self._create(offset - offset % self.segment_size)
        segment.set_positions(offset % self.segment_size)

    # --- durability -------------------------------------------------------------------------

    def commit(self, least_pages: int) -> bool:
        return any([s.commit(least_pages) for s in self.segments if s.committed < s.wrote])

    def flush(self, least_pages: int, synced: SyncedDirs | None = None) -> bool:
        """fdatasync segments with unflushed bytes, oldest first; runs in a worker thread.
        `synced`: the folders this flush pass synced (segment.SyncedDirs)."""
        flushed = False
        for segment in list(self.segments):
            if segment.closed or segment.flushed >= segment.committed:
                continue
            flushed = segment.flush(least_pages, synced) or flushed
        return flushed

    # --- shrinking --------------------------------------------------------------------------

    def truncate_after(self, offset: int) -> None:
        """Drop everything at and after `offset` (RocketMQ's truncateDirtyFiles)."""
        keep: list[Segment] = []
        for segment in self.segments:
            if segment.start_offset + self.segment_size <= offset:
                keep.append(segment)
            elif segment.start_offset <= offset:
                segment.set_positions(offset - segment.start_offset)
                keep.append(segment)
            else:
                log.info("removing segment %s past offset %d", segment.path.name, offset)
                segment.destroy()
        self.segments = keep

    def delete_head(self, count: int) -> list[Segment]:
        """Remove the `count` oldest segments (never the last one)."""
        count = min(count, len(self.segments) - 1)
        removed, self.segments = self.segments[:count], self.segments[count:]
        for segment in removed:
            segment.destroy()
        return removed

    def expired_by_time(self, reserved_ms: int, now_ms: int | None = None) -> int:
        """How many head segments were last modified more than `reserved_ms` ago."""
        now = time.time() * 1000 if now_ms is None else now_ms
        count = 0
        for segment in self.segments[:-1]:
            mtime = segment.path.stat().st_mtime * 1000
            if now - mtime < reserved_ms:
                break
            count += 1
        return count

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def destroy(self) -> None:
        for segment in self.segments:
            segment.destroy()
        self.segments = []
