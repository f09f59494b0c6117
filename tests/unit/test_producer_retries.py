"""The producer retries what the error tree marks `retriable` (client/errors.py), and nothing
else: RocketMQ 4.x's retryResponseCodes, SYSTEM_BUSY and FLOW_CONTROL, and remoting failures.
A fake client instance answers each send attempt in turn; no socket."""

from __future__ import annotations

from typing import Any

import pytest

from tidemq.client.errors import BrokerResponseError, RequestTimeoutError
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.routing import TopicPublishInfo

QUEUES = [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-b", 0)]


class _Api:
    def __init__(self, answers: list[BaseException | None]) -> None:
        self.answers = answers
        self.sent = 0

    async def send_templated(
        self, address: str, template: Any, queue: MessageQueue, msg_id: str, *_: Any, **__: Any
    ) -> SendResult:
        answer = self.answers[self.sent]
        self.sent += 1
        if answer is not None:
            raise answer
        return SendResult(SendStatus.SEND_OK, msg_id, "id", queue, 7)


class _Instance:
    def __init__(self, api: _Api) -> None:
        self.api = api
        self.publish_infos: dict[str, TopicPublishInfo] = {}  # none known: publish_info asked

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        return TopicPublishInfo(topic, QUEUES)

    def find_broker_address_in_publish(self, broker_name: str) -> str:
        return f"{broker_name}:10911"

    async def update_route(self, topic: str) -> None:
        pass

    async def refresh_route_after_failure(self, topic: str) -> None:
        pass


def _producer(answers: list[BaseException | None]) -> tuple[AsyncProducer, _Api]:
    producer = AsyncProducer("g", "127.0.0.1:1", retry_times=2)
    api = _Api(answers)
    producer._instance = _Instance(api)  # type: ignore[assignment]
    return producer, api


def _refused(code: int) -> BrokerResponseError:
    return BrokerResponseError.for_code(code, "no")


RETRIED = [
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION,
    ResponseCode.NO_BUYER_ID,
    ResponseCode.NOT_IN_CURRENT_UNIT,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.FLOW_CONTROL,
]


@pytest.mark.parametrize("code", RETRIED)
async def test_a_retriable_refusal_is_retried_on_another_attempt(code: int) -> None:
    producer, api = _producer([_refused(code), None])
    assert _refused(code).retriable
    result = await producer.send(Message("T", b"x"))
    assert (api.sent, result.queue_offset) == (2, 7)


async def test_a_remoting_failure_is_retried() -> None:
    producer, api = _producer([RequestTimeoutError("late"), None])
    await producer.send(Message("T", b"x"))
    assert api.sent == 2


@pytest.mark.parametrize(
    "code", [ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, 9999]
)
async def test_a_refusal_the_tree_does_not_mark_retriable_is_raised_at_once(code: int) -> None:
    producer, api = _producer([_refused(code), None])
    assert not _refused(code).retriable
    with pytest.raises(BrokerResponseError) as caught:
        await producer.send(Message("T", b"x"))
    assert (api.sent, caught.value.code) == (1, code)
