"""The remoting codec's compiled twin (client/_speedups.pyx) against its pure-Python reference.

`_command_from_mapping` turns a decoded JSON or msgpack header into a RemotingCommand. Both
twins must give equal commands (the very extFields dict when it is kept) or raise the same
error with the same message, on headers as clients send them and on anything else a decoder
can produce.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.speedups_twins import selected
from tidemq.client import _speedups
from tidemq.client.remoting import headers
from tidemq.client.remoting.codes import SerializeType
from tidemq.store import speedups

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
    assert selected(KEY) is _speedups._command_from_mapping
    assert headers._command_from_mapping is _speedups._command_from_mapping
    assert PURE is not _speedups._command_from_mapping


@given(well_formed, st.sampled_from([SerializeType.JSON, SerializeType.MSGPACK]))
def test_well_formed_headers_give_the_same_command(
    obj: dict[str, Any], kind: SerializeType
) -> None:
    compiled = _speedups._command_from_mapping(obj, b"body", kind, kind.name)
    assert compiled == PURE(obj, b"body", kind, kind.name)
    if isinstance(obj.get("extFields"), dict):
        assert compiled.ext_fields is obj["extFields"]  # kept, not copied, by both


@given(anything, st.sampled_from([SerializeType.JSON, SerializeType.MSGPACK]))
def test_anything_else_gives_the_same_command_or_error(obj: Any, kind: SerializeType) -> None:
    assert outcome(_speedups._command_from_mapping, obj, kind) == outcome(PURE, obj, kind)
