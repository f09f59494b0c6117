# cython: language_level=3
"""Compiled twins of the consumers' per-message loops (store/common/speedups.py picks a twin).

    decode_received  client/consumer/received.py       a pull response's records as messages
    put_messages     client/consumer/process_queue.py  a pull's messages into a process queue
    forget_messages  client/consumer/process_queue.py  consumed messages out of it

Each has a pure-Python twin of the same name, the reference (tests/unit/test_speedups_remoting.py
and test_speedups_records.py). Records are big-endian (store/layout.py).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.object cimport PyObject
from libc.string cimport memcmp

include "../../store/common/_twins.pxi"
include "../../store/common/_bigendian.pxi"
include "../../store/_layout.pxi"

# IPv6 hosts or a compressed body: the general path's records
cdef long long _GENERAL_FLAGS = _FLAG_BORNHOST_V6 | _FLAG_STOREHOST_V6 | _FLAG_COMPRESSED

# -- pull bodies: decode_received -------------------------------------------------------------
# The consumers' loop over a pull response's records (client/consumer/received.py, the reference): the
# common record (IPv4 hosts, an uncompressed body, lengths that agree) is read here; any other
# goes to the pure module's `_general`, exactly where the pure loop sends it.

_RECEIVED_PURE_KEY = "tidemq.client.consumer.received.decode_received"
_received = None  # client/consumer/received.py, looked up at the first call (it imports this module)
_ReceivedMessageType = None
_UNSET = None
_inflate_body = None
_frozen = None

# A message's fields are written straight into its slots, as `object.__setattr__` would (a
# generic setattr per field looks the name up in the type each time: a fifth of the loop).
# Their offsets come from the slot descriptors of `_ReceivedFields` at the first call.
cdef extern from *:
    """
    #include "structmember.h"
    static Py_ssize_t tidemq_slot_offset(PyObject *descriptor) {
        /* The offset of an object slot made by __slots__, or -1 for anything else. */
        if (Py_TYPE(descriptor) != &PyMemberDescr_Type) return -1;
        PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) return -1;
        return member->offset;
    }
    static inline PyObject *tidemq_slot_value(PyObject *obj, Py_ssize_t offset) {
        /* A slot's value (borrowed), NULL when it holds none. */
        return *(PyObject **)((char *)obj + offset);
    }
    static inline void tidemq_fill_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
        /* Only on a fresh object, whose slots are all NULL. */
        Py_INCREF(value);
        *(PyObject **)((char *)obj + offset) = value;
    }
    """
    Py_ssize_t tidemq_slot_offset(object descriptor)
    void PyObject_GC_UnTrack(object obj)
    PyObject* tidemq_slot_value(object obj, Py_ssize_t offset)
    void tidemq_fill_slot(object obj, Py_ssize_t offset, object value)

cdef enum:
    # the slots in the order the loop fills them
    _S_TOPIC, _S_BODY, _S_QUEUE_ID, _S_QUEUE_OFFSET, _S_BROKER_NAME, _S_STORE_TIMESTAMP
    _S_BORN_TIMESTAMP, _S_RECONSUME_TIMES, _S_COMMIT_LOG_OFFSET, _S_SYS_FLAG, _S_FLAG
    _S_RAW_PROPERTIES, _S_RAW_BORN_HOST, _S_RAW_STORE_HOST, _S_PROPERTIES, _S_TAGS, _S_KEYS
    _S_MSG_ID, _S_OFFSET_MSG_ID, _S_BORN_HOST, _S_STORE_HOST, _S_COUNT

_SLOT_NAMES = (
    "topic", "body", "queue_id", "queue_offset", "broker_name", "store_timestamp",
    "born_timestamp", "reconsume_times", "commit_log_offset", "sys_flag", "flag",
    "_raw_properties", "_raw_born_host", "_raw_store_host", "_properties", "_tags", "_keys",
    "_msg_id", "_offset_msg_id", "_born_host", "_store_host",
)
cdef Py_ssize_t _slot_at[_S_COUNT]


cdef void _load_received() except *:
    """The modules and types the loops below use, at the first call (they import this one)."""
    global _received, _ReceivedMessageType, _UNSET, _inflate_body, _frozen
    from tidemq.client import message
    from tidemq.client.consumer import received
    from tidemq.client.inflate import inflate_body
    _find_slots(message._ReceivedFields)
    _ReceivedMessageType = message.ReceivedMessage
    _UNSET = message.UNSET
    _inflate_body = inflate_body
    _frozen = message.frozen
    _received = received


cdef void _find_slots(object fields_type) except *:
    """The offsets of `_ReceivedFields`' slots; every slot the loop fills, and no other."""
    if len(_SLOT_NAMES) != _S_COUNT or set(_SLOT_NAMES) != set(fields_type.__slots__):
        raise RuntimeError("decode_received: _ReceivedFields' slots are not the ones it fills")
    for i, name in enumerate(_SLOT_NAMES):
        _slot_at[i] = tidemq_slot_offset(fields_type.__dict__[name])
        if _slot_at[i] < 0:
            raise RuntimeError(f"decode_received: _ReceivedFields.{name} is not a plain slot")


