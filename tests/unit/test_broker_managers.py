"""The broker's tables (broker/managers/): config files, topics, groups, offsets, clients.

Files that "Java wrote" are written here in fastjson's pretty format (tabs, keys sorted, bare
numeric map keys), independently of the code under test.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tidemq.broker.config import BrokerConfig
from tidemq.broker.managers import config_file
from tidemq.broker.managers.clients import (
    ClientChannelInfo,
    ConsumerGroupInfo,
    ConsumerManager,
    ProducerManager,
)
from tidemq.broker.managers.config_file import ConfigFileCorruptError
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager, parse_offset_table
from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.broker.managers.subscription_group import (
    SubscriptionGroupManager,
    SubscriptionGroupWrapper,
)
from tidemq.broker.managers.topic_config import (
    TopicChange,
    TopicConfigChanged,
    TopicConfigManager,
    is_not_allowed_send_topic,
    parse_topic_wrapper,
    validate_topic_name,
)
from tidemq.client.protocol.heartbeat import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from tidemq.client.protocol.models import (
    PERM_INHERIT,
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    DataVersion,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from tidemq.client.remoting.errors import BodyDecodeError

BROKER = BrokerConfig(broker_cluster_name="DefaultCluster", broker_name="broker-a")


def topics(
    tmp_path: Path,
    broker: BrokerConfig = BROKER,
    *,
    on_change: Callable[[TopicConfigChanged], None] | None = None,
    schedule_queue_nums: int = 18,
) -> TopicConfigManager:
    return TopicConfigManager(
        tmp_path, broker, on_change=on_change, schedule_queue_nums=schedule_queue_nums
    )


def must(config: TopicConfig | None) -> TopicConfig:
    assert config is not None
    return config


# --- config files -------------------------------------------------------------------------


class TestConfigFile:
    def test_persist_keeps_the_previous_version_as_bak(self, tmp_path: Path) -> None:
        path = tmp_path / "config" / "x.json"
        config_file.persist(path, '{"v": 1}')
        assert not (tmp_path / "config" / "x.json.bak").exists()
        config_file.persist(path, '{"v": 2}')
        assert json.loads(path.read_text()) == {"v": 2}
        assert json.loads(path.with_name("x.json.bak").read_text()) == {"v": 1}
        assert sorted(p.name for p in path.parent.iterdir()) == ["x.json", "x.json.bak"]

    def test_load_prefers_the_main_file(self, tmp_path: Path) -> None:
        path = tmp_path / "x.json"
        config_file.persist(path, "1")
        config_file.persist(path, "2")
        assert config_file.load(path, json.loads) == 2

    def test_corrupt_main_falls_back_to_bak(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        path = tmp_path / "x.json"
        config_file.persist(path, "1")
        config_file.persist(path, "2")
        path.write_text('{"torn')
        assert config_file.load(path, json.loads) == 1
        assert "unreadable" in caplog.text and "x.json.bak" in caplog.text

    def test_missing_main_falls_back_to_bak(self, tmp_path: Path) -> None:
        path = tmp_path / "x.json"
        (tmp_path / "x.json.bak").write_text("7")
        assert config_file.load(path, json.loads) == 7

    def test_empty_main_counts_as_missing(self, tmp_path: Path) -> None:
        path = tmp_path / "x.json"
        path.write_text("")
        assert config_file.load(path, json.loads) is None

    def test_neither_file_is_a_fresh_store(self, tmp_path: Path) -> None:
        assert config_file.load(tmp_path / "x.json", json.loads) is None

    def test_both_unreadable_is_an_error_not_an_empty_table(self, tmp_path: Path) -> None:
        path = tmp_path / "x.json"
        path.write_text("{")
        with pytest.raises(ConfigFileCorruptError, match="does not exist"):
            config_file.load(path, json.loads)
        (tmp_path / "x.json.bak").write_text("[")
        with pytest.raises(ConfigFileCorruptError, match=r"x\.json\.bak is unreadable"):
            config_file.load(path, json.loads)


# --- topics -------------------------------------------------------------------------------


class TestTopicSystemTopics:
    def test_created_at_start_as_rocketmq_does(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        assert set(manager.topics()) == {
            "SELF_TEST_TOPIC",
            "TBW102",
            "BenchmarkTest",
            "DefaultCluster",
            "broker-a",
            "OFFSET_MOVED_EVENT",
            "SCHEDULE_TOPIC_XXXX",
            "DefaultCluster_REPLY_TOPIC",
        }
        tbw = manager.select("TBW102")
        assert tbw is not None
        assert (tbw.read_queue_nums, tbw.write_queue_nums) == (8, 8)
        assert tbw.perm == PERM_READ | PERM_WRITE | PERM_INHERIT
        schedule = manager.select("SCHEDULE_TOPIC_XXXX")
        assert schedule is not None and schedule.write_queue_nums == 18
        cluster = manager.select("DefaultCluster")
        assert cluster is not None and cluster.perm == PERM_READ_WRITE | PERM_INHERIT

    def test_switches(self, tmp_path: Path) -> None:
        broker = replace(
            BROKER,
            auto_create_topic_enable=False,
            cluster_topic_enable=False,
            broker_topic_enable=False,
        )
        manager = topics(tmp_path, broker, schedule_queue_nums=5)
        assert manager.select("TBW102") is None
        assert must(manager.select("DefaultCluster")).perm == PERM_INHERIT
        assert must(manager.select("broker-a")).perm == PERM_INHERIT
        assert must(manager.select("SCHEDULE_TOPIC_XXXX")).read_queue_nums == 5


class TestTopicAutoCreation:
    def test_inherits_from_tbw102(self, tmp_path: Path) -> None:
        events: list[TopicConfigChanged] = []
        manager = topics(tmp_path, on_change=events.append)
        counter = manager.data_version.counter
        config = manager.create_in_send("NewTopic", "TBW102", "10.0.0.9:5000", 4, 0x1)
        assert config is not None
        assert (config.read_queue_nums, config.write_queue_nums) == (4, 4)
        assert config.perm == PERM_READ_WRITE  # INHERIT is not passed on
        assert config.topic_sys_flag == 0x1
        assert manager.select("NewTopic") is config
        assert manager.data_version.counter == counter + 1
        assert [(e.kind, e.topic) for e in events] == [(TopicChange.CREATED, "NewTopic")]
        assert events[0].data_version == manager.data_version

    def test_queue_nums_are_capped_by_the_default_topic(self, tmp_path: Path) -> None:
        config = topics(tmp_path).create_in_send("Big", "TBW102", "p", 64, 0)
        assert config is not None and config.write_queue_nums == 8

    def test_existing_topic_is_returned_unchanged(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        first = manager.create_in_send("T", "TBW102", "p", 4, 0)
        version = replace(manager.data_version)
        assert manager.create_in_send("T", "TBW102", "p", 2, 0) is first
        assert manager.data_version == version

    def test_default_topic_without_inherit_refuses(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        manager.update(TopicConfig("Plain", 4, 4, PERM_READ_WRITE))
        assert manager.create_in_send("T", "Plain", "p", 4, 0) is None
        assert manager.select("T") is None

    def test_cluster_topic_can_be_the_default_topic(self, tmp_path: Path) -> None:
        config = topics(tmp_path).create_in_send("T", "DefaultCluster", "p", 4, 0)
        assert config is not None and config.write_queue_nums == 4

    def test_refused_when_auto_creation_is_off(self, tmp_path: Path) -> None:
        manager = topics(tmp_path, replace(BROKER, auto_create_topic_enable=False))
        assert manager.create_in_send("T", "TBW102", "p", 4, 0) is None

    def test_refused_when_off_even_if_tbw102_came_from_the_file(self, tmp_path: Path) -> None:
        topics(tmp_path).load()  # stored while auto-creation was on
        manager = topics(tmp_path, replace(BROKER, auto_create_topic_enable=False))
        manager.load()
        assert manager.select("TBW102") is not None
        assert manager.create_in_send("T", "TBW102", "p", 4, 0) is None

    def test_refuses_invalid_names_and_zero_queues(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        assert manager.create_in_send("bad topic", "TBW102", "p", 4, 0) is None
        assert manager.create_in_send("T", "TBW102", "p", 0, 0) is None

    def test_retry_topic_in_send_back(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        config = manager.create_in_send_back("%RETRY%cg", 1, PERM_READ_WRITE, 0)
        assert (config.write_queue_nums, config.perm) == (1, PERM_READ_WRITE)
        assert manager.create_in_send_back("%RETRY%cg", 9, PERM_READ, 0) is config


class TestTopicValidation:
    @pytest.mark.parametrize("name", ["T", "%RETRY%cg", "a|b", "x-y_z9", "a" * 127])
    def test_valid(self, name: str) -> None:
        assert validate_topic_name(name) is None

    @pytest.mark.parametrize(
        ("name", "why"),
        [("", "blank"), ("   ", "blank"), ("a b", "illegal"), ("a@b", "illegal"),
         ("主题", "illegal"), ("a" * 128, "longer")],
    )  # fmt: skip
    def test_invalid(self, name: str, why: str) -> None:
        problem = validate_topic_name(name)
        assert problem is not None and why in problem

    def test_system_topics_are_reserved_for_users(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        for name in ("TBW102", "DefaultCluster", "broker-a", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX"):
            assert (
                manager.check_user_topic(name)
                == f"The topic[{name}] is conflict with system topic."
            )
        assert manager.check_user_topic("Orders") is None
        assert manager.check_user_topic("bad name") is not None

    def test_not_allowed_send(self) -> None:
        assert is_not_allowed_send_topic("SCHEDULE_TOPIC_XXXX")
        assert not is_not_allowed_send_topic("TBW102")


class TestTopicVersionsAndPersistence:
    def test_every_change_bumps_the_version_and_is_reported(self, tmp_path: Path) -> None:
        events: list[TopicConfigChanged] = []
        manager = topics(tmp_path, on_change=events.append)
        start = manager.data_version.counter
        manager.update(TopicConfig("A", 2, 2))
        manager.update(TopicConfig("A", 4, 4))
        assert manager.delete("A")
        assert not manager.delete("A")
        assert manager.data_version.counter == start + 3
        assert [e.kind for e in events] == [
            TopicChange.CREATED,
            TopicChange.UPDATED,
            TopicChange.DELETED,
        ]

    def test_wrapper_is_a_copy(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        wrapper = manager.wrapper()
        manager.update(TopicConfig("A"))
        assert "A" not in wrapper.topic_config_table
        assert wrapper.data_version != manager.data_version

    def test_round_trip_through_the_table_store(self, tmp_path: Path) -> None:
        manager = topics(tmp_path)
        assert not manager.load()  # a fresh store
        manager.update(TopicConfig("Orders", 3, 5, PERM_READ, order=True, topic_sys_flag=2))
        reloaded = topics(tmp_path)
        assert reloaded.load()
        assert reloaded.select("Orders") == manager.select("Orders")
        assert reloaded.data_version == manager.data_version
        assert not (tmp_path / "topics.json").exists()  # written only by an export
        manager.export()
        assert (
            "Orders"
            in parse_topic_wrapper((tmp_path / "topics.json").read_text()).topic_config_table
        )

    def test_corrupt_file_falls_back_to_bak(self, tmp_path: Path) -> None:
        manager = topics(tmp_path / "old")
        manager.update(TopicConfig("First"))
        manager.export()
        manager.update(TopicConfig("Second"))
        manager.export()
        (tmp_path / "topics.json").write_text('{"topicConfigTable": {"x": ')
        (tmp_path / "old" / "topics.json.bak").rename(tmp_path / "topics.json.bak")
        reloaded = topics(tmp_path)
        reloaded.load()
        assert reloaded.select("First") is not None
        assert reloaded.select("Second") is None  # only in the lost version

    def test_reads_a_java_written_file(self, tmp_path: Path) -> None:
        (tmp_path / "topics.json").write_text(
            '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"timestamp":1700000000000\n\t},\n'
            '\t"topicConfigTable":{\n\t\t"TopicTest":{\n\t\t\t"order":false,\n'
            '\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,\n\t\t\t"topicFilterType":'
            '"SINGLE_TAG",\n\t\t\t"topicName":"TopicTest",\n\t\t\t"topicSysFlag":0,\n'
            '\t\t\t"writeQueueNums":4\n\t\t}\n\t}\n}'
        )
        manager = topics(tmp_path)
        manager.load()
        assert manager.select("TopicTest") == TopicConfig("TopicTest", 4, 4, 6)
        assert manager.data_version == DataVersion(1700000000000, 7)
        assert manager.select("TBW102") is not None  # built-ins stay under the file

    def test_replace_all_only_when_the_version_differs(self, tmp_path: Path) -> None:
        events: list[TopicConfigChanged] = []
        slave = topics(tmp_path / "slave", on_change=events.append)
        master = topics(tmp_path / "master")
        master.update(TopicConfig("OnlyOnMaster", 2, 2))
        body = json.dumps(master.wrapper().to_dict())
        assert slave.replace_all(parse_topic_wrapper(body))
        assert slave.select("OnlyOnMaster") == TopicConfig("OnlyOnMaster", 2, 2)
        assert slave.data_version == master.data_version
        assert [e.kind for e in events] == [TopicChange.REPLACED]
        assert not slave.replace_all(parse_topic_wrapper(body))
        assert topics(tmp_path / "slave").load()  # persisted

    def test_garbage_body_from_master(self) -> None:
        with pytest.raises(BodyDecodeError):
            parse_topic_wrapper(b'{"topicConfigTable": {"T": 5}}')


# --- subscription groups ------------------------------------------------------------------


class TestSubscriptionGroups:
    SYSTEM = {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PULL",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
    }

    def test_system_groups_exist_from_the_start(self, tmp_path: Path) -> None:
        assert set(SubscriptionGroupManager(tmp_path).groups()) == self.SYSTEM

    def test_find_auto_creates_and_bumps(self, tmp_path: Path) -> None:
        manager = SubscriptionGroupManager(tmp_path)
        counter = manager.data_version.counter
        config = manager.find("cg")
        assert config == SubscriptionGroupConfig("cg")
        assert manager.find("cg") is config
        assert manager.data_version.counter == counter + 1

    def test_find_without_auto_create(self, tmp_path: Path) -> None:
        manager = SubscriptionGroupManager(tmp_path, auto_create=False)
        assert manager.find("cg") is None
        assert manager.find("CID_RMQ_SYS_TRANS") is not None  # system groups always

    def test_update_delete_and_round_trip(self, tmp_path: Path) -> None:
        manager = SubscriptionGroupManager(tmp_path)
        manager.update(SubscriptionGroupConfig("cg", retry_max_times=3, consume_enable=False))
        manager.update(SubscriptionGroupConfig("gone"))
        assert manager.delete("gone") and not manager.delete("gone")
        reloaded = SubscriptionGroupManager(tmp_path)
        assert reloaded.load()
        assert reloaded.get("cg") == SubscriptionGroupConfig(
            "cg", retry_max_times=3, consume_enable=False
        )
        assert reloaded.get("gone") is None
        assert reloaded.data_version == manager.data_version

    def test_reads_a_java_written_file(self, tmp_path: Path) -> None:
        (tmp_path / "subscriptionGroup.json").write_text(
            '{\n\t"dataVersion":{\n\t\t"counter":2,\n\t\t"timestamp":1700000000000\n\t},\n'
            '\t"subscriptionGroupTable":{\n\t\t"cg":{\n\t\t\t"brokerId":0,\n'
            '\t\t\t"consumeBroadcastEnable":true,\n\t\t\t"consumeEnable":true,\n'
            '\t\t\t"consumeFromMinEnable":true,\n\t\t\t"groupName":"cg",\n'
            '\t\t\t"notifyConsumerIdsChangedEnable":false,\n\t\t\t"retryMaxTimes":16,\n'
            '\t\t\t"retryQueueNums":1,\n\t\t\t"whichBrokerWhenConsumeSlowly":1\n\t\t}\n\t}\n}'
        )
        manager = SubscriptionGroupManager(tmp_path)
        manager.load()
        config = manager.get("cg")
        assert config is not None and config.notify_consumer_ids_changed_enable is False
        assert manager.data_version == DataVersion(1700000000000, 2)

    def test_replace_all(self, tmp_path: Path) -> None:
        master = SubscriptionGroupManager(tmp_path / "m")
        master.update(SubscriptionGroupConfig("cg"))
        slave = SubscriptionGroupManager(tmp_path / "s")
        body = json.dumps(master.wrapper().to_dict())
        assert slave.replace_all(SubscriptionGroupWrapper.decode(body))
        assert slave.get("cg") is not None
        assert not slave.replace_all(SubscriptionGroupWrapper.decode(body))


# --- consumer offsets ---------------------------------------------------------------------


class TestConsumerOffsets:
    def test_commit_and_query(self, tmp_path: Path) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        assert offsets.query("cg", "T", 0) == -1
        offsets.commit("10.0.0.1:1", "cg", "T", 0, 12)
        offsets.commit("10.0.0.1:1", "cg", "T", 1, 3)
        offsets.commit("10.0.0.1:1", "other", "U", 0, 1)
        assert offsets.query("cg", "T", 0) == 12
        assert offsets.query("cg", "T", 2) == -1
        assert offsets.query_all("cg", "T") == {0: 12, 1: 3}
        assert offsets.groups_of_topic("T") == {"cg"}
        assert offsets.topics_of_group("other") == {"U"}

    def test_moving_back_is_allowed_but_logged(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        offsets.commit("h", "cg", "T", 0, 10)
        offsets.commit("h", "cg", "T", 0, 4)
        assert offsets.query("cg", "T", 0) == 4
        assert "moved back" in caplog.text

    def test_removal_and_clone(self, tmp_path: Path) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        for group, topic in [("g1", "T"), ("g1", "U"), ("g2", "T")]:
            offsets.commit("h", group, topic, 0, 5)
        assert offsets.clone("g1", "g3", "U")
        assert offsets.query("g3", "U", 0) == 5
        assert offsets.remove_topic("T") == 2
        assert offsets.remove_group("g1") == 1
        assert offsets.remove("g3", "U") and not offsets.remove("g3", "U")
        assert offsets.snapshot() == {}

    def test_offsets_past_the_end_of_their_queue_are_corrected(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        offsets.commit("h", "cg", "T", 0, 120)  # the queue lost its tail: ends at 100 now
        offsets.commit("h", "cg", "T", 1, 40)  # within its queue
        offsets.commit("h", "cg", "U", 0, 7)  # a queue the store no longer has
        offsets.persist()
        ends = {("T", 0): 100, ("T", 1): 50}
        assert offsets.correct_past_end(lambda topic, queue: ends.get((topic, queue), 0)) == 2
        assert offsets.snapshot() == {"T@cg": {0: 100, 1: 40}, "U@cg": {0: 0}}
        assert "committed 120, the queue ends at 100" in caplog.text
        # The corrections are changes of their rows: persisted, they survive a restart.
        offsets.persist()
        reloaded = ConsumerOffsetManager(tmp_path)
        assert reloaded.load()
        assert reloaded.snapshot() == {"T@cg": {0: 100, 1: 40}, "U@cg": {0: 0}}

    def test_snapshot_is_a_deep_copy(self, tmp_path: Path) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        offsets.commit("h", "cg", "T", 0, 1)
        snapshot = offsets.snapshot()
        snapshot["T@cg"][0] = 99
        assert offsets.query("cg", "T", 0) == 1

    def test_round_trip_through_the_file(self, tmp_path: Path) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        offsets.commit("h", "cg", "T", 0, 12)
        offsets.commit("h", "cg", "T", 7, 3)
        offsets.persist()
        reloaded = ConsumerOffsetManager(tmp_path)
        assert reloaded.load()
        assert reloaded.snapshot() == {"T@cg": {0: 12, 7: 3}}

    def test_reads_java_bare_numeric_keys(self, tmp_path: Path) -> None:
        (tmp_path / "consumerOffset.json").write_text(
            '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":'
            '{0:250,1:251,2:249,3:250},\n\t\t"%RETRY%cg@cg":{0:0}\n\t}\n}'
        )
        offsets = ConsumerOffsetManager(tmp_path)
        offsets.load()
        assert offsets.query("please_rename_unique_group_name_4", "TopicTest", 1) == 251
        assert offsets.query("cg", "%RETRY%cg", 0) == 0

    def test_body_for_the_slave(self, tmp_path: Path) -> None:
        offsets = ConsumerOffsetManager(tmp_path)
        offsets.commit("h", "cg", "T", 3, 30)
        assert parse_offset_table(offsets.encode_body()) == {"T@cg": {3: 30}}
        with pytest.raises(BodyDecodeError):
            parse_offset_table(b'{"offsetTable": {"T@cg": [1, 2]}}')

    def test_merge_from_master_never_moves_back(self, tmp_path: Path) -> None:
        slave = ConsumerOffsetManager(tmp_path)
        # While the master was down, consumers committed to the slave (apache/rocketmq#1094).
        slave.commit("h", "cg", "T", 0, 500)
        slave.commit("h", "cg", "T", 1, 100)
        slave.commit("h", "cg", "T", 9, 7)  # a queue the master does not list
        master = {"T@cg": {0: 300, 1: 200, 2: 50}, "U@cg": {0: 1}}
        result = slave.merge_from_master(master)
        assert slave.query_all("cg", "T") == {0: 500, 1: 200, 2: 50, 9: 7}
        assert slave.query("cg", "U", 0) == 1
        assert (result.adopted, result.kept_local) == (3, 1)
        assert slave.merge_from_master(master).adopted == 0


class TestDelayOffsets:
    def test_get_update_round_trip(self, tmp_path: Path) -> None:
        table = DelayOffsetTable(tmp_path)
        assert table.get(3) == 0
        table.update(1, 100)
        table.update(3, 7)
        table.persist()
        reloaded = DelayOffsetTable(tmp_path)
        assert reloaded.load()
        assert reloaded.snapshot() == {1: 100, 3: 7}

    def test_reads_java_bare_numeric_keys(self, tmp_path: Path) -> None:
        (tmp_path / "delayOffset.json").write_text('{\n\t"offsetTable":{1:100,2:7,18:0}\n}')
        table = DelayOffsetTable(tmp_path)
        table.load()
        assert table.get(2) == 7 and table.get(18) == 0

    def test_replace_from_master_persists(self, tmp_path: Path) -> None:
        table = DelayOffsetTable(tmp_path)
        table.update(1, 5)
        table.replace({2: 9})
        reloaded = DelayOffsetTable(tmp_path)
        reloaded.load()
        assert reloaded.snapshot() == {2: 9}
        assert json.loads(table.encode_body()) == {"offsetTable": {"2": 9}}


# --- live clients -------------------------------------------------------------------------


@dataclass(eq=False)
class FakeChannel:
    """Hashable by identity, like a connection."""

    peer: str


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def sub(topic: str, expression: str = "*", version: int = 1) -> SubscriptionData:
    return SubscriptionData.from_expression(topic, expression, sub_version=version)


class ConsumerFixture:
    def __init__(self, notify_enabled: bool = True) -> None:
        self.clock = Clock()
        self.notified: list[tuple[str, list[str]]] = []
        self.manager = ConsumerManager(
            lambda group, channels: self.notified.append((group, [c.peer for c in channels])),
            notify_enabled=notify_enabled,
            clock=self.clock,
        )

    def heartbeat(
        self,
        channel: FakeChannel,
        client_id: str,
        subs: list[SubscriptionData] | None = None,
        *,
        group: str = "cg",
        is_notify: bool = True,
    ) -> bool:
        return self.manager.register_consumer(
            group,
            ClientChannelInfo(channel, client_id, "JAVA", 401),
            ConsumeType.CONSUME_PASSIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subs if subs is not None else [sub("T")],
            is_notify,
        )


class TestConsumerManager:
    def test_new_member_notifies_every_member(self) -> None:
        f = ConsumerFixture()
        a, b = FakeChannel("10.0.0.1:1"), FakeChannel("10.0.0.2:2")
        assert f.heartbeat(a, "a@1")
        assert f.heartbeat(b, "b@2")
        assert f.notified == [("cg", ["10.0.0.1:1"]), ("cg", ["10.0.0.1:1", "10.0.0.2:2"])]
        assert f.manager.get_all_client_ids("cg") == ["a@1", "b@2"]

    def test_same_member_heartbeating_again_does_not(self) -> None:
        f = ConsumerFixture()
        a = FakeChannel("a")
        f.heartbeat(a, "a@1")
        f.clock.now += 30_000
        assert not f.heartbeat(a, "a@1")
        assert len(f.notified) == 1
        info = f.manager.find_channel("cg", "a@1")
        assert info is not None and info.last_update == f.clock.now

    def test_added_or_dropped_topic_notifies(self) -> None:
        f = ConsumerFixture()
        a = FakeChannel("a")
        f.heartbeat(a, "a@1", [sub("T")])
        assert f.heartbeat(a, "a@1", [sub("T"), sub("U")])
        assert f.manager.groups_of_topic("U") == {"cg"}
        assert f.heartbeat(a, "a@1", [sub("U")])
        assert f.manager.find_subscription("cg", "T") is None
        assert len(f.notified) == 3

    def test_new_expression_is_stored_without_notifying(self) -> None:
        f = ConsumerFixture()
        a = FakeChannel("a")
        f.heartbeat(a, "a@1", [sub("T", "A", version=1)])
        assert not f.heartbeat(a, "a@1", [sub("T", "B", version=2)])
        stored = f.manager.find_subscription("cg", "T")
        assert stored is not None and stored.tags_set == ["B"]
        assert not f.heartbeat(a, "a@1", [sub("T", "C", version=1)])  # older: ignored
        stored = f.manager.find_subscription("cg", "T")
        assert stored is not None and stored.tags_set == ["B"]
        assert len(f.notified) == 1

    def test_group_or_broker_may_disable_notification(self) -> None:
        f = ConsumerFixture()
        assert f.heartbeat(FakeChannel("a"), "a@1", is_notify=False)
        assert f.notified == []
        g = ConsumerFixture(notify_enabled=False)
        g.heartbeat(FakeChannel("a"), "a@1")
        g.manager.do_channel_close_event(FakeChannel("nobody"))
        assert g.notified == []

    def test_unregister_notifies_the_rest(self) -> None:
        f = ConsumerFixture()
        a, b = FakeChannel("a"), FakeChannel("b")
        f.heartbeat(a, "a@1")
        f.heartbeat(b, "b@1")
        f.notified.clear()
        assert f.manager.unregister_consumer("cg", a, is_notify=True)
        assert not f.manager.unregister_consumer("cg", a, is_notify=True)
        assert f.notified == [("cg", ["b"])]

    def test_channel_close_notifies_and_removes_empty_groups(self) -> None:
        f = ConsumerFixture()
        a, b = FakeChannel("a"), FakeChannel("b")
        f.heartbeat(a, "a@1", group="g1")
        f.heartbeat(b, "b@1", group="g1")
        f.heartbeat(a, "a@1", group="g2")
        f.notified.clear()
        assert sorted(f.manager.do_channel_close_event(a)) == ["g1", "g2"]
        assert f.notified == [("g1", ["b"])]  # g2 has nobody left to tell
        assert f.manager.groups() == ["g1"]

    def test_idle_expiry_removes_without_notifying(self, caplog: pytest.LogCaptureFixture) -> None:
        f = ConsumerFixture()
        a, b = FakeChannel("a"), FakeChannel("b")
        f.heartbeat(a, "a@1")
        f.clock.now += 100_000
        f.heartbeat(b, "b@1")
        f.notified.clear()
        f.clock.now += 30_000  # a: 130 s silent, b: 30 s
        expired = f.manager.scan_not_active()
        assert [(e.group, e.info.client_id) for e in expired] == [("cg", "a@1")]
        assert expired[0].info.channel is a
        assert f.notified == []
        assert f.manager.get_all_client_ids("cg") == ["b@1"]
        assert "SCAN: removed consumer a@1" in caplog.text
        assert f.manager.scan_not_active(now=f.clock.now + 200_000)[0].info.client_id == "b@1"
        assert f.manager.groups() == []

    def test_duplicate_client_id_is_a_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        f = ConsumerFixture()
        f.heartbeat(FakeChannel("10.0.0.1:1"), "172.17.0.2@1")
        assert "is used by" not in caplog.text
        f.heartbeat(FakeChannel("10.0.0.2:2"), "172.17.0.2@1")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "172.17.0.2@1" in warnings[0].message and "10.0.0.1:1" in warnings[0].message

    def test_connection_view_for_admin(self) -> None:
        f = ConsumerFixture()
        f.heartbeat(FakeChannel("10.0.0.1:1"), "a@1", [sub("T", "X")])
        view = f.manager.consumer_connection("cg")
        assert view is not None
        assert view.to_dict()["connectionSet"] == [
            {"clientId": "a@1", "clientAddr": "10.0.0.1:1", "language": "JAVA", "version": 401}
        ]
        assert view.to_dict()["subscriptionTable"]["T"]["tagsSet"] == ["X"]
        assert f.manager.consumer_connection("nobody") is None

    def test_a_closed_channel_costs_its_groups_not_every_group(self) -> None:
        """1,000 groups; a closing channel that is in two of them looks at those two only
        (the groups' dict is not walked: a walk would meet the poisoned lookup below)."""
        f = ConsumerFixture()
        members = [FakeChannel(f"c{i}") for i in range(1000)]
        for i, channel in enumerate(members):
            f.heartbeat(channel, f"c{i}@1", group=f"g{i}")
        a = FakeChannel("a")
        f.heartbeat(a, "a@1", group="g7")
        f.heartbeat(a, "a@1", group="g9")
        f.manager.unregister_consumer("g9", a, is_notify=False)
        f.heartbeat(a, "a@1", group="g11")
        f.clock.now += 200_000
        f.heartbeat(members[5], "c5@1", group="g5")
        f.manager.scan_not_active()  # expires everyone but c5, a too
        f.heartbeat(a, "a@1", group="g5")
        f.heartbeat(a, "a@1", group="g3")
        f.notified.clear()

        class Walked(dict[str, ConsumerGroupInfo]):
            def items(self) -> Any:
                raise AssertionError("every group walked")

        f.manager._groups = Walked(f.manager._groups)
        assert f.manager.do_channel_close_event(a) == ["g5", "g3"]
        assert f.notified == [("g5", ["c5"])]
        assert f.manager.do_channel_close_event(a) == []


class TestProducerManager:
    def test_a_closed_channel_costs_its_groups_not_every_group(self) -> None:
        producers = ProducerManager()
        channels = [FakeChannel(f"p{i}") for i in range(1000)]
        for i, channel in enumerate(channels):
            producers.register_producer(f"pg{i}", ClientChannelInfo(channel, f"p{i}@1", "J", 1))
        a = FakeChannel("a")
        for group in ("pg1", "pg2", "pg3"):
            producers.register_producer(group, ClientChannelInfo(a, "a@1", "J", 1))
        assert producers.unregister_producer("pg2", a)

        class Walked(dict[str, dict[Any, ClientChannelInfo]]):
            def items(self) -> Any:
                raise AssertionError("every group walked")

        producers._groups = Walked(producers._groups)
        assert producers.do_channel_close_event(a) == ["pg1", "pg3"]
        assert producers.find_channel("a@1") is None
        assert producers.do_channel_close_event(channels[1]) == ["pg1"]
        assert "pg1" not in producers.groups()

    def test_register_find_and_close(self) -> None:
        clock = Clock()
        producers = ProducerManager(clock=clock)
        a, b = FakeChannel("a"), FakeChannel("b")
        assert producers.register_producer("pg", ClientChannelInfo(a, "a@1"))
        assert not producers.register_producer("pg", ClientChannelInfo(a, "a@1"))
        producers.register_producer("pg", ClientChannelInfo(b, "b@1"))
        assert producers.find_channel("b@1") is b
        view = producers.producer_connection("pg")
        assert view is not None and [c.client_id for c in view.connections] == ["a@1", "b@1"]
        assert producers.do_channel_close_event(a) == ["pg"]
        assert producers.find_channel("a@1") is None
        assert producers.unregister_producer("pg", b)
        assert producers.groups() == []

    def test_scan_expires_silent_producers(self) -> None:
        clock = Clock()
        producers = ProducerManager(clock=clock)
        producers.register_producer("pg", ClientChannelInfo(FakeChannel("a"), "a@1"))
        assert producers.scan_not_active(now=clock.now + 120_000) == []
        expired = producers.scan_not_active(now=clock.now + 120_001)
        assert [e.info.client_id for e in expired] == ["a@1"]
        assert producers.find_channel("a@1") is None

    def test_available_channel_round_robin_skips_unusable(self) -> None:
        producers = ProducerManager()
        channels = [FakeChannel(str(i)) for i in range(3)]
        for i, channel in enumerate(channels):
            producers.register_producer("pg", ClientChannelInfo(channel, f"c{i}"))
        picks = {producers.get_available_channel("pg") for _ in range(3)}
        assert picks == set(channels)
        only_two = producers.get_available_channel("pg", lambda c: c is channels[2])
        assert only_two is channels[2]
        assert producers.get_available_channel("pg", lambda c: False) in channels
        assert producers.get_available_channel("nobody") is None


def test_topic_wrapper_type_is_the_registration_body(tmp_path: Path) -> None:
    wrapper = topics(tmp_path).wrapper()
    assert isinstance(wrapper, TopicConfigSerializeWrapper)
    assert set(wrapper.to_dict()) == {"topicConfigTable", "dataVersion"}
