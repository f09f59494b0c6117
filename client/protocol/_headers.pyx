# cython: language_level=3
"""Compiled twin of the send header's decoding (store/common/speedups.py picks a twin).

    decode_send_header  client/protocol/headers.py  a send's extFields as its typed header
    send_v2_ext_fields  client/protocol/headers.py  a producer's send as its extFields
    check_message       client/validators.py        a message's checks before a send, as
                                                    most messages pass them

The pure twin is the reference: same arguments, same result, same exceptions
(tests/unit/test_speedups_remoting.py). decode_send_header is called for the header of every send
the broker takes (fields it cannot read in C go to the pure twin); send_v2_ext_fields for every
send a producer makes.
"""

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    void* PyUnicode_DATA(object text)
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1

include "../../store/common/_twins.pxi"

_SEND_PURE_KEY = "tidemq.client.protocol.headers.decode_send_header"
# Looked up at the first call: client/protocol/headers.py imports this module while it loads.
_SendHeader = None
# SendMessageRequestHeader's keys, in field order: its long (V1) and one-letter (V2) spellings.
_V1_KEYS = (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "batch",
    "maxReconsumeTimes",
)
_V2_KEYS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "l")


cdef inline object _int_or_none(object raw, long long least, long long most):
    """The int `raw` spells within [least, most]; None for anything the pure twin must judge.

    Plain decimals ([-]digits, up to 18 of them) are read in C; anything else int() accepts
    (a sign, spaces, underscores, other digits) goes through int()."""
    cdef Py_ssize_t size, i, start = 0
    cdef const char* text
    cdef long long value = 0
    cdef int overflow = 0
    if type(raw) is not str:
        return None
    if PyUnicode_IS_ASCII(raw):
        size = PyUnicode_GET_LENGTH(raw)
        text = <const char*>PyUnicode_DATA(raw)
        if size > 0 and text[0] == 45:  # "-"
            start = 1
        if 0 < size - start <= 18:
            for i in range(start, size):
                if not 48 <= text[i] <= 57:
                    break
                value = value * 10 + (text[i] - 48)
            else:
                if start:
                    value = -value
                return value if least <= value <= most else None
    try:
        number = int(raw)
    except ValueError:
        return None
    value = PyLong_AsLongLongAndOverflow(number, &overflow)
    if overflow == 0 and least <= value <= most:
        return number
    return None


cdef inline object _bool_or_none(object raw):
    """Java's lenient parseBoolean as store/common/schema.py's `_java_bool` reads it; None (the pure
    twin decides) for what is not text. rocketmq-client-cpp writes "0"/"1" on every send."""
    if raw is None:
        return False
    if type(raw) is not str:
        return None
    if raw == "true":
        return True
    if raw == "false" or raw == "0" or raw == "1":
        return False
    return raw.strip().lower() == "true"


def decode_send_header(dict ext, bint short_keys):
    global _SendHeader
    if _SendHeader is None:
        from tidemq.client.protocol.headers import SendMessageRequestHeader
        _SendHeader = SendMessageRequestHeader
    cdef tuple keys = _V2_KEYS if short_keys else _V1_KEYS
    group = ext.get(keys[0])
    topic = ext.get(keys[1])
    default_topic = ext.get(keys[2])
    properties = ext.get(keys[8])
    reconsume_raw = ext.get(keys[9])
    max_reconsume_raw = ext.get(keys[12])
    queue_nums = _int_or_none(ext.get(keys[3]), -2147483648, 2147483647)
    queue_id = _int_or_none(ext.get(keys[4]), -2147483648, 2147483647)
    sys_flag = _int_or_none(ext.get(keys[5]), -2147483648, 2147483647)
    born = _int_or_none(ext.get(keys[6]), -9223372036854775808, 9223372036854775807)
    flag = _int_or_none(ext.get(keys[7]), -2147483648, 2147483647)
    unit_mode = _bool_or_none(ext.get(keys[10]))
    batch = _bool_or_none(ext.get(keys[11]))
    if reconsume_raw is None:
        reconsume = None
        reconsume_ok = True
    else:
        reconsume = _int_or_none(reconsume_raw, -2147483648, 2147483647)
        reconsume_ok = reconsume is not None
    if max_reconsume_raw is None:
        max_reconsume = None
        max_reconsume_ok = True
    else:
        max_reconsume = _int_or_none(max_reconsume_raw, -2147483648, 2147483647)
        max_reconsume_ok = max_reconsume is not None
    if (
        type(group) is str
        and type(topic) is str
        and type(default_topic) is str
        and (properties is None or type(properties) is str)
        and queue_nums is not None
        and queue_id is not None
        and sys_flag is not None
        and born is not None
        and flag is not None
        and unit_mode is not None
        and batch is not None
        and reconsume_ok
        and max_reconsume_ok
    ):
        return _SendHeader(
            group,
            topic,
            default_topic,
            queue_nums,
            queue_id,
            sys_flag,
            born,
            flag,
            properties,
            reconsume,
            unit_mode,
            batch,
            max_reconsume,
        )
    return _PURE_TWINS[_SEND_PURE_KEY](ext, short_keys)


