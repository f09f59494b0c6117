# cython: language_level=3
"""Compiled twins of the remoting codec's per-request steps (store/common/speedups.py picks a twin).

    _command_from_mapping  client/remoting/headers.py  a decoded JSON or msgpack header as a
                                                       RemotingCommand
    decode_msgpack_header  client/remoting/headers.py  a msgpack header as a RemotingCommand
    encode_msgpack_header  client/remoting/headers.py  a RemotingCommand's msgpack header
    decode_json_header     client/remoting/headers.py  a JSON header as a RemotingCommand
    encode_json_header     client/remoting/headers.py  a RemotingCommand's JSON header
    encode_command_parts   client/remoting/frame.py    a msgpack or JSON command's prefix and
                                                       header, and its body
    parse_frames           client/remoting/frame.py    the whole frames of a read as commands
    signing_key            client/remoting/signing.py  an account's HMAC-SHA1 key: an `_HmacSha1`
                                                       (below), whose state the signers and
                                                       checks here copy onto the stack
    signed_content_digest  client/remoting/signing.py  the HMAC of a signed request's content
    signature_matches      client/remoting/signing.py  a signed request's Signature checked
    encode_send_head       client/protocol/send_frame.py  a producer's send frame head from its
                                                       topic's template
    encode_signed_send_head  client/protocol/send_frame.py  the same of a signed send, its
                                                       HMAC fed only what varies
    send_result            client/message.py           a send's SendResult, its slots written

Each has a pure-Python twin of the same name, the reference: same arguments, same result, same
exceptions (tests/unit/test_speedups_remoting.py and test_speedups_*_headers.py check it with
hypothesis). The fast path takes the header every client sends: integer fields that fit, a
numeric language, a text remark or none, extFields of text only. Anything else goes to the pure
twin, which converts it or raises as it always does.
"""

from tidemq.client.remoting.command import RemotingCommand as _Command

include "../../store/common/_twins.pxi"
include "../../store/common/_bigendian.pxi"
include "../../store/common/_slots.pxi"


_PURE_KEY = "tidemq.client.remoting.headers._command_from_mapping"


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1


cdef inline bint _int_in(object value, long long least, long long most):
    """`value` is an int (not a bool) within [least, most], compared in C."""
    cdef int overflow = 0
    cdef long long number
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and least <= number <= most


cdef inline bint _int32(object value):
    return _int_in(value, -2147483648, 2147483647)


from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF


# RemotingCommand's fields in its dataclass order, as its __init__ sets them.
_COMMAND_FIELDS = (
    "code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body",
    "serialize_type", "body_views",
)
cdef enum:
    _COMMAND_FIELD_COUNT = 10
# Where each field's slot is in a RemotingCommand (its member descriptor's offset); found at
# the first decode. -1: not found as plain object slots, and commands are made by the class.
cdef Py_ssize_t _command_slots[_COMMAND_FIELD_COUNT]
cdef int _command_slots_state = 0  # 0: not looked up yet, 1: found, -1: not usable





cdef int _find_command_slots():
    """Whether RemotingCommand's fields are the writable object slots of its __slots__ (a
    dataclass with slots=True, no __post_init__, no __setattr__ of its own), with their
    offsets."""
    global _command_slots_state
    usable = (
        type(_Command).__setattr__ is type.__setattr__
        and _Command.__setattr__ is object.__setattr__
        and _find_slots(_Command, _COMMAND_FIELDS, _command_slots, False)
    )
    _command_slots_state = 1 if usable else -1
    return _command_slots_state


cdef inline void _put_slot(object command, int index, object value) noexcept:
    _put_at(command, _command_slots[index], value)


cdef object _new_command(
    object code, object language, object version, object opaque, object flag, object remark,
    object ext, object body, object serialize_type
):
    """RemotingCommand(code, ..., serialize_type), the object its dataclass __init__ makes:
    each field's slot written in C (the __init__ is a Python frame of its own, and setting
    its ten attributes one by one costs as much), or through the class when its fields are
    not the plain slots this expects."""
    if _command_slots_state <= 0 and (_command_slots_state < 0 or _find_command_slots() < 0):
        return _Command(code, language, version, opaque, flag, remark, ext, body, serialize_type)
    command = _Command.__new__(_Command)
    _put_slot(command, 0, code)
    _put_slot(command, 1, language)
    _put_slot(command, 2, version)
    _put_slot(command, 3, opaque)
    _put_slot(command, 4, flag)
    _put_slot(command, 5, remark)
    _put_slot(command, 6, ext)
    _put_slot(command, 7, body)
    _put_slot(command, 8, serialize_type)
    _put_slot(command, 9, ())
    return command


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

# -- msgpack headers --------------------------------------------------------------------------
# The header map as tidemq writes it (client/remoting/headers.py): str keys, int fields that fit
# 32 bits, a str remark or none, extFields of str to str. Anything else (other types, unknown
# or repeated keys, damaged bytes) goes to the pure twin, which decodes it through msgpack or
# raises its error.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy, memset
from libc.stdint cimport uint64_t
from libc.stdlib cimport malloc, free
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

_DECODE_PURE_KEY = "tidemq.client.remoting.headers.decode_msgpack_header"
_ENCODE_PURE_KEY = "tidemq.client.remoting.headers.encode_msgpack_header"
_MSGPACK = None  # SerializeType.MSGPACK, looked up at the first call (see decode_send_header)

# key bits: which header keys a map had (a repeated one goes to the pure twin)
cdef enum:
    _CODE = 1
    _LANGUAGE = 2
    _VERSION = 4
    _OPAQUE = 8
    _FLAG = 16
    _REMARK = 32
    _EXT = 64
    _JAVA_ONLY = 128  # serializeTypeCurrentRPC, which Java writes in JSON headers


cdef int _header_key_bit(const unsigned char* key, Py_ssize_t size) noexcept:
    """The bit of a header key given as its UTF-8 bytes; 0 for a key the fast paths do not read."""
    if size == 4 and memcmp(key, b"code", 4) == 0:
        return _CODE
    if size == 8 and memcmp(key, b"language", 8) == 0:
        return _LANGUAGE
    if size == 7 and memcmp(key, b"version", 7) == 0:
        return _VERSION
    if size == 6 and memcmp(key, b"opaque", 6) == 0:
        return _OPAQUE
    if size == 4 and memcmp(key, b"flag", 4) == 0:
        return _FLAG
    if size == 6 and memcmp(key, b"remark", 6) == 0:
        return _REMARK
    if size == 9 and memcmp(key, b"extFields", 9) == 0:
        return _EXT
    if size == 23 and memcmp(key, b"serializeTypeCurrentRPC", 23) == 0:
        return _JAVA_ONLY
    return 0


cdef struct _Cursor:
    const unsigned char* data
    Py_ssize_t pos
    Py_ssize_t end


cdef inline bint _take(_Cursor* cur, Py_ssize_t count, const unsigned char** out) noexcept:
    if cur.end - cur.pos < count:
        return False
    out[0] = cur.data + cur.pos
    cur.pos += count
    return True


cdef inline bint _read_uint(_Cursor* cur, int width, unsigned long long* out) noexcept:
    cdef const unsigned char* p
    cdef unsigned long long value = 0
    cdef int i
    if not _take(cur, width, &p):
        return False
    for i in range(width):
        value = (value << 8) | p[i]
    out[0] = value
    return True


cdef bint _read_int32(_Cursor* cur, long long* out) noexcept:
    """An int of msgpack's forms up to 32 bits whose value fits a signed 32-bit int."""
    cdef const unsigned char* p
    cdef unsigned long long raw
    cdef unsigned char first
    if not _take(cur, 1, &p):
        return False
    first = p[0]
    if first <= 0x7F:
        out[0] = first
    elif first >= 0xE0:
        out[0] = <long long>first - 256
    elif first == 0xCC or first == 0xCD or first == 0xCE:
        if not _read_uint(cur, 1 << (first - 0xCC), &raw) or raw > 2147483647:
            return False
        out[0] = <long long>raw
    elif first == 0xD0:
        if not _read_uint(cur, 1, &raw):
            return False
        out[0] = <long long>raw - 256 if raw >= 0x80 else <long long>raw
    elif first == 0xD1:
        if not _read_uint(cur, 2, &raw):
            return False
        out[0] = <long long>raw - 65536 if raw >= 0x8000 else <long long>raw
    elif first == 0xD2:
        if not _read_uint(cur, 4, &raw):
            return False
        out[0] = <long long>raw - 4294967296 if raw >= 0x80000000 else <long long>raw
    else:
        return False
    return True


