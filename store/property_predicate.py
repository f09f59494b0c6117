"""A condition on a stored record's properties answered from the record's bytes: what the
common SQL92 expressions (broker/sql92.py) become, so that a pull's scan (store/_get_message.pyx)
tests each record without making a Python object for it.

A condition is a tree of tuples, each naming its test first; `name` is a property's name, values
are compared as their stored UTF-8 bytes or read as numbers:

    ("all", (condition, ...))        AND: false at the first false, else unknown if one is
    ("any", (condition, ...))        OR: true at the first true, else unknown if one is
    ("not", condition)               unknown stays unknown
    ("const", True | False)
    ("null", name)                   IS NULL: true when missing, never unknown
    ("present", name)                a property used as a condition: unknown when missing,
                                     else false (its value is a string)
    ("text", name, bytes)            = 'string'
    ("in", name, (bytes, ...))       IN ('string', ...)
    ("compare", name, op, number)    op: "<" "<=" ">" ">=" "="; the value read as a Java long
                                     when `number` is an int, as a double when a float
    ("between", name, low, high, negate)   bounds of one type, read as `compare`'s

A missing property makes a test unknown (except `null`). A value that does not read as a number
answers NO_MATCH for the whole record, as broker/sql92.py's evaluation (RocketMQ's filter catches
the NumberFormatException); `all` and `any` stop where that evaluation stops, so a value never
read there never refuses a record here.

`test(record)` gives MATCH, NO_MATCH or UNDECIDED. UNDECIDED leaves the record to the general
evaluation (decoded properties, broker/sql92.py): a value with a byte above 0x7F that is not a
text's exact bytes (decoding with replacement could make two values equal), a long of more than
18 digits (its range check), a double that is not plain `[+-]digits[.digits]` (whitespace, an
exponent, Java's suffixes, Infinity). What it answers is what that evaluation answers
(tests/unit/test_property_predicate.py). A record whose lengths disagree has no properties.

The compiled twin (store/_get_message.pyx, same class name) is what the scan calls in C; this
pure one is the reference (same answers, UNDECIDED included).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final

from tidemq.common import speedups
from tidemq.store.record import find_property, read_properties

MATCH: Final = 1
NO_MATCH: Final = 0
UNDECIDED: Final = -1

MAX_NAMES: Final = 64  # properties one condition may name (the compiled twin's table)
MAX_NUMBER_TEXT: Final = 63  # longest value read as a double here
MAX_LONG_DIGITS: Final = 18  # any 18 digits fit a Java long

_TRUE, _FALSE, _UNKNOWN = True, False, None
_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
}
_DIGITS: Final = frozenset(b"0123456789")


class _Refused(Exception):
    """A value that does not read as the number asked for: the record does not match."""


class _Undecided(Exception):
    """A value this reader leaves to the general evaluation."""


def _read_long(value: bytes) -> int:
    """The Java long of an ASCII value ([+-]digits), as sql92's _java_long reads it."""
    if any(b > 0x7F for b in value):
        raise _Undecided
    digits = value[1:] if value[:1] in (b"+", b"-") else value
    if not digits or not all(b in _DIGITS for b in digits):
        raise _Refused
    if len(digits) > MAX_LONG_DIGITS:
        raise _Undecided
    return int(value)


def _read_double(value: bytes) -> float:
    """The double of a plain decimal ASCII value ([+-]digits[.digits], a digit at least), as
    sql92's _java_double reads it; an empty one is refused, anything else left undecided."""
    if not value:
        raise _Refused
    if len(value) > MAX_NUMBER_TEXT:
        raise _Undecided
    digits = value[1:] if value[:1] in (b"+", b"-") else value
    whole, _dot, fraction = digits.partition(b".")
    if not (whole or fraction) or not all(b in _DIGITS for b in whole + fraction):
        raise _Undecided
    return float(value)


