# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the store's per-message loops (see store/common/speedups.py for the selection).

Each function here has a pure-Python twin of the same name that is the reference: same
arguments, same result, same exceptions with the same messages (tests/unit/test_speedups*.py
check it with hypothesis on random and damaged input).

    java_string_hash   store/javahash.py     Java String.hashCode of a str
    prefixed_key_hash  store/index.py        index key hash of topic#key from the topic's hash
    tags_code_for      store/tags.py         a TAGS value's tagsCode
    scan_fast          store/fast_scan.py    the common record's fields, read in place
    find_value         store/fast_scan.py    one property's value, found in place
    find_property      store/record.py       one property's value in a properties string
    with_property      store/record.py       a properties string with one name set
    KeyGatherer        store/fast_scan.py    index entries of records (UNIQ_KEY, KEYS)
    gather_entries     store/index_worker.py the index worker's loop over a mapped span
    put_many           store/index.py        an index file's puts of hashed entries
    encode_batch       store/record.py       a SEND_BATCH_MESSAGE body as records
    scan_units         store/get_message.py  a pull's scan of ConsumeQueue units into spans

Anything a fast path does not handle (damaged input, values out of its C range, the rare
layouts) is handed to the pure twin, which gives the result or raises as it always does: that is
how the errors and their messages stay the same. Records are big-endian (store/record.py).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_Check
from libc.string cimport memchr, memcmp, memcpy
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t


cdef extern from "Python.h":
    unsigned long long PyLong_AsUnsignedLongLongMask(object) except? <unsigned long long>-1
    object PyByteArray_FromStringAndSize(const char*, Py_ssize_t)
    object PyMemoryView_FromMemory(char*, Py_ssize_t, int)
    int PyBUF_READ

cdef extern from "string.h" nogil:
    void* memmem(const void*, size_t, const void*, size_t)

import struct as _struct

from tidemq.store.crc import crc32 as _crc32
from tidemq.common.speedups import PURE_TWINS as _PURE_TWINS


cdef object _pure(str key):
    """The pure twin `key` (module.name), for what the fast paths leave to it."""
    return _PURE_TWINS[key]


# --- big-endian fields ------------------------------------------------------------------------

cdef inline uint32_t _u32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int32_t _i32(const unsigned char* p) noexcept nogil:
    return <int32_t>_u32(p)


cdef inline int64_t _i64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | _u32(p + 4))


