# cython: language_level=3
"""Compiled twins of the remoting codec's per-request steps (see store/speedups.py).

Each function here has a pure-Python twin of the same name, the reference: same arguments, same
result, same exceptions (tests/unit/test_speedups_remoting.py checks it with hypothesis).

    _command_from_mapping  client/remoting/headers.py  a decoded JSON or msgpack header as a
                                                       RemotingCommand
    decode_send_header     client/protocol/headers.py  a send's extFields as its typed header

The fast path takes the header every client sends: integer fields that fit, a numeric language,
a text remark or none, extFields of text only. Anything else goes to the pure twin, which
converts it or raises as it always does.
"""

from tidemq.client.remoting.command import RemotingCommand as _Command
from tidemq.store.speedups import PURE_TWINS as _PURE_TWINS

_PURE_KEY = "tidemq.client.remoting.headers._command_from_mapping"


cdef inline bint _int32(object value):
    return type(value) is int and -2147483648 <= value <= 2147483647


cdef bint _text_only(dict fields):
    for key, value in fields.items():
        if type(key) is not str or type(value) is not str:
            return False
    return True


def _command_from_mapping(object obj, object body, object serialize_type, str fmt):
    cdef dict header
    if type(obj) is dict:
        header = <dict>obj
        code = header.get("code")
        version = header.get("version", 0)
        opaque = header.get("opaque")
        flag = header.get("flag", 0)
        language = header.get("language")
        remark = header.get("remark")
        ext = header.get("extFields")
        if (
            _int32(code)
            and _int32(version)
            and _int32(opaque)
            and _int32(flag)
            and type(language) is int
            and 0 <= language <= 255
            and (remark is None or type(remark) is str)
            and (ext is None or (type(ext) is dict and _text_only(<dict>ext)))
        ):
            return _Command(
                code,
                language,
                version,
                opaque,
                flag,
                remark,
                {} if ext is None else ext,
                body,
                serialize_type,
            )
    return _PURE_TWINS[_PURE_KEY](obj, body, serialize_type, fmt)


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


cdef inline object _int_or_none(object raw, object least, object most):
    """The int `raw` spells within [least, most]; None for anything the pure twin must judge."""
    if type(raw) is not str:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    if least <= value <= most:
        return value
    return None


cdef inline object _bool_or_none(object raw):
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    return None


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
