"""The msgpack header codec's compiled twins (client/remoting/_codec.pyx) against the pure ones.

`encode_msgpack_header` must write the very bytes msgpack's Packer writes for the header map,
and `decode_msgpack_header` must give an equal command, or both must raise the same error with
the same message: on commands and headers as clients send them, on every integer and string
length form msgpack has, and on damaged, truncated and random bytes.
"""

from __future__ import annotations

from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.header_strategies import ODD, TEXT, commands, odd_commands
from tests.support.speedups_twins import selected
from tidemq.client.remoting import _codec, headers
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import EncodeError
from tidemq.client.remoting.frame import encode_command
from tidemq.common import speedups

MSGPACK = SerializeType.MSGPACK
ENCODE_KEY = "tidemq.client.remoting.headers.encode_msgpack_header"
DECODE_KEY = "tidemq.client.remoting.headers.decode_msgpack_header"
PURE_ENCODE = speedups.PURE_TWINS[ENCODE_KEY]
PURE_DECODE = speedups.PURE_TWINS[DECODE_KEY]


def outcome(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_compiled_twins_are_selected() -> None:
    assert selected(ENCODE_KEY) is _codec.encode_msgpack_header
    assert selected(DECODE_KEY) is _codec.decode_msgpack_header
    assert headers._DECODERS[SerializeType.MSGPACK] is _codec.decode_msgpack_header
    assert headers._ENCODERS[SerializeType.MSGPACK] is _codec.encode_msgpack_header


@given(commands)
@example(RemotingCommand(310, 12, 417, 2**31 - 1, -(2**31), None, {}, b"", SerializeType.MSGPACK))
def test_commands_encode_to_the_same_bytes_and_decode_back(command: RemotingCommand) -> None:
    compiled = outcome(_codec.encode_msgpack_header, command)
    assert compiled == outcome(PURE_ENCODE, command)
    if isinstance(compiled, bytes):
        for data in (compiled, memoryview(compiled), bytearray(compiled)):
            decoded = _codec.decode_msgpack_header(data, b"body")
            assert decoded == PURE_DECODE(data, b"body")
            assert decoded.ext_fields == command.ext_fields
            assert (decoded.code, decoded.opaque, decoded.remark) == (
                command.code,
                command.opaque,
                command.remark,
            )


@given(odd_commands)
def test_odd_commands_encode_or_fail_the_same(command: RemotingCommand) -> None:
    assert outcome(_codec.encode_msgpack_header, command) == outcome(PURE_ENCODE, command)


header_maps = st.dictionaries(
    st.sampled_from(["code", "opaque", "version", "flag", "language", "remark", "extFields"])
    | st.text(max_size=9),
    st.integers(-(2**63), 2**64 - 1)  # what msgpack can write
    | TEXT.filter(lambda t: t != "\ud800")
    | ODD
    | st.dictionaries(st.text(), st.text()),
)


@given(header_maps)
def test_any_header_map_decodes_or_fails_the_same(obj: dict[str, Any]) -> None:
    data = msgpack.packb(obj, use_bin_type=True)
    assert outcome(_codec.decode_msgpack_header, data, b"") == outcome(PURE_DECODE, data, b"")


@given(commands, st.data())
def test_damaged_headers_decode_or_fail_the_same(command: RemotingCommand, data: Any) -> None:
    try:
        packed = bytearray(PURE_ENCODE(command))
    except Exception:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(packed) - 1))
        packed[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packed) + 2))
    damaged = bytes(packed[:cut]) + data.draw(st.binary(max_size=3))
    assert outcome(_codec.decode_msgpack_header, damaged, b"") == outcome(PURE_DECODE, damaged, b"")


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_fail_the_same(data: bytes) -> None:
    assert outcome(_codec.decode_msgpack_header, data, b"") == outcome(PURE_DECODE, data, b"")


