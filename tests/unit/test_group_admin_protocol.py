"""The group and statistics admin bodies (client/protocol/group_admin.py), the broker's stats
windows behind VIEW_BROKER_STATS_DATA, a consumer's rates behind consumerStatus, and how mqadmin
tells the two message ids apart."""

from __future__ import annotations

import pytest

from tidemq.broker.stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, BrokerStats, StatsWindows
from tidemq.client.admin.api import offset_message_address
from tidemq.client.admin.cli.base import camel_data
from tidemq.client.consumer.consume_stats import ConsumeStatsRecorder
from tidemq.client.errors import ClientError
from tidemq.client.protocol.admin import ConsumeStats, MapForm, OffsetWrapper
from tidemq.client.protocol.group_admin import (
    BrokerStatsData,
    BrokerStatsItem,
    CloneGroupOffsetRequestHeader,
    ConsumerRunningInfo,
    ConsumeStatsList,
    ConsumeStatus,
    GetConsumerRunningInfoRequestHeader,
    ProcessQueueInfo,
)
from tidemq.client.protocol.headers import decode, encode
from tidemq.client.protocol.heartbeat import MessageQueue, SubscriptionData
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.store.record import pack_host

MQ0, MQ1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
CPP0, CPP1 = MessageQueue("CppT", "broker-a", 0), MessageQueue("CppT", "broker-a", 1)


def test_headers_use_rocketmq_field_names() -> None:
    clone = CloneGroupOffsetRequestHeader("g1", "g2", "T", True)
    assert encode(clone) == {"srcGroup": "g1", "destGroup": "g2", "topic": "T", "offline": "true"}
    assert decode(CloneGroupOffsetRequestHeader, encode(clone)) == clone
    running = GetConsumerRunningInfoRequestHeader("g", "10.0.0.1@1", False)
    assert encode(running) == {
        "consumerGroup": "g",
        "clientId": "10.0.0.1@1",
        "jstackEnable": "false",
    }


def test_consume_stats_list_round_trip_and_fastjson_form() -> None:
    stats = ConsumeStats({MQ0: OffsetWrapper(10, 7, 123), MQ1: OffsetWrapper(5, 5, 0)}, 1.5)
    body = ConsumeStatsList("127.0.0.1:10911", 3, [("g1", [stats]), ("g2", [])])
    back = ConsumeStatsList.decode(body.encode())
    assert (back.broker_addr, back.total_diff) == ("127.0.0.1:10911", 3)
    assert [g for g, _ in back.groups] == ["g1", "g2"]
    assert back.groups[0][1][0].offset_table == stats.offset_table
    java = body.encode(MapForm.FASTJSON).decode()
    assert '"consumeStatsList":[{"g1":[{"offsetTable":{{"brokerName":"broker-a"' in java
    with pytest.raises(BodyDecodeError):
        ConsumeStatsList.decode(b'{"consumeStatsList": {"g1": 1}}')


def test_broker_stats_data_round_trip_and_24_hour_sum() -> None:
    data = BrokerStatsData(BrokerStatsItem(3, 0.05, 1.0), BrokerStatsItem(9, 0.0025, 1.5))
    back = BrokerStatsData.decode(data.encode())
    assert back == data
    assert back.sum_24h() == 9  # no day yet: the hour's, as RocketMQ's compute24HourSum
    assert BrokerStatsData().sum_24h() == 0
    with pytest.raises(BodyDecodeError):
        BrokerStatsData.decode(b'{"statsMinute": {"sum": "lots"}}')


