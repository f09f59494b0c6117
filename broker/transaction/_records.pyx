# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the transaction subsystem's per-END steps (store/common/speedups.py picks a
twin).

    transaction_properties  broker/transaction/messages.py  what END_TRANSACTION reads of a half
                            message's properties, and its commit's properties
    read_half               broker/transaction/messages.py  a half record where it lies
    commit_record           broker/transaction/messages.py  the committed message's record, from
                            the half record's bytes
    op_record               broker/transaction/messages.py  the op message's record

Each has a pure-Python twin of the same name, the reference: same arguments, same result, same
exceptions (tests/unit/test_speedups_transactions.py checks it with hypothesis). The fast path
takes properties text as `encode_properties` writes it (every item name\\x01value\\x02, no name
twice, at most 64 items, valid UTF-8, a REAL_QID of ASCII characters); anything else is handed
to the pure twin.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memchr, memcmp, memcpy, memset
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char* data, Py_ssize_t size, const char* errors)

include "../../store/common/_twins.pxi"
include "../../store/common/_bigendian.pxi"
include "../../store/common/_slots.pxi"
include "../../store/_layout.pxi"


from tidemq.store.crc import crc32 as _crc32
from tidemq.store.record import EncodedRecord as _EncodedRecord
from tidemq.store.record import check_record_parts as _check_record_parts

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
    try:
        PyObject_GetBuffer(raw, &buf, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)
    try:
        return _transaction_properties(<const char*>buf.buf, buf.len, raw)
    finally:
        PyBuffer_Release(&buf)


cdef object _properties_pure(const char* p, Py_ssize_t size, object raw):
    """The pure twin's answer, for what the fast path leaves to it."""
    if raw is None:
        raw = PyBytes_FromStringAndSize(p, size)
    return _pure("tidemq.broker.transaction.messages.transaction_properties")(raw)


cdef object _transaction_properties(const char* p, Py_ssize_t size, object raw):
    """transaction_properties of the `size` bytes at `p`; `raw` (those bytes as an object, or
    None: a copy is made) is what the pure twin gets."""
    cdef Py_ssize_t start = 0, end, sep, i, j, count = 0, out_size, at
    cdef Py_ssize_t name_at[_MAX_ITEMS]
    cdef Py_ssize_t name_size[_MAX_ITEMS]
    cdef Py_ssize_t value_at[_MAX_ITEMS]
    cdef Py_ssize_t value_size[_MAX_ITEMS]
    cdef int kind[_MAX_ITEMS]
    cdef Py_ssize_t topic = -1, qid = -1, group = -1, prepared = -1, wait = -1
    cdef const char* found
    cdef long long queue_id = 0
    cdef char* out
    if not _ascii(<const unsigned char*>p, size):
        try:  # valid UTF-8 decodes and encodes back to the same bytes
            PyUnicode_DecodeUTF8(p, size, "strict")
        except UnicodeDecodeError:
            return _properties_pure(p, size, raw)
    # the items, each a pair, no name twice (else the pure twin's dict decides)
    while start < size:
        found = <const char*>memchr(p + start, 0x02, size - start)
        if found == NULL or count == _MAX_ITEMS:
            return _properties_pure(p, size, raw)
        end = found - p
        found = <const char*>memchr(p + start, 0x01, end - start)
        if found == NULL:
            return _properties_pure(p, size, raw)
        sep = found - p
        if memchr(p + sep + 1, 0x01, end - sep - 1) != NULL:
            return _properties_pure(p, size, raw)
        for i in range(count):
            if name_size[i] == sep - start and memcmp(p + name_at[i], p + start, sep - start) == 0:
                return _properties_pure(p, size, raw)
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
        return _properties_pure(p, size, raw)
    for j in range(value_size[qid]):
        if not (0x30 <= p[value_at[qid] + j] <= 0x39):
            return group_text, prepared_text, None, None, -1
    if value_size[qid] > _MAX_DIGITS:
        return _properties_pure(p, size, raw)
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


# --- the records END stores -------------------------------------------------------------------

# what END sets in a commit's sysFlag (the layout's, read at load: no copy of it here)
cdef int32_t _COMMIT = _record_layout.TRANSACTION_COMMIT_TYPE

