"""SQL92 property filters: RocketMQ's selector grammar (filter/.../SelectorParser.jj, from
ActiveMQ), compiled to a predicate over a message's properties.

Grammar, loosest binding first (keywords in any case):

    expr      := and ( OR and )*
    and       := equality ( AND equality )*
    equality  := compare ( '=' compare | '<>' compare | IS NULL | IS NOT NULL )*
    compare   := unary ( ('>'|'>='|'<'|'<=') unary | [NOT] BETWEEN unary AND unary
                       | [NOT] IN '(' string (',' string)* ')'
                       | [NOT] (CONTAINS|STARTSWITH|ENDSWITH) string )*
    unary     := '+' unary | '-' unary | NOT unary | primary
    primary   := string | number | TRUE | FALSE | NULL | identifier | '(' expr ')'

Strings are 'quoted' ('' is a quote); numbers are integers (optionally ending in L) or decimals
with an optional exponent; identifiers are letters, digits, '_' and '$', not starting with a
digit; `-- comment` and `/* comment */` are skipped.

Evaluation follows RocketMQ's expressions with its string conversion on (the broker always
turns it on): property values are strings, so `a > 3` compares a's value read as a Java long,
`a > 2.5` as a double, and `a = TRUE` as a boolean; two strings compared with > < read both as
doubles. A value that does not read as the other side's type makes the whole expression false
for that message (RocketMQ's filter catches the exception and answers no match), as does an
unknown (NULL) result: a missing property compared to anything is unknown; `IS NULL` is how to
ask for one. AND, OR and NOT use three-valued logic. Refused when compiling, with a message
naming the problem: a syntax error (with its column), a string, boolean or NULL constant on one
side of > < (RocketMQ's "cannot be compared"), `= NULL`, a BETWEEN whose bounds are reversed or
NULL, IN on anything but a property, an expression that is not a condition, an expression
longer than MAX_EXPRESSION_LENGTH characters or nested deeper than MAX_DEPTH.

The parser is lark's LALR(1) (pip `lark`): a declared grammar instead of a hand-written
tokenizer and recursive descent, errors with positions for free, and no recursion while parsing
(a 10,000-character expression is a long flat AND/OR list, not a deep tree). The tree is never
built: the grammar's callbacks make the predicate's closures as rules reduce.
"""

from __future__ import annotations

import functools
import operator
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from tidemq.store.property_predicate import MAX_NAMES, PropertyPredicate
from tidemq.store.record import read_named_properties

MAX_EXPRESSION_LENGTH: Final = 32_768
MAX_DEPTH: Final = 200

Properties = Mapping[str, str]
Evaluate = Callable[[Properties], Any]

_GRAMMAR: Final = r"""
?start: or_expr

or_expr: and_expr (_OR and_expr)*
and_expr: eq_expr (_AND eq_expr)*
eq_expr: cmp_expr eq_tail*
eq_tail: "=" cmp_expr          -> eq
       | "<>" cmp_expr         -> ne
       | _IS _NULL             -> is_null
       | _IS _NOT _NULL        -> is_not_null
cmp_expr: unary cmp_tail*
cmp_tail: ">" unary                          -> gt
        | ">=" unary                         -> ge
        | "<" unary                          -> lt
        | "<=" unary                         -> le
        | _BETWEEN unary _AND unary          -> between
        | _NOT _BETWEEN unary _AND unary     -> not_between
        | _IN "(" STRING ("," STRING)* ")"   -> in_list
        | _NOT _IN "(" STRING ("," STRING)* ")" -> not_in_list
        | _CONTAINS STRING                   -> contains
        | _NOT _CONTAINS STRING              -> not_contains
        | _STARTSWITH STRING                 -> startswith
        | _NOT _STARTSWITH STRING            -> not_startswith
        | _ENDSWITH STRING                   -> endswith
        | _NOT _ENDSWITH STRING              -> not_endswith
?unary: "+" unary
      | "-" unary                            -> negate
      | _NOT unary                           -> not_
      | primary
?primary: STRING                             -> string
        | NUMBER                             -> number
        | _TRUE                              -> true
        | _FALSE                             -> false
        | _NULL                              -> null
        | ID                                 -> variable
        | "(" or_expr ")"

_OR: "OR"i
_AND: "AND"i
_NOT: "NOT"i
_IS: "IS"i
_NULL: "NULL"i
_TRUE: "TRUE"i
_FALSE: "FALSE"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
_CONTAINS: "CONTAINS"i
_STARTSWITH: "STARTSWITH"i
_ENDSWITH: "ENDSWITH"i
STRING: /'(?:''|[^'])*'/
NUMBER: /(?:\d+\.\d*|\.\d+)(?:e[+-]?\d+)?|\d+e[+-]?\d+|\d+l?/i
ID: /[a-z_$][a-z0-9_$]*/i
LINE_COMMENT: /--[^\n\r]*/
BLOCK_COMMENT: /\/\*(.|\n)*?\*\//
%import common.WS
%ignore WS
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
"""