def decode_received(object body, str broker_name):
    cdef const unsigned char* data
    cdef const unsigned char* p
    cdef Py_ssize_t end, pos = 0, record_end, at, topic_end, props_at, topic_len = -1
    cdef long long total, magic, body_len, sys_flag
    cdef list out = []
    cdef list inflate = []
    if _received is None:
        _load_received()
    general = _received._general
    new = _ReceivedMessageType.__new__
    message_type = _ReceivedMessageType
    cdef bytes raw = body if type(body) is bytes else bytes(body)
    data = <const unsigned char*>PyBytes_AS_STRING(raw)
    end = PyBytes_GET_SIZE(raw)
    topic = ""
    cdef bytes topic_key = b""
    unset = _UNSET
    while pos < end:
        if pos + _HEAD_SIZE > end:
            pos = general(raw, pos, broker_name, out, inflate)  # a short tail: raises
            continue
        p = data + pos
        total = _i32_at(p)
        magic = _i32_at(p + _OFFSET_MAGIC)
        sys_flag = _i32_at(p + _OFFSET_SYS_FLAG)
        body_len = _i32_at(p + _OFFSET_BODY_LENGTH_V4)
        record_end = pos + total
        at = pos + _HEAD_SIZE + body_len
        if (
            sys_flag & _GENERAL_FLAGS
            or magic != _MAGIC_V1
            or record_end > end
            or body_len < 0
            or at + 3 > record_end
        ):
            pos = general(raw, pos, broker_name, out, inflate)
            continue
        topic_end = at + 1 + data[at]
        props_at = topic_end + 2
        if (
            props_at > record_end
            or data[topic_end] > 0x7F
            or props_at + ((data[topic_end] << 8) | data[topic_end + 1]) != record_end
        ):
            pos = general(raw, pos, broker_name, out, inflate)
            continue
        if topic_end - at != topic_len or memcmp(data + at, PyBytes_AS_STRING(topic_key), topic_len) != 0:
            topic_key = PyBytes_FromStringAndSize(<const char*>data + at, topic_end - at)
            topic_len = topic_end - at
            topic = PyUnicode_DecodeUTF8(<const char*>data + at + 1, topic_len - 1, "replace")
        # ReceivedMessage has no __new__ or __init__ of its own to skip: this is object's
        msg = new(message_type)
        tidemq_fill_slot(msg, _slot_at[_S_TOPIC], topic)
        tidemq_fill_slot(msg, _slot_at[_S_BODY], PyBytes_FromStringAndSize(<const char*>p + _HEAD_SIZE, body_len))
        tidemq_fill_slot(msg, _slot_at[_S_QUEUE_ID], _i32_at(p + _OFFSET_QUEUE_ID))
        tidemq_fill_slot(msg, _slot_at[_S_QUEUE_OFFSET], _be64(p + _OFFSET_QUEUE_OFFSET))
        tidemq_fill_slot(msg, _slot_at[_S_BROKER_NAME], broker_name)
        tidemq_fill_slot(msg, _slot_at[_S_STORE_TIMESTAMP], _be64(p + _OFFSET_STORE_TIMESTAMP_V4))
        tidemq_fill_slot(msg, _slot_at[_S_BORN_TIMESTAMP], _be64(p + _OFFSET_BORN_TIMESTAMP))
        tidemq_fill_slot(msg, _slot_at[_S_RECONSUME_TIMES], _i32_at(p + _OFFSET_RECONSUME_TIMES_V4))
        tidemq_fill_slot(msg, _slot_at[_S_COMMIT_LOG_OFFSET], _be64(p + _OFFSET_PHYSICAL_OFFSET))
        tidemq_fill_slot(msg, _slot_at[_S_SYS_FLAG], sys_flag)
        tidemq_fill_slot(msg, _slot_at[_S_FLAG], _i32_at(p + _OFFSET_FLAG))
        tidemq_fill_slot(
            msg,
            _slot_at[_S_RAW_PROPERTIES],
            PyBytes_FromStringAndSize(<const char*>data + props_at, record_end - props_at),
        )
        tidemq_fill_slot(msg, _slot_at[_S_RAW_BORN_HOST], PyBytes_FromStringAndSize(<const char*>p + _OFFSET_BORN_HOST, _HOST_V4_SIZE))
        tidemq_fill_slot(msg, _slot_at[_S_RAW_STORE_HOST], PyBytes_FromStringAndSize(<const char*>p + _OFFSET_STORE_HOST_V4, _HOST_V4_SIZE))
        tidemq_fill_slot(msg, _slot_at[_S_PROPERTIES], unset)
        tidemq_fill_slot(msg, _slot_at[_S_TAGS], unset)
        tidemq_fill_slot(msg, _slot_at[_S_KEYS], unset)
        tidemq_fill_slot(msg, _slot_at[_S_MSG_ID], unset)
        tidemq_fill_slot(msg, _slot_at[_S_OFFSET_MSG_ID], unset)
        tidemq_fill_slot(msg, _slot_at[_S_BORN_HOST], unset)
        tidemq_fill_slot(msg, _slot_at[_S_STORE_HOST], unset)
        # Out of the cyclic collector's sight, as CPython does with tuples and dicts of atomic
        # values: what a message holds (text, bytes, ints, the UNSET marker, and once decoded a
        # dict of text and a tuple of text) can never refer back to it. Messages waiting for a
        # listener thread were a good part of what each collection walked.
        PyObject_GC_UnTrack(msg)
        out.append(msg)
        pos = record_end
    for fields in inflate:
        fields.body = _inflate_body(fields.body)
        _frozen(fields)
    return out


