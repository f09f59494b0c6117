"""Client management: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42).

A heartbeat registers each producer and consumer group of a client on this connection; a
consumer group's retry topic `%RETRY%<group>` is created on the way, as RocketMQ does. Membership
changes reach the group's members as NOTIFY_CONSUMER_IDS_CHANGED (sent by the broker's notifier).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import ClassVar

from tidemq.broker.managers.clients import ClientChannelInfo, ConsumerManager, ProducerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.offset_log import OffsetLog
from tidemq.broker.processors.decoding import request_body, request_header
from tidemq.broker.processors.send import RETRY_GROUP_TOPIC_PREFIX
from tidemq.broker.property_filter import property_filter
from tidemq.broker.rebalance_lock import RebalanceLockManager
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.client.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tidemq.client.protocol.heartbeat import (
    CheckClientRequestBody,
    ExpressionType,
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
    decode_heartbeat,
)
from tidemq.client.protocol.models import PERM_READ, PERM_WRITE
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ConsumerProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.HEART_BEAT: "heartbeat",
        RequestCode.CHECK_CLIENT_CONFIG: "check_client_config",
        RequestCode.UNREGISTER_CLIENT: "unregister_client",
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: "consumer_list",
        RequestCode.QUERY_CONSUMER_OFFSET: "query_offset",
        RequestCode.UPDATE_CONSUMER_OFFSET: "update_offset",
        RequestCode.LOCK_BATCH_MQ: "lock_batch",
        RequestCode.UNLOCK_BATCH_MQ: "lock_batch",
    }

    def __init__(
        self,
        state: BrokerState,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        producers: ProducerManager,
        offsets: ConsumerOffsetManager,
        rebalance_locks: RebalanceLockManager,
    ) -> None:
        self.state = state
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.producers = producers
        self.offsets = offsets
        self.rebalance_locks = rebalance_locks
        # Controller mode: commits go through the CommitLog (broker/offset_log.py).
        self.offset_log: OffsetLog | None = None

    # --- heartbeats -----------------------------------------------------------------------

    async def check_client_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46): would this broker filter the subscription? TAG always;
        SQL92 only with enablePropertyFilter and an expression that compiles (else the
        refusal of broker/property_filter.py)."""
        del connection
        body = request_body(CheckClientRequestBody.decode, request, "check client")
        data = body.subscription_data
        if data is not None and data.expression_type is not ExpressionType.TAG:
            property_filter(self.state.config, data.expression_type.value, data.sub_string)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def heartbeat(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        data = request_body(decode_heartbeat, request, "heartbeat")
        language = request.language_name
        for consumer in data.consumers:
            group_config = self.groups.find(consumer.group_name)
            if group_config is None:
                continue
            if group_config.retry_queue_nums > 0:
                self.topics.create_in_send_back(
                    RETRY_GROUP_TOPIC_PREFIX + consumer.group_name,
                    group_config.retry_queue_nums,
                    PERM_READ | PERM_WRITE,
                    0,
                )
            info = ClientChannelInfo(connection, data.client_id, language, request.version)
            notify = (
                self.state.config.notify_consumer_ids_changed_enable
                and group_config.notify_consumer_ids_changed_enable
            )
            changed = self.consumers.register_consumer(
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
            self.producers.register_producer(producer.group_name, info)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def unregister_client(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(UnregisterClientRequestHeader, request)
        if header.producer_group:
            self.producers.unregister_producer(header.producer_group, connection)
        if header.consumer_group:
            group_config = self.groups.get(header.consumer_group)
            notify = group_config is None or group_config.notify_consumer_ids_changed_enable
            self.consumers.unregister_consumer(header.consumer_group, connection, notify)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def consumer_list(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(GetConsumerListByGroupRequestHeader, request)
        ids = self.consumers.get_all_client_ids(header.consumer_group)
        if not ids:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
            )
        body = GetConsumerListByGroupResponseBody(ids).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    # --- offsets ------------------------------------------------------------------------------

    async def query_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(QueryConsumerOffsetRequestHeader, request)
        offset = self.offsets.query(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            min_offset = self.store.min_offset_in_queue(header.topic, header.queue_id)
            # A young queue whose first message is still in memory: start from 0 (RocketMQ).
            if min_offset <= 0 and not self._offset_on_disk(header.topic, header.queue_id, 0):
                offset = 0
        if offset < 0:
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, None, {"offset": str(offset)}
        )

    def _offset_on_disk(self, topic: str, queue_id: int, offset: int) -> bool:
        store = self.store
        phy = store.commitlog_offset_in_queue(topic, queue_id, offset)
        return store.max_phy_offset - phy > store.limits.memory_bytes

    async def update_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(UpdateConsumerOffsetRequestHeader, request)
        offset_log = self.offset_log
        if offset_log is not None:
            if self.store.role is BrokerRole.SLAVE:
                # Its table follows the log: a commit taken here would be lost to the master's.
                raise RequestRejected(
                    ResponseCode.SYSTEM_ERROR,
                    "offset commit refused: this broker is a slave in controller mode, commit "
                    "to the master",
                )
            error = await offset_log.commit(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
            if error is not None:
                raise RequestRejected(ResponseCode.SYSTEM_ERROR, error)
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        self.offsets.commit(
            connection.peer,
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.commit_offset,
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    # --- orderly consumption ------------------------------------------------------------------

    async def lock_batch(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        locks = self.rebalance_locks
        if request.code == RequestCode.UNLOCK_BATCH_MQ:
            unlock = request_body(UnlockBatchRequestBody.decode, request, "lock")
            locks.unlock_batch(unlock.consumer_group, unlock.mq_set, unlock.client_id)
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        lock = request_body(LockBatchRequestBody.decode, request, "lock")
        granted = locks.try_lock_batch(lock.consumer_group, lock.mq_set, lock.client_id)
        body = LockBatchResponseBody(granted).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)
