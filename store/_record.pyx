# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the record codec's per-message steps (store/common/speedups.py picks a twin).

    find_property    store/record.py  one property's value in a properties string
    read_properties  store/record.py  a whole record's raw properties (SQL92 filters)
    read_named_properties  store/record.py  the named properties of a record, decoded (SQL92)
    with_property    store/record.py  a properties string with one name set
    encode_batch     store/record.py  a SEND_BATCH_MESSAGE body as records
    record_total     store/record.py  a single put's record size, its limits checked
    pack_single      store/record.py  a single put's whole record, append-time fields included
    message_id       store/record.py  RocketMQ's offsetMsgId of a stored record

Each has a pure-Python twin of the same name, the reference: same arguments, same result, same
exceptions with the same messages (tests/unit/test_speedups*.py check it with hypothesis on
random and damaged input). Anything a fast path does not handle is handed to the pure twin.
Records are big-endian (store/layout.py).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.string cimport memchr, memcmp, memcpy
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef extern from "Python.h":
    object PyByteArray_FromStringAndSize(const char*, Py_ssize_t)
    object PyMemoryView_FromMemory(char*, Py_ssize_t, int)
    int PyBUF_READ
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

import struct as _struct

from tidemq.store.crc import crc32 as _crc32

include "common/_twins.pxi"
include "common/_bigendian.pxi"
include "_layout.pxi"
include "_properties.pxi"
include "_record_module.pxi"

cdef enum:
    _BATCH_HEAD_SIZE = 20


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


def read_properties(record):
    """The raw properties of one whole record (`record` is exactly its bytes), b"" when its
    lengths disagree: for filters that look at a few properties of every record."""
    cdef Py_buffer buf
    cdef const unsigned char* p
    cdef Py_ssize_t size, at, topic_end
    cdef int32_t sys_flag, body_len
    cdef int props_len
    try:
        PyObject_GetBuffer(record, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.store.record.read_properties")(record)
    try:
        p = <const unsigned char*>buf.buf
        size = buf.len
        if size < _PREFIX_SIZE:
            return b""
        sys_flag = _i32(p + _OFFSET_SYS_FLAG)
        # fields 10-15 after the prefix: born host, store timestamp, store host, reconsume
        # times, prepared offset, body length (the last 4 bytes)
        at = _PREFIX_SIZE + 8 + 12 + 4
        at += _HOST_V6_SIZE if sys_flag & _FLAG_BORNHOST_V6 else _HOST_V4_SIZE
        at += _HOST_V6_SIZE if sys_flag & _FLAG_STOREHOST_V6 else _HOST_V4_SIZE
        if at > size:
            return b""
        body_len = _i32(p + at - 4)
        if body_len < 0 or at + body_len + 3 > size:
            return b""
        at += body_len
        topic_end = at + 1 + p[at]
        if topic_end + 2 > size:
            return b""
        props_len = _i16(p + topic_end)
        if props_len < 0 or topic_end + 2 + props_len > size:
            return b""
        return PyBytes_FromStringAndSize(<const char*>p + topic_end + 2, props_len)
    finally:
        PyBuffer_Release(&buf)


cdef enum:
    _MAX_NEEDLE = 256


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char* data, Py_ssize_t size, const char* errors)


def read_named_properties(record, keys):
    """The properties of one whole record that `keys` name (pairs of a name and its UTF-8
    bytes), each value decoded (invalid UTF-8 replaced); those absent are left out, and a
    record whose lengths disagree has none. What an SQL92 filter reads of every record it
    sees: one call per record."""
    cdef Py_buffer buf
    cdef const unsigned char* p
    cdef Py_ssize_t size, at, topic_end, props_at, begin, stop = 0, key_len
    cdef int32_t sys_flag, body_len
    cdef int props_len
    cdef unsigned char needle[_MAX_NEEDLE]
    cdef dict found = {}
    cdef tuple pair
    # what the C loop reads: a tuple of (str, bytes) pairs with names short enough
    if type(keys) is not tuple:
        return _pure("tidemq.store.record.read_named_properties")(record, keys)
    for item in <tuple>keys:
        if (
            type(item) is not tuple
            or len(<tuple>item) != 2
            or type((<tuple>item)[1]) is not bytes
            or PyBytes_GET_SIZE((<tuple>item)[1]) >= _MAX_NEEDLE
        ):
            return _pure("tidemq.store.record.read_named_properties")(record, keys)
    try:
        PyObject_GetBuffer(record, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.store.record.read_named_properties")(record, keys)
    try:
        # read_properties' walk, without the copy of the properties
        p = <const unsigned char*>buf.buf
        size = buf.len
        if size < _PREFIX_SIZE:
            return found
        sys_flag = _i32(p + _OFFSET_SYS_FLAG)
        at = _PREFIX_SIZE + 8 + 12 + 4
        at += _HOST_V6_SIZE if sys_flag & _FLAG_BORNHOST_V6 else _HOST_V4_SIZE
        at += _HOST_V6_SIZE if sys_flag & _FLAG_STOREHOST_V6 else _HOST_V4_SIZE
        if at > size:
            return found
        body_len = _i32(p + at - 4)
        if body_len < 0 or at + body_len + 3 > size:
            return found
        at += body_len
        topic_end = at + 1 + p[at]
        if topic_end + 2 > size:
            return found
        props_len = _i16(p + topic_end)
        if props_len <= 0 or topic_end + 2 + props_len > size:
            return found
        props_at = topic_end + 2
        for item in <tuple>keys:
            pair = <tuple>item
            key = pair[1]
            key_len = PyBytes_GET_SIZE(key)
            memcpy(needle, PyBytes_AS_STRING(key), key_len)
            needle[key_len] = 0x01
            begin = _find_value(p + props_at, needle, key_len + 1, 0, props_len, &stop)
            if begin >= 0:
                found[pair[0]] = PyUnicode_DecodeUTF8(
                    <const char*>p + props_at + begin, stop - begin, "replace"
                )
        return found
    finally:
        PyBuffer_Release(&buf)


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
        or (m.props_len > 0 and shared_len == 0 and body[m.end - 1] == 0)
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
        if buf.len == 0 or shared.endswith(b"\0") or topic_bytes.endswith(b"\0"):
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


# --- a single put: record_total, pack_single, message_id --------------------------------------

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)


