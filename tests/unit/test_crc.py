"""store/crc.py: ISA-L's CRC-32 gives zlib's values (RocketMQ's UtilAll.crc32), masked as Java."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from tidemq.store import crc


@given(st.binary(max_size=4096), st.integers(0, 4096))
def test_crc_matches_zlib_for_any_bytes_and_views(data: bytes, cut: int) -> None:
    assert crc.crc32(data) == zlib.crc32(data)
    view = memoryview(data)[cut:]
    assert crc.java_crc32(view) == zlib.crc32(view) & 0x7FFFFFFF


def test_known_value_and_the_fast_implementation_is_in_use() -> None:
    assert crc.java_crc32(b"Hello RocketMQ") == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF
    assert crc.java_crc32(b"\xff" * 64) == zlib.crc32(b"\xff" * 64) & 0x7FFFFFFF
    assert crc.crc32.__module__ == "isal.isal_zlib"  # a dependency: the fallback is for others