cdef bint _read_str_len(_Cursor* cur, Py_ssize_t* out) noexcept:
    cdef const unsigned char* p
    cdef unsigned long long raw
    cdef unsigned char first
    if not _take(cur, 1, &p):
        return False
    first = p[0]
    if 0xA0 <= first <= 0xBF:
        out[0] = first & 0x1F
        return True
    if first == 0xD9 or first == 0xDA or first == 0xDB:
        if not _read_uint(cur, 1 << (first - 0xD9), &raw):
            return False
        out[0] = <Py_ssize_t>raw
        return True
    return False


# Short texts seen before (extFields keys, and values such as a topic, a group, "true",
# "DefaultRegion"), kept by their UTF-8 bytes in a small direct-mapped table: a header repeats
# most of its texts request after request, and reusing the str (immutable) saves making it.
cdef enum:
    _CACHED_TEXT_MAX = 24
    _CACHED_TEXT_SLOTS = 1024


cdef struct _CachedText:
    Py_ssize_t size
    char text[_CACHED_TEXT_MAX]
    PyObject* value


cdef _CachedText _cached_texts[_CACHED_TEXT_SLOTS]


cdef object _utf8_text(const unsigned char* p, Py_ssize_t size):
    """The str of UTF-8 bytes (UnicodeDecodeError if they are not), reused when seen before."""
    cdef uint64_t head = 0, tail = 0
    cdef _CachedText* slot
    if size > _CACHED_TEXT_MAX:
        return PyUnicode_DecodeUTF8(<const char*>p, size, NULL)
    # The slot from the first and last 8 bytes and the size (the whole text when shorter): two
    # loads instead of a step per byte. A collision only costs a decode.
    if size >= 8:
        memcpy(&head, p, 8)
        memcpy(&tail, p + size - 8, 8)
    else:
        memcpy(&head, p, size)
    head = (head * 0x9E3779B97F4A7C15ULL) ^ (tail * 0xC2B2AE3D27D4EB4FULL) ^ <uint64_t>size
    slot = &_cached_texts[(head >> 32) % _CACHED_TEXT_SLOTS]
    if slot.value != NULL and slot.size == size and memcmp(slot.text, p, size) == 0:
        return <object>slot.value
    value = PyUnicode_DecodeUTF8(<const char*>p, size, NULL)
    Py_XDECREF(slot.value)
    Py_INCREF(value)
    slot.value = <PyObject*>value
    slot.size = size
    memcpy(slot.text, p, size)
    return value


cdef object _read_str(_Cursor* cur):
    """A str value, or None when the next object is not valid UTF-8 text."""
    cdef Py_ssize_t size
    cdef const unsigned char* p
    if not _read_str_len(cur, &size) or not _take(cur, size, &p):
        return None
    try:
        return _utf8_text(p, size)
    except UnicodeDecodeError:
        return None


cdef bint _read_map_len(_Cursor* cur, Py_ssize_t* out) noexcept:
    cdef const unsigned char* p
    cdef unsigned long long raw
    if not _take(cur, 1, &p):
        return False
    if 0x80 <= p[0] <= 0x8F:
        out[0] = p[0] & 0x0F
        return True
    if p[0] == 0xDE or p[0] == 0xDF:
        if not _read_uint(cur, 2 if p[0] == 0xDE else 4, &raw):
            return False
        out[0] = <Py_ssize_t>raw
        return True
    return False


cdef object _read_ext(_Cursor* cur):
    cdef Py_ssize_t count, i
    cdef dict ext
    if not _read_map_len(cur, &count):
        return None
    ext = {}
    for i in range(count):
        key = _read_str(cur)
        if key is None:
            return None
        value = _read_str(cur)
        if value is None:
            return None
        ext[key] = value
    return ext


cdef object _decode_fast(const unsigned char* data, Py_ssize_t size, object body):
    cdef _Cursor cur
    cdef Py_ssize_t count, i, key_len
    cdef const unsigned char* key
    cdef int seen = 0, bit
    cdef long long number
    cdef long long code = 0, language = 0, version = 0, opaque = 0, flag = 0
    remark = None
    ext = None
    cur.data = data
    cur.pos = 0
    cur.end = size
    if not _read_map_len(&cur, &count):
        return None
    for i in range(count):
        if not _read_str_len(&cur, &key_len) or not _take(&cur, key_len, &key):
            return None
        bit = _header_key_bit(key, key_len)
        if bit == 0 or bit == _JAVA_ONLY:
            return None
        if seen & bit:
            return None
        seen |= bit
        if bit == _REMARK:
            if cur.pos < cur.end and cur.data[cur.pos] == 0xC0:  # nil
                cur.pos += 1
            else:
                remark = _read_str(&cur)
                if remark is None:
                    return None
        elif bit == _EXT:
            if cur.pos < cur.end and cur.data[cur.pos] == 0xC0:
                cur.pos += 1
            else:
                ext = _read_ext(&cur)
                if ext is None:
                    return None
        else:
            if not _read_int32(&cur, &number):
                return None
            if bit == _CODE:
                code = number
            elif bit == _LANGUAGE:
                if not 0 <= number <= 255:
                    return None
                language = number
            elif bit == _VERSION:
                version = number
            elif bit == _OPAQUE:
                opaque = number
            else:
                flag = number
    if cur.pos != cur.end or not (seen & _CODE) or not (seen & _OPAQUE):
        return None
    return _new_command(
        code, language, version, opaque, flag, remark, {} if ext is None else ext, body, _MSGPACK
    )


def decode_msgpack_header(object data, object body=b""):
    global _MSGPACK
    cdef Py_buffer view
    if _MSGPACK is None:
        from tidemq.client.remoting.codes import SerializeType
        _MSGPACK = SerializeType.MSGPACK
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _PURE_TWINS[_DECODE_PURE_KEY](data, body)
    try:
        command = _decode_fast(<const unsigned char*>view.buf, view.len, body)
    finally:
        PyBuffer_Release(&view)
    if command is None:
        return _PURE_TWINS[_DECODE_PURE_KEY](data, body)
    return command


# -- encoding: msgpack's smallest forms, as msgpack's Packer writes them ------------------------

cdef inline Py_ssize_t _int_size(long long value) noexcept:
    if -32 <= value <= 127:
        return 1
    if value < 0:
        return 2 if value >= -128 else (3 if value >= -32768 else 5)
    return 2 if value <= 0xFF else (3 if value <= 0xFFFF else 5)


cdef inline Py_ssize_t _str_head_size(Py_ssize_t size) noexcept:
    return 1 if size <= 31 else (2 if size <= 0xFF else (3 if size <= 0xFFFF else 5))


cdef inline Py_ssize_t _map_head_size(Py_ssize_t count) noexcept:
    return 1 if count <= 15 else (3 if count <= 0xFFFF else 5)


cdef inline unsigned char* _put_be(unsigned char* out, unsigned long long value, int width) noexcept:
    cdef int i
    for i in range(width):
        out[i] = <unsigned char>(value >> (8 * (width - 1 - i)))
    return out + width


cdef unsigned char* _put_int(unsigned char* out, long long value) noexcept:
    if -32 <= value <= 127:
        out[0] = <unsigned char>(value & 0xFF)
        return out + 1
    if value < 0:
        if value >= -128:
            out[0] = 0xD0
            return _put_be(out + 1, <unsigned long long>(value & 0xFF), 1)
        if value >= -32768:
            out[0] = 0xD1
            return _put_be(out + 1, <unsigned long long>(value & 0xFFFF), 2)
        out[0] = 0xD2
        return _put_be(out + 1, <unsigned long long>(value & 0xFFFFFFFF), 4)
    if value <= 0xFF:
        out[0] = 0xCC
        return _put_be(out + 1, <unsigned long long>value, 1)
    if value <= 0xFFFF:
        out[0] = 0xCD
        return _put_be(out + 1, <unsigned long long>value, 2)
    out[0] = 0xCE
    return _put_be(out + 1, <unsigned long long>value, 4)


cdef unsigned char* _put_str(unsigned char* out, const char* text, Py_ssize_t size) noexcept:
    if size <= 31:
        out[0] = <unsigned char>(0xA0 | size)
        out += 1
    elif size <= 0xFF:
        out[0] = 0xD9
        out = _put_be(out + 1, <unsigned long long>size, 1)
    elif size <= 0xFFFF:
        out[0] = 0xDA
        out = _put_be(out + 1, <unsigned long long>size, 2)
    else:
        out[0] = 0xDB
        out = _put_be(out + 1, <unsigned long long>size, 4)
    memcpy(out, text, size)
    return out + size


