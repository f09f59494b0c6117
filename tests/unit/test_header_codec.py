"""The header codec's precompiled field tables against the plain walk over dataclass fields.

`client.protocol.headers.decode`/`encode` resolve each class's wire keys, converters and bounds
once. The reference below is the straightforward per-field walk they replaced; for every header
class, with and without the SEND_MESSAGE_V2 renaming, both must give the same header or raise
the same error for any extFields, and the same extFields for any header.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.protocol import headers
from tidemq.client.protocol.headers import (
    SEND_V2_KEYS,
    HeaderFieldError,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    decode,
    encode,
)
from tidemq.common.schema import camel_case

HEADER_CLASSES = sorted(
    (
        cls
        for cls in vars(headers).values()
        if isinstance(cls, type)
        and dataclasses.is_dataclass(cls)
        and cls.__name__.endswith("Header")
    ),
    key=lambda cls: cls.__name__,
)
RENAMINGS = [None, SEND_V2_KEYS]


def _reference_bounds(cls: type[Any], name: str) -> tuple[Any, Any]:
    meta = next(f.metadata for f in dataclasses.fields(cls) if f.name == name)
    return meta.get("min"), meta.get("max")


def _reference_fields(cls: type[Any]) -> list[tuple[str, str, Any, bool, int]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        optional = type(None) in typing.get_args(kind)
        if optional:
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        required = f.metadata.get("required", False) or (
            f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
            and not optional
        )
        key = f.metadata.get("key") or camel_case(f.name)
        out.append((f.name, key, kind, required, f.metadata.get("bits", 64)))
    return out


def _reference_convert(cls_name: str, key: str, raw: str, kind: Any, bits: int) -> Any:
    if kind is int:
        try:
            value = int(raw)
        except ValueError:
            raise HeaderFieldError(f"{cls_name}.{key}: not an integer: {raw!r}") from None
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise HeaderFieldError(f"{cls_name}.{key}: {raw!r} does not fit {bits} bits")
        return value
    if kind is bool:
        return raw.strip().lower() == "true"
    return raw


def reference_decode(cls: type[Any], ext: dict[str, str], keys: dict[str, str] | None) -> Any:
    values: dict[str, Any] = {}
    for name, key, kind, required, bits in _reference_fields(cls):
        wire = keys.get(name, key) if keys else key
        raw = ext.get(wire)
        if raw is None or (raw == "" and kind is int):
            if required:
                raise HeaderFieldError(f"the custom field <{key}> is null")
            continue
        values[name] = _reference_convert(cls.__name__, key, raw, kind, bits)
        # A field's declared bounds (issue 30: queue counts, for one), after its width.
        low, high = _reference_bounds(cls, name) if kind is int else (None, None)
        if low is not None and values[name] < low:
            raise HeaderFieldError(f"{key}: must be at least {low}, got {values[name]}")
        if high is not None and values[name] > high:
            raise HeaderFieldError(f"{key}: must be at most {high}, got {values[name]}")
    return cls(**values)


def reference_encode(header: Any, keys: dict[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, key, _kind, _required, _bits in _reference_fields(type(header)):
        value = getattr(header, name)
        if value is None:
            continue
        wire = keys.get(name, key) if keys else key
        out[wire] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _wire_keys(cls: type[Any], keys: dict[str, str] | None) -> list[str]:
    return [keys.get(name, key) if keys else key for name, key, *_ in _reference_fields(cls)]


# Values that exercise every branch: integers in and out of 32 and 64 bits, non-integers,
# empty strings (missing for an integer), booleans in Java's and the C++ client's spelling.
WIRE_VALUES = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["", " ", "true", "TRUE", " true ", "false", "1", "0", "x", "1.5", "-"]),
    st.text(max_size=8),
)


@st.composite
def ext_fields(draw: st.DrawFn) -> tuple[type[Any], dict[str, str] | None, dict[str, str]]:
    cls = draw(st.sampled_from(HEADER_CLASSES))
    keys = draw(st.sampled_from(RENAMINGS))
    wire = _wire_keys(cls, keys)
    present = draw(st.lists(st.sampled_from(wire), unique=True)) if wire else []
    ext = {key: draw(WIRE_VALUES) for key in present}
    ext.update(draw(st.dictionaries(st.text(max_size=4), WIRE_VALUES, max_size=2)))
    return cls, keys, ext


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except HeaderFieldError as exc:
        return ("HeaderFieldError", str(exc))


@given(ext_fields())
def test_decode_matches_the_reference(case: tuple[type[Any], Any, dict[str, str]]) -> None:
    cls, keys, ext = case
    assert _outcome(decode, cls, ext, keys) == _outcome(reference_decode, cls, ext, keys)


@st.composite
def headers_to_encode(draw: st.DrawFn) -> tuple[Any, dict[str, str] | None]:
    """Any header whose integers fit their Java type and bounds (so that it also decodes back)."""
    cls = draw(st.sampled_from(HEADER_CLASSES))
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        bits = f.metadata.get("bits", 64)
        low = f.metadata.get("min", -(2 ** (bits - 1)))
        high = f.metadata.get("max", 2 ** (bits - 1) - 1)
        kinds = typing.get_args(hints[f.name]) or (hints[f.name],)
        strategies: list[st.SearchStrategy[Any]] = []
        for kind in kinds:
            if kind is int:
                strategies.append(st.integers(low, high))
            elif kind is bool:
                strategies.append(st.booleans())
            elif kind is str:
                strategies.append(st.text(max_size=8))
            elif kind is type(None):
                strategies.append(st.none())
        values[f.name] = draw(st.one_of(strategies))
    return cls(**values), draw(st.sampled_from(RENAMINGS))


@given(headers_to_encode())
def test_encode_matches_the_reference(case: tuple[Any, dict[str, str] | None]) -> None:
    header, keys = case
    assert encode(header, keys) == reference_encode(header, keys)


@given(headers_to_encode())
def test_encoded_headers_decode_to_themselves(case: tuple[Any, dict[str, str] | None]) -> None:
    header, keys = case
    assert decode(type(header), encode(header, keys), keys) == header


def test_a_renaming_changed_in_place_is_not_served_from_a_stale_table() -> None:
    header = SendMessageRequestHeader(producer_group="PG", topic="T", queue_id=1)
    keys = dict(SEND_V2_KEYS)
    assert encode(header, keys)["b"] == "T"
    keys["topic"] = "topicRenamed"
    ext = encode(header, keys)
    assert ext["topicRenamed"] == "T" and "b" not in ext
    assert decode(SendMessageRequestHeader, ext, keys).topic == "T"


def test_renamings_built_on_the_fly_stay_bounded() -> None:
    header = SendMessageRequestHeader(producer_group="PG", topic="T")
    for _ in range(3 * headers._MAX_RENAMED_CODECS):
        assert encode(header, {"topic": "b"})["b"] == "T"
    assert len(headers._RENAMED_CODECS) <= headers._MAX_RENAMED_CODECS


def test_errors_name_the_field() -> None:
    ext = encode(SendMessageRequestHeader(producer_group="PG", topic="T"), SEND_V2_KEYS)
    with pytest.raises(HeaderFieldError, match=r"^the custom field <topic> is null$"):
        decode(SendMessageRequestHeader, {k: v for k, v in ext.items() if k != "b"}, SEND_V2_KEYS)
    with pytest.raises(
        HeaderFieldError,
        match=r"^SendMessageRequestHeader.queueId: '2147483648' does not fit 32 bits$",
    ):
        decode(SendMessageRequestHeader, {**ext, "e": "2147483648"}, SEND_V2_KEYS)
    with pytest.raises(HeaderFieldError, match=r"^PullMessageRequestHeader.queueId: not an"):
        decode(PullMessageRequestHeader, {"consumerGroup": "G", "topic": "T", "queueId": "x"})
