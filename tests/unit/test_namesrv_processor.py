"""The name server's request handlers, called directly: no sockets, no process."""

from __future__ import annotations

import json

import pytest

from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.processor import NamesrvProcessor
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.broker.remoting.server import RemotingServer
from tidemq.client.protocol.models import DataVersion, TopicConfig
from tidemq.client.protocol.namesrv import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    AddWritePermOfBrokerRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    ExtFieldsHeader,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerBody,
    WipeWritePermOfBrokerRequestHeader,
    query_data_version_request,
    register_broker_request,
    simple_request,
    topic_config_wrapper,
)
from tidemq.client.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from tidemq.client.transport.connection import RemotingConnection

M, S = "10.0.0.1:10911", "10.0.0.2:10911"


class Namesrv:
    def __init__(self, *, order_message_enable: bool = False) -> None:
        self.now = 5_000
        self.routes = RouteInfoManager(clock=lambda: self.now)
        self.kv = KvConfigStore()
        self.processor = NamesrvProcessor(
            self.routes,
            self.kv,
            order_message_enable=order_message_enable,
            config_text=lambda: "listenPort=9876\n",
            update_config=self.update_config,
        )
        self.config_changes: list[dict[str, str]] = []
        self.connection = RemotingConnection()
        # The server's dispatch (never started: no socket) answers refusals and unknown codes.
        self.server = RemotingServer("127.0.0.1", 0, name="namesrv")
        for code, processor in self.processor.processors().items():
            self.server.register(code, processor)

    async def call(self, request: RemotingCommand) -> RemotingCommand:
        response = await self.server.dispatch(self.connection, request)
        assert response is not None
        return response

    def update_config(self, changes: dict[str, str]) -> str | None:
        if "listenPort" in changes:
            return "cannot change listenPort while the name server runs"
        self.config_changes.append(changes)
        return None

    async def simple(
        self, code: RequestCode, header: ExtFieldsHeader | None = None
    ) -> RemotingCommand:
        return await self.call(simple_request(code, header))

    async def register(
        self, addr: str, broker_id: int, topics: dict[str, int], counter: int = 1, **kw: bool
    ) -> RemotingCommand:
        body = RegisterBrokerBody(
            topic_config_wrapper(
                [TopicConfig(t, q, q) for t, q in topics.items()], DataVersion(1, counter)
            )
        )
        request = register_broker_request(
            broker_name="broker-a",
            broker_addr=addr,
            cluster_name="C1",
            ha_server_addr=addr.replace("10911", "10912"),
            broker_id=broker_id,
            body=body,
            **kw,
        )
        return await self.call(request)


@pytest.fixture
def ns() -> Namesrv:
    return Namesrv()


def body_json(response: RemotingCommand) -> object:
    return json.loads(bytes(response.body))


async def test_register_answers_the_slave_with_its_masters_addresses(ns: Namesrv) -> None:
    master = await ns.register(M, 0, {"T": 4})
    assert (master.code, master.ext_fields, bytes(master.body)) == (0, {}, b"")
    assert master.is_response
    slave = await ns.register(S, 1, {"T": 4})
    assert slave.code == ResponseCode.SUCCESS
    assert slave.ext_fields == {"haServerAddr": "10.0.0.1:10912", "masterAddr": M}


async def test_register_returns_the_order_topic_config_table(ns: Namesrv) -> None:
    ns.kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "broker-a:4")
    response = await ns.register(M, 0, {"T": 4})
    assert body_json(response) == {"table": {"T": "broker-a:4"}}


async def test_register_checks_the_crc_unless_it_is_zero(ns: Namesrv) -> None:
    body = RegisterBrokerBody(topic_config_wrapper([TopicConfig("T", 4, 4)]))
    request = register_broker_request(
        broker_name="broker-a",
        broker_addr=M,
        cluster_name="C1",
        ha_server_addr="h:2",
        broker_id=0,
        body=body,
    )
    request.ext_fields["bodyCrc32"] = "1"
    response = await ns.call(request)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert ns.routes.broker_addr_table == {}
    request.ext_fields["bodyCrc32"] = "0"  # not computed by the sender: not checked
    assert (await ns.call(request)).code == ResponseCode.SUCCESS
    assert ns.routes.get_route("T") is not None


async def test_compressed_registration(ns: Namesrv) -> None:
    assert (await ns.register(M, 0, {"T": 4}, compressed=True)).code == ResponseCode.SUCCESS
    route = ns.routes.get_route("T")
    assert route is not None and route.queue_datas[0].read_queue_nums == 4