cdef const char* _DELAY_MARKER = b"DELAY\x01"
cdef const char* _TIMER_MARKER = b"TIMER_DEL"
# what follows an op record's body: its topic and properties (messages._OP_TAIL)
cdef const char* _OP_TAIL = (
    b"\x1bRMQ_SYS_TRANS_OP_HALF_TOPIC\x00\x12TAGS\x01d\x02WAIT\x01false\x02"
)
_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
cdef enum:
    _OP_TAIL_SIZE = 1 + 27 + 2 + 18





# EncodedRecord's fields, and their slots' offsets (as HalfRecord's below), found at the first
# record built.
_ENCODED_FIELDS = ("data", "store_ts_at", "topic", "queue_id", "sys_flag")
cdef Py_ssize_t _encoded_slots[5]
cdef int _encoded_slots_state = 0  # 0: not looked up yet, 1: found, -1: set attributes instead


cdef object _encoded(object data, long long store_ts_at, object topic, object queue_id, long long sys_flag):
    """An EncodedRecord with its slots set here: its dataclass __init__ is a Python frame."""
    global _encoded_slots_state
    record = _EncodedRecord.__new__(_EncodedRecord)
    if _encoded_slots_state == 0:
        _encoded_slots_state = (
            1 if _find_slots(_EncodedRecord, _ENCODED_FIELDS, _encoded_slots, True) else -1
        )
    if _encoded_slots_state > 0:
        _put_at(record, _encoded_slots[0], data)
        _put_at(record, _encoded_slots[1], store_ts_at)
        _put_at(record, _encoded_slots[2], topic)
        _put_at(record, _encoded_slots[3], queue_id)
        _put_at(record, _encoded_slots[4], sys_flag)
        return record
    record.data = data
    record.store_ts_at = store_ts_at
    record.topic = topic
    record.queue_id = queue_id
    record.sys_flag = sys_flag
    return record


cdef bint _contains(const char* p, Py_ssize_t size, const char* needle, Py_ssize_t n):
    cdef Py_ssize_t i
    for i in range(size - n + 1):
        if p[i] == needle[0] and memcmp(p + i, needle, n) == 0:
            return True
    return False


def commit_record(half, max_message_size):
    cdef Py_buffer buf
    cdef Py_ssize_t body_at, body_end, total, props_size, topic_size
    cdef long long queue_id, physical, sys_flag
    cdef unsigned char* out
    props_raw = half.commit_properties
    topic = half.real_topic
    if props_raw is None or topic is None:
        return None
    if type(props_raw) is not bytes or type(topic) is not str or type(half.view) is not memoryview:
        return _pure("tidemq.broker.transaction.messages.commit_record")(half, max_message_size)
    props_size = len(<bytes>props_raw)
    if _contains(PyBytes_AS_STRING(props_raw), props_size, _DELAY_MARKER, 6) or _contains(
        PyBytes_AS_STRING(props_raw), props_size, _TIMER_MARKER, 9
    ):
        return None
    py_queue_id, py_physical, py_flag = half.real_queue_id, half.physical_offset, half.sys_flag
    py_body_at, py_body_end = half.body_at, half.body_end
    if (
        type(py_queue_id) is not int
        or not -2**31 <= py_queue_id < 2**31
        or type(py_physical) is not int
        or not -2**63 <= py_physical < 2**63
        or type(py_flag) is not int
        or not -2**31 <= py_flag < 2**31
        or type(py_body_at) is not int
        or type(py_body_end) is not int
        # a body after the fields this writes (SYSFLAG; PREPAREDTRANSACTIONOFFSET just before it)
        or not _OFFSET_BORN_HOST <= py_body_at <= py_body_end < 2**31
    ):
        return _pure("tidemq.broker.transaction.messages.commit_record")(half, max_message_size)
    queue_id, physical, sys_flag = py_queue_id, py_physical, py_flag
    body_at, body_end = py_body_at, py_body_end
    topic_raw = topic.encode()
    topic_size = len(<bytes>topic_raw)
    total = body_end + 3 + topic_size + props_size
    sys_flag = (sys_flag & ~_TRANSACTION_MASK) | _COMMIT
    if (
        type(max_message_size) is not int
        or not body_end - body_at <= max_message_size
        or not 1 <= topic_size <= 127
        or props_size > 32767
        or not total <= max_message_size + 64 * 1024
        or (PyBytes_AS_STRING(props_raw)[props_size - 1] if props_size else PyBytes_AS_STRING(topic_raw)[topic_size - 1]) == 0
    ):  # check_record_parts' tests: it says which limit is broken
        _check_record_parts(
            body_end - body_at, sys_flag, topic_raw, props_raw, total, max_message_size
        )
    if topic_size > 255 or props_size > 32767 or total >= 2**31:
        return _pure("tidemq.broker.transaction.messages.commit_record")(half, max_message_size)
    PyObject_GetBuffer(half.view, &buf, PyBUF_SIMPLE)
    try:
        if buf.len < body_end:
            return _pure("tidemq.broker.transaction.messages.commit_record")(half, max_message_size)
        # not zeroed: every byte is written below
        data = PyByteArray_FromStringAndSize(NULL, total)
        out = <unsigned char*>PyByteArray_AS_STRING(data)
        memcpy(out, buf.buf, body_end)
    finally:
        PyBuffer_Release(&buf)
    _put32(out, <uint32_t>total)
    _put32(out + _OFFSET_QUEUE_ID, <uint32_t>queue_id)
    _put32(out + _OFFSET_SYS_FLAG, <uint32_t>sys_flag)
    _put64(out + body_at - 12, <uint64_t>physical)  # PREPAREDTRANSACTIONOFFSET
    out[body_end] = <unsigned char>topic_size
    memcpy(out + body_end + 1, PyBytes_AS_STRING(topic_raw), topic_size)
    out[body_end + 1 + topic_size] = <unsigned char>(props_size >> 8)
    out[body_end + 2 + topic_size] = <unsigned char>(props_size & 0xFF)
    memcpy(out + body_end + 3 + topic_size, PyBytes_AS_STRING(props_raw), props_size)
    store_ts_at = _OFFSET_BORN_HOST + (_HOST_V6_SIZE if sys_flag & _FLAG_BORNHOST_V6 else _HOST_V4_SIZE)
    return _encoded(data, store_ts_at, topic, py_queue_id, sys_flag)


