"""Header serialisations of the RocketMQ remoting protocol: JSON, ROCKETMQ binary and msgpack.

A frame's header-length word names the serialisation (see `client.remoting.frame`); each one
carries the same fields.

JSON (`SerializeType.JSON` = 0, RocketMQ's default), UTF-8::

    {"code":105,"language":"JAVA","version":401,"opaque":7,"flag":0,
     "remark":"...","extFields":{"topic":"t"}}

    We write the keys in that order, compact, non-ASCII as raw UTF-8, and leave out `remark`
    when it is None and `extFields` when it is empty (fastjson leaves out nulls the same way).
    Reading is lenient the way Java's fastjson is: unknown keys (Java writes
    `serializeTypeCurrentRPC`) are ignored; `remark`, `extFields`, `language`, `version` and
    `flag` may be missing; `language` may be a name ("CPP") or a number, and an unknown name
    reads as OTHER; integer fields may be decimal strings; `extFields` values may be JSON numbers
    or booleans (the C++ client sends `"queueId":0`) and are turned into the strings Java would
    hold: "0", "true"/"false", a decimal keeps its source text, a nested value becomes compact
    JSON text, and a null value drops its key. `code` and `opaque` are required.

ROCKETMQ binary (`SerializeType.ROCKETMQ` = 1, `RocketMQSerializable.java`), big-endian::

    int16 code | uint8 language | int16 version | int32 opaque | int32 flag
    | int32 remarkLen | remark (UTF-8) | int32 extLen | ext

    where ext is `extLen` bytes of repeated `int16 keyLen | key | int32 valueLen | value`.
    A None or empty remark is written with length 0 and reads back as None. Codes above 32767
    (the 5.x POP codes) do not fit: Java truncates them, we raise `EncodeError`. Every length is
    checked against the bytes that remain, trailing bytes after ext are an error, and text must
    be valid UTF-8 (Java would substitute U+FFFD; a peer that sends invalid UTF-8 is broken).

msgpack (`SerializeType.MSGPACK` = 2, tidemq's own): one map with the JSON keys::

    {"code": int, "language": int, "version": int, "opaque": int, "flag": int,
     "remark": str (only when not None), "extFields": {str: str} (only when not empty)}

    Keys are written in that order and integers in msgpack's smallest form, so the bytes are
    canonical. `language` is written as its number; reading accepts a name too, and applies the
    same defaults and `extFields` rules as JSON.

All integer fields must fit a signed 32-bit int (the Java types), `language` a byte. Encoders
raise `EncodeError`; decoders raise `HeaderDecodeError` (a `FrameError`) with the reason.
Headers we encode decode to an equal command, and re-encode to the same bytes.
"""

from __future__ import annotations

import json
import re
import struct
import threading
from collections.abc import Callable, Mapping
from json import encoder as json_encoder
from typing import Any, Final, TypeAlias

import msgpack  # type: ignore[import-untyped]

from tidemq.client.remoting.codes import LanguageCode, SerializeType
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import EncodeError, HeaderDecodeError
from tidemq.common import speedups

__all__ = [
    "decode_header",
    "decode_json_header",
    "decode_msgpack_header",
    "decode_rocketmq_header",
    "encode_header",
    "encode_json_header",
    "encode_msgpack_header",
    "encode_rocketmq_header",
]

HeaderBytes: TypeAlias = bytes | bytearray | memoryview

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

# code, language, version, opaque, flag
_FIXED: Final = struct.Struct(">hBhii")
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_UINT16: Final = struct.Struct(">H")
# the fixed fields plus the two length words of an empty remark and ext
_BINARY_MIN_LEN: Final = _FIXED.size + 2 * _INT32.size
assert _BINARY_MIN_LEN == 21

_LANGUAGE_NAMES: Final[tuple[str, ...]] = tuple(lang.name for lang in LanguageCode)
_LANGUAGE_BY_NAME: Final[dict[str, int]] = {lang.name: int(lang) for lang in LanguageCode}
# names are looked up by value, which works because the values are exactly 0..n-1
assert [int(lang) for lang in LanguageCode] == list(range(len(_LANGUAGE_NAMES)))
_JAVA: Final = int(LanguageCode.JAVA)
_OTHER: Final = int(LanguageCode.OTHER)

_DECIMAL: Final = re.compile(r"-?[0-9]+")
_ONLY_STR: Final = frozenset((str,))