cdef unsigned char* _put_map_head(unsigned char* out, Py_ssize_t count) noexcept:
    if count <= 15:
        out[0] = <unsigned char>(0x80 | count)
        return out + 1
    if count <= 0xFFFF:
        out[0] = 0xDE
        return _put_be(out + 1, <unsigned long long>count, 2)
    out[0] = 0xDF
    return _put_be(out + 1, <unsigned long long>count, 4)


cdef bint _encodable_fields(
    object code, object language, object version, object opaque, object flag, object remark,
    object ext
):
    """The fields the compiled encoders write as they are: 32-bit ints, a language byte, a str
    remark or none, a dict of extFields (its items are checked by `_utf8_pairs`)."""
    return (
        _int32(code)
        and _int32(version)
        and _int32(opaque)
        and _int32(flag)
        and _int_in(language, 0, 255)
        and (remark is None or type(remark) is str)
        and type(ext) is dict
    )


cdef bint _utf8_pairs(dict fields, const char** texts, Py_ssize_t* lengths):
    """Each key and value of `fields` as UTF-8 (texts and lengths, key then value); False when
    one is not a str or not encodable (a lone surrogate), or the dict changed size."""
    cdef Py_ssize_t i = 0, count = len(fields)
    for key, value in fields.items():
        if type(key) is not str or type(value) is not str or i >= 2 * count:
            return False
        try:
            texts[i] = PyUnicode_AsUTF8AndSize(key, &lengths[i])
            texts[i + 1] = PyUnicode_AsUTF8AndSize(value, &lengths[i + 1])
        except UnicodeEncodeError:
            return False
        i += 2
    return True


cdef object _encode_fast(object cmd, Py_ssize_t body_len=-1):
    """The header's bytes; with `body_len` >= 0, after the frame's 8-byte prefix for that body."""
    code, language, version, opaque, flag = cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag
    remark, ext = cmd.remark, cmd.ext_fields
    if not _encodable_fields(code, language, version, opaque, flag, remark, ext):
        return None
    cdef dict fields = <dict>ext
    cdef Py_ssize_t count = len(fields), i = 0, size, remark_len = 0, total
    cdef const char* remark_text = NULL
    cdef const char** texts
    cdef Py_ssize_t* lengths
    cdef unsigned char* out
    cdef Py_ssize_t prefix_len
    cdef long long c = code, l = language, v = version, o = opaque, f = flag
    total = 1 + 5 + _int_size(c) + 9 + _int_size(l) + 8 + _int_size(v) + 7 + _int_size(o)
    total += 5 + _int_size(f)
    if remark is not None:
        try:
            remark_text = PyUnicode_AsUTF8AndSize(remark, &remark_len)
        except UnicodeEncodeError:
            return None
        total += 7 + _str_head_size(remark_len) + remark_len
    texts = <const char**>malloc(2 * count * sizeof(const char*) + 1)
    lengths = <Py_ssize_t*>malloc(2 * count * sizeof(Py_ssize_t) + 1)
    if texts == NULL or lengths == NULL:
        free(texts)
        free(lengths)
        raise MemoryError()
    try:
        if not _utf8_pairs(fields, texts, lengths):
            return None
        for i in range(2 * count):
            total += _str_head_size(lengths[i]) + lengths[i]
        if count:
            total += 10 + _map_head_size(count)
        prefix_len = 0
        if body_len >= 0:
            # the frame's length word is a signed 32-bit int, the header length 24 bits
            if total > 0xFFFFFF or 4 + total + body_len > 2147483647:
                return None
            prefix_len = 8
        packed = PyBytes_FromStringAndSize(NULL, prefix_len + total)
        out = <unsigned char*>PyBytes_AS_STRING(packed)
        if prefix_len:
            out = _put_be(out, <unsigned long long>(4 + total + body_len), 4)
            out = _put_be(out, <unsigned long long>((2 << 24) | total), 4)
        out = _put_map_head(out, 5 + (remark is not None) + (count > 0))
        out = _put_int(_put_str(out, b"code", 4), c)
        out = _put_int(_put_str(out, b"language", 8), l)
        out = _put_int(_put_str(out, b"version", 7), v)
        out = _put_int(_put_str(out, b"opaque", 6), o)
        out = _put_int(_put_str(out, b"flag", 4), f)
        if remark is not None:
            out = _put_str(_put_str(out, b"remark", 6), remark_text, remark_len)
        if count:
            out = _put_map_head(_put_str(out, b"extFields", 9), count)
            for i in range(0, 2 * count, 2):
                out = _put_str(out, texts[i], lengths[i])
                out = _put_str(out, texts[i + 1], lengths[i + 1])
        assert out == <unsigned char*>PyBytes_AS_STRING(packed) + prefix_len + total
        return packed
    finally:
        free(texts)
        free(lengths)


def encode_msgpack_header(object cmd):
    packed = _encode_fast(cmd)
    if packed is None:
        return _PURE_TWINS[_ENCODE_PURE_KEY](cmd)
    return packed


_PARTS_PURE_KEY = "tidemq.client.remoting.frame.encode_command_parts"


def encode_command_parts(object cmd):
    global _MSGPACK
    if _MSGPACK is None:
        from tidemq.client.remoting.codes import SerializeType
        _MSGPACK = SerializeType.MSGPACK
    cdef Py_ssize_t body_len
    body = cmd.body
    if type(body) is bytes:
        body_len = len(<bytes>body)
        views = cmd.body_views
        if views:
            if type(views) is not tuple:
                return _PURE_TWINS[_PARTS_PURE_KEY](cmd)
            for view in <tuple>views:
                if type(view) is not memoryview:
                    return _PURE_TWINS[_PARTS_PURE_KEY](cmd)
                body_len += (<memoryview>view).nbytes
        kind = cmd.serialize_type
        if kind is _MSGPACK:
            head = _encode_fast(cmd, body_len)
            if head is not None:
                return head, body
        elif kind is _JSON or (_JSON is None and kind == 0):
            if _JSON is None:
                _json_setup()
            head = _encode_json_fast(cmd, body_len)
            if head is not None:
                return head, body
    return _PURE_TWINS[_PARTS_PURE_KEY](cmd)


# -- frames -----------------------------------------------------------------------------------

_FRAMES_PURE_KEY = "tidemq.client.remoting.frame.parse_frames"
_check_prefix = None  # client/remoting/frame.py's checks, which raise the errors
_check_length = None
_decode_header = None


def parse_frames(object view, Py_ssize_t max_frame_size):
    global _check_prefix, _check_length, _decode_header, _MSGPACK
    cdef Py_buffer buffer
    cdef const unsigned char* data
    cdef Py_ssize_t pos = 0, end, frame_end, header_end, header_len
    cdef long long length, word
    cdef list commands = []
    if _decode_header is None:
        from tidemq.client.remoting import frame, headers
        from tidemq.client.remoting.codes import SerializeType
        _check_prefix, _check_length = frame._check_prefix, frame._check_length
        _decode_header = headers.decode_header
        _MSGPACK = SerializeType.MSGPACK
    try:
        PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _PURE_TWINS[_FRAMES_PURE_KEY](view, max_frame_size)
    try:
        data = <const unsigned char*>buffer.buf
        end = buffer.len
        while end - pos >= 8:
            length = _be32(data + pos)
            if length >= 0x80000000:
                length -= 0x100000000
            word = _be32(data + pos + 4)
            header_len = word & 0xFFFFFF
            if length < 4 or length > max_frame_size or header_len > length - 4 or word >> 24 >= 3:
                _check_prefix(length, word, max_frame_size)  # raises the error
            frame_end = pos + 4 + <Py_ssize_t>length
            if frame_end > end:
                break
            header_end = pos + 8 + header_len
            if header_end < frame_end:
                body = PyBytes_FromStringAndSize(<const char*>data + header_end, frame_end - header_end)
            else:
                body = b""
            command = None
            if word >> 24 == 2:
                command = _decode_fast(data + pos + 8, header_len, body)
            elif word >> 24 == 0:
                if _JSON is None:
                    _json_setup()
                command = _decode_json_fast(data + pos + 8, header_len, body)
            if command is None:
                command = _decode_header(word >> 24, view[pos + 8 : header_end], body)
            commands.append(command)
            pos = frame_end
        if end - pos >= 4:
            length = _be32(data + pos)
            if length >= 0x80000000:
                length -= 0x100000000
            if length < 4 or length > max_frame_size:
                _check_length(length, max_frame_size)
    finally:
        PyBuffer_Release(&buffer)
    return commands, pos