cdef long long _now_ms() noexcept:
    """int(time.time() * 1000), without the module look-up, the call and the float object."""
    cdef timespec now
    clock_gettime(CLOCK_REALTIME, &now)
    return <long long>((<double>now.tv_sec + <double>now.tv_nsec * 1e-9) * 1000)


def op_record(half_queue_offset, store_host, now=None):
    cdef Py_ssize_t host, body_size, total, at
    cdef unsigned char* out
    cdef long long born
    if (
        type(half_queue_offset) is not int
        or type(store_host) is not bytes
        or (len(<bytes>store_host) != _HOST_V4_SIZE and len(<bytes>store_host) != _HOST_V6_SIZE)
        or (now is not None and (type(now) is not int or not -2**63 <= now < 2**63))
    ):
        return _pure("tidemq.broker.transaction.messages.op_record")(
            half_queue_offset, store_host, now
        )
    born = _now_ms() if now is None else now
    host = len(<bytes>store_host)
    body = str(half_queue_offset).encode()
    body_size = len(<bytes>body)
    # fields 1-9, born host, store timestamp, store host, reconsume, prepared, body length, body
    total = _PREFIX_SIZE + host + 8 + host + 4 + 8 + 4 + body_size
    total += _OP_TAIL_SIZE
    data = PyByteArray_FromStringAndSize(NULL, total)
    out = <unsigned char*>PyByteArray_AS_STRING(data)
    memset(out, 0, total)
    _put32(out, <uint32_t>total)
    _put32(out + _OFFSET_MAGIC, <uint32_t>_MAGIC_V1)
    _put32(out + _OFFSET_BODY_CRC, <uint32_t>(_crc32(body) & 0x7FFFFFFF))
    # queue id 0, flag 0, queue offset and physical offset 0 (at append)
    sys_flag = (_FLAG_BORNHOST_V6 | _FLAG_STOREHOST_V6) if host == _HOST_V6_SIZE else 0
    _put32(out + _OFFSET_SYS_FLAG, <uint32_t>sys_flag)
    _put64(out + _OFFSET_BORN_TIMESTAMP, <uint64_t>born)
    memcpy(out + _OFFSET_BORN_HOST, PyBytes_AS_STRING(store_host), host)
    at = _OFFSET_BORN_HOST + host + 8  # the store timestamp: at append
    memcpy(out + at, PyBytes_AS_STRING(store_host), host)
    at += host + 4 + 8  # reconsume times, prepared transaction offset: 0
    _put32(out + at, <uint32_t>body_size)
    memcpy(out + at + 4, PyBytes_AS_STRING(body), body_size)
    memcpy(out + at + 4 + body_size, _OP_TAIL, _OP_TAIL_SIZE)
    return _encoded(data, _OFFSET_BORN_HOST + host, _OP_TOPIC, 0, sys_flag)


