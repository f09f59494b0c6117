"""An offline check that a store's ConsumeQueues agree with its CommitLog (the kill-9 soak runs it
on the master's and the slave's store after every round).

`check_consume_queues(store_dir)` reads the files only (no MessageStore, nothing written; a
broker may keep running on the store, its writes are to the same page cache) and returns a
`QueueCheck` whose `problems` name each disagreement:

- each queue `consumequeue/<topic>/<queueId>/` is its 20-byte units `[8 physical offset][4 size]
  [8 tagsCode]` (store/consume_queue.py) read across its files in name order (a file's name is
  its first unit's byte offset; the files must follow each other without a gap). Blank units
  `(0, 0x7FFFFFFF, 0)` may only lead (what retention cut away); an all-zero unit ends the queue,
  and only zeros may follow it: queue offsets are contiguous;
- every unit points at a record of the CommitLog, decoded by the store's codec
  (`store.record.decode_record`, body CRC checked) at exactly that physical offset, of the
  unit's size, topic and queue id, whose QUEUEOFFSET is the unit's index, and whose TAGS give
  the unit's tagsCode (`store.tags.tags_code_for`; the delay topic's tagsCode is a delivery time
  and is not compared; the timer topic's is its TIMER_OUT_MS);
- walking the CommitLog (`store.record.scan_record`, as the store's dispatch does) from its
  first file to its end, every record that a ConsumeQueue must index (not a prepared or
  rolled-back transaction half) has its unit, except at the tail of its queue: records not
  dispatched yet are counted in `undispatched`, never a problem.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tidemq.store.config import CQ_UNIT_SIZE
from tidemq.store.consume_queue import BLANK_UNIT, iter_units
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.layout import (
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.record import PROPERTY_TAGS, RecordFormatError, decode_record, scan_record
from tidemq.store.segment import name_to_offset
from tidemq.store.tags import tags_code_for
from tidemq.store.timer_message import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_OUT_MS,
    TIMER_TOPIC,
    timer_tags_code,
)

ZERO_UNIT = bytes(CQ_UNIT_SIZE)
NOT_INDEXED = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
MAX_PROBLEMS = 20  # a broken store would name every unit: the first ones tell the story


@dataclass
class QueueCheck:
    queues: int = 0
    units: int = 0
    records: int = 0
    undispatched: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def line(self) -> str:
        return (
            f"{self.queues} queues, {self.units} units, {self.records} records, "
            f"{self.undispatched} not dispatched yet, {len(self.problems)} problems"
        )


def segments(folder: Path) -> list[tuple[int, Path]]:
    """(first offset, path) of a folder's segment files, in order."""
    found = []
    for path in folder.iterdir() if folder.is_dir() else ():
        offset = name_to_offset(path.name)
        if offset is not None:
            found.append((offset, path))
    return sorted(found)