# -- JSON headers -----------------------------------------------------------------------------
# The header as RocketMQ clients write it (the C++ client: unquoted numbers among extFields, a
# trailing newline): an object of known keys whose numbers are integers; strings may have
# escapes (properties hold \u0001 and \u0002). Anything else (lone surrogates, floats,
# nesting, null fields, unknown or repeated keys, damaged text) goes to the pure twin, which
# parses it with the json module or raises.

_JSON_DECODE_PURE_KEY = "tidemq.client.remoting.headers.decode_json_header"
_JSON_ENCODE_PURE_KEY = "tidemq.client.remoting.headers.encode_json_header"
_JSON = None  # SerializeType.JSON
_LANGUAGE_BY_NAME = None  # name -> number, from LanguageCode
_LANGUAGE_NAME_BYTES = None  # number -> name as UTF-8, from LanguageCode
cdef int _OTHER_LANGUAGE = 7


cdef _json_setup():
    global _JSON, _LANGUAGE_BY_NAME, _LANGUAGE_NAME_BYTES, _OTHER_LANGUAGE
    from tidemq.client.remoting.codes import LanguageCode, SerializeType
    _JSON = SerializeType.JSON
    _LANGUAGE_BY_NAME = {language.name: int(language) for language in LanguageCode}
    _LANGUAGE_NAME_BYTES = tuple(language.name.encode() for language in LanguageCode)
    _OTHER_LANGUAGE = int(LanguageCode.OTHER)


# The bytes that end a plain run in a JSON string: the closing quote, a backslash, a control
# character. One table lookup per byte instead of three comparisons.
cdef unsigned char _JSON_STOPS[256]
for _byte in range(256):
    _JSON_STOPS[_byte] = 1 if _byte < 32 or _byte == 34 or _byte == 92 else 0


cdef inline void _json_space(_Cursor* cur) noexcept:
    cdef unsigned char c
    while cur.pos < cur.end:
        c = cur.data[cur.pos]
        if c == 32 or c == 9 or c == 10 or c == 13:
            cur.pos += 1
        else:
            return


cdef inline bint _json_char(_Cursor* cur, unsigned char wanted) noexcept:
    _json_space(cur)
    if cur.pos < cur.end and cur.data[cur.pos] == wanted:
        cur.pos += 1
        return True
    return False


cdef bint _json_raw_string(_Cursor* cur, const unsigned char** start, Py_ssize_t* size) noexcept:
    """A string without escapes or control characters; its bytes between the quotes."""
    cdef Py_ssize_t at
    cdef unsigned char c
    if not _json_char(cur, 34):  # '"'
        return False
    at = cur.pos
    while at < cur.end:
        c = cur.data[at]
        if c == 34:
            start[0] = cur.data + cur.pos
            size[0] = at - cur.pos
            cur.pos = at + 1
            return True
        if c == 92 or c < 32:  # an escape or a control character: the json module decides
            return False
        at += 1
    return False


cdef inline int _hex_digit(unsigned char c) noexcept:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef Py_ssize_t _json_hex4(const unsigned char* p) noexcept:
    """The value of four hex digits, or -1."""
    cdef int i, digit
    cdef Py_ssize_t value = 0
    for i in range(4):
        digit = _hex_digit(p[i])
        if digit < 0:
            return -1
        value = value * 16 + digit
    return value


cdef unsigned char* _put_utf8(unsigned char* out, Py_ssize_t code) noexcept:
    if code < 0x80:
        out[0] = <unsigned char>code
        return out + 1
    if code < 0x800:
        out[0] = <unsigned char>(0xC0 | (code >> 6))
        out[1] = <unsigned char>(0x80 | (code & 0x3F))
        return out + 2
    if code < 0x10000:
        out[0] = <unsigned char>(0xE0 | (code >> 12))
        out[1] = <unsigned char>(0x80 | ((code >> 6) & 0x3F))
        out[2] = <unsigned char>(0x80 | (code & 0x3F))
        return out + 3
    out[0] = <unsigned char>(0xF0 | (code >> 18))
    out[1] = <unsigned char>(0x80 | ((code >> 12) & 0x3F))
    out[2] = <unsigned char>(0x80 | ((code >> 6) & 0x3F))
    out[3] = <unsigned char>(0x80 | (code & 0x3F))
    return out + 4


cdef object _json_escaped_string(_Cursor* cur):
    """A string with escapes, its opening quote read: unescaped into UTF-8, then decoded.
    None for what the json module must judge (a lone surrogate, a bad escape, a control
    character, no closing quote)."""
    cdef Py_ssize_t at = cur.pos, code, low
    cdef unsigned char c
    cdef unsigned char* buffer = <unsigned char*>malloc(cur.end - cur.pos + 1)
    cdef unsigned char* out = buffer
    if buffer == NULL:
        raise MemoryError()
    try:
        while at < cur.end:
            c = cur.data[at]
            if c == 34:
                cur.pos = at + 1
                try:
                    return PyUnicode_DecodeUTF8(<const char*>buffer, out - buffer, NULL)
                except UnicodeDecodeError:
                    return None
            if c < 32:
                return None
            if c != 92:
                out[0] = c
                out += 1
                at += 1
                continue
            if at + 1 >= cur.end:
                return None
            c = cur.data[at + 1]
            at += 2
            if c == 34 or c == 92 or c == 47:
                out[0] = c
            elif c == 98:
                out[0] = 8
            elif c == 102:
                out[0] = 12
            elif c == 110:
                out[0] = 10
            elif c == 114:
                out[0] = 13
            elif c == 116:
                out[0] = 9
            elif c == 117:
                if cur.end - at < 4:
                    return None
                code = _json_hex4(cur.data + at)
                at += 4
                if code < 0:
                    return None
                if 0xD800 <= code <= 0xDBFF:
                    # a surrogate pair is one character; a lone surrogate is not UTF-8
                    if cur.end - at < 6 or cur.data[at] != 92 or cur.data[at + 1] != 117:
                        return None
                    low = _json_hex4(cur.data + at + 2)
                    if not 0xDC00 <= low <= 0xDFFF:
                        return None
                    at += 6
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                elif 0xDC00 <= code <= 0xDFFF:
                    return None
                out = _put_utf8(out, code)
                continue
            else:
                return None
            out += 1
        return None
    finally:
        free(buffer)


cdef object _json_string(_Cursor* cur):
    cdef const unsigned char* start
    cdef Py_ssize_t at, size
    cdef unsigned char c
    if not _json_char(cur, 34):  # '"'
        return None
    at = cur.pos
    while at < cur.end:
        c = cur.data[at]
        if not _JSON_STOPS[c]:
            at += 1
            continue
        if c == 34:
            start = cur.data + cur.pos
            size = at - cur.pos
            cur.pos = at + 1
            try:
                return _utf8_text(start, size)
            except UnicodeDecodeError:
                return None
        if c == 92:
            return _json_escaped_string(cur)
        return None  # a control character
    return None


cdef bint _json_int(_Cursor* cur, long long* out, const unsigned char** start, Py_ssize_t* size) noexcept:
    """An integer as JSON writes it (no fraction or exponent), up to 18 digits, not -0."""
    cdef Py_ssize_t at, digits
    cdef long long value = 0
    cdef bint negative = False
    _json_space(cur)
    at = cur.pos
    if at < cur.end and cur.data[at] == 45:  # '-'
        negative = True
        at += 1
    digits = at
    while at < cur.end and 48 <= cur.data[at] <= 57:
        value = value * 10 + (cur.data[at] - 48)
        at += 1
        if at - digits > 18:
            return False
    if at == digits or (cur.data[digits] == 48 and at - digits > 1):
        return False  # no digits, or a leading zero (not JSON)
    if at < cur.end and (cur.data[at] == 46 or cur.data[at] == 101 or cur.data[at] == 69):
        return False  # a fraction or an exponent: a float
    if negative and value == 0:
        return False  # -0: int() of it prints "0"; let the json module say so
    start[0] = cur.data + cur.pos
    size[0] = at - cur.pos
    out[0] = -value if negative else value
    cur.pos = at
    return True


cdef bint _json_literal(_Cursor* cur, const char* word, Py_ssize_t size) noexcept:
    _json_space(cur)
    if cur.end - cur.pos >= size and memcmp(cur.data + cur.pos, word, size) == 0:
        cur.pos += size
        return True
    return False