# --- the half record ----------------------------------------------------------------------------

cdef object _HalfRecord = None

# HalfRecord's fields in its dataclass order, and where each one's slot is in the object (its
# member descriptor's offset), found at the first read: read_half writes them there, as the
# dataclass __init__ would, without a setattr (a type look-up) per field.
_HALF_FIELDS = (
    "view", "physical_offset", "queue_offset", "sys_flag", "topic", "body_at", "body_end",
    "group", "prepared_queue_offset", "commit_properties", "real_topic", "real_queue_id",
)
cdef enum:
    _HALF_FIELD_COUNT = 12
cdef Py_ssize_t _half_slots[_HALF_FIELD_COUNT]
cdef int _half_slots_state = 0  # 0: not looked up yet, 1: found, -1: set attributes instead


cdef object _half_record_class():
    # imported at the first call: messages.py imports this module while it is being defined
    global _HalfRecord, _half_slots_state
    if _HalfRecord is None:
        from tidemq.broker.transaction.messages import HalfRecord

        _HalfRecord = HalfRecord
        _half_slots_state = 1 if _find_slots(HalfRecord, _HALF_FIELDS, _half_slots, True) else -1
    return _HalfRecord


cdef inline void _put_slot(object obj, int index, object value) noexcept:
    """A HalfRecord field's value written in its slot of a new object (empty until now)."""
    _put_at(obj, _half_slots[index], value)


def read_half(view):
    cdef Py_buffer buf
    cdef const unsigned char* p
    cdef Py_ssize_t size, at, body_at, body_end, topic_end, total
    cdef long long body_len, props_len
    cdef int32_t sys_flag
    if type(view) is not memoryview:
        return _pure("tidemq.broker.transaction.messages.read_half")(view)
    PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>buf.buf
        size = buf.len
        if size < _OFFSET_BORN_HOST:
            return None
        total = _i32(p)
        if _i32(p + _OFFSET_MAGIC) != _MAGIC_V1 or total < _OFFSET_BORN_HOST or total > size:
            return None
        sys_flag = _i32(p + _OFFSET_SYS_FLAG)
        at = _OFFSET_BORN_HOST + (_HOST_V6_SIZE if sys_flag & _FLAG_BORNHOST_V6 else _HOST_V4_SIZE) + 8
        at += _HOST_V6_SIZE if sys_flag & _FLAG_STOREHOST_V6 else _HOST_V4_SIZE
        if at + 16 > total:
            return None
        body_at = at + 16
        body_len = _i32(p + at + 12)
        body_end = body_at + body_len
        if body_len < 0 or body_end + 3 > total:
            return None
        topic_end = body_end + 1 + p[body_end]
        if topic_end + 2 > total:
            return None
        props_len = _i16(p + topic_end)
        if props_len < 0 or topic_end + 2 + props_len != total:
            return None
        props = _transaction_properties(<const char*>p + topic_end + 2, props_len, None)
        cls = _half_record_class()
        half = cls.__new__(cls)
        if _half_slots_state > 0:
            group, prepared, commit_properties, real_topic, real_queue_id = props
            _put_slot(half, 0, view)
            _put_slot(half, 1, _i64(p + _OFFSET_PHYSICAL_OFFSET))
            _put_slot(half, 2, _i64(p + _OFFSET_QUEUE_OFFSET))
            _put_slot(half, 3, sys_flag)
            _put_slot(half, 4, PyBytes_FromStringAndSize(<const char*>p + body_end + 1, p[body_end]))
            _put_slot(half, 5, body_at)
            _put_slot(half, 6, body_end)
            _put_slot(half, 7, group)
            _put_slot(half, 8, prepared)
            _put_slot(half, 9, commit_properties)
            _put_slot(half, 10, real_topic)
            _put_slot(half, 11, real_queue_id)
            return half
        half.view = view
        half.physical_offset = _i64(p + _OFFSET_PHYSICAL_OFFSET)
        half.queue_offset = _i64(p + _OFFSET_QUEUE_OFFSET)
        half.sys_flag = sys_flag
        half.topic = PyBytes_FromStringAndSize(<const char*>p + body_end + 1, p[body_end])
        half.body_at = body_at
        half.body_end = body_end
        (
            half.group,
            half.prepared_queue_offset,
            half.commit_properties,
            half.real_topic,
            half.real_queue_id,
        ) = props
        return half
    finally:
        PyBuffer_Release(&buf)