def test_consumer_running_info_round_trip() -> None:
    info = ConsumerRunningInfo(
        {"consumerGroup": "g", "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
        [SubscriptionData.from_expression("T", "A || B")],
        {MQ0: ProcessQueueInfo(commit_offset=7, cached_msg_count=2, locked=True, droped=False)},
        {"T": ConsumeStatus(pull_rt=1.5, consume_ok_tps=20.0, consume_failed_msgs=1)},
    )
    text = info.encode().decode()
    assert '"cachedMsgSizeInMiB":0' in text and '"droped":false' in text
    assert '"consumeOKTPS":20.0' in text and '"pullRT":1.5' in text
    back = ConsumerRunningInfo.decode(text.encode())
    assert back.properties == info.properties
    assert back.mq_table == info.mq_table
    assert back.status_table == info.status_table
    assert [s.tags_set for s in back.subscription_set] == [["A", "B"]]
    assert "{" + '"brokerName":"broker-a"' in info.encode(MapForm.FASTJSON).decode()
    with pytest.raises(BodyDecodeError):
        ConsumerRunningInfo.decode(b'{"subscriptionSet": "T"}')


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_stats_windows_count_the_last_minute_hour_and_day() -> None:
    stats, clock = BrokerStats(), Clock()
    windows = StatsWindows(stats, clock)
    assert not windows.known(TOPIC_PUT_NUMS, "T")
    stats.on_put("T", 4, 400)  # one request of 4 messages
    stats.on_get("g", "T", 2, 200)
    clock.now += 10
    windows.sample()
    minute = windows.window(TOPIC_PUT_NUMS, "T", "minute")
    assert (minute.sum, minute.tps, minute.avgpt) == (4, 0.4, 4.0)
    assert windows.window(GROUP_GET_NUMS, "T@g", "day").sum == 2
    for _ in range(7):  # a minute and more later: the minute window has moved past the put
        clock.now += 10
        windows.sample()
    assert windows.window(TOPIC_PUT_NUMS, "T", "minute").sum == 0
    assert windows.window(TOPIC_PUT_NUMS, "T", "hour").sum == 4
    stats.on_put("T", 1, 100)
    assert windows.window(TOPIC_PUT_NUMS, "T", "minute").sum == 1
    assert windows.window(TOPIC_PUT_NUMS, "T", "day").sum == 5
    assert windows.known(GROUP_GET_NUMS, "T@g") and not windows.known(GROUP_GET_NUMS, "T@h")


def test_offset_message_id_names_a_store_host_and_a_client_id_does_not() -> None:
    offset_id = (pack_host("127.0.0.1", 10911) + (1234).to_bytes(8, "big")).hex().upper()
    assert offset_message_address(offset_id) == ("127.0.0.1:10911", 1234)
    # A client msgId: [ip][pid 0x1234][random 0xABCD...][time][counter], the same 32 digits;
    # pid and random bytes stand where the port would be (it was an OverflowError).
    client_id = "7F000001" + "1234" + "ABCD0001" + "00A0B0C0" + "0001"
    assert len(client_id) == len(offset_id) == 32
    assert offset_message_address(client_id) is None
    for bad, reason in (("xyz", "hex digits"), ("ABCD", "32 or 56"), ("", "32 or 56")):
        with pytest.raises(ClientError, match=reason):
            offset_message_address(bad)


def test_camel_data_gives_one_key_style() -> None:
    info = ProcessQueueInfo(commit_offset=3)
    data = camel_data({"broker_name": "a", "queue_infos": [info]})
    assert data["brokerName"] == "a"
    assert data["queueInfos"][0]["commitOffset"] == 3


def test_consume_stats_recorder_rates_over_the_last_minute_and_failures_over_the_hour() -> None:
    clock = Clock()
    recorder = ConsumeStatsRecorder(clock)
    clock.now += 10
    recorder.pull_answered("T", 0.004)
    recorder.pulled("T", 8)
    recorder.consumed("T", 0.016, 6, 2)
    status = recorder.status()["T"]
    assert status.pull_rt == pytest.approx(4.0)
    assert status.pull_tps == pytest.approx(0.8)  # 8 messages in the consumer's 10 s
    assert status.consume_rt == pytest.approx(2.0)  # 16 ms over 8 messages
    assert (status.consume_ok_tps, status.consume_failed_tps) == (0.6, 0.2)
    assert status.consume_failed_msgs == 2
    for _ in range(9):  # 90 s later, nothing new: the minute is quiet, the hour still counts
        clock.now += 10
        recorder.pulled("T", 0)
    later = recorder.status()["T"]
    assert (later.pull_tps, later.consume_ok_tps, later.pull_rt) == (0.0, 0.0, 0.0)
    assert later.consume_failed_msgs == 2


# What the RocketMQ C++ client (rocketmq==0.4.4) answers GET_CONSUMER_RUNNING_INFO with: fastjson
# object keys, numbers as strings, pretty-printed, a misspelt "flase".
CPP_RUNNING_INFO = b"""{"mqTable":{{
   "brokerName" : "broker-a",
   "queueId" : 0,
   "topic" : "CppT"
}:{
   "cachedMsgCount" : 0,
   "cachedMsgMaxOffset" : "0",
   "commitOffset" : "12",
   "droped" : false,
   "lastPullTimestamp" : "8242823450249751407",
   "locked" : false,
   "tryUnlockTimes" : 0
}
,{
   "brokerName" : "broker-a",
   "queueId" : 1,
   "topic" : "CppT"
}:{
   "cachedMsgCount" : 2,
   "commitOffset" : "3",
   "droped" : false
}
},"jstack":"","properties":{"PROP_CLIENT_VERSION":"V3_1_8","PROP_CONSUMEORDERLY":"flase",
"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY","note":"{\\"a\\":1}:x"},
"subscriptionSet":[{"subString":"*","subVersion":"1795725890801","topic":"CppT"}]}"""


def test_fastjson_queue_keys_are_read_as_the_cpp_client_writes_them() -> None:
    info = ConsumerRunningInfo.decode(CPP_RUNNING_INFO)
    assert {mq: pq.commit_offset for mq, pq in info.mq_table.items()} == {CPP0: 12, CPP1: 3}
    assert info.mq_table[CPP1].cached_msg_count == 2
    assert info.properties["note"] == '{"a":1}:x'  # string contents are never rewritten
    assert [s.topic for s in info.subscription_set] == ["CppT"]
    stats = ConsumeStats({MQ0: OffsetWrapper(10, 7, 123), MQ1: OffsetWrapper(5, 5, 0)}, 1.5)
    assert ConsumeStats.decode(stats.encode(MapForm.FASTJSON)).offset_table == stats.offset_table
    with pytest.raises(BodyDecodeError):
        ConsumerRunningInfo.decode(b'{"mqTable":{{"nope":1}:{}}}')