class Sql92Error(ValueError):
    """An expression this filter refuses; the message names the problem."""


class _EvalError(Exception):
    """A value that does not convert (RocketMQ's NumberFormatException): no match."""


@dataclass(frozen=True, slots=True)
class _Node:
    """A compiled sub-expression: `evaluate(properties)` gives None (unknown), a bool, an int,
    a float or a str. `kind`: "const" (then `value` is the constant), "prop", "bool" (a
    condition) or "value"."""

    evaluate: Evaluate
    kind: str
    text: str
    depth: int = 1
    value: Any = None
    name: str = ""  # a property's
    # The same condition as store/property_predicate.py's tree, when it is one of its tests
    # (then a pull's scan answers it in C); None for anything else.
    shape: tuple[Any, ...] | None = None

    @property
    def is_condition(self) -> bool:
        return self.kind == "bool" or (self.kind == "const" and type(self.value) is bool)


def _const(value: Any, text: str) -> _Node:
    shape = ("const", value) if type(value) is bool else None
    return _Node(lambda _p: value, "const", text, 1, value, shape=shape)


def _deeper(*children: _Node) -> int:
    depth = 1 + max(c.depth for c in children)
    if depth > MAX_DEPTH:
        raise Sql92Error(f"the expression is nested more than {MAX_DEPTH} deep")
    return depth


# --- conversions and comparison (ComparisonExpression.__compare, string conversion on) --------

_LONG = re.compile(r"[+-]?\d+")
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _java_long(text: str) -> int:
    if text.isascii() and text.isdigit() and len(text) < 19:
        return int(text)  # the common case, without the regular expression
    if not _LONG.fullmatch(text):
        raise _EvalError(text)
    value = int(text)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise _EvalError(text)
    return value


def _java_double(text: str) -> float:
    stripped = text.strip()
    if "_" in stripped or not stripped:
        raise _EvalError(text)
    if stripped[-1] in "fFdD" and not stripped.lower().endswith("infinity"):
        stripped = stripped[:-1]
    try:
        return float(stripped)
    except ValueError:
        raise _EvalError(text) from None


def _kind(value: Any) -> str:
    kind = type(value)
    if kind is bool:
        return "b"
    if kind is int:
        return "i"
    if kind is float:
        return "f"
    return "s"


def _compare(lv: Any, rv: Any) -> int:
    """Java's __compare with convertStringExpressions: the string side converts to the other
    side's type; -1 for kinds that do not meet (a number and a boolean)."""
    lk, rk = _kind(lv), _kind(rv)
    if lk != rk:
        if lk == "b":
            if rk == "s":
                raise _EvalError("a boolean compared to a string")
            return -1
        if lk == "i":
            if rk == "f":
                lv = float(lv)
            elif rk == "s":
                rv = _java_long(rv)
            else:
                return -1
        elif lk == "f":
            if rk == "i":
                rv = float(rv)
            elif rk == "s":
                rv = _java_double(rv)
            else:
                return -1
        elif rk == "b":
            lv = lv.lower() == "true"
        elif rk == "i":
            lv = _java_long(lv)
        else:
            lv = _java_double(lv)
    order: int = (lv > rv) - (lv < rv)
    return order


def _equal(lv: Any, rv: Any) -> bool | None:
    if (lv is None) != (rv is None):
        return None if lv is None else False
    if lv is None or (_kind(lv) == _kind(rv) and lv == rv):
        return True
    return _compare(lv, rv) == 0


def _ordered(lv: Any, rv: Any, test: Callable[[int, int], bool]) -> bool | None:
    if lv is None or rv is None:
        return None
    if type(lv) is str and type(rv) is str:
        lv, rv = _java_double(lv), _java_double(rv)
    return test(_compare(lv, rv), 0)


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


