"""ConsumeQueues: per topic and queue id, the index of that queue's messages in the CommitLog.

Path `consumequeue/<topic>/<queueId>/<20-digit byte offset>`. Each message is one 20-byte unit,
big-endian:

    [8 CommitLog physical offset][4 record size][8 tagsCode]

Unit `i` sits at byte `20 * i`, so a queue offset is a unit index. tagsCode is Java's
`String.hashCode()` of the TAGS property (0 without tags); for delayed messages it is the
delivery time. A queue whose first file starts at a non-zero index pads that file's head with
blank units `(0, 2147483647, 0)`. Units are written by copies into the map (they are tiny; a
system call each would cost more than the copy), or, for files mapped on demand under a bound
(`maps`, the broker's case), by pwrite: there a new queue's first unit always falls on a page
the map never wrote, and the write fault costs more than the call (store/segment.py).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidemq.common.files import path_inside
from tidemq.store.config import CQ_UNIT_SIZE, AppendMode
from tidemq.store.map_budget import MapBudget
from tidemq.store.segment import SyncedDirs
from tidemq.store.segment_queue import SegmentQueue

log = logging.getLogger(__name__)

_UNIT = struct.Struct(">qiq")
assert _UNIT.size == CQ_UNIT_SIZE
_BLANK_SIZE = 0x7FFFFFFF
BLANK_UNIT = _UNIT.pack(0, _BLANK_SIZE, 0)

# ConsumeQueue recovery cross-checks these units against the CommitLog (see `recover`): every
# SAMPLE_EVERY-th queue offset and the queue's last SAMPLE_TAIL units (and each file's first and
# last unit).
SAMPLE_EVERY = 1024
SAMPLE_TAIL = 256

pack_unit = _UNIT.pack  # (phy, size, tagsCode) -> the 20 bytes of a unit
iter_units = _UNIT.iter_unpack  # (phy, size, tagsCode) per unit of a raw_units() view

# Checks a unit against the CommitLog during recovery: (phy offset, size, queue offset) -> ok.
UnitChecker = Callable[[int, int, int], bool]


@dataclass(frozen=True, slots=True)
class QueueCut:
    """What recovery does to one ConsumeQueue (`ConsumeQueue.check_recovery`)."""

    cut_at: int  # byte offset: units from here on are removed (-1: the queue has no file)
    min_logic_offset: int  # the queue's minimum afterwards, in bytes
    max_physical_offset: int  # end of the last kept unit's record afterwards, -1 if none
    damaged_at: int  # byte offset of the first invalid unit, -1 if none failed
    clean: bool  # nothing non-zero lay past the valid prefix: no unit to rebuild
    # From a clean stop's summary (store/queue_summary.py): cut_at is where the units end and
    # nothing lies past it, so the cut only sets positions and maps no file.
    known: bool = False


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue as a clean stop left it (store/queue_summary.py)."""

    first_file: int  # start offset of the first file (bytes)
    file_count: int
    wrote_end: int  # end of the written units (bytes)
    min_logic_offset: int
    max_physical_offset: int
    newest_change_ns: int  # the newest st_ctime_ns of the queue's files


@dataclass(frozen=True, slots=True)
class CQUnit:
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int


