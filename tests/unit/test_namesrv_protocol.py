"""Name-server headers, bodies and results: known bytes, Java-written input, round trips, errors."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.protocol import namesrv
from tidemq.client.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.protocol.namesrv import (
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    KVTable,
    NamesrvProtocolError,
    NamesrvResponseError,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicList,
    UnregisterBrokerRequestHeader,
    WritePermCount,
    body_crc32,
    parse_kv_config_response,
    parse_kv_list_response,
    parse_query_data_version_response,
    parse_register_broker_response,
    parse_route_response,
    parse_topic_list_response,
    parse_write_perm_response,
    query_data_version_request,
    register_broker_request,
    simple_request,
    topic_config_wrapper,
)
from tidemq.client.remoting import RemotingCommand, RequestCode, ResponseCode

# A registration body as RocketMQ 5.x's fastjson writes it (sorted keys, stateVersion, attributes).
JAVA_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
    b'"stateVersion":0,"timestamp":1700000000123},"topicConfigTable":{"TopicA":{"attributes":{},'
    b'"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":'
    b'"TopicA","topicSysFlag":0,"writeQueueNums":4}}}}'
)


def java_compressed(version: bytes, lines: list[bytes], filters: bytes, tail: bytes = b"") -> bytes:
    """The layout of RocketMQ's RegisterBrokerBody.encode(true), built by hand."""
    out = struct.pack(">i", len(version)) + version + struct.pack(">i", len(lines))
    for line in lines:
        out += struct.pack(">i", len(line)) + line
    out += struct.pack(">i", len(filters)) + filters + tail
    return zlib.compress(out, 9)


def response(code: int = ResponseCode.SUCCESS, body: bytes = b"", **ext: str) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC)
    return RemotingCommand.response_to(request, code, "why", ext_fields=ext, body=body)


# --- headers --------------------------------------------------------------------------------


def test_register_header_wire_keys_and_round_trip() -> None:
    header = RegisterBrokerRequestHeader("broker-a", "1.2.3.4:10911", "C", "1.2.3.4:10912", 1)
    ext = header.to_ext_fields()
    assert ext == {
        "brokerName": "broker-a",
        "brokerAddr": "1.2.3.4:10911",
        "clusterName": "C",
        "haServerAddr": "1.2.3.4:10912",
        "brokerId": "1",
        "compressed": "false",
        "bodyCrc32": "0",
    }
    assert RegisterBrokerRequestHeader.from_ext_fields(ext) == header


def test_optional_keys_default_and_extra_keys_are_ignored() -> None:
    java = {
        "brokerName": "b",
        "brokerAddr": "a:1",
        "clusterName": "c",
        "haServerAddr": "a:2",
        "brokerId": "0",
        "enableActingMaster": "false",  # 5.x
        "heartbeatTimeoutMillis": "30000",  # 5.x
    }
    header = RegisterBrokerRequestHeader.from_ext_fields(java)
    assert (header.compressed, header.body_crc32) == (False, 0)
    delete = DeleteTopicFromNamesrvRequestHeader("T")
    assert delete.to_ext_fields() == {"topic": "T"}
    assert DeleteTopicFromNamesrvRequestHeader.from_ext_fields({"topic": "T"}) == delete
    both = DeleteTopicFromNamesrvRequestHeader.from_ext_fields({"topic": "T", "clusterName": "C"})
    assert both.cluster_name == "C"


@pytest.mark.parametrize(("text", "value"), [("true", True), ("TRUE", True), ("yes", False)])
def test_booleans_read_as_java_parse_boolean(text: str, value: bool) -> None:
    ext = {"brokerName": "b", "brokerAddr": "a", "clusterName": "c", "haServerAddr": "h"}
    header = RegisterBrokerRequestHeader.from_ext_fields(
        {**ext, "brokerId": "0", "compressed": text}
    )
    assert header.compressed is value


