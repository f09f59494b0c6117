# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the CommitLog scans that read records in place (store/common/speedups.py
picks a twin).

    scan_fast       store/fast_scan.py     the common record's fields, read in place
    find_value      store/fast_scan.py     one property's value, found in place
    KeyGatherer     store/fast_scan.py     index entries of records (UNIQ_KEY, KEYS)
    gather_entries  store/index_worker.py  the index worker's loop over a mapped span
    extend_runs     store/fast_scan.py     dispatch's loop over records that extend a queue's run

gather_entries is here, not beside index_worker.py, because its loop drives KeyGatherer's C
methods (a cdef class is reached in C only from its own module). Each has a pure-Python twin of
the same name, the reference (tests/unit/test_speedups_records.py). Anything a fast path does not
handle (damaged input, the rare layouts: IPv6 hosts, transaction states) is handed to the pure
twin, which gives the result or raises as it always does. Records are big-endian (store/layout.py).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from tidemq.store._hashing import prefixed_key_hash as _prefixed_key_hash

include "common/_twins.pxi"
include "common/_bigendian.pxi"
include "_layout.pxi"
include "_javahash.pxi"
include "_properties.pxi"
include "_record_module.pxi"

cdef enum:
    _UNIQ_LEN = 9
    _KEYS_LEN = 5

cdef int32_t _SLOW_FLAGS = (  # IPv6 hosts, PREPARED and ROLLBACK: fast_scan's SLOW_FLAGS
    _FLAG_BORNHOST_V6 | _FLAG_STOREHOST_V6 | _record_layout.TRANSACTION_PREPARED_TYPE
)


cdef struct _Fast:
    int32_t total
    int32_t queue_id
    int64_t queue_offset
    int64_t phy
    int64_t store_ts
    Py_ssize_t props
    Py_ssize_t topic_at


cdef inline bint _scan(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end, _Fast* out) noexcept nogil:
    """scan_fast's checks; `end` is within the buffer and pos >= 0."""
    if end - pos < _HEAD_SIZE:
        return False
    cdef const unsigned char* p = data + pos
    cdef int32_t total = _i32(p)
    cdef int32_t body_len = _i32(p + _OFFSET_BODY_LENGTH_V4)
    cdef Py_ssize_t rec_end = pos + total
    cdef Py_ssize_t at = pos + _HEAD_SIZE + body_len
    if (
        _i32(p + _OFFSET_MAGIC) != _MAGIC_V1
        or _i32(p + _OFFSET_SYS_FLAG) & _SLOW_FLAGS
        or rec_end > end
        or body_len < 0
        or at + 3 > rec_end
    ):
        return False
    cdef Py_ssize_t props = at + 3 + data[at]
    if props > rec_end or _i16(data + props - 2) != rec_end - props:
        return False
    out.total = total
    out.queue_id = _i32(p + _OFFSET_QUEUE_ID)
    out.queue_offset = _i64(p + _OFFSET_QUEUE_OFFSET)
    out.phy = _i64(p + _OFFSET_PHYSICAL_OFFSET)
    out.store_ts = _i64(p + _OFFSET_STORE_TIMESTAMP_V4)
    out.props = props
    out.topic_at = at + 1
    return True


def scan_fast(mm, Py_ssize_t pos, Py_ssize_t end):
    """The record at `pos` if it is a whole, common one ending by `end`; else None."""
    cdef Py_buffer buf
    cdef _Fast rec
    cdef bint found
    PyObject_GetBuffer(mm, &buf, PyBUF_SIMPLE)
    try:
        if pos < 0 or end > buf.len:
            return _pure("tidemq.store.fast_scan.scan_fast")(mm, pos, end)
        found = _scan(<const unsigned char*>buf.buf, pos, end, &rec)
        if not found:
            return None
        return (
            rec.total,
            rec.queue_id,
            rec.queue_offset,
            rec.phy,
            rec.store_ts,
            rec.props,
            PyBytes_FromStringAndSize(<char*>buf.buf + rec.topic_at, rec.props - 2 - rec.topic_at),
        )
    finally:
        PyBuffer_Release(&buf)



def find_value(mm, needle, Py_ssize_t start, Py_ssize_t end):
    """The value of property `needle` (`name\\x01`) in mm[start:end], found in place."""
    cdef Py_buffer buf
    cdef Py_ssize_t begin, stop = 0
    PyObject_GetBuffer(mm, &buf, PyBUF_SIMPLE)
    try:
        if start < 0 or end > buf.len or start > end or type(needle) is not bytes or not needle:
            return _pure("tidemq.store.fast_scan.find_value")(mm, needle, start, end)
        begin = _find_value(
            <const unsigned char*>buf.buf,
            <const unsigned char*>PyBytes_AS_STRING(needle),
            PyBytes_GET_SIZE(needle),
            start,
            end,
            &stop,
        )
        return None if begin < 0 else _value(<const unsigned char*>buf.buf, begin, stop)
    finally:
        PyBuffer_Release(&buf)


# --- index entries: KeyGatherer, gather_entries -----------------------------------------------