cdef struct _Single:
    const char* topic
    Py_ssize_t topic_len
    const char* props
    Py_ssize_t props_len
    Py_ssize_t body_len
    Py_ssize_t born_len
    Py_ssize_t store_len
    int64_t sys_flag  # with the host flags its hosts call for
    int64_t total


cdef int _single(msg, object topic, object props, object body, object born, object store,
                 object sys_flag, _Single* s) except -1:
    """`_shape` of the record of a message with exactly these field types, in `s`: 1, or 0 for
    what the pure twin must do (an unusual host, a text UTF-8 cannot encode, a big number)."""
    if not (
        type(topic) is str
        and type(props) is str
        and type(body) is bytes
        and type(born) is bytes
        and type(store) is bytes
        and type(sys_flag) is int
    ):
        return 0
    s.born_len = PyBytes_GET_SIZE(born)
    s.store_len = PyBytes_GET_SIZE(store)
    if s.born_len not in (_HOST_V4_SIZE, _HOST_V6_SIZE):
        return 0
    if s.store_len not in (_HOST_V4_SIZE, _HOST_V6_SIZE):
        return 0
    try:
        s.topic = PyUnicode_AsUTF8AndSize(topic, &s.topic_len)
        s.props = PyUnicode_AsUTF8AndSize(props, &s.props_len)
        s.sys_flag = sys_flag
    except (UnicodeError, OverflowError):
        return 0
    s.sys_flag = (
        (s.sys_flag & ~(_FLAG_BORNHOST_V6 | _FLAG_STOREHOST_V6))
        | (_FLAG_BORNHOST_V6 if s.born_len == _HOST_V6_SIZE else 0)
        | (_FLAG_STOREHOST_V6 if s.store_len == _HOST_V6_SIZE else 0)
    )
    s.body_len = PyBytes_GET_SIZE(body)
    # RocketMQ's calMsgLength
    s.total = (
        _PREFIX_SIZE + s.born_len + 8 + s.store_len + 4 + 8 + 4
        + s.body_len + 1 + s.topic_len + 2 + s.props_len
    )
    return 1


def record_total(msg, max_body_size):
    """`check_record(msg, max_body_size).total`, for the usual message in C; every limit it
    breaks, and anything unusual, is left to the pure twin (which raises as it always has)."""
    cdef _Single s
    cdef int64_t limit
    if type(max_body_size) is not int or not 0 <= max_body_size <= 0x7FFFFFFF:
        return _pure("tidemq.store.record.record_total")(msg, max_body_size)
    limit = max_body_size
    if not _single(msg, msg.topic, msg.properties, msg.body, msg.born_host, msg.store_host,
                   msg.sys_flag, &s):
        return _pure("tidemq.store.record.record_total")(msg, max_body_size)
    if (
        s.body_len > limit
        or s.topic_len == 0
        or s.topic_len > _MAX_TOPIC_BYTES
        or s.props_len > _MAX_PROPERTIES_BYTES
        or s.total > limit + 64 * 1024
        # RecordEndsInNulError
        or (s.props[s.props_len - 1] == 0 if s.props_len else s.topic[s.topic_len - 1] == 0)
    ):
        return _pure("tidemq.store.record.record_total")(msg, max_body_size)
    return s.total


