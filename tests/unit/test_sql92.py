"""SQL92 filters (broker/sql92.py): RocketMQ's grammar and its evaluation on string properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.broker.sql92 import MAX_DEPTH, MAX_EXPRESSION_LENGTH, Sql92Error, compile_sql92
from tidemq.store.record import (
    MessageToStore,
    check_record,
    decode_properties,
    encode_properties,
    pack_record,
)

EXPRESSION = "a BETWEEN 3 AND 5 AND region IN ('eu','us')"


@pytest.mark.parametrize(
    ("expression", "properties", "matches"),
    [
        (EXPRESSION, {"a": "4", "region": "eu"}, True),
        (EXPRESSION, {"a": "5", "region": "us"}, True),
        (EXPRESSION, {"a": "6", "region": "eu"}, False),
        (EXPRESSION, {"a": "4", "region": "ap"}, False),
        (EXPRESSION, {"a": "x", "region": "eu"}, False),  # not a number: no match
        (EXPRESSION, {"region": "eu"}, False),  # missing: unknown, no match
        ("a > 2.5", {"a": "3"}, True),
        ("a > 3", {"a": "3.5"}, False),  # compared as a Java long: "3.5" is not one
        ("a >= -1", {"a": "-1"}, True),
        ("a < b", {"a": "1.5", "b": "10"}, True),  # two strings: read as doubles
        ("a < b", {"a": "x", "b": "10"}, False),
        ("a = 'abc'", {"a": "abc"}, True),
        ("a <> 'abc'", {"a": "abd"}, True),
        ("a <> 'abc'", {}, False),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a = 3", {"a": "3"}, True),
        ("a = 3", {"a": "three"}, False),
        ("a = TRUE", {"a": "true"}, True),
        ("a IS NULL", {}, True),
        ("a IS NOT NULL", {}, False),
        ("a is not null", {"a": ""}, True),
        ("NOT (a = 1)", {"a": "2"}, True),
        ("NOT (a = 1)", {}, False),  # NOT unknown is unknown
        ("b = 1 OR a = 1", {"a": "1"}, True),  # unknown OR true
        ("b = 1 AND a = 1", {"a": "1"}, False),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT BETWEEN 1 AND 2", {"a": "3"}, True),
        ("TRUE", {}, True),
        ("FALSE OR TAGS IN ('A') -- a comment", {"TAGS": "A"}, True),
        ("/* why */ a = -1", {"a": "-1"}, True),
        ("index = 1 aNd notes = 'n'", {"index": "1", "notes": "n"}, True),
        ("a STARTSWITH 'ab' AND a NOT ENDSWITH 'x'", {"a": "abc"}, True),
        ("a CONTAINS 'b'", {"a": "abc"}, True),
    ],
)
def test_evaluation(expression: str, properties: dict[str, str], matches: bool) -> None:
    assert compile_sql92(expression).matches(properties) is matches


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("a > 'x'", "cannot be compared"),
        ("a > TRUE", "cannot be compared"),
        ("a = NULL", "use IS NULL"),
        ("TRUE = 1", "cannot be compared"),
        ("a BETWEEN 5 AND 3", "illegal values of BETWEEN"),
        ("a BETWEEN NULL AND 3", "cannot be NULL"),
        ("'x' IN ('a')", "IN needs a property"),
        ("1", "will not result in a boolean"),
        ("a = ", "ends too early"),
        ("a = 1 )", "unexpected ')' at column 7"),
        ("a # 1", "unexpected character '#' at column 3"),
        ("a = 1 and_b = 2", "unexpected 'and_b'"),
        ("a IN (1, 2)", "unexpected '1'"),
        ("", "empty"),
        ("NOT " * (MAX_DEPTH + 1) + "a = 1", f"nested more than {MAX_DEPTH}"),
        ("a = 1" + " " * MAX_EXPRESSION_LENGTH, "characters long"),
    ],
)
def test_refusals_name_the_problem(expression: str, problem: str) -> None:
    with pytest.raises(Sql92Error, match=re.escape(problem)):
        compile_sql92(expression)


def test_long_expressions_and_deep_parentheses() -> None:
    flat = " AND ".join(f"p{i} = {i}" for i in range(1000))
    assert len(flat) > 10_000
    assert compile_sql92(flat).matches({f"p{i}": str(i) for i in range(1000)})
    assert not compile_sql92(flat).matches({f"p{i}": str(i) for i in range(999)})
    nested = "(" * 3000 + "a = 1" + ")" * 3000
    assert compile_sql92(nested).matches({"a": "1"})


def test_records_are_read_in_place() -> None:
    msg = MessageToStore("T", 0, b"body", encode_properties({"a": "4", "region": "us"}))
    record = pack_record(msg, check_record(msg, 1024), 0, 0, 0)
    assert compile_sql92(EXPRESSION).matches_record(memoryview(record))
    assert not compile_sql92("a > 4").matches_record(memoryview(record))
    assert not compile_sql92("a IS NOT NULL").matches_record(memoryview(record[:60]))  # torn
    assert compile_sql92("a IS NULL").matches_record(memoryview(b"short"))  # no properties


_PIECES = [
    "a",
    "b",
    "region",
    "=",
    "<>",
    ">",
    ">=",
    "<",
    "<=",
    "AND",
    "OR",
    "NOT",
    "BETWEEN",
    "IN",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "(",
    ")",
    ",",
    "'x'",
    "'it''s'",
    "3",
    "-",
    "+",
    "2.5",
    "1e3",
    "10L",
    "CONTAINS",
    "STARTSWITH",
    "ENDSWITH",
    "--c\n",
    "/*c*/",
    "#",
    "'",
    "\x00",
    "é",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_PIECES), max_size=25),
    st.dictionaries(st.sampled_from(["a", "b", "region"]), st.text(max_size=6), max_size=3),
)
def test_any_token_soup_compiles_or_is_refused_and_evaluates_to_a_bool(
    pieces: list[str], properties: dict[str, str]
) -> None:
    expression = " ".join(pieces)
    try:
        compiled = compile_sql92(expression)
    except Sql92Error as exc:
        assert str(exc)
        return
    assert compiled.matches(properties) in (True, False)


def test_a_filter_knows_the_properties_it_names() -> None:
    assert compile_sql92("b > 1 AND (a = 'x' OR b IS NULL) AND c IN ('y')").names == ("b", "a", "c")
    assert compile_sql92("TRUE").names == ()


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([EXPRESSION, "a > 3", "a IS NULL", "NOT (region = 'us')", "b <> 'x' OR a < 2"]),
    st.dictionaries(
        st.sampled_from(["a", "b", "region", "TAGS", "UNIQ_KEY"]),
        st.one_of(st.sampled_from(["1", "4", "7", "us", "eu", "x", ""]), st.text(max_size=4)),
    ),
)
def test_a_record_matches_as_its_decoded_properties_do(
    expression: str, properties: dict[str, str]
) -> None:
    """matches_record reads only the named properties, in place; the answer is the one the
    whole decoded property map gives."""
    properties = {
        k: v for k, v in properties.items() if "\x01" not in v + k and "\x02" not in v + k
    }
    msg = MessageToStore("T", 0, b"body", encode_properties(properties))
    record = pack_record(msg, check_record(msg, 1024), 0, 0, 0)
    decoded = decode_properties(encode_properties(properties))
    sql = compile_sql92(expression)
    assert sql.matches_record(memoryview(record)) == sql.matches(decoded)


_VALUES = st.one_of(
    st.sampled_from(
        ["", "0", "3", "4", "5", "-1", "2.5", "1e1", "NaN", "x", "true", " 4", "9" * 20]
    ),
    st.text(max_size=4),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["0 AND 4", "-2 AND 3", "0.5 AND 4.5", "1 AND 2.5", "3 AND 3"]),
    st.sampled_from(["b IS NULL", "b = 'x'", "region IN ('us')", "FALSE", "TRUE"]),
    st.dictionaries(st.sampled_from(["a", "b", "region"]), _VALUES, max_size=3),
)
def test_fused_and_unrolled_forms_answer_as_the_general_ones(
    bounds: str, other: str, properties: dict[str, str]
) -> None:
    """BETWEEN on a property (one read), and AND / OR of two (unrolled), answer as the
    comparisons they stand for and as the general loop of three operands does."""
    low, high = bounds.split(" AND ")
    for negate, spelled in (
        ("", f"(a >= {low} AND a <= {high})"),
        ("NOT ", f"(a < {low} OR a > {high})"),
    ):
        fused = compile_sql92(f"a {negate}BETWEEN {bounds}")
        assert fused.matches(properties) == compile_sql92(spelled).matches(properties)
    for two, three in (
        (f"a BETWEEN {bounds} AND {other}", f"a BETWEEN {bounds} AND {other} AND TRUE"),
        (f"a BETWEEN {bounds} OR {other}", f"a BETWEEN {bounds} OR {other} OR FALSE"),
        (f"NOT (a > {low} AND {other})", f"NOT (a > {low} AND {other} AND TRUE)"),
        (f"NOT (a > {low} OR {other})", f"NOT (a > {low} OR {other} OR FALSE)"),
    ):
        assert compile_sql92(two).matches(properties) == compile_sql92(three).matches(properties)
