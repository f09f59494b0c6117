"""Hypothesis strategies for remoting commands and header values (the header twin tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import RemotingCommand

# every boundary of msgpack's integer forms, and values just outside the 32-bit fields
BOUNDARIES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32, 2**32 - 1]
BOUNDARIES += [-1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1]
NUMBERS = st.sampled_from(BOUNDARIES) | st.integers(-(2**31), 2**31 - 1) | st.integers()
# str lengths across fixstr, str8 and str16; surrogates cannot be encoded
TEXT = (
    st.text(max_size=40)
    | st.text(min_size=250, max_size=300)
    | st.builds(lambda n: "x" * n, st.sampled_from([31, 32, 255, 256, 65535, 65536]))
    | st.sampled_from(["\ud800", "é", "日本", "\x00"])
)
ODD = (
    st.none()
    | st.booleans()
    | st.floats()
    | st.binary(max_size=4)
    | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)
)

commands = st.builds(
    RemotingCommand,
    code=NUMBERS,
    language=st.integers(0, 255) | st.sampled_from([-1, 256]),
    version=NUMBERS,
    opaque=NUMBERS,
    flag=NUMBERS,
    remark=st.none() | TEXT,
    ext_fields=st.dictionaries(TEXT, TEXT, max_size=20)
    | st.dictionaries(st.text(max_size=3), TEXT, min_size=16, max_size=18),
    body=st.just(b""),
    serialize_type=st.just(SerializeType.MSGPACK),
)
odd_commands = st.builds(
    RemotingCommand,
    code=NUMBERS | ODD,
    language=st.integers(0, 255) | ODD,
    version=NUMBERS | ODD,
    opaque=NUMBERS | ODD,
    flag=NUMBERS | ODD,
    remark=st.none() | TEXT | ODD,
    ext_fields=st.dictionaries(TEXT | st.integers(), TEXT | ODD, max_size=4) | ODD,
)
