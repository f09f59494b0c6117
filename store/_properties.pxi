# A property's value found in place in `name\x01value\x02...` bytes: the step shared by the
# record scans (store/_fast_scan.pyx) and find_property (store/_record.pyx).

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memchr

cdef extern from "string.h" nogil:
    void* memmem(const void*, size_t, const void*, size_t)


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



cdef inline Py_ssize_t _record_properties(
    const unsigned char* p, Py_ssize_t size, Py_ssize_t* props_len
) noexcept nogil:
    """Where the properties of the whole record p[:size] start (their length in `props_len`),
    or -1 when its lengths disagree or it has none: record.read_properties' walk, in place.
    Needs _layout.pxi and common/_bigendian.pxi included before this file."""
    cdef Py_ssize_t at, topic_end
    cdef int32_t sys_flag, body_len
    cdef int length
    if size < _PREFIX_SIZE:
        return -1
    sys_flag = _i32(p + _OFFSET_SYS_FLAG)
    # fields 10-15 after the prefix: born host, store timestamp, store host, reconsume times,
    # prepared offset, body length (the last 4 bytes)
    at = _PREFIX_SIZE + 8 + 12 + 4
    at += _HOST_V6_SIZE if sys_flag & _FLAG_BORNHOST_V6 else _HOST_V4_SIZE
    at += _HOST_V6_SIZE if sys_flag & _FLAG_STOREHOST_V6 else _HOST_V4_SIZE
    if at > size:
        return -1
    body_len = _i32(p + at - 4)
    if body_len < 0 or at + body_len + 3 > size:
        return -1
    at += body_len
    topic_end = at + 1 + p[at]
    if topic_end + 2 > size:
        return -1
    length = _i16(p + topic_end)
    if length <= 0 or topic_end + 2 + length > size:
        return -1
    props_len[0] = length
    return topic_end + 2
