# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the store's Java hash codes (store/common/speedups.py picks a twin).

    java_string_hash   store/javahash.py     Java String.hashCode of a str
    prefixed_key_hash  store/index.py        index key hash of topic#key from the topic's hash
    tags_code_for      store/tags.py         a TAGS value's tagsCode

Each has a pure-Python twin of the same name, the reference: same arguments, same result, same
exceptions (tests/unit/test_speedups.py checks them with hypothesis). Hashes are Java's over
UTF-16 code units; ASCII bytes are hashed in place, anything else decoded first.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, uint32_t


cdef extern from "Python.h":
    unsigned long long PyLong_AsUnsignedLongLongMask(object) except? <unsigned long long>-1

include "_javahash.pxi"


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

