"""tidemq.common.schema: one declarative camelCase codec for headers, name-server headers and
settings.

Properties: `decode(encode(x)) == x` in both dialects, keys a class does not declare are
ignored, and a missing or malformed value is the dialect's error naming the field's key. The
three users (request headers, name-server headers, configuration) are checked to share it.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.protocol import headers, namesrv
from tidemq.client.protocol.headers import HeaderFieldError, SendMessageRequestHeader
from tidemq.client.protocol.namesrv import NamesrvProtocolError, RegisterBrokerRequestHeader
from tidemq.common import settings
from tidemq.common.errors import ConfigError
from tidemq.common.schema import Dialect, Schema, camel_case, schema_for
from tidemq.store.config import StoreConfig


class Colour(enum.Enum):
    RED = "r"
    DARK_BLUE = "b"


@dataclass(frozen=True, slots=True)
class Sample:
    group_name: str
    queue_id: int = dataclasses.field(default=0, metadata={"bits": 32})
    client_id: str | None = dataclasses.field(default=None, metadata={"key": "clientID"})
    ratio: float = dataclasses.field(default=0.5, metadata={"min": 0.0, "max": 1.0})
    retries: int = dataclasses.field(default=3, metadata={"min": 0, "max": 16})
    order: bool = False
    colour: Colour = Colour.RED
    offset: int | None = None


class SampleError(ValueError):
    pass


LENIENT = Dialect(error=SampleError, strict=False)
STRICT = Dialect(error=SampleError, strict=True)
DIALECTS = [LENIENT, STRICT]

# Text that survives the strict dialect's stripping (so that it reads back to itself).
TEXT = st.text(min_size=1, max_size=10).filter(lambda t: t == t.strip())
SAMPLES = st.builds(
    Sample,
    group_name=TEXT,
    queue_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | TEXT,
    ratio=st.floats(0.0, 1.0),
    retries=st.integers(0, 16),
    order=st.booleans(),
    colour=st.sampled_from(Colour),
    offset=st.none() | st.integers(-(2**63), 2**63 - 1),
)


@pytest.mark.parametrize("dialect", DIALECTS, ids=["lenient", "strict"])
@given(sample=SAMPLES)
def test_decode_of_encode_is_identity(dialect: Dialect, sample: Sample) -> None:
    schema = Schema(Sample, dialect)
    assert schema.decode(schema.encode(sample)) == sample


@pytest.mark.parametrize("dialect", DIALECTS, ids=["lenient", "strict"])
@given(
    sample=SAMPLES,
    extra=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=4),
)
def test_keys_the_class_does_not_declare_are_ignored(
    dialect: Dialect, sample: Sample, extra: dict[str, str]
) -> None:
    schema = Schema(Sample, dialect)
    doc = schema.encode(sample)
    # a declared key left out of the doc (a None field) is not "undeclared": keep it out
    declared = {wire for _name, wire, _write in schema.writers}
    undeclared = {k: v for k, v in extra.items() if k not in declared}
    assert schema.decode({**undeclared, **doc}) == sample


def test_keys_are_camel_case_or_declared_and_none_is_left_out() -> None:
    doc = Schema(Sample, LENIENT).encode(Sample("G", client_id="c", colour=Colour.DARK_BLUE))
    assert doc == {
        "groupName": "G",
        "queueId": "0",
        "clientID": "c",
        "ratio": "0.5",
        "retries": "3",
        "order": "false",
        "colour": "DARK_BLUE",
    }
    assert camel_case("max_reconsume_times") == "maxReconsumeTimes"


def test_a_renaming_changes_the_wire_key_but_errors_name_the_java_key() -> None:
    schema = Schema(Sample, LENIENT, {"group_name": "a", "queue_id": "b"})
    assert schema.encode(Sample("G", queue_id=1))["a"] == "G"
    assert schema.decode({"a": "G", "b": "7"}).queue_id == 7
    with pytest.raises(SampleError, match="queueId"):
        schema.decode({"a": "G", "b": "x"})
    with pytest.raises(SampleError, match="groupName"):
        schema.decode({"groupName": "G"})


BAD_VALUES = [
    ("queueId", "x", "queueId: expected an integer, got 'x'"),
    ("queueId", "2147483648", "queueId: '2147483648' does not fit 32 bits"),
    ("offset", str(2**63), "offset: '9223372036854775808' does not fit 64 bits"),
    ("retries", "17", "retries: must be at most 16, got 17"),
    ("retries", "-1", "retries: must be at least 0, got -1"),
    ("ratio", "1.5", "ratio: must be at most 1.0, got 1.5"),
    ("ratio", "half", "ratio: expected a number, got 'half'"),
    ("colour", "GREEN", "colour: expected one of RED, DARK_BLUE, got 'GREEN'"),
]


@pytest.mark.parametrize("dialect", DIALECTS, ids=["lenient", "strict"])
@pytest.mark.parametrize(("key", "raw", "message"), BAD_VALUES)
def test_a_bad_value_is_the_dialects_error_naming_the_field(
    dialect: Dialect, key: str, raw: str, message: str
) -> None:
    with pytest.raises(SampleError) as caught:
        Schema(Sample, dialect).decode({"groupName": "G", key: raw})
    assert str(caught.value) == message


def test_a_missing_required_field_is_named() -> None:
    with pytest.raises(SampleError, match=r"^Sample: lacks groupName$"):
        Schema(Sample, STRICT).decode({"queueId": "1"})


def test_the_lenient_dialect_reads_text_as_rocketmq_does() -> None:
    schema = Schema(Sample, LENIENT)
    sample = schema.decode({"groupName": " G ", "order": " TRUE ", "queueId": "", "retries": ""})
    assert (sample.group_name, sample.order, sample.queue_id, sample.retries) == (" G ", True, 0, 3)
    assert schema.decode({"groupName": "G", "order": "yes"}).order is False  # parseBoolean


def test_the_strict_dialect_strips_and_refuses_what_is_not_plainly_a_value() -> None:
    schema = Schema(Sample, STRICT)
    sample = schema.decode({"groupName": " G ", "order": " TRUE ", "colour": " RED "})
    assert (sample.group_name, sample.order, sample.colour) == ("G", True, Colour.RED)
    with pytest.raises(SampleError, match="order: expected true or false, got 'yes'"):
        schema.decode({"groupName": "G", "order": "yes"})
    with pytest.raises(SampleError, match="queueId: expected an integer, got ''"):
        schema.decode({"groupName": "G", "queueId": ""})


def test_a_field_of_an_unsupported_type_is_refused_when_the_schema_is_built() -> None:
    @dataclass
    class Odd:
        items: list[str]

    with pytest.raises(TypeError, match=r"Odd\.items"):
        Schema(Odd, LENIENT)

    @dataclass
    class NoDefault:
        name: str | None

    with pytest.raises(TypeError, match=r"NoDefault\.name: an optional field needs a default"):
        Schema(NoDefault, LENIENT)


def test_an_absent_field_takes_its_default_or_a_fresh_one_from_its_factory() -> None:
    @dataclass
    class Made:
        name: str = dataclasses.field(default_factory=lambda: "made")
        count: int = 7

    schema = Schema(Made, STRICT)
    assert schema.decode({}) == Made("made", 7)
    assert schema.decode({"name": "n", "count": "1"}) == Made("n", 1)


def test_the_three_users_share_the_one_codec() -> None:
    header = headers._codec(SendMessageRequestHeader, None)
    assert isinstance(header, Schema) and header.dialect.error is HeaderFieldError
    name_server = schema_for(RegisterBrokerRequestHeader, namesrv.EXT_FIELDS)
    assert name_server.dialect.error is NamesrvProtocolError
    assert schema_for(StoreConfig, settings.PROPERTIES).dialect.error is ConfigError
    # Request and name-server headers read text the same way (Java's decodeCommandCustomHeader).
    assert headers.REQUEST_HEADER.strict is namesrv.EXT_FIELDS.strict is False
    assert settings.PROPERTIES.strict is True