def test_missing_and_malformed_keys_are_named() -> None:
    with pytest.raises(
        NamesrvProtocolError, match="GetRouteInfoRequestHeader: extFields lack topic"
    ):
        GetRouteInfoRequestHeader.from_ext_fields({})
    ext = {"brokerName": "b", "brokerAddr": "a", "clusterName": "c", "brokerId": "zero"}
    with pytest.raises(NamesrvProtocolError, match="brokerId: expected an integer, got 'zero'"):
        UnregisterBrokerRequestHeader.from_ext_fields(ext)
    with pytest.raises(NamesrvProtocolError, match="lack value"):
        PutKVConfigRequestHeader.from_ext_fields({"namespace": "n", "key": "k"})


def test_simple_request_carries_only_the_header() -> None:
    request = simple_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("T"))
    assert (request.code, request.ext_fields, bytes(request.body)) == (105, {"topic": "T"}, b"")
    assert simple_request(RequestCode.GET_BROKER_CLUSTER_INFO).ext_fields == {}


# --- bodies ---------------------------------------------------------------------------------


def test_body_crc32_is_rocketmqs_masked_crc() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert body_crc32(b"123456789") == 0x4BF43926
    assert body_crc32(b"") == 0


def test_a_java_written_registration_body_decodes() -> None:
    body = RegisterBrokerBody.decode(JAVA_BODY)
    wrapper = body.topic_config_wrapper
    assert wrapper.data_version == DataVersion(1700000000123, 3)
    assert wrapper.topic_config_table == {"TopicA": TopicConfig("TopicA", 8, 4, 6)}
    assert body.filter_server_list == []


def test_registration_body_json_layout_and_round_trip() -> None:
    body = RegisterBrokerBody(topic_config_wrapper([TopicConfig("T", 2, 3)], DataVersion(5, 6)))
    data = json.loads(body.encode())
    assert set(data) == {"topicConfigSerializeWrapper", "filterServerList"}
    assert data["topicConfigSerializeWrapper"]["dataVersion"] == {"timestamp": 5, "counter": 6}
    assert data["topicConfigSerializeWrapper"]["topicConfigTable"]["T"]["writeQueueNums"] == 3
    assert RegisterBrokerBody.decode(body.encode()) == body


@pytest.mark.parametrize(
    "bad",
    [b"[1]", b"{", b'{"topicConfigSerializeWrapper": 3}', b'{"filterServerList": [1]}'],
)
def test_bad_registration_bodies_are_rejected(bad: bytes) -> None:
    with pytest.raises(NamesrvProtocolError, match="RegisterBrokerBody"):
        RegisterBrokerBody.decode(bad)


def test_a_java_compressed_body_decodes() -> None:
    data = java_compressed(
        b'{"counter":9,"stateVersion":0,"timestamp":42}',
        [
            b"TopicA 8 4 6 SINGLE_TAG",
            b'TopicB 2 2 4 MULTI_TAG {"+message.type":"NORMAL"}',  # 5.x attributes
            b"TopicC 1 1 6 SINGLE_TAG ",  # 5.x with no attributes: Java's split drops the ""
        ],
        b'["10.0.0.9:1"]',
        tail=struct.pack(">i", 0),  # 5.x topic-queue mapping count
    )
    body = RegisterBrokerBody.decode(data, compressed=True)
    assert body.topic_config_wrapper.data_version == DataVersion(42, 9)
    assert body.topic_config_wrapper.topic_config_table == {
        "TopicA": TopicConfig("TopicA", 8, 4, 6),
        "TopicB": TopicConfig("TopicB", 2, 2, 4, topic_filter_type="MULTI_TAG"),
        "TopicC": TopicConfig("TopicC", 1, 1, 6),
    }
    assert body.filter_server_list == ["10.0.0.9:1"]


def test_compressed_encoding_is_the_java_layout() -> None:
    config = TopicConfig("T", 3, 2, 6, topic_sys_flag=1, order=True)
    body = RegisterBrokerBody(topic_config_wrapper([config], DataVersion(1, 2)))
    expected = java_compressed(b'{"timestamp":1,"counter":2}', [b"T 3 2 6 SINGLE_TAG"], b"[]")
    assert zlib.decompress(body.encode(compressed=True)) == zlib.decompress(expected)
    # The compressed form has no room for topicSysFlag and order (RocketMQ loses them too).
    decoded = RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True)
    assert decoded.topic_config_wrapper.topic_config_table["T"] == TopicConfig("T", 3, 2, 6)