class ConsumeQueue:
    def __init__(
        self,
        root: Path,
        topic: str,
        queue_id: int,
        file_size: int,
        maps: MapBudget | None = None,
        *,
        listed: bool = False,
    ) -> None:
        """`maps`: the files are mapped on demand under this bound (store/map_budget.py).
        `listed`: `topic` is a folder name listed under `root` (no check that the path stays
        inside it: a listed name has no separator and is neither . nor ..)."""
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        folder = root / topic / str(queue_id) if listed else path_inside(root, topic, str(queue_id))
        self.segments = SegmentQueue(
            folder,
            file_size,
            # On demand, appends are pwrites (store/segment.py says why).
            append_mode=AppendMode.mmap if maps is None else AppendMode.pwrite,
            maps=maps,
        )
        # End (offset + size) of the last CommitLog record indexed here.
        self.max_physical_offset = -1
        self.min_logic_offset = 0  # bytes
        # Taken from a clean stop's summary (`unchecked`: its state there) without a look at
        # its files: `check_first` checks them before their first use (store/lazy_check.py).
        self.unchecked: QueueState | None = None
        self.check_first: Callable[[ConsumeQueue, QueueState], None] | None = None
        # The store's queues with units not yet flushed (store/flushing.py): a unit put here
        # adds this queue, so that a flush pass looks at the queues written since, not at all.
        self.dirty: set[ConsumeQueue] | None = None

    def checked(self) -> None:
        """Check the files of a queue taken from the summary before they are first used (a
        no-op otherwise). Called first by everything that reads or writes the files."""
        check, state = self.check_first, self.unchecked
        if check is not None and state is not None:
            self.check_first = self.unchecked = None
            check(self, state)

    # --- offsets ----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        return self.segments.max_wrote_offset // CQ_UNIT_SIZE

    # --- writing ----------------------------------------------------------------------------

    def put(self, physical_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Append the unit for queue offset `queue_offset`; repeats are ignored (re-dispatch)."""
        self.checked()
        if physical_offset + size <= self.max_physical_offset:
            return True  # built already, e.g. reput restarted from an earlier point
        expected = queue_offset * CQ_UNIT_SIZE
        current = self.segments.max_wrote_offset
        if not self.segments.segments:
            self._start_at(expected)
            current = expected
        if expected < current:
            log.warning(
                "ConsumeQueue %s-%d: unit %d already present, ignored",
                self.topic,
                self.queue_id,
                queue_offset,
            )
            return True
        if expected > current:
            log.error(
                "ConsumeQueue %s-%d: gap from unit %d to %d, padded with blank units",
                self.topic,
                self.queue_id,
                current // CQ_UNIT_SIZE,
                queue_offset,
            )
            while current < expected:
                self._append(BLANK_UNIT)
                current += CQ_UNIT_SIZE
        self._append(_UNIT.pack(physical_offset, size, tags_code))
        self.max_physical_offset = physical_offset + size
        if self.dirty is not None:
            self.dirty.add(self)
        return True

    def can_append_at(self, queue_offset: int) -> bool:
        """True when `queue_offset` is exactly the next unit of a queue that has a file."""
        return bool(self.segments.segments) and (
            queue_offset * CQ_UNIT_SIZE == self.segments.max_wrote_offset
        )

    def put_units(self, units: bytes, end_physical_offset: int) -> None:
        """Append encoded units (`pack_unit`) that follow on: `can_append_at` held for the first.

        The batch form of `put` for dispatch, split at file boundaries.
        """
        self.checked()
        view = memoryview(units)
        while view:
            segment = self.segments.last_for_append()
            take = min(len(view), segment.size - segment.wrote)
            segment.append(view[:take])
            view = view[take:]
        self.max_physical_offset = end_physical_offset
        if self.dirty is not None:
            self.dirty.add(self)

    def _append(self, unit: bytes) -> None:
        self.segments.last_for_append().append(unit)

    def _start_at(self, byte_offset: int) -> None:
        segment = self.segments.last_for_append(byte_offset)
        pad = byte_offset - segment.start_offset
        if pad:
            segment.append(BLANK_UNIT * (pad // CQ_UNIT_SIZE))
        self.min_logic_offset = byte_offset

    # --- reading ----------------------------------------------------------------------------

    def raw_units(self, queue_offset: int, max_units: int) -> memoryview | None:
        """The bytes of up to `max_units` units from `queue_offset`, never crossing a file.

        None when no file holds the offset. Readers unpack lazily (`iter_units`), so a pull that
        stops after 32 messages does not decode the 800 units it was allowed to scan.
        """
        self.checked()
        byte_offset = queue_offset * CQ_UNIT_SIZE
        if byte_offset < self.min_logic_offset:
            return None
        segment = self.segments.find(byte_offset)
        if segment is None:
            return None
        position = byte_offset - segment.start_offset
        available = (segment.wrote - position) // CQ_UNIT_SIZE
        if available <= 0:
            return None
        count = min(available, max_units)
        return segment.view[position : position + count * CQ_UNIT_SIZE]

    def units(self, queue_offset: int, max_units: int) -> list[CQUnit] | None:
        """Up to `max_units` decoded units from `queue_offset`, never crossing a file."""
        raw = self.raw_units(queue_offset, max_units)
        if raw is None:
            return None
        return [
            CQUnit(queue_offset + i, phy, size, tags)
            for i, (phy, size, tags) in enumerate(iter_units(raw))
        ]

    def unit(self, queue_offset: int) -> CQUnit | None:
        found = self.units(queue_offset, 1)
        return found[0] if found else None

    def roll_next_file(self, queue_offset: int) -> int:
        """First queue offset of the file after the one holding `queue_offset`."""
        units_per_file = self.file_size // CQ_UNIT_SIZE
        return queue_offset + units_per_file - queue_offset % units_per_file

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int]) -> int:
        """RocketMQ's getOffsetInQueueByTime: the first unit stored at or after `timestamp`.

        Binary search over units; `store_time_of(phy, size)` reads a record's store time (-1 if
        the record is gone). Past every message: max offset; before every message: min offset.
        """
        low, high = self.min_offset, self.max_offset - 1
        if high < low:
            return self.min_offset
        answer = -1
        while low <= high:
            mid = (low + high) // 2
            unit = self.unit(mid)
            if unit is None or unit.size == 0x7FFFFFFF:
                low = mid + 1
                continue
            ts = store_time_of(unit.physical_offset, unit.size)
            if ts < 0:
                low = mid + 1
            elif ts >= timestamp:
                answer = mid
                high = mid - 1
            else:
                low = mid + 1
        return answer if answer >= 0 else self.max_offset

    # --- recovery and retention ------------------------------------------------------------

    def load(self) -> None:
        self.segments.load()

    def recover(self, checker: UnitChecker, commitlog_end: int) -> bool:
        """Check, then cut as checked (`check_recovery`, `apply_recovery`); returns `clean`."""
        return self.apply_recovery(self.check_recovery(checker, commitlog_end))

    def check_recovery(
        self, checker: UnitChecker, commitlog_end: int, suspect_from: int | None = None
    ) -> QueueCut:
        """Where this queue's valid prefix ends and where it is cut; reads only.

        Older files are spot-checked against the CommitLog (their first and last unit, through
        `checker`), and the full check starts at the first of them that fails, else at the
        third file from the end. With `suspect_from` (a CommitLog offset: after a machine
        restart, where the checkpoint no longer vouches that units were synced) it starts no
        later than the first file whose last unit's record lies at or past it: a power cut can
        zero an unsynced page in any such file, also in the middle of a file whose first and
        last units survived. From there every unit is checked structurally, at C speed
        (`struct.iter_unpack`): its size is positive, physical offsets grow strictly, and its
        record ends within `commitlog_end`; blank padding units are skipped, and a zero unit
        is the end. A unit whose record lies past `commitlog_end` (the CommitLog lost its
        tail) ends the prefix too.

        `checker` (the CommitLog holds this queue's record of that size and queue offset at
        that physical offset; about 3 us a unit) then runs on samples of the structurally valid
        units only: every `SAMPLE_EVERY`-th queue offset, the first and last unit of each
        file, and the last `SAMPLE_TAIL` units of the queue, where a crash leaves its damage.
        When a sample fails, the units from the previous passing sample on are checked one by
        one and the prefix ends at the first that fails.

        The accepted trade-off: a unit that is structurally valid (its offset between its
        neighbours', a plausible size) but points at the wrong record, lying between two
        samples, is not found. Damage from a crash or a lost page does not look like that: a
        zeroed page ends the prefix, garbage fails the structure, and units shifted by a lost
        or repeated unit fail every later sample. RocketMQ checks nothing against the CommitLog
        here (its recoverConsumeQueue checks the last three files structurally only).

        Anything non-zero left past the valid prefix means units are missing: `clean` is then
        False, so that dispatch rebuilds them from the CommitLog. Within the prefix, the units
        at its end whose records pass `commitlog_end` are cut too (RocketMQ's
        truncateDirtyLogicFiles, `truncate_dirty`), and the minimum skips head padding; the
        result states the queue as `apply_recovery` leaves it.
        """
        segments = self.segments.segments
        if not segments:
            return QueueCut(-1, self.min_logic_offset, -1, -1, True)
        first = segments[0]
        full_from = max(0, len(segments) - 3)
        if suspect_from is not None:
            full_from = self._first_unsynced_file(suspect_from, full_from)
        start_index = self._first_suspect_file(checker, full_from)
        check_from = segments[start_index].start_offset
        valid_end, damaged = self._check_structure(start_index, commitlog_end)
        bad = self._check_samples(checker, check_from, valid_end)
        if bad >= 0:
            valid_end, damaged = bad * CQ_UNIT_SIZE, True
        clean = not self._has_data_after(valid_end)
        # The queue as a cut at valid_end leaves it: units below valid_end, unchanged.
        min_logic = self._head_padding_end(
            max(self.min_logic_offset, first.start_offset), valid_end
        )
        cut, max_physical = self._dirty_cut(
            commitlog_end, min_logic // CQ_UNIT_SIZE, valid_end // CQ_UNIT_SIZE, valid_end
        )
        cut_at = min(valid_end, cut * CQ_UNIT_SIZE)
        if cut_at < first.start_offset:
            min_logic = 0  # no file left (`_truncate_to`)
        return QueueCut(cut_at, min_logic, max_physical, valid_end if damaged else -1, clean)

    def apply_recovery(self, cut: QueueCut) -> bool:
        """Cut the queue as `check_recovery` said; returns `cut.clean`."""
        if cut.damaged_at >= 0:
            log.warning(
                "ConsumeQueue %s-%d: invalid unit at %d; cut there, rebuilt from the CommitLog",
                self.topic,
                self.queue_id,
                cut.damaged_at // CQ_UNIT_SIZE,
            )
        if cut.known:
            self.segments.truncate_after(cut.cut_at)
        elif cut.cut_at >= 0:
            self._truncate_to(cut.cut_at)
        self.min_logic_offset = cut.min_logic_offset
        self.max_physical_offset = cut.max_physical_offset
        return cut.clean

    def _check_structure(self, start_index: int, commitlog_end: int) -> tuple[int, bool]:
        """(byte offset where the structurally valid units from file `start_index` end, and
        whether a unit failed there rather than the data ending or passing `commitlog_end`)."""
        last_phy = -1
        segments = self.segments.segments
        valid_end = segments[start_index].start_offset
        for segment in segments[start_index:]:
            size_bytes = segment.size - segment.size % CQ_UNIT_SIZE
            count = 0
            for phy, size, _tags in iter_units(segment.view[:size_bytes]):
                if phy > last_phy and 0 < size < _BLANK_SIZE and phy + size <= commitlog_end:
                    last_phy = phy
                    count += 1
                    continue
                if size == _BLANK_SIZE and phy == 0:
                    count += 1  # padding
                    continue
                valid_end = segment.start_offset + count * CQ_UNIT_SIZE
                if phy == 0 and size == 0:
                    return valid_end, False  # never written: the end
                if size > 0 and phy > last_phy and phy + size > commitlog_end:
                    return valid_end, False  # the record is past the CommitLog's end
                return valid_end, True
            valid_end = segment.start_offset + count * CQ_UNIT_SIZE
        return valid_end, False

    def _check_samples(self, checker: UnitChecker, start: int, end: int) -> int:
        """Cross-check samples of the units in bytes [start, end) with `checker`.

        Returns the queue offset of the first unit that fails, found unit by unit from the last
        passing sample before the failing one; -1 when every sample passes.
        """
        first, stop = start // CQ_UNIT_SIZE, end // CQ_UNIT_SIZE
        if stop <= first:
            return -1
        samples = set(range(-(-first // SAMPLE_EVERY) * SAMPLE_EVERY, stop, SAMPLE_EVERY))
        samples.update(range(max(first, stop - SAMPLE_TAIL), stop))
        per_file = self.file_size // CQ_UNIT_SIZE
        for file_first in range(first - first % per_file, stop, per_file):
            samples.add(max(file_first, first))
            samples.add(min(file_first + per_file, stop) - 1)
        passed = first - 1
        for sample in sorted(samples):
            if self._unit_ok(checker, sample):
                passed = sample
                continue
            for queue_offset in range(passed + 1, sample + 1):
                if not self._unit_ok(checker, queue_offset):
                    return queue_offset
            return sample  # not reached: the sample itself fails
        return -1

    def _unit_ok(self, checker: UnitChecker, queue_offset: int) -> bool:
        byte_offset = queue_offset * CQ_UNIT_SIZE
        segment = self.segments.find(byte_offset)
        if segment is None:
            return False
        phy, size, _tags = _UNIT.unpack_from(segment.view, byte_offset - segment.start_offset)
        if size == _BLANK_SIZE and phy == 0:
            return True  # padding
        return checker(phy, size, queue_offset)

    def _first_unsynced_file(self, suspect_from: int, full_from: int) -> int:
        """The first file before `full_from` whose last unit's record starts at or past
        `suspect_from`, else `full_from`."""
        for index, segment in enumerate(self.segments.segments[:full_from]):
            phy, _size, _tags = _UNIT.unpack_from(segment.view, segment.size - CQ_UNIT_SIZE)
            if phy >= suspect_from:
                return index
        return full_from

    def _first_suspect_file(self, checker: UnitChecker, full_from: int) -> int:
        """The first file before `full_from` whose first or last unit fails, else `full_from`."""
        last_phy = -1
        for index, segment in enumerate(self.segments.segments[:full_from]):
            view = segment.view
            position = 0
            while view[position : position + CQ_UNIT_SIZE] == BLANK_UNIT:
                position += CQ_UNIT_SIZE  # head padding
            for at in sorted({position, segment.size - CQ_UNIT_SIZE}):
                if at >= segment.size:
                    return index
                phy, size, _tags = _UNIT.unpack_from(view, at)
                if size == 0x7FFFFFFF and phy == 0:
                    continue  # padding for a gap
                queue_offset = (segment.start_offset + at) // CQ_UNIT_SIZE
                if phy < 0 or size <= 0 or phy <= last_phy or not checker(phy, size, queue_offset):
                    log.warning(
                        "ConsumeQueue %s-%d: file %s fails its spot check at unit %d",
                        self.topic,
                        self.queue_id,
                        segment.path.name,
                        queue_offset,
                    )
                    return index
                last_phy = phy
        return full_from

    def _has_data_after(self, byte_offset: int) -> bool:
        """Whether any byte at or past `byte_offset` is non-zero. Only the file system's data
        extents are read: a sparse file's never-written tail is a hole, not mapped or read."""
        for segment in self.segments.segments:
            if segment.end_offset <= byte_offset:
                continue
            start = max(0, byte_offset - segment.start_offset)
            for low, high in segment.data_extents(start):
                rest = segment.view[low:high].tobytes()
                if rest.count(0) != len(rest):
                    return True
        return False

    def _head_padding_end(self, min_logic: int, limit: int) -> int:
        """`min_logic` moved past the blank units that pad the first file's head, below `limit`."""
        first = self.segments.first
        if first is None:
            return min_logic
        # A cut at `limit` inside the first file leaves it written up to `limit`.
        stop = first.wrote if first.end_offset <= limit else limit - first.start_offset
        position = min_logic - first.start_offset
        while position + CQ_UNIT_SIZE <= stop:
            if first.view[position : position + CQ_UNIT_SIZE] != BLANK_UNIT:
                break
            position += CQ_UNIT_SIZE
        return first.start_offset + position

    def _truncate_to(self, byte_offset: int) -> None:
        for segment in self.segments.segments:
            if segment.start_offset <= byte_offset < segment.end_offset:
                # Only the data extents: zeroing a sparse file's hole through the map would
                # read and allocate its whole tail (6 MB a file) for nothing.
                start = byte_offset - segment.start_offset
                for low, high in segment.data_extents(start):
                    segment.view[low:high] = bytes(high - low)
        self.segments.truncate_after(byte_offset)
        if not self.segments.segments:
            self.min_logic_offset = 0

    def truncate_dirty(self, commitlog_end: int) -> None:
        """Remove units pointing at or past the CommitLog's end (truncateDirtyLogicFiles)."""
        self.checked()
        max_offset = self.max_offset
        cut, self.max_physical_offset = self._dirty_cut(
            commitlog_end, self.min_offset, max_offset, self.segments.max_wrote_offset
        )
        if cut < max_offset:
            self._truncate_to(cut * CQ_UNIT_SIZE)

    def _dirty_cut(self, commitlog_end: int, first: int, stop: int, limit: int) -> tuple[int, int]:
        """(The queue offset from which units in [first, stop) point past `commitlog_end`, the
        end of the last unit's record below it or -1), reading units below byte `limit`."""
        cut = stop
        for queue_offset in range(stop - 1, first - 1, -1):
            byte_offset = queue_offset * CQ_UNIT_SIZE
            segment = self.segments.find(byte_offset)
            if segment is None or byte_offset >= limit:
                break
            position = byte_offset - segment.start_offset
            if position + CQ_UNIT_SIZE > segment.wrote:
                break
            phy, size, _tags = _UNIT.unpack_from(segment.view, position)
            if phy + size <= commitlog_end:
                return cut, phy + size
            cut = queue_offset
        return cut, -1

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move the minimum to the first unit whose record still exists in the CommitLog."""
        self.checked()
        # The old minimum may lie in a file that retention has just deleted.
        offset = max(self.min_offset, self.segments.min_offset // CQ_UNIT_SIZE)
        while offset < self.max_offset:
            unit = self.unit(offset)
            if unit is None or (unit.size != 0x7FFFFFFF and unit.physical_offset >= commitlog_min):
                break
            offset += 1
        self.min_logic_offset = offset * CQ_UNIT_SIZE

    def delete_expired(self, commitlog_min: int) -> int:
        """Delete whole files (but the last) whose last unit points below the CommitLog minimum."""
        self.checked()
        count = 0
        for segment in self.segments.segments[:-1]:
            last = segment.size - CQ_UNIT_SIZE
            phy, _size, _tags = _UNIT.unpack_from(segment.view, last)
            if phy >= commitlog_min:
                break
            count += 1
        if count:
            self.segments.delete_head(count)
        self.correct_min_offset(commitlog_min)
        return count

    def flush(self, least_pages: int, synced: SyncedDirs | None = None) -> bool:
        return self.segments.flush(least_pages, synced)

    @property
    def unflushed(self) -> bool:
        """Some unit is written but not flushed yet."""
        return any(s.flushed < s.committed for s in self.segments if not s.closed)

    def close(self) -> None:
        self.segments.close()

    def destroy(self) -> None:
        self.segments.destroy()