cdef extern from "Python.h":
    object PyDict_Copy(object d)
    object PyUnicode_FromStringAndSize(const char* data, Py_ssize_t size)

# A producer's send fields with their constant values, in key order: each send copies it (a
# copy of a dict of the same keys is one memcpy) and replaces the values that vary.
_SEND_V2_TEMPLATE = {
    "a": "", "b": "", "c": "", "d": "", "e": "", "f": "", "g": "", "h": "", "i": "",
    "j": "0", "k": "false", "m": "false",
}


cdef object _decimal(object value):
    """str(value), in C for an int (not a subclass: its own __str__ is kept) of 64 bits."""
    cdef char digits[24]
    cdef int overflow = 0, at = 24
    cdef long long number
    cdef unsigned long long rest
    if type(value) is not int:
        return str(value)
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0:
        return str(value)
    rest = <unsigned long long>(-(number + 1)) + 1 if number < 0 else <unsigned long long>number
    while True:
        at -= 1
        digits[at] = <char>(48 + rest % 10)
        rest //= 10
        if rest == 0:
            break
    if number < 0:
        at -= 1
        digits[at] = 45  # "-"
    return PyUnicode_FromStringAndSize(digits + at, 24 - at)


def send_v2_ext_fields(
    object producer_group,
    object topic,
    object default_topic,
    object default_topic_queue_nums,
    object queue_id,
    object sys_flag,
    object born_timestamp,
    object flag,
    object properties,
    object batch,
):
    # The pure twin's dict, key for key and in its order, from a copy of the template.
    cdef dict ext = PyDict_Copy(_SEND_V2_TEMPLATE)
    ext["a"] = producer_group
    ext["b"] = topic
    ext["c"] = default_topic
    ext["d"] = _decimal(default_topic_queue_nums)
    ext["e"] = _decimal(queue_id)
    ext["f"] = _decimal(sys_flag)
    ext["g"] = _decimal(born_timestamp)
    ext["h"] = _decimal(flag)
    if properties is None:
        del ext["i"]
    else:
        ext["i"] = properties
    if batch:
        ext["m"] = "true"
    return ext


# -- a message's check before a send (client/validators.py) -------------------------------------

_CHECK_PURE_KEY = "tidemq.client.validators.check_message"
cdef object _validators = None  # client/validators.py (it imports this module): at first use
cdef long long _LONG_LEAST = -0x7FFFFFFFFFFFFFFF - 1


cdef inline bint _plain_text(object text):
    """A str of printable ASCII only (what `str.isascii() and str.isprintable()` accepts: the
    characters from space to "~")."""
    cdef Py_ssize_t i, size
    cdef const unsigned char* data
    if type(text) is not str or not PyUnicode_IS_ASCII(text):
        return False
    size = PyUnicode_GET_LENGTH(text)
    data = <const unsigned char*>PyUnicode_DATA(text)
    for i in range(size):
        if not 32 <= data[i] <= 126:
            return False
    return True


cdef inline bint _int_within(object value, long long least, long long most):
    cdef int overflow = 0
    cdef long long number
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and least <= number <= most


def check_message(object msg, object max_size=None):
    """The pure twin's checks of a message as most sends have it (a Message, a topic checked
    before, a bytes body within the limit, printable ASCII text, int fields in range), in C:
    None when every field passes them; anything else goes to the pure twin, which accepts it,
    replaces a one-shot `keys`, or raises naming the field."""
    global _validators
    cdef dict properties
    if _validators is None:
        import importlib
        _validators = importlib.import_module("tidemq.client.validators")
    if type(msg) is not _validators.Message:
        return _pure(_CHECK_PURE_KEY)(msg, max_size)
    topic = msg.topic
    body = msg.body
    tags = msg.tags
    keys = msg.keys
    props = msg.properties
    when = msg.deliver_at_ms
    delay = msg.delay_ms
    if (
        type(topic) is not str
        or topic not in _validators._valid_topics
        or type(body) is not bytes
        or not (max_size is None or _int_within(max_size, 0, 0x7FFFFFFFFFFFFFFF))
        or (max_size is not None and len(<bytes>body) > <long long>max_size)
        or not (tags is None or _plain_text(tags))
        or not (keys is None or _plain_text(keys))
        or type(props) is not dict
        or not _int_within(msg.delay_level, -2147483648, 2147483647)
        or not _int_within(msg.flag, -2147483648, 2147483647)
        or not (when is None or _int_within(when, _LONG_LEAST, 0x7FFFFFFFFFFFFFFF))
        or not (delay is None or _int_within(delay, _LONG_LEAST, 0x7FFFFFFFFFFFFFFF))
    ):
        return _pure(_CHECK_PURE_KEY)(msg, max_size)
    properties = <dict>props
    for name, value in properties.items():
        if not (_plain_text(name) and _plain_text(value)):
            return _pure(_CHECK_PURE_KEY)(msg, max_size)
    return None