_JSON_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, separators=(",", ":")
)
_JSON_DECODER: Final = json.JSONDecoder(parse_float=str)  # "1.50" keeps its text, as Java would
# The C encoder and scanner behind those two, called without their Python wrappers (a header is
# encoded and decoded per request): the same output, errors and leniency, a microsecond less.
_make_c_encoder: Any = getattr(json_encoder, "c_make_encoder", None)
_json_chunks: Final[Callable[[Any, int], list[str]] | None] = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None,
        _JSON_ENCODER.default,
        json_encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )
)
_JSON_WHITESPACE: Final = " \t\n\r"  # what JSONDecoder.decode allows around the value
_json_scan: Final[Callable[[str, int], tuple[Any, int]]] = _JSON_DECODER.scan_once  # type: ignore[attr-defined]

# A msgpack Packer per thread: building one per header costs as much as packing the header.
_packers = threading.local()


# -- shared -----------------------------------------------------------------------------------


def _check_fields(cmd: RemotingCommand) -> None:
    # One chained comparison on the hot path; the slow diagnosis runs only when it fails.
    if not (
        _INT32_MIN <= cmd.code <= _INT32_MAX
        and _INT32_MIN <= cmd.opaque <= _INT32_MAX
        and _INT32_MIN <= cmd.flag <= _INT32_MAX
        and _INT32_MIN <= cmd.version <= _INT32_MAX
        and 0 <= cmd.language <= 255
    ):
        raise EncodeError(_field_problem(cmd, short_code=False))


def _field_problem(cmd: RemotingCommand, *, short_code: bool) -> str:
    small = (-(2**15), 2**15 - 1)
    limits = {
        "code": small if short_code else (_INT32_MIN, _INT32_MAX),
        "version": small if short_code else (_INT32_MIN, _INT32_MAX),
        "opaque": (_INT32_MIN, _INT32_MAX),
        "flag": (_INT32_MIN, _INT32_MAX),
        "language": (0, 255),
    }
    for name, (low, high) in limits.items():
        value = getattr(cmd, name)
        if not isinstance(value, int) or not low <= value <= high:
            return f"{name}={value} is outside [{low}, {high}]"
    return "a header field cannot be encoded"


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"{what} is not encodable as UTF-8: {exc}") from exc


