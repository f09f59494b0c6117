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