async def test_registration_without_body_and_with_bad_input(ns: Namesrv) -> None:
    ext = {
        "brokerName": "b",
        "brokerAddr": M,
        "clusterName": "C",
        "haServerAddr": "h",
        "brokerId": "0",
    }
    ok = await ns.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext)))
    assert ok.code == ResponseCode.SUCCESS
    assert ns.routes.query_data_version(M) == DataVersion(0, 0)

    missing = {k: v for k, v in ext.items() if k != "haServerAddr"}
    response = await ns.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, missing))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and "haServerAddr" in response.remark

    garbage = RemotingCommand.request(
        RequestCode.REGISTER_BROKER, {**ext, "compressed": "true"}, b"\x00garbage"
    )
    response = await ns.call(garbage)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and "not zlib" in response.remark


async def test_route_answers_and_topic_not_exist(ns: Namesrv) -> None:
    await ns.register(M, 0, {"T": 4})
    await ns.register(S, 1, {"T": 4})
    response = await ns.simple(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("T"))
    assert response.code == ResponseCode.SUCCESS
    route = body_json(response)
    assert isinstance(route, dict)
    assert route["brokerDatas"] == [
        {"cluster": "C1", "brokerName": "broker-a", "brokerAddrs": {"0": M, "1": S}}
    ]
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    assert "orderTopicConf" not in route
    missing = await ns.simple(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("X"))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark == "No topic route info in name server for the topic: X"


@pytest.mark.parametrize("enabled", [False, True])
async def test_order_topic_conf_only_when_order_messages_are_enabled(enabled: bool) -> None:
    ns = Namesrv(order_message_enable=enabled)
    await ns.register(M, 0, {"T": 4})
    put = PutKVConfigRequestHeader(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "broker-a:4")
    assert (await ns.simple(RequestCode.PUT_KV_CONFIG, put)).code == ResponseCode.SUCCESS
    response = await ns.simple(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("T"))
    route = body_json(response)
    assert isinstance(route, dict)
    assert route.get("orderTopicConf") == ("broker-a:4" if enabled else None)


async def test_responses_keep_the_requests_serialisation(ns: Namesrv) -> None:
    request = RemotingCommand.request(
        RequestCode.GET_BROKER_CLUSTER_INFO, opaque=77, serialize_type=SerializeType.ROCKETMQ
    )
    response = await ns.call(request)
    assert (response.serialize_type, response.opaque) == (SerializeType.ROCKETMQ, 77)


