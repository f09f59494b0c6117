"""The name gate (broker/name_gate.py) and the store's path guard (store/common/files.py
path_inside): every served code that carries a name is gated, hostile names are refused naming
the field, and no name, however it arrives, makes a store path outside its root."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig
from tidemq.broker.name_gate import (
    BROKER_HEADER_NAMES,
    NAMESRV_HEADER_NAMES,
    NameGate,
)
from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.processor import NamesrvProcessor
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.broker.remoting.server import RemotingServer, RequestRejected
from tidemq.client.protocol.heartbeat import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    ProducerData,
    SubscriptionData,
)
from tidemq.client.protocol.models import TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.protocol.names import NameKind, name_problem
from tidemq.client.protocol.namesrv import RegisterBrokerBody
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.json_body import dumps
from tidemq.common.errors import ConfigError, StorePathError
from tidemq.common.files import path_inside
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import ConsumeQueue

# Served codes whose processors read no name that becomes a path, a file, a table key or a
# topic: lookups of the whole table, statistics, configuration (checked by its own schema).
BROKER_NAMELESS = {
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_BROKER_HA_STATUS,
    RequestCode.GET_TIMER_CHECK_POINT,
    RequestCode.GET_TIMER_METRICS,
    RequestCode.GET_GRPC_CLIENT_LIST,
    RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.GET_BROKER_CONFIG,
    RequestCode.VIEW_MESSAGE_BY_ID,
    RequestCode.CHECK_CLIENT_CONFIG,
    RequestCode.GET_BROKER_CONSUME_STATS,
    # statsKey is looked up in the in-memory statistics only (nothing is created by it)
    RequestCode.VIEW_BROKER_STATS_DATA,
}
NAMESRV_NAMELESS = {
    # Lookups of routes: RocketMQ answers TOPIC_NOT_EXIST for any unknown name, and so do we.
    RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.GET_BROKER_CLUSTER_INFO,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    RequestCode.GET_TOPICS_BY_CLUSTER,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
    RequestCode.GET_UNIT_TOPIC_LIST,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    RequestCode.GET_NAMESRV_CONFIG,
    RequestCode.UPDATE_NAMESRV_CONFIG,
}

HOSTILE = [
    "../x",
    "..",
    ".",
    "/etc",
    "a/b",
    "a\0b",
    "",
    " ",
    "a\nb",
    "tópico",
    "x" * 300,
    "%DLQ%../../x",
]


def broker_codes(tmp_path: Path) -> set[int]:
    broker = Broker(BrokerConfig(), StoreConfig(store_path_root_dir=str(tmp_path)))
    return set(broker.server.processors)


def namesrv_codes(tmp_path: Path) -> set[int]:
    processor = NamesrvProcessor(RouteInfoManager(), KvConfigStore())
    return set(processor.processors())


def test_every_code_the_broker_serves_is_gated_or_listed_as_nameless(tmp_path: Path) -> None:
    gate = NameGate.for_broker()
    served = broker_codes(tmp_path)
    ungated = {code for code in served if not gate.covers(code)} - BROKER_NAMELESS
    assert not ungated, sorted(ungated)
    assert not BROKER_NAMELESS - served, "a nameless code the broker no longer serves"


def test_every_code_the_name_server_serves_is_gated_or_listed_as_nameless(
    tmp_path: Path,
) -> None:
    gate = NameGate.for_namesrv()
    served = namesrv_codes(tmp_path)
    ungated = {code for code in served if not gate.covers(code)} - NAMESRV_NAMELESS
    assert not ungated, sorted(ungated)


def test_the_broker_and_the_name_server_have_their_gates(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(), StoreConfig(store_path_root_dir=str(tmp_path)))
    assert isinstance(broker.server.gate, NameGate)


def refused(gate: NameGate, request: RemotingCommand) -> str:
    with pytest.raises(RequestRejected) as caught:
        gate.check(request)
    assert caught.value.code == ResponseCode.SYSTEM_ERROR
    return caught.value.remark


def good_ext(fields: tuple[tuple[str, NameKind, bool], ...]) -> dict[str, str]:
    good = {
        NameKind.TOPIC: "T",
        NameKind.GROUP: "G",
        NameKind.CONSUMER_GROUP: "G",
        NameKind.KV: "ns",
        NameKind.BROKER: "broker-a",
    }
    return {key: good[kind] for key, kind, _ in fields}


@pytest.mark.parametrize(
    ("code", "fields"),
    [*BROKER_HEADER_NAMES.items(), *NAMESRV_HEADER_NAMES.items()],
)
def test_each_header_name_is_refused_naming_its_field(
    code: int, fields: tuple[tuple[str, NameKind, bool], ...]
) -> None:
    gate = NameGate(BROKER_HEADER_NAMES | NAMESRV_HEADER_NAMES, {})
    gate.check(RemotingCommand.request(code, good_ext(fields)))  # the good names pass
    for key, _, optional in fields:
        for value in HOSTILE:
            if optional and value == "":
                continue  # an optional field may be empty: it stands for "none"
            ext = good_ext(fields) | {key: value}
            remark = refused(gate, RemotingCommand.request(code, ext))
            assert remark.startswith(f"{key}: "), remark


def test_a_value_that_is_not_a_string_is_refused() -> None:
    gate = NameGate.for_broker()
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"})
    request.ext_fields["consumerGroup"] = ["../x"]  # type: ignore[assignment]
    assert refused(gate, request) == "consumerGroup: not a string: list"


def test_a_consumer_group_whose_retry_topic_is_no_topic_is_refused() -> None:
    gate = NameGate.for_broker()
    longest = "g" * (127 - len("%RETRY%"))
    ext = {"group": longest, "offset": "0", "delayLevel": "0"}
    gate.check(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext))
    ext["group"] = longest + "g"
    remark = refused(gate, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext))
    assert "retry topic" in remark
    # a producer group may be longer: nothing is derived from it
    ext = {"producerGroup": "p" * 255, "topic": "T"}
    gate.check(RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, ext))


def heartbeat(producer: str = "P", consumer: str = "C", topic: str = "T") -> bytes:
    subscription = SubscriptionData.from_expression(topic, "*")
    data = HeartbeatData(
        "client-1",
        [ProducerData(producer)],
        [ConsumerData(consumer, subscriptions=[subscription])],
    )
    return data.encode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (heartbeat(producer="../p"), "producerDataSet.groupName"),
        (heartbeat(consumer="a\0b"), "consumerDataSet.groupName"),
        (heartbeat(topic="/etc"), "subscriptionDataSet.topic"),
    ],
)
def test_heartbeat_names_are_gated(body: bytes, field: str) -> None:
    gate = NameGate.for_broker()
    gate.check(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat()))
    remark = refused(gate, RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
    assert remark.startswith(field + ": "), remark


def test_lock_batch_and_subscription_group_bodies_are_gated() -> None:
    gate = NameGate.for_broker()
    lock = LockBatchRequestBody("../g", "client", [MessageQueue("T", "b", 0)]).encode()
    assert refused(gate, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=lock))
    lock = LockBatchRequestBody("g", "client", [MessageQueue("../t", "b", 0)]).encode()
    remark = refused(gate, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=lock))
    assert remark.startswith("mqSet.topic: ")
    group = dumps({"groupName": "../g", "retryQueueNums": 1})
    code = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
    assert refused(gate, RemotingCommand.request(code, body=group)).startswith("groupName: ")
    # a body the gate cannot read is left to the processor, which names why
    gate.check(RemotingCommand.request(code, body=b"not json"))
    # ... but the names read before the part it cannot read are checked (found in review)
    groups = dumps({"groupConfigList": [{"groupName": "../g"}, {"retryMaxTimes": 1}]})
    code = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST
    remark = refused(gate, RemotingCommand.request(code, body=groups))
    assert remark.startswith("groupConfigList.groupName: ")


def test_registered_topics_are_gated() -> None:
    gate = NameGate.for_namesrv()
    ext = {"brokerName": "broker-a", "clusterName": "DefaultCluster"}
    table = {"../t": TopicConfig("../t")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table)).encode()
    remark = refused(gate, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body=body))
    assert remark.startswith("topicConfigTable: ")
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T")})).encode()
    gate.check(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body=body))
    # Found in review: the name server stores an entry under its topicName, which the gate
    # did not read (only the map's key).
    table = {"T": TopicConfig("../t")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table)).encode()
    remark = refused(gate, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body=body))
    assert remark.startswith("topicConfigTable.topicName: ")


def test_a_registration_part_is_checked_at_once_and_a_bad_name_in_it_still_refused() -> None:
    gate = NameGate.for_namesrv()
    ext = {"brokerName": "broker-a", "clusterName": "DefaultCluster"}

    def request(table: dict[str, TopicConfig]) -> RemotingCommand:
        body = RegisterBrokerBody(TopicConfigSerializeWrapper(table)).encode()
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body=body)

    good = {f"T{i}": TopicConfig(f"T{i}") for i in range(800)} | {"host.name": TopicConfig("")}
    gate.check(request(good))
    for bad, field in (
        ({"a\nb": TopicConfig("a\nb")}, "topicConfigTable: "),  # two names if joined
        ({"..": TopicConfig("..")}, "topicConfigTable: "),
        ({"x" * 256: TopicConfig("x" * 256)}, "topicConfigTable: "),
        ({"T5": TopicConfig("../t")}, "topicConfigTable.topicName: "),
    ):
        assert refused(gate, request(good | bad)).startswith(field), bad


async def refuse_all(connection: object, request: RemotingCommand) -> RemotingCommand:
    raise AssertionError("the processor must not run")


def test_the_server_answers_a_gated_request_without_running_its_processor() -> None:
    server = RemotingServer("127.0.0.1", 0)
    server.gate = NameGate.for_broker()
    server.register(RequestCode.DELETE_TOPIC_IN_BROKER, refuse_all)  # type: ignore[arg-type]
    request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "../../x"})
    response = asyncio.run(server.dispatch(None, request))  # type: ignore[arg-type]
    assert response is not None
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and response.remark.startswith("topic: ")


# --- the store's guard ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [
        ("..",),
        ("../x",),
        (".",),
        ("",),
        ("/etc",),
        ("a/../../b",),
        ("a\0b",),
        ("topic", ".."),
        ("topic", "../0"),
    ],
)
def test_path_inside_refuses_every_route_out_of_its_root(tmp_path: Path, names: tuple[str]) -> None:
    with pytest.raises(StorePathError):
        path_inside(tmp_path / "consumequeue", *names)


@pytest.mark.parametrize("topic", ["../escaped", "/abs", "..", "a\0b", "%DLQ%../../x"])
def test_a_consume_queue_is_never_made_outside_its_root(tmp_path: Path, topic: str) -> None:
    root = tmp_path / "store" / "consumequeue"
    with pytest.raises(StorePathError):
        ConsumeQueue(root, topic, 0, 20 * 100)
    assert not any(tmp_path.iterdir())


def test_deleting_a_topic_never_leaves_the_store(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "0").mkdir(parents=True)
    from tidemq.store.message_store import MessageStore

    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store")))
    for topic in ("../../victim", str(victim), ".."):
        with pytest.raises(StorePathError):
            store.delete_topics({topic})
    assert (victim / "0").is_dir()


@given(st.text(min_size=1, max_size=140))
def test_any_name_the_gate_accepts_is_one_segment_inside_the_root(name: str) -> None:
    root = Path("/store/consumequeue")
    for kind in NameKind:
        if name_problem(kind, name) is None:
            assert path_inside(root, name, "0").parent.parent == root


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [
        ("brokerName", "broker_name", "../b"),
        ("brokerName", "broker_name", "b\0"),
        ("brokerClusterName", "broker_cluster_name", "a/b"),
        ("msgTraceTopicName", "msg_trace_topic_name", "trace.topic"),
    ],
)
def test_a_name_the_name_servers_would_refuse_stops_start_up(
    key: str, field: str, value: str
) -> None:
    config = dataclasses.replace(BrokerConfig(trace_topic_enable=True), **{field: value})
    with pytest.raises(ConfigError, match=f"^{key}: "):
        config.validate()
    # a host name with dots is a broker name (RocketMQ's default brokerName is the host's)
    dataclasses.replace(BrokerConfig(), broker_name="host.example.com").validate()