cdef object _json_ext(_Cursor* cur):
    """The extFields object, values as Java's String fields would hold them."""
    # Room for a send's 16 fields (the C++ client's): a dict grown from empty resizes twice.
    cdef dict ext = _PyDict_NewPresized(16)
    cdef long long number
    cdef const unsigned char* start
    cdef Py_ssize_t size
    if not _json_char(cur, 123):  # '{'
        return None
    if _json_char(cur, 125):  # '}'
        return ext
    while True:
        key = _json_string(cur)
        if key is None or not _json_char(cur, 58):  # ':'
            return None
        _json_space(cur)
        if cur.pos >= cur.end:
            return None
        if cur.data[cur.pos] == 34:
            value = _json_string(cur)
            if value is None:
                return None
        elif _json_int(cur, &number, &start, &size):
            value = _utf8_text(start, size)
        elif _json_literal(cur, b"true", 4):
            value = "true"
        elif _json_literal(cur, b"false", 5):
            value = "false"
        else:
            return None  # null, floats, nested values: the pure twin
        ext[key] = value
        if _json_char(cur, 44):  # ','
            continue
        if _json_char(cur, 125):
            return ext
        return None


cdef object _decode_json_fast(const unsigned char* data, Py_ssize_t size, object body):
    cdef _Cursor cur
    cdef int seen = 0, bit
    cdef long long number
    cdef long long code = 0, language = 0, version = 0, opaque = 0, flag = 0
    cdef const unsigned char* key
    cdef const unsigned char* start
    cdef Py_ssize_t key_len, text_size
    remark = None
    ext = None
    cur.data = data
    cur.pos = 0
    cur.end = size
    if not _json_char(&cur, 123):
        return None
    if not _json_char(&cur, 125):
        while True:
            if not _json_raw_string(&cur, &key, &key_len) or not _json_char(&cur, 58):
                return None
            bit = _header_key_bit(key, key_len)
            if bit == 0:
                return None
            if seen & bit:
                return None
            seen |= bit
            if bit == _JAVA_ONLY:  # ignored: a plain string
                if not _json_raw_string(&cur, &start, &text_size):
                    return None
            elif bit == _REMARK:
                remark = _json_string(&cur)
                if remark is None:
                    return None
            elif bit == _EXT:
                ext = _json_ext(&cur)
                if ext is None:
                    return None
            elif bit == _LANGUAGE:
                _json_space(&cur)
                if cur.pos < cur.end and cur.data[cur.pos] == 34:
                    name = _json_string(&cur)
                    if name is None:
                        return None
                    language = _LANGUAGE_BY_NAME.get(name, _OTHER_LANGUAGE)
                elif _json_int(&cur, &number, &start, &text_size) and 0 <= number <= 255:
                    language = number
                else:
                    return None
            else:
                if not _json_int(&cur, &number, &start, &text_size):
                    return None
                if not -2147483648 <= number <= 2147483647:
                    return None
                if bit == _CODE:
                    code = number
                elif bit == _VERSION:
                    version = number
                elif bit == _OPAQUE:
                    opaque = number
                else:
                    flag = number
            if _json_char(&cur, 44):
                continue
            if _json_char(&cur, 125):
                break
            return None
    _json_space(&cur)
    if cur.pos != cur.end or not (seen & _CODE) or not (seen & _OPAQUE):
        return None
    return _new_command(
        code, language, version, opaque, flag, remark, {} if ext is None else ext, body, _JSON
    )


def decode_json_header(object data, object body=b""):
    cdef Py_buffer view
    if _JSON is None:
        _json_setup()
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        return _PURE_TWINS[_JSON_DECODE_PURE_KEY](data, body)
    try:
        command = _decode_json_fast(<const unsigned char*>view.buf, view.len, body)
    finally:
        PyBuffer_Release(&view)
    if command is None:
        return _PURE_TWINS[_JSON_DECODE_PURE_KEY](data, body)
    return command


cdef inline Py_ssize_t _json_escaped_size(const char* text, Py_ssize_t size) noexcept:
    """The size of UTF-8 `text` as the json module writes it (ensure_ascii off): quotes,
    backslashes and \\b \\f \\n \\r \\t take two bytes, other control characters six."""
    cdef Py_ssize_t i, total = size
    cdef unsigned char c
    for i in range(size):
        c = <unsigned char>text[i]
        if c == 34 or c == 92 or c == 8 or c == 12 or c == 10 or c == 13 or c == 9:
            total += 1
        elif c < 32:
            total += 5
    return total


cdef unsigned char* _json_put_escaped(unsigned char* out, const char* text, Py_ssize_t size) noexcept:
    cdef Py_ssize_t i
    cdef unsigned char c
    out[0] = 34
    out += 1
    for i in range(size):
        c = <unsigned char>text[i]
        if c >= 32 and c != 34 and c != 92:
            out[0] = c
            out += 1
            continue
        out[0] = 92
        if c == 34 or c == 92:
            out[1] = c
        elif c == 8:
            out[1] = 98
        elif c == 12:
            out[1] = 102
        elif c == 10:
            out[1] = 110
        elif c == 13:
            out[1] = 114
        elif c == 9:
            out[1] = 116
        else:
            out[1] = 117  # \\u00XX, lower-case hex as the json module writes it
            out[2] = 48
            out[3] = 48
            out[4] = b"0123456789abcdef"[c >> 4]
            out[5] = b"0123456789abcdef"[c & 15]
            out += 6
            continue
        out += 2
    out[0] = 34
    return out + 1


cdef inline unsigned char* _json_put(unsigned char* out, const char* text, Py_ssize_t size) noexcept:
    memcpy(out, text, size)
    return out + size


cdef inline unsigned char* _json_put_string(unsigned char* out, const char* text, Py_ssize_t size) noexcept:
    out[0] = 34
    memcpy(out + 1, text, size)
    out[size + 1] = 34
    return out + size + 2


cdef unsigned char* _json_put_int(unsigned char* out, long long value) noexcept:
    cdef char digits[24]
    cdef int count = 0, i
    cdef unsigned long long magnitude
    if value < 0:
        out[0] = 45
        out += 1
        magnitude = <unsigned long long>(-(value + 1)) + 1
    else:
        magnitude = <unsigned long long>value
    while True:
        digits[count] = <char>(48 + magnitude % 10)
        count += 1
        magnitude //= 10
        if magnitude == 0:
            break
    for i in range(count):
        out[i] = digits[count - 1 - i]
    return out + count


cdef object _encode_json_fast(object cmd, Py_ssize_t body_len=-1):
    """The JSON header's bytes; with `body_len` >= 0, after the frame's prefix for that body."""
    code, language, version, opaque, flag = cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag
    remark, ext = cmd.remark, cmd.ext_fields
    if not _encodable_fields(code, language, version, opaque, flag, remark, ext):
        return None
    cdef dict fields = <dict>ext
    cdef Py_ssize_t count = len(fields), i = 0, remark_len = 0, total, prefix_len = 0
    cdef Py_ssize_t name_len = 0
    cdef const char* remark_text = NULL
    cdef const char* name_text = NULL
    cdef const char** texts
    cdef Py_ssize_t* lengths
    cdef unsigned char* out
    cdef unsigned char* begin
    cdef long long l = language
    names = _LANGUAGE_NAME_BYTES
    if l < len(names):
        name_text = PyBytes_AS_STRING(names[l])
        name_len = PyBytes_GET_SIZE(names[l])
    # {"code":,"language":,"version":,"opaque":,"flag":} and five numbers of up to 11 chars
    total = 50 + 5 * 11 + name_len + 2
    if remark is not None:
        try:
            remark_text = PyUnicode_AsUTF8AndSize(remark, &remark_len)
        except UnicodeEncodeError:
            return None
        total += 12 + _json_escaped_size(remark_text, remark_len)  # ,"remark":""
    texts = <const char**>malloc(2 * count * sizeof(const char*) + 1)
    lengths = <Py_ssize_t*>malloc(2 * count * sizeof(Py_ssize_t) + 1)
    if texts == NULL or lengths == NULL:
        free(texts)
        free(lengths)
        raise MemoryError()
    try:
        if not _utf8_pairs(fields, texts, lengths):
            return None
        for i in range(2 * count):
            total += _json_escaped_size(texts[i], lengths[i]) + 3  # two quotes, and a colon or comma
        if count:
            total += 14  # ,"extFields":{}
        buffer = PyByteArray_FromStringAndSize(NULL, total + 8)
        begin = <unsigned char*>PyByteArray_AS_STRING(buffer)
        out = begin + 8
        out = _json_put(out, b'{"code":', 8)
        out = _json_put_int(out, code)
        out = _json_put(out, b',"language":', 12)
        if name_text != NULL:
            out = _json_put_string(out, name_text, name_len)
        else:
            out = _json_put_int(out, l)
        out = _json_put(out, b',"version":', 11)
        out = _json_put_int(out, version)
        out = _json_put(out, b',"opaque":', 10)
        out = _json_put_int(out, opaque)
        out = _json_put(out, b',"flag":', 8)
        out = _json_put_int(out, flag)
        if remark is not None:
            out = _json_put(out, b',"remark":', 10)
            out = _json_put_escaped(out, remark_text, remark_len)
        if count:
            out = _json_put(out, b',"extFields":{', 14)
            for i in range(0, 2 * count, 2):
                if i:
                    out[0] = 44
                    out += 1
                out = _json_put_escaped(out, texts[i], lengths[i])
                out[0] = 58
                out = _json_put_escaped(out + 1, texts[i + 1], lengths[i + 1])
            out[0] = 125
            out += 1
        out[0] = 125
        out += 1
        total = out - (begin + 8)
        if body_len >= 0:
            if total > 0xFFFFFF or 4 + total + body_len > 2147483647:
                return None
            _put_be(begin, <unsigned long long>(4 + total + body_len), 4)
            _put_be(begin + 4, <unsigned long long>total, 4)  # serialize type 0: JSON
            prefix_len = 8
        return PyBytes_FromStringAndSize(<const char*>begin + 8 - prefix_len, total + prefix_len)
    finally:
        free(texts)
        free(lengths)


