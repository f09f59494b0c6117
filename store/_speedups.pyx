# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the store's per-message loops (see store/speedups.py for the selection).

Each function here has a pure-Python twin of the same name that is the reference: same
arguments, same result, same exceptions with the same messages (tests/unit/test_speedups*.py
check it with hypothesis on random and damaged input).

    java_string_hash   store/javahash.py     Java String.hashCode of a str
    prefixed_key_hash  store/index.py        index key hash of topic#key from the topic's hash
    tags_code_for      store/tags.py         a TAGS value's tagsCode
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef extern from "Python.h":
    unsigned long long PyLong_AsUnsignedLongLongMask(object) except? <unsigned long long>-1


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
