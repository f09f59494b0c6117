"""mqadmin's parsing and output, every subcommand, against a fake AdminClient (no sockets)."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
from click.testing import CliRunner

from tidemq.client.admin.api import BrokerAddress, MessageTrack, TrackType
from tidemq.client.admin.cli import base
from tidemq.client.admin.cli import main as mqadmin
from tidemq.client.api import PullResult, PullStatus, SendResponse
from tidemq.client.errors import BrokerResponseError, ConnectError
from tidemq.client.message import SendStatus
from tidemq.client.protocol.admin import (
    ConsumeStats,
    HAClientRuntimeInfo,
    HAConnectionRuntimeInfo,
    HARuntimeInfo,
    OffsetWrapper,
    TopicOffset,
    TopicStatsTable,
)
from tidemq.client.protocol.group_admin import (
    ConsumerRunningInfo,
    ConsumeStatsList,
    ProcessQueueInfo,
)
from tidemq.client.protocol.heartbeat import (
    Connection,
    ConsumerConnection,
    MessageQueue,
    ProducerConnection,
    SubscriptionData,
)
from tidemq.client.protocol.models import (
    BrokerData,
    ClusterInfo,
    QueueData,
    SubscriptionGroupConfig,
    TopicRouteData,
)
from tidemq.client.protocol.operators5 import GrpcClientInfo, PopQueueProgress
from tidemq.client.remoting.codes import version_desc
from tidemq.store.layout import FLAG_COMPRESSED
from tidemq.store.record import StoredMessage

A, AS, B = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
RUNTIME = {
    "brokerVersionDesc": "V4_9_4",
    "putTps": "12.50 10.00 9.00",
    "getTransferedTps": "3.00 2.00 1.00",
    "sendThreadPoolQueueSize": "0",
    "sendThreadPoolQueueHeadWaitTimeMills": "0",
    "pullThreadPoolQueueSize": "0",
    "pullThreadPoolQueueHeadWaitTimeMills": "0",
    "pageCacheLockTimeMills": "0",
    "earliestMessageTimeStamp": "0",
    "commitLogDiskRatio": "0.25",
    "brokerActive": "true",
    "msgPutTotalTodayNow": "100",
    "msgGetTotalTodayNow": "40",
    "msgPutTotalTodayMorning": "10",
    "msgGetTotalTodayMorning": "5",
    "msgPutTotalYesterdayMorning": "0",
    "msgGetTotalYesterdayMorning": "0",
}


def stored(
    topic: str = "T", queue_id: int = 0, offset: int = 7, body: bytes = b"hello", sys_flag: int = 0
) -> StoredMessage:
    return StoredMessage(
        total_size=100,
        body_crc=0,
        queue_id=queue_id,
        flag=0,
        queue_offset=offset,
        physical_offset=1234,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000,
        born_host=("10.0.0.9", 5555),
        store_timestamp=1_700_000_000_100,
        store_host=("10.0.0.1", 10911),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic=topic,
        properties={"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "UNIQ1"},
    )


class FakeAdmin:
    """Canned answers; `calls` records (method, args) of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail: Exception | None = None

    def __getattr__(self, name: str) -> Any:
        if name not in ANSWERS:
            raise AttributeError(name)
        answers = ANSWERS[name]

        async def method(*args: Any) -> Any:
            self.calls.append((name, args))
            if self.fail is not None:
                raise self.fail
            return answers(*args) if callable(answers) else answers

        return method

    async def close(self) -> None:
        pass


ROUTE = TopicRouteData(
    queue_datas=[QueueData("broker-a", 2, 2, 6), QueueData("broker-b", 2, 2, 6)],
    broker_datas=[
        BrokerData("DefaultCluster", "broker-a", {0: A, 1: AS}),
        BrokerData("DefaultCluster", "broker-b", {0: B}),
    ],
)
BROKERS = [
    BrokerAddress("DefaultCluster", "broker-a", 0, A),
    BrokerAddress("DefaultCluster", "broker-a", 1, AS),
    BrokerAddress("DefaultCluster", "broker-b", 0, B),
]
MQ_A0 = MessageQueue("T", "broker-a", 0)
MQ_B1 = MessageQueue("T", "broker-b", 1)
CONN = Connection("10.0.0.9@1#2", "10.0.0.9:5555", "PYTHON", 401)