cdef inline int16_t _i16(const unsigned char* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline void _put32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put64(unsigned char* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef inline object _signed(uint32_t h):
    return <int32_t>h


cdef inline uint32_t _hash_ascii(const unsigned char* data, Py_ssize_t n, uint32_t h) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        h = h * 31 + data[i]
    return h


cdef inline bint _is_ascii(const unsigned char* data, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if data[i] & 0x80:
            return False
    return True


cdef uint32_t _hash_text(str text, uint32_t h, Py_ssize_t* units):
    """Continue `h` over the UTF-16 code units of `text`; add their count to units[0]."""
    cdef Py_UCS4 ch
    cdef uint32_t cp
    cdef Py_ssize_t n = 0
    for ch in text:
        cp = ch
        if cp >= 0x10000:
            cp -= 0x10000
            h = h * 31 + (0xD800 + (cp >> 10))
            h = h * 31 + (0xDC00 + (cp & 0x3FF))
            n += 2
        else:
            h = h * 31 + cp
            n += 1
    units[0] += n
    return h


cdef inline uint32_t _pow31(Py_ssize_t n) noexcept nogil:
    cdef uint32_t result = 1
    cdef uint32_t base = 31
    while n:
        if n & 1:
            result *= base
        base *= base
        n >>= 1
    return result


def java_string_hash(str s not None):
    """Return ``s.hashCode()`` as Java computes it: a signed 32-bit int."""
    cdef Py_ssize_t units = 0
    return _signed(_hash_text(s, 0, &units))


cdef inline object _index_hash(uint32_t h):
    # IndexFile.indexKeyHashMethod: abs of the signed hash, Integer.MIN_VALUE becomes 0.
    if h < 0x80000000u:
        return h
    h = 0 - h
    return h if h <= 0x7FFFFFFFu else 0


def prefixed_key_hash(prefix_hash, bytes key not None):
    """`index_key_hash` of ``topic#key`` from `topic_prefix_hash(topic)` and the key's UTF-8."""
    cdef uint32_t prefix = <uint32_t>PyLong_AsUnsignedLongLongMask(prefix_hash)
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(key)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(key)
    cdef Py_ssize_t units = 0
    cdef uint32_t tail
    if _is_ascii(data, n):
        return _index_hash(prefix * _pow31(n) + _hash_ascii(data, n, 0))
    tail = _hash_text(PyUnicode_DecodeUTF8(<char*>data, n, "replace"), 0, &units)
    return _index_hash(prefix * _pow31(units) + tail)


def tags_code_for(tags):
    """The tagsCode of a message's TAGS property value as stored; 0 when it has none."""
    if not tags:
        return 0
    cdef bytes raw = tags
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef Py_ssize_t units = 0
    if _is_ascii(data, n):
        return _signed(_hash_ascii(data, n, 0))
    return _signed(_hash_text(PyUnicode_DecodeUTF8(<char*>data, n, "replace"), 0, &units))



# --- records read in place: scan_fast, find_value, find_property ----------------------------

cdef enum:
    _UNIQ_LEN = 9
    _KEYS_LEN = 5
    _BATCH_HEAD_SIZE = 20

# The record layout is store/layout.py's, read into C globals when this module loads (the one
# definition; tests/unit/test_import_graph.py fails on a copy).
from tidemq.store import layout as _record_layout

cdef int32_t _MAGIC_V1 = _record_layout.MAGIC_V1
cdef int32_t _BLANK_MAGIC = _record_layout.BLANK_MAGIC
cdef Py_ssize_t _HEAD_SIZE = _record_layout.HEAD_V4_SIZE  # fixed head, IPv4 hosts
cdef Py_ssize_t _PREFIX_SIZE = _record_layout.PREFIX_SIZE  # fields 1-9
cdef Py_ssize_t _MAX_TOPIC_BYTES = _record_layout.MAX_TOPIC_BYTES
cdef Py_ssize_t _MAX_PROPERTIES_BYTES = _record_layout.MAX_PROPERTIES_BYTES
cdef int32_t _FLAG_BORNHOST_V6 = _record_layout.FLAG_BORNHOST_V6
cdef int32_t _FLAG_STOREHOST_V6 = _record_layout.FLAG_STOREHOST_V6
cdef int32_t _SLOW_FLAGS = (  # IPv6 hosts, transaction states: fast_scan's SLOW_FLAGS
    _record_layout.FLAG_BORNHOST_V6 | _record_layout.FLAG_STOREHOST_V6
    | _record_layout.TRANSACTION_MASK
)
cdef Py_ssize_t _HOST_V4_SIZE = _record_layout.HOST_V4_SIZE
cdef Py_ssize_t _HOST_V6_SIZE = _record_layout.HOST_V6_SIZE
cdef Py_ssize_t _OFFSET_MAGIC = _record_layout.OFFSET_MAGIC
cdef Py_ssize_t _OFFSET_BODY_CRC = _record_layout.OFFSET_BODY_CRC
cdef Py_ssize_t _OFFSET_QUEUE_ID = _record_layout.OFFSET_QUEUE_ID
cdef Py_ssize_t _OFFSET_FLAG = _record_layout.OFFSET_FLAG
cdef Py_ssize_t _OFFSET_QUEUE_OFFSET = _record_layout.OFFSET_QUEUE_OFFSET
cdef Py_ssize_t _OFFSET_PHYSICAL_OFFSET = _record_layout.OFFSET_PHYSICAL_OFFSET
cdef Py_ssize_t _OFFSET_SYS_FLAG = _record_layout.OFFSET_SYS_FLAG
cdef Py_ssize_t _OFFSET_BORN_TIMESTAMP = _record_layout.OFFSET_BORN_TIMESTAMP
cdef Py_ssize_t _OFFSET_STORE_TIMESTAMP_V4 = _record_layout.OFFSET_STORE_TIMESTAMP_V4
cdef Py_ssize_t _OFFSET_BODY_LENGTH_V4 = _record_layout.OFFSET_BODY_LENGTH_V4


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


cdef Py_ssize_t _find_value(
    const unsigned char* data,
    const unsigned char* needle,
    Py_ssize_t needle_len,
    Py_ssize_t start,
    Py_ssize_t end,
    Py_ssize_t* stop,
) noexcept nogil:
    """Where the value of property `needle` (`name\\x01`) starts in data[start:end], or -1.

    The first `needle` at `start` or after a separator (0x02): a name inside another property's
    value does not count. `stop[0]` is where the value ends (the next separator, or `end`).
    """
    cdef const unsigned char* at
    cdef const unsigned char* found
    cdef Py_ssize_t from_ = start
    cdef Py_ssize_t begin
    while from_ + needle_len <= end:
        found = <const unsigned char*>memmem(data + from_, end - from_, needle, needle_len)
        if found == NULL:
            return -1
        at = found
        if found == data + start or (found - 1)[0] == 0x02:
            begin = (found - data) + needle_len
            at = <const unsigned char*>memchr(data + begin, 0x02, end - begin)
            stop[0] = end if at == NULL else at - data
            return begin
        from_ = (found - data) + 1
    return -1


cdef inline object _value(const unsigned char* data, Py_ssize_t begin, Py_ssize_t stop):
    return PyBytes_FromStringAndSize(<const char*>data + begin, stop - begin)


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


def find_property(properties, name):
    """One property's raw value, without decoding the others (the dispatch hot path)."""
    cdef Py_buffer buf
    cdef Py_ssize_t begin, stop = 0
    if type(name) is not bytes:
        return _pure("tidemq.store.record.find_property")(properties, name)
    cdef bytes needle = name + b"\x01"
    try:
        PyObject_GetBuffer(properties, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.store.record.find_property")(properties, name)
    try:
        begin = _find_value(
            <const unsigned char*>buf.buf,
            <const unsigned char*>PyBytes_AS_STRING(needle),
            PyBytes_GET_SIZE(needle),
            0,
            buf.len,
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
            entries.append((prefixed_key_hash(prefix, uniq), phy, store_ts))
        if not keys:
            return
        for key in keys.split(b" "):
            if key:
                entries.append((prefixed_key_hash(prefix, key), phy, store_ts))


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


cdef object _record_module = None


cdef object _record():
    """store/record.py, imported at first use (it imports this module)."""
    global _record_module
    if _record_module is None:
        from tidemq.store import record
        _record_module = record
    return _record_module


cdef Py_ssize_t _general_entries(mm, Py_ssize_t pos, Py_ssize_t end, KeyGatherer keys, list entries) except -2:
    """gather_entries' general path for the record at `pos`: its size, 0 or less to stop."""
    record = _record()
    info = record.scan_record(memoryview(mm)[:end], pos, check_crc=False)
    if info.size <= 0:
        return info.size
    if info.sys_flag & 0x0C != 0x0C:  # ROLLBACK records are not indexed
        keys.gather_info(info, entries)
    return info.size



# --- batch encoding ---------------------------------------------------------------------------

_TS = _struct.Struct(">q")
_RECONSUME_PREPARED = _struct.Struct(">iq")


cdef struct _Message:
    Py_ssize_t end  # where the next message starts
    Py_ssize_t body_at  # the body's 4-byte length is just before it
    int32_t body_len
    int32_t flag
    Py_ssize_t props_at
    Py_ssize_t props_len
    bint separator  # between the message's properties and the batch's
    int64_t props_total  # the record's properties: the message's, separator, the batch's
    int64_t total  # the record's size


cdef inline bint _layout(
    const unsigned char* body,
    Py_ssize_t pos,
    Py_ssize_t size,
    Py_ssize_t shared_len,
    int64_t fixed_length,
    int64_t limit,
    _Message* m,
) noexcept nogil:
    """The message at `pos` and its record, if the pure twin accepts both (else False)."""
    if pos + _BATCH_HEAD_SIZE > size:
        return False
    cdef const unsigned char* p = body + pos
    cdef int64_t message_total = _i32(p)
    m.body_len = _i32(p + 16)
    m.flag = _i32(p + 12)
    m.end = pos + message_total
    m.body_at = pos + _BATCH_HEAD_SIZE
    m.props_at = m.body_at + m.body_len + 2
    if (
        message_total < _BATCH_HEAD_SIZE + 2
        or m.end > size
        or m.body_len < 0
        or m.props_at > m.end
        or _i16(body + m.props_at - 2) != m.end - m.props_at
    ):
        return False
    m.props_len = m.end - m.props_at
    m.separator = m.props_len > 0 and shared_len > 0 and body[m.end - 1] != 0x02
    m.props_total = m.props_len + m.separator + shared_len
    m.total = fixed_length + m.body_len + m.props_total
    return not (
        m.body_len > limit
        or m.props_total > _MAX_PROPERTIES_BYTES
        or m.total > limit + 64 * 1024
        or m.total > 0x7FFFFFFF
    )


def encode_batch(batch, max_body_size, stamp=None):
    """`encode_record` of each of `batch.as_messages()`, byte for byte, in one pass over the body.

    Two passes in C: the first checks every message as the pure twin does and sizes the
    records, the second writes them into one buffer. A body or a limit the pure twin refuses, an
    empty body, host addresses of unusual lengths and numbers out of their fields' range are
    left to the pure twin (it raises, or encodes them as it always has).
    """
    cdef bytes topic_bytes, middle, shared
    cdef int64_t limit, queue_offset = 0, phy_start = 0, step = 0, queue_step = 0
    cdef int32_t queue_id_c, sys_flag_c
    cdef int64_t born_ts_c
    try:
        topic_bytes = batch.topic.encode()
        born_host = batch.born_host
        store_host = batch.store_host
        if (
            not 0 < len(topic_bytes) <= _MAX_TOPIC_BYTES
            or len(born_host) not in (_HOST_V4_SIZE, _HOST_V6_SIZE)
            or len(store_host) not in (_HOST_V4_SIZE, _HOST_V6_SIZE)
        ):
            return _pure("tidemq.store.record.encode_batch")(batch, max_body_size, stamp)
        sys_flag = (
            (batch.sys_flag & ~(_FLAG_BORNHOST_V6 | _FLAG_STOREHOST_V6))
            | (_FLAG_BORNHOST_V6 if len(born_host) == _HOST_V6_SIZE else 0)
            | (_FLAG_STOREHOST_V6 if len(store_host) == _HOST_V6_SIZE else 0)
        )
        middle = b"".join(
            (
                born_host,
                bytes(8) if stamp is None else _TS.pack(stamp.store_timestamp),
                store_host,
                _RECONSUME_PREPARED.pack(batch.reconsume_times, batch.prepared_transaction_offset),
            )
        )
        shared = batch.properties.encode()
        queue_id = batch.queue_id
        born_timestamp = batch.born_timestamp
        queue_id_c = queue_id
        sys_flag_c = sys_flag
        born_ts_c = born_timestamp
        limit = max_body_size
        if stamp is not None:
            phy_start, step = stamp.physical_offset, 1
            if stamp.takes_queue_offsets:
                queue_offset, queue_step = stamp.queue_offset, 1
    except Exception:
        # What the pure twin raises for it (or how it encodes it), as it always has.
        return _pure("tidemq.store.record.encode_batch")(batch, max_body_size, stamp)
    cdef Py_buffer buf
    try:
        PyObject_GetBuffer(batch.body, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.store.record.encode_batch")(batch, max_body_size, stamp)
    try:
        if buf.len == 0:
            return _pure("tidemq.store.record.encode_batch")(batch, max_body_size, stamp)
        result = _encode_messages(
            <const unsigned char*>buf.buf,
            buf.len,
            topic_bytes,
            middle,
            shared,
            queue_id_c,
            sys_flag_c,
            born_ts_c,
            limit,
            queue_offset,
            queue_step,
            phy_start,
            step,
        )
        if result is None:
            return _pure("tidemq.store.record.encode_batch")(batch, max_body_size, stamp)
        data, offsets, properties_at, wait_store = result
    finally:
        PyBuffer_Release(&buf)
    return _record().EncodedBatch(
        data,
        offsets,
        _PREFIX_SIZE + len(born_host),
        batch.topic,
        queue_id,
        sys_flag,
        wait_store,
        properties_at,
        stamp,
    )


cdef object _encode_messages(
    const unsigned char* body,
    Py_ssize_t size,
    bytes topic_bytes,
    bytes middle,
    bytes shared,
    int32_t queue_id,
    int32_t sys_flag_c,
    int64_t born_ts,
    int64_t limit,
    int64_t queue_offset,
    int64_t queue_step,
    int64_t phy_start,
    int64_t step,
):
    """(data, offsets, properties_at, wait_store), or None for what the pure twin must do."""
    cdef Py_ssize_t topic_len = PyBytes_GET_SIZE(topic_bytes)
    cdef Py_ssize_t middle_len = PyBytes_GET_SIZE(middle)
    cdef Py_ssize_t shared_len = PyBytes_GET_SIZE(shared)
    # RocketMQ's calMsgLength without body and properties (host lengths from the flags)
    cdef int64_t fixed_length = (
        _PREFIX_SIZE
        + (_HOST_V6_SIZE if sys_flag_c & _FLAG_BORNHOST_V6 else _HOST_V4_SIZE) + 8
        + (_HOST_V6_SIZE if sys_flag_c & _FLAG_STOREHOST_V6 else _HOST_V4_SIZE)
        + 4 + 8 + 4 + 1 + topic_len + 2
    )
    cdef Py_ssize_t count = 0, pos = 0
    cdef int64_t data_len = 0
    cdef _Message m
    # first pass: the pure twin's checks, and the sizes
    while pos < size:
        if not _layout(body, pos, size, shared_len, fixed_length, limit, &m):
            return None
        count += 1
        data_len += m.total
        pos = m.end
    if (
        phy_start > 0x7FFFFFFFFFFFFFFF - data_len
        or queue_offset > 0x7FFFFFFFFFFFFFFF - count * queue_step
    ):
        return None
    # second pass: the records, into one buffer
    cdef object data = PyByteArray_FromStringAndSize(NULL, data_len)
    cdef unsigned char* out = <unsigned char*>PyByteArray_AS_STRING(data)
    cdef unsigned char* r
    cdef list offsets = [], properties_at = []
    cdef int64_t at = 0
    cdef object first_props = None
    pos = 0
    while pos < size:
        _layout(body, pos, size, shared_len, fixed_length, limit, &m)
        if at + m.total > data_len:
            raise AssertionError("encode_batch: the second pass outgrew the first")
        r = out + at
        _put32(r, <uint32_t>m.total)
        _put32(r + _OFFSET_MAGIC, <uint32_t>_MAGIC_V1)
        _put32(r + _OFFSET_BODY_CRC, <uint32_t>(
            _crc32(PyMemoryView_FromMemory(<char*>body + m.body_at, m.body_len, PyBUF_READ))
            & 0x7FFFFFFF
        ))
        _put32(r + _OFFSET_QUEUE_ID, <uint32_t>queue_id)
        _put32(r + _OFFSET_FLAG, <uint32_t>m.flag)
        _put64(r + _OFFSET_QUEUE_OFFSET, <uint64_t>queue_offset)
        _put64(r + _OFFSET_PHYSICAL_OFFSET, <uint64_t>(phy_start + at * step))
        _put32(r + _OFFSET_SYS_FLAG, <uint32_t>sys_flag_c)
        _put64(r + _OFFSET_BORN_TIMESTAMP, <uint64_t>born_ts)
        r += _PREFIX_SIZE
        memcpy(r, PyBytes_AS_STRING(middle), middle_len)
        r += middle_len
        memcpy(r, body + m.body_at - 4, 4 + m.body_len)  # [4 body length][body], as in a record
        r += 4 + m.body_len
        r[0] = <unsigned char>topic_len
        memcpy(r + 1, PyBytes_AS_STRING(topic_bytes), topic_len)
        r += 1 + topic_len
        r[0] = <unsigned char>(m.props_total >> 8)
        r[1] = <unsigned char>m.props_total
        r += 2
        memcpy(r, body + m.props_at, m.props_len)
        r += m.props_len
        if m.separator:
            r[0] = 0x02
            r += 1
        memcpy(r, PyBytes_AS_STRING(shared), shared_len)
        if first_props is None:
            first_props = PyBytes_FromStringAndSize(
                <const char*>out + at + m.total - m.props_total, m.props_total
            )
        PyList_Append(offsets, at)
        at += m.total
        PyList_Append(properties_at, at - m.props_total)
        queue_offset += queue_step
        pos = m.end
    wait_store = _record().waits_for_store(first_props.decode("utf-8", "replace"))
    return data, offsets, properties_at, wait_store


# --- index files: put_many ----------------------------------------------------------------------

cdef extern from "Python.h":
    int PyBUF_WRITABLE


cdef enum:
    _INDEX_HEADER_SIZE = 40
    _INDEX_SLOT_SIZE = 4
    _INDEX_ENTRY_SIZE = 20


cdef bint _entry_ok(object item, int64_t* key_hash, int64_t* phy, int64_t* ts):
    """Whether `item` is a (key hash, phy offset, store time) the C loop takes as it is."""
    if type(item) is not tuple or len(<tuple>item) != 3:
        return False
    if not (
        PyLong_Check((<tuple>item)[0])
        and PyLong_Check((<tuple>item)[1])
        and PyLong_Check((<tuple>item)[2])
    ):
        return False  # struct's refusal, or an __index__, is the pure twin's to give
    try:
        key_hash[0] = (<tuple>item)[0]
        phy[0] = (<tuple>item)[1]
        ts[0] = (<tuple>item)[2]
    except (TypeError, OverflowError):
        return False
    return 0 <= key_hash[0] <= 0x7FFFFFFF and -(1LL << 62) < ts[0] < (1LL << 62)


def put_many(index_file, list entries not None, Py_ssize_t start):
    """`put` for entries[start:] (key hash, phy offset, store time) until the file is full.

    One header write for the lot; returns how many entries went in. (IndexFile.put_many: two
    passes, the first checking that every entry it will write fits its field.)
    """
    cdef int64_t count, limit, slots, entries_pos, begin_ts, slot_count
    cdef int64_t key_hash = 0, phy = 0, ts = 0, diff, prev
    cdef Py_ssize_t i, n = len(entries), stop
    cdef Py_buffer buf
    cdef unsigned char* data
    cdef unsigned char* entry
    cdef int64_t slot_pos
    cdef object begin_phy = None
    try:
        count = index_file.index_count
        limit = index_file.index_num
        slots = index_file.hash_slot_num
        entries_pos = index_file._entries_pos
        begin_ts = index_file.begin_timestamp
        slot_count = index_file.hash_slot_count
        mm = index_file._map
    except (TypeError, OverflowError):
        return _pure("tidemq.store.index._IndexFile.put_many")(index_file, entries, start)
    if start >= n or count >= limit:
        return 0  # the pure twin's loop does not start
    if start < 0 or slots <= 0 or not 0 <= count <= limit <= 0x7FFFFFFF or not (
        -(1LL << 62) < begin_ts < (1LL << 62)
    ):
        return _pure("tidemq.store.index._IndexFile.put_many")(index_file, entries, start)
    stop = start + min(n - start, limit - count)
    for i in range(start, stop):
        if not _entry_ok(entries[i], &key_hash, &phy, &ts):
            return _pure("tidemq.store.index._IndexFile.put_many")(index_file, entries, start)
    try:
        PyObject_GetBuffer(mm, &buf, PyBUF_SIMPLE | PyBUF_WRITABLE)
    except (TypeError, BufferError, ValueError):
        return _pure("tidemq.store.index._IndexFile.put_many")(index_file, entries, start)
    try:
        if (
            buf.len < _INDEX_HEADER_SIZE + slots * _INDEX_SLOT_SIZE
            or buf.len < entries_pos + limit * _INDEX_ENTRY_SIZE
            or entries_pos < 0
        ):
            return _pure("tidemq.store.index._IndexFile.put_many")(index_file, entries, start)
        data = <unsigned char*>buf.buf
        for i in range(start, stop):
            _entry_ok(entries[i], &key_hash, &phy, &ts)
            slot_pos = _INDEX_HEADER_SIZE + (key_hash % slots) * _INDEX_SLOT_SIZE
            prev = _i32(data + slot_pos)
            if prev <= 0 or prev > count:
                prev = 0
                slot_count += 1
            diff = 0
            if count > 1 and begin_ts > 0 and ts > begin_ts:
                diff = (ts - begin_ts) // 1000
                if diff > 0x7FFFFFFF:
                    diff = 0x7FFFFFFF
            entry = data + entries_pos + count * _INDEX_ENTRY_SIZE
            _put32(entry, <uint32_t>key_hash)
            _put64(entry + 4, <uint64_t>phy)
            _put32(entry + 12, <uint32_t>diff)
            _put32(entry + 16, <uint32_t>prev)
            _put32(data + slot_pos, <uint32_t>count)
            if count <= 1:
                begin_phy = (<tuple>entries[i])[1]
                begin_ts = ts
            count += 1
    finally:
        PyBuffer_Release(&buf)
    if begin_phy is not None:
        index_file.begin_phy_offset = begin_phy
        index_file.begin_timestamp = begin_ts
    index_file.index_count = count
    index_file.hash_slot_count = slot_count
    _key_hash, index_file.end_phy_offset, index_file.end_timestamp = entries[stop - 1]
    index_file._write_header()
    index_file.dirty = True
    return stop - start


# --- properties text: with_property -----------------------------------------------------------

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL


cdef bint _canonical_without(const char* text, Py_ssize_t size, const char* name, Py_ssize_t name_size):
    """Whether `text` is a run of name\x01value\x02 items, no name twice and none `name`
    (UTF-8; the separators are single bytes there too)."""
    cdef Py_ssize_t start = 0, end, sep, i, count = 0, other, other_size
    cdef Py_ssize_t starts[64]
    cdef Py_ssize_t sizes[64]
    cdef const char* found
    while start < size:
        found = <const char*>memchr(text + start, 0x02, size - start)
        if found == NULL:
            return False  # the last item has no \x02 after it
        end = found - text
        found = <const char*>memchr(text + start, 0x01, end - start)
        if found == NULL:
            return False  # not a pair
        sep = found - text
        if memchr(text + sep + 1, 0x01, end - sep - 1) != NULL:
            return False  # two separators: not a pair either
        if count == 64:
            return False  # many properties: the pure twin decides
        if sep - start == name_size and memcmp(text + start, name, name_size) == 0:
            return False
        for i in range(count):
            other, other_size = starts[i], sizes[i]
            if other_size == sep - start and memcmp(text + other, text + start, other_size) == 0:
                return False  # a name twice
        starts[count] = start
        sizes[count] = sep - start
        count += 1
        start = end + 1
    return True


def with_property(text, name, value):
    cdef Py_ssize_t size, name_size
    cdef const char* raw
    cdef const char* raw_name
    if type(text) is str and type(name) is str and type(value) is str:
        try:
            raw = PyUnicode_AsUTF8AndSize(text, &size)
            raw_name = PyUnicode_AsUTF8AndSize(name, &name_size)
        except UnicodeEncodeError:
            pass
        else:
            if _canonical_without(raw, size, raw_name, name_size):
                return f"{text}{name}\x01{value}\x02"
    return _pure("tidemq.store.record.with_property")(text, name, value)


# --- a pull's scan of ConsumeQueue units (store/get_message.py) -------------------------------

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