def encode_json_header(object cmd):
    if _JSON is None:
        _json_setup()
    packed = _encode_json_fast(cmd)
    if packed is None:
        return _PURE_TWINS[_JSON_ENCODE_PURE_KEY](cmd)
    return packed



# --- request signatures (client/remoting/signing.py) --------------------------------------------
# The HMAC-SHA1 of RocketMQ's ACL on OpenSSL's SHA-1 contexts held by value. A key (`_HmacSha1`)
# holds the two contexts its ipad and opad blocks leave, made once per account; a request's HMAC
# copies them onto the stack, feeds the inner one the signed values and the body where they lie,
# and finishes the outer one: nothing is allocated. _hashlib's HMAC objects (OpenSSL 3's
# HMAC_CTX) allocate and free contexts on every copy and digest, about twice the SHA-1 work of a
# single send's 1 KiB (a profile of the ACL broker: copy 2.0% of its time, digest 2.8%, the
# hashing 1.6%). SHA1_Init/Update/Final are deprecated in OpenSSL 3 in favour of EVP, whose
# context copies allocate; they are kept, and SHA-1 itself runs OpenSSL's SHA-NI or AVX2 code.

cimport cython
from cpython.buffer cimport PyObject_CheckBuffer, PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from libc.string cimport memcpy, memset

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

cdef extern from *:
    """
    #define OPENSSL_SUPPRESS_DEPRECATED 1
    #include <openssl/crypto.h>
    #include <openssl/sha.h>
    """
    ctypedef struct SHA_CTX:
        pass
    int SHA1_Init(SHA_CTX* ctx) nogil
    int SHA1_Update(SHA_CTX* ctx, const void* data, size_t size) nogil
    int SHA1_Final(unsigned char* md, SHA_CTX* ctx) nogil
    unsigned char* SHA1(const unsigned char* data, size_t size, unsigned char* md) nogil
    void OPENSSL_cleanse(void* data, size_t size) nogil

DEF _SHA1_BLOCK = 64
DEF _SHA1_SIZE = 20
# Bodies from this size are hashed without the GIL when the context is a request's own (on the
# stack): a 4 MiB body takes milliseconds, which other threads need not wait for.
DEF _NOGIL_SIZE = 1 << 18


cdef inline void _sha1_feed(SHA_CTX* ctx, const void* data, size_t size, bint own) noexcept:
    """SHA1_Update; without the GIL for a large feed of a context that is the caller's alone
    (`own`: on its stack)."""
    if own and size >= _NOGIL_SIZE:
        with nogil:
            SHA1_Update(ctx, data, size)
    else:
        SHA1_Update(ctx, data, size)


cdef int _sha1_update(SHA_CTX* ctx, object data, bint own) except -1:
    """SHA1_Update with the bytes of `data`, refused with _hashlib's errors for what is not a
    one-dimensional buffer. `own`: see _sha1_feed."""
    cdef Py_buffer view
    if type(data) is bytes:
        _sha1_feed(ctx, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), own)
        return 0
    if isinstance(data, str):
        raise TypeError("Strings must be encoded before hashing")
    if not PyObject_CheckBuffer(data):
        raise TypeError("object supporting the buffer API required")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.ndim > 1:
            raise BufferError("Buffer must be single dimension")
        _sha1_feed(ctx, view.buf, view.len, own)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline int _sha1_body(SHA_CTX* ctx, object body) except -1:
    """A request's body after its signed values, as the pure signer feeds it (`if body:`)."""
    if type(body) is bytes:
        if PyBytes_GET_SIZE(body):
            _sha1_update(ctx, body, True)
    elif body:
        _sha1_update(ctx, body, True)
    return 0


@cython.final
@cython.auto_pickle(False)
@cython.freelist(8)
cdef class _HmacSha1:
    """An HMAC-SHA1 with one key, as `hmac.new(key, digestmod="sha1")`: `copy()` it, `update`
    the copy, take its `digest` (what common/mac.py's `Mac` asks for; `signing_key` gives one).
    Its state is two SHA-1 contexts held by value: the inner one fed the key's ipad block and
    then what `update` was given, the outer one the key's opad block. The compiled signers and
    checks of this module copy them onto the stack per request."""

    cdef SHA_CTX inner
    cdef SHA_CTX outer

    def __init__(self, bytes key not None):
        cdef unsigned char block[_SHA1_BLOCK]
        cdef unsigned char pad[_SHA1_BLOCK]
        cdef Py_ssize_t size = PyBytes_GET_SIZE(key)
        cdef int i
        memset(block, 0, _SHA1_BLOCK)
        if size > _SHA1_BLOCK:  # RFC 2104: a key longer than a block is its hash
            SHA1(<const unsigned char*>PyBytes_AS_STRING(key), size, block)
        else:
            memcpy(block, PyBytes_AS_STRING(key), size)
        for i in range(_SHA1_BLOCK):
            pad[i] = block[i] ^ 0x36
        SHA1_Init(&self.inner)
        SHA1_Update(&self.inner, pad, _SHA1_BLOCK)
        for i in range(_SHA1_BLOCK):
            pad[i] = block[i] ^ 0x5C
        SHA1_Init(&self.outer)
        SHA1_Update(&self.outer, pad, _SHA1_BLOCK)
        OPENSSL_cleanse(block, _SHA1_BLOCK)
        OPENSSL_cleanse(pad, _SHA1_BLOCK)

    def __dealloc__(self):
        OPENSSL_cleanse(&self.inner, sizeof(SHA_CTX))
        OPENSSL_cleanse(&self.outer, sizeof(SHA_CTX))

    def copy(self):
        """Another HMAC in this one's state (both then go on alone)."""
        cdef _HmacSha1 other = _HmacSha1.__new__(_HmacSha1)
        other.inner = self.inner
        other.outer = self.outer
        return other

    def update(self, data, /):
        """Feed `data` (a bytes-like object) to the HMAC."""
        _sha1_update(&self.inner, data, False)

    def digest(self):
        """The 20 bytes of the HMAC of what it was fed (it can be fed more afterwards)."""
        cdef SHA_CTX inner = self.inner
        cdef unsigned char md[_SHA1_SIZE]
        _hmac_sha1_final(self, &inner, md)
        return PyBytes_FromStringAndSize(<const char*>md, _SHA1_SIZE)


cdef inline void _hmac_sha1_final(_HmacSha1 key, SHA_CTX* inner, unsigned char* md) noexcept:
    """The HMAC's 20 bytes at `md` from `inner`, a stack copy of `key`'s inner context fed the
    message (finished here: SHA1_Final wipes it)."""
    cdef SHA_CTX outer = key.outer
    SHA1_Final(md, inner)
    SHA1_Update(&outer, md, _SHA1_SIZE)
    SHA1_Final(md, &outer)


_SIGNING_KEY_KEY = "tidemq.client.remoting.signing.signing_key"