# --- building -----------------------------------------------------------------------------


def _condition(node: _Node) -> _Node:
    """asBooleanExpression: a condition as it is; a property read as a boolean (its value is a
    string, so false, or unknown when missing); anything else is refused."""
    if node.is_condition:
        return node
    if node.kind == "prop":
        read = node.evaluate
        return _Node(
            lambda p: None if read(p) is None else False,
            "bool",
            node.text,
            node.depth,
            shape=("present", node.name),
        )
    raise Sql92Error(f"expression will not result in a boolean value: {node.text}")


def _check_ordered_operand(node: _Node) -> None:
    """checkLessThanOperand: > < take numbers, never a string, boolean or NULL constant."""
    if (node.kind == "const" and _kind(node.value) not in ("i", "f")) or node.kind == "bool":
        raise Sql92Error(f"value {node.text} cannot be compared with > >= < <=")


def _ordered_node(left: _Node, right: _Node, test: Callable[[Any, Any], bool], op: str) -> _Node:
    _check_ordered_operand(left)
    _check_ordered_operand(right)
    if left.kind == "prop" and right.kind == "const":
        return _property_against_number(left, right, test, op)
    lf, rf = left.evaluate, right.evaluate
    return _Node(
        lambda p: _ordered(lf(p), rf(p), test),
        "bool",
        f"{left.text} {op} {right.text}",
        _deeper(left, right),
    )


def _property_against_number(
    left: _Node, right: _Node, test: Callable[[Any, Any], bool], op: str
) -> _Node:
    """The usual case, `property > number`, in one step: what `_ordered` does for a string
    and a number (the string read as the number's type, then compared)."""
    name, constant = left.name, right.value
    read = _java_long if type(constant) is int else _java_double

    def evaluate(p: Properties) -> bool | None:
        value = p.get(name)
        if value is None:
            return None
        return test(read(value), constant)

    shape = ("compare", name, op, constant)
    return _Node(evaluate, "bool", f"{left.text} {op} {right.text}", 2, shape=shape)


def _equal_node(left: _Node, right: _Node, *, check: bool = True) -> _Node:
    if check:
        for side in (left, right):
            if side.kind == "const" and side.value is None:
                raise Sql92Error("NULL cannot be compared with = or <>: use IS NULL")
        both_constant = left.kind == "const" and right.kind == "const"
        if both_constant and type(left.value) is bool and type(right.value) is not bool:
            raise Sql92Error(f"{left.text} cannot be compared with {right.text}")
    lf, rf = left.evaluate, right.evaluate
    return _Node(
        lambda p: _equal(lf(p), rf(p)),
        "bool",
        f"{left.text} = {right.text}",
        _deeper(left, right),
        shape=_equal_shape(left, right),
    )


def _equal_shape(left: _Node, right: _Node) -> tuple[Any, ...] | None:
    """`property = constant` as a predicate test: a string's bytes, a number (read as the
    constant's type, as _compare reads it) or IS NULL; a boolean is left to the closures."""
    if left.kind != "prop" or right.kind != "const":
        return None
    value = right.value
    if value is None:
        return ("null", left.name)
    if type(value) is str:
        text = _utf8(value)
        return None if text is None else ("text", left.name, text)
    if type(value) in (int, float):
        return ("compare", left.name, "=", value)
    return None