topic_names = st.text("abcXYZ019_-%|", min_size=1, max_size=20)


@given(
    st.dictionaries(
        topic_names,
        st.tuples(st.integers(0, 1024), st.integers(0, 1024), st.integers(0, 7)),
        max_size=20,
    ),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.lists(st.text(min_size=1, max_size=10), max_size=3),
    st.booleans(),
)
def test_registration_bodies_round_trip(
    table: dict[str, tuple[int, int, int]],
    timestamp: int,
    counter: int,
    filters: list[str],
    compressed: bool,
) -> None:
    configs = {name: TopicConfig(name, r, w, p) for name, (r, w, p) in table.items()}
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper(configs, DataVersion(timestamp, counter)), filters
    )
    assert RegisterBrokerBody.decode(body.encode(compressed), compressed) == body


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not zlib", "is not zlib"),
        (zlib.compress(struct.pack(">i", 100) + b"{}"), "dataVersion needs 100 bytes"),
        (java_compressed(b"{}", [b"T 1 1"], b"[]"), "is not 'name r w perm type'"),
        (java_compressed(b"{}", [b"T 1 x 6 SINGLE_TAG"], b"[]"), "has a bad number"),
        (java_compressed(b"{}", [b"T 1 1 6 NO_TAG"], b"[]"), "is not 'name r w perm type'"),
        (java_compressed(b"[]", [], b"[]"), "expected a JSON object"),
        (java_compressed(b"{}", [], b"{}"), "expected a list of strings"),
        (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 5)), "topic config 0"),
    ],
)
def test_bad_compressed_bodies_are_rejected(data: bytes, match: str) -> None:
    with pytest.raises(NamesrvProtocolError, match=match):
        RegisterBrokerBody.decode(data, compressed=True)


def test_a_compressed_body_inflating_past_the_limit_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(namesrv, "MAX_DECOMPRESSED_BODY", 1000)
    data = java_compressed(b"{}", [b"T 1 1 6 SINGLE_TAG"] * 100, b"[]")
    with pytest.raises(NamesrvProtocolError, match="more than 1000 bytes"):
        RegisterBrokerBody.decode(data, compressed=True)


def test_topic_list_and_kv_table_layouts() -> None:
    assert TopicList(["a", "b"]).encode() == b'{"topicList":["a","b"],"brokerAddr":null}'
    assert TopicList.decode(b'{"topicList":["x"]}') == TopicList(["x"], None)
    assert TopicList.decode(b'{"brokerAddr":"h:1","topicList":[]}') == TopicList([], "h:1")
    assert KVTable({"k": "v"}).encode() == b'{"table":{"k":"v"}}'
    assert KVTable.decode(b'{"table":{"k":"v"}}') == KVTable({"k": "v"})
    with pytest.raises(NamesrvProtocolError, match="KVTable"):
        KVTable.decode(b'{"table":[]}')


# --- requests and responses -----------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True])
def test_register_request_fills_the_crc_of_the_body_as_sent(compressed: bool) -> None:
    body = RegisterBrokerBody(topic_config_wrapper([TopicConfig("T", 1, 1)]))
    request = register_broker_request(
        broker_name="b",
        broker_addr="a:1",
        cluster_name="c",
        ha_server_addr="a:2",
        broker_id=0,
        body=body,
        compressed=compressed,
    )
    header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
    assert request.code == RequestCode.REGISTER_BROKER
    assert header.compressed is compressed
    assert header.body_crc32 == body_crc32(request.body) != 0
    assert RegisterBrokerBody.decode(request.body, compressed) == body


