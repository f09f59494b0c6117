"""Every ConsumeQueue's state at a clean stop, so that the next start looks at none of their files.

File `<storePathRootDir>/consumequeue.summary`, written (synced) by a clean stop just before the
abort file is removed, read and removed by the next load. Only a normal load (no abort file:
the stop that wrote it was the last thing the store did) uses it, and only while the CommitLog
ends and starts where it says. Such a load builds every queue the summary lists from it alone
(store/lazy_check.py): no folder listed, no file opened or stat'ed. A queue whose files are the
ones listed is exactly as that stop left it, every unit synced by the stop's last ConsumeQueue
flush, and needs neither the check nor the cut that recovery does (its units all point below
the CommitLog's end). The summary is a cache: losing it costs a slower start only (every
folder listed, every queue checked: ConsumeQueue.check_recovery). The stop lists every queue
the store knows, also those without a file; a folder the store did not make (copied in while
it was stopped) is not looked at after such a load.

Files changed after the stop (a file overwritten, restored from a backup, added, damaged by
hand) are not trusted: the summary holds the newest inode change time (st_ctime_ns) of each
queue's files, and before a queue's files are first used their names, sizes and newest change
time are compared with it; a queue that differs is recovered then (store/lazy_check.py). A
write sets the change time from the kernel's coarse clock, so the stop waits until that clock
has passed the newest time it recorded (at most one tick, a few ms): a later write cannot carry
the same time. A queue not used since the load is written back as the summary gave it, unstat'ed.

Format, big-endian:

    header: magic b"TMQCQS01", CommitLog min offset (q), CommitLog end (q), queue count (i)
    per queue: topic length (H), topic (UTF-8), queue id (i), first file's start (q),
               file count (i), end of the written units (q), min logic offset (q),
               max physical offset (q) [byte offsets, as ConsumeQueue keeps them],
               newest st_ctime_ns of its files (q)
    trailer: CRC32 of everything before it (I)
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidemq.common.files import write_file_safely
from tidemq.store.consume_queue import ConsumeQueue, QueueState

log = logging.getLogger(__name__)

SUMMARY_FILE = "consumequeue.summary"
_CLOCK_REALTIME_COARSE = 5  # Linux's clock id; Python 3.11 does not name it
MAGIC = b"TMQCQS01"
_HEADER = struct.Struct(">8sqqi")
_TOPIC_LENGTH = struct.Struct(">H")
_QUEUE = struct.Struct(">iqiqqqq")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class QueueSummary:
    commitlog_min: int
    commitlog_end: int
    queues: Mapping[tuple[str, int], QueueState]

    def matches(self, commitlog_min: int, commitlog_end: int) -> bool:
        return commitlog_min == self.commitlog_min and commitlog_end == self.commitlog_end


def state_of(queue: ConsumeQueue) -> QueueState:
    if queue.unchecked is not None:
        return queue.unchecked  # never used since the load took it from here: no stat
    segments = queue.segments
    return QueueState(
        segments.min_offset,
        len(segments),
        segments.max_wrote_offset,
        queue.min_logic_offset,
        queue.max_physical_offset,
        segments.newest_change_ns(),
    )


def encode(
    commitlog_min: int, commitlog_end: int, queues: Iterable[tuple[tuple[str, int], QueueState]]
) -> bytes:
    parts: list[bytes] = []
    count = 0
    for (topic, queue_id), state in queues:
        name = topic.encode()
        parts.append(_TOPIC_LENGTH.pack(len(name)))
        parts.append(name)
        parts.append(
            _QUEUE.pack(
                queue_id,
                state.first_file,
                state.file_count,
                state.wrote_end,
                state.min_logic_offset,
                state.max_physical_offset,
                state.newest_change_ns,
            )
        )
        count += 1
    body = _HEADER.pack(MAGIC, commitlog_min, commitlog_end, count) + b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode(data: bytes) -> QueueSummary:
    """The summary in `data`; ValueError when it is not one (damaged, cut short, other)."""
    if len(data) < _HEADER.size + _CRC.size:
        raise ValueError("too short")
    body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch")
    magic, commitlog_min, commitlog_end, count = _HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise ValueError(f"unknown magic {magic!r}")
    position = _HEADER.size
    queues: dict[tuple[str, int], QueueState] = {}
    try:
        for _ in range(count):
            (length,) = _TOPIC_LENGTH.unpack_from(body, position)
            position += _TOPIC_LENGTH.size
            topic = body[position : position + length].decode()
            position += length
            queue_id, *fields = _QUEUE.unpack_from(body, position)
            position += _QUEUE.size
            queues[(topic, queue_id)] = QueueState(*fields)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"bad entry: {exc}") from None
    if position != len(body):
        raise ValueError(f"{len(body) - position} bytes past the last entry")
    return QueueSummary(commitlog_min, commitlog_end, queues)


def write_summary(
    root: Path,
    commitlog_min: int,
    commitlog_end: int,
    consume_queues: Mapping[tuple[str, int], ConsumeQueue],
) -> None:
    """Write the summary of a store stopped cleanly (synced: the abort file goes next)."""
    states = [(key, state_of(queue)) for key, queue in consume_queues.items()]
    newest = max((state.newest_change_ns for _key, state in states), default=0)
    data = encode(commitlog_min, commitlog_end, states)
    write_file_safely(root / SUMMARY_FILE, data, keep_backup=False)
    _wait_clock_past(newest)


def _wait_clock_past(change_ns: int) -> None:
    """Return once the coarse clock that stamps inode changes is past `change_ns` (module
    docstring); a tick at most, usually nothing (the summary write took longer)."""
    clock = getattr(time, "CLOCK_REALTIME_COARSE", _CLOCK_REALTIME_COARSE)
    deadline = time.monotonic() + 1.0
    while time.clock_gettime_ns(clock) <= change_ns and time.monotonic() < deadline:
        time.sleep(0.001)


def take_summary(root: Path) -> QueueSummary | None:
    """Read and remove the summary (None without one, or when unreadable: logged)."""
    path = root / SUMMARY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    path.unlink()
    try:
        return decode(data)
    except ValueError as exc:
        log.warning("%s unreadable (%s): every ConsumeQueue is checked", path, exc)
        return None


def known_state(queue: ConsumeQueue, state: QueueState | None) -> bool:
    """Whether `queue`'s files on disk are the ones `state` lists."""
    if state is None:
        return False
    segments = queue.segments
    return (
        segments.loaded_change_ns == state.newest_change_ns
        and len(segments) == state.file_count
        and segments.min_offset == state.first_file
        and (
            segments.min_offset
            <= state.wrote_end
            <= segments.min_offset + segments.segment_size * len(segments)
        )
    )
