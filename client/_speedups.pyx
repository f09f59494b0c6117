# cython: language_level=3
"""Compiled twins of the remoting codec's per-request steps (see store/speedups.py).

Each function here has a pure-Python twin of the same name, the reference: same arguments, same
result, same exceptions (tests/unit/test_speedups_remoting.py checks it with hypothesis).

    _command_from_mapping  client/remoting/headers.py  a decoded JSON or msgpack header as a
                                                       RemotingCommand

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
