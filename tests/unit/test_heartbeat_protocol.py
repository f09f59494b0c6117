"""Heartbeat, consumer-list, lock and connection bodies (client/protocol/heartbeat.py).

The sample bodies are written the way each peer writes them: Java's fastjson (keys sorted,
numbers as numbers, every field present) and the RocketMQ C++ client behind the `rocketmq`
0.4.4 Python wheel (jsoncpp's FastWriter: keys sorted, a trailing newline, `subVersion` as a
string, `codeSet` holding `atoi(tag)`, empty sets and 5.x fields left out).
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.protocol.heartbeat import (
    SUB_ALL,
    Connection,
    ConsumeFromWhere,
    ConsumerConnection,
    ConsumerData,
    ConsumeType,
    ExpressionType,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    ProducerConnection,
    ProducerData,
    SubscriptionData,
    UnlockBatchRequestBody,
    decode_heartbeat,
)
from tidemq.client.remoting.errors import BodyDecodeError

# String.hashCode() values worked out by hand: "A" = 65, "B" = 66,
# "TagA" = 84*31^3 + 97*31^2 + 103*31 + 65, "TagB" = the same + 1.
HASH_A, HASH_B, HASH_TAG_A, HASH_TAG_B = 65, 66, 2598919, 2598920

JAVA_HEARTBEAT = (
    '{"clientID":"10.0.0.5@12345#78901234","consumerDataSet":[{"consumeFromWhere":'
    '"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cg",'
    '"messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,'
    '"codeSet":[65,66],"expressionType":"TAG","subString":"A || B","subVersion":1700000000000,'
    '"tagsSet":["A","B"],"topic":"TopicTest"},{"classFilterMode":false,"codeSet":[],'
    '"expressionType":"TAG","subString":"*","subVersion":1700000000001,"tagsSet":[],'
    '"topic":"%RETRY%cg"}],"unitMode":false}],"producerDataSet":[{"groupName":'
    '"CLIENT_INNER_PRODUCER"},{"groupName":"pg"}]}'
)

CPP_HEARTBEAT = (
    '{"clientID":"127.0.0.1@4321","consumerDataSet":[{"consumeFromWhere":'
    '"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cpp_group",'
    '"messageModel":"CLUSTERING","subscriptionDataSet":[{"codeSet":[0,0],'
    '"subString":"TagA || TagB","subVersion":"1700000000123","tagsSet":["TagA","TagB"],'
    '"topic":"T"},{"subString":"*","subVersion":"1700000000124","topic":"U"}]}]}\n'
)


class TestJavaHeartbeat:
    def test_parses_every_field(self) -> None:
        hb = HeartbeatData.decode(JAVA_HEARTBEAT.encode())
        assert hb.client_id == "10.0.0.5@12345#78901234"
        assert [p.group_name for p in hb.producers] == ["CLIENT_INNER_PRODUCER", "pg"]
        (consumer,) = hb.consumers
        assert consumer.group_name == "cg"
        assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
        assert consumer.message_model is MessageModel.CLUSTERING
        assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        tagged, retry = consumer.subscriptions
        assert (tagged.topic, tagged.sub_string) == ("TopicTest", "A || B")
        assert tagged.tags_set == ["A", "B"]
        assert tagged.code_set == [HASH_A, HASH_B]
        assert tagged.sub_version == 1700000000000
        assert tagged.expression_type is ExpressionType.TAG
        assert retry.subscribes_all and retry.tags_set == []

    def test_encodes_what_java_writes(self) -> None:
        hb = HeartbeatData.decode(JAVA_HEARTBEAT)
        assert json.loads(hb.encode()) == json.loads(JAVA_HEARTBEAT)


class TestCppHeartbeat:
    def test_tolerates_missing_fields_and_string_numbers(self) -> None:
        hb = HeartbeatData.decode(CPP_HEARTBEAT.encode())
        assert hb.client_id == "127.0.0.1@4321"
        assert hb.producers == []
        (consumer,) = hb.consumers
        assert consumer.unit_mode is False
        tagged, everything = consumer.subscriptions
        assert tagged.sub_version == 1700000000123
        assert tagged.expression_type is ExpressionType.TAG
        assert tagged.class_filter_mode is False
        assert everything.subscribes_all
        assert (everything.tags_set, everything.code_set) == ([], [])

    def test_code_set_is_recomputed_from_tags(self) -> None:
        # The C++ client sends atoi(tag) = 0; the broker filters by String.hashCode.
        tagged = HeartbeatData.decode(CPP_HEARTBEAT).consumers[0].subscriptions[0]
        assert tagged.code_set == [HASH_TAG_A, HASH_TAG_B]

    def test_producer_only_client(self) -> None:
        hb = HeartbeatData.decode('{"clientID":"h@1","producerDataSet":[{"groupName":"pg"}]}\n')
        assert [p.group_name for p in hb.producers] == ["pg"]
        assert hb.consumers == []

    def test_enum_ordinals_from_older_clients(self) -> None:
        body = {
            "clientID": "c",
            "consumerDataSet": [
                {
                    "groupName": "g",
                    "consumeType": 0,
                    "messageModel": "0",
                    "consumeFromWhere": 4,
                    "subscriptionDataSet": [{"topic": "T", "subString": "x||y"}],
                }
            ],
        }
        (consumer,) = HeartbeatData.decode(json.dumps(body)).consumers
        assert consumer.consume_type is ConsumeType.CONSUME_ACTIVELY
        assert consumer.message_model is MessageModel.BROADCASTING
        assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        # No tagsSet at all: the tags come from the expression.
        assert consumer.subscriptions[0].tags_set == ["x", "y"]

    def test_missing_enums_take_push_consumer_defaults(self) -> None:
        (consumer,) = HeartbeatData.decode('{"consumerDataSet":[{"groupName":"g"}]}').consumers
        assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
        assert consumer.message_model is MessageModel.CLUSTERING
        assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"not json",
        b'{"consumerDataSet":[{"groupName":"g","messageModel":"SOMETIMES"}]}',
        b'{"consumerDataSet":[{"groupName":"g","consumeType":7}]}',
        b'{"consumerDataSet":[{"groupName":"g","consumeType":-1}]}',
        b'{"consumerDataSet":"nope"}',
        b'{"consumerDataSet":[{"subscriptionDataSet":[{"topic":"T","subVersion":"soon"}]}]}',
    ],
)
def test_malformed_heartbeat_is_a_body_error(body: bytes) -> None:
    with pytest.raises(BodyDecodeError):
        HeartbeatData.decode(body)


class TestSubscriptionFromExpression:
    def test_tags_and_java_hash_codes(self) -> None:
        sub = SubscriptionData.from_expression("T", "TagA || TagB", sub_version=5)
        assert (sub.tags_set, sub.code_set) == (["TagA", "TagB"], [HASH_TAG_A, HASH_TAG_B])
        assert sub.sub_string == "TagA || TagB" and sub.sub_version == 5

    @pytest.mark.parametrize("expression", [None, "", "*"])
    def test_everything(self, expression: str | None) -> None:
        sub = SubscriptionData.from_expression("T", expression)
        assert sub.sub_string == SUB_ALL and sub.tags_set == [] and sub.code_set == []

    def test_trims_like_java_and_drops_repeats_and_empties(self) -> None:
        sub = SubscriptionData.from_expression("T", " A ||B|| ||A\t")
        assert sub.tags_set == ["A", "B"]

    def test_single_bar_is_not_a_separator(self) -> None:
        assert SubscriptionData.from_expression("T", "A | B").tags_set == ["A | B"]

    def test_no_tag_at_all_is_refused(self) -> None:
        with pytest.raises(ValueError, match="names no tag"):
            SubscriptionData.from_expression("T", " || ")

    def test_sql92_keeps_the_expression(self) -> None:
        sub = SubscriptionData.from_expression("T", "a > 1", ExpressionType.SQL92)
        assert sub.expression_type is ExpressionType.SQL92 and sub.tags_set == []
        with pytest.raises(ValueError):
            SubscriptionData.from_expression("T", "", ExpressionType.SQL92)

    def test_default_version_is_now_in_ms(self) -> None:
        assert SubscriptionData.from_expression("T", "*").sub_version > 1_600_000_000_000


@given(
    tags=st.lists(st.text(alphabet="abcXYZ09_-", min_size=1, max_size=8), min_size=1),
    version=st.integers(min_value=0, max_value=2**62),
)
def test_subscription_round_trip(tags: list[str], version: int) -> None:
    sub = SubscriptionData.from_expression("T", " || ".join(tags), sub_version=version)
    assert SubscriptionData.from_dict(json.loads(json.dumps(sub.to_dict()))) == sub


class TestLockBodies:
    CPP_LOCK = (
        '{"clientId":"127.0.0.1@4321","consumerGroup":"og","mqSet":[{"brokerName":"broker-a",'
        '"queueId":1,"topic":"T"},{"brokerName":"broker-a","queueId":0,"topic":"T"},'
        '{"brokerName":"broker-a","queueId":1,"topic":"T"}]}\n'
    )

    def test_cpp_lock_request_collapses_repeats(self) -> None:
        request = LockBatchRequestBody.decode(self.CPP_LOCK)
        assert (request.consumer_group, request.client_id) == ("og", "127.0.0.1@4321")
        assert request.mq_set == [
            MessageQueue("T", "broker-a", 1),
            MessageQueue("T", "broker-a", 0),
        ]
        assert request.only_this_broker is False
        assert "onlyThisBroker" not in request.to_dict()

    def test_unlock_request_has_the_same_shape(self) -> None:
        request = UnlockBatchRequestBody.decode(self.CPP_LOCK)
        assert isinstance(request, UnlockBatchRequestBody)
        assert len(request.mq_set) == 2
        again = UnlockBatchRequestBody.decode(request.encode())
        assert again == request

    def test_lock_response_round_trip(self) -> None:
        response = LockBatchResponseBody([MessageQueue("T", "b", 3)])
        assert json.loads(response.encode()) == {
            "lockOKMQSet": [{"topic": "T", "brokerName": "b", "queueId": 3}]
        }
        assert LockBatchResponseBody.decode(response.encode()) == response

    def test_message_queues_sort_as_java(self) -> None:
        queues = [MessageQueue("T", "b", 1), MessageQueue("S", "z", 9), MessageQueue("T", "a", 2)]
        assert sorted(queues) == [queues[1], queues[2], queues[0]]


def test_consumer_list_body() -> None:
    body = GetConsumerListByGroupResponseBody(["b@1", "a@2"])
    assert json.loads(body.encode()) == {"consumerIdList": ["b@1", "a@2"]}
    assert GetConsumerListByGroupResponseBody.decode(body.encode()) == body


def test_connection_bodies_round_trip() -> None:
    connection = Connection("c@1", "10.0.0.1:5555", "CPP", 401)
    consumer = ConsumerConnection(
        [connection],
        {"T": SubscriptionData.from_expression("T", "A", sub_version=1)},
        ConsumeType.CONSUME_ACTIVELY,
        MessageModel.BROADCASTING,
        ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
    )
    as_json = json.loads(json.dumps(consumer.to_dict()))
    assert as_json["connectionSet"][0] == {
        "clientId": "c@1",
        "clientAddr": "10.0.0.1:5555",
        "language": "CPP",
        "version": 401,
    }
    assert ConsumerConnection.from_dict(as_json) == consumer
    producer = ProducerConnection([connection])
    assert ProducerConnection.from_dict(producer.to_dict()) == producer


def test_a_heartbeat_body_seen_before_is_not_decoded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker's name gate, ACL validator and processor read every heartbeat, and a client
    sends the same body every 30 s: `decode_heartbeat` decodes each distinct body once."""
    decoded: list[object] = []
    original = HeartbeatData.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type[HeartbeatData], obj: dict[str, object]) -> HeartbeatData:
        decoded.append(obj)
        return original(cls, obj)  # type: ignore[no-any-return]

    monkeypatch.setattr(HeartbeatData, "from_dict", classmethod(counting))
    data = HeartbeatData(
        f"10.0.0.1@{uuid.uuid4()}",  # a body no earlier test made
        [ProducerData("pg")],
        [ConsumerData("cg", subscriptions=[SubscriptionData("T", sub_version=7)])],
    )
    body = data.encode()
    first = decode_heartbeat(body)
    assert first == data
    assert decode_heartbeat(bytes(body)) is first  # equal bytes, another object: kept
    assert len(decoded) == 1
    assert decode_heartbeat(bytearray(body)) == data  # not bytes: decoded each time
    assert len(decoded) == 2
