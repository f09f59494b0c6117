"""The one-step TopicConfig.from_dict (every field present with its JSON type) against the
general reading (`from_any_dict`), and a registration body put together from row texts against
the encoded table: same results for any input."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.managers.config_file import compact_json
from tidemq.client.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.protocol.namesrv import (
    RegisterBrokerBody,
    full_registration_json,
    topic_wrapper_json,
)
from tidemq.client.remoting.json_body import dumps

FIELDS = (
    "topicName",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "topicFilterType",
    "topicSysFlag",
    "order",
)
VALUES = st.one_of(
    st.integers(min_value=-(1 << 33), max_value=1 << 33),
    st.sampled_from([0, 8, (1 << 31) - 1, -(1 << 31), 1 << 31]),
    st.booleans(),
    st.text(max_size=5),
    st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "", "12", "true"]),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=1),
)


def outcome(read: Any, obj: Any) -> object:
    try:
        return read(obj)
    except Exception as exc:  # the same kind of refusal either way
        return type(exc)


@given(st.dictionaries(st.sampled_from(FIELDS), VALUES))
def test_the_one_step_reading_equals_the_general_one(obj: dict[str, Any]) -> None:
    assert outcome(TopicConfig.from_dict, obj) == outcome(TopicConfig.from_any_dict, obj)


@given(st.fixed_dictionaries({field: VALUES for field in FIELDS}))
def test_every_field_present_reads_the_same(obj: dict[str, Any]) -> None:
    assert outcome(TopicConfig.from_dict, obj) == outcome(TopicConfig.from_any_dict, obj)


CONFIGS = st.builds(
    TopicConfig,
    st.text(max_size=8),
    st.integers(0, 1024),
    st.integers(0, 1024),
    st.integers(0, 7),
    st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
    st.integers(0, 3),
    st.booleans(),
)


@given(st.dictionaries(st.text(max_size=8), CONFIGS, max_size=20), st.integers(0, 1 << 40))
def test_a_body_of_row_texts_is_the_encoded_table(
    table: dict[str, TopicConfig], counter: int
) -> None:
    version = DataVersion(timestamp=1_700_000_000_000, counter=counter)
    rows = [(name, compact_json(config.to_dict())) for name, config in table.items()]
    encoded = RegisterBrokerBody(TopicConfigSerializeWrapper(table, version)).encode()
    assert full_registration_json(rows, version) == encoded


NUMBERS = st.one_of(
    st.integers(min_value=-(1 << 33), max_value=1 << 33),
    st.sampled_from([(1 << 31) - 1, -(1 << 31), 1 << 31, -(1 << 31) - 1]),
)


@given(
    st.fixed_dictionaries(
        {
            "topicName": st.text(max_size=5),
            "readQueueNums": NUMBERS,
            "writeQueueNums": NUMBERS,
            "perm": NUMBERS,
            "topicFilterType": st.sampled_from(["SINGLE_TAG", "MULTI_TAG", ""]),
            "topicSysFlag": NUMBERS,
            "order": st.booleans(),
        }
    )
)
def test_the_typed_shape_reads_the_same(obj: dict[str, Any]) -> None:
    assert outcome(TopicConfig.from_dict, obj) == outcome(TopicConfig.from_any_dict, obj)


@given(st.dictionaries(st.text(max_size=8), CONFIGS, max_size=20))
def test_a_wrapper_of_row_texts_is_the_encoded_wrapper(table: dict[str, TopicConfig]) -> None:
    version = DataVersion(timestamp=1_700_000_000_000, counter=3)
    rows = [(name, compact_json(config.to_dict())) for name, config in table.items()]
    wrapper = TopicConfigSerializeWrapper(table, version)
    assert topic_wrapper_json(rows, version) == dumps(wrapper.to_dict())