def signing_key(object secret_key):
    """An `_HmacSha1` keyed with `secret_key` as UTF-8 (the pure twin: OpenSSL's HMAC object)."""
    if type(secret_key) is not str:
        return _pure(_SIGNING_KEY_KEY)(secret_key)
    return _HmacSha1(secret_key.encode("utf-8"))


_SIGNED_KEY = "tidemq.client.remoting.signing.signed_content_digest"
cdef object _signing = None  # the signing module (it imports this one): taken at first use


cdef object _signed_keys(dict ext_fields):
    """signing._signed_keys: the signed keys in order, from its cache of key orders."""
    global _signing
    if _signing is None:
        import importlib
        _signing = importlib.import_module("tidemq.client.remoting.signing")
    order = _signing._KEY_ORDERS.get(tuple(ext_fields))
    if order is None:
        order = _signing._signed_keys(ext_fields)
    return order


def signed_content_digest(object key, object ext_fields, object body):
    """The raw HMAC-SHA1 of a request's signed content: the signed ext values in key order,
    as UTF-8, fed one by one to a stack copy of the key's state, then the body. A key that is
    not an `_HmacSha1`, ext fields that are not a dict of text, or text that UTF-8 cannot encode
    go to the pure twin, which raises as it always does."""
    cdef Py_ssize_t size, i, n
    cdef const char* text
    cdef SHA_CTX inner
    cdef unsigned char md[_SHA1_SIZE]
    if type(key) is not _HmacSha1 or type(ext_fields) is not dict:
        return _pure(_SIGNED_KEY)(key, ext_fields, body)
    order = _signed_keys(<dict>ext_fields)
    n = len(order)
    inner = (<_HmacSha1>key).inner
    for i in range(n):
        value = (<dict>ext_fields)[order[i]]
        if type(value) is not str:
            return _pure(_SIGNED_KEY)(key, ext_fields, body)
        try:
            text = PyUnicode_AsUTF8AndSize(value, &size)
        except UnicodeEncodeError:
            return _pure(_SIGNED_KEY)(key, ext_fields, body)
        SHA1_Update(&inner, text, size)
    _sha1_body(&inner, body)
    _hmac_sha1_final(<_HmacSha1>key, &inner, md)
    return PyBytes_FromStringAndSize(<const char*>md, _SHA1_SIZE)


cdef const char* _BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


cdef inline unsigned char* _put_base64_sha1(unsigned char* out, const unsigned char* digest) noexcept:
    """The 28 characters of a 20-byte digest's Base64 as a msgpack fixstr."""
    cdef int i
    cdef unsigned int word
    out[0] = 0xA0 | 28
    out += 1
    for i in range(0, 18, 3):
        word = (digest[i] << 16) | (digest[i + 1] << 8) | digest[i + 2]
        out[0] = _BASE64[word >> 18]
        out[1] = _BASE64[(word >> 12) & 63]
        out[2] = _BASE64[(word >> 6) & 63]
        out[3] = _BASE64[word & 63]
        out += 4
    word = (digest[18] << 16) | (digest[19] << 8)
    out[0] = _BASE64[word >> 18]
    out[1] = _BASE64[(word >> 12) & 63]
    out[2] = _BASE64[(word >> 6) & 63]
    out[3] = 61  # "="
    return out + 4


_MATCHES_KEY = "tidemq.client.remoting.signing.signature_matches"
DEF _MAX_FIELDS = 32
# The last field keys a request listed (held in `_last_keys`) and the positions, in that
# listing, of its signed keys in sorted order: a client sends the same keys request after
# request, and a broker's decoder gives them as the same objects.
cdef list _last_keys = []
cdef PyObject* _last_key_ptrs[_MAX_FIELDS]
cdef Py_ssize_t _last_order[_MAX_FIELDS]
cdef Py_ssize_t _last_n = -1
cdef Py_ssize_t _last_signed = 0
cdef Py_ssize_t _last_signature_at = -1  # the position of the Signature key, or -1


cdef Py_ssize_t _signed_order(PyObject** keys, Py_ssize_t n) except -1:
    """The number of signed keys (all but Signature and _UNIQUE_KEY_QUERY) among `keys`, their
    positions in code point order left in `_last_order` (and the Signature's in
    `_last_signature_at`): the last listing's when the keys are the same (the same objects, or
    equal text)."""
    global _last_keys, _last_n, _last_signed, _last_signature_at
    cdef Py_ssize_t i
    if n == _last_n:
        for i in range(n):
            if keys[i] != _last_key_ptrs[i] and <object>keys[i] != <object>_last_key_ptrs[i]:
                break
        else:
            return _last_signed
    listed = [<object>keys[i] for i in range(n)]
    order = sorted(
        [i for i in range(n) if listed[i] != "Signature" and listed[i] != "_UNIQUE_KEY_QUERY"],
        key=listed.__getitem__,
    )
    _last_keys = listed
    for i in range(n):
        _last_key_ptrs[i] = <PyObject*>listed[i]
    for i in range(len(order)):
        _last_order[i] = order[i]
    _last_n = n
    _last_signed = len(order)
    _last_signature_at = listed.index("Signature") if "Signature" in listed else -1
    return _last_signed


def signature_matches(object key, object ext_fields, object body):
    """Whether the `Signature` field is the Base64 of the signed content's HMAC: the fields read
    once in dict order, the key order from the last request's when its keys were the same, the
    values fed to a stack copy of the key's state and the Base64 written and compared in C. A key
    that is not an `_HmacSha1`, fields that are not a dict of text (or text that UTF-8 cannot
    encode) go to the pure twin."""
    cdef Py_ssize_t pos = 0, i, n = 0, signed, size, given_size = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* keys[_MAX_FIELDS]
    cdef PyObject* values[_MAX_FIELDS]
    cdef const char* text
    cdef const char* given_text = NULL
    cdef unsigned char md[_SHA1_SIZE]
    cdef unsigned char expected[29]
    cdef unsigned char diff = 0
    cdef SHA_CTX inner
    cdef object given = ""
    if (
        type(key) is not _HmacSha1
        or type(ext_fields) is not dict
        or len(<dict>ext_fields) > _MAX_FIELDS
    ):
        return _pure(_MATCHES_KEY)(key, ext_fields, body)
    # borrowed: nothing runs Python code on the dict until the values are hashed
    while PyDict_Next(ext_fields, &pos, &k, &v):
        if type(<object>k) is not str or type(<object>v) is not str:
            return _pure(_MATCHES_KEY)(key, ext_fields, body)
        keys[n] = k
        values[n] = v
        n += 1
    signed = _signed_order(keys, n)
    inner = (<_HmacSha1>key).inner
    try:
        for i in range(signed):
            text = PyUnicode_AsUTF8AndSize(<object>values[_last_order[i]], &size)
            SHA1_Update(&inner, text, size)
        if _last_signature_at >= 0:
            given = <object>values[_last_signature_at]
        given_text = PyUnicode_AsUTF8AndSize(given, &given_size)
    except UnicodeEncodeError:
        return _pure(_MATCHES_KEY)(key, ext_fields, body)
    _sha1_body(&inner, body)
    _hmac_sha1_final(<_HmacSha1>key, &inner, md)
    _put_base64_sha1(expected, md)
    if given_size != 28:
        return False
    for i in range(28):  # every byte, whatever differs first (as hmac.compare_digest)
        diff |= expected[1 + i] ^ <unsigned char>given_text[i]
    return diff == 0


# -- a producer's send frame head (client/protocol/send_frame.py) ------------------------------

_SEND_HEAD_KEY = "tidemq.client.protocol.send_frame.encode_send_head"


cdef inline Py_ssize_t _decimal(char* out, long long value) noexcept:
    """`str(value)` written at `out` (room for 20 characters); its length."""
    cdef char digits[20]
    cdef Py_ssize_t count = 0, i = 0
    cdef unsigned long long magnitude
    if value < 0:
        out[0] = 45  # "-"
        i = 1
        magnitude = <unsigned long long>(-(value + 1)) + 1
    else:
        magnitude = <unsigned long long>value
    while True:
        digits[count] = <char>(48 + magnitude % 10)
        magnitude //= 10
        count += 1
        if magnitude == 0:
            break
    while count:
        count -= 1
        out[i] = digits[count]
        i += 1
    return i


cdef inline bint _long_long(object value, long long* out):
    """An int (not a bool) that fits a long long, read in C."""
    cdef int overflow = 0
    if type(value) is not int:
        return False
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef inline unsigned char* _put_text(unsigned char* out, const char* text, Py_ssize_t size) noexcept:
    """A msgpack fixstr of at most 31 bytes."""
    out[0] = <unsigned char>(0xA0 | size)
    memcpy(out + 1, text, size)
    return out + 1 + size