async def test_cluster_info_and_topic_lists(ns: Namesrv) -> None:
    await ns.register(M, 0, {"T1": 4, "T2": 1})
    info = body_json(await ns.simple(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert info == {
        "brokerAddrTable": {
            "broker-a": {"cluster": "C1", "brokerName": "broker-a", "brokerAddrs": {"0": M}}
        },
        "clusterAddrTable": {"C1": ["broker-a"]},
    }
    everything = body_json(await ns.simple(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert everything == {"topicList": ["T1", "T2"], "brokerAddr": None}
    header = GetTopicsByClusterRequestHeader("C1")
    by_cluster = body_json(await ns.simple(RequestCode.GET_TOPICS_BY_CLUSTER, header))
    assert by_cluster == {"topicList": ["T1", "T2"], "brokerAddr": None}
    system = body_json(await ns.simple(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    assert system == {"topicList": ["C1", "broker-a"], "brokerAddr": M}
    for code in (
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    ):
        assert body_json(await ns.simple(code)) == {"topicList": [], "brokerAddr": None}


async def test_delete_topic_with_and_without_cluster(ns: Namesrv) -> None:
    await ns.register(M, 0, {"T1": 4, "T2": 4})
    for header in (
        DeleteTopicFromNamesrvRequestHeader("T1", "other"),
        DeleteTopicFromNamesrvRequestHeader("T2", ""),
    ):
        response = await ns.simple(RequestCode.DELETE_TOPIC_IN_NAMESRV, header)
        assert response.code == ResponseCode.SUCCESS
    assert set(ns.routes.topic_queue_table) == {"T1"}  # T1 is not on cluster "other"
    header = DeleteTopicFromNamesrvRequestHeader("T1", "C1")
    await ns.simple(RequestCode.DELETE_TOPIC_IN_NAMESRV, header)
    assert ns.routes.topic_queue_table == {}


async def test_unregister(ns: Namesrv) -> None:
    await ns.register(M, 0, {"T1": 4})
    ext = {"brokerName": "broker-a", "brokerAddr": M, "clusterName": "C1", "brokerId": "0"}
    response = await ns.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext))
    assert response.code == ResponseCode.SUCCESS
    assert ns.routes.broker_addr_table == {}
    again = await ns.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext))
    assert again.code == ResponseCode.SUCCESS  # idempotent, as RocketMQ


async def test_query_data_version_counts_as_a_sign_of_life_when_unchanged(ns: Namesrv) -> None:
    header = QueryDataVersionRequestHeader("broker-a", M, "C1", 0)
    unknown = await ns.call(query_data_version_request(header, DataVersion(1, 1)))
    assert (unknown.ext_fields, bytes(unknown.body)) == ({"changed": "true"}, b"")

    await ns.register(M, 0, {"T1": 4})
    ns.now += 60_000
    same = await ns.call(query_data_version_request(header, DataVersion(1, 1)))
    assert same.ext_fields == {"changed": "false"}
    assert body_json(same) == {"timestamp": 1, "counter": 1}
    assert ns.routes.broker_live_table[M].last_update_timestamp == ns.now

    ns.now += 60_000
    newer = await ns.call(query_data_version_request(header, DataVersion(1, 2)))
    assert newer.ext_fields == {"changed": "true"}
    assert ns.routes.broker_live_table[M].last_update_timestamp == ns.now - 60_000


async def test_kv_config_requests(ns: Namesrv) -> None:
    missing = await ns.simple(
        RequestCode.GET_KVLIST_BY_NAMESPACE, GetKVListByNamespaceRequestHeader("N")
    )
    assert (missing.code, missing.remark) == (
        ResponseCode.QUERY_NOT_FOUND,
        "No config item, Namespace: N",
    )
    get = GetKVConfigRequestHeader("N", "k")
    response = await ns.simple(RequestCode.GET_KV_CONFIG, get)
    assert (response.code, response.remark) == (
        ResponseCode.QUERY_NOT_FOUND,
        "No config item, Namespace: N Key: k",
    )
    await ns.simple(RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader("N", "k", "v"))
    response = await ns.simple(RequestCode.GET_KV_CONFIG, get)
    assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS, {"value": "v"})
    listed = await ns.simple(
        RequestCode.GET_KVLIST_BY_NAMESPACE, GetKVListByNamespaceRequestHeader("N")
    )
    assert body_json(listed) == {"table": {"k": "v"}}
    await ns.simple(RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader("N", "k"))
    assert (await ns.simple(RequestCode.GET_KV_CONFIG, get)).code == ResponseCode.QUERY_NOT_FOUND
    # The namespace outlives its last key, as in RocketMQ.
    listed = await ns.simple(
        RequestCode.GET_KVLIST_BY_NAMESPACE, GetKVListByNamespaceRequestHeader("N")
    )
    assert body_json(listed) == {"table": {}}
    bad = await ns.call(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "N"}))
    assert bad.code == ResponseCode.SYSTEM_ERROR


async def test_write_permission_requests(ns: Namesrv) -> None:
    await ns.register(M, 0, {"T1": 4, "T2": 4})
    wiped = await ns.simple(
        RequestCode.WIPE_WRITE_PERM_OF_BROKER, WipeWritePermOfBrokerRequestHeader("broker-a")
    )
    assert wiped.ext_fields == {"wipeTopicCount": "2"}
    route = ns.routes.get_route("T1")
    assert route is not None and route.queue_datas[0].perm == 4
    added = await ns.simple(
        RequestCode.ADD_WRITE_PERM_OF_BROKER, AddWritePermOfBrokerRequestHeader("broker-a")
    )
    assert added.ext_fields == {"addTopicCount": "2"}


async def test_config_and_unknown_codes(ns: Namesrv) -> None:
    config = await ns.simple(RequestCode.GET_NAMESRV_CONFIG)
    assert bytes(config.body) == b"listenPort=9876\n"
    unknown = await ns.call(RemotingCommand.request(RequestCode.SEND_MESSAGE))
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert RequestCode.SEND_MESSAGE not in ns.processor.processors()
    assert RequestCode.REGISTER_BROKER in ns.processor.processors()


async def test_update_config_applies_and_refuses_with_the_reason(ns: Namesrv) -> None:
    def update(body: bytes) -> RemotingCommand:
        return RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=body)

    ok = await ns.call(update(b"orderMessageEnable=true\n"))
    assert ok.code == ResponseCode.SUCCESS
    assert ns.config_changes == [{"orderMessageEnable": "true"}]
    refused = await ns.call(update(b"listenPort=1\n"))
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert refused.remark is not None and "listenPort" in refused.remark
    for bad in (b"no separator here\n", b"\xff=1"):
        answer = await ns.call(update(bad))
        assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    path = await ns.call(update(b"kvConfigPath=/tmp/kv.json\n"))
    assert (path.code, path.remark) == (ResponseCode.NO_PERMISSION, "Can not update config path")
    assert (await ns.call(update(b""))).code == ResponseCode.SUCCESS  # nothing to change
    assert ns.config_changes == [{"orderMessageEnable": "true"}]
