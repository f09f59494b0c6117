"""Java's ``String.hashCode`` in Python, bit for bit.

RocketMQ writes ``String.hashCode`` values to disk: the IndexFile keys every entry by the hash of
``topic#key`` and the ConsumeQueue stores the hash of a message's tags as its tagsCode. tidemq
must write the same numbers, so this module reproduces the Java definition exactly:

    h = 0; for each UTF-16 code unit u of s: h = 31*h + u   (32-bit signed, wrapping)

Characters outside the Basic Multilingual Plane are two UTF-16 units (a surrogate pair), so they
contribute two steps, as in Java.

Speed matters because every indexed key and every dispatched tag is hashed on the dispatch path.
A Python loop costs ~60 ns per character. Instead the polynomial ``sum(u_i * 31**(n-1-i))`` is
evaluated by CPython's own base-31 integer parser: each byte ``b`` is split into two base-31
digits ``b // 31`` and ``b % 31`` (a byte is < 31**2), the two digit strings are produced with
``bytes.translate`` and parsed with ``int(..., 31)``, all in C. UTF-16 units are 16 bits, so a
non-ASCII string is evaluated as ``256 * poly(high bytes) + poly(low bytes)``. Where the
compiled tier is built (store/_hashing.pyx, picked by store/common/speedups.py), a C loop over the
code units replaces it; this function stays as its pure-Python twin.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from tidemq.common import speedups

__all__ = ["cached_java_string_hash", "java_string_hash"]

_MASK32: Final = 0xFFFFFFFF
_SIGN32: Final = 0x80000000
_BASE: Final = 31

_DIGITS: Final = b"0123456789abcdefghijklmnopqrstu"
assert len(_DIGITS) == _BASE
# byte -> its high / low base-31 digit as an ASCII digit character, for bytes.translate.
_HIGH_DIGIT: Final = bytes(_DIGITS[b // _BASE] for b in range(256))
_LOW_DIGIT: Final = bytes(_DIGITS[b % _BASE] for b in range(256))
# Public for callers that inline the ASCII case: for bytes d of length 1..1024,
# (int(d.translate(HIGH_DIGITS), 31) * 31 + int(d.translate(LOW_DIGITS), 31)) & 0xFFFFFFFF
# is the unsigned hashCode.
HIGH_DIGITS: Final = _HIGH_DIGIT
LOW_DIGITS: Final = _LOW_DIGIT

# int(str, 31) is quadratic in the length and refuses more than sys.get_int_max_str_digits()
# (4300 by default) digits; long inputs are therefore evaluated in bounded chunks.
_CHUNK: Final = 1024


def _poly31(data: bytes) -> int:
    """``sum(data[i] * 31**(len-1-i))`` modulo 2**32, for a non-empty byte string."""
    n = len(data)
    if n <= _CHUNK:
        return (
            int(data.translate(_HIGH_DIGIT), _BASE) * _BASE + int(data.translate(_LOW_DIGIT), _BASE)
        ) & _MASK32
    h = 0
    for start in range(0, n, _CHUNK):
        chunk = data[start : start + _CHUNK]
        h = h * pow(_BASE, len(chunk), 1 << 32) + _poly31(chunk)
    return h & _MASK32


def ascii_hash_u32(data: bytes) -> int:
    """Java hashCode, as an unsigned 32-bit int, of the string whose ASCII bytes are `data`."""
    return _poly31(data) if data else 0


def java_string_hash(s: str) -> int:
    """Return ``s.hashCode()`` as Java computes it: a signed 32-bit int."""
    if not s:
        return 0
    if s.isascii():
        h = _poly31(s.encode("ascii"))
    else:
        # surrogatepass: a Java string may hold a lone surrogate; its unit still counts.
        units = s.encode("utf-16-be", "surrogatepass")
        h = ((_poly31(units[0::2]) << 8) + _poly31(units[1::2])) & _MASK32
    return h - (1 << 32) if h & _SIGN32 else h


java_string_hash = speedups.select(java_string_hash, "tidemq.store._hashing")

# Tags repeat endlessly (a topic has a handful), so the ConsumeQueue's tagsCode is worth caching;
# unique keys are not, which is why the plain function stays uncached.
cached_java_string_hash: Final = lru_cache(maxsize=4096)(java_string_hash)
