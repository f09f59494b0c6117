"""Reading a queue: RocketMQ's `DefaultMessageStore.getMessage`, status by status.

| condition                       | status                 | nextBeginOffset              |
|---------------------------------|------------------------|------------------------------|
| no ConsumeQueue                 | NO_MATCHED_LOGIC_QUEUE | corr(offset, 0)              |
| queue max offset 0              | NO_MESSAGE_IN_QUEUE    | corr(offset, 0)              |
| offset < min                    | OFFSET_TOO_SMALL       | corr(offset, min)            |
| offset == max                   | OFFSET_OVERFLOW_ONE    | offset                       |
| offset > max                    | OFFSET_OVERFLOW_BADLY  | corr(offset, max), not 0     |
| no ConsumeQueue file for offset | OFFSET_FOUND_NULL      | corr(offset, next CQ file)   |
| scanned                         | FOUND, NO_MATCHED_MESSAGE or MESSAGE_WAS_REMOVING     |
|                                 |                        | offset + units scanned       |

`corr(old, new)` is `new` except on a slave without offsetCheckInSlave, where it is `old`: a
slave never moves a client's offset. Records come back as views of the mapped files: nothing is
copied until the caller writes them to a socket. Records that follow each other in the CommitLog
(a producer's batch, a queue written alone) share one view, a span: a pull of thousands of
records costs a handful of views, and `messages` cuts the spans into records for callers that
look at them one by one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from tidemq.common import speedups
from tidemq.store.commitlog import CommitLog
from tidemq.store.consume_queue import ConsumeQueue, iter_units
from tidemq.store.segment import Segment
from tidemq.store.tags import TagFilter

_BLANK_SIZE = 0x7FFFFFFF

# A filter on the stored record itself (an SQL92 expression on its properties), after the
# ConsumeQueue's tagsCode: RocketMQ's MessageFilter.isMatchedByCommitLog.
RecordFilter = Callable[[memoryview], bool]


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int = 0
    max_offset: int = 0
    spans: list[memoryview] = field(default_factory=list)  # the records, back to back
    span_counts: list[int] = field(default_factory=list)  # how many records each span holds
    sizes: list[int] = field(default_factory=list)  # each record's size, in order
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.sizes)

    @property
    def messages(self) -> list[memoryview]:
        """Each record's own view: the spans cut at the record sizes."""
        out: list[memoryview] = []
        sizes = iter(self.sizes)
        for span, count in zip(self.spans, self.span_counts, strict=True):
            if count == 1:
                next(sizes)
                out.append(span)
                continue
            pos = 0
            for _ in range(count):
                size = next(sizes)
                out.append(span[pos : pos + size])
                pos += size
        return out


@dataclass(frozen=True, slots=True)
class TransferLimits:
    """The batch caps: in memory 256 KiB / 32 messages, on disk 64 KiB / 8 (RocketMQ's)."""

    bytes_in_memory: int
    count_in_memory: int
    bytes_in_disk: int
    count_in_disk: int
    memory_bytes: int  # RAM * accessMessageInMemoryMaxRatio: older data counts as "on disk"


def get_message(
    queue: ConsumeQueue | None,
    offset: int,
    max_msg_nums: int,
    tag_filter: TagFilter,
    *,
    commitlog: CommitLog,
    limits: TransferLimits,
    is_slave: bool,
    offset_check_in_slave: bool,
    record_filter: RecordFilter | None = None,
) -> GetMessageResult:
    moves_offsets = not is_slave or offset_check_in_slave

    def corr(old: int, new: int) -> int:
        return new if moves_offsets else old

    if queue is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, corr(offset, 0))
    min_offset, max_offset = queue.min_offset, queue.max_offset
    result = GetMessageResult(
        GetMessageStatus.NO_MESSAGE_IN_QUEUE, corr(offset, 0), min_offset, max_offset
    )
    if max_offset == 0:
        return result
    if offset < min_offset:
        result.status, result.next_begin_offset = (
            GetMessageStatus.OFFSET_TOO_SMALL,
            corr(offset, min_offset),
        )
        return result
    if offset == max_offset:
        result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        return result
    if offset > max_offset:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
        result.next_begin_offset = corr(offset, max_offset)
        return result
    units = queue.raw_units(offset, max(800, max_msg_nums))
    if units is None:
        result.status = GetMessageStatus.OFFSET_FOUND_NULL
        result.next_begin_offset = corr(offset, queue.roll_next_file(offset))
        return result
    scan_units(result, units, offset, max_msg_nums, tag_filter, commitlog, limits, record_filter)
    return result