def test_repeated_keys_decode_as_msgpack_reads_them() -> None:
    # msgpack keeps the last value of a repeated key; the compiled twin hands such maps over
    code_twice = b"\x83\xa4code\x01\xa6opaque\x02\xa4code\x03"
    ext_twice = b"\x83\xa4code\x01\xa6opaque\x02\xa9extFields\x82\xa1a\xa1x\xa1a\xa1y"
    for data in (code_twice, ext_twice):
        assert _codec.decode_msgpack_header(data, b"") == PURE_DECODE(data, b"")
    assert _codec.decode_msgpack_header(code_twice, b"").code == 3
    assert _codec.decode_msgpack_header(ext_twice, b"").ext_fields == {"a": "y"}


def test_a_strided_view_is_decoded_by_the_pure_twin() -> None:
    packed = PURE_ENCODE(RemotingCommand(1, opaque=2, serialize_type=SerializeType.MSGPACK))
    strided = memoryview(packed * 2)[::2]
    assert outcome(_codec.decode_msgpack_header, strided, b"") == outcome(PURE_DECODE, strided, b"")


# --- encode_command_parts -------------------------------------------------------------------

PARTS_KEY = "tidemq.client.remoting.frame.encode_command_parts"
PURE_PARTS = speedups.PURE_TWINS[PARTS_KEY]


def test_the_compiled_frame_encoder_is_selected() -> None:
    assert selected(PARTS_KEY) is _codec.encode_command_parts
    assert PURE_PARTS is not _codec.encode_command_parts


@given(
    commands | odd_commands,
    st.sampled_from(list(SerializeType)),
    st.binary(max_size=64).flatmap(
        lambda b: st.sampled_from([b, bytearray(b), memoryview(b), memoryview(b).cast("B")])
    ),
)
def test_frames_encode_to_the_same_parts(
    command: RemotingCommand, kind: SerializeType, body: Any
) -> None:
    command.serialize_type = kind
    command.body = body
    compiled = outcome(_codec.encode_command_parts, command)
    assert compiled == outcome(PURE_PARTS, command)
    if isinstance(compiled[0], bytes):  # encoded, not an error
        assert compiled[1] is body


@given(
    commands | odd_commands,
    st.sampled_from(list(SerializeType)),
    st.binary(max_size=16),
    st.lists(
        st.tuples(st.binary(max_size=40), st.integers(0, 2)).map(
            lambda drawn: [
                memoryview(drawn[0]),  # of bytes
                memoryview(bytearray(drawn[0]))[1:],  # writable, a slice (of a map, in a pull)
                memoryview(drawn[0] * 4).cast("i"),  # items of 4 bytes
            ][drawn[1]]
        ),
        max_size=4,
    ),
)
def test_frames_with_body_views_encode_to_the_same_parts(
    command: RemotingCommand, kind: SerializeType, body: bytes, views: list[memoryview]
) -> None:
    command.serialize_type = kind
    command.body = body
    command.body_views = tuple(views)
    compiled = outcome(_codec.encode_command_parts, command)
    assert compiled == outcome(PURE_PARTS, command)
    if isinstance(compiled[0], bytes):  # the length counts the views' bytes, not their items
        assert compiled[0] + body + b"".join(views) == encode_command(command)


@pytest.mark.parametrize(
    "body",
    ["a str body", None, [1, 2], 7, memoryview(b"0123456789")[::2]],
    ids=["str", "None", "list", "int", "strided view"],
)
@pytest.mark.parametrize("kind", list(SerializeType), ids=[k.name for k in SerializeType])
def test_a_body_no_transport_can_write_is_refused_by_both(body: Any, kind: SerializeType) -> None:
    # At c82965c both returned such a body for the transport's write to fail on.
    command = RemotingCommand(1, body=body, serialize_type=kind)
    compiled = outcome(_codec.encode_command_parts, command)
    assert compiled == outcome(PURE_PARTS, command)
    assert compiled[0] is EncodeError
    assert outcome(encode_command, command)[0] is EncodeError


