"""The CommitLog: every message of every topic, appended in RocketMQ's record layout.

Appends assign each message its queue offset (from the per-queue counter `topic-queueId`) and its
physical offset (its position in the whole log) in one synchronous step on the event loop, which
is RocketMQ's put lock. When a record and the 8-byte end-of-file marker do not fit in the current
segment, the rest of the segment becomes a blank (`[4 remaining][4 BLANK_MAGIC]`) and the record
goes to a new segment. A slave appends the master's bytes verbatim with `append_raw`.

Recovery walks records from a safe point, stops at the first record that is torn, garbage or
fails its CRC, copies the bytes past that point into `<segment>.torn` files beside the segment,
zeroes them (so stale records can never be read back after new appends) and truncates there.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tidemq.store.batch_body import BatchDecodeError
from tidemq.store.config import StoreConfig
from tidemq.store.errors import OffsetMismatchError
from tidemq.store.layout import (
    BLANK_MAGIC,
    END_OF_FILE_MIN_BLANK,
    MAGIC_V1,
    OFFSET_QUEUE_OFFSET,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.record import (
    AppendStamp,
    EncodedBatch,
    EncodedRecord,
    MessageBatch,
    MessageToStore,
    RecordTooLargeError,
    encode_batch,
    encode_blank,
    has_zeroed_tail,
    message_id,
    pack_single,
    read_store_timestamp,
    read_total_size_and_magic,
    record_total,
    scan_record,
    stamp_record,
)
from tidemq.store.segment import Segment
from tidemq.store.segment_queue import SegmentQueue

log = logging.getLogger(__name__)

_NO_SPACE = frozenset((errno.ENOSPC, errno.EDQUOT))
NO_SPACE_LOG_INTERVAL = 10.0  # seconds between two log lines about refusals for space
# stamp_record's fields: QUEUEOFFSET and PHYSICALOFFSET, one after the other; STORETIMESTAMP
_QUEUE_AND_PHYSICAL: Final = struct.Struct(">qq")
_TS: Final = struct.Struct(">q")

_ZERO_CHUNK = bytes(1 << 20)


@dataclass(frozen=True, slots=True)
class KeptTail:
    """Bytes [start, end) of the CommitLog file at `segment_offset`, to be copied to `aside`."""

    segment_offset: int
    start: int
    end: int
    aside: Path


class PutStatus(enum.Enum):
    """RocketMQ's PutMessageStatus."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    # tidemq: sendThreadPoolQueueCapacity puts wait for a flush or a slave (RocketMQ refuses
    # at its send queue, BrokerFastFailure's [TOO_MANY_REQUESTS]: SYSTEM_BUSY)
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"
    # RocketMQ 5 controller mode: the SyncStateSet is smaller than minInSyncReplicas
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    # RocketMQ 5 timer messages (store/timer_message.py)
    WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass(slots=True)
class AppendResult:
    """Where a message (or batch) landed; RocketMQ's AppendMessageResult."""

    status: PutStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_id: str = ""
    queue_offset: int = 0
    store_timestamp: int = 0
    msg_num: int = 1
    remark: str = ""
    msg_ids: list[str] = field(default_factory=list)
    # put_encoded's: each record's queue offset (0 for one that takes none), in order
    queue_offsets: list[int] = field(default_factory=list)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


# A module constant: an Enum class attribute goes through EnumType.__getattr__ on Python 3.11.
_PUT_OK: Final = PutStatus.PUT_OK


def _refused(exc: RecordTooLargeError) -> AppendResult:
    status = PutStatus.PROPERTIES_SIZE_EXCEEDED if exc.properties else PutStatus.MESSAGE_ILLEGAL
    return AppendResult(status, remark=str(exc))


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}-{queue_id}"


# A record of these transaction types takes no queue offset (its queue gets no unit).
_NO_QUEUE_OFFSET: Final = frozenset((TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE))