cdef const unsigned char* _UNIQ_NEEDLE = b"UNIQ_KEY\x01"
cdef const unsigned char* _KEYS_NEEDLE = b"KEYS\x01"


cdef uint32_t _key_hash(uint32_t prefix, const unsigned char* data, Py_ssize_t n) except? 0xFFFFFFFF:
    """prefixed_key_hash of data[:n] (n > 0), before the index's abs; raises only on memory."""
    cdef Py_ssize_t units = 0
    cdef uint32_t tail
    if _is_ascii(data, n):
        return prefix * _pow31(n) + _hash_ascii(data, n, 0)
    tail = _hash_text(PyUnicode_DecodeUTF8(<const char*>data, n, "replace"), 0, &units)
    return prefix * _pow31(units) + tail


cdef inline uint32_t _abs_hash(uint32_t h) noexcept nogil:
    if h < 0x80000000u:
        return h
    h = 0 - h
    return h if h <= 0x7FFFFFFFu else 0


cdef int _add_entries(
    list entries,
    uint32_t prefix,
    const unsigned char* data,
    Py_ssize_t start,
    Py_ssize_t end,
    object phy,
    object store_ts,
) except -1:
    """buildIndex for the properties data[start:end]: UNIQ_KEY, then each key of KEYS."""
    cdef Py_ssize_t begin, stop = 0, at, key_end
    begin = _find_value(data, _UNIQ_NEEDLE, _UNIQ_LEN, start, end, &stop)
    if begin >= 0 and stop > begin:
        PyList_Append(entries, (_abs_hash(_key_hash(prefix, data + begin, stop - begin)), phy, store_ts))
    begin = _find_value(data, _KEYS_NEEDLE, _KEYS_LEN, start, end, &stop)
    if begin < 0:
        return 0
    at = begin
    while at < stop:
        key_end = at
        while key_end < stop and data[key_end] != 0x20:
            key_end += 1
        if key_end > at:
            PyList_Append(entries, (_abs_hash(_key_hash(prefix, data + at, key_end - at)), phy, store_ts))
        at = key_end + 1
    return 0


cdef class KeyGatherer:
    """Index entries of records, with each topic's `topic#` hash worked out once."""

    cdef dict _prefixes

    def __init__(self):
        self._prefixes = {}

    cpdef uint32_t prefix(self, bytes topic_raw) except? 0xFFFFFFFF:
        cdef object known = self._prefixes.get(topic_raw)
        cdef Py_ssize_t units = 0
        cdef uint32_t prefix
        if known is not None:
            return known
        # topic_prefix_hash: Java hashCode of `topic#`, unsigned
        prefix = _hash_text(str(topic_raw, "utf-8", "replace"), 0, &units) * 31 + 0x23
        self._prefixes[topic_raw] = prefix
        return prefix

    def gather(self, mm, list entries, bytes topic_raw, phy, store_ts, Py_ssize_t props, Py_ssize_t rec_end):
        """buildIndex for a record found by `scan_fast`: UNIQ_KEY, then each key of KEYS."""
        cdef uint32_t prefix = self.prefix(topic_raw)
        cdef Py_buffer buf
        PyObject_GetBuffer(mm, &buf, PyBUF_SIMPLE)
        try:
            if props < 0 or rec_end > buf.len or props > rec_end:
                self._gather_values(entries, prefix, find_value(mm, b"UNIQ_KEY\x01", props, rec_end), find_value(mm, b"KEYS\x01", props, rec_end), phy, store_ts)
                return
            _add_entries(entries, prefix, <const unsigned char*>buf.buf, props, rec_end, phy, store_ts)
        finally:
            PyBuffer_Release(&buf)

    def gather_info(self, info, list entries):
        """buildIndex for a record parsed by `scan_record` (the caller skips ROLLBACK ones)."""
        cdef uint32_t prefix = self.prefix(info.topic.encode())
        properties = info.properties
        find_property = _record().find_property
        self._gather_values(
            entries,
            prefix,
            find_property(properties, b"UNIQ_KEY"),
            find_property(properties, b"KEYS"),
            info.physical_offset,
            info.store_timestamp,
        )

    cdef _gather_values(self, list entries, uint32_t prefix, uniq, keys, phy, store_ts):
        if uniq:
            entries.append((_prefixed_key_hash(prefix, uniq), phy, store_ts))
        if not keys:
            return
        for key in keys.split(b" "):
            if key:
                entries.append((_prefixed_key_hash(prefix, key), phy, store_ts))


