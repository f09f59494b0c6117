"""The config tables in config/tables.db (broker/managers/table_store.py, config_file.py):
import of RocketMQ's JSON files at first start, export, and the cost of one change."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tidemq.broker.config import BrokerConfig
from tidemq.broker.daemons.cluster import main as cluster_main
from tidemq.broker.managers.config_file import ConfigFileCorruptError, pretty_json
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.table_store import TABLES_FILE, TableStore, TableStoreCorruptError
from tidemq.broker.managers.topic_config import (
    LAZY_ROW_SQL,
    TopicChange,
    TopicConfigChanged,
    TopicConfigManager,
    parse_topic_wrapper,
)
from tidemq.client.protocol.models import DataVersion, SubscriptionGroupConfig, TopicConfig

BROKER = BrokerConfig(broker_cluster_name="DefaultCluster", broker_name="broker-a")


def topics_json(count: int, counter: int = 9) -> str:
    table = {
        f"T{i:07d}": {
            "topicName": f"T{i:07d}",
            "readQueueNums": 8,
            "writeQueueNums": 8,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        }
        for i in range(count)
    }
    version = {"timestamp": 1700000000000, "counter": counter}
    return pretty_json({"topicConfigTable": table, "dataVersion": version})


def test_json_files_are_imported_once_then_only_exported(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text(topics_json(3))
    manager = TopicConfigManager(tmp_path, BROKER)
    assert manager.load()
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:  # the next start need not check rows
        checked = db.execute("SELECT rule FROM config_checked WHERE tbl = 'topics'").fetchall()
    assert checked == [(LAZY_ROW_SQL,)]
    assert manager.data_version == DataVersion(1700000000000, 9)
    manager.update(TopicConfig("Added", 2, 2))
    manager.close()
    # An edit of the file after the import is not read: the table lives in tables.db now.
    (tmp_path / "topics.json").write_text(topics_json(1, counter=99))
    reloaded = TopicConfigManager(tmp_path, BROKER)
    assert reloaded.load()
    assert {"T0000000", "T0000002", "Added"} <= set(reloaded.topics())
    assert reloaded.data_version == manager.data_version
    reloaded.export()
    exported = parse_topic_wrapper((tmp_path / "topics.json").read_text())
    assert exported.topic_config_table == reloaded.wrapper().topic_config_table
    assert exported.data_version == reloaded.data_version
    reloaded.close()


def test_every_table_round_trips_through_json(tmp_path: Path) -> None:
    source = tmp_path / "a"
    topics = TopicConfigManager(source, BROKER)
    groups = SubscriptionGroupManager(source)
    offsets = ConsumerOffsetManager(source)
    delays = DelayOffsetTable(source)
    for manager in (topics, groups, offsets, delays):
        manager.load()
    topics.update(TopicConfig("Orders", 3, 5, 4, order=True))
    groups.update(SubscriptionGroupConfig("cg", retry_max_times=3))
    offsets.commit("h", "cg", "Orders", 2, 40)
    offsets.persist()
    delays.update(3, 17)
    delays.persist()
    for manager in (topics, groups, offsets, delays):
        manager.export()
        manager.close()
    copy = tmp_path / "b"
    copy.mkdir()
    for name in ("topics", "subscriptionGroup", "consumerOffset", "delayOffset"):
        (copy / f"{name}.json").write_text((source / f"{name}.json").read_text())
    imported = (
        TopicConfigManager(copy, BROKER),
        SubscriptionGroupManager(copy),
        ConsumerOffsetManager(copy),
        DelayOffsetTable(copy),
    )
    for manager in imported:
        assert manager.load()
    t, g, o, d = imported
    assert t.wrapper() == topics.wrapper()
    assert g.wrapper() == groups.wrapper()
    assert o.snapshot() == {"Orders@cg": {2: 40}}
    assert d.snapshot() == {3: 17}
    assert sorted(TableStore(copy / TABLES_FILE).tables()) == [
        "consumerOffset",
        "delayOffset",
        "subscriptionGroup",
        "topics",
    ]


def test_a_topics_json_over_the_request_body_limit_is_imported(tmp_path: Path) -> None:
    text = topics_json(100_000)
    assert len(text) > 16 * 1024 * 1024  # what a request body may hold
    (tmp_path / "topics.json").write_text(text)
    manager = TopicConfigManager(tmp_path, BROKER)
    assert manager.load()
    assert manager.select("T0099999") == TopicConfig("T0099999", 8, 8, 6)


def test_one_change_writes_a_few_pages_whatever_the_table_size(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text(topics_json(20_000))
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    db_size = (tmp_path / TABLES_FILE).stat().st_size + (tmp_path / "tables.db-wal").stat().st_size
    assert db_size > 2_000_000
    # A checkpoint empties the WAL; what one change adds to it is what it wrote.
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert (tmp_path / "tables.db-wal").stat().st_size == 0
    manager.update(TopicConfig("OneMore", 8, 8))
    written = (tmp_path / "tables.db-wal").stat().st_size
    assert 0 < written <= 8 * 4096 + 1024, written  # b-tree path, version row, WAL header


def test_a_change_is_one_row_and_the_version(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update(TopicConfig("A", 1, 1))
    manager.changed("A")
    manager.version_changed()
    changes = manager.take_changes()
    assert list(changes.puts) == ["A"] and not changes.deletes and changes.version is not None
    assert not manager.take_changes()


def test_a_failed_write_is_retried_by_the_next_persist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.load()
    offsets.commit("h", "cg", "T", 0, 5)
    store = offsets.store

    def disk_full(table: str, changes: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(store, "write", disk_full)
        assert not offsets.persist_quietly()
    offsets.commit("h", "cg", "U", 1, 6)
    assert offsets.persist_quietly()
    offsets.close()
    reloaded = ConsumerOffsetManager(tmp_path)
    reloaded.load()
    assert reloaded.snapshot() == {"T@cg": {0: 5}, "U@cg": {1: 6}}


def test_replace_from_the_master_writes_only_the_rows_that_differ(tmp_path: Path) -> None:
    slave = TopicConfigManager(tmp_path / "slave", BROKER)
    slave.load()
    slave.update(TopicConfig("Gone"))
    master = TopicConfigManager(tmp_path / "master", BROKER)
    master.update(TopicConfig("New", 2, 2))
    master.data_version.next_version()  # never the slave's (same millisecond, same counter)
    written: list[set[str]] = []
    write = slave.store.write

    def record(table: str, changes: object) -> None:
        written.append(set(changes.puts) | set(changes.deletes))  # type: ignore[attr-defined]
        write(table, changes)  # type: ignore[arg-type]

    slave.store.write = record  # type: ignore[method-assign]
    assert slave.replace_all(master.wrapper())
    assert written == [{"Gone", "New"}]
    slave.close()
    reloaded = TopicConfigManager(tmp_path / "slave", BROKER)
    reloaded.load()
    assert "Gone" not in reloaded and reloaded.select("New") == TopicConfig("New", 2, 2)


def test_a_batch_is_one_version_step(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    before = manager.data_version.counter
    reported = manager.update_many(TopicConfig(f"B{i}", 4, 4) for i in range(100))
    assert len(reported) == 100 and manager.data_version.counter == before + 1
    manager.close()
    reloaded = TopicConfigManager(tmp_path, BROKER)
    reloaded.load()
    assert all(f"B{i}" in reloaded for i in range(100))


def test_an_unreadable_table_file_stops_start_up_with_one_line(tmp_path: Path) -> None:
    (tmp_path / TABLES_FILE).write_bytes(b"this is not a database, it only looks like one" * 100)
    with pytest.raises(TableStoreCorruptError, match=r"tables\.db") as caught:
        TopicConfigManager(tmp_path, BROKER).load()
    assert "\n" not in str(caught.value)


def test_an_unreadable_row_stops_start_up(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.close()
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("UPDATE config_rows SET value = '{' WHERE key = 'TBW102'")
    with pytest.raises(ConfigFileCorruptError, match="table topics"):
        TopicConfigManager(tmp_path, BROKER).load()


def test_json_rows_match_the_rocketmq_entries(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update(TopicConfig("A", 1, 2, 6))
    rows, version = manager.store.read("topics")
    assert json.loads(rows["A"]) == TopicConfig("A", 1, 2, 6).to_dict()
    assert version is not None and json.loads(version) == manager.data_version.to_dict()


def test_export_command_reads_the_tables_of_a_live_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    topics = TopicConfigManager(tmp_path / "config", BROKER)  # held open, as a running broker
    topics.load()
    topics.update(TopicConfig("Live", 3, 3))
    offsets = ConsumerOffsetManager(tmp_path / "config")
    offsets.load()
    offsets.commit("h", "cg", "Live", 0, 9)
    offsets.persist()
    result = CliRunner().invoke(cluster_main, ["export-config", str(tmp_path), "-o", "out"])
    assert result.exit_code == 0, result.output
    assert "topics.json" in result.output and "consumerOffset.json" in result.output
    exported = parse_topic_wrapper(Path("out/topics.json").read_text())
    assert exported.topic_config_table == topics.wrapper().topic_config_table
    assert exported.data_version == topics.data_version
    assert json.loads(Path("out/consumerOffset.json").read_text()) == {
        "offsetTable": {"Live@cg": {"0": 9}}
    }
    missing = CliRunner().invoke(cluster_main, ["export-config", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "no tables.db" in missing.output


def test_a_row_of_two_objects_does_not_shift_the_others(tmp_path: Path) -> None:
    # The rows are parsed as one JSON array: a row holding two objects would give the next
    # keys their neighbours' entries if that went unchecked.
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update_many([TopicConfig("A", 1, 1), TopicConfig("B", 2, 2), TopicConfig("C", 3, 3)])
    manager.close()
    two = '{"topicName":"A","readQueueNums":9},{"topicName":"B","readQueueNums":9}'
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("UPDATE config_rows SET value = ? WHERE key = 'A'", (two,))
        db.execute("DELETE FROM config_rows WHERE key = 'SELF_TEST_TOPIC'")  # same count
    with pytest.raises(ConfigFileCorruptError, match="table topics"):
        TopicConfigManager(tmp_path, BROKER).load()


def test_groups_with_names_the_gate_refuses_are_not_loaded(tmp_path: Path) -> None:
    """Found in review: topics with invalid names were dropped at load, groups were not (a
    subscriptionGroup.json written by hand or before the name gate)."""
    table = {name: {"groupName": name} for name in ("GoodGroup", "../outside", "a/b", "x" * 300)}
    version = {"timestamp": 1700000000000, "counter": 3}
    (tmp_path / "subscriptionGroup.json").write_text(
        pretty_json({"subscriptionGroupTable": table, "dataVersion": version})
    )
    groups = SubscriptionGroupManager(tmp_path)
    assert groups.load()
    assert groups.get("GoodGroup") is not None
    for bad in ("../outside", "a/b", "x" * 300):
        assert groups.get(bad) is None, bad
    groups.close()
    again = SubscriptionGroupManager(tmp_path)  # from tables.db now
    assert again.load()
    assert again.get("GoodGroup") is not None and again.get("../outside") is None
    again.close()


def test_an_entry_named_differently_from_its_key_takes_its_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found in review: an entry was kept under its key with another name inside (a file
    edited by hand), so the broker registered and showed a name no request finds, one the
    name gate never saw (`{"Good": {"topicName": "../x"}}`)."""
    table = {"Good": {"topicName": "../x", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}
    version = {"timestamp": 1700000000000, "counter": 3}
    (tmp_path / "topics.json").write_text(
        pretty_json({"topicConfigTable": table, "dataVersion": version})
    )
    groups = {"GoodGroup": {"groupName": "Other"}}
    (tmp_path / "subscriptionGroup.json").write_text(
        pretty_json({"subscriptionGroupTable": groups, "dataVersion": version})
    )
    topics = TopicConfigManager(tmp_path, BROKER)
    assert topics.load()
    config = topics.select("Good")
    assert config is not None and config.topic_name == "Good" and config.read_queue_nums == 2
    assert "'../x' -> 'Good'" in caplog.text
    subscriptions = SubscriptionGroupManager(tmp_path)
    assert subscriptions.load()
    group = subscriptions.get("GoodGroup")
    assert group is not None and group.group_name == "GoodGroup"
    topics.close()
    subscriptions.close()
    rows, _ = TableStore(tmp_path / TABLES_FILE).read("topics")
    assert json.loads(rows["Good"])["topicName"] == "Good"  # imported under its key


def test_a_row_named_differently_from_its_key_is_renamed_and_written_again(
    tmp_path: Path,
) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update(TopicConfig("A", 1, 1))
    manager.close()
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("""UPDATE config_rows SET value = '{"topicName":"../b"}' WHERE key = 'A'""")
    reloaded = TopicConfigManager(tmp_path, BROKER)
    assert reloaded.load()
    config = reloaded.select("A")
    assert config is not None and config.topic_name == "A"
    reloaded.persist()
    reloaded.close()
    rows, _ = TableStore(tmp_path / TABLES_FILE).read("topics")
    assert json.loads(rows["A"])["topicName"] == "A"


def test_a_clean_table_is_loaded_without_decoding_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update_many([TopicConfig(f"T{i}", 8, 8) for i in range(500)])
    manager.update(TopicConfig("Odd", 1, 2, 4, "MULTI_TAG", 3, order=True))
    expected = manager.wrapper()
    manager.close()
    decoded: list[object] = []
    real = TopicConfig.from_dict.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        TopicConfig,
        "from_dict",
        classmethod(lambda cls, obj: decoded.append(obj) or real(cls, obj)),
    )
    reloaded = TopicConfigManager(tmp_path, BROKER)
    reloaded.load()
    system = len(TopicConfigManager(tmp_path / "fresh", BROKER))
    assert len(decoded) <= system  # only the system topics' rows, laid over their defaults
    assert len(reloaded) == len(expected.topic_config_table)
    assert "T499" in reloaded and set(reloaded.topics()) == set(expected.topic_config_table)
    assert len(decoded) <= system
    assert reloaded.select("Odd") == TopicConfig("Odd", 1, 2, 4, "MULTI_TAG", 3, order=True)
    assert reloaded.select("T7") == TopicConfig("T7", 8, 8)
    assert len(decoded) <= system + 2
    # the texts as read are what is registered and written back
    texts = dict(reloaded.json_rows())
    assert {k: json.loads(v) for k, v in texts.items()} == {
        k: c.to_dict() for k, c in expected.topic_config_table.items()
    }
    assert reloaded.wrapper().topic_config_table == expected.topic_config_table
    reloaded.update(TopicConfig("T8", 2, 2))
    reloaded.delete("T9")
    reloaded.close()
    rows, _ = TableStore(tmp_path / TABLES_FILE).read("topics")
    assert json.loads(rows["T8"])["readQueueNums"] == 2 and "T9" not in rows
    assert rows["T10"] == texts["T10"]