def _takes_queue_offset(sys_flag: int) -> bool:
    return (sys_flag & TRANSACTION_MASK) not in _NO_QUEUE_OFFSET


class CommitLog:
    def __init__(self, config: StoreConfig, segments: SegmentQueue) -> None:
        self.config = config
        self.segments = segments
        self.file_size = config.mapped_file_size_commit_log
        # "topic-queueId" -> the queue offset the next message of that queue gets.
        self.topic_queue_table: dict[str, int] = {}
        self.last_store_timestamp = 0
        # True while the broker handles the requests of one read (`MessageStore.gathering`):
        # appends are gathered and written together by `write_gathered`.
        self.gathering = False
        self._gathered_in: Segment | None = None
        self._no_space_logged = -NO_SPACE_LOG_INTERVAL  # when a refusal for space was logged
        # time.monotonic() of the last write the disk refused (no space here; a slave's append
        # of replicated bytes, ha/slave.py): the broker's health says "disk refused" for a while
        # after it (broker/health.py); -inf when none was.
        self.disk_refused_at = float("-inf")

    # --- appends ----------------------------------------------------------------------------

    def put(self, msg: MessageToStore) -> AppendResult:
        """Append one message. Its place is known before it is packed (the loop appends one
        message at a time), so the record is packed once with its append-time fields."""
        try:
            total = record_total(msg, self.config.max_message_size)
        except RecordTooLargeError as exc:
            return _refused(exc)
        started = self._start_append(total)
        if isinstance(started, AppendResult):
            return started
        segment, store_ts = started
        phy = segment.start_offset + segment.wrote
        # _takes_queue_offset, inline (the host flags are not transaction bits)
        if (msg.sys_flag & TRANSACTION_MASK) not in _NO_QUEUE_OFFSET:
            key = f"{msg.topic}-{msg.queue_id}"  # queue_key, inline: once per message
            table = self.topic_queue_table
            queue_offset = table.get(key, 0)
            table[key] = queue_offset + 1
        else:
            queue_offset = 0
        if self.gathering:
            segment.gather(pack_single(msg, queue_offset, phy, store_ts))
            self._gathered_in = segment
        else:
            segment.append(pack_single(msg, queue_offset, phy, store_ts))
        msg.queue_offset = queue_offset
        msg_id = message_id(msg.store_host, phy)
        # positional, in field order: keywords make type() build a dict per call
        return AppendResult(_PUT_OK, phy, total, msg_id, queue_offset, store_ts, 1, "", [msg_id])

    def put_encoded(self, records: Sequence[EncodedRecord], store_host: bytes) -> AppendResult:
        """Append records already encoded (`EncodedRecord`: all but the append-time fields),
        of any topics and queues, back to back in one file and one write: the broker's own
        records that belong together (a transaction's commit and its op message). Each is
        stamped here with its queue offset, physical offset and the store timestamp; the
        result covers them all, `msg_ids` one per record in order."""
        total = 0
        for record in records:
            total += len(record.data)
        started = self._start_append(total)
        if isinstance(started, AppendResult):
            return started
        segment, store_ts = started
        wrote_offset = phy = segment.start_offset + segment.wrote
        table = self.topic_queue_table
        queue_offsets = []
        msg_ids = []
        for record in records:
            data = record.data
            if (record.sys_flag & TRANSACTION_MASK) not in _NO_QUEUE_OFFSET:  # inline, per record
                key = f"{record.topic}-{record.queue_id}"
                queue_offset = table.get(key, 0)
                table[key] = queue_offset + 1
            else:
                queue_offset = 0
            # stamp_record, inline: once per record
            _QUEUE_AND_PHYSICAL.pack_into(data, OFFSET_QUEUE_OFFSET, queue_offset, phy)
            _TS.pack_into(data, record.store_ts_at, store_ts)
            queue_offsets.append(queue_offset)
            # compiled; an f-string's "016X" goes through int.__format__'s spec parser
            msg_ids.append(message_id(store_host, phy))
            phy += len(data)
        if self.gathering:
            for record in records:
                segment.gather(record.data)
            self._gathered_in = segment
        else:
            segment.append_spans([record.data for record in records], total)
        # positional, in field order: keywords make type() build a dict per call
        return AppendResult(
            _PUT_OK,
            wrote_offset,
            total,
            ",".join(msg_ids),
            queue_offsets[0],
            store_ts,
            len(msg_ids),
            "",
            msg_ids,
            queue_offsets,
        )

    def encode_message_batch(self, batch: MessageBatch) -> EncodedBatch | AppendResult:
        """The records of `batch`, or the refusal a malformed or oversized batch gets.

        They are stamped for the end of the log as it is now, so that an `append_batch` that
        follows with no other append in between writes them as they are.
        """
        takes = _takes_queue_offset(batch.sys_flag)
        key = queue_key(batch.topic, batch.queue_id)
        last = self.segments.last
        stamp = AppendStamp(
            physical_offset=0 if last is None else last.start_offset + last.wrote,
            queue_offset=self.topic_queue_table.get(key, 0) if takes else 0,
            takes_queue_offsets=takes,
            store_timestamp=self._next_store_timestamp(),
        )
        try:
            encoded = encode_batch(batch, self.config.max_message_size, stamp)
        except RecordTooLargeError as exc:
            return _refused(exc)
        except BatchDecodeError as exc:
            return AppendResult(PutStatus.MESSAGE_ILLEGAL, remark=str(exc))
        if not encoded.offsets:
            return AppendResult(PutStatus.MESSAGE_ILLEGAL, remark="empty batch")
        return encoded

    def append_batch(self, batch: EncodedBatch, store_host: bytes) -> AppendResult:
        """Append records of one topic, queue and sysFlag in one buffer, as one contiguous run.

        Records stamped for somewhere else (the batch starts a new file, or it was encoded
        before another append) are stamped again here.
        """
        buffer = batch.data
        total = len(buffer)
        started = self._start_append(
            total, None if batch.stamp is None else batch.stamp.store_timestamp
        )
        if isinstance(started, AppendResult):
            return started
        segment, store_ts = started
        wrote_offset = segment.start_offset + segment.wrote
        takes = _takes_queue_offset(batch.sys_flag)
        key = queue_key(batch.topic, batch.queue_id)
        first_queue_offset = self.topic_queue_table.get(key, 0) if takes else 0
        stamp = AppendStamp(wrote_offset, first_queue_offset, takes, store_ts)
        if batch.stamp != stamp:
            for i, at in enumerate(batch.offsets):
                stamp_record(
                    buffer,
                    at,
                    batch.store_ts_at,
                    first_queue_offset + i if takes else 0,
                    wrote_offset + at,
                    store_ts,
                )
            batch.stamp = stamp
        if takes:
            self.topic_queue_table[key] = first_queue_offset + len(batch.offsets)
        segment.append(buffer)
        # message_id(store_host, phy), for a non-negative offset
        host_hex = store_host.hex().upper()
        msg_ids = [f"{host_hex}{wrote_offset + at:016X}" for at in batch.offsets]
        return _appended(wrote_offset, total, msg_ids, first_queue_offset, store_ts)

    @property
    def holds_gathered(self) -> bool:
        """Appends are gathered and not yet written (readers will see them at `write_gathered`).
        A batch is written at once even while gathering, and its readers woken at once."""
        return self._gathered_in is not None

    def write_gathered(self) -> bool:
        """Write what was gathered; True if there was something (readers may see more)."""
        segment = self._gathered_in
        if segment is None:
            return False
        self._gathered_in = None
        segment.write_gathered()
        return True

    def _start_append(
        self, total: int, encoded_at: int | None = None
    ) -> tuple[Segment, int] | AppendResult:
        """The segment with room for `total` bytes and the store timestamp, or a refusal.

        `encoded_at`: the store timestamp the records were encoded with, kept unless the clock
        of the log has passed it.
        """
        if total + END_OF_FILE_MIN_BLANK > self.file_size:
            return AppendResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"{total} bytes do not fit in a CommitLog file of {self.file_size}",
            )
        try:
            segment = self._segment_with_room(total)
        except OSError as exc:
            # The next file cannot be created (its blocks are reserved when it is): the record
            # is refused before any of it is written. The file before ends with its blank.
            if exc.errno not in _NO_SPACE:
                raise
            now = self.disk_refused_at = time.monotonic()
            if now - self._no_space_logged >= NO_SPACE_LOG_INTERVAL:  # not once per message
                self._no_space_logged = now
                log.error("CommitLog: cannot create the next file, writes refused: %s", exc)
            return AppendResult(
                PutStatus.CREATE_MAPEDFILE_FAILED,
                remark=f"create mapped file failed, the disk is full: {exc.strerror}",
            )
        last_ts = self.last_store_timestamp
        if encoded_at is not None and encoded_at >= last_ts:
            store_ts = self.last_store_timestamp = encoded_at
        else:
            # _next_store_timestamp, inline: once per put
            now = int(time.time() * 1000)
            store_ts = self.last_store_timestamp = now if now > last_ts else last_ts
        return segment, store_ts

    def _next_store_timestamp(self) -> int:
        # Store timestamps never go backwards, so that lookups by time can binary-search.
        return max(int(time.time() * 1000), self.last_store_timestamp)

    def _segment_with_room(self, size: int) -> Segment:
        segments = self.segments.segments
        segment = segments[-1] if segments else None
        if segment is None or segment.wrote >= segment.size:  # last_for_append's own test
            segment = self.segments.last_for_append(0)
        if size + END_OF_FILE_MIN_BLANK > segment.size - segment.wrote:  # segment.free
            segment.append(encode_blank(segment.free))
            segment.fill_to_end()
            segment = self.segments.last_for_append()
        return segment

    def append_raw(
        self, offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]
    ) -> None:
        """Append replicated bytes exactly at `offset`, which must be the end of the log.

        `data` is one buffer, or a list of buffers that follow each other (a slave's received
        frames): each run of them that fits in the current file goes in one write.

        An empty log accepts an offset at a file boundary and starts there (a slave joining its
        master, which always starts it at the beginning of a file: a start inside a file would
        leave zeros before the first record that recovery and dispatch read as the end).
        """
        if not self.segments.segments:
            if offset % self.file_size:
                raise OffsetMismatchError(offset - offset % self.file_size, offset)
            self.segments.reset_empty_at(offset)
        end = self.segments.max_wrote_offset
        if offset != end:
            raise OffsetMismatchError(end, offset)
        spans = [data] if isinstance(data, bytes | memoryview) else data
        run: list[bytes | memoryview] = []
        run_size = 0
        segment: Segment | None = None
        for span in spans:
            if not span:
                continue
            if segment is None:
                segment = self.segments.last_for_append()
            if run_size + len(span) <= segment.free:
                run.append(span)
                run_size += len(span)
                continue
            # The span crosses into the next file: the run and what fits go first.
            if run:
                segment.append_spans(run, run_size)
                run, run_size = [], 0
            view = memoryview(span)
            while view:
                segment = self.segments.last_for_append()
                if len(view) < segment.free:
                    run, run_size = [view], len(view)
                    break
                chunk = view[: segment.free]
                segment.append(chunk)
                view = view[len(chunk) :]
        if run and segment is not None:
            segment.append_spans(run, run_size)
        self._note_raw_timestamp()

    def _note_raw_timestamp(self) -> None:
        # Replicated records carry the master's store time; keep the clock monotonic anyway.
        self.last_store_timestamp = max(self.last_store_timestamp, int(time.time() * 1000))

    # --- reads ------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        first = self.segments.first
        return first.start_offset if first else 0

    @property
    def max_offset(self) -> int:
        return self.segments.max_offset

    def get_data(
        self, offset: int, *, return_first_on_not_found: bool = False
    ) -> tuple[int, memoryview] | None:
        """Readable bytes from `offset` to the end of its segment, with their start offset."""
        segment = self.segments.find(offset, return_first_on_not_found=return_first_on_not_found)
        if segment is None:
            return None
        position = offset - segment.start_offset if offset >= segment.start_offset else 0
        view = segment.select(position)
        if view is None:
            return None
        return segment.start_offset + position, view

    def get_record(self, offset: int, size: int) -> memoryview | None:
        segment = self.segments.find(offset)
        if segment is None:
            return None
        return segment.select(offset - segment.start_offset, size)

    def record_at(self, offset: int, max_size: int) -> memoryview | None:
        """The readable bytes of the record that starts at `offset`, its size read from its
        first field (one segment look-up); None when nothing readable starts there or the size
        is not within 1..`max_size`."""
        segment = self.segments.find(offset)
        if segment is None:
            return None
        # One view of what is readable from there (one select: no second look-up of the read
        # position and the map), cut to the record's size.
        readable = segment.select(offset - segment.start_offset)
        if readable is None or len(readable) < 4:
            return None
        size = int.from_bytes(readable[:4], "big", signed=True)
        if not 0 < size <= max_size or size > len(readable):
            return None
        return readable[:size]

    def store_timestamp_at(self, offset: int) -> int:
        head = self.get_record(offset, 64)
        if head is None:
            return -1
        _total, magic = read_total_size_and_magic(head, 0)
        if magic != MAGIC_V1:
            return -1
        return read_store_timestamp(head, 0)

    def next_segment_offset(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # --- recovery ---------------------------------------------------------------------------

    def scan_valid_end(self, start_index: int) -> int:
        """Where valid records end, scanning from segment `start_index`; nothing is changed.

        The scan stops at the first record that is torn, garbage or fails its CRC
        (checkCRCOnRecover), that does not sit at its own physical offset, or that ends in
        zeros where its topic or properties were (`has_zeroed_tail`: the body CRC does not
        cover them).
        """
        segments = self.segments.segments
        if not segments:
            return 0
        check_crc = self.config.check_crc_on_recover
        valid_end = segments[start_index].start_offset
        for segment in segments[start_index:]:
            position, complete = self._scan_segment(segment, check_crc)
            valid_end = segment.start_offset + position
            if not complete:
                break
        return valid_end

    def cut_recovered(self, valid_end: int, tails: Sequence[KeptTail]) -> None:
        """Recovery's cut: keep `tails` aside (`tails_past(valid_end)`), truncate at the end."""
        self.keep_aside(tails)
        self.segments.truncate_after(valid_end)
        last = self.segments.last
        if last is not None and last.start_offset + last.wrote < valid_end:
            last.set_positions(valid_end - last.start_offset)
        log.info("CommitLog recovered: valid data ends at physical offset %d", valid_end)

    @staticmethod
    def _scan_segment(segment: Segment, check_crc: bool) -> tuple[int, bool]:
        """(end of valid data in the segment, True if it ended with a blank or exactly full)."""
        view = segment.view
        position = 0
        size = segment.size
        while position < size:
            info = scan_record(view, position, check_crc=check_crc)
            if info.size > 0:
                if info.physical_offset != segment.start_offset + position:
                    return position, False
                if has_zeroed_tail(info):
                    log.warning(
                        "the record at physical offset %d ends in zeros where its topic or "
                        "properties were: torn by a power cut, it ends the valid data",
                        segment.start_offset + position,
                    )
                    return position, False
                position += info.size
                continue
            if info.size == 0:
                return size, True
            return position, False
        return position, True

    def truncate_to(self, offset: int, suffix: str) -> None:
        """Cut the log at `offset`, keeping the bytes after it in `<segment>.<pos>.<suffix>`."""
        self.keep_aside(self.tails_past(offset, suffix))
        self.segments.truncate_after(offset)
        last = self.segments.last
        if last is not None and last.start_offset <= offset < last.end_offset:
            last.set_positions(offset - last.start_offset)

    def tails_past(self, valid_end: int, suffix: str = "torn") -> list[KeptTail]:
        """The non-zero bytes past `valid_end`, file by file, to keep aside before a cut."""
        tails = []
        for segment in self.segments.segments:
            if segment.end_offset <= valid_end:
                continue
            start = max(0, valid_end - segment.start_offset)
            tail_end = _last_nonzero(segment.path, start, segment.size) + 1
            if tail_end > start:
                aside = segment.path.with_name(f"{segment.path.name}.{start}.{suffix}")
                tails.append(KeptTail(segment.start_offset, start, tail_end, aside))
        return tails

    def keep_aside(self, tails: Sequence[KeptTail]) -> None:
        """Copy each tail to its file beside the segment, then zero it in the segment."""
        for tail in tails:
            segment = self.segments.find(tail.segment_offset)
            if segment is None or segment.start_offset != tail.segment_offset:
                raise ValueError(f"no CommitLog file at {tail.segment_offset} for {tail.aside}")
            tail.aside.write_bytes(segment.view[tail.start : tail.end])
            log.warning(
                "CommitLog: %d bytes past physical offset %d copied to %s before truncation",
                tail.end - tail.start,
                tail.segment_offset + tail.start,
                tail.aside,
            )
            _zero_range(segment, tail.start, tail.end)

    def first_record_timestamp(self, segment: Segment) -> int:
        """Store time of a segment's first record, or -1 if it does not start with one."""
        _total, magic = read_total_size_and_magic(segment.view, 0)
        if magic == BLANK_MAGIC or magic != MAGIC_V1:
            return -1
        return read_store_timestamp(segment.view, 0)


def _last_nonzero(path: Path, start: int, end: int) -> int:
    """Index of the last non-zero byte of the file in [start, end), or `start - 1` if none.

    Holes of the sparse file (never written) are skipped with SEEK_DATA/SEEK_HOLE without being
    read; data is read with pread, not through the map, so the pages need no faults.
    """
    last = start - 1
    chunk = len(_ZERO_CHUNK)
    fd = os.open(path, os.O_RDONLY)
    try:
        at = start
        while at < end:
            try:
                data_start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # no data after `at`
                raise
            data_end = min(os.lseek(fd, data_start, os.SEEK_HOLE), end)
            at = data_start
            while at < data_end:
                piece = os.pread(fd, min(chunk, data_end - at), at)
                if not piece:
                    return last
                if piece != _ZERO_CHUNK[: len(piece)]:
                    last = at + len(piece.rstrip(b"\x00")) - 1
                at += len(piece)
    finally:
        os.close(fd)
    return last


def _appended(
    wrote_offset: int, total: int, msg_ids: list[str], first_queue_offset: int, store_ts: int
) -> AppendResult:
    return AppendResult(
        PutStatus.PUT_OK,
        wrote_offset=wrote_offset,
        wrote_bytes=total,
        msg_id=",".join(msg_ids),
        queue_offset=first_queue_offset,
        store_timestamp=store_ts,
        msg_num=len(msg_ids),
        msg_ids=msg_ids,
    )


def _zero_range(segment: Segment, start: int, end: int) -> None:
    fd = os.open(segment.path, os.O_RDWR)
    try:
        at = start
        while at < end:
            n = min(len(_ZERO_CHUNK), end - at)
            os.pwrite(fd, _ZERO_CHUNK[:n], at)
            at += n
        os.fdatasync(fd)
    finally:
        os.close(fd)


def segment_path(directory: Path, offset: int) -> Path:
    from tidemq.store.segment import offset_to_name

    return directory / offset_to_name(offset)
