"""BrokerAPI writes its requests' extFields through the header schemas: RocketMQ's keys, in
RocketMQ's order, byte for byte what the hand-written dicts they replaced sent."""

from __future__ import annotations

from typing import Any

from tidemq.client.api import BrokerAPI
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.client import RemotingClient


class _Recorder(RemotingClient):
    """Answers SUCCESS (empty body, or `body`) and keeps every request it was given."""

    def __init__(self, body: bytes = b"") -> None:
        super().__init__(idle_timeout=0)
        self.requests: list[RemotingCommand] = []
        self.body = body

    async def invoke(self, address: str, request: RemotingCommand, timeout: float) -> Any:
        self.requests.append(request)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=self.body)


async def _ext_of(call: str, *args: Any, body: bytes = b"") -> tuple[int, list[tuple[str, str]]]:
    remoting = _Recorder(body)
    await getattr(BrokerAPI(remoting), call)("h:1", *args)
    (request,) = remoting.requests
    return request.code, list(request.ext_fields.items())


async def test_admin_and_query_requests_carry_rocketmq_keys_in_order() -> None:
    config = TopicConfig("T", 4, 2, 6, topic_sys_flag=1, order=True)
    assert await _ext_of("create_topic", config) == (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        [
            ("topic", "T"),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "4"),
            ("writeQueueNums", "2"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "1"),
            ("order", "true"),
        ],
    )
    assert await _ext_of("query_message", "T", "k", 32, 10, 20) == (
        RequestCode.QUERY_MESSAGE,
        [
            ("topic", "T"),
            ("key", "k"),
            ("maxNum", "32"),
            ("beginTimestamp", "10"),
            ("endTimestamp", "20"),
        ],
    )
    assert await _ext_of("delete_topic_in_broker", "T") == (
        RequestCode.DELETE_TOPIC_IN_BROKER,
        [("topic", "T")],
    )


async def test_client_requests_carry_rocketmq_keys() -> None:
    assert await _ext_of("unregister_client", "ip@1", "PG", None) == (
        RequestCode.UNREGISTER_CLIENT,
        [("clientID", "ip@1"), ("producerGroup", "PG")],
    )
    assert await _ext_of("unregister_client", "ip@1", "", "CG") == (
        RequestCode.UNREGISTER_CLIENT,
        [("clientID", "ip@1"), ("consumerGroup", "CG")],
    )
    assert await _ext_of("get_consumer_ids", "CG", body=b'{"consumerIdList":[]}') == (
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        [("consumerGroup", "CG")],
    )
    assert await _ext_of("get_route", "T", body=b'{"brokerDatas":[],"queueDatas":[]}') == (
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        [("topic", "T")],
    )
