"""The remoting codec's compiled twins against their pure references.

The twins are in client/remoting/_codec.pyx and client/protocol/_headers.pyx.
`encode_send_head` (a producer's send frame head from its topic's template) must give the bytes
of the command it replaces, or the same error, and write well-formed sends without the pure twin;
decoded commands (their slots written in C) must have every field the class gives.
`signing_key` gives an `_HmacSha1` (OpenSSL's SHA-1 contexts by value) that must give the HMAC
`hmac` gives, and the same errors as OpenSSL's HMAC object, which the pure twin gives.
`signed_content_digest` (the HMAC of a signed request's content) must give the same digest, or
the same error, for ext fields and bodies as clients send them and for odd ones, with either
kind of key.
`signature_matches` (the broker's check of a request's Signature) must give the same answer, or
the same error, also when the key listing repeats (its order is kept from the last request).
`encode_signed_send_head` (a signed send's frame head, its HMAC fed only what varies) must give
the bytes of the signed command it replaces, or the same error, its signature the one the
command path makes.

`_command_from_mapping` turns a decoded JSON or msgpack header into a RemotingCommand, and
`decode_send_header` a send's extFields into its SendMessageRequestHeader. Both twins must give
equal results (the very extFields dict when it is kept) or raise the same error with the same
message, on headers as clients send them and on damaged ones.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import pickle
import types
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.speedups_twins import selected
from tidemq.client.message import SendResult, SendStatus
from tidemq.client.protocol import _headers
from tidemq.client.protocol.headers import (
    SEND_V2_KEYS,
    SendMessageRequestHeader,
    encode,
    header_schema,
)
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.send_frame import (
    SendFrameTemplate,
    send_frame_template,
    signed_send_template,
)
from tidemq.client.remoting import _codec, frame, headers
from tidemq.client.remoting.codes import DEFAULT_VERSION, LanguageCode, RequestCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.signing import (
    RequestSigner,
    SessionCredentials,
    signed_content_digest,
    signing_key,
)
from tidemq.common import speedups

KEY = "tidemq.client.remoting.headers._command_from_mapping"
PURE = speedups.PURE_TWINS[KEY]

INT32 = st.integers(-(2**31), 2**31 - 1)
ODD_NUMBERS = st.integers() | st.sampled_from([2**31, -(2**31) - 1, 256, -1])
SCALARS = st.none() | st.booleans() | ODD_NUMBERS | st.text(max_size=8) | st.floats()
TEXT_FIELDS = st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=6)
ODD_FIELDS = st.dictionaries(
    st.text(max_size=4) | st.integers(), SCALARS | st.lists(SCALARS, max_size=2), max_size=4
)

well_formed = st.fixed_dictionaries(
    {"code": INT32, "opaque": INT32},
    optional={
        "version": INT32,
        "flag": INT32,
        "language": st.integers(0, 255),
        "remark": st.none() | st.text(max_size=20),
        "extFields": st.none() | TEXT_FIELDS,
        "serializeTypeCurrentRPC": st.text(max_size=4),
    },
)
anything = (
    st.dictionaries(
        st.sampled_from(["code", "opaque", "version", "flag", "language", "remark", "extFields"]),
        SCALARS | TEXT_FIELDS | ODD_FIELDS,
    )
    | SCALARS
    | st.lists(SCALARS, max_size=3)
)


def outcome(twin: Any, obj: Any, kind: SerializeType) -> Any:
    try:
        return twin(obj, b"body", kind, kind.name)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_compiled_twin_is_selected() -> None:
    assert selected(KEY) is _codec._command_from_mapping
    assert headers._command_from_mapping is _codec._command_from_mapping
    assert PURE is not _codec._command_from_mapping


@given(well_formed, st.sampled_from([SerializeType.JSON, SerializeType.MSGPACK]))
def test_well_formed_headers_give_the_same_command(
    obj: dict[str, Any], kind: SerializeType
) -> None:
    compiled = _codec._command_from_mapping(obj, b"body", kind, kind.name)
    assert compiled == PURE(obj, b"body", kind, kind.name)
    if isinstance(obj.get("extFields"), dict):
        assert compiled.ext_fields is obj["extFields"]  # kept, not copied, by both


@given(anything, st.sampled_from([SerializeType.JSON, SerializeType.MSGPACK]))
def test_anything_else_gives_the_same_command_or_error(obj: Any, kind: SerializeType) -> None:
    assert outcome(_codec._command_from_mapping, obj, kind) == outcome(PURE, obj, kind)


# --- decode_send_header -------------------------------------------------------------------------

SEND_KEY = "tidemq.client.protocol.headers.decode_send_header"
SEND_PURE = speedups.PURE_TWINS[SEND_KEY]
V1_KEYS = [
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
    "maxReconsumeTimes",
]

send_headers = st.builds(
    SendMessageRequestHeader,
    producer_group=st.text(max_size=8),
    topic=st.text(max_size=8),
    default_topic=st.text(max_size=8),
    default_topic_queue_nums=INT32,
    queue_id=INT32,
    sys_flag=INT32,
    born_timestamp=st.integers(-(2**63), 2**63 - 1),
    flag=INT32,
    properties=st.none() | st.text(max_size=20),
    reconsume_times=st.none() | INT32,
    unit_mode=st.booleans(),
    batch=st.booleans(),
    max_reconsume_times=st.none() | INT32,
)
# what a damaged or odd header may hold where a value is expected
ODD_VALUES = (
    st.sampled_from(
        ["", " 7 ", "1_000", "TRUE", "True", "1", "0", "x", "2147483648", "-2147483649", "9" * 30]
    )
    # the compiled twin reads plain decimals of up to 18 digits itself, int() the rest
    | st.sampled_from(["+5", "-", "-0", "007", "\u0661\u0662", "9" * 18, "-" + "9" * 18])
    | st.sampled_from(["1" + "0" * 18, str(2**63 - 1), str(-(2**63)), str(2**63), "--1"])
    | st.integers(-(2**64), 2**64).map(str)
    | st.text(max_size=6)
)


def send_outcome(twin: Any, ext: dict[str, str], short: bool) -> Any:
    try:
        return twin(ext, short)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_compiled_send_header_decoder_is_selected() -> None:
    assert selected(SEND_KEY) is _headers.decode_send_header
    assert SEND_PURE is not _headers.decode_send_header


@given(send_headers, st.booleans())
def test_send_headers_decode_the_same(header: SendMessageRequestHeader, short: bool) -> None:
    ext = encode(header, SEND_V2_KEYS if short else None)
    compiled = _headers.decode_send_header(ext, short)
    assert compiled == SEND_PURE(ext, short) == header


# What rocketmq-client-cpp 2.x writes in every send (captured from a real send_sync): booleans as
# "0"/"1", numbers unquoted in the JSON (read back as their text), an empty AccessKey.
CPP_SEND_EXT = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "m1VMXCKcMInjSjQtS7/3NaOubdg=",
    "batch": "0",
    "bornTimestamp": "1795734415995",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "flag": "0",
    "producerGroup": "PG",
    "properties": "TAGS\x01T\x02WAIT\x01true\x02",
    "queueId": "0",
    "reconsumeTimes": "0",
    "sysFlag": "0",
    "topic": "StraceT",
    "unitMode": "0",
}


def test_the_cpp_clients_send_header_is_decoded_without_the_pure_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fallback costs 2 us per send (issue 15: JSON as cheap as msgpack).
    def no_fallback(ext: dict[str, str], short: bool) -> None:
        raise AssertionError("fell back to the pure twin")

    monkeypatch.setitem(speedups.PURE_TWINS, SEND_KEY, no_fallback)
    header = _headers.decode_send_header(CPP_SEND_EXT, False)
    assert header == SEND_PURE(CPP_SEND_EXT, False)
    assert (header.unit_mode, header.batch, header.queue_id) == (False, False, 0)


@given(
    send_headers,
    st.booleans(),
    st.dictionaries(st.sampled_from(range(len(V1_KEYS))), ODD_VALUES | st.none(), max_size=4),
)
def test_damaged_send_headers_decode_or_fail_the_same(
    header: SendMessageRequestHeader, short: bool, damage: dict[int, str | None]
) -> None:
    ext = encode(header, SEND_V2_KEYS if short else None)
    for index, value in damage.items():
        key = SEND_V2_KEYS[_FIELD_NAMES[index]] if short else V1_KEYS[index]
        if value is None:
            ext.pop(key, None)
        else:
            ext[key] = value
    assert send_outcome(_headers.decode_send_header, ext, short) == send_outcome(
        SEND_PURE, ext, short
    )


_FIELD_NAMES = [f.name for f in dataclasses.fields(SendMessageRequestHeader)]


# --- send_v2_ext_fields -------------------------------------------------------------------------

EXT_KEY = "tidemq.client.protocol.headers.send_v2_ext_fields"
EXT_PURE = speedups.PURE_TWINS[EXT_KEY]
_ENCODE_V2 = header_schema(SendMessageRequestHeader, SEND_V2_KEYS).encode


def ext_outcome(twin: Any, args: tuple[Any, ...]) -> Any:
    try:
        ext = twin(*args)
    except Exception as exc:
        return (type(exc), str(exc))
    return list(ext.items())  # the order too: it is the order of the header's bytes


def test_the_compiled_send_ext_fields_maker_is_selected() -> None:
    assert selected(EXT_KEY) is _headers.send_v2_ext_fields
    assert EXT_PURE is not _headers.send_v2_ext_fields


@given(
    st.tuples(
        st.text(max_size=8),
        st.text(max_size=8),
        st.text(max_size=8),
        INT32,
        INT32,
        INT32,
        st.integers(-(2**63), 2**63 - 1),
        INT32,
        st.none() | st.text(max_size=20),
        st.booleans(),
    )
)
def test_send_ext_fields_are_those_of_the_encoded_header(args: tuple[Any, ...]) -> None:
    # What the producer wrote before: its header object (reconsume_times 0) through the schema.
    header = SendMessageRequestHeader(*args[:9], 0, False, args[9])
    expected = list(_ENCODE_V2(header).items())
    assert ext_outcome(_headers.send_v2_ext_fields, args) == expected
    assert ext_outcome(EXT_PURE, args) == expected


class _Int(int):
    def __str__(self) -> str:
        return "seven"


@given(
    st.lists(
        st.none()
        | st.booleans()
        | ODD_NUMBERS
        | st.text(max_size=4)
        | st.floats()
        | st.just(_Int(7)),
        min_size=10,
        max_size=10,
    )
)
def test_send_ext_fields_of_odd_values_are_the_same(values: list[Any]) -> None:
    assert ext_outcome(_headers.send_v2_ext_fields, tuple(values)) == ext_outcome(
        EXT_PURE, tuple(values)
    )


# --- the signed content's HMAC (client/remoting/signing.py) --------------------------------

DIGEST_KEY = "tidemq.client.remoting.signing.signed_content_digest"
DIGEST_PURE = speedups.PURE_TWINS[DIGEST_KEY]
SIGNED_KEYS = st.sampled_from(["a", "b", "AccessKey", "Signature", "_UNIQUE_KEY_QUERY", "é", "Z"])
SIGNED_TEXT = st.text(max_size=12) | st.sampled_from(["\ud800", "x\udfff", "é" * 40, ""])
BODIES = st.binary(max_size=64) | st.binary(max_size=8).map(bytearray) | st.just(b"")
# bodies no client sends: refused (or hashed) as OpenSSL's HMAC does
ODD_BODIES = st.sampled_from(
    [memoryview(b"view"), memoryview(b"abcd")[::2], "text", "", 5, 0, None, bytearray()]
)


SIGNING_KEY_KEY = "tidemq.client.remoting.signing.signing_key"
OPENSSL_KEY = speedups.PURE_TWINS[SIGNING_KEY_KEY]  # OpenSSL's HMAC object (_hashlib)


def digest_outcome(twin: Any, ext: Any, body: Any, key: Any = None) -> Any:
    """The twin's result or error with the key "secret" (the compiled signing key unless
    `key`)."""
    if key is None:
        key = signing_key("secret")
    try:
        return twin(key, ext, body)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_compiled_signing_key_is_selected() -> None:
    assert selected(SIGNING_KEY_KEY) is _codec.signing_key
    assert OPENSSL_KEY is not _codec.signing_key
    assert type(signing_key("secret")) is _codec._HmacSha1


SECRETS = st.text(max_size=80) | st.sampled_from(["k" * 64, "k" * 65, "é" * 32, "é" * 33, ""])
DATA = (
    st.binary(max_size=200)
    | st.binary(max_size=70).map(bytearray)
    | st.binary(max_size=70).map(memoryview)
)


@given(SECRETS, st.lists(st.lists(DATA, max_size=4), min_size=1, max_size=3))
def test_hmac_sha1_keys_give_the_hmac_of_what_they_were_given(
    secret: str, feeds: list[list[Any]]
) -> None:
    # Keys shorter and longer than SHA-1's block; copies of the key and of copies, each fed its
    # own parts: each digest is hmac's of what that copy was given, as OpenSSL's object gives it.
    ours, theirs = _codec.signing_key(secret), OPENSSL_KEY(secret)
    assert ours.digest() == theirs.digest() == hmac.new(secret.encode(), b"", "sha1").digest()
    given_so_far = b""
    for parts in feeds:
        copy, reference = ours.copy(), theirs.copy()
        for part in parts:
            copy.update(part)
            reference.update(part)
        content = given_so_far + b"".join(bytes(part) for part in parts)
        assert copy.digest() == reference.digest()
        assert copy.digest() == hmac.new(secret.encode(), content, hashlib.sha1).digest()
        ours, theirs, given_so_far = copy, reference, content  # the next copies go on from here
    # a large update, and the key itself untouched by its copies
    key = _codec.signing_key(secret)
    big = bytes(range(256)) * 1200
    copy = key.copy()
    copy.update(big)
    assert copy.digest() == hmac.new(secret.encode(), big, hashlib.sha1).digest()
    assert key.digest() == OPENSSL_KEY(secret).digest()


@pytest.mark.parametrize(
    "data",
    ["text", 5, None, [1], memoryview(b"abcdef")[::2], memoryview(b"abcdef").cast("B", (2, 3))],
)
def test_hmac_sha1_keys_refuse_what_openssls_hmac_refuses(data: Any) -> None:
    def update(key: Any) -> Any:
        try:
            key.copy().update(data)
        except Exception as exc:
            return (type(exc), str(exc))
        return key.digest()

    assert update(_codec.signing_key("secret")) == update(OPENSSL_KEY("secret"))


def test_hmac_sha1_keys_of_odd_secrets_fail_as_the_pure_twin_does() -> None:
    for secret in ("x\ud800", 5, None, b"bytes"):
        outcomes = []
        for twin in (_codec.signing_key, OPENSSL_KEY):
            try:
                outcomes.append(twin(secret).digest())
            except Exception as exc:
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1], secret
    with pytest.raises(TypeError):  # a key's state is a secret: not pickled
        pickle.dumps(_codec.signing_key("secret"))


def test_the_compiled_signed_content_digest_is_selected() -> None:
    assert selected(DIGEST_KEY) is _codec.signed_content_digest
    assert DIGEST_PURE is not _codec.signed_content_digest


@given(st.dictionaries(SIGNED_KEYS | st.text(max_size=4), SIGNED_TEXT, max_size=8), BODIES)
def test_signed_content_digests_are_the_same(ext: dict[str, str], body: bytes) -> None:
    expected = digest_outcome(DIGEST_PURE, ext, body, OPENSSL_KEY("secret"))
    assert digest_outcome(_codec.signed_content_digest, ext, body) == expected
    assert digest_outcome(DIGEST_PURE, ext, body) == expected
    assert (
        digest_outcome(_codec.signed_content_digest, ext, body, OPENSSL_KEY("secret")) == expected
    )
    if not isinstance(expected, tuple):  # the HMAC of the values in key order, then the body
        signed = sorted(k for k in ext if k not in ("Signature", "_UNIQUE_KEY_QUERY"))
        content = "".join(ext[k] for k in signed).encode() + bytes(body)
        assert expected == hmac.new(b"secret", content, hashlib.sha1).digest()


@given(
    st.dictionaries(SIGNED_KEYS, SIGNED_TEXT | st.integers() | st.none(), max_size=4)
    | st.lists(st.tuples(SIGNED_KEYS, SIGNED_TEXT), max_size=3).map(
        lambda pairs: types.MappingProxyType(dict(pairs))
    ),
    BODIES | ODD_BODIES,
)
def test_odd_ext_fields_give_the_same_digest_or_error(ext: Any, body: Any) -> None:
    expected = digest_outcome(DIGEST_PURE, ext, body, OPENSSL_KEY("secret"))
    assert digest_outcome(_codec.signed_content_digest, ext, body) == expected
    assert digest_outcome(DIGEST_PURE, ext, body) == expected


# --- the broker's check of a signature (client/remoting/signing.py) -----------------------------

MATCHES_KEY = "tidemq.client.remoting.signing.signature_matches"
MATCHES_PURE = speedups.PURE_TWINS[MATCHES_KEY]
# Key listings that repeat (the compiled twin keeps the last one's order) and ones that vary.
LISTINGS = st.sampled_from(
    [
        ("AccessKey", "a", "b", "Signature"),
        ("b", "a", "Signature", "AccessKey", "_UNIQUE_KEY_QUERY"),
        ("Signature", "é", "Z", "a"),
        ("a", "b", "AccessKey"),
    ]
) | st.lists(SIGNED_KEYS | st.text(max_size=4), unique=True, max_size=8).map(tuple)


def test_the_compiled_signature_check_is_selected() -> None:
    assert selected(MATCHES_KEY) is _codec.signature_matches
    assert MATCHES_PURE is not _codec.signature_matches


@given(
    st.lists(
        st.tuples(LISTINGS, st.lists(SIGNED_TEXT, min_size=8, max_size=8), BODIES, st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_signature_checks_are_the_same(requests: list[Any]) -> None:
    # A run of requests, so that a listing is checked after the same one and after others.
    for keys, texts, body, sign in requests:
        ext = dict(zip(keys, texts, strict=False))
        if sign:  # the signature the content gives, or else whatever text the field holds
            try:
                digest = DIGEST_PURE(signing_key("secret"), ext, body)
                ext["Signature"] = base64.b64encode(digest).decode("ascii")
            except UnicodeEncodeError:
                pass
        expected = digest_outcome(MATCHES_PURE, ext, body, OPENSSL_KEY("secret"))
        assert digest_outcome(_codec.signature_matches, ext, body) == expected
        assert digest_outcome(MATCHES_PURE, ext, body) == expected
        if sign and not isinstance(expected, tuple) and "Signature" in ext:
            assert expected is True


@given(
    st.dictionaries(SIGNED_KEYS, SIGNED_TEXT | st.integers() | st.none(), max_size=4)
    | st.dictionaries(st.text(max_size=3), SIGNED_TEXT, min_size=33, max_size=40)
    | st.lists(st.tuples(SIGNED_KEYS, SIGNED_TEXT), max_size=3).map(
        lambda pairs: types.MappingProxyType(dict(pairs))
    ),
    BODIES | ODD_BODIES,
)
def test_signature_checks_of_odd_fields_are_the_same(ext: Any, body: Any) -> None:
    expected = digest_outcome(MATCHES_PURE, ext, body, OPENSSL_KEY("secret"))
    assert digest_outcome(_codec.signature_matches, ext, body) == expected
    assert digest_outcome(MATCHES_PURE, ext, body) == expected
    assert digest_outcome(_codec.signature_matches, ext, body, OPENSSL_KEY("secret")) == expected


def test_signatures_are_checked_and_made_without_the_pure_twins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("a pure twin checked or signed a well-formed request")

    monkeypatch.setitem(speedups.PURE_TWINS, MATCHES_KEY, refuse)
    monkeypatch.setitem(speedups.PURE_TWINS, DIGEST_KEY, refuse)
    key = signing_key("secret")
    ext = {"AccessKey": "ak", "b": "topic", "a": "group", "i": "UNIQ_KEY\x01é\x02"}
    for body in (b"", b"body", bytearray(b"body"), memoryview(b"x" * 300_000)):
        content = "".join(ext[k] for k in sorted(ext)).encode() + bytes(body)
        digest = hmac.new(b"secret", content, hashlib.sha1).digest()
        assert _codec.signed_content_digest(key, ext, body) == digest
        ext["Signature"] = base64.b64encode(digest).decode("ascii")
        assert _codec.signature_matches(key, ext, body) is True
        assert _codec.signature_matches(key, ext, bytes(body) + b"x") is False
        del ext["Signature"]


def test_a_signature_differing_anywhere_does_not_match() -> None:
    key = signing_key("secret")
    ext = {"AccessKey": "ak", "b": "topic", "a": "group"}
    good = base64.b64encode(DIGEST_PURE(key, ext, b"body")).decode("ascii")
    assert _codec.signature_matches(key, {**ext, "Signature": good}, b"body") is True
    assert _codec.signature_matches(key, {**ext, "Signature": good}, b"bodx") is False
    assert _codec.signature_matches(key, ext, b"body") is False  # no Signature field
    for i in range(len(good)):
        flipped = good[:i] + ("A" if good[i] != "A" else "B") + good[i + 1 :]
        assert _codec.signature_matches(key, {**ext, "Signature": flipped}, b"body") is False
    assert _codec.signature_matches(key, {**ext, "Signature": good + "="}, b"body") is False


# --- a producer's send frame head (client/protocol/send_frame.py) ------------------------------

HEAD_KEY = "tidemq.client.protocol.send_frame.encode_send_head"
HEAD_PURE = speedups.PURE_TWINS[HEAD_KEY]
INT64 = st.integers(-(2**63), 2**63 - 1)
SEND_TEXT = st.text(max_size=8) | st.sampled_from(["é" * 20, "\ud800", "TBW102", "x" * 40])
PROPERTIES = st.text(max_size=40) | st.sampled_from(["\ud800", "é" * 300, "UNIQ_KEY\x01AB\x02"])


def head_outcome(twin: Any, template: SendFrameTemplate, values: tuple[Any, ...]) -> Any:
    try:
        return twin(template, *values)
    except Exception as exc:
        return (type(exc), str(exc))


def test_the_compiled_send_head_encoder_is_selected() -> None:
    assert selected(HEAD_KEY) is _codec.encode_send_head
    assert HEAD_PURE is not _codec.encode_send_head


@given(
    st.tuples(SEND_TEXT, SEND_TEXT, SEND_TEXT, INT32, st.booleans()),
    st.tuples(INT32, INT32, INT32, INT64, INT32, PROPERTIES, st.binary(max_size=64)),
)
def test_send_heads_are_the_frames_of_the_commands_they_replace(
    shared: tuple[Any, ...], values: tuple[Any, ...]
) -> None:
    # What the producer sent before: a RemotingCommand of send_v2_ext_fields' extFields.
    group, topic, default_topic, queue_nums, batch = shared
    opaque, queue_id, sys_flag, born, flag, properties, body = values
    ext = EXT_PURE(
        group, topic, default_topic, queue_nums, queue_id, sys_flag, born, flag, properties, batch
    )
    command = RemotingCommand(
        int(RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2),
        int(LanguageCode.PYTHON),
        DEFAULT_VERSION,
        opaque,
        0,
        None,
        ext,
        body,
        SerializeType.MSGPACK,
    )
    try:
        expected: Any = frame.encode_command_parts(command)[0]
    except Exception as exc:
        expected = (type(exc), str(exc))
    template = send_frame_template(group, topic, default_topic, queue_nums, batch)
    assert head_outcome(_codec.encode_send_head, template, values) == expected
    assert head_outcome(HEAD_PURE, template, values) == expected
    if isinstance(expected, bytes):  # what a broker decodes from it
        (decoded,), _end = frame.parse_frames(memoryview(expected + body), 1 << 24)
        assert decoded == command


class _Text(str):
    pass


ODD_SEND_VALUES = (
    st.none()
    | st.booleans()
    | ODD_NUMBERS
    | st.sampled_from([2**63, -(2**63) - 1, 2**70, _Int(7), 1.5])
    | st.text(max_size=4)
    | st.just(_Text("sub"))
)


@given(
    st.tuples(SEND_TEXT | st.none(), SEND_TEXT, SEND_TEXT | st.integers(), INT32, st.booleans()),
    st.tuples(
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        PROPERTIES | st.none() | st.just(_Text("p")) | st.integers(),
        st.binary(max_size=8) | st.binary(max_size=8).map(bytearray) | st.just(memoryview(b"v")),
    ),
)
def test_send_heads_of_odd_values_are_the_same(
    shared: tuple[Any, ...], values: tuple[Any, ...]
) -> None:
    template = send_frame_template(*shared)
    assert head_outcome(_codec.encode_send_head, template, values) == head_outcome(
        HEAD_PURE, template, values
    )


def test_a_template_whose_parts_cannot_be_encoded_sends_the_pure_way() -> None:
    template = send_frame_template("group\ud800", "T", "TBW102", 4, False)
    assert template.head is None
    values = (1, 0, 0, 1, 0, "", b"body")
    assert head_outcome(_codec.encode_send_head, template, values) == head_outcome(
        HEAD_PURE, template, values
    )


# --- a signed send's frame head (client/protocol/send_frame.py) --------------------------------

SIGNED_HEAD_KEY = "tidemq.client.protocol.send_frame.encode_signed_send_head"
SIGNED_HEAD_PURE = speedups.PURE_TWINS[SIGNED_HEAD_KEY]
CREDENTIALS = st.builds(
    SessionCredentials,
    st.text(min_size=1, max_size=8) | st.just("bench-account"),
    st.text(min_size=1, max_size=8),
    st.just("") | st.text(max_size=8),
)


def test_the_compiled_signed_send_head_encoder_is_selected() -> None:
    assert selected(SIGNED_HEAD_KEY) is _codec.encode_signed_send_head
    assert SIGNED_HEAD_PURE is not _codec.encode_signed_send_head


@given(
    CREDENTIALS,
    st.tuples(SEND_TEXT, SEND_TEXT, SEND_TEXT, INT32, st.booleans()),
    st.tuples(INT32, INT32, INT32, INT64, INT32, PROPERTIES, st.binary(max_size=64)),
)
def test_signed_send_heads_are_the_frames_of_the_signed_commands_they_replace(
    credentials: SessionCredentials, shared: tuple[Any, ...], values: tuple[Any, ...]
) -> None:
    # What the producer sent before: the command of send_v2_ext_fields' extFields, signed.
    group, topic, default_topic, queue_nums, batch = shared
    opaque, queue_id, sys_flag, born, flag, properties, body = values
    ext = EXT_PURE(
        group, topic, default_topic, queue_nums, queue_id, sys_flag, born, flag, properties, batch
    )
    command = RemotingCommand(
        int(RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2),
        int(LanguageCode.PYTHON),
        DEFAULT_VERSION,
        opaque,
        0,
        None,
        ext,
        body,
        SerializeType.MSGPACK,
    )
    signer = RequestSigner(credentials)
    try:
        signer.sign(command)
        expected: Any = frame.encode_command_parts(command)[0]
    except Exception as exc:
        expected = (type(exc), str(exc))
    template = send_frame_template(group, topic, default_topic, queue_nums, batch)
    signed = signed_send_template(template, signer.access_key, signer.key, signer.security_token)
    assert type(signer.key) is _codec._HmacSha1
    assert head_outcome(_codec.encode_signed_send_head, signed, values) == expected
    assert head_outcome(SIGNED_HEAD_PURE, signed, values) == expected
    # the same template with OpenSSL's HMAC object (the compiled twin leaves it to the pure one)
    openssl = signed_send_template(
        template, signer.access_key, OPENSSL_KEY(credentials.secret_key), signer.security_token
    )
    assert head_outcome(_codec.encode_signed_send_head, openssl, values) == expected
    if isinstance(expected, bytes):  # what a broker decodes from it, and checks
        (decoded,), _end = frame.parse_frames(memoryview(expected + body), 1 << 24)
        assert decoded == command
        digest = signed_content_digest(
            signing_key(credentials.secret_key), decoded.ext_fields, decoded.body
        )
        assert decoded.ext_fields["Signature"] == base64.b64encode(digest).decode("ascii")


@given(
    CREDENTIALS,
    st.tuples(SEND_TEXT | st.none(), SEND_TEXT, SEND_TEXT | st.integers(), INT32, st.booleans()),
    st.tuples(
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        ODD_SEND_VALUES,
        PROPERTIES | st.none() | st.just(_Text("p")) | st.integers(),
        st.binary(max_size=8) | st.binary(max_size=8).map(bytearray) | st.just(memoryview(b"v")),
    ),
)
def test_signed_send_heads_of_odd_values_are_the_same(
    credentials: SessionCredentials, shared: tuple[Any, ...], values: tuple[Any, ...]
) -> None:
    signer = RequestSigner(credentials)
    signed = signed_send_template(
        send_frame_template(*shared), signer.access_key, signer.key, signer.security_token
    )
    assert head_outcome(_codec.encode_signed_send_head, signed, values) == head_outcome(
        SIGNED_HEAD_PURE, signed, values
    )


@pytest.mark.parametrize(("group", "access_key"), [("group\ud800", "ak"), ("PG", "ak\ud800")])
def test_a_signed_template_whose_parts_cannot_be_encoded_sends_the_pure_way(
    group: str, access_key: str
) -> None:
    signed = signed_send_template(
        send_frame_template(group, "T", "TBW102", 4, False), access_key, signing_key("s")
    )
    values = (1, 0, 0, 1, 0, "", b"body")
    expected = head_outcome(SIGNED_HEAD_PURE, signed, values)
    assert head_outcome(_codec.encode_signed_send_head, signed, values) == expected


def test_a_producers_signed_send_head_is_written_without_the_pure_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any) -> bytes:
        raise AssertionError("the pure twin wrote a well-formed signed send head")

    monkeypatch.setitem(speedups.PURE_TWINS, SIGNED_HEAD_KEY, refuse)
    key = signing_key("secret")
    for token in ("", "token"):
        signed = signed_send_template(
            send_frame_template("PG", "Topic", "TBW102", 4, False), "account", key, token
        )
        for values in [
            (1, 3, 0, 1_700_000_000_000, 0, "UNIQ_KEY\x01AB\x02WAIT\x01true\x02", b"x" * 1024),
            (2**31 - 1, 2**31 - 1, -1, -(2**63), -(2**31), "é" * 300, b""),
        ]:
            (decoded,), _end = frame.parse_frames(
                memoryview(_codec.encode_signed_send_head(signed, *values) + values[-1]),
                1 << 24,
            )
            ext = decoded.ext_fields
            assert (ext["AccessKey"], ext.get("SecurityToken", "")) == ("account", token)
            assert ext["i"] == values[5]
            digest = signed_content_digest(key, ext, decoded.body)
            assert ext["Signature"] == base64.b64encode(digest).decode("ascii")


# --- decoded commands: their slots written in C (_codec._new_command) --------------------------


@given(
    st.fixed_dictionaries(
        {"code": INT32, "opaque": INT32, "flag": INT32, "language": st.integers(0, 255)},
        optional={"remark": st.text(max_size=8), "extFields": TEXT_FIELDS},
    ),
    st.binary(max_size=8),
)
def test_decoded_commands_have_every_field_their_class_gives(header: Any, body: bytes) -> None:
    data = msgpack.packb(header)
    compiled = _codec.decode_msgpack_header(data, body)
    pure = speedups.PURE_TWINS["tidemq.client.remoting.headers.decode_msgpack_header"](data, body)
    assert type(compiled) is RemotingCommand
    for field in dataclasses.fields(RemotingCommand):
        assert getattr(compiled, field.name) == getattr(pure, field.name), field.name
    assert compiled.body_views == ()


def test_a_producers_send_head_is_written_without_the_pure_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any) -> bytes:
        raise AssertionError("the pure twin wrote a well-formed send head")

    monkeypatch.setitem(speedups.PURE_TWINS, HEAD_KEY, refuse)
    template = send_frame_template("PG", "Topic", "TBW102", 4, False)
    for values in [
        (1, 3, 0, 1_700_000_000_000, 0, "UNIQ_KEY\x01AB\x02WAIT\x01true\x02", b"x" * 1024),
        (2**31 - 1, 2**31 - 1, -1, -(2**63), -(2**31), "é" * 300, b""),
    ]:
        (decoded,), _end = frame.parse_frames(
            memoryview(_codec.encode_send_head(template, *values) + values[-1]), 1 << 24
        )
        assert decoded.ext_fields["e"] == str(values[1])
        assert decoded.ext_fields["g"] == str(values[3])
        assert decoded.ext_fields["i"] == values[5]
        assert decoded.opaque == values[0]


# --- a send's SendResult (client/message.py) -----------------------------------------------------

RESULT_KEY = "tidemq.client.message.send_result"
RESULT_PURE = speedups.PURE_TWINS[RESULT_KEY]


def test_the_compiled_send_result_maker_is_selected() -> None:
    assert selected(RESULT_KEY) is _codec.send_result
    assert RESULT_PURE is not _codec.send_result


@given(
    st.sampled_from(list(SendStatus)),
    st.text(max_size=8),
    st.text(max_size=8),
    st.builds(MessageQueue, st.text(max_size=4), st.text(max_size=4), INT32),
    st.integers(),
)
def test_send_results_are_the_ones_the_class_makes(
    status: SendStatus, msg_id: str, offset_msg_id: str, queue: MessageQueue, offset: int
) -> None:
    made = _codec.send_result(status, msg_id, offset_msg_id, queue, offset)
    expected = SendResult(status, msg_id, offset_msg_id, queue, offset)
    assert type(made) is SendResult
    assert made == expected and hash(made) == hash(expected)
    assert RESULT_PURE(status, msg_id, offset_msg_id, queue, offset) == expected
    for field in dataclasses.fields(SendResult):
        assert getattr(made, field.name) is getattr(expected, field.name), field.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.queue_offset = 1  # type: ignore[misc]