cdef struct _SendValues:
    # one send's varying values as the head writes them: the four numbers (queueId, sysFlag,
    # bornTimestamp, flag) as decimal text, the properties as UTF-8 (borrowed from the str)
    long long opaque
    char numbers[4][20]
    Py_ssize_t number_lens[4]
    const char* props_text
    Py_ssize_t props_len
    Py_ssize_t body_len
    Py_ssize_t header_len  # the msgpack header's bytes


cdef bint _send_values(
    _SendValues* values,
    object head,
    object middle,
    object tail,
    object opaque,
    object queue_id,
    object sys_flag,
    object born_timestamp,
    object flag,
    object properties,
    object body,
    Py_ssize_t extra,
) except -1:
    """One send's values read into `values`, with its header's size: the template's parts, the
    opaque, "e" to "i"'s values and the keys "f" to "i", and `extra` bytes more. False when the
    fast path does not write them as they are (the pure twin then does, or raises)."""
    cdef long long numbers[4]
    cdef Py_ssize_t i, total
    if (
        type(head) is not bytes
        or type(middle) is not bytes
        or type(tail) is not bytes
        or not _int32(opaque)
        or not _long_long(queue_id, &numbers[0])
        or not _long_long(sys_flag, &numbers[1])
        or not _long_long(born_timestamp, &numbers[2])
        or not _long_long(flag, &numbers[3])
        or type(properties) is not str
        or type(body) is not bytes
    ):
        return False
    try:
        values.props_text = PyUnicode_AsUTF8AndSize(properties, &values.props_len)
    except UnicodeEncodeError:
        return False
    values.opaque = opaque
    values.body_len = PyBytes_GET_SIZE(body)
    total = (
        PyBytes_GET_SIZE(head) + _int_size(values.opaque) + PyBytes_GET_SIZE(middle)
        + PyBytes_GET_SIZE(tail) + 4 * 2 + 4
        + _str_head_size(values.props_len) + values.props_len + extra
    )
    for i in range(4):
        values.number_lens[i] = _decimal(values.numbers[i], numbers[i])
        total += values.number_lens[i]
    values.header_len = total
    return total <= 0xFFFFFF and 4 + total + values.body_len <= 2147483647


cdef unsigned char* _put_send_head(
    unsigned char* out, _SendValues* values, bytes head, bytes middle, bytes tail
) noexcept:
    """The frame's prefix and the header up to the end of `tail` at `out`: the template's
    parts with the opaque, the four numbers and the properties between them."""
    out = _put_be(out, <unsigned long long>(4 + values.header_len + values.body_len), 4)
    out = _put_be(out, <unsigned long long>((2 << 24) | values.header_len), 4)
    memcpy(out, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head))
    out = _put_int(out + PyBytes_GET_SIZE(head), values.opaque)
    memcpy(out, PyBytes_AS_STRING(middle), PyBytes_GET_SIZE(middle))
    out = _put_text(out + PyBytes_GET_SIZE(middle), values.numbers[0], values.number_lens[0])
    out = _put_text(_put_text(out, b"f", 1), values.numbers[1], values.number_lens[1])
    out = _put_text(_put_text(out, b"g", 1), values.numbers[2], values.number_lens[2])
    out = _put_text(_put_text(out, b"h", 1), values.numbers[3], values.number_lens[3])
    out = _put_str(_put_text(out, b"i", 1), values.props_text, values.props_len)
    memcpy(out, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail))
    return out + PyBytes_GET_SIZE(tail)


def encode_send_head(
    object template,
    object opaque,
    object queue_id,
    object sys_flag,
    object born_timestamp,
    object flag,
    object properties,
    object body,
):
    """The frame's prefix and msgpack header of one send: the template's bytes with the opaque,
    the four numbers as decimal text and the properties written between them. Anything the fast
    path does not write as it is goes to the pure twin."""
    cdef _SendValues values
    cdef unsigned char* out
    cdef unsigned char* start
    head, middle, tail = template.head, template.middle, template.tail
    if not _send_values(
        &values, head, middle, tail, opaque, queue_id, sys_flag, born_timestamp, flag,
        properties, body, 0,
    ):
        return _pure(_SEND_HEAD_KEY)(
            template, opaque, queue_id, sys_flag, born_timestamp, flag, properties, body
        )
    packed = PyBytes_FromStringAndSize(NULL, 8 + values.header_len)
    start = <unsigned char*>PyBytes_AS_STRING(packed)
    out = _put_send_head(start, &values, head, middle, tail)
    assert out == start + 8 + values.header_len
    return packed


_SIGNED_SEND_HEAD_KEY = "tidemq.client.protocol.send_frame.encode_signed_send_head"
def encode_signed_send_head(
    object signed,
    object opaque,
    object queue_id,
    object sys_flag,
    object born_timestamp,
    object flag,
    object properties,
    object body,
):
    """The frame's prefix and msgpack header of one signed send: a stack copy of the template's
    HMAC state fed the four numbers' decimal text, the properties, the constant last values and
    the body; the head written as `encode_send_head` writes it, the signer's fields and the
    Base64 of the digest after the tail. Anything the fast path does not write as it is (or an
    HMAC that is not an `_HmacSha1`) goes to the pure twin."""
    cdef _SendValues values
    cdef SHA_CTX inner
    cdef unsigned char md[_SHA1_SIZE]
    cdef unsigned char* out
    cdef unsigned char* start
    cdef int i
    head = signed.template.head
    middle, tail, suffix, prefix_mac = signed.middle, signed.tail, signed.suffix, signed.prefix_mac
    # the header: as encode_send_head's, and the Signature's value (a fixstr of 28)
    if (
        type(suffix) is not bytes
        or type(prefix_mac) is not _HmacSha1
        or not _send_values(
            &values, head, middle, tail, opaque, queue_id, sys_flag, born_timestamp, flag,
            properties, body, 29,
        )
    ):
        return _pure(_SIGNED_SEND_HEAD_KEY)(
            signed, opaque, queue_id, sys_flag, born_timestamp, flag, properties, body
        )
    # the signed values after the template's prefix: e to i, then j, k, m; then the body
    inner = (<_HmacSha1>prefix_mac).inner
    for i in range(4):
        SHA1_Update(&inner, values.numbers[i], values.number_lens[i])
    SHA1_Update(&inner, values.props_text, values.props_len)
    SHA1_Update(&inner, PyBytes_AS_STRING(suffix), PyBytes_GET_SIZE(suffix))
    _sha1_body(&inner, body)
    _hmac_sha1_final(<_HmacSha1>prefix_mac, &inner, md)
    packed = PyBytes_FromStringAndSize(NULL, 8 + values.header_len)
    start = <unsigned char*>PyBytes_AS_STRING(packed)
    out = _put_base64_sha1(_put_send_head(start, &values, head, middle, tail), md)
    assert out == start + 8 + values.header_len
    return packed


# -- a send's result (client/message.py) ------------------------------------------------------

_SEND_RESULT_KEY = "tidemq.client.message.send_result"
_SEND_RESULT_FIELDS = ("status", "msg_id", "offset_msg_id", "message_queue", "queue_offset")
cdef Py_ssize_t _send_result_slots[5]
cdef int _send_result_state = 0  # 0: not looked up yet, 1: slots found, -1: not usable
cdef object _SendResult = None


def send_result(
    object status, object msg_id, object offset_msg_id, object message_queue, object queue_offset
):
    """SendResult(...) with its five slots written in C (a frozen dataclass's __init__, or the
    maker's five descriptor calls, cost more than the rest of a send's answer); the pure twin
    when the class's fields are not the plain slots this expects."""
    global _send_result_state, _SendResult
    if _send_result_state == 0:
        from tidemq.client.message import SendResult
        _SendResult = SendResult
        found = _find_slots(SendResult, _SEND_RESULT_FIELDS, _send_result_slots, False)
        _send_result_state = 1 if found else -1
    if _send_result_state < 0:
        return _pure(_SEND_RESULT_KEY)(status, msg_id, offset_msg_id, message_queue, queue_offset)
    result = _SendResult.__new__(_SendResult)
    _put_at(result, _send_result_slots[0], status)
    _put_at(result, _send_result_slots[1], msg_id)
    _put_at(result, _send_result_slots[2], offset_msg_id)
    _put_at(result, _send_result_slots[3], message_queue)
    _put_at(result, _send_result_slots[4], queue_offset)
    return result