def pack_single(msg, queue_offset, physical_offset, store_timestamp):
    """The pure twin's record, written in C into one bytes object (the body's CRC by the same
    crc32); a number out of its field's range, or anything unusual, is left to the pure twin."""
    cdef _Single s
    cdef int64_t queue_id, flag, born_ts, reconsume, prepared, qoff, phy, store_ts
    topic = msg.topic
    props = msg.properties
    body = msg.body
    born = msg.born_host
    store = msg.store_host
    if not _single(msg, topic, props, body, born, store, msg.sys_flag, &s):
        return _pure("tidemq.store.record.pack_single")(
            msg, queue_offset, physical_offset, store_timestamp
        )
    numbers = (msg.queue_id, msg.flag, msg.born_timestamp, msg.reconsume_times,
               msg.prepared_transaction_offset, queue_offset, physical_offset, store_timestamp)
    for number in numbers:
        if type(number) is not int:
            return _pure("tidemq.store.record.pack_single")(
                msg, queue_offset, physical_offset, store_timestamp
            )
    try:
        queue_id, flag, born_ts, reconsume, prepared, qoff, phy, store_ts = numbers
    except OverflowError:
        return _pure("tidemq.store.record.pack_single")(
            msg, queue_offset, physical_offset, store_timestamp
        )
    if (
        s.topic_len > 0xFF
        or s.props_len > 0x7FFF
        or s.total > 0x7FFFFFFF
        or s.body_len > 0x7FFFFFFF
        or not -0x80000000 <= queue_id <= 0x7FFFFFFF
        or not -0x80000000 <= flag <= 0x7FFFFFFF
        or not -0x80000000 <= s.sys_flag <= 0x7FFFFFFF
        or not -0x80000000 <= reconsume <= 0x7FFFFFFF
    ):
        return _pure("tidemq.store.record.pack_single")(
            msg, queue_offset, physical_offset, store_timestamp
        )
    crc = _crc32(body) & 0x7FFFFFFF
    cdef bytes out = PyBytes_FromStringAndSize(NULL, s.total)
    cdef unsigned char* r = <unsigned char*>PyBytes_AS_STRING(out)
    _put32(r, <uint32_t>s.total)
    _put32(r + _OFFSET_MAGIC, <uint32_t>_MAGIC_V1)
    _put32(r + _OFFSET_BODY_CRC, <uint32_t>(<int64_t>crc))
    _put32(r + _OFFSET_QUEUE_ID, <uint32_t>queue_id)
    _put32(r + _OFFSET_FLAG, <uint32_t>flag)
    _put64(r + _OFFSET_QUEUE_OFFSET, <uint64_t>qoff)
    _put64(r + _OFFSET_PHYSICAL_OFFSET, <uint64_t>phy)
    _put32(r + _OFFSET_SYS_FLAG, <uint32_t>s.sys_flag)
    _put64(r + _OFFSET_BORN_TIMESTAMP, <uint64_t>born_ts)
    r += _PREFIX_SIZE
    memcpy(r, PyBytes_AS_STRING(born), s.born_len)
    r += s.born_len
    _put64(r, <uint64_t>store_ts)
    r += 8
    memcpy(r, PyBytes_AS_STRING(store), s.store_len)
    r += s.store_len
    _put32(r, <uint32_t>reconsume)
    _put64(r + 4, <uint64_t>prepared)
    _put32(r + 12, <uint32_t>s.body_len)
    r += 16
    memcpy(r, PyBytes_AS_STRING(body), s.body_len)
    r += s.body_len
    r[0] = <unsigned char>s.topic_len
    memcpy(r + 1, s.topic, s.topic_len)
    r += 1 + s.topic_len
    r[0] = <unsigned char>(s.props_len >> 8)
    r[1] = <unsigned char>s.props_len
    memcpy(r + 2, s.props, s.props_len)
    return out


cdef const char* _HEX_UPPER = b"0123456789ABCDEF"


def message_id(store_host, physical_offset):
    """The pure twin's hex, written in C for bytes hosts and offsets that fit 8 bytes."""
    cdef int64_t phy
    cdef Py_ssize_t n, i
    cdef unsigned char raw[8]
    cdef const unsigned char* host
    if type(store_host) is not bytes or type(physical_offset) is not int:
        return _pure("tidemq.store.record.message_id")(store_host, physical_offset)
    try:
        phy = physical_offset
    except OverflowError:
        return _pure("tidemq.store.record.message_id")(store_host, physical_offset)
    n = PyBytes_GET_SIZE(store_host)
    host = <const unsigned char*>PyBytes_AS_STRING(store_host)
    _put64(raw, <uint64_t>phy)
    text = PyUnicode_New((n + 8) * 2, 127)
    cdef unsigned char* out = <unsigned char*>PyUnicode_DATA(text)
    for i in range(n):
        out[2 * i] = _HEX_UPPER[host[i] >> 4]
        out[2 * i + 1] = _HEX_UPPER[host[i] & 0xF]
    out += 2 * n
    for i in range(8):
        out[2 * i] = _HEX_UPPER[raw[i] >> 4]
        out[2 * i + 1] = _HEX_UPPER[raw[i] & 0xF]
    return text
