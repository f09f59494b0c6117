"""The JSON header codec's compiled twins (client/remoting/_codec.pyx) against the pure references.

`encode_json_header` must write the very bytes the json module writes for the header object,
and `decode_json_header` must give an equal command, or both must raise the same error with the
same message: on headers as Java and the C++ client write them (unquoted numbers, booleans and a
trailing newline among them), and on escapes, floats, nesting, nulls, repeated keys, damaged,
truncated and random bytes.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.header_strategies import NUMBERS, ODD, TEXT, commands, odd_commands
from tests.support.speedups_twins import selected
from tidemq.client.remoting import _codec, headers
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.common import speedups

ENCODE_KEY = "tidemq.client.remoting.headers.encode_json_header"
DECODE_KEY = "tidemq.client.remoting.headers.decode_json_header"
PURE_ENCODE = speedups.PURE_TWINS[ENCODE_KEY]
PURE_DECODE = speedups.PURE_TWINS[DECODE_KEY]

# what a cpp-style extFields value may be: text, numbers, booleans, and what only json handles
EXT_VALUES = (
    TEXT
    | st.integers(-(10**20), 10**20)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.lists(st.integers(), max_size=2)
)
# text with what JSON escapes: quotes, backslashes, control characters
ESCAPED = st.sampled_from(['a"b', "a\\b", "\n", "\x00", "\x1f", "\u2028", "\x7f"])


def outcome(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_compiled_twins_are_selected() -> None:
    assert selected(ENCODE_KEY) is _codec.encode_json_header
    assert selected(DECODE_KEY) is _codec.decode_json_header
    assert headers._DECODERS[SerializeType.JSON] is _codec.decode_json_header
    assert headers._ENCODERS[SerializeType.JSON] is _codec.encode_json_header


@given(commands)
@example(RemotingCommand(310, 1, 401, 7, 0, 'say "hi"', {"k": "v\\"}, b"", SerializeType.JSON))
@example(RemotingCommand(0, 99, -1, -(2**31), 2**31 - 1, "", {}, b"", SerializeType.JSON))
def test_commands_encode_to_the_same_bytes_and_decode_back(command: RemotingCommand) -> None:
    command.serialize_type = SerializeType.JSON
    compiled = outcome(_codec.encode_json_header, command)
    assert compiled == outcome(PURE_ENCODE, command)
    if isinstance(compiled, bytes):
        for data in (compiled, memoryview(compiled), bytearray(compiled), compiled + b"\n"):
            decoded = _codec.decode_json_header(data, b"body")
            assert decoded == PURE_DECODE(data, b"body")
            assert decoded.ext_fields == command.ext_fields


@given(odd_commands)
def test_odd_commands_encode_or_fail_the_same(command: RemotingCommand) -> None:
    command.serialize_type = SerializeType.JSON
    assert outcome(_codec.encode_json_header, command) == outcome(PURE_ENCODE, command)


header_objects = st.dictionaries(
    st.sampled_from(["code", "opaque", "version", "flag", "language", "remark", "extFields"])
    | st.sampled_from(["serializeTypeCurrentRPC", "other"])
    | st.text(max_size=9),
    NUMBERS
    | TEXT.filter(lambda t: t != "\ud800")
    | ESCAPED
    | st.sampled_from(["CPP", "JAVA", "PYTHON", "NOPE", "105"])
    | ODD.filter(lambda v: not isinstance(v, bytes))
    | st.dictionaries(st.text(max_size=5) | ESCAPED, EXT_VALUES, max_size=6),
)
LAYOUTS = st.sampled_from([(",", ":"), (", ", ": "), (",\n ", " :\t")])


@given(header_objects, LAYOUTS, st.sampled_from(["", "\n", " \r\n", "x", "{}"]), st.booleans())
@example({"code": 1, "opaque": 2, "extFields": {"i": "K\x01\U0001f600\x02"}}, (",", ":"), "", True)
@example({"code": 1, "opaque": 2, "remark": "\ud800"}, (",", ":"), "", True)  # a lone surrogate
def test_any_header_object_decodes_or_fails_the_same(
    obj: dict[str, Any], separators: tuple[str, str], tail: str, ascii_only: bool
) -> None:
    # ensure_ascii writes non-ASCII text as \\u escapes, surrogate pairs included
    text = json.dumps(obj, separators=separators, ensure_ascii=ascii_only) + tail
    data = text.encode("utf-8", "surrogatepass")
    assert outcome(_codec.decode_json_header, data, b"") == outcome(PURE_DECODE, data, b"")


def test_cpp_headers_decode_as_the_json_module_reads_them() -> None:
    cpp = (
        b'{"code":310,"extFields":{"a":"PG","b":"T","d":4,"e":0,"k":false,"n":-7,"z":"x"},'
        b'"flag":0,"language":"CPP","opaque":5,"serializeTypeCurrentRPC":"JSON","version":401}\n'
    )
    compiled = _codec.decode_json_header(cpp, b"")
    assert compiled == PURE_DECODE(cpp, b"")
    assert compiled.ext_fields == {
        "a": "PG",
        "b": "T",
        "d": "4",
        "e": "0",
        "k": "false",
        "n": "-7",
        "z": "x",
    }
    assert compiled.language == 1


@given(commands, st.data())
def test_damaged_headers_decode_or_fail_the_same(command: RemotingCommand, data: Any) -> None:
    command.serialize_type = SerializeType.JSON
    try:
        text = bytearray(PURE_ENCODE(command))
    except Exception:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text) - 1))
        text[at] = data.draw(st.sampled_from(list(b'{}[]:,"\\ -0123456789.eEtrufalsn\x00\xff')))
    cut = data.draw(st.integers(0, len(text) + 2))
    damaged = bytes(text[:cut]) + data.draw(st.binary(max_size=3))
    assert outcome(_codec.decode_json_header, damaged, b"") == outcome(PURE_DECODE, damaged, b"")


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_fail_the_same(data: bytes) -> None:
    assert outcome(_codec.decode_json_header, data, b"") == outcome(PURE_DECODE, data, b"")


def test_repeated_and_null_fields_decode_as_the_json_module_reads_them() -> None:
    for data in (
        b'{"code":1,"opaque":2,"code":3}',
        b'{"code":1,"opaque":2,"extFields":{"a":"x","a":"y"}}',
        b'{"code":1,"opaque":2,"extFields":{"a":"x","a":null}}',
        b'{"code":1,"opaque":2,"remark":null}',
        b'{"code":-0,"opaque":2}',
        b'{"code":01,"opaque":2}',
        b'{"code":1.0,"opaque":2}',
        b'{"code":"7","opaque":2}',
        b'{"code":1,"opaque":2,"extFields":{"a":1e3,"b":0.5}}',
    ):
        assert outcome(_codec.decode_json_header, data, b"") == outcome(PURE_DECODE, data, b"")


def test_headers_with_escapes_take_the_compiled_path(monkeypatch: Any) -> None:
    def refuse(*_args: Any) -> None:
        raise AssertionError("handed to the pure twin")

    ext = {"i": "UNIQ_KEY\x01ABC\x02TAGS\x01t\x02", "q": 'say "hi" \\ \n é \U0001f600'}
    command = RemotingCommand(310, 1, 401, 7, 0, "tab\there", ext, b"", SerializeType.JSON)
    expected = PURE_ENCODE(command)
    monkeypatch.setitem(speedups.PURE_TWINS, ENCODE_KEY, refuse)
    monkeypatch.setitem(speedups.PURE_TWINS, DECODE_KEY, refuse)
    assert _codec.encode_json_header(command) == expected
    ascii_only = json.dumps(json.loads(expected)).encode()  # \u escapes, a surrogate pair
    for data in (expected, ascii_only):
        assert _codec.decode_json_header(data, b"") == command