def gather_entries(mm, Py_ssize_t pos, Py_ssize_t end, KeyGatherer keys not None, list entries not None):
    """Index entries of the records in mm[pos:end]; returns (where it stopped, at a blank)."""
    cdef Py_buffer buf
    cdef _Fast rec
    cdef const unsigned char* data
    cdef bytes topic = None
    cdef uint32_t prefix = 0
    cdef Py_ssize_t topic_len
    PyObject_GetBuffer(mm, &buf, PyBUF_SIMPLE)
    try:
        if pos < 0 or end > buf.len:
            return _pure("tidemq.store.index_worker.gather_entries")(mm, pos, end, keys, entries)
        data = <const unsigned char*>buf.buf
        while pos < end:
            if _scan(data, pos, end, &rec):
                topic_len = rec.props - 2 - rec.topic_at
                # Records of one topic follow each other: its hash is looked up once per run.
                if (
                    topic is None
                    or PyBytes_GET_SIZE(topic) != topic_len
                    or memcmp(PyBytes_AS_STRING(topic), data + rec.topic_at, topic_len) != 0
                ):
                    topic = PyBytes_FromStringAndSize(<const char*>data + rec.topic_at, topic_len)
                    prefix = keys.prefix(topic)
                _add_entries(entries, prefix, data, rec.props, pos + rec.total, rec.phy, rec.store_ts)
                pos += rec.total
                continue
            if end - pos < 8:
                break
            size = _general_entries(mm, pos, end, keys, entries)
            if size <= 0:
                return pos, _i32(data + pos + _OFFSET_MAGIC) == _BLANK_MAGIC
            pos += size
        return pos, False
    finally:
        PyBuffer_Release(&buf)



cdef Py_ssize_t _general_entries(mm, Py_ssize_t pos, Py_ssize_t end, KeyGatherer keys, list entries) except -2:
    """gather_entries' general path for the record at `pos`: its size, 0 or less to stop."""
    record = _record()
    info = record.scan_record(memoryview(mm)[:end], pos, check_crc=False)
    if info.size <= 0:
        return info.size
    if info.sys_flag & 0x0C != 0x0C:  # ROLLBACK records are not indexed
        keys.gather_info(info, entries)
    return info.size




# --- dispatch: extend_runs --------------------------------------------------------------------

from tidemq.store._hashing import tags_code_for as _tags_code_for

cdef const unsigned char* _TAGS_NEEDLE = b"TAGS\x01"

cdef enum:
    _TAGS_LEN = 5


def extend_runs(mm, pos, end, stop, runs, keys, entries, index_from, skip_topics):
    """The pure twin's loop in C: each record read in place, its unit written into a bytes
    object, its index entries gathered by KeyGatherer's C path. Unusual arguments (not a dict of
    runs, a pure KeyGatherer, a span the map does not hold) are left to the pure twin."""
    cdef Py_buffer buf
    cdef _Fast rec
    cdef Py_ssize_t at, scan_end, stop_at, rec_end, begin, value_stop = 0
    cdef KeyGatherer gatherer = None
    cdef bytes unit
    cdef unsigned char* u
    if (
        type(pos) is not int
        or type(end) is not int
        or type(stop) is not int
        or type(runs) is not dict
        or type(entries) is not list
        or type(skip_topics) is not tuple
        or not (keys is None or type(keys) is KeyGatherer)
    ):
        return _pure("tidemq.store.fast_scan.extend_runs")(
            mm, pos, end, stop, runs, keys, entries, index_from, skip_topics
        )
    gatherer = keys
    try:
        PyObject_GetBuffer(mm, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.store.fast_scan.extend_runs")(
            mm, pos, end, stop, runs, keys, entries, index_from, skip_topics
        )
    try:
        if pos < 0 or end > buf.len:
            return _pure("tidemq.store.fast_scan.extend_runs")(
                mm, pos, end, stop, runs, keys, entries, index_from, skip_topics
            )
        at = pos
        scan_end = end
        stop_at = stop if stop < end else end
        last_ts = -1
        data = <const unsigned char*>buf.buf
        while at < stop_at:
            if not _scan(data, at, scan_end, &rec):
                break
            topic_raw = PyBytes_FromStringAndSize(
                <const char*>data + rec.topic_at, rec.props - 2 - rec.topic_at
            )
            if topic_raw in skip_topics:
                break
            run = runs.get((topic_raw, rec.queue_id))
            if run is None or run.next_offset != rec.queue_offset:
                break
            rec_end = at + rec.total
            begin = _find_value(data, _TAGS_NEEDLE, _TAGS_LEN, rec.props, rec_end, &value_stop)
            tags_code = _tags_code_for(None if begin < 0 else _value(data, begin, value_stop))
            unit = PyBytes_FromStringAndSize(NULL, 20)
            u = <unsigned char*>PyBytes_AS_STRING(unit)
            _put64(u, <uint64_t>rec.phy)
            _put32(u + 8, <uint32_t>rec.total)
            _put64(u + 12, <uint64_t>(<int64_t>tags_code))
            run.units.append(unit)
            run.next_offset = rec.queue_offset + 1
            run.end_phy = rec.phy + rec.total
            run.tags_codes.add(tags_code)
            run.last_ts = rec.store_ts
            if gatherer is not None and rec.phy >= index_from:
                _add_entries(
                    entries,
                    gatherer.prefix(topic_raw),
                    data,
                    rec.props,
                    rec_end,
                    rec.phy,
                    rec.store_ts,
                )
            last_ts = rec.store_ts
            at = rec_end
        return at, last_ts
    finally:
        PyBuffer_Release(&buf)