def _int_field(obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise HeaderDecodeError(f"header has no {key!r} field")
        return default
    if type(value) is str and _DECIMAL.fullmatch(value):
        value = int(value)  # fastjson reads "105" into an int field as well
    if type(value) is not int:
        raise HeaderDecodeError(f"header field {key!r} is not an integer: {value!r}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise HeaderDecodeError(f"header field {key!r}={value} does not fit a 32-bit int")
    return value


def _language_field(value: Any) -> int:
    if type(value) is str:
        return _LANGUAGE_BY_NAME.get(value, _OTHER)
    if type(value) is int and 0 <= value <= 255:
        return value
    if value is None:
        return _JAVA  # RemotingCommand's own default
    raise HeaderDecodeError(f"header field 'language' is neither a name nor a byte: {value!r}")


def _text_value(value: Any, where: str) -> str:
    """The string Java's fastjson would hold for a JSON scalar read into a String field."""
    if type(value) is str:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if isinstance(value, dict | list):
        try:
            return _JSON_ENCODER.encode(value)
        except (TypeError, ValueError, RecursionError) as exc:
            # msgpack nests what JSON cannot hold (binary, extension types, non-text keys)
            raise HeaderDecodeError(f"{where} holds a value JSON cannot carry: {exc}") from exc
    raise HeaderDecodeError(f"{where} has a value of unexpected type {type(value).__name__}")


def _remark_field(value: Any) -> str | None:
    if value is None:
        return None
    return _text_value(value, "header field 'remark'")


def _ext_fields(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise HeaderDecodeError(f"header field 'extFields' is not an object: {value!r}")
    # map(type, ...) keeps the all-strings check in C
    if not (
        _ONLY_STR.issuperset(map(type, value.values())) and _ONLY_STR.issuperset(map(type, value))
    ):
        return _normalised_ext_fields(value)
    ext: dict[str, str] = value  # the decoder built this dict for us alone: keep it
    return ext


def _normalised_ext_fields(raw: dict[Any, Any]) -> dict[str, str]:
    # The C++ client sends numbers unquoted: this runs for each of its requests.
    out: dict[str, str] = {}
    for key, item in raw.items():
        if type(key) is not str:
            raise HeaderDecodeError(f"extFields key is not a string: {key!r}")
        kind = type(item)
        if kind is str:
            out[key] = item
        elif kind is int:
            out[key] = str(item)
        elif item is not None:  # Java's makeCustomHeaderToNet never sends null fields either
            out[key] = _text_value(item, f"extFields[{key!r}]")
    return out


def _command_from_mapping(
    obj: Any, body: Body, serialize_type: SerializeType, fmt: str
) -> RemotingCommand:
    if type(obj) is not dict:
        raise HeaderDecodeError(f"{fmt} header is not an object/map: {type(obj).__name__}")
    get = obj.get
    code, version, opaque, flag = get("code"), get("version", 0), get("opaque"), get("flag", 0)
    # Well-formed headers pass this one test; the per-field helpers explain what fails it.
    if not (
        type(code) is int
        and type(version) is int
        and type(opaque) is int
        and type(flag) is int
        and _INT32_MIN <= code <= _INT32_MAX
        and _INT32_MIN <= version <= _INT32_MAX
        and _INT32_MIN <= opaque <= _INT32_MAX
        and _INT32_MIN <= flag <= _INT32_MAX
    ):
        code = _int_field(obj, "code")
        version = _int_field(obj, "version", 0)
        opaque = _int_field(obj, "opaque")
        flag = _int_field(obj, "flag", 0)
    language = get("language")
    if type(language) is not int or not 0 <= language <= 255:
        language = _language_field(language)
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = _remark_field(remark)
    ext = get("extFields")
    # positional: cheaper than keywords, in RemotingCommand's field order
    return RemotingCommand(
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        {} if ext is None else _ext_fields(ext),
        body,
        serialize_type,
    )


# The compiled twin (client/remoting/_codec.pyx) when built: it is called for every header.
_command_from_mapping = speedups.select(_command_from_mapping, "tidemq.client.remoting._codec")


# -- JSON -------------------------------------------------------------------------------------


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The JSON header of `cmd`."""
    _check_fields(cmd)
    language = cmd.language
    obj: dict[str, Any] = {
        "code": cmd.code,
        # unknown numbers go out as numbers: fastjson reads an enum from its ordinal too
        "language": _LANGUAGE_NAMES[language] if language < len(_LANGUAGE_NAMES) else language,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    if _json_chunks is None:
        return _utf8(_JSON_ENCODER.encode(obj), "JSON header")
    return _utf8("".join(_json_chunks(obj, 0)), "JSON header")


def decode_json_header(data: HeaderBytes, body: Body = b"") -> RemotingCommand:
    """Decode a JSON header; `body` is attached to the command as is."""
    try:
        text = str(data, "utf-8")
        try:
            obj, end = _json_scan(text, 0)
            # rocketmq-client-cpp ends its headers with a newline (jsoncpp's FastWriter)
            if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
                raise ValueError("not one JSON value")
        except (StopIteration, ValueError, RecursionError):
            # Whitespace around the value, or not JSON: the full decoder says which.
            obj = _JSON_DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise HeaderDecodeError(f"JSON header does not parse: {exc}") from exc
    return _command_from_mapping(obj, body, SerializeType.JSON, "JSON")


# -- ROCKETMQ binary --------------------------------------------------------------------------


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header of `cmd`."""
    try:
        fixed = _FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)
        remark = _utf8(cmd.remark, "remark") if cmd.remark else b""
        ext = _encode_ext(cmd.ext_fields)
        return b"".join((fixed, _INT32.pack(len(remark)), remark, _INT32.pack(len(ext)), ext))
    except struct.error as exc:
        raise EncodeError(_field_problem(cmd, short_code=True)) from exc


def _encode_ext(ext_fields: Mapping[str, str]) -> bytes:
    parts: list[bytes] = []
    pack_key_len, pack_value_len = _INT16.pack, _INT32.pack
    try:
        for key, value in ext_fields.items():
            k = key.encode("utf-8")
            v = value.encode("utf-8")
            parts += (pack_key_len(len(k)), k, pack_value_len(len(v)), v)
    except UnicodeEncodeError as exc:
        raise EncodeError(f"extFields entry is not encodable as UTF-8: {exc}") from exc
    except struct.error as exc:  # only the key length can overflow its field
        raise EncodeError(f"extFields key of {len(k)} bytes exceeds 32767 bytes") from exc
    return b"".join(parts)


def decode_rocketmq_header(data: HeaderBytes, body: Body = b"") -> RemotingCommand:
    """Decode a ROCKETMQ binary header; `body` is attached to the command as is."""
    raw = data if type(data) is bytes else bytes(data)
    end = len(raw)
    if end < _BINARY_MIN_LEN:
        raise HeaderDecodeError(f"binary header of {end} bytes is shorter than {_BINARY_MIN_LEN}")
    code, language, version, opaque, flag = _FIXED.unpack_from(raw, 0)
    pos = _FIXED.size
    remark_len = _length(raw, pos, end - pos - 8, "remark")
    pos += 4
    remark = _text(raw[pos : pos + remark_len], "remark") if remark_len else None
    pos += remark_len
    ext_len = _length(raw, pos, end - pos - 4, "extFields")
    pos += 4
    if pos + ext_len != end:
        raise HeaderDecodeError(f"binary header has {end - pos - ext_len} bytes after extFields")
    return RemotingCommand(
        code=code,
        language=language,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=_decode_ext(raw[pos:]) if ext_len else {},
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _length(raw: bytes, pos: int, room: int, what: str) -> int:
    (length,) = _INT32.unpack_from(raw, pos)
    if not 0 <= length <= room:
        raise HeaderDecodeError(f"binary header {what} length {length} is outside [0, {room}]")
    return int(length)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderDecodeError(f"binary header {what} is not valid UTF-8: {exc}") from exc


def _decode_ext(block: bytes) -> dict[str, str]:
    spans = _ext_spans(block)
    if block.isascii():
        # The common case (`properties` included): byte offsets are character offsets, so one
        # decode of the block serves every key and value.
        text = block.decode("ascii")
        return {text[k0:k1]: text[v0:v1] for k0, k1, v0, v1 in spans}
    return {
        _text(block[k0:k1], "extFields key"): _text(block[v0:v1], "extFields value")
        for k0, k1, v0, v1 in spans
    }


def _ext_spans(block: bytes) -> list[tuple[int, int, int, int]]:
    """(key start, key end, value start, value end) of each entry of an ext block."""
    spans: list[tuple[int, int, int, int]] = []
    append = spans.append
    unpack_key_len, unpack_value_len = _UINT16.unpack_from, _INT32.unpack_from
    pos, end = 0, len(block)
    try:
        while pos < end:
            (key_len,) = unpack_key_len(block, pos)
            key_end = pos + 2 + key_len
            # raises struct.error when the key ran past the block, which bounds key_len
            (value_len,) = unpack_value_len(block, key_end)
            value_end = key_end + 4 + value_len
            if value_len < 0 or value_end > end:
                raise HeaderDecodeError(
                    f"extFields value length {value_len} at {key_end} overruns the header"
                )
            append((pos + 2, key_end, key_end + 4, value_end))
            pos = value_end
    except struct.error as exc:
        raise HeaderDecodeError(f"extFields entry at {pos} overruns the header") from exc
    return spans


# -- msgpack ----------------------------------------------------------------------------------


def encode_msgpack_header(cmd: RemotingCommand) -> bytes:
    """The msgpack header of `cmd` (tidemq's own serialisation)."""
    _check_fields(cmd)
    obj: dict[str, Any] = {
        "code": cmd.code,
        "language": cmd.language,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    try:
        packed: bytes = packer.pack(obj)
    except (ValueError, TypeError, OverflowError) as exc:
        packer.reset()  # a failed pack leaves what it wrote so far in the packer's buffer
        raise EncodeError(f"msgpack header cannot be encoded: {exc}") from exc
    return packed


def decode_msgpack_header(data: HeaderBytes, body: Body = b"") -> RemotingCommand:
    """Decode a msgpack header; `body` is attached to the command as is."""
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, TypeError) as exc:  # msgpack's own errors are ValueErrors
        # FormatError (a reserved byte) and StackError (nested too deep) come without a message
        reason = str(exc) or type(exc).__name__
        raise HeaderDecodeError(f"msgpack header does not parse: {reason}") from exc
    return _command_from_mapping(obj, body, SerializeType.MSGPACK, "msgpack")


# The compiled twins (client/remoting/_codec.pyx) when built: they read and write the header
# directly, without an intermediate dict, and hand anything unusual to these pure ones.
encode_json_header = speedups.select(encode_json_header, "tidemq.client.remoting._codec")
decode_json_header = speedups.select(decode_json_header, "tidemq.client.remoting._codec")
encode_msgpack_header = speedups.select(encode_msgpack_header, "tidemq.client.remoting._codec")
decode_msgpack_header = speedups.select(decode_msgpack_header, "tidemq.client.remoting._codec")


# -- dispatch ---------------------------------------------------------------------------------

_ENCODERS: Final[tuple[Callable[[RemotingCommand], bytes], ...]] = (
    encode_json_header,
    encode_rocketmq_header,
    encode_msgpack_header,
)
_DECODERS: Final[tuple[Callable[[HeaderBytes, Body], RemotingCommand], ...]] = (
    decode_json_header,
    decode_rocketmq_header,
    decode_msgpack_header,
)
assert len(_ENCODERS) == len(_DECODERS) == len(SerializeType)


def encode_header(cmd: RemotingCommand) -> bytes:
    """The header of `cmd` in `cmd.serialize_type`."""
    kind = cmd.serialize_type
    if not 0 <= kind < len(_ENCODERS):
        raise EncodeError(f"unknown serialize type {kind!r}")
    return _ENCODERS[kind](cmd)


def decode_header(serialize_type: int, data: HeaderBytes, body: Body = b"") -> RemotingCommand:
    """Decode a header in the serialisation its frame announced."""
    if not 0 <= serialize_type < len(_DECODERS):
        raise HeaderDecodeError(f"unknown serialize type {serialize_type}")
    return _DECODERS[serialize_type](data, body)
