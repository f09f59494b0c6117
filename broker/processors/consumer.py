"""Client management: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42).

A heartbeat registers each producer and consumer group of a client on this connection; a
consumer group's retry topic `%RETRY%<group>` is created on the way, as RocketMQ does. Membership
changes reach the group's members as NOTIFY_CONSUMER_IDS_CHANGED (sent by the broker's notifier).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.managers.clients import ClientChannelInfo
from broker.processors.send import RETRY_GROUP_TOPIC_PREFIX
from client.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    HeaderFieldError,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    decode,
)
from client.protocol.heartbeat import (
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from client.protocol.models import PERM_READ, PERM_WRITE
from client.remoting.codes import RequestCode, ResponseCode
from client.remoting.command import RemotingCommand
from client.remoting.connection import RemotingConnection
from client.remoting.errors import BodyDecodeError

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger(__name__)


def _reply(request: RemotingCommand, code: int, remark: str | None = None) -> RemotingCommand:
    return RemotingCommand.response_to(request, code, remark)


class ConsumerProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # --- heartbeats -----------------------------------------------------------------------

    async def heartbeat(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            data = HeartbeatData.decode(request.body)
        except (BodyDecodeError, ValueError) as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        broker = self.broker
        language = request.language_name
        for consumer in data.consumers:
            group_config = broker.groups.find(consumer.group_name)
            if group_config is None:
                continue
            if group_config.retry_queue_nums > 0:
                broker.topics.create_in_send_back(
                    RETRY_GROUP_TOPIC_PREFIX + consumer.group_name,
                    group_config.retry_queue_nums,
                    PERM_READ | PERM_WRITE,
                    0,
                )
            info = ClientChannelInfo(connection, data.client_id, language, request.version)
            notify = (
                broker.config.notify_consumer_ids_changed_enable
                and group_config.notify_consumer_ids_changed_enable
            )
            changed = broker.consumers.register_consumer(
                consumer.group_name,
                info,
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                consumer.subscriptions,
                notify,
            )
            if changed:
                log.info(
                    "consumer group %s: client %s registered from %s",
                    consumer.group_name,
                    data.client_id,
                    connection.peer,
                )
        for producer in data.producers:
            info = ClientChannelInfo(connection, data.client_id, language, request.version)
            broker.producers.register_producer(producer.group_name, info)
        return _reply(request, ResponseCode.SUCCESS)

    async def unregister_client(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            header = decode(UnregisterClientRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        broker = self.broker
        if header.producer_group:
            broker.producers.unregister_producer(header.producer_group, connection)
        if header.consumer_group:
            group_config = broker.groups.get(header.consumer_group)
            notify = group_config is None or group_config.notify_consumer_ids_changed_enable
            broker.consumers.unregister_consumer(header.consumer_group, connection, notify)
        return _reply(request, ResponseCode.SUCCESS)

    async def consumer_list(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        try:
            header = decode(GetConsumerListByGroupRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        ids = self.broker.consumers.get_all_client_ids(header.consumer_group)
        if not ids:
            return _reply(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"no consumer for this group, {header.consumer_group}",
            )
        response = _reply(request, ResponseCode.SUCCESS)
        response.body = GetConsumerListByGroupResponseBody(ids).encode()
        return response

    # --- offsets ------------------------------------------------------------------------------

    async def query_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        try:
            header = decode(QueryConsumerOffsetRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        broker = self.broker
        offset = broker.offsets.query(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            store = broker.store
            min_offset = store.min_offset_in_queue(header.topic, header.queue_id)
            # A young queue whose first message is still in memory: start from 0 (RocketMQ).
            if min_offset <= 0 and not self._offset_on_disk(header.topic, header.queue_id, 0):
                offset = 0
        if offset < 0:
            return _reply(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        response = _reply(request, ResponseCode.SUCCESS)
        response.ext_fields = {"offset": str(offset)}
        return response

    def _offset_on_disk(self, topic: str, queue_id: int, offset: int) -> bool:
        store = self.broker.store
        phy = store.commitlog_offset_in_queue(topic, queue_id, offset)
        return store.max_phy_offset - phy > store.limits.memory_bytes

    async def update_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            header = decode(UpdateConsumerOffsetRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, str(exc))
        self.broker.offsets.commit(
            connection.peer,
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.commit_offset,
        )
        return _reply(request, ResponseCode.SUCCESS)

    # --- orderly consumption ------------------------------------------------------------------

    async def lock_batch(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        try:
            if request.code == RequestCode.LOCK_BATCH_MQ:
                body = LockBatchRequestBody.decode(request.body)
            else:
                body = UnlockBatchRequestBody.decode(request.body)
        except (BodyDecodeError, ValueError) as exc:
            return _reply(request, ResponseCode.SYSTEM_ERROR, f"bad lock body: {exc}")
        locks = self.broker.rebalance_locks
        if request.code == RequestCode.UNLOCK_BATCH_MQ:
            locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
            return _reply(request, ResponseCode.SUCCESS)
        granted = locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        response = _reply(request, ResponseCode.SUCCESS)
        response.body = LockBatchResponseBody(granted).encode()
        return response