ANSWERS: dict[str, Any] = {
    "examine_grpc_clients": [],  # no 5.x client: the 4.x outputs as RocketMQ prints them
    "examine_pop_progress": [],
    "brokers": lambda cluster=None: BROKERS,
    "masters": lambda cluster=None: [b for b in BROKERS if b.broker_id == 0],
    "cluster_info": ClusterInfo(
        {b.broker_name: b for b in ROUTE.broker_datas}, {"DefaultCluster": {"broker-a", "broker-b"}}
    ),
    "runtime_info": lambda address: dict(RUNTIME),
    "ha_status": lambda address: (
        HARuntimeInfo(
            master=True,
            master_commit_log_max_offset=5000,
            in_sync_slave_nums=1,
            ha_connection_info=[
                HAConnectionRuntimeInfo("10.0.0.2:40000", 4000, 1000, True, 2048, 4000)
            ],
        )
        if address != AS
        else HARuntimeInfo(
            False, ha_client_runtime_info=HAClientRuntimeInfo(A, 4000, 0, 0, 0, 0, 1234)
        )
    ),
    "broker_config": lambda address: {"brokerName": "broker-a", "listenPort": "10911"},
    "update_broker_config": None,
    "wipe_write_perm": lambda name: [("127.0.0.1:9876", 3)],
    "add_write_perm": lambda name: [("127.0.0.1:9876", 3)],
    "create_topic": None,
    "delete_topic_in_broker": None,
    "delete_topic_in_namesrv": None,
    "topic_list": lambda cluster=None: ["%RETRY%g1", "T"],
    "topic_route": lambda topic: ROUTE,
    "topic_consumed_by": lambda address, topic: ["g1"],
    "examine_topic_stats": lambda topic: TopicStatsTable(
        {MQ_A0: TopicOffset(0, 10, 1_700_000_000_000), MQ_B1: TopicOffset(2, 5, 0)}
    ),
    "update_subscription_group": None,
    "delete_subscription_group": None,
    "examine_consume_stats": lambda group, topic="": ConsumeStats(
        {MQ_A0: OffsetWrapper(10, 7, 0), MQ_B1: OffsetWrapper(5, 5, 0)}, 1.5
    ),
    "examine_consumer_connection": lambda group: ConsumerConnection(
        [CONN], {"T": SubscriptionData.from_expression("T", "TagA || TagB")}
    ),
    "examine_producer_connection": lambda group, topic: ProducerConnection([CONN]),
    "reset_offset_by_time": lambda group, topic, ts, force: {MQ_A0: 0, MQ_B1: 2},
    "view_message": lambda msg_id: stored(),
    "find_message": lambda msg_id, topic=None: stored(),
    "message_tracks": lambda msg: [MessageTrack("g1", TrackType.CONSUMED)],
    "broker_consume_stats": lambda address, is_order=False, timeout=None: ConsumeStatsList(
        address,
        3,
        [("g1", [ConsumeStats({MQ_A0: OffsetWrapper(10, 7, 0), MQ_B1: OffsetWrapper(5, 5, 0)})])],
    ),
    "query_message": lambda topic, key, max_num, begin=0, end=None: [("broker-a", stored())],
    "pull": lambda name, topic, qid, offset, n=32, expression="*": PullResult(
        PullStatus.FOUND if offset < 8 else PullStatus.NO_NEW_MSG,
        offset + 1,
        7,
        8,
        0,
        [stored(topic, qid, offset)] if offset < 8 else [],
    ),
    "send_message": lambda msg, broker=None, qid=None: (
        broker or "broker-a",
        qid or 0,
        SendResponse(SendStatus.SEND_OK, "MSGID1", qid or 0, 3, A),
    ),
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    admin = FakeAdmin()
    monkeypatch.setattr(base, "make_admin", lambda address: admin)
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    return admin


def invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(mqadmin, list(args))
    assert result.exit_code == code, result.output
    return result.output


def header(text: str, line: int = 0) -> list[str]:
    return [c.strip() for c in text.splitlines()[line].split("#")[1:]]


def called(fake: FakeAdmin, name: str) -> tuple[Any, ...]:
    return next(args for n, args in fake.calls if n == name)


def test_every_rocketmq_subcommand_is_there() -> None:
    assert set(mqadmin.commands) == {  # type: ignore[attr-defined]
        "updateTopic", "deleteTopic", "topicList", "topicRoute", "topicStatus",
        "updateSubGroup", "deleteSubGroup", "clusterList", "brokerStatus", "haStatus",
        "consumerProgress", "consumerConnection", "producerConnection", "queryMsgById",
        "queryMsgByKey", "queryMsgByOffset", "queryMsgTraceById", "sendMessage", "consumeMessage",
        "resetOffsetByTime", "wipeWritePerm", "addWritePerm", "updateBrokerConfig",
        "getBrokerConfig", "queryMsgByUniqueKey", "printMsg", "printMsgByQueue", "statsAll",
        "brokerConsumeStats", "consumerStatus", "clusterRT", "sendMsgStatus", "topicClusterList",
        "updateTopicPerm", "cloneGroupOffset", "skipAccumulatedMessage", "getNamesrvConfig",
        "updateNamesrvConfig", "updateKvConfig", "deleteKvConfig", "help",
        # RocketMQ 5's controller-mode commands
        "getSyncStateSet", "getBrokerEpoch", "electMaster",
        # RocketMQ 5's batch creation
        "updateTopicList", "updateSubGroupList",
        # the RocketMQ 5 side: 5.x clients, POP progress, RocketMQ 5's timer metrics
        "grpcClientConnection", "popConsumerProgress", "getTimerMetrics",
    }  # fmt: skip


def test_namesrv_from_flag_then_env_then_default(
    fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(base, "make_admin", lambda address: seen.append(address) or fake)
    invoke("topicList", "-n", "h1:1;h2:2")
    monkeypatch.setenv("NAMESRV_ADDR", "env:9876")
    invoke("topicList")
    monkeypatch.delenv("NAMESRV_ADDR")
    invoke("topicList")
    assert seen == ["h1:1;h2:2", "env:9876", "127.0.0.1:9876"]


def test_failures_exit_1_with_one_line(fake: FakeAdmin) -> None:
    fake.fail = ConnectError("connect to 127.0.0.1:9876 failed: refused")
    result = CliRunner().invoke(mqadmin, ["clusterList"])
    assert result.exit_code == 1
    assert result.stderr == "mqadmin clusterList: connect to 127.0.0.1:9876 failed: refused\n"
    assert result.stdout == ""
    fake.fail = BrokerResponseError(206, "the consumer group[g] not online")
    result = CliRunner().invoke(mqadmin, ["consumerConnection", "-g", "g"])
    assert result.exit_code == 1
    assert (
        result.stderr == "mqadmin consumerConnection: the consumer group[g] not online (code 206)\n"
    )


def test_required_flags_and_either_or_are_usage_errors(fake: FakeAdmin) -> None:
    assert "Missing option '-t'" in invoke("updateTopic", "-c", "C", code=2)
    assert "give one of -b or -c" in invoke("updateTopic", "-t", "T", code=2)
    assert "give one of -b or -c" in invoke("updateTopic", "-t", "T", "-b", A, "-c", "C", code=2)
    assert "expected now" in invoke("resetOffsetByTime", "-g", "g", "-t", "T", "-s", "x", code=2)
    assert fake.calls == []


def test_cluster_list(fake: FakeAdmin) -> None:
    out = invoke("clusterList")
    assert header(out) == [
        "Cluster Name", "Broker Name", "BID", "Addr", "Version", "InTPS(LOAD)",
        "OutTPS(LOAD)", "Timer(Progress)", "PCWait(ms)", "Hour", "SPACE", "ACTIVATED",
    ]  # fmt: skip
    rows = out.splitlines()[1:]
    assert len(rows) == 3
    assert rows[0].split()[:6] == ["DefaultCluster", "broker-a", "0", A, "V4_9_4", "12.50(0,0ms)"]
    assert rows[0].split()[-2:] == ["0.2500", "true"]
    more = invoke("clusterList", "-m")
    assert header(more) == [
        "Cluster Name", "Broker Name", "InTotalYest", "OutTotalYest",
        "InTotalToday", "OutTotalToday",
    ]  # fmt: skip
    assert more.splitlines()[1].split() == ["DefaultCluster", "broker-a", "10", "5", "90", "35"]
    data = json.loads(invoke("clusterList", "--json"))
    assert [d["address"] for d in data] == [A, AS, B]


def test_broker_status(fake: FakeAdmin) -> None:
    out = invoke("brokerStatus", "-b", A)
    assert "putTps                          : 12.50 10.00 9.00" in out
    assert called(fake, "runtime_info") == (A,)
    assert json.loads(invoke("brokerStatus", "-b", A, "--json"))[A]["brokerActive"] == "true"


def test_ha_status(fake: FakeAdmin) -> None:
    out = invoke("haStatus", "-c", "DefaultCluster")
    assert out.count("#MasterAddr") == 2  # the masters only
    assert "#SlaveAddr" in out and "#TransferFromWhere" in out
    row = next(line for line in out.splitlines() if line.startswith("10.0.0.2:40000"))
    assert row.split() == ["10.0.0.2:40000", "4000", "1000", "2.00", "OK", "4000"]
    slave = invoke("haStatus", "-b", AS)
    assert f"#MasterAddr\t{A}" in slave and "#CommitLogMaxOffset\t4000" in slave
    assert "#DispatchBehindBytes\t1234" in slave


def test_broker_config(fake: FakeAdmin) -> None:
    out = invoke("getBrokerConfig", "-b", A)
    assert out.splitlines()[0] == f"============{A}============"
    assert "brokerName" + " " * 40 + "=  broker-a" in out
    assert "update broker config success" in invoke(
        "updateBrokerConfig", "-b", A, "-k", "brokerPermission", "-v", "4"
    )
    assert called(fake, "update_broker_config") == (A, {"brokerPermission": "4"})
    invoke("updateBrokerConfig", "-c", "DefaultCluster", "-k", "slaveReadEnable", "-v", "true")
    updated = [args[0] for name, args in fake.calls if name == "update_broker_config"]
    assert updated == [A, A, B]  # masters only without -a


def test_write_perm(fake: FakeAdmin) -> None:
    out = invoke("wipeWritePerm", "-b", "broker-a")
    assert out == "wipe write perm of broker[broker-a] in name server[127.0.0.1:9876] OK, 3\n"
    out = invoke("addWritePerm", "-b", "broker-a")
    assert out == "add write perm of broker[broker-a] in name server[127.0.0.1:9876] OK, 3\n"


def test_update_and_delete_topic(fake: FakeAdmin) -> None:
    out = invoke("updateTopic", "-c", "DefaultCluster", "-t", "T", "-r", "4", "-w", "2", "-p", "4")
    assert out.splitlines()[:2] == [
        f"create topic to {A} success.",
        f"create topic to {B} success.",
    ]
    assert "perm=R--" in out
    config = called(fake, "create_topic")[1]
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 2, 4)
    assert "is not one of '2', '4', '6'" in invoke(
        "updateTopic", "-b", A, "-t", "T", "-p", "5", code=2
    )
    out = invoke("deleteTopic", "-t", "T", "-c", "DefaultCluster")
    assert "delete topic [T] from cluster [DefaultCluster] success." in out
    assert called(fake, "delete_topic_in_namesrv") == ("T", "DefaultCluster")


def test_topic_list_route_status(fake: FakeAdmin) -> None:
    assert invoke("topicList") == "%RETRY%g1\nT\n"
    out = invoke("topicList", "-c")
    assert header(out) == ["Cluster Name", "Topic", "Consumer Group"]
    assert out.splitlines()[1].split() == ["DefaultCluster", "%RETRY%g1", "g1"]
    route = json.loads(invoke("topicRoute", "-t", "T"))
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": A, "1": AS}
    listed = invoke("topicRoute", "-t", "T", "-l")
    assert header(listed) == [
        "ClusterName", "BrokerName", "BrokerAddrs", "ReadQueue", "WriteQueue", "Perm",
    ]  # fmt: skip
    out = invoke("topicStatus", "-t", "T")
    assert header(out) == ["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"]
    assert out.splitlines()[2].split() == ["broker-b", "1", "2", "5"]


def test_update_sub_group_passes_broker_id_and_slow_broker(fake: FakeAdmin) -> None:
    out = invoke("updateSubGroup", "-b", A, "-g", "g1", "-i", "1", "-w", "2", "-r", "3")
    assert out.startswith(f"create subscription group to {A} success.")
    address, config = called(fake, "update_subscription_group")
    assert address == A
    assert config == SubscriptionGroupConfig(
        "g1", broker_id=1, which_broker_when_consume_slowly=2, retry_max_times=3
    )
    assert "brokerId=1, whichBrokerWhenConsumeSlowly=2" in out
    out = invoke("deleteSubGroup", "-c", "DefaultCluster", "-g", "g1", "-r")
    assert out.count("delete subscription group [g1]") == 2
    assert called(fake, "delete_subscription_group") == (A, "g1", True)


def test_consumer_progress(fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch) -> None:
    out = invoke("consumerProgress", "-g", "g1")
    assert header(out) == [
        "Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff", "LastTime",
    ]  # fmt: skip
    assert out.splitlines()[1].split()[:6] == ["T", "broker-a", "0", "10", "7", "3"]
    assert out.splitlines()[2].split()[-1] == "N/A"  # never consumed
    assert out.splitlines()[-1] == "Diff Total: 3"
    assert "Consume TPS: 1.50" in out
    assert not any(name == "examine_consumer_running_info" for name, _ in fake.calls)
    data = json.loads(invoke("consumerProgress", "-g", "g1", "--json"))
    assert data["diffTotal"] == 3 and len(data["queues"]) == 2
    groups = invoke("consumerProgress")
    assert header(groups) == ["Group", "Count", "Version", "Type", "Model", "TPS", "Diff Total"]
    assert groups.splitlines()[1].split() == ["g1", "1", "V4_9_4", "PUSH", "CLUSTERING", "1", "3"]


def test_consumer_progress_shows_who_holds_each_queue_with_s_true(
    fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As RocketMQ's -s true: the client IP (its clientId up to "@") from each connected
    client's running info; N/A for a queue no client holds."""
    monkeypatch.setitem(
        ANSWERS,
        "examine_consumer_running_info",
        lambda group, client_id, jstack=False: ConsumerRunningInfo(
            mq_table={MQ_A0: ProcessQueueInfo()}
        ),
    )
    for flags in (["-s", "true"], ["-s"]):
        out = invoke("consumerProgress", "-g", "g1", *flags)
        assert header(out)[5] == "Client IP"
        assert out.splitlines()[1].split()[5] == "10.0.0.9"
        assert out.splitlines()[2].split()[5] == "N/A"
    assert called(fake, "examine_consumer_running_info")[:2] == ("g1", CONN.client_id)
    data = json.loads(invoke("consumerProgress", "-g", "g1", "-s", "true", "--json"))
    assert [q["clientIp"] for q in data["queues"]] == ["10.0.0.9", None]
    assert "Client IP" not in invoke("consumerProgress", "-g", "g1", "-s", "false")


def test_consumer_progress_of_an_unknown_group_fails(
    fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ANSWERS, "examine_consume_stats", lambda group, topic="": ConsumeStats())
    result = CliRunner().invoke(mqadmin, ["consumerProgress", "-g", "nobody"])
    assert result.exit_code == 1
    assert result.stderr == (
        "mqadmin consumerProgress: consumer group nobody has no consume offsets on any broker "
        "(no such group, or it never consumed)\n"
    )


def test_connections(fake: FakeAdmin) -> None:
    out = invoke("consumerConnection", "-g", "g1")
    assert header(out) == ["", "ClientId", "ClientAddr", "Language", "Version"]
    assert out.splitlines()[1].split() == [
        "001",
        CONN.client_id,
        CONN.client_addr,
        "PYTHON",
        "V4_9_4",
    ]
    assert "Below is subscription:" in out and "TagA || TagB" in out
    assert "MessageModel: CLUSTERING" in out
    out = invoke("producerConnection", "-g", "pg", "-t", "T")
    assert out.splitlines()[1].split() == [
        "0001",
        CONN.client_id,
        CONN.client_addr,
        "PYTHON",
        "V4_9_4",
    ]
    assert called(fake, "examine_producer_connection") == ("pg", "T")


def test_reset_offset_by_time(fake: FakeAdmin) -> None:
    out = invoke("resetOffsetByTime", "-g", "g1", "-t", "T", "-s", "now")
    assert out.startswith("rollback consumer offset by specified group[g1], topic[T], force[true]")
    assert header(out, 1) == ["brokerName", "queueId", "offset"]
    assert out.splitlines()[3].split() == ["broker-b", "1", "2"]
    assert called(fake, "reset_offset_by_time") == ("g1", "T", -1, True)
    invoke(
        "resetOffsetByTime", "-g", "g1", "-t", "T", "-s", "2024-01-02#03:04:05:006", "-f", "false"
    )
    _, _, timestamp, force = fake.calls[-1][1]
    assert force is False and timestamp > 1_700_000_000_000


def test_message_queries(fake: FakeAdmin) -> None:
    out = invoke("queryMsgById", "-i", "0A00000100002A9F00000000000004D2")
    assert "Topic:               T" in out and "Keys:                [k1]" in out
    # As RocketMQ prints a message's properties (Java's Map.toString), not a Python dict.
    assert "Properties:          {TAGS=TagA, KEYS=k1, UNIQ_KEY=UNIQ1}" in out.splitlines()
    out = invoke("queryMsgByKey", "-t", "T", "-k", "k1")
    assert header(out) == ["Message ID", "QID", "Offset"]
    assert out.splitlines()[1].split() == ["UNIQ1", "0", "7"]
    out = invoke("queryMsgByOffset", "-t", "T", "-b", "broker-a", "-i", "1", "-o", "7")
    assert "Queue ID:            1" in out and "Message Body:        hello" in out
    out = invoke("queryMsgByOffset", "-t", "T", "-b", "broker-a", "-i", "1", "-o", "9", code=1)
    assert "no message at T/broker-a/1 offset 9" in out


COMPRESSED_TEXT = "compressed by its producer " * 200  # over 4 KiB: producers compress it


def test_compressed_bodies_are_shown_as_the_producer_gave_them(
    fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = stored(body=zlib.compress(COMPRESSED_TEXT.encode()), sys_flag=FLAG_COMPRESSED)
    monkeypatch.setitem(ANSWERS, "find_message", lambda msg_id, topic=None: packed)
    monkeypatch.setitem(ANSWERS, "query_message", lambda *args: [("broker-a", packed)])
    monkeypatch.setitem(
        ANSWERS, "pull", lambda *args: PullResult(PullStatus.FOUND, 8, 7, 8, 0, [packed])
    )
    monkeypatch.setitem(ANSWERS, "queue_offsets", lambda *args: (7, 8))
    preview = COMPRESSED_TEXT[:512] + "..."
    out = invoke("queryMsgById", "-i", "0A00000100002A9F00000000000004D2")
    assert f"Message Body:        {preview}" in out.splitlines()
    out = invoke("queryMsgByOffset", "-t", "T", "-b", "broker-a", "-i", "0", "-o", "7")
    assert f"Message Body:        {preview}" in out.splitlines()
    data = json.loads(invoke("queryMsgByKey", "-t", "T", "-k", "k1", "--json"))
    assert data[0]["body"] == preview
    out = invoke("printMsg", "-t", "T")
    assert out.splitlines()[-1].endswith(f"BODY: {COMPRESSED_TEXT}")
    assert "properties={TAGS=TagA, KEYS=k1, UNIQ_KEY=UNIQ1}]" in out.splitlines()[-1]
    # A compressed body that does not inflate is named, the other fields shown.
    damaged = stored(body=b"not zlib at all", sys_flag=FLAG_COMPRESSED)
    monkeypatch.setitem(ANSWERS, "find_message", lambda msg_id, topic=None: damaged)
    out = invoke("queryMsgById", "-i", "0A00000100002A9F00000000000004D2")
    assert "Message Body:        <compressed message body is not zlib" in out
    assert "15 bytes as stored>" in out and "Topic:               T" in out


def test_query_msg_by_key_says_when_it_stops_at_a_limit(
    fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = [("broker-a", stored(offset=i)) for i in range(64)] + [("broker-b", stored())]
    monkeypatch.setitem(ANSWERS, "query_message", lambda *args: many)
    result = CliRunner().invoke(mqadmin, ["queryMsgByKey", "-t", "T", "-k", "k1"])
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 65  # the header and -m 64 rows
    assert result.stderr == (
        "mqadmin queryMsgByKey: stopped at 64 messages (broker broker-a answered its limit of "
        "64): more may carry key k1; narrow the time with -b/-e or raise -m (at most 64 per "
        "broker)\n"
    )
    monkeypatch.setitem(ANSWERS, "query_message", lambda *args: many[:3])
    result = CliRunner().invoke(mqadmin, ["queryMsgByKey", "-t", "T", "-k", "k1", "--json"])
    assert len(json.loads(result.stdout)) == 3 and result.stderr == ""


def test_versions_by_name_as_rocketmq_s_tools_print_them() -> None:
    assert version_desc(401) == "V4_9_4"
    assert version_desc(0) == "V3_0_0_SNAPSHOT"
    assert version_desc(15) == "V3_0_0_FINAL"
    assert version_desc(413) == "V5_0_0"
    assert version_desc(611) == "V5_9_9"
    assert version_desc(612) == version_desc(10_000) == "HIGHER_VERSION"


def test_send_and_consume(fake: FakeAdmin) -> None:
    out = invoke(
        "sendMessage", "-t", "T", "-p", "hi", "-k", "k", "-c", "TagA", "-b", "broker-b", "-i", "1"
    )
    assert header(out) == ["Broker Name", "QID", "Send Result", "MsgId"]
    msg, broker, qid = called(fake, "send_message")
    assert out.splitlines()[1].split() == ["broker-b", "1", "SEND_OK", msg.properties["UNIQ_KEY"]]
    assert (msg.body, msg.tags, msg.keys, broker, qid) == (b"hi", "TagA", "k", "broker-b", 1)
    out = invoke("consumeMessage", "-t", "T", "-b", "broker-a", "-i", "0")
    assert header(out) == ["Broker Name", "QID", "Offset", "MsgId", "Tags", "Keys", "Body"]
    assert out.splitlines()[1].split() == ["broker-a", "0", "7", "UNIQ1", "TagA", "k1", "hello"]
    assert out.splitlines()[-1] == "Consumed 1 messages"


def test_json_before_the_command_and_one_key_style(fake: FakeAdmin) -> None:
    before = json.loads(invoke("--json", "clusterList"))
    after = json.loads(invoke("clusterList", "--json"))
    assert before == after
    assert set(before[0]) == {"cluster", "brokerName", "brokerId", "address", "runtime"}


def test_query_msg_by_id_passes_the_topic_and_takes_a_list(fake: FakeAdmin) -> None:
    ids = "0A00000100002A9F00000000000004D2,0A00000100002A9F00000000000004D3"
    data = json.loads(invoke("queryMsgById", "-i", ids, "-t", "T", "--json"))
    assert len(data) == 2
    assert [args for name, args in fake.calls if name == "find_message"] == [
        ("0A00000100002A9F00000000000004D2", "T"),
        ("0A00000100002A9F00000000000004D3", "T"),
    ]


def test_broker_consume_stats_filters_by_level(fake: FakeAdmin) -> None:
    out = invoke("brokerConsumeStats", "-b", A, "-l", "1", "-t", "2000")
    rows = [line.split() for line in out.splitlines()[1:] if line.startswith("T ")]
    assert rows == [["T", "g1", "broker-a", "0", "10", "7", "3", "N/A"]]
    assert out.rstrip().endswith("Diff Total: 3")
    assert called(fake, "broker_consume_stats") == (A, False, 2.0)


def test_new_commands_refuse_bad_options_before_connecting(fake: FakeAdmin) -> None:
    out = invoke("printMsg", "-t", "T", "-c", "NO-SUCH-CHARSET", code=2)
    assert "unknown charset" in out
    invoke("updateTopicPerm", "-t", "T", "-b", A, "-p", "3", code=2)
    out = invoke("updateTopicPerm", "-t", "T", "-p", "4", code=2)
    assert "give one of -b or -c" in out
    out = invoke("printMsgByQueue", "-t", "T", "-a", "broker-a", "-i", "0", "-f", "maybe", code=2)
    assert "expected true or false" in out
    assert fake.calls == []


def test_consumer_progress_and_connection_of_a_pop_group_with_5x_clients(
    fake: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group that pops gets RocketMQ 5's in-flight columns; its 5.x consumers are listed with
    the 4.x connections, language and version as their settings say."""
    popped = PopQueueProgress("g1", "T", 0, 10, 10, 3, 2, 4, broker_name="broker-a")
    monkeypatch.setitem(ANSWERS, "examine_pop_progress", lambda group, topic="": [popped])
    out = invoke("consumerProgress", "-g", "g1")
    assert header(out) == [
        "Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff",
        "Inflight", "Invisible", "Acked", "LastTime",
    ]  # fmt: skip
    assert out.splitlines()[1].split()[5:9] == ["3", "3", "2", "4"]
    assert out.splitlines()[2].split()[5:9] == ["0", "0", "0", "0"]  # broker-b: not popped
    client = GrpcClientInfo(
        "cid5", "127.0.0.1:5000", "NODE_JS", "1.0.8", "PUSH_CONSUMER", "g1", ("T",), 0, "broker-a"
    )
    monkeypatch.setitem(ANSWERS, "examine_grpc_clients", [client])
    out = invoke("consumerConnection", "-g", "g1")
    assert out.splitlines()[2].split() == ["002", "cid5", "127.0.0.1:5000", "NODE_JS", "1.0.8"]
    fake.fail = None
    monkeypatch.setitem(
        ANSWERS,
        "examine_consumer_connection",
        _raises(BrokerResponseError(206, "the consumer group[g1] not online")),
    )
    only = invoke("consumerConnection", "-g", "g1")  # 5.x clients alone: no refusal
    assert only.splitlines()[1].split()[1] == "cid5"
    assert "5.x (gRPC) consumers, POP; topics: T" in only


def _raises(error: Exception) -> Any:
    def answer(*args: Any) -> Any:
        raise error

    return answer
