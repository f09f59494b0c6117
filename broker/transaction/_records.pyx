# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the transaction subsystem's per-END steps (store/common/speedups.py picks a
twin).

    transaction_properties  broker/transaction/messages.py  what END_TRANSACTION reads of a half
                            message's properties, and its commit's properties

Each has a pure-Python twin of the same name, the reference: same arguments, same result, same
exceptions (tests/unit/test_speedups_transactions.py checks it with hypothesis). The fast path
takes properties text as `encode_properties` writes it (every item name\\x01value\\x02, no name
twice, at most 64 items, valid UTF-8, a REAL_QID of ASCII characters); anything else is handed
to the pure twin.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memchr, memcmp, memcpy


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char* data, Py_ssize_t size, const char* errors)

include "../../store/common/_twins.pxi"

cdef enum:
    _MAX_ITEMS = 64
    # digits of a REAL_QID read here (more: the pure twin's int())
    _MAX_DIGITS = 18

# What an item is to END (by its name).
cdef enum:
    _OTHER = 0
    _DROPPED = 1  # REAL_TOPIC, REAL_QID, TRAN_MSG, TRAN_PREPARED_QUEUE_OFFSET: not in the commit
    _WAIT = 2  # WAIT: "false" in the commit

cdef const char* _REAL_TOPIC = b"REAL_TOPIC"
cdef const char* _REAL_QID = b"REAL_QID"
cdef const char* _TRAN_MSG = b"TRAN_MSG"
cdef const char* _PREPARED_OFFSET = b"TRAN_PREPARED_QUEUE_OFFSET"
cdef const char* _WAIT_NAME = b"WAIT"
cdef const char* _PGROUP = b"PGROUP"
cdef const char* _WAIT_FALSE = b"WAIT\x01false\x02"


cdef inline bint _is(const char* p, Py_ssize_t size, const char* name, Py_ssize_t name_size):
    return size == name_size and memcmp(p, name, name_size) == 0


cdef bint _ascii(const unsigned char* p, Py_ssize_t size):
    cdef Py_ssize_t i
    for i in range(size):
        if p[i] >= 0x80:
            return False
    return True


def transaction_properties(raw):
    cdef Py_buffer buf
    cdef const char* p
    cdef Py_ssize_t size, start = 0, end, sep, i, j, count = 0, out_size, at
    cdef Py_ssize_t name_at[_MAX_ITEMS]
    cdef Py_ssize_t name_size[_MAX_ITEMS]
    cdef Py_ssize_t value_at[_MAX_ITEMS]
    cdef Py_ssize_t value_size[_MAX_ITEMS]
    cdef int kind[_MAX_ITEMS]
    cdef Py_ssize_t topic = -1, qid = -1, group = -1, prepared = -1, wait = -1
    cdef const char* found
    cdef long long queue_id = 0
    cdef char* out
    try:
        PyObject_GetBuffer(raw, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
    try:
        p = <const char*>buf.buf
        size = buf.len
        if not _ascii(<const unsigned char*>p, size):
            try:  # valid UTF-8 decodes and encodes back to the same bytes
                PyUnicode_DecodeUTF8(p, size, "strict")
            except UnicodeDecodeError:
                return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
        # the items, each a pair, no name twice (else the pure twin's dict decides)
        while start < size:
            found = <const char*>memchr(p + start, 0x02, size - start)
            if found == NULL or count == _MAX_ITEMS:
                return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
            end = found - p
            found = <const char*>memchr(p + start, 0x01, end - start)
            if found == NULL:
                return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
            sep = found - p
            if memchr(p + sep + 1, 0x01, end - sep - 1) != NULL:
                return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
            for i in range(count):
                if name_size[i] == sep - start and memcmp(p + name_at[i], p + start, sep - start) == 0:
                    return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
            name_at[count] = start
            name_size[count] = sep - start
            value_at[count] = sep + 1
            value_size[count] = end - sep - 1
            kind[count] = _OTHER
            if _is(p + start, sep - start, _REAL_TOPIC, 10):
                topic = count
                kind[count] = _DROPPED
            elif _is(p + start, sep - start, _REAL_QID, 8):
                qid = count
                kind[count] = _DROPPED
            elif _is(p + start, sep - start, _TRAN_MSG, 8):
                kind[count] = _DROPPED
            elif _is(p + start, sep - start, _PREPARED_OFFSET, 26):
                prepared = count
                kind[count] = _DROPPED
            elif _is(p + start, sep - start, _WAIT_NAME, 4):
                wait = count
                kind[count] = _WAIT
            elif _is(p + start, sep - start, _PGROUP, 6):
                group = count
            count += 1
            start = end + 1
        group_text = (
            "" if group < 0 else PyUnicode_DecodeUTF8(p + value_at[group], value_size[group], NULL)
        )
        prepared_text = (
            None
            if prepared < 0
            else PyUnicode_DecodeUTF8(p + value_at[prepared], value_size[prepared], NULL)
        )
        # where the commit goes: a REAL_TOPIC, and a REAL_QID of digits (str.isdigit)
        if topic < 0 or value_size[topic] == 0 or qid < 0 or value_size[qid] == 0:
            return group_text, prepared_text, None, None, -1
        if not _ascii(<const unsigned char*>p + value_at[qid], value_size[qid]):
            # other digits (str.isdigit takes "²", which int() refuses)
            return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
        for j in range(value_size[qid]):
            if not (0x30 <= p[value_at[qid] + j] <= 0x39):
                return group_text, prepared_text, None, None, -1
        if value_size[qid] > _MAX_DIGITS:
            return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
        for j in range(value_size[qid]):
            queue_id = queue_id * 10 + (p[value_at[qid] + j] - 0x30)
        # the commit's properties: the items in order but those dropped, WAIT false where it
        # was (or last)
        out_size = 0
        for i in range(count):
            if kind[i] == _OTHER:
                out_size += name_size[i] + value_size[i] + 2
        out_size += 11  # WAIT\x01false\x02
        commit = PyBytes_FromStringAndSize(NULL, out_size)
        out = PyBytes_AS_STRING(commit)
        at = 0
        for i in range(count):
            if kind[i] == _OTHER:
                memcpy(out + at, p + name_at[i], name_size[i] + value_size[i] + 2)
                at += name_size[i] + value_size[i] + 2
            elif kind[i] == _WAIT:
                memcpy(out + at, _WAIT_FALSE, 11)
                at += 11
        if wait < 0:
            memcpy(out + at, _WAIT_FALSE, 11)
        return (
            group_text,
            prepared_text,
            commit,
            PyUnicode_DecodeUTF8(p + value_at[topic], value_size[topic], NULL),
            queue_id,
        )
    finally:
        PyBuffer_Release(&buf)