def test_body_views_of_another_kind_go_to_the_pure_twin() -> None:
    command = RemotingCommand(1, body=b"ab", serialize_type=SerializeType.MSGPACK)
    command.body_views = [memoryview(b"cd")]  # type: ignore[assignment]  # a list, not a tuple
    assert _codec.encode_command_parts(command) == PURE_PARTS(command)
    command.body_views = (b"cd",)  # type: ignore[assignment]  # bytes, not a view
    assert outcome(_codec.encode_command_parts, command) == outcome(PURE_PARTS, command)


# --- parse_frames ---------------------------------------------------------------------------

FRAMES_KEY = "tidemq.client.remoting.frame.parse_frames"
PURE_FRAMES = speedups.PURE_TWINS[FRAMES_KEY]


def test_the_compiled_frame_parser_is_selected() -> None:
    assert selected(FRAMES_KEY) is _codec.parse_frames
    assert PURE_FRAMES is not _codec.parse_frames


frame_commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(0, 2**31 - 1),
    remark=st.none() | st.text(max_size=10),
    ext_fields=st.dictionaries(st.text(max_size=4), st.text(max_size=12), max_size=5),
    body=st.binary(max_size=40),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def frames_outcome(function: Any, data: bytes, max_frame_size: int) -> Any:
    with memoryview(data) as view:
        return outcome(function, view, max_frame_size)


@given(st.lists(frame_commands, max_size=6), st.integers(0, 20), st.data())
def test_streams_parse_the_same(commands: list[RemotingCommand], cut: int, data: Any) -> None:
    stream = b"".join(encode_command(command) for command in commands)
    stream = stream[: max(0, len(stream) - cut)]  # a frame cut short: kept for the next read
    max_frame_size = data.draw(st.sampled_from([4, 64, 16 * 1024 * 1024]))
    compiled = frames_outcome(_codec.parse_frames, stream, max_frame_size)
    assert compiled == frames_outcome(PURE_FRAMES, stream, max_frame_size)


@given(st.lists(frame_commands, min_size=1, max_size=4), st.data())
def test_damaged_streams_parse_or_fail_the_same(commands: list[RemotingCommand], data: Any) -> None:
    stream = bytearray(b"".join(encode_command(command) for command in commands))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(stream) - 1))
        stream[at] = data.draw(st.integers(0, 255))
    damaged = bytes(stream) + data.draw(st.binary(max_size=9))
    assert frames_outcome(_codec.parse_frames, damaged, 1024) == frames_outcome(
        PURE_FRAMES, damaged, 1024
    )


@given(st.binary(max_size=40), st.integers(4, 2**31 - 1))
def test_random_bytes_parse_or_fail_the_same(data: bytes, max_frame_size: int) -> None:
    assert frames_outcome(_codec.parse_frames, data, max_frame_size) == frames_outcome(
        PURE_FRAMES, data, max_frame_size
    )


def test_texts_reused_from_the_cache_are_the_texts_sent() -> None:
    # more distinct short texts than the cache has slots, each decoded twice: a slot holding
    # another text (or the same bytes' earlier str) must never answer for the wrong bytes
    for round_ in range(2):
        for n in range(3000):
            ext = {f"k{n % 7}": f"v{n}", "same": "DefaultRegion", f"é{n}": "\u65e5" * (n % 9)}
            command = RemotingCommand(1, opaque=n, ext_fields=ext, serialize_type=MSGPACK)
            decoded = _codec.decode_msgpack_header(PURE_ENCODE(command), b"")
            assert decoded.ext_fields == ext, (round_, n)
    bad = b"\x82\xa4code\x01\xa6opaque\xa2\xc3\x28"  # an invalid UTF-8 value: not cached
    for _ in range(2):
        assert outcome(_codec.decode_msgpack_header, bad, b"") == outcome(PURE_DECODE, bad, b"")
