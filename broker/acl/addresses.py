"""Address patterns of RocketMQ's plain ACL (RemoteAddressStrategyFactory), as predicates.

`address_matcher(pattern)` turns one `whiteRemoteAddress` or `globalWhiteRemoteAddresses` entry
into a function of a peer's IP text, or raises `AddressPatternError` saying what is wrong. The
forms, tried in RocketMQ's order:

- blank: matches nothing (an account without a white address must sign);
- `*`, `*.*.*.*`, `*:*:*:*:*:*:*:*`: matches every address;
- a set ending in `}`: `192.168.0.{1,2}` (IPv4: four dotted parts, the last in braces) or
  `1050::0005:{1,2}` (IPv6: the last group in braces); every member must be a valid address;
- a list with commas: `192.168.0.1,192.168.0.2` (each a valid IPv4 or IPv6 address);
- a range with `*` or `-` in one part: `192.168.*.*`, `192.168.1-10.*`, `10.1.2.1-3`
  (IPv4: the first such part of the second to fourth is the range, the parts before it are
  fixed; parts after it are not checked) or the IPv6 equivalents (`1050:0:0:0:5:*`, with hex
  bounds);
- one address (IPv4 or IPv6; IPv6 compared in expanded form).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable

from tidemq.common.errors import TideMQError

AddressMatcher = Callable[[str], bool]
_ANY = frozenset(("*", "*.*.*.*", "*:*:*:*:*:*:*:*"))


class AddressPatternError(TideMQError):
    """A white-address pattern RocketMQ would refuse."""


def address_matcher(pattern: str | None) -> AddressMatcher:
    """The predicate of one white-address pattern (see the module docstring)."""
    text = (pattern or "").strip()
    if not text:
        return matches_nothing
    if text in _ANY:
        return _everything
    if text.endswith("}"):
        return _one_of(_braced(text))
    if "," in text:
        return _one_of([part for part in text.split(",") if part])
    if "*" in text or "-" in text:
        return _ipv6_range(text) if ":" in text else _ipv4_range(text)
    return _one_of([text])


def matches_nothing(_address: str) -> bool:
    """The matcher of no pattern: an account without a white address (the check then needs
    no peer address)."""
    return False


def _everything(_address: str) -> bool:
    return True


# Every matcher asks it of the peer's address on every request a white list sees (ipaddress's
# parse is some 3.5 us); peers are few, and the answer depends on the text alone: kept, bounded.
@functools.lru_cache(maxsize=4096)
def _canonical(address: str) -> str | None:
    """The comparable form of a valid IPv4 or IPv6 address, else None."""
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        return None
    return parsed.exploded.upper() if parsed.version == 6 else str(parsed)


@functools.lru_cache(maxsize=4096)
def _ipv4_octets(address: str) -> tuple[int, ...] | None:
    """The four numbers of a valid IPv4 address, else None (kept as `_canonical` is)."""
    canonical = _canonical(address)
    if canonical is None or ":" in canonical:
        return None
    return tuple(int(p) for p in canonical.split("."))


def _one_of(addresses: list[str]) -> AddressMatcher:
    members = set()
    for address in addresses:
        canonical = _canonical(address)
        if canonical is None:
            raise AddressPatternError(f"{address.strip()!r} is not an IPv4 or IPv6 address")
        members.add(canonical)
    return lambda peer: _canonical(peer) in members


def _braced(text: str) -> list[str]:
    head, brace, listed = text.partition("{")
    if not brace or "}" in listed[:-1] or "{" in listed:
        raise AddressPatternError(f"{text!r}: the last part must be one {{a,b,...}} set")
    if ":" not in text and (text.count(".") < 3 or not head.endswith(".")):
        raise AddressPatternError(f"{text!r}: an IPv4 set needs four dotted parts, a.b.c.{{x,y}}")
    if ":" in text and not head.endswith(":"):
        raise AddressPatternError(f"{text!r}: the set must be the last group")
    return [head + item for item in listed[:-1].split(",") if item]


def _bounds(part: str, base: int, top: int, text: str) -> tuple[int, int] | None:
    """The range a `*` or `a-b` part names, None for a fixed part."""
    part = part.strip()
    if part == "*":
        return 0, top
    if "-" not in part:
        return None
    low_text, _, high_text = part.partition("-")
    try:
        low, high = int(low_text, base), int(high_text, base)
    except ValueError:
        raise AddressPatternError(f"{text!r}: range {part!r} is not two numbers") from None
    if not 0 <= low <= high <= top:
        limit = f"{top:x}" if base == 16 else str(top)
        raise AddressPatternError(f"{text!r}: range {part!r} is not within 0-{limit}")
    return low, high


def _ipv4_range(text: str) -> AddressMatcher:
    parts = text.split(".")
    if len(parts) != 4:
        raise AddressPatternError(f"{text!r}: an IPv4 pattern has four dotted parts")
    for index in (1, 2, 3):
        bounds = _bounds(parts[index], 10, 255, text)
        if bounds is not None:
            break
    else:
        raise AddressPatternError(f"{text!r}: no range in the second to fourth part")
    fixed = parts[:index]
    if not all(p.strip().isdigit() and int(p) <= 255 for p in fixed):
        raise AddressPatternError(f"{text!r}: the parts before the range must be 0-255")
    head = tuple(int(p) for p in fixed)
    low, high = bounds

    def match(peer: str) -> bool:
        octets = _ipv4_octets(peer)
        return octets is not None and octets[:index] == head and low <= octets[index] <= high

    return match


def _ipv6_range(text: str) -> AddressMatcher:
    groups = text.split(":")
    star = text.find("*")
    if star >= 0 and star != len(text) - 1:
        raise AddressPatternError(f"{text!r}: '*' may only end an IPv6 pattern")
    # The range is the first group holding '*' or '-'; the groups before it are a fixed prefix
    # (with '::' expanded as RocketMQ does: the pattern stands for a full 8-group address).
    found = [(i, _bounds(g, 16, 0xFFFF, text)) for i, g in enumerate(groups) if g]
    ranged = [(i, b) for i, b in found if b is not None]
    if not ranged:
        raise AddressPatternError(f"{text!r}: no range group")
    index, bounds = ranged[0]
    prefix_text = ":".join(groups[:index])
    width = 8 - (len(groups) - index)
    prefix = _expand_prefix(prefix_text, width, text)
    low, high = bounds

    def match(peer: str) -> bool:
        canonical = _canonical(peer)
        if canonical is None or ":" not in canonical:
            return False
        values = [int(g, 16) for g in canonical.split(":")]
        return values[: len(prefix)] == prefix and low <= values[len(prefix)] <= high

    return match


def _expand_prefix(prefix: str, width: int, text: str) -> list[int]:
    """The leading groups written as `prefix`: `::` fills it up to `width` groups."""
    if "::" in prefix:
        left, _, right = prefix.partition("::")
        head = [g for g in left.split(":") if g]
        tail = [g for g in right.split(":") if g]
        groups = head + ["0"] * (width - len(head) - len(tail)) + tail
    else:  # without '::' the pattern's own groups are the prefix (RocketMQ's v6ipProcess)
        groups = prefix.split(":") if prefix else []
    if len(groups) > width or not groups:
        raise AddressPatternError(f"{text!r}: the fixed groups do not make an IPv6 prefix")
    try:
        values = [int(g, 16) for g in groups]
    except ValueError:
        raise AddressPatternError(f"{text!r}: a fixed group is not hexadecimal") from None
    if any(not 0 <= v <= 0xFFFF for v in values) or any(len(g) > 4 for g in groups):
        raise AddressPatternError(f"{text!r}: a fixed group is not 0-ffff")
    return values