# -- process queues: put_messages, forget_messages ----------------------------------------------
# client/consumer/process_queue.py. A decoded message's queue_offset and body are read from its slots;
# anything but a ReceivedMessage (or a list and a dict) goes the pure twin's way: attributes
# looked up by name, or the pure twin itself.

_PUT_PURE_KEY = "tidemq.client.consumer.process_queue.put_messages"
_FORGET_PURE_KEY = "tidemq.client.consumer.process_queue.forget_messages"


cdef inline object _field(object msg, int slot, str name):
    """`msg.<name>` (slot `slot` of a ReceivedMessage), raising what getattr raises."""
    cdef PyObject* value
    if type(msg) is _ReceivedMessageType:
        value = tidemq_slot_value(msg, _slot_at[slot])
        if value != NULL:
            return <object>value
    return getattr(msg, name)


def put_messages(object messages, object msgs, object highest):
    if type(messages) is not dict or type(msgs) is not list:
        return _PURE_TWINS[_PUT_PURE_KEY](messages, msgs, highest)
    if _received is None:
        _load_received()
    cdef dict table = <dict>messages
    cdef list added = []
    cdef Py_ssize_t before, size = 0
    for msg in <list>msgs:
        offset = _field(msg, _S_QUEUE_OFFSET, "queue_offset")
        before = len(table)
        table.setdefault(offset, msg)
        if len(table) != before:
            size += len(_field(msg, _S_BODY, "body"))
            added.append(msg)
        if offset > highest:
            highest = offset
    return added, size, highest


def forget_messages(object messages, object msgs):
    if type(messages) is not dict or type(msgs) is not list:
        return _PURE_TWINS[_FORGET_PURE_KEY](messages, msgs)
    if _received is None:
        _load_received()
    cdef dict table = <dict>messages
    cdef Py_ssize_t size = 0
    for msg in <list>msgs:
        if table.pop(_field(msg, _S_QUEUE_OFFSET, "queue_offset"), None) is not None:
            size += len(_field(msg, _S_BODY, "body"))
    return size