def test_topics_created_in_lists_are_kept_as_their_rows_texts(tmp_path: Path) -> None:
    """No TopicConfig per topic of a list (each would be walked by CPython's full
    collections): its row's text, as a load keeps it. A system topic (decoded already) and a
    config that would not read back the same by `from_dict` stay objects; a topic decoded by
    use and updated again stays decoded."""
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    system = len(manager._table)
    manager.update_many([TopicConfig(f"T{i}", 8, 8) for i in range(300)])
    assert len(manager._table) == system and len(manager._rows) == 300
    assert (
        manager.json_row("T5") == '{"topicName":"T5","readQueueNums":8,"writeQueueNums":8,'
        '"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}'
    )
    assert len(manager._table) == system  # json_row decodes nothing
    assert manager.select("T5") == TopicConfig("T5", 8, 8)  # decoded at first use
    assert len(manager._table) == system + 1
    manager.update_many(
        [
            TopicConfig("T5", 4, 4),  # decoded: replaced as an object
            TopicConfig("TBW102", 4, 4),  # a system topic: stays an object
            TopicConfig("Big", 1 << 31, 8),  # past a Java int: not read back by from_dict
            TopicConfig("T6", 2, 2),  # a text replaced by a text
        ]
    )
    assert manager.select("T5") == TopicConfig("T5", 4, 4) and "T5" not in manager._rows
    assert manager._table["TBW102"] == TopicConfig("TBW102", 4, 4)
    assert "Big" in manager._table and "Big" not in manager._rows
    assert json.loads(manager._rows["T6"])["readQueueNums"] == 2
    manager.close()
    rows, _ = TableStore(tmp_path / TABLES_FILE).read("topics")
    assert rows["T6"] == manager.json_row("T6") and rows["T0"] == manager.json_row("T0")
    reloaded = TopicConfigManager(tmp_path, BROKER)
    reloaded.load()
    assert reloaded.select("T6") == TopicConfig("T6", 2, 2)
    assert reloaded.select("T5") == TopicConfig("T5", 4, 4)
    assert reloaded.select("T299") == TopicConfig("T299", 8, 8)
    reloaded.close()


