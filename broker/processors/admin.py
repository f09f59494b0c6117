"""Topic and subscription-group administration, and the tables a slave copies from its master.

UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), DELETE_SUBSCRIPTIONGROUP (207),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.managers.topic_config import validate_topic_name
from client.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    HeaderFieldError,
    decode,
)
from client.protocol.models import SubscriptionGroupConfig, TopicConfig
from client.remoting.codes import ResponseCode
from client.remoting.command import RemotingCommand
from client.remoting.connection import RemotingConnection
from client.remoting.errors import BodyDecodeError
from client.remoting.json_body import dumps, loads_fastjson

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger(__name__)


def _reply(
    request: RemotingCommand, code: int, remark: str | None = None, body: bytes = b""
) -> RemotingCommand:
    return RemotingCommand.response_to(request, code, remark, body=body)


class AdminProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def update_topic(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            header = decode(CreateTopicRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        problem = validate_topic_name(header.topic)
        if problem is None and header.topic == self.broker.config.broker_cluster_name:
            problem = f"the topic[{header.topic}] is conflict with system topic."
        if problem is not None:
            return _reply(request, ResponseCode.SYSTEM_ERROR, problem)
        config = TopicConfig(
            header.topic,
            header.read_queue_nums,
            header.write_queue_nums,
            header.perm,
            header.topic_filter_type,
            header.topic_sys_flag or 0,
            header.order,
        )
        log.info("update topic %s requested by %s", header.topic, connection.peer)
        self.broker.topics.update(config)
        return _reply(request, ResponseCode.SUCCESS)

    async def delete_topic(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            header = decode(DeleteTopicRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        log.info("delete topic %s requested by %s", header.topic, connection.peer)
        broker = self.broker
        broker.topics.delete(header.topic)
        broker.offsets.remove_topic(header.topic)
        broker.store.delete_topics({header.topic})
        return _reply(request, ResponseCode.SUCCESS)

    async def all_topics(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return _reply(
            request, ResponseCode.SUCCESS, body=dumps(self.broker.topics.wrapper().to_dict())
        )

    async def update_group(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            obj = loads_fastjson(request.body)
            if not isinstance(obj, dict):
                raise BodyDecodeError("subscription group config must be a JSON object")
            config = SubscriptionGroupConfig.from_dict(obj)
        except (BodyDecodeError, ValueError) as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, f"bad subscription group body: {exc}")
        if not config.group_name:
            return _reply(request, ResponseCode.SYSTEM_ERROR, "groupName is empty")
        log.info("update subscription group %s requested by %s", config.group_name, connection.peer)
        self.broker.groups.update(config)
        return _reply(request, ResponseCode.SUCCESS)

    async def delete_group(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            header = decode(DeleteSubscriptionGroupRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        log.info("delete subscription group %s requested by %s", header.group_name, connection.peer)
        self.broker.groups.delete(header.group_name)
        if header.clean_offset:
            self.broker.offsets.remove_group(header.group_name)
        return _reply(request, ResponseCode.SUCCESS)

    async def all_groups(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return _reply(
            request, ResponseCode.SUCCESS, body=dumps(self.broker.groups.wrapper().to_dict())
        )

    async def all_offsets(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return _reply(request, ResponseCode.SUCCESS, body=self.broker.offsets.encode_body())

    async def all_delay_offsets(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return _reply(request, ResponseCode.SUCCESS, body=self.broker.delay_offsets.encode_body())