def _utf8(text: str) -> bytes | None:
    """A constant's stored bytes; None for one no value can be (a lone surrogate)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return None


def _negated(node: _Node, text: str) -> _Node:
    inner = node.evaluate
    shape = None if node.shape is None else ("not", node.shape)
    return _Node(lambda p: _not(inner(p)), "bool", text, node.depth + 1, shape=shape)


def _joined(kind: str, nodes: list[_Node]) -> tuple[Any, ...] | None:
    """AND ("all") or OR ("any") as a predicate test, when every operand is one."""
    shapes = tuple(n.shape for n in nodes)
    return None if None in shapes else (kind, shapes)


def _all(nodes: list[_Node]) -> Evaluate:
    checks = [n.evaluate for n in nodes]
    if len(checks) == 2:  # the usual AND, unrolled: the loop below, without the loop
        first_check, second_check = checks

        def evaluate_two(p: Properties) -> bool | None:
            first = first_check(p)
            if first is not None and not first:
                return False
            second = second_check(p)
            if second is None:
                return None
            if not second:
                return False
            return None if first is None else True

        return evaluate_two

    def evaluate(p: Properties) -> bool | None:
        unknown = False
        for check in checks:
            value = check(p)
            if value is None:
                unknown = True
            elif not value:
                return False
        return None if unknown else True

    return evaluate


def _any(nodes: list[_Node]) -> Evaluate:
    checks = [n.evaluate for n in nodes]
    if len(checks) == 2:  # the usual OR, unrolled: the loop below, without the loop
        first_check, second_check = checks

        def evaluate_two(p: Properties) -> bool | None:
            first = first_check(p)
            if first:
                return True
            second = second_check(p)
            if second:
                return True
            return None if first is None or second is None else False

        return evaluate_two

    def evaluate(p: Properties) -> bool | None:
        unknown = False
        for check in checks:
            value = check(p)
            if value is None:
                unknown = True
            elif value:
                return True
        return None if unknown else False

    return evaluate


def _string(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _string_test(
    left: _Node, token: Token, test: Callable[[str, str], bool], name: str, negate: bool
) -> _Node:
    needle = _string(token)
    read = left.evaluate

    def evaluate(p: Properties) -> bool | None:
        value = read(p)
        if type(value) is not str:
            return None
        return test(value, needle) != negate

    text = f"{left.text} {'NOT ' if negate else ''}{name} '{needle}'"
    return _Node(evaluate, "bool", text, left.depth + 1)


def _in_node(left: _Node, tokens: list[Token], negate: bool) -> _Node:
    if left.kind != "prop":
        raise Sql92Error(f"IN needs a property on its left, got {left.text}")
    members = frozenset(_string(t) for t in tokens)
    name = left.name
    texts = [_utf8(m) for m in sorted(members)]
    shape: tuple[Any, ...] | None = None
    if None not in texts:
        shape = ("in", name, tuple(texts))
        shape = ("not", shape) if negate else shape

    def evaluate(p: Properties) -> bool | None:
        value = p.get(name)  # the property node's read, inline
        if value is None:
            return None
        return (value in members) != negate

    text = f"{left.text} {'NOT ' if negate else ''}IN (...)"
    return _Node(evaluate, "bool", text, 2, shape=shape)


def _between(value: _Node, low: _Node, high: _Node, negate: bool) -> _Node:
    if low.kind == "const" and high.kind == "const":
        if low.value is None or high.value is None:
            raise Sql92Error("the bounds of BETWEEN cannot be NULL")
        try:
            reversed_bounds = _compare(high.value, low.value) < 0
        except _EvalError:
            reversed_bounds = False
        if reversed_bounds:
            raise Sql92Error(
                f"illegal values of BETWEEN: the low value ({low.text}) is above the high "
                f"value ({high.text})"
            )
    if negate:
        parts = [
            _ordered_node(value, low, operator.lt, "<"),
            _ordered_node(value, high, operator.gt, ">"),
        ]
        fused = _property_between(value, low, high, negate)
        shape = _joined("any", parts) if fused is None else _between_shape(value, low, high, True)
        evaluate = fused or _any(parts)
        return _Node(evaluate, "bool", f"{value.text} NOT BETWEEN", _deeper(*parts), shape=shape)
    parts = [
        _ordered_node(value, low, operator.ge, ">="),
        _ordered_node(value, high, operator.le, "<="),
    ]
    fused = _property_between(value, low, high, negate)
    shape = _joined("all", parts) if fused is None else _between_shape(value, low, high, False)
    evaluate = fused or _all(parts)
    return _Node(evaluate, "bool", f"{value.text} BETWEEN", _deeper(*parts), shape=shape)


def _between_shape(value: _Node, low: _Node, high: _Node, negate: bool) -> tuple[Any, ...]:
    return ("between", value.name, low.value, high.value, negate)


def _property_between(value: _Node, low: _Node, high: _Node, negate: bool) -> Evaluate | None:
    """`property [NOT] BETWEEN number AND number` (bounds of one type) in one step: the
    property read once as the bounds' type, what the two comparisons joined by AND (OR for NOT)
    answer; None for any other BETWEEN."""
    if value.kind != "prop" or low.kind != "const" or high.kind != "const":
        return None
    kind = type(low.value)
    if kind not in (int, float) or type(high.value) is not kind:
        return None
    name, least, most = value.name, low.value, high.value
    read = _java_long if kind is int else _java_double

    def between(p: Properties) -> bool | None:
        raw = p.get(name)
        if raw is None:
            return None
        number = read(raw)
        # NOT BETWEEN as its two comparisons, not as `not inside`: NaN is in neither
        answer: bool = number < least or number > most if negate else least <= number <= most
        return answer

    return between


_STRING_TESTS: Final[dict[str, tuple[Callable[[str, str], bool], str]]] = {
    "contains": (operator.contains, "CONTAINS"),
    "startswith": (str.startswith, "STARTSWITH"),
    "endswith": (str.endswith, "ENDSWITH"),
}


class _Build(Transformer[Token, _Node]):
    """Rule callbacks, run as the LALR parser reduces: each returns a `_Node` (tails return a
    function of the left side)."""

    # --- primaries ----------------------------------------------------------------------

    def string(self, items: list[Token]) -> _Node:
        return _const(_string(items[0]), str(items[0]))

    def number(self, items: list[Token]) -> _Node:
        text = str(items[0])
        if re.fullmatch(r"\d+[lL]?", text):
            value = int(text.rstrip("lL"))
            return _const(value if value <= _LONG_MAX else float(value), text)
        return _const(float(text), text)

    def true(self, _items: list[Token]) -> _Node:
        return _const(True, "TRUE")

    def false(self, _items: list[Token]) -> _Node:
        return _const(False, "FALSE")

    def null(self, _items: list[Token]) -> _Node:
        return _const(None, "NULL")

    def __init__(self) -> None:
        super().__init__()
        # Properties the expression being parsed names, in first-use order (compile_sql92
        # clears it before each parse, under _PARSE_LOCK).
        self.names: dict[str, None] = {}

    def variable(self, items: list[Token]) -> _Node:
        name = str(items[0])
        self.names[name] = None
        return _Node(lambda p: p.get(name), "prop", name, name=name)

    def negate(self, items: list[_Node]) -> _Node:
        (node,) = items
        if node.kind == "const" and _kind(node.value) in ("i", "f"):
            return _const(-node.value, f"-{node.text}")
        inner = node.evaluate

        def evaluate(p: Properties) -> Any:
            value = inner(p)
            return -value if _kind(value) in ("i", "f") and value is not None else None

        return _Node(evaluate, "value", f"-{node.text}", node.depth + 1)

    def not_(self, items: list[_Node]) -> _Node:
        node = _condition(items[0])
        return _negated(node, f"NOT {node.text}")

    # --- tails: the operator and its right side, applied to the left side in *_expr --------

    def eq(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _equal_node(left, items[0])

    def ne(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _negated(_equal_node(left, items[0]), f"{left.text} <> ...")

    def is_null(self, _items: list[Any]) -> Callable[[_Node], _Node]:
        return lambda left: _equal_node(left, _const(None, "NULL"), check=False)

    def is_not_null(self, _items: list[Any]) -> Callable[[_Node], _Node]:
        return lambda left: _negated(
            _equal_node(left, _const(None, "NULL"), check=False), f"{left.text} IS NOT NULL"
        )

    def gt(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _ordered_node(left, items[0], operator.gt, ">")

    def ge(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _ordered_node(left, items[0], operator.ge, ">=")

    def lt(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _ordered_node(left, items[0], operator.lt, "<")

    def le(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _ordered_node(left, items[0], operator.le, "<=")

    def between(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _between(left, items[0], items[1], False)

    def not_between(self, items: list[_Node]) -> Callable[[_Node], _Node]:
        return lambda left: _between(left, items[0], items[1], True)

    def in_list(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return lambda left: _in_node(left, items, False)

    def not_in_list(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return lambda left: _in_node(left, items, True)

    def contains(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return self._string_tail("contains", items, False)

    def not_contains(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return self._string_tail("contains", items, True)

    def startswith(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return self._string_tail("startswith", items, False)

    def not_startswith(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return self._string_tail("startswith", items, True)

    def endswith(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return self._string_tail("endswith", items, False)

    def not_endswith(self, items: list[Token]) -> Callable[[_Node], _Node]:
        return self._string_tail("endswith", items, True)

    @staticmethod
    def _string_tail(name: str, items: list[Token], negate: bool) -> Callable[[_Node], _Node]:
        test, word = _STRING_TESTS[name]
        return lambda left: _string_test(left, items[0], test, word, negate)

    # --- chains -------------------------------------------------------------------------

    def cmp_expr(self, items: list[Any]) -> _Node:
        node: _Node = items[0]
        for tail in items[1:]:
            node = tail(node)
        return node

    eq_expr = cmp_expr

    def and_expr(self, items: list[_Node]) -> _Node:
        if len(items) == 1:
            return items[0]
        nodes = [_condition(n) for n in items]
        shape = _joined("all", nodes)
        return _Node(_all(nodes), "bool", "... AND ...", _deeper(*nodes), shape=shape)

    def or_expr(self, items: list[_Node]) -> _Node:
        if len(items) == 1:
            return items[0]
        nodes = [_condition(n) for n in items]
        shape = _joined("any", nodes)
        return _Node(_any(nodes), "bool", "... OR ...", _deeper(*nodes), shape=shape)


_BUILD: Final = _Build()
_PARSER: Final = Lark(_GRAMMAR, parser="lalr", lexer="basic", transformer=_BUILD)
_PARSE_LOCK: Final = threading.Lock()


@dataclass(frozen=True, slots=True)
class Sql92Filter:
    """A compiled expression: `matches(properties)`, or `matches_record(record)` (also the
    filter called as a function: a store RecordFilter) for a stored record.

    A record's properties are read in place, and only those the expression names (`names`,
    with their wire spelling in `_keys`), each once: the expression then runs over a plain dict
    of them. Decoding all of a message's properties, or looking each one up again at every
    use, cost more than the expression itself.

    `predicate` is the same condition for store/property_predicate.py when the expression is
    made only of its tests (comparisons of a property with constants, IN, BETWEEN, IS NULL,
    AND, OR, NOT: nearly every subscription): the compiled scan of a pull answers each record
    with it in C, and calls `matches_record` only for a record it leaves undecided.
    """

    expression: str
    _evaluate: Evaluate
    names: tuple[str, ...] = ()
    _keys: tuple[tuple[str, bytes], ...] = ()
    predicate: PropertyPredicate | None = None

    def __call__(self, record: memoryview) -> bool:
        return self.matches_record(record)

    def matches(self, properties: Properties) -> bool:
        try:
            return self._evaluate(properties) is True
        except _EvalError:
            return False

    def matches_record(self, record: memoryview) -> bool:
        found = read_named_properties(record, self._keys)
        try:
            return self._evaluate(found) is True
        except _EvalError:
            return False


def _syntax_error(exc: UnexpectedInput, expression: str) -> Sql92Error:
    column = getattr(exc, "column", "?")
    if isinstance(exc, UnexpectedEOF):
        return Sql92Error("the expression ends too early")
    if isinstance(exc, UnexpectedCharacters):
        at = exc.pos_in_stream or 0
        char = expression[at] if at < len(expression) else ""
        return Sql92Error(f"unexpected character {char!r} at column {column}")
    if isinstance(exc, UnexpectedToken):
        if exc.token.type == "$END":
            return Sql92Error("the expression ends too early")
        expected = ", ".join(sorted(e.lstrip("_") for e in exc.expected)[:10])
        return Sql92Error(
            f"unexpected {str(exc.token)!r} at column {column} (expected one of: {expected})"
        )
    return Sql92Error(str(exc).splitlines()[0])


@functools.lru_cache(maxsize=1024)
def compile_sql92(expression: str) -> Sql92Filter:
    """The filter of `expression`; `Sql92Error` names what is wrong with it."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise Sql92Error(
            f"the expression is {len(expression)} characters long, more than "
            f"{MAX_EXPRESSION_LENGTH}"
        )
    if not expression.strip():
        raise Sql92Error("the expression is empty")
    with _PARSE_LOCK:
        _BUILD.names.clear()
        try:
            root = _PARSER.parse(expression)
        except UnexpectedInput as exc:
            raise _syntax_error(exc, expression) from None
        names = tuple(_BUILD.names)
    if not isinstance(root, _Node):  # a tail alone cannot reduce to start; kept for safety
        raise Sql92Error("the expression is not a condition")
    keys = tuple((name, name.encode()) for name in names)
    condition = _condition(root)
    predicate = None
    if condition.shape is not None and len(names) <= MAX_NAMES:
        predicate = PropertyPredicate(condition.shape)
    return Sql92Filter(expression, condition.evaluate, names, keys, predicate)
