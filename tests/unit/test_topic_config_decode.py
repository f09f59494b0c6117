"""The one-step TopicConfig.from_dict (every field present with its JSON type) against the
general reading (`from_any_dict`), a registration body put together from row texts against
the encoded table, and the name server's reading of a registration (`decode_routes`) against the
full decoding: same results for any input."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.managers.config_file import compact_json
from tidemq.client.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.protocol.namesrv import (
    QueueCounts,
    RegisterBrokerBody,
    full_registration_json,
    increment_registration_json,
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


@given(
    st.dictionaries(st.text(max_size=8), CONFIGS, max_size=20),
    st.lists(st.text(max_size=8), max_size=5),
    st.integers(0, 1 << 40),
)
def test_an_increment_of_row_texts_is_the_encoded_increment(
    table: dict[str, TopicConfig], deleted: list[str], counter: int
) -> None:
    base = DataVersion(timestamp=1_700_000_000_000, counter=counter)
    version = DataVersion(timestamp=1_700_000_000_001, counter=counter + 1)
    rows = [(name, compact_json(config.to_dict())) for name, config in table.items()]
    encoded = RegisterBrokerBody(
        TopicConfigSerializeWrapper(table, version),
        [],
        base_data_version=base,
        deleted_topics=deleted,
    ).encode()
    assert increment_registration_json(rows, version, base, deleted) == encoded


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


# Names and numbers around the edges of the shape `decode_routes` reads without objects: valid
# topic names and others (dots, spaces, quotes, non-ASCII, 128 characters), integers with and
# without a sign, at and past 10^9 and a Java int.
ROUTE_NAMES = st.one_of(
    st.from_regex(r"[%|a-zA-Z0-9_-]{1,12}", fullmatch=True),
    st.sampled_from(["a.b", "x y", 'q"t', "\u00e9t\u00e9", "T" * 127, "T" * 128, "0", "%RETRY%g"]),
)
ROUTE_NUMBERS = st.one_of(
    st.integers(0, 1024),
    st.sampled_from([0, 999_999_999, 1_000_000_000, (1 << 31) - 1, -1]),
)
ROUTE_CONFIGS = st.builds(
    TopicConfig,
    ROUTE_NAMES,
    ROUTE_NUMBERS,
    ROUTE_NUMBERS,
    st.sampled_from([6, 2, 7]),
    st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
    st.sampled_from([0, 1, 3]),
    st.booleans(),
)


def routed(body: RegisterBrokerBody) -> list[tuple[str, QueueCounts]]:
    """What a name server takes of each topic, in the body's order (read into objects first)."""
    rows = [
        (
            config.topic_name or key,
            (c.read_queue_nums, c.write_queue_nums, c.perm, c.topic_sys_flag),
        )
        for key, config in body.topic_config_wrapper.topic_config_table.items()
        for c in [config]
    ]
    return rows + [(name, counts) for counts, names in body.topic_queue_rows for name in names]


@given(
    st.lists(st.tuples(ROUTE_NAMES, ROUTE_CONFIGS), max_size=12),
    st.booleans(),
    st.booleans(),
)
def test_the_name_servers_reading_takes_what_the_full_decoding_does(
    entries: list[tuple[str, TopicConfig]], same_names: bool, incremental: bool
) -> None:
    # keys equal to their topicName (the brokers' shape) or not
    table = {(config.topic_name if same_names else key): config for key, config in entries}
    version = DataVersion(timestamp=1_700_000_000_000, counter=7)
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper(table, version),
        ["10.0.0.1:1"],
        DataVersion(timestamp=1, counter=2) if incremental else None,
        ["Gone"] if incremental else [],
    ).encode()
    full = RegisterBrokerBody.decode(body)
    fast = RegisterBrokerBody.decode_routes(bytes(body))  # not the remembered one
    assert sorted(routed(fast)) == sorted(routed(full))
    assert fast.topic_count == len(full.topic_config_wrapper.topic_config_table)
    assert fast.topic_config_wrapper.data_version == version
    assert (fast.filter_server_list, fast.base_data_version, fast.deleted_topics) == (
        full.filter_server_list,
        full.base_data_version,
        full.deleted_topics,
    )
    # Read without objects only when every name is a valid topic name, every key its
    # topicName, every number below 10^9 and not negative.
    plain = all(
        key == config.topic_name
        and 1 <= len(key) <= 127
        and all(ch.isascii() and (ch.isalnum() or ch in "%|_-") for ch in key)
        and all(
            0 <= n < 1_000_000_000
            for n in (config.read_queue_nums, config.write_queue_nums, config.perm)
        )
        for key, config in table.items()
    )
    assert bool(fast.topic_queue_rows) == (plain and bool(table))


def test_a_part_of_equal_topics_is_one_group_and_mixed_ones_are_grouped() -> None:
    version = DataVersion(timestamp=1_700_000_000_000, counter=1)
    equal = [(f"T{i}", compact_json(TopicConfig(f"T{i}", 8, 8).to_dict())) for i in range(800)]
    body = RegisterBrokerBody.decode_routes(full_registration_json(equal, version))
    assert body.topic_queue_rows == [((8, 8, 6, 0), [f"T{i}" for i in range(800)])]
    assert body.topic_config_wrapper.topic_config_table == {}
    # counts whose texts begin alike (flag 1 and 12, 8 and 80 queues) are told apart
    mixed = [
        ("A", TopicConfig("A", 8, 8, topic_sys_flag=1)),
        ("B", TopicConfig("B", 8, 8, topic_sys_flag=12)),
        ("C", TopicConfig("C", 80, 8, topic_sys_flag=1)),
        ("D", TopicConfig("D", 8, 8, topic_sys_flag=1)),
    ]
    rows = [(name, compact_json(config.to_dict())) for name, config in mixed]
    body = RegisterBrokerBody.decode_routes(full_registration_json(rows, version))
    assert sorted(body.topic_queue_rows) == [
        ((8, 8, 6, 1), ["A", "D"]),
        ((8, 8, 6, 12), ["B"]),
        ((80, 8, 6, 1), ["C"]),
    ]