def scan_units(
    result: GetMessageResult,
    units: memoryview,
    offset: int,
    max_msg_nums: int,
    tag_filter: TagFilter,
    commitlog: CommitLog,
    limits: TransferLimits,
    record_filter: RecordFilter | None,
) -> None:
    commitlog_max = commitlog.max_offset
    result.status = GetMessageStatus.NO_MATCHED_MESSAGE
    next_file_start = -1
    max_phy_pulled = 0
    scanned = 0
    total = 0
    count = 0
    sizes = result.sizes
    queue_offsets = result.queue_offsets
    match_all = tag_filter.matches_all
    on_disk_below = commitlog_max - limits.memory_bytes  # older records count as on disk
    count_in_memory = min(max_msg_nums, limits.count_in_memory)
    count_on_disk = min(max_msg_nums, limits.count_in_disk)
    # The open span: [span_start, span_end) of the log, readable up to span_limit in its segment.
    span_segment: Segment | None = None
    span_start = span_end = span_limit = span_records = 0
    for phy, size, tags_code in iter_units(units):
        if size == _BLANK_SIZE:
            scanned += 1
            continue
        max_phy_pulled = phy
        if next_file_start != -1 and phy < next_file_start:
            scanned += 1
            continue
        # The batch caps (RocketMQ's isTheBatchFull), inline: this runs for every unit scanned.
        if total and count:
            if phy < on_disk_below:
                if count >= count_on_disk or total + size > limits.bytes_in_disk:
                    break
            elif count >= count_in_memory or total + size > limits.bytes_in_memory:
                break
        scanned += 1
        if not match_all and not tag_filter.match_code(tags_code):
            continue
        if record_filter is not None and size > 0:
            # Records it refuses count as scanned: the next pull starts after them.
            segment = commitlog.segments.find(phy)
            record = None if segment is None else segment.select(phy - segment.start_offset, size)
            if record is not None and not record_filter(record):
                continue
        if phy == span_end and size > 0 and phy + size <= span_limit:
            span_end += size  # the record right after the last one: the span grows
            span_records += 1
        else:
            if record_filter is None or size <= 0:  # else the filter's look found them
                segment = commitlog.segments.find(phy)
                record = (
                    None if segment is None else segment.select(phy - segment.start_offset, size)
                )
            if segment is None or record is None:
                if not count:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_file_start = commitlog.next_segment_offset(phy)
                continue
            if span_segment is not None:
                _close_span(result, span_segment, span_start, span_end, span_records)
            if size > 0:
                span_segment, span_start, span_end, span_records = segment, phy, phy + size, 1
                span_limit = segment.start_offset + segment.read_position
            else:  # a damaged unit: its record stands alone, as the segment gave it
                result.spans.append(record)
                result.span_counts.append(1)
                span_segment, span_end, span_limit = None, -1, -1
        sizes.append(size)
        queue_offsets.append(offset + scanned - 1)
        total += size
        count += 1
        result.status = GetMessageStatus.FOUND
        next_file_start = -1
    if span_segment is not None:
        _close_span(result, span_segment, span_start, span_end, span_records)
    result.buffer_total_size = total
    result.next_begin_offset = offset + scanned
    result.suggest_pulling_from_slave = commitlog_max - max_phy_pulled > limits.memory_bytes


def _close_span(
    result: GetMessageResult, segment: Segment, start: int, end: int, records: int
) -> None:
    base = segment.start_offset
    result.spans.append(segment.view[start - base : end - base])
    result.span_counts.append(records)


# The compiled twin (store/_get_message.pyx) when built: the same loop with the units read in place
# and its counters in C (a pull of 2,048 records scanned them at 0.3 us each in Python). A record
# filter with a `predicate` (broker/sql92.py's: a store/property_predicate.py condition) is
# answered there in C, each record read where it lies; the filter itself is called only for the
# records the predicate leaves undecided.
scan_units = speedups.select(scan_units, "tidemq.store._get_message")
