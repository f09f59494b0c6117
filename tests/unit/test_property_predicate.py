"""PropertyPredicate (store/property_predicate.py and its compiled twin in
store/_get_message.pyx): what an SQL92 filter's common expressions become for a pull's scan.

Both twins give the same answer (UNDECIDED included) on any record, damaged ones too, and a
decided answer is always the general evaluation's (broker/sql92.py, the properties decoded).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.broker.sql92 import compile_sql92
from tidemq.common import speedups
from tidemq.store import _get_message
from tidemq.store.property_predicate import MATCH, NO_MATCH, UNDECIDED, PropertyPredicate
from tidemq.store.record import MessageToStore, check_record, encode_properties, pack_record

PURE = speedups.PURE_TWINS["tidemq.store.property_predicate.PropertyPredicate"]
TWINS = [pytest.param(PURE, id="pure"), pytest.param(_get_message.PropertyPredicate, id="compiled")]
BROKEN = "\u00e9\u00e9"  # a value whose stored bytes a test replaces with invalid UTF-8


def test_the_compiled_twin_is_selected() -> None:
    assert PropertyPredicate is _get_message.PropertyPredicate is not PURE


def record(properties: dict[str, str], *, broken: bool = False) -> bytes:
    msg = MessageToStore("T", 0, b"body", encode_properties(properties))
    packed = pack_record(msg, check_record(msg, 4096), 0, 0, 0)
    if broken:  # same length, so the record's lengths still agree
        packed = packed.replace(BROKEN.encode(), b"\xff\xfe\xc3\xa9")
    return packed


def answer(twin: Any, expression: str, data: bytes) -> int:
    predicate = compile_sql92(expression).predicate
    assert predicate is not None, expression
    result: int = twin(predicate.condition).test(memoryview(data))
    return result


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize(
    ("expression", "properties", "expected"),
    [
        ("a BETWEEN 0 AND 4 AND region IN ('eu','us')", {"a": "3", "region": "us"}, MATCH),
        ("a BETWEEN 0 AND 4 AND region IN ('eu','us')", {"a": "5", "region": "us"}, NO_MATCH),
        ("a BETWEEN 0 AND 4", {"a": "4"}, MATCH),
        ("a BETWEEN 0 AND 4", {"a": "0"}, MATCH),
        ("a BETWEEN 0 AND 4", {"a": "-1"}, NO_MATCH),
        ("a NOT BETWEEN 0 AND 4", {"a": "4"}, NO_MATCH),
        ("a NOT BETWEEN 0 AND 4", {"a": "5"}, MATCH),
        ("a BETWEEN 0.5 AND 4.5", {"a": "4.5"}, MATCH),
        ("a NOT BETWEEN 0.5 AND 4.5", {"a": "0.4"}, MATCH),
        ("a >= 3", {"a": "3"}, MATCH),
        ("a < 3", {"a": "3"}, NO_MATCH),
        ("a <= 3", {"a": "3"}, MATCH),
        ("a >= 2.5", {"a": "2.5"}, MATCH),
        ("a < 2.5", {"a": "2.4"}, MATCH),
        ("a > 3", {"a": "x"}, NO_MATCH),  # not a long: the record is refused
        ("a > 3 OR b = 1", {"a": "x", "b": "1"}, NO_MATCH),  # refused before b is read
        ("b = 1 OR a > 3", {"a": "x", "b": "1"}, MATCH),  # b decides first
        ("a > 3", {"a": "+4"}, MATCH),
        ("a > 3", {"a": ""}, NO_MATCH),
        ("a > 3", {"a": "9" * 18}, MATCH),
        ("a > 3", {"a": "9" * 19}, UNDECIDED),  # the long's range: left to the evaluation
        ("a > 3", {"a": "\uff14"}, UNDECIDED),  # a digit outside ASCII
        ("a > 2.5", {"a": "3"}, MATCH),
        ("a > 2.5", {"a": "-.5"}, NO_MATCH),
        ("a > 2.5", {"a": "1e1"}, UNDECIDED),  # an exponent
        ("a > 2.5", {"a": " 3"}, UNDECIDED),  # Java trims it
        ("a > 2.5", {"a": "3d"}, UNDECIDED),  # Java's suffix
        ("a > 2.5", {"a": ""}, NO_MATCH),
        ("a = 3", {"a": "3"}, MATCH),
        ("a <> 3", {"a": "3"}, NO_MATCH),
        ("a <> 3", {}, NO_MATCH),  # unknown
        ("region = '\u00e9'", {"region": "\u00e9"}, MATCH),
        ("region = 'eu'", {"region": "\u00e9"}, UNDECIDED),
        ("region = 'eu'", {"region": "us"}, NO_MATCH),
        ("region NOT IN ('eu')", {"region": "us"}, MATCH),
        ("region NOT IN ('eu')", {}, NO_MATCH),
        ("a IS NULL", {}, MATCH),
        ("a IS NOT NULL", {"a": ""}, MATCH),
        ("a AND TRUE", {"a": "1"}, NO_MATCH),  # a property as a condition: false
        ("NOT a", {}, NO_MATCH),  # unknown
        ("a NOT BETWEEN 1 AND 2", {"a": "3"}, MATCH),
        ("a BETWEEN 1 AND 2.5", {"a": "2"}, MATCH),  # bounds of two types: two comparisons
        ("FALSE OR TRUE", {}, MATCH),
    ],
)
def test_answers(twin: Any, expression: str, properties: dict[str, str], expected: int) -> None:
    assert answer(twin, expression, record(properties)) == expected


@pytest.mark.parametrize("twin", TWINS)
def test_a_record_whose_lengths_disagree_has_no_properties(twin: Any) -> None:
    whole = record({"a": "1"})
    for data in (whole[:60], b"short", b""):
        assert answer(twin, "a IS NULL", data) == MATCH
        assert answer(twin, "a = 1", data) == NO_MATCH


@pytest.mark.parametrize("twin", TWINS)
def test_invalid_utf8_is_left_to_the_evaluation(twin: Any) -> None:
    data = record({"region": BROKEN}, broken=True)
    assert answer(twin, "region IN ('eu')", data) == UNDECIDED
    assert answer(twin, "region IS NOT NULL", data) == MATCH


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize(
    "condition",
    [
        (),
        ("and", ()),
        ("all", ()),
        ("all", [("const", True)]),
        ("not",),
        ("const", 1),
        ("null", ""),
        ("null", b"a"),
        ("text", "a", "x"),
        ("in", "a", (b"x", "y")),
        ("compare", "a", "!=", 1),
        ("compare", "a", ">", True),
        ("compare", "a", ">", 1 << 63),
        ("between", "a", 1, 2.5, False),
        ("between", "a", 1, 2, 0),
        ("all", tuple(("null", f"p{i}") for i in range(65))),
    ],
)
def test_a_tree_that_is_not_a_condition_is_refused(twin: Any, condition: Any) -> None:
    with pytest.raises(ValueError):
        twin(condition)


@pytest.mark.parametrize(
    "expression",
    [
        "a CONTAINS 'x'",
        "a < b",
        "-a > 1",
        "a = TRUE",
        "'eu' = region",
        "region = '\ud800'",
        " AND ".join(f"p{i} IS NULL" for i in range(65)),
    ],
)
def test_other_expressions_have_no_predicate_and_still_filter(expression: str) -> None:
    compiled = compile_sql92(expression)
    assert compiled.predicate is None
    assert compiled(memoryview(record({"a": "1"}))) in (True, False)


# --- random expressions and values ---------------------------------------------------------

ATOMS = [
    "a BETWEEN 0 AND 4",
    "a NOT BETWEEN -2 AND 3",
    "a BETWEEN 0.5 AND 4.5",
    "a BETWEEN 1 AND 2.5",
    "a > 3",
    "a <= 2.5",
    "a = 3",
    "a <> 2.5",
    "b >= -1",
    "region IN ('eu', 'us', '\u00e9')",
    "region NOT IN ('eu')",
    "region = 'eu'",
    "region <> '\u00e9'",
    "b IS NULL",
    "b IS NOT NULL",
    "region",
    "TRUE",
    "FALSE",
]
# the constants of ATOMS and the values on either side of them
NUMBERS = st.sampled_from(
    ["-3", "-2", "-1", "0", "0.5", "1", "2", "2.5", "3", "3.0", "4", "4.5", "5", "+4", "-0"]
)
ODD_VALUES = st.sampled_from(
    [
        "",
        ".5",
        "5.",
        ".",
        "-",
        "1e1",
        " 4",
        "4 ",
        "x",
        "eu",
        "us",
        "\u00e9",
        BROKEN,
        "9" * 18,
        "9" * 19,
        "-9223372036854775808",
        "NaN",
        "Infinity",
        "4d",
        "\uff14",
        "0" * 19 + "4",
    ]
)
VALUES = st.one_of(
    NUMBERS, ODD_VALUES, st.text(alphabet="0123456789.-+ e", max_size=8), st.text(max_size=4)
)


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 3 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS))
    how = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if how == "NOT":
        return f"NOT ({draw(expressions(depth + 1))})"
    parts = draw(st.lists(expressions(depth + 1), min_size=2, max_size=3))
    return "(" + f" {how} ".join(parts) + ")"


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expressions(),
    st.dictionaries(
        st.sampled_from(["a", "b", "region", "TAGS"]),
        VALUES,
        max_size=4,
    ),
)
def test_twins_answer_alike_and_as_the_general_evaluation(
    expression: str, properties: dict[str, str]
) -> None:
    properties = {
        k: v for k, v in properties.items() if "\x01" not in v + k and "\x02" not in v + k
    }
    data = memoryview(record(properties, broken=BROKEN in properties.values()))
    compiled = compile_sql92(expression)
    assert compiled.predicate is not None
    pure = PURE(compiled.predicate.condition).test(data)
    assert compiled.predicate.test(data) == pure
    if pure != UNDECIDED:
        assert pure == (MATCH if compiled.matches_record(data) else NO_MATCH)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), st.binary(max_size=200), st.data())
def test_twins_answer_alike_on_damaged_records(
    expression: str, noise: bytes, data: st.DataObject
) -> None:
    whole = bytearray(record({"a": "3", "b": "x", "region": "eu"}))
    at = data.draw(st.integers(0, len(whole)))
    damaged = bytes(whole[:at] + noise + whole[at + len(noise) :])[: data.draw(st.integers(0, 400))]
    compiled = compile_sql92(expression)
    assert compiled.predicate is not None
    expected = PURE(compiled.predicate.condition).test(damaged)
    assert compiled.predicate.test(damaged) == expected
    if expected != UNDECIDED:
        assert expected == (MATCH if compiled.matches_record(memoryview(damaged)) else NO_MATCH)