class CountingRows(dict[str, str]):
    """The rows' table, counting the look-ups made in it by name."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lookups: list[str] = []

    def __contains__(self, key: object) -> bool:
        self.lookups.append("in")
        return super().__contains__(key)

    def __getitem__(self, key: str) -> str:
        self.lookups.append("[]")
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.lookups.append("get")
        return super().get(key, default)

    def setdefault(self, key: str, default: str) -> str:  # type: ignore[override]
        self.lookups.append("setdefault")
        return super().setdefault(key, default)


def test_a_new_topic_of_a_list_is_one_look_up_of_the_rows_and_its_text_goes_along(
    tmp_path: Path,
) -> None:
    """At a million topics each look-up of a name in the rows' table is a few cache misses
    (the drift note): a new topic of a list costs one (`setdefault`), and the persist and the
    change notices take its text from the batch. A config equal to the current one (kept as
    text or decoded, however its row is written) changes nothing and is not reported; a
    changed one is."""
    heard: list[TopicConfigChanged] = []
    manager = TopicConfigManager(tmp_path, BROKER, on_change=heard.append)
    manager.load()
    rows = manager._rows = CountingRows(manager._rows)
    reported = manager.update_many([TopicConfig(f"T{i}", 8, 8) for i in range(100)])
    assert rows.lookups == ["setdefault"] * 100
    assert heard == reported and [c.kind for c in reported] == [TopicChange.CREATED] * 100
    assert all(c.text is not None and c.text == rows[c.topic or ""] for c in reported)
    version = manager.data_version.counter
    heard.clear()
    # T1 written by another version (same config, its keys in another order)
    rows["T1"] = json.dumps(json.loads(rows["T1"]), sort_keys=True)
    manager.select("T2")  # decoded by use
    same = [TopicConfig("T0", 8, 8), TopicConfig("T1", 8, 8), TopicConfig("T2", 8, 8)]
    assert manager.update_many(same) == [] and heard == []
    assert manager.data_version.counter == version
    changed = manager.update_many(
        [TopicConfig("T0", 4, 4), TopicConfig("T1", 2, 2), TopicConfig("T2", 1, 1)]
    )
    assert [(c.kind, c.topic) for c in changed] == [
        (TopicChange.UPDATED, "T0"),
        (TopicChange.UPDATED, "T1"),
        (TopicChange.UPDATED, "T2"),
    ]
    assert changed[0].text == manager.json_row("T0") and changed[2].text is None  # an object
    assert manager.data_version.counter == version + 1
    manager.close()
    reloaded = TopicConfigManager(tmp_path, BROKER)
    reloaded.load()
    assert [reloaded.select(f"T{i}") for i in range(3)] == [
        TopicConfig("T0", 4, 4),
        TopicConfig("T1", 2, 2),
        TopicConfig("T2", 1, 1),
    ]
    assert reloaded.select("T99") == TopicConfig("T99", 8, 8)
    reloaded.close()


def test_a_row_of_the_shape_that_is_not_json_is_left_out_at_its_first_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update_many([TopicConfig("A", 8, 8), TopicConfig("B", 8, 8)])
    manager.close()
    broken = (
        '{"topicName":"A","readQueueNums":8x,"writeQueueNums":8,"perm":6,'
        '"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}'
    )
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("UPDATE config_rows SET value = ? WHERE key = 'A'", (broken,))
    reloaded = TopicConfigManager(tmp_path, BROKER)
    assert reloaded.load()  # the shape passed: the row is read at first use
    assert reloaded.select("A") is None
    assert "topic A: its row in" in caplog.text and "unreadable" in caplog.text
    assert "A" not in reloaded and reloaded.select("B") == TopicConfig("B", 8, 8)
    assert "A" not in reloaded.wrapper().topic_config_table
    reloaded.persist()
    reloaded.close()
    rows, _ = TableStore(tmp_path / TABLES_FILE).read("topics")
    assert rows["A"] == broken  # kept for the operator, not lost


def test_rows_of_other_shapes_and_invalid_names_take_the_checked_path(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update_many([TopicConfig("A", 8, 8), TopicConfig("B", 8, 8)])
    manager.close()
    spaced = '{"topicName": "A", "readQueueNums": 3}'
    dotted = (
        '{"topicName":"x.y","readQueueNums":8,"writeQueueNums":8,"perm":6,'
        '"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}'
    )
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("UPDATE config_rows SET value = ? WHERE key = 'A'", (spaced,))
        db.execute("INSERT INTO config_rows VALUES ('topics', 'x.y', ?)", (dotted,))
        # a key GLOB reads as a pattern matching the name inside
        db.execute("INSERT INTO config_rows VALUES ('topics', 'x*', ?)", (dotted,))
    reloaded = TopicConfigManager(tmp_path, BROKER)
    reloaded.load()
    assert reloaded.select("A") == TopicConfig("A", 3, 16)
    assert "x.y" not in reloaded and "x.y" not in dict(reloaded.json_rows())
    assert "x*" not in reloaded and "x*" not in dict(reloaded.json_rows())
    assert reloaded.select("B") == TopicConfig("B", 8, 8)


def test_rows_all_of_the_kept_shape_are_not_checked_again_until_a_row_is_not(
    tmp_path: Path,
) -> None:
    """A read that found every row in the shape kept as text records it (config_checked); the
    next reads take the rows without evaluating the shape's expression, until a row not in it
    is written, by any connection (a trigger forgets the record). Renamed expressions (another
    version's) get their own triggers, the old ones dropped."""
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update_many([TopicConfig(f"T{i}", 8, 8) for i in range(300)])
    manager.close()

    def load_statements() -> tuple[list[str], TopicConfigManager]:
        loaded = TopicConfigManager(tmp_path, BROKER)
        statements: list[str] = []
        loaded.store._db.set_trace_callback(statements.append)
        assert loaded.load()
        loaded.close()
        return [s for s in statements if s.startswith("SELECT key") and "GLOB" in s], loaded

    # recorded when the defaults were stored; the broker's writes since kept the shape
    evaluated, loaded = load_statements()
    assert evaluated == []
    assert loaded.select("T299") == TopicConfig("T299", 8, 8)
    spaced = '{"topicName": "T7", "readQueueNums": 3}'
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:  # as the sqlite3 shell would
        db.execute("UPDATE config_rows SET value = ? WHERE key = 'T7'", (spaced,))
    evaluated, loaded = load_statements()
    assert evaluated  # checked again: the row is read the checked way
    assert loaded.select("T7") == TopicConfig("T7", 3, 16)
    evaluated, _ = load_statements()
    assert evaluated  # still there: nothing recorded
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        db.execute("DELETE FROM config_rows WHERE key = 'T7'")
        db.execute(
            "INSERT INTO config_rows VALUES ('topics', 'New', ?)",
            (
                '{"topicName":"New","readQueueNums":2,"writeQueueNums":2,"perm":6,'
                '"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}',
            ),
        )
    evaluated, _ = load_statements()
    assert evaluated  # the record was gone; all in the shape again: recorded
    evaluated, loaded = load_statements()
    assert evaluated == [] and loaded.select("New") == TopicConfig("New", 2, 2)
    # another expression: evaluated, and only its triggers left
    store = TableStore(tmp_path / TABLES_FILE)
    rows, _version, kept = store.read_split("topics", "length(key) > 0 AND value GLOB '{*'")
    assert rows == {} and {"T0", "T299", "New"} <= kept.keys()
    store.close()
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:
        triggers = [
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        ]
    assert len(triggers) == 2 and all(name.startswith("checked_topics_") for name in triggers)
    evaluated, _ = load_statements()
    assert evaluated  # the topic manager's expression: not the one recorded


def test_a_read_only_store_of_an_older_version_reads_its_rows_checked(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, BROKER)
    manager.load()
    manager.update_many([TopicConfig("A", 8, 8)])
    manager.close()
    with sqlite3.connect(tmp_path / TABLES_FILE) as db:  # as an older version left it
        for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall():
            db.execute(f'DROP TRIGGER "{name}"')
        db.execute("DROP TABLE config_checked")
    store = TableStore(tmp_path / TABLES_FILE, readonly=True)
    rows, _version, kept = store.read_split("topics", "value GLOB '{*'")
    assert rows == {} and "A" in kept
    store.close()
