# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of an index file's puts (store/common/speedups.py picks a twin).

    put_many  store/index.py  an index file's puts of hashed entries (_IndexFile.put_many)

The pure twin is the reference: same arguments, same result, same exceptions
(tests/unit/test_speedups_records.py). Entries or a file it cannot vouch for go to the pure twin.
Index files are big-endian: a 40-byte header, hash slots of 4 bytes, entries of 20.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.long cimport PyLong_Check
from libc.stdint cimport int64_t, uint32_t, uint64_t

include "common/_twins.pxi"
include "common/_bigendian.pxi"

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
    _last_hash, index_file.end_phy_offset, index_file.end_timestamp = entries[stop - 1]
    index_file._write_header()
    index_file.dirty = True
    return stop - start
