# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of a pull's scan of ConsumeQueue units (store/common/speedups.py picks a twin).

    scan_units  store/get_message.py  ConsumeQueue units into spans of the CommitLog

The pure twin is the reference (tests/unit/test_speedups_records.py). A ConsumeQueue unit is 20
big-endian bytes: the record's CommitLog offset (8), its size (4), its tags code (8).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_Append
from libc.stdint cimport int32_t

include "common/_twins.pxi"
include "common/_bigendian.pxi"

cdef object _get_message_module = None
cdef enum:
    _CQ_UNIT = 20
    _BLANK_UNIT_SIZE = 0x7FFFFFFF


def scan_units(
    result, units, offset, max_msg_nums, tag_filter, commitlog, limits, record_filter
):
    """The pure twin's loop with the units read in place and the counters in C; spans, segment
    lookups, tag and record filters are the same Python calls, made as rarely as there."""
    global _get_message_module
    cdef Py_buffer view
    if _get_message_module is None:
        from tidemq.store import get_message
        _get_message_module = get_message
    PyObject_GetBuffer(units, &view, PyBUF_SIMPLE)
    try:
        if view.len % _CQ_UNIT:
            return _pure("tidemq.store.get_message.scan_units")(
                result, units, offset, max_msg_nums, tag_filter, commitlog, limits, record_filter
            )
        _scan_unit_view(
            result, <const unsigned char*>view.buf, view.len // _CQ_UNIT, offset,
            max_msg_nums, tag_filter, commitlog, limits, record_filter,
        )
    finally:
        PyBuffer_Release(&view)


cdef int _scan_unit_view(
    result, const unsigned char* data, Py_ssize_t n_units, long long offset,
    long long max_msg_nums, tag_filter, commitlog, limits, record_filter,
) except -1:
    module = _get_message_module
    statuses = module.GetMessageStatus
    close_span = module._close_span
    cdef long long commitlog_max = commitlog.max_offset
    cdef long long memory_bytes = limits.memory_bytes
    cdef long long on_disk_below = commitlog_max - memory_bytes
    cdef long long bytes_in_disk = limits.bytes_in_disk
    cdef long long bytes_in_memory = limits.bytes_in_memory
    cdef long long count_in_memory = min(max_msg_nums, <long long>limits.count_in_memory)
    cdef long long count_on_disk = min(max_msg_nums, <long long>limits.count_in_disk)
    cdef bint match_all = tag_filter.matches_all
    cdef bint filtering_records = record_filter is not None
    cdef long long next_file_start = -1, max_phy_pulled = 0, scanned = 0, total = 0, count = 0
    cdef long long phy, tags_code, span_start = 0, span_end = 0, span_limit = 0
    cdef long long span_records = 0
    cdef int32_t size
    cdef Py_ssize_t i
    cdef const unsigned char* p
    cdef list sizes = result.sizes
    cdef list queue_offsets = result.queue_offsets
    span_segment = None
    result.status = statuses.NO_MATCHED_MESSAGE
    for i in range(n_units):
        p = data + i * _CQ_UNIT
        phy = _i64(p)
        size = _i32(p + 8)
        if size == _BLANK_UNIT_SIZE:
            scanned += 1
            continue
        max_phy_pulled = phy
        if next_file_start != -1 and phy < next_file_start:
            scanned += 1
            continue
        if total != 0 and count != 0:
            if phy < on_disk_below:
                if count >= count_on_disk or total + size > bytes_in_disk:
                    break
            elif count >= count_in_memory or total + size > bytes_in_memory:
                break
        scanned += 1
        if not match_all:
            tags_code = _i64(p + 12)
            if not tag_filter.match_code(tags_code):
                continue
        if filtering_records and size > 0:
            segment = commitlog.segments.find(phy)
            record = None if segment is None else segment.select(phy - segment.start_offset, size)
            if record is not None and not record_filter(record):
                continue
        if phy == span_end and size > 0 and phy + size <= span_limit:
            span_end += size
            span_records += 1
        else:
            if not filtering_records or size <= 0:  # else the filter's look found them
                segment = commitlog.segments.find(phy)
                record = None if segment is None else segment.select(phy - segment.start_offset, size)
            if segment is None or record is None:
                if count == 0:
                    result.status = statuses.MESSAGE_WAS_REMOVING
                next_file_start = commitlog.next_segment_offset(phy)
                continue
            if span_segment is not None:
                close_span(result, span_segment, span_start, span_end, span_records)
            if size > 0:
                span_segment = segment
                span_start, span_end, span_records = phy, phy + size, 1
                span_limit = segment.start_offset + segment.read_position
            else:  # a damaged unit: its record stands alone, as the segment gave it
                result.spans.append(record)
                result.span_counts.append(1)
                span_segment = None
                span_end = span_limit = -1
        PyList_Append(sizes, size)
        PyList_Append(queue_offsets, offset + scanned - 1)
        total += size
        if count == 0:
            result.status = statuses.FOUND
        count += 1
        next_file_start = -1
    if span_segment is not None:
        close_span(result, span_segment, span_start, span_end, span_records)
    result.buffer_total_size = total
    result.next_begin_offset = offset + scanned
    result.suggest_pulling_from_slave = commitlog_max - max_phy_pulled > memory_bytes
    return 0