def test_query_data_version_request_and_response() -> None:
    header = QueryDataVersionRequestHeader("b", "a:1", "c", 0)
    request = query_data_version_request(header, DataVersion(3, 4))
    assert json.loads(bytes(request.body)) == {"timestamp": 3, "counter": 4}
    assert request.ext_fields["brokerAddr"] == "a:1"
    result = parse_query_data_version_response(
        response(body=b'{"counter":4,"timestamp":3}', changed="false")
    )
    assert (result.changed, result.data_version) == (False, DataVersion(3, 4))
    result = parse_query_data_version_response(response(changed="true"))
    assert (result.changed, result.data_version) == (True, None)


def test_register_response_parsing() -> None:
    result = parse_register_broker_response(
        response(body=b'{"table":{"T":"broker-a:4"}}', haServerAddr="h:2", masterAddr="h:1")
    )
    assert (result.ha_server_addr, result.master_addr) == ("h:2", "h:1")
    assert result.kv_table == KVTable({"T": "broker-a:4"})
    result = parse_register_broker_response(response())
    assert (result.ha_server_addr, result.master_addr, result.kv_table) == (None, None, None)


def test_error_answers_raise_with_code_and_remark() -> None:
    with pytest.raises(NamesrvResponseError, match=r"SYSTEM_ERROR \(1\): why") as caught:
        parse_register_broker_response(response(ResponseCode.SYSTEM_ERROR))
    assert (caught.value.code, caught.value.remark) == (1, "why")
    with pytest.raises(NamesrvResponseError, match="TOPIC_NOT_EXIST"):
        parse_topic_list_response(response(ResponseCode.TOPIC_NOT_EXIST))
    with pytest.raises(NamesrvResponseError, match=r"\(12345\)"):
        parse_route_response(response(12345))


def test_not_found_answers_are_none() -> None:
    assert parse_route_response(response(ResponseCode.TOPIC_NOT_EXIST)) is None
    assert parse_kv_list_response(response(ResponseCode.QUERY_NOT_FOUND)) is None
    assert parse_kv_config_response(response(ResponseCode.QUERY_NOT_FOUND)) is None
    assert parse_kv_config_response(response(value="v")) == "v"


def test_route_with_fastjson_bare_keys_parses() -> None:
    body = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"h:1",1:"h:2"},"brokerName":"b","cluster":"c"}],'
        b'"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    route = parse_route_response(response(body=body))
    assert route is not None
    assert route.broker_datas[0].broker_addrs == {0: "h:1", 1: "h:2"}
    assert route.queue_datas[0].write_queue_nums == 4


def test_write_perm_counts() -> None:
    assert parse_write_perm_response(response(wipeTopicCount="3"), WritePermCount.WIPE) == 3
    assert parse_write_perm_response(response(addTopicCount="2"), WritePermCount.ADD) == 2
    with pytest.raises(NamesrvProtocolError, match="addTopicCount"):
        parse_write_perm_response(response(addTopicCount="x"), WritePermCount.ADD)


def test_a_registration_body_read_twice_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name server's gate and its processor read each registration (the same bytes): the
    second read is answered from the first, a new body (equal or not) is decoded again."""
    decoded: list[object] = []
    original = namesrv.RegisterBrokerBody._decode.__func__  # type: ignore[attr-defined]

    def counting(cls: type[RegisterBrokerBody], body: bytes, compressed: bool) -> object:
        decoded.append(body)
        return original(cls, body, compressed)

    monkeypatch.setattr(namesrv.RegisterBrokerBody, "_decode", classmethod(counting))
    wire = RegisterBrokerBody(topic_config_wrapper([TopicConfig("T", 2, 3)], DataVersion(5, 6)))
    body = wire.encode()
    first = RegisterBrokerBody.decode(body)
    assert RegisterBrokerBody.decode(body) is first
    assert len(decoded) == 1
    again = RegisterBrokerBody.decode(bytes(bytearray(body)))  # another request's bytes
    assert again == first and again is not first
    assert RegisterBrokerBody.decode(wire.encode(compressed=True), compressed=True) == first
    assert len(decoded) == 3