class CommitLogFiles:
    """The CommitLog's segment files mapped read-only; `at(offset)` finds the one holding it."""

    def __init__(self, folder: Path, stack: ExitStack) -> None:
        self.maps: list[tuple[int, mmap.mmap]] = []
        for base, path in segments(folder):
            if path.stat().st_size == 0:
                continue
            with path.open("rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            stack.callback(mapped.close)
            self.maps.append((base, mapped))

    def at(self, offset: int) -> tuple[int, mmap.mmap] | None:
        for base, mapped in self.maps:
            if base <= offset < base + len(mapped):
                return base, mapped
        return None


def queue_units(folder: Path, check: QueueCheck, where: str) -> list[tuple[int, int, int]]:
    """The queue's units from the first non-blank one to its end, indexed from queue offset 0
    (blank units stand in for what retention removed); problems go to `check`."""
    units: list[tuple[int, int, int]] = []
    ended_at: int | None = None
    expected_start = 0
    for start, path in segments(folder):
        if start % CQ_UNIT_SIZE or (units and start != expected_start):
            check.problem(f"{where}: file {path.name} does not follow the one before")
            return units
        if not units:
            units = [(0, 0x7FFFFFFF, 0)] * (start // CQ_UNIT_SIZE)
        data = path.read_bytes()
        expected_start = start + len(data) - len(data) % CQ_UNIT_SIZE
        for i in range(len(data) // CQ_UNIT_SIZE):
            raw = data[i * CQ_UNIT_SIZE : (i + 1) * CQ_UNIT_SIZE]
            index = start // CQ_UNIT_SIZE + i
            if raw == ZERO_UNIT:
                ended_at = index if ended_at is None else ended_at
                continue
            if ended_at is not None:
                check.problem(f"{where}: unit {index} after the queue ended at {ended_at}")
                return units
            if raw == BLANK_UNIT and any(u[1] != 0x7FFFFFFF for u in units):
                check.problem(f"{where}: a blank unit at {index} after real ones")
                return units
            units.append(next(iter_units(raw)))
    return units


def _check_unit(
    files: CommitLogFiles,
    topic: str,
    queue_id: int,
    index: int,
    unit: tuple[int, int, int],
    check: QueueCheck,
) -> None:
    phy, size, tags_code = unit
    where = f"{topic}/{queue_id} offset {index} (physical {phy})"
    found = files.at(phy)
    if found is None:
        check.problem(f"{where}: no CommitLog file holds it")
        return
    base, mapped = found
    try:
        record = decode_record(mapped, phy - base)
    except RecordFormatError as exc:
        check.problem(f"{where}: not a record: {exc}")
        return
    wrong = []
    if record.total_size != size:
        wrong.append(f"size {record.total_size} != unit's {size}")
    if record.physical_offset != phy:
        wrong.append(f"its PHYSICALOFFSET is {record.physical_offset}")
    if record.topic != topic or record.queue_id != queue_id:
        wrong.append(f"it belongs to {record.topic}/{record.queue_id}")
    if record.queue_offset != index:
        wrong.append(f"its QUEUEOFFSET is {record.queue_offset}")
    tags = record.properties.get(PROPERTY_TAGS)
    expected = tags_code_for(tags.encode() if tags else None)
    if topic == TIMER_TOPIC:  # a timer's tagsCode is its delivery time, TIMER_OUT_MS
        out = record.properties.get(PROPERTY_TIMER_OUT_MS, "")
        if out.isdigit():  # a recall's tombstone's: minus it
            tombstone = PROPERTY_TIMER_DEL_UNIQKEY in record.properties
            expected = timer_tags_code(int(out), tombstone)
    if topic != SCHEDULE_TOPIC and tags_code != expected:
        wrong.append(f"tagsCode {tags_code} != {expected} of its tags {tags!r}")
    if wrong:
        check.problem(f"{where}: {'; '.join(wrong)}")


def walk_commitlog(files: CommitLogFiles) -> Iterator[tuple[str, int, int, int]]:
    """(topic, queue id, queue offset, physical offset) of every record a ConsumeQueue indexes,
    in CommitLog order, until the first byte that is not a record (the end)."""
    for base, mapped in files.maps:
        pos = 0
        while pos < len(mapped):
            info = scan_record(mapped, pos, check_crc=False)
            if info.size == 0:  # the end-of-file blank: the next file goes on
                break
            if info.size < 0:  # the end of what was written (zeros, or a slave's half record)
                return
            if info.sys_flag & TRANSACTION_MASK not in NOT_INDEXED:
                yield info.topic, info.queue_id, info.queue_offset, base + pos
            pos += info.size


def check_consume_queues(store_dir: Path) -> QueueCheck:
    check = QueueCheck()
    with ExitStack() as stack:
        files = CommitLogFiles(store_dir / "commitlog", stack)
        queues: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        root = store_dir / "consumequeue"
        for topic_dir in sorted(root.iterdir()) if root.is_dir() else ():
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    continue
                where = f"{topic_dir.name}/{queue_dir.name}"
                units = queue_units(queue_dir, check, where)
                queues[(topic_dir.name, int(queue_dir.name))] = units
                check.queues += 1
                for index, unit in enumerate(units):
                    if unit[1] != 0x7FFFFFFF:
                        check.units += 1
                        _check_unit(files, topic_dir.name, int(queue_dir.name), index, unit, check)
        for topic, queue_id, queue_offset, phy in walk_commitlog(files):
            check.records += 1
            units = queues.get((topic, queue_id), [])
            if queue_offset >= len(units):
                check.undispatched += 1
            elif units[queue_offset][1] != 0x7FFFFFFF and units[queue_offset][0] != phy:
                check.problem(
                    f"{topic}/{queue_id} offset {queue_offset}: the record at {phy} has no unit "
                    f"(the unit points at {units[queue_offset][0]})"
                )
    return check
