# cython: language_level=3
"""Compiled twins of the Spark source's record decoding (store/common/speedups.py picks a twin).

    walk_records  client/spark/records.py  where a pull body's records start
    fast_columns  client/spark/records.py  walked pull bodies as Arrow columns

Each has a pure-Python twin of the same name, the reference (tests/unit/test_speedups_spark_records.py).
Records are big-endian (store/layout.py).
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.string cimport memcmp, memcpy, memset
from libc.stdlib cimport free, malloc

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1

include "../../store/common/_twins.pxi"
include "../../store/common/_bigendian.pxi"
include "../../store/_layout.pxi"

# IPv6 hosts or a compressed body: the general path's records
cdef long long _GENERAL_FLAGS = _FLAG_BORNHOST_V6 | _FLAG_STOREHOST_V6 | _FLAG_COMPRESSED

# -- Spark: pull bodies into Arrow columns ----------------------------------------------------
# client/spark/records.py. `walk_records` finds where the records of a pull body start;
# `fast_columns` decodes the kept rows of walked bodies in one pass over the records, each body
# read where it lies (no joined copy), then copies their spans into Arrow buffers (offsets and
# bytes written straight into memory Arrow owns: no object per record). A record's head is
# read once: a window's bodies are larger than the caches, and each further pass over the
# heads missed them again.
# It takes records with IPv4 hosts and an uncompressed body whose properties are UTF-8 and hold
# UNIQ_KEY (what producers send); anything else, and any input it cannot vouch for, goes to the
# pure twin, which decodes it in Arrow's kernels, returns None (the general path's records) or
# raises its error.

from cpython.buffer cimport PyBUF_WRITABLE

_WALK_PURE_KEY = "tidemq.client.spark.records.walk_records"
_COLUMNS_PURE_KEY = "tidemq.client.spark.records.fast_columns"
_spark_records = None  # client/spark/records.py, looked up at the first call (it imports this)
_pa = None  # pyarrow, likewise

cdef long long _INT32_MAX = 2147483647


def walk_records(object body):
    cdef const unsigned char* data
    cdef Py_ssize_t limit, last_head, pos = 0
    cdef long long total
    cdef list starts = []
    cdef Py_buffer view
    cdef bint bad = False
    # Any one-byte buffer: a large pull body is a view of the connection's receive buffer.
    if type(body) is not bytes and not _is_byte_view(body):
        return _PURE_TWINS[_WALK_PURE_KEY](body)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        data = <const unsigned char*>view.buf
        limit = view.len
        last_head = limit - _HEAD_SIZE
        while pos <= last_head:
            total = _i32_at(data + pos)
            if total < _MIN_RECORD_SIZE or _i32_at(data + pos + _OFFSET_MAGIC) != _MAGIC_V1:
                bad = True
                break
            starts.append(pos)
            pos += <Py_ssize_t>total
    finally:
        PyBuffer_Release(&view)
    if bad or pos != limit:
        return _PURE_TWINS[_WALK_PURE_KEY](body)  # raises its error
    return starts


cdef inline bint _is_byte_view(object body):
    # A memoryview of one-byte items (what the receive buffer hands out), or a bytearray.
    if type(body) is bytearray:
        return True
    return type(body) is memoryview and body.itemsize == 1 and body.c_contiguous


cdef struct _Row:
    # spans of the pull bodies (NULL: absent, a null in its column)
    const unsigned char* value
    const unsigned char* props
    const unsigned char* tags
    const unsigned char* keys
    const unsigned char* msg_id
    Py_ssize_t value_len, props_len, tags_len, keys_len, id_len
    long long queue_offset, store_ms, born_ms


cdef inline Py_ssize_t _property_at(
    const unsigned char* props, Py_ssize_t size, const char* prefix, Py_ssize_t prefix_len,
    Py_ssize_t* value_len,
):
    """Where the value of the first item `prefix...` of `name\\x01value\\x02...` text starts
    (its length in value_len), or -1: the items are the text split on \\x02."""
    cdef Py_ssize_t item = 0, end
    while item <= size:
        end = item
        while end < size and props[end] != 2:
            end += 1
        if end - item >= prefix_len and memcmp(props + item, prefix, prefix_len) == 0:
            value_len[0] = end - item - prefix_len
            return item + prefix_len
        item = end + 1
    return -1


cdef inline const unsigned char* _property(
    const unsigned char* props, Py_ssize_t size, const char* prefix, Py_ssize_t prefix_len,
    Py_ssize_t* value_len,
):
    """The value of the first item `prefix...` of the properties, or NULL (`_property_at`)."""
    cdef Py_ssize_t at = _property_at(props, size, prefix, prefix_len, value_len)
    if at < 0:
        return NULL
    return props + at


cdef object _writable(Py_ssize_t size, Py_buffer* view):
    """A new Arrow buffer of `size` bytes, and `view` of its memory (released by the caller)."""
    buf = _pa.allocate_buffer(size)
    PyObject_GetBuffer(buf, view, PyBUF_WRITABLE)
    return buf


cdef object _binary_column(object type_, _Row* rows, Py_ssize_t n, int which):
    """A binary or string column of the rows' spans (which: 0 values, 1 props, 2 tags, 3 keys,
    4 ids); an absent span is null."""
    cdef Py_buffer offsets_view, data_view, valid_view
    cdef Py_ssize_t i, total = 0, length, nulls = 0
    cdef const unsigned char* at
    cdef int* offsets
    cdef unsigned char* out
    cdef unsigned char* valid = NULL
    for i in range(n):
        length = _span(&rows[i], which, &at)
        if at == NULL:
            nulls += 1
        else:
            total += length
    if total > _INT32_MAX:
        return None
    offsets_buf = _writable((n + 1) * 4, &offsets_view)
    try:
        data_buf = _writable(total, &data_view)
        try:
            valid_buf = None
            if nulls:
                valid_buf = _writable((n + 7) // 8, &valid_view)
                valid = <unsigned char*>valid_view.buf
                memset(valid, 0, (n + 7) // 8)
            try:
                offsets = <int*>offsets_view.buf
                out = <unsigned char*>data_view.buf
                total = 0
                offsets[0] = 0
                for i in range(n):
                    length = _span(&rows[i], which, &at)
                    if at != NULL:
                        memcpy(out + total, at, length)
                        total += length
                        if valid != NULL:
                            valid[i >> 3] |= <unsigned char>(1 << (i & 7))
                    offsets[i + 1] = <int>total
            finally:
                if nulls:
                    PyBuffer_Release(&valid_view)
        finally:
            PyBuffer_Release(&data_view)
    finally:
        PyBuffer_Release(&offsets_view)
    return _pa.Array.from_buffers(type_, n, [valid_buf, offsets_buf, data_buf], null_count=nulls)


cdef inline Py_ssize_t _span(_Row* row, int which, const unsigned char** at) noexcept:
    if which == 0:
        at[0] = row.value
        return row.value_len
    if which == 1:
        at[0] = row.props
        return row.props_len
    if which == 2:
        at[0] = row.tags
        return row.tags_len
    if which == 3:
        at[0] = row.keys
        return row.keys_len
    at[0] = row.msg_id
    return row.id_len


cdef object _int64_column(_Row* rows, Py_ssize_t n, int which):
    """queue offsets (0), store (1) or born (2) timestamps as an int64 column."""
    cdef Py_buffer view
    cdef long long* out
    cdef Py_ssize_t i
    buf = _writable(n * 8, &view)
    try:
        out = <long long*>view.buf
        for i in range(n):
            out[i] = rows[i].queue_offset if which == 0 else (
                rows[i].store_ms if which == 1 else rows[i].born_ms
            )
    finally:
        PyBuffer_Release(&view)
    return _pa.Array.from_buffers(_pa.int64(), n, [None, buf])


def fast_columns(list group):
    global _spark_records, _pa
    cdef Py_buffer* views = NULL
    cdef Py_ssize_t i, viewed = 0
    if _spark_records is None:
        import pyarrow
        from tidemq.client.spark import records
        _pa = pyarrow
        _spark_records = records
    pure = _PURE_TWINS[_COLUMNS_PURE_KEY]
    if not group:
        return pure(group)
    # Each body is read where it is (a large one is a view of the connection's receive buffer):
    # no joined copy of the group.
    for item in group:
        body = item.body
        if type(body) is not bytes and not _is_byte_view(body):
            return pure(group)
    views = <Py_buffer*>malloc(len(group) * sizeof(Py_buffer))
    if views == NULL:
        raise MemoryError()
    try:
        for item in group:
            PyObject_GetBuffer(item.body, &views[viewed], PyBUF_SIMPLE)
            viewed += 1
        return _fast_columns(group, pure, views)
    finally:
        for i in range(viewed):
            PyBuffer_Release(&views[i])
        free(views)


cdef object _fast_columns(list group, object pure, Py_buffer* views):
    """One pass over every record of the group's bodies (see the section's comment).

    What it cannot vouch for goes to the pure twin, whose answer is the reference: a start that
    is not the walk's, a topic length byte outside its record, a body length that exceeds its
    record (the twin raises), a kept record without UNIQ_KEY. The answers decided here keep the
    twin's order: the general path's records (None) first, then a topic length that differs
    between the first and the last record (None), then the rest.
    """
    cdef Py_ssize_t n = 0, k = 0, b = 0, j, m, size, start_at, record_end, value_end
    cdef Py_ssize_t seen = 0, topic_len = -1
    cdef long long body_len, queue_offset, low, high
    cdef bint filtering = False, general = False, unsure = False, exceeds = False
    cdef bint mismatch = False, no_id = False
    cdef const unsigned char* data
    cdef const unsigned char* p
    cdef _Row* rows = NULL
    cdef _Row* row
    cdef int overflow = 0
    cdef list starts
    for item in group:
        n += len(item.starts)
        if not item.all_kept:
            filtering = True
    if n == 0:
        return pure(group)
    rows = <_Row*>malloc(n * sizeof(_Row))
    if rows == NULL:
        raise MemoryError()
    try:
        for item in group:
            data = <const unsigned char*>views[b].buf
            size = views[b].len
            b += 1
            low = PyLong_AsLongLongAndOverflow(item.start, &overflow)
            if overflow:
                return pure(group)
            high = PyLong_AsLongLongAndOverflow(item.end, &overflow)
            if overflow:
                return pure(group)
            starts = item.starts if type(item.starts) is list else list(item.starts)
            m = len(starts)
            if m and starts[0] != 0:
                return pure(group)  # records that do not start the body: not the walk's
            for j in range(m):
                seen += 1
                start_at = starts[j]
                record_end = starts[j + 1] if j + 1 < m else size
                if start_at < 0 or record_end > size or record_end - start_at < _HEAD_SIZE:
                    return pure(group)  # starts that are not the walk's
                if general:
                    continue  # None, unless a later start is not the walk's
                p = data + start_at
                body_len = _i32_at(p + _OFFSET_BODY_LENGTH_V4)
                if _i32_at(p + _OFFSET_SYS_FLAG) & _GENERAL_FLAGS or body_len < 0:
                    general = True
                    continue
                if unsure or exceeds:
                    continue
                # Past a value: the topic's length byte. Every record of a queue has the
                # queue's topic: its length is read from the first record, checked on the last.
                value_end = start_at + _HEAD_SIZE + <Py_ssize_t>body_len
                if topic_len < 0 or seen == n:
                    if value_end >= record_end:
                        unsure = True  # the twin reads that byte wherever it is
                        continue
                    if topic_len < 0:
                        topic_len = data[value_end]
                    if seen == n and data[value_end] != topic_len:
                        mismatch = True
                if body_len > record_end - (start_at + _HEAD_SIZE + 3 + topic_len):
                    exceeds = True
                    continue
                queue_offset = _be64(p + _OFFSET_QUEUE_OFFSET)
                if filtering and not (low <= queue_offset < high):
                    continue
                row = &rows[k]
                k += 1
                row.queue_offset = queue_offset
                row.store_ms = _be64(p + _OFFSET_STORE_TIMESTAMP_V4)
                row.born_ms = _be64(p + _OFFSET_BORN_TIMESTAMP)
                row.value = p + _HEAD_SIZE
                row.value_len = <Py_ssize_t>body_len
                row.props = row.value + row.value_len + 3 + topic_len
                row.props_len = data + record_end - row.props
                row.tags = _property(row.props, row.props_len, b"TAGS\x01", 5, &row.tags_len)
                row.keys = _property(row.props, row.props_len, b"KEYS\x01", 5, &row.keys_len)
                row.msg_id = _property(
                    row.props, row.props_len, b"UNIQ_KEY\x01", 9, &row.id_len
                )
                if row.msg_id == NULL:
                    no_id = True  # the broker's offsetMsgId: made by the pure twin
        if general:
            return None  # the general path's records (the pure twin's answer too)
        if unsure:
            return pure(group)
        if mismatch:
            return None
        if exceeds or no_id:
            return pure(group)  # exceeds: the twin raises its RecordFormatError
        props = _binary_column(_pa.binary(), rows, k, 1)
        if props is None:
            return pure(group)
        try:
            props = props.cast(_pa.string())
        except _pa.ArrowInvalid:
            return pure(group)  # not UTF-8: the pure twin replaces what is broken
        string = _pa.string()
        columns = [
            _binary_column(_pa.binary(), rows, k, 0),
            props,
            _int64_column(rows, k, 0),
            _int64_column(rows, k, 1),
            _int64_column(rows, k, 2),
            _binary_column(string, rows, k, 2),
            _binary_column(string, rows, k, 3),
            _binary_column(string, rows, k, 4),
        ]
        if any(column is None for column in columns):
            return pure(group)
        return _spark_records.Columns(*columns)
    finally:
        free(rows)
