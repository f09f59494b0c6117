"""The remoting codec: known bytes, round trips, stream splitting and every rejection."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.remoting import (
    BodyDecodeError,
    CommandFlag,
    EncodeError,
    FrameDecoder,
    FrameError,
    HeaderDecodeError,
    LanguageCode,
    RemotingCommand,
    RemotingProtocolError,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_header,
    dumps,
    encode_command,
    encode_command_parts,
    encode_header,
    loads_fastjson,
)
from tidemq.client.remoting.headers import (
    decode_json_header,
    decode_msgpack_header,
    decode_rocketmq_header,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
TEXT = st.text(max_size=20)


def frame(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    """A frame built by hand, independently of the code under test."""
    return struct.pack(">iI", 4 + len(header) + len(body), serialize_type << 24 | len(header)) + (
        header + body
    )


def binary_header(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: bytes,
    ext: list[tuple[bytes, bytes]],
) -> bytes:
    ext_bytes = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext
    )
    return (
        struct.pack(">hBhii", code, language, version, opaque, flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext_bytes))
        + ext_bytes
    )


# -- codes and the command --------------------------------------------------------------------


RQ, RS = RequestCode, ResponseCode

# Checked against RocketMQ's RequestCode.java, ResponseCode.java and LanguageCode.java.
KNOWN_CODES: list[tuple[int, int]] = [
    (RQ.SEND_MESSAGE, 10),
    (RQ.GET_ALL_TOPIC_CONFIG, 21),
    (RQ.GET_EARLIEST_MSG_STORETIME, 32),
    (RQ.GET_ALL_CONSUMER_OFFSET, 43),
    (RQ.GET_ALL_DELAY_OFFSET, 45),
    (RQ.GET_ROUTEINFO_BY_TOPIC, 105),
    (RQ.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201),
    (RQ.GET_KVLIST_BY_NAMESPACE, 219),
    (RQ.SEND_MESSAGE_V2, 310),
    (RQ.QUERY_DATA_VERSION, 322),
    (RQ.LITE_PULL_MESSAGE, 361),
    (RQ.GET_BROKER_HA_STATUS, 907),
    (RQ.CONTROLLER_GET_SYNC_STATE_DATA, 1006),
    (RQ.POP_MESSAGE, 200050),
    (RS.SUCCESS, 0),
    (RS.TRANSACTION_FAILED, 4),
    (RS.FLUSH_SLAVE_TIMEOUT, 12),
    (RS.SUBSCRIPTION_GROUP_NOT_EXIST, 26),
    (RS.CONSUMER_NOT_ONLINE, 206),
    (RS.NO_MESSAGE, 208),
    (RS.FLOW_CONTROL, 215),
    (LanguageCode.PYTHON, 3),
    (LanguageCode.RUST, 12),
    (SerializeType.ROCKETMQ, 1),
    (SerializeType.MSGPACK, 2),
    (CommandFlag.RESPONSE, 1),
    (CommandFlag.ONEWAY, 2),
]


@pytest.mark.parametrize(("member", "value"), KNOWN_CODES)
def test_codes_match_rocketmq(member: int, value: int) -> None:
    assert int(member) == value


def test_code_names_and_aliases() -> None:
    assert RS(209).name == "UPDATE_AND_CREATE_ACL_CONFIG_FAILED"
    assert RS["POLLING_FULL"] is RS.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert [int(lang) for lang in LanguageCode] == list(range(13))


def test_request_and_response_helpers() -> None:
    request = RemotingCommand.request(
        RequestCode.HEART_BEAT, {"a": "b"}, b"x", opaque=42, serialize_type=SerializeType.ROCKETMQ
    )
    assert (request.is_response, request.is_oneway) == (False, False)
    assert type(request.code) is int
    oneway = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, oneway=True)
    assert oneway.is_oneway
    assert oneway.flag == CommandFlag.ONEWAY
    assert oneway.ext_fields == {}

    response = RemotingCommand.response_to(request, ResponseCode.SYSTEM_BUSY, "busy", {"k": "v"})
    assert response.is_response
    assert not response.is_oneway
    assert response.opaque == 42
    assert response.serialize_type is SerializeType.ROCKETMQ
    assert (response.code, response.remark, response.ext_fields) == (2, "busy", {"k": "v"})
    assert response.language_name == "PYTHON"
    assert RemotingCommand(code=1, language=99).language_name == "99"


# -- known bytes ------------------------------------------------------------------------------


def test_json_frame_bytes() -> None:
    cmd = RemotingCommand(
        code=105,
        language=LanguageCode.JAVA,
        version=401,
        opaque=1,
        flag=0,
        ext_fields={"topic": "TopicTest"},
    )
    header = (
        b'{"code":105,"language":"JAVA","version":401,"opaque":1,"flag":0,'
        b'"extFields":{"topic":"TopicTest"}}'
    )
    assert encode_command(cmd) == frame(0, header)
    assert FrameDecoder().feed(frame(0, header)) == [cmd]


def test_json_frame_bytes_with_remark_body_and_unicode() -> None:
    cmd = RemotingCommand(
        code=0,
        language=LanguageCode.JAVA,
        version=401,
        opaque=-5,
        flag=1,
        remark="ok é",
        body=b"\x00body",
    )
    header = (
        b'{"code":0,"language":"JAVA","version":401,"opaque":-5,"flag":1,"remark":"ok \xc3\xa9"}'
    )
    assert encode_command(cmd) == frame(0, header, b"\x00body")
    assert FrameDecoder().feed(frame(0, header, b"\x00body")) == [cmd]


def test_rocketmq_binary_frame_bytes() -> None:
    cmd = RemotingCommand(
        code=10,
        language=LanguageCode.PYTHON,
        version=401,
        opaque=7,
        flag=1,
        remark="ok",
        ext_fields={"a": "b", "queueId": "3"},
        body=b"payload",
        serialize_type=SerializeType.ROCKETMQ,
    )
    header = binary_header(10, 3, 401, 7, 1, b"ok", [(b"a", b"b"), (b"queueId", b"3")])
    expected = frame(1, header, b"payload")
    assert expected[4:8] == bytes([1, 0, 0, len(header)])
    assert encode_command(cmd) == expected
    assert FrameDecoder().feed(expected) == [cmd]


def test_rocketmq_binary_empty_remark_and_ext() -> None:
    cmd = RemotingCommand(
        code=-1, language=0, version=0, opaque=0, serialize_type=SerializeType.ROCKETMQ
    )
    header = binary_header(-1, 0, 0, 0, 0, b"", [])
    assert len(header) == 21
    assert encode_header(cmd) == header
    assert decode_rocketmq_header(header) == cmd
    # an empty remark cannot be told from a missing one in this serialisation
    cmd.remark = ""
    assert encode_header(cmd) == header


def test_msgpack_header_bytes() -> None:
    cmd = RemotingCommand(
        code=10, language=3, version=401, opaque=7, flag=0, serialize_type=SerializeType.MSGPACK
    )
    header = b"\x85\xa4code\x0a\xa8language\x03\xa7version\xcd\x01\x91\xa6opaque\x07\xa4flag\x00"
    assert encode_header(cmd) == header
    assert decode_msgpack_header(header) == cmd


def test_cpp_client_frame() -> None:
    # rocketmq-client-cpp: JSON with a trailing newline, numbers in extFields, empty remark
    header = (
        b'{"code":11,"extFields":{"AccessKey":"","consumerGroup":"g","maxMsgNums":32,'
        b'"queueId":0,"queueOffset":12,"sysFlag":6},"flag":0,"language":"CPP",'
        b'"opaque":9,"remark":"","version":63}\n'
    )
    [cmd] = FrameDecoder().feed(frame(0, header))
    assert cmd.code == RequestCode.PULL_MESSAGE
    assert cmd.language == LanguageCode.CPP
    assert cmd.remark == ""
    assert cmd.ext_fields == {
        "AccessKey": "",
        "consumerGroup": "g",
        "maxMsgNums": "32",
        "queueId": "0",
        "queueOffset": "12",
        "sysFlag": "6",
    }


# -- JSON leniency ----------------------------------------------------------------------------


def test_json_ext_fields_are_normalised_to_strings() -> None:
    header = json.dumps(
        {
            "code": 10,
            "language": "JAVA",
            "version": 401,
            "opaque": 1,
            "flag": 0,
            "extFields": {
                "i": 0,
                "neg": -17,
                "big": 1234567890123,
                "t": True,
                "f": False,
                "s": "x",
                "n": None,
                "o": {"a": [1, "b"]},
            },
            "serializeTypeCurrentRPC": "JSON",
        }
    ).encode()
    cmd = decode_json_header(header.replace(b'"s": "x"', b'"d": 1.50, "s": "x"'))
    assert cmd.ext_fields == {
        "i": "0",
        "neg": "-17",
        "big": "1234567890123",
        "t": "true",
        "f": "false",
        "d": "1.50",
        "s": "x",
        "o": '{"a":[1,"b"]}',
    }


def test_json_minimal_header_defaults() -> None:
    cmd = decode_json_header(b'{"code":34,"opaque":5}')
    assert cmd == RemotingCommand(code=34, language=LanguageCode.JAVA, version=0, opaque=5)
    assert cmd.remark is None
    assert cmd.ext_fields == {}


@pytest.mark.parametrize(
    ("language", "expected"),
    [('"CPP"', 1), ('"GO"', 9), ("3", 3), ('"NOT_A_LANGUAGE"', 7), ("200", 200), ("null", 0)],
)
def test_json_language_as_name_or_number(language: str, expected: int) -> None:
    cmd = decode_json_header(f'{{"code":1,"opaque":2,"language":{language}}}'.encode())
    assert cmd.language == expected


def test_json_unknown_language_number_round_trips() -> None:
    cmd = RemotingCommand(code=1, language=200, opaque=3)
    header = encode_header(cmd)
    assert b'"language":200' in header
    assert decode_json_header(header) == cmd


def test_json_integer_fields_as_decimal_strings() -> None:
    cmd = decode_json_header(b'{"code":"105","opaque":"-3","flag":"1","version":"401"}')
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (105, -3, 1, 401)


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b"not json",
        b"[1,2]",
        b'{"opaque":1}',
        b'{"code":1}',
        b'{"code":1.5,"opaque":1}',
        b'{"code":true,"opaque":1}',
        b'{"code":"1x","opaque":1}',
        b'{"code":2147483648,"opaque":1}',
        b'{"code":1,"opaque":1,"language":[]}',
        b'{"code":1,"opaque":1,"language":256}',
        b'{"code":1,"opaque":1,"extFields":[]}',
        b'{"code":1,"opaque":1}x',
        b'{"code":1,"opaque":1,"extFields":{"k":3.5e}}',
        b'{"code":1,"opaque":1}\xff',
        b"[" * 100_000,
    ],
)
def test_json_header_rejections(header: bytes) -> None:
    with pytest.raises(HeaderDecodeError):
        decode_json_header(header)


# -- binary header rejections ----------------------------------------------------------------

GOOD_BINARY = binary_header(10, 0, 1, 2, 0, b"hi", [(b"k", b"v")])


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (GOOD_BINARY[:20], "shorter"),
        (binary_header(1, 0, 0, 0, 0, b"", [])[:13] + struct.pack(">ii", -1, 0), "remark length"),
        (binary_header(1, 0, 0, 0, 0, b"", [])[:13] + struct.pack(">ii", 5, 0), "remark length"),
        (binary_header(1, 0, 0, 0, 0, b"", [])[:17] + struct.pack(">i", -2), "extFields length"),
        (binary_header(1, 0, 0, 0, 0, b"", [])[:17] + struct.pack(">i", 1), "extFields length"),
        (GOOD_BINARY + b"\x00", "after extFields"),
        (
            binary_header(1, 0, 0, 0, 0, b"", [])[:17] + struct.pack(">i", 3) + b"\x00\x01k",
            "entry at 0 overruns",
        ),
        (
            binary_header(1, 0, 0, 0, 0, b"", [])[:17]
            + struct.pack(">i", 7)
            + struct.pack(">H", 9)
            + b"k"
            + struct.pack(">i", 0),
            "entry at 0 overruns",
        ),
        (
            binary_header(1, 0, 0, 0, 0, b"", [])[:17]
            + struct.pack(">i", 8)
            + struct.pack(">H", 1)
            + b"k"
            + struct.pack(">i", 2)
            + b"v",
            "value length",
        ),
        (
            binary_header(1, 0, 0, 0, 0, b"", [])[:17]
            + struct.pack(">i", 8)
            + struct.pack(">H", 1)
            + b"k"
            + struct.pack(">i", -1)
            + b"v",
            "value length",
        ),
        (binary_header(1, 0, 0, 0, 0, b"\xff\xfe", []), "UTF-8"),
        (binary_header(1, 0, 0, 0, 0, b"", [(b"\xc3", b"v")]), "UTF-8"),
    ],
)
def test_binary_header_rejections(header: bytes, reason: str) -> None:
    with pytest.raises(HeaderDecodeError, match=re.escape(reason)):
        decode_rocketmq_header(header)


@pytest.mark.parametrize(
    "header", [b"", b"\xc1", b"\x92\x01\x02", b"\x81\x01\x02", b"\x81\xa4code", b"\x80\x80"]
)
def test_msgpack_header_rejections(header: bytes) -> None:
    with pytest.raises(HeaderDecodeError):
        decode_msgpack_header(header)


# -- encode rejections ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("serialize_type", "changes", "reason"),
    [
        (SerializeType.ROCKETMQ, {"code": RequestCode.POP_MESSAGE}, "code=200050"),
        (SerializeType.ROCKETMQ, {"version": 40000}, "version"),
        (SerializeType.ROCKETMQ, {"opaque": 2**31}, "opaque"),
        (SerializeType.ROCKETMQ, {"language": 256}, "language"),
        (SerializeType.ROCKETMQ, {"ext_fields": {"k" * 40000: "v"}}, "32767"),
        (SerializeType.JSON, {"opaque": 2**31}, "opaque"),
        (SerializeType.JSON, {"flag": -(2**31) - 1}, "flag"),
        (SerializeType.JSON, {"language": -1}, "language"),
        (SerializeType.JSON, {"remark": "\ud800"}, "UTF-8"),
        (SerializeType.MSGPACK, {"code": 2**40}, "code"),
        (SerializeType.MSGPACK, {"remark": "\ud800"}, "msgpack"),
    ],
)
def test_encode_rejections(
    serialize_type: SerializeType, changes: dict[str, object], reason: str
) -> None:
    cmd = RemotingCommand(code=10, opaque=1, serialize_type=serialize_type)
    for name, value in changes.items():
        setattr(cmd, name, value)
    with pytest.raises(EncodeError, match=reason):
        encode_command(cmd)


def test_pop_codes_travel_in_json() -> None:
    cmd = RemotingCommand(code=RequestCode.POP_MESSAGE, opaque=1)
    assert FrameDecoder().feed(encode_command(cmd)) == [cmd]


def test_header_over_24_bits_is_refused() -> None:
    cmd = RemotingCommand(code=1, ext_fields={"big": "x" * (1 << 24)})
    with pytest.raises(EncodeError, match="24-bit"):
        encode_command(cmd)


def test_unknown_serialize_type() -> None:
    cmd = RemotingCommand(code=1)
    cmd.serialize_type = 3  # type: ignore[assignment]
    with pytest.raises(EncodeError):
        encode_header(cmd)
    with pytest.raises(HeaderDecodeError):
        decode_header(3, b"{}")


def test_encode_parts_allow_a_memoryview_body() -> None:
    payload = memoryview(bytearray(b"0123456789"))[2:8]
    cmd = RemotingCommand(code=1, opaque=2, body=payload, serialize_type=SerializeType.ROCKETMQ)
    head, body = encode_command_parts(cmd)
    assert body is payload
    assert head + body == encode_command(cmd)
    [decoded] = FrameDecoder().feed(encode_command(cmd))
    assert decoded.body == b"234567"
    assert type(decoded.body) is bytes


def test_body_views_follow_the_body_in_the_frame() -> None:
    records = memoryview(bytearray(b"0123456789abcdef"))
    cmd = RemotingCommand(code=1, opaque=2, body=b"<", serialize_type=SerializeType.MSGPACK)
    cmd.body_views = (records[0:4], records[10:16], memoryview(b"xyzw").cast("i"))
    frame = encode_command(cmd)
    head, body = encode_command_parts(cmd)
    assert head + body + b"".join(cmd.body_views) == frame
    [decoded] = FrameDecoder().feed(frame)
    assert decoded.body == b"<0123abcdefxyzw"
    assert decoded.body_views == ()


# -- round trips ------------------------------------------------------------------------------


@st.composite
def commands(draw: st.DrawFn, serialize_type: SerializeType | None = None) -> RemotingCommand:
    kind = draw(st.sampled_from(SerializeType)) if serialize_type is None else serialize_type
    binary = kind is SerializeType.ROCKETMQ
    return RemotingCommand(
        code=draw(INT16 if binary else INT32),
        language=draw(st.integers(0, 255)),
        version=draw(INT16 if binary else INT32),
        opaque=draw(INT32),
        flag=draw(INT32),
        # the binary form writes None and "" alike, as length 0
        remark=draw(st.none() | (st.text(min_size=1) if binary else st.text())),
        ext_fields=draw(st.dictionaries(TEXT, TEXT, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=kind,
    )


@pytest.mark.parametrize("kind", list(SerializeType))
@given(data=st.data())
def test_header_round_trip(kind: SerializeType, data: st.DataObject) -> None:
    cmd = data.draw(commands(kind))
    header = encode_header(cmd)
    decoded = decode_header(kind, header, cmd.body)
    assert decoded == cmd
    assert list(decoded.ext_fields) == list(cmd.ext_fields)
    assert encode_header(decoded) == header  # byte for byte


@given(cmd=commands())
def test_frame_round_trip(cmd: RemotingCommand) -> None:
    wire = encode_command(cmd)
    [decoded] = FrameDecoder().feed(wire)
    assert decoded == cmd
    assert encode_command(decoded) == wire


# -- streaming --------------------------------------------------------------------------------


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[RemotingCommand]:
    out: list[RemotingCommand] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


@settings(max_examples=50)
@given(cmds=st.lists(commands(), min_size=1, max_size=5))
def test_stream_one_byte_at_a_time(cmds: list[RemotingCommand]) -> None:
    wire = b"".join(encode_command(c) for c in cmds)
    decoder = FrameDecoder()
    assert feed_all(decoder, [wire[i : i + 1] for i in range(len(wire))]) == cmds
    assert decoder.buffered == 0


@given(
    cmds=st.lists(commands(), min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_stream_random_splits(cmds: list[RemotingCommand], cuts: list[int]) -> None:
    wire = b"".join(encode_command(c) for c in cmds)
    points = sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})
    chunks = [wire[a:b] for a, b in itertools.pairwise(points)]
    decoder = FrameDecoder()
    assert feed_all(decoder, chunks) == cmds
    assert decoder.buffered == 0


@settings(max_examples=30)
@given(
    sizes=st.lists(st.sampled_from([0, 10, 65_000, 70_000, 300_000]), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 10**6), max_size=20),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_large_frames_collected_from_random_chunks(
    sizes: list[int], cuts: list[int], kind: type
) -> None:
    # Frames with 64 KiB or more still to come are collected chunk by chunk, then joined.
    cmds = [
        RemotingCommand(code=i, opaque=i, remark="r" * i, body=bytes([i % 251]) * size)
        for i, size in enumerate(sizes)
    ]
    wire = b"".join(encode_command(c) for c in cmds)
    points = sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for a, b in itertools.pairwise(points):
        chunk = kind(wire[a:b])
        out.extend(decoder.feed(chunk))
        assert decoder.buffered == b - sum(len(encode_command(c)) for c in out)
        if isinstance(chunk, bytearray):
            chunk[:] = bytes(len(chunk))  # the caller reuses its buffer: nothing may alias it
    assert out == cmds
    assert all(type(c.body) is bytes for c in out)


def test_a_bad_header_of_a_collected_frame_fails_the_decoder() -> None:
    good = encode_command(RemotingCommand(code=1, opaque=1, body=b"x" * 200_000))
    bad = bytearray(good)
    bad[8:9] = b"!"  # the JSON header's first byte
    decoder = FrameDecoder()
    assert decoder.feed(bad[:1000]) == []
    assert decoder.buffered == 1000
    assert decoder.feed(bad[1000:5000]) == []
    with pytest.raises(FrameError):
        decoder.feed(bytes(bad[5000:]) + good)
    assert decoder.failed and decoder.buffered == 0


def test_coalesced_frames_and_a_partial_tail() -> None:
    cmds = [
        RemotingCommand(code=i, opaque=i, body=bytes([i]) * i, serialize_type=SerializeType(i % 3))
        for i in range(30)
    ]
    wire = b"".join(encode_command(c) for c in cmds)
    decoder = FrameDecoder()
    assert decoder.feed(wire[:-3]) == cmds[:-1]
    assert decoder.buffered == len(encode_command(cmds[-1])) - 3
    assert decoder.feed(b"") == []
    assert decoder.feed(wire[-3:]) == cmds[-1:]
    assert decoder.buffered == 0


def test_decoded_commands_do_not_alias_the_callers_buffer() -> None:
    cmd = RemotingCommand(code=1, opaque=1, remark="r", ext_fields={"k": "v"}, body=b"abcdef")
    for kind in SerializeType:
        cmd.serialize_type = kind
        data = bytearray(encode_command(cmd))
        [decoded] = FrameDecoder().feed(data)
        data[:] = b"\x00" * len(data)
        data.clear()  # would raise BufferError if the decoder still held a view
        assert decoded == cmd


def test_memoryview_input() -> None:
    cmd = RemotingCommand(code=7, opaque=8, body=b"xyz")
    wire = encode_command(cmd) * 2
    decoder = FrameDecoder()
    assert decoder.feed(memoryview(wire)[:10]) == []
    assert decoder.feed(memoryview(wire)[10:]) == [cmd, cmd]


# -- frame errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "reason"),
    [
        (struct.pack(">i", 3), "below the minimum"),
        (struct.pack(">i", 0), "below the minimum"),
        (struct.pack(">i", -8), "below the minimum"),
        (struct.pack(">i", 1025), "exceeds the maximum"),
        (struct.pack(">i", 2**31 - 1), "exceeds the maximum"),
        (struct.pack(">iI", 10, 7), "header length 7 exceeds"),
        (struct.pack(">iI", 4, 1), "header length 1 exceeds"),
        (struct.pack(">iI", 10, 3 << 24), "unknown serialize type 3"),
        (struct.pack(">iI", 10, 0xFF << 24), "unknown serialize type 255"),
    ],
)
def test_bad_prefix_fails_before_the_frame_arrives(prefix: bytes, reason: str) -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameError, match=reason):
        decoder.feed(prefix)
    assert decoder.failed


def test_bad_prefix_after_a_good_frame_in_the_buffer() -> None:
    good = encode_command(RemotingCommand(code=1, opaque=1))
    decoder = FrameDecoder()
    assert decoder.feed(good[:5]) == []
    with pytest.raises(FrameError, match="below the minimum"):
        decoder.feed(good[5:] + struct.pack(">i", 2))


def test_default_max_frame_size_is_16_mib() -> None:
    assert FrameDecoder().max_frame_size == 16 * 1024 * 1024
    FrameDecoder().feed(struct.pack(">iI", 16 * 1024 * 1024, 2))
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", 16 * 1024 * 1024 + 1))
    with pytest.raises(ValueError, match="max_frame_size"):
        FrameDecoder(max_frame_size=3)


@pytest.mark.parametrize(
    ("serialize_type", "header"),
    [
        (0, b"{oops"),
        (0, b""),
        (1, b"\x00\x01"),
        (1, binary_header(1, 0, 0, 0, 0, b"", []) + b"x"),
        (2, b"\xc1"),
    ],
)
def test_undecodable_header_is_a_frame_error(serialize_type: int, header: bytes) -> None:
    decoder = FrameDecoder()
    with pytest.raises(HeaderDecodeError) as info:
        decoder.feed(frame(serialize_type, header, b"body"))
    assert isinstance(info.value, FrameError)
    assert isinstance(info.value, RemotingProtocolError)


def test_decoder_is_unusable_after_an_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">i", 1))
    assert decoder.buffered == 0
    with pytest.raises(FrameError, match="already failed"):
        decoder.feed(encode_command(RemotingCommand(code=1)))


def test_frames_before_a_bad_one_are_lost_with_the_connection() -> None:
    # Frames that precede the error in the same chunk are not returned: the caller closes anyway.
    good = encode_command(RemotingCommand(code=1))
    with pytest.raises(FrameError):
        FrameDecoder().feed(good + struct.pack(">i", 1))


# -- fastjson bodies --------------------------------------------------------------------------


def test_fastjson_route_data_with_bare_keys() -> None:
    body = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    route = loads_fastjson(body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {
        "0": "127.0.0.1:10911",
        "1": "127.0.0.1:10921",
    }
    assert route["queueDatas"][0]["perm"] == 6


def test_fastjson_strings_that_look_like_bare_keys_are_untouched() -> None:
    body = (
        b'{"a":"{0:\\"x\\"}","b":"x,1:2","c\\"":{0:"{1:2}"},'
        b'"d":[1, 2, {3 : "q\\\\"}], -4:"neg", abc :true, "e":"\xc3\xa9{5:"}'
    )
    assert loads_fastjson(body) == {
        "a": '{0:"x"}',
        "b": "x,1:2",
        'c"': {"0": "{1:2}"},
        "d": [1, 2, {"3": "q\\"}],
        "-4": "neg",
        "abc": True,
        "e": "é{5:",
    }


def test_fastjson_standard_json_and_str_input() -> None:
    assert loads_fastjson(b'{"a":[1,2.5,null,true]}') == {"a": [1, 2.5, None, True]}
    assert loads_fastjson("{7:8}") == {"7": 8}
    assert loads_fastjson(memoryview(b"{7:8}")) == {"7": 8}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{0:",
        b'{"a":1',
        b'{"a":"unterminated {0:1}',
        b"{[1]:2}",
        b'{{"topic":"t"}:1}',
        b'"\xff"',
        b"[" * 100_000,
    ],
)
def test_fastjson_rejections(body: bytes) -> None:
    with pytest.raises(BodyDecodeError):
        loads_fastjson(body)


def test_fastjson_size_bound() -> None:
    assert loads_fastjson(b"[1, 2]", max_size=6) == [1, 2]
    with pytest.raises(BodyDecodeError, match="exceeds"):
        loads_fastjson(b"[1, 2] ", max_size=6)


def test_dumps_quotes_keys_compactly() -> None:
    assert dumps({"brokerAddrs": {0: "a:1", 1: "b:2"}, "é": [True, None]}) == (
        '{"brokerAddrs":{"0":"a:1","1":"b:2"},"é":[true,null]}'.encode()
    )
    with pytest.raises(EncodeError):
        dumps({"x": "\ud800"})


JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=12)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.integers(-1000, 1000) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def fastjson_style(value: object) -> str:
    """Serialise as fastjson does: integer keys bare, with some whitespace thrown in."""
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            name = str(key) if isinstance(key, int) else json.dumps(key)
            items.append(f"{name} : {fastjson_style(item)}")
        return "{" + " , ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(fastjson_style(v) for v in value) + "]"
    return json.dumps(value)


def with_string_keys(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): with_string_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_string_keys(v) for v in value]
    return value


@given(JSON_VALUES)
def test_fastjson_property(value: object) -> None:
    expected = with_string_keys(value)
    assert loads_fastjson(fastjson_style(value).encode()) == expected
    assert loads_fastjson(dumps(value)) == expected


@pytest.mark.parametrize("around", ["\n", " \t\r\n", "\n\n"])
def test_a_json_header_with_whitespace_after_it_reads_as_without(around: str) -> None:
    # rocketmq-client-cpp ends every header with a newline
    text = '{"code":10,"language":"CPP","version":417,"opaque":3,"flag":0,"extFields":{"a":1}}'
    plain = decode_json_header(text.encode())
    assert decode_json_header((text + around).encode()) == plain
    assert decode_json_header((around + text + around).encode()) == plain


@pytest.mark.parametrize("extra", ["x", "\n{}", "\x0b", "\u00a0"])
def test_a_json_header_with_anything_else_after_it_is_refused(extra: str) -> None:
    text = '{"code":10,"opaque":3}' + extra
    with pytest.raises(HeaderDecodeError, match="JSON header does not parse: Extra data"):
        decode_json_header(text.encode())


def test_remoting_command_fields_keep_the_order_positional_construction_relies_on() -> None:
    assert [f.name for f in dataclasses.fields(RemotingCommand)] == [
        "code",
        "language",
        "version",
        "opaque",
        "flag",
        "remark",
        "ext_fields",
        "body",
        "serialize_type",
        "body_views",
    ]