class PropertyPredicate:
    """A condition (the tree above) on the properties of whole records."""

    def __init__(self, condition: tuple[Any, ...]) -> None:
        names: dict[str, None] = {}
        _check(condition, names)
        if len(names) > MAX_NAMES:
            raise ValueError(f"a condition names at most {MAX_NAMES} properties")
        self.condition = condition
        self.names = tuple(names)

    def test(self, record: bytes | memoryview) -> int:
        """MATCH, NO_MATCH or UNDECIDED for one whole record (`record` is exactly its bytes)."""
        raw = read_properties(record)
        seen: dict[str, bytes | None] = {}

        def value(name: str) -> bytes | None:
            if name not in seen:
                seen[name] = find_property(raw, name.encode()) if raw else None
            return seen[name]

        try:
            answer = _evaluate(self.condition, value)
        except _Refused:
            return NO_MATCH
        except _Undecided:
            return UNDECIDED
        return MATCH if answer is True else NO_MATCH


def _evaluate(condition: tuple[Any, ...], value: Callable[[str], bytes | None]) -> bool | None:
    kind = condition[0]
    if kind == "all" or kind == "any":
        stop = kind == "any"  # the answer that ends the loop
        unknown = False
        for part in condition[1]:
            answer = _evaluate(part, value)
            if answer is None:
                unknown = True
            elif answer is stop:
                return stop
        return None if unknown else not stop
    if kind == "not":
        answer = _evaluate(condition[1], value)
        return None if answer is None else not answer
    if kind == "const":
        return bool(condition[1])
    found = value(condition[1])
    if kind == "null":
        return found is None
    if found is None:
        return None
    if kind == "present":
        return False
    if kind == "text":
        if found == condition[2]:
            return True
        if max(found, default=0) > 0x7F:
            raise _Undecided
        return False
    if kind == "in":
        if found in condition[2]:
            return True
        if max(found, default=0) > 0x7F:
            raise _Undecided
        return False
    if kind == "compare":
        _, _, op, number = condition
        read = _read_long if type(number) is int else _read_double
        return _OPS[op](read(found), number)
    _, _, low, high, negate = condition  # between
    read = _read_long if type(low) is int else _read_double
    got = read(found)
    # NOT BETWEEN as sql92's two comparisons joined by OR
    inside: bool = (got < low or got > high) if negate else low <= got <= high
    return inside


def _check(condition: Any, names: dict[str, None]) -> None:
    """ValueError unless `condition` is a tree of the tests above; collects the names."""
    if type(condition) is not tuple or not condition:
        raise ValueError(f"not a condition: {condition!r}")
    kind, args = condition[0], condition[1:]
    if kind in ("all", "any") and len(args) == 1 and type(args[0]) is tuple and args[0]:
        for part in args[0]:
            _check(part, names)
        return
    if kind == "not" and len(args) == 1:
        _check(args[0], names)
        return
    if kind == "const" and len(args) == 1 and type(args[0]) is bool:
        return
    if not args or type(args[0]) is not str or not args[0]:
        raise ValueError(f"not a condition: {condition!r}")
    names[args[0]] = None
    rest = args[1:]
    if kind in ("null", "present") and not rest:
        return
    if kind == "text" and len(rest) == 1 and type(rest[0]) is bytes:
        return
    if kind == "in" and len(rest) == 1 and type(rest[0]) is tuple:
        texts: tuple[Any, ...] = rest[0]
        if all(type(member) is bytes for member in texts):
            return
    if kind == "compare" and len(rest) == 2 and rest[0] in _OPS and _number(rest[1]):
        return
    if kind == "between" and len(rest) == 3 and _number(rest[0]):
        low, high, negate = rest
        if type(high) is type(low) and type(negate) is bool:
            return
    raise ValueError(f"not a condition: {condition!r}")


def _number(value: Any) -> bool:
    if type(value) is int:
        return bool(-(1 << 63) <= value < (1 << 63))
    return type(value) is float


PropertyPredicate = speedups.select(PropertyPredicate, "tidemq.store._get_message")  # type: ignore[misc]
