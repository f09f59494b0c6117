"""PULL_MESSAGE (11): read a queue, hold the pull when it is empty (long polling).

Status to response code, and the slave-read suggestion, as RocketMQ 4.9.7's
PullMessageProcessor (reference Part A §4.2):

| store status                                   | response code                         |
|------------------------------------------------|---------------------------------------|
| FOUND                                          | SUCCESS                               |
| MESSAGE_WAS_REMOVING, NO_MATCHED_MESSAGE       | PULL_RETRY_IMMEDIATELY                |
| NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE    | PULL_OFFSET_MOVED if offset != 0,     |
|                                                | else PULL_NOT_FOUND                   |
| OFFSET_FOUND_NULL, OFFSET_OVERFLOW_ONE         | PULL_NOT_FOUND                        |
| OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL        | PULL_OFFSET_MOVED                     |

On a slave (without offsetCheckInSlave) PULL_OFFSET_MOVED becomes PULL_RETRY_IMMEDIATELY so the
client's offset is never moved by a slave. The response body is the raw records, back to back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import ClassVar, NamedTuple

from tidemq.broker.long_polling import PullRequestHoldService
from tidemq.broker.managers.clients import ConsumerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.offset_log import OffsetLog
from tidemq.broker.processors.decoding import request_header
from tidemq.broker.property_filter import property_filter
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import BrokerStats
from tidemq.client.protocol.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
)
from tidemq.client.protocol.heartbeat import ExpressionType
from tidemq.client.protocol.models import MASTER_ID, PERM_READ, TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.config import BrokerRole
from tidemq.store.get_message import GetMessageResult, GetMessageStatus, RecordFilter
from tidemq.store.message_store import MessageStore
from tidemq.store.tags import MATCH_ALL, TagFilter, parse_tag_expression

log = logging.getLogger(__name__)

_S = GetMessageStatus
_CODES = {
    _S.FOUND: ResponseCode.SUCCESS,
    _S.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    _S.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    _S.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    _S.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    _S.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    _S.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


# RocketMQ's answer when its pull queue is full (BrokerFastFailure, [TOO_MANY_REQUESTS]).
TOO_MANY_HELD_PULLS = "[TOO_MANY_REQUESTS]broker busy, start flow control for a while"


class PullFilters(NamedTuple):
    tags: TagFilter  # on the ConsumeQueue's tags codes
    record: RecordFilter | None  # on the stored record (SQL92), after `tags`


class PullProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.PULL_MESSAGE: "process",
    }

    def __init__(
        self,
        state: BrokerState,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        pull_holds: PullRequestHoldService,
        stats: BrokerStats,
    ) -> None:
        self.state = state
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.pull_holds = pull_holds
        self.stats = stats
        # Controller mode: commits go through the CommitLog (broker/offset_log.py).
        self.offset_log: OffsetLog | None = None

    async def process(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(PullMessageRequestHeader, request)
        filters, which_broker, group_broker_id = self._check(connection, header)
        tag_filter = filters.tags
        started = time.perf_counter()
        response = self._read(request, header, filters, which_broker, group_broker_id)
        self._commit_offset(connection, header)
        allow_suspend = bool(header.sys_flag & PULL_FLAG_SUSPEND)
        if response.code == ResponseCode.PULL_NOT_FOUND and allow_suspend:
            if self.pull_holds.full:
                raise RequestRejected(ResponseCode.SYSTEM_BUSY, TOO_MANY_HELD_PULLS)
            timeout_ms = header.suspend_timeout_millis
            config = self.state.config
            if not config.long_polling_enable:
                timeout_ms = config.short_polling_time_mills
            held = time.perf_counter()
            await self.pull_holds.hold(
                header.topic, header.queue_id, header.queue_offset, tag_filter, timeout_ms / 1000
            )
            # The latency histogram measures the broker's work, not the long-polling wait.
            started += time.perf_counter() - held
            response = self._read(request, header, filters, which_broker, group_broker_id)
        self.stats.on_pull_latency(time.perf_counter() - started)
        return response

    def _check(
        self, connection: RemotingConnection, header: PullMessageRequestHeader
    ) -> tuple[PullFilters, int, int]:
        """The pull's filters and the group's slave choice; `RequestRejected` for a pull
        this broker must not serve."""
        state = self.state
        if not state.config.broker_permission & PERM_READ:
            raise RequestRejected(
                ResponseCode.NO_PERMISSION,
                f"the broker[{state.advertised_address}] pulling message is forbidden",
            )
        group = self.groups.find(header.consumer_group)
        if group is None:
            raise RequestRejected(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{header.consumer_group}] does not exist",
            )
        if not group.consume_enable:
            raise RequestRejected(
                ResponseCode.NO_PERMISSION,
                f"subscription group no permission, {header.consumer_group}",
            )
        topic = self.topics.select(header.topic)
        if topic is None and self._replicated_queue(header):
            # A slave that has the queue's data but not yet the master's topic table (the
            # master died before SlaveSynchronize ran) still serves it.
            topic = TopicConfig(header.topic, header.queue_id + 1, header.queue_id + 1)
        if topic is None:
            raise RequestRejected(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{header.topic}] not exist, apply first please!",
            )
        if not topic.perm & PERM_READ:
            raise RequestRejected(
                ResponseCode.NO_PERMISSION,
                f"the topic[{header.topic}] pulling message is forbidden",
            )
        if header.queue_id < 0 or header.queue_id >= topic.read_queue_nums:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic.read_queue_nums}] consumer:[{connection.peer}]",
            )
        if header.sys_flag & PULL_FLAG_SUBSCRIPTION:
            expression_type = header.expression_type or ExpressionType.TAG.value
            filters = self._filters(header.subscription, expression_type)
        else:
            subscription = self.consumers.find_subscription(header.consumer_group, header.topic)
            if subscription is None:
                raise RequestRejected(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    "the consumer's subscription not exist",
                )
            if subscription.sub_version < header.sub_version:
                raise RequestRejected(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    "the consumer's subscription not latest",
                )
            filters = self._filters(subscription.sub_string, subscription.expression_type.value)
        return filters, group.which_broker_when_consume_slowly, group.broker_id

    def _filters(self, expression: str | None, expression_type: str) -> PullFilters:
        """TAG: the tags codes in the ConsumeQueue. SQL92 (with enablePropertyFilter): every
        unit, then the expression on the record's properties, so that only matching messages
        leave the broker."""
        if expression_type.upper() == ExpressionType.TAG.value:
            return PullFilters(parse_tag_expression(expression), None)
        return PullFilters(
            MATCH_ALL, property_filter(self.state.config, expression_type, expression)
        )

    def _replicated_queue(self, header: PullMessageRequestHeader) -> bool:
        store = self.store
        return (
            store.role is BrokerRole.SLAVE
            and store.find_consume_queue(header.topic, header.queue_id) is not None
        )

    def _read(
        self,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        filters: PullFilters,
        which_broker: int,
        group_broker_id: int,
    ) -> RemotingCommand:
        result = self.store.get_message(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.queue_offset,
            header.max_msg_nums,
            filters.tags,
            filters.record,
        )
        code = self._code(result, header.queue_offset)
        if self.state.config.slave_read_enable:
            suggest = which_broker if result.suggest_pulling_from_slave else group_broker_id
        else:
            suggest = MASTER_ID
        if code == ResponseCode.PULL_OFFSET_MOVED and not self._moves_offsets():
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = group_broker_id
        elif code == ResponseCode.PULL_OFFSET_MOVED:
            log.info(
                "offset moved: group %s topic %s queue %d requested %d, next %d (%s)",
                header.consumer_group,
                header.topic,
                header.queue_id,
                header.queue_offset,
                result.next_begin_offset,
                result.status.value,
            )
        ext = {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        response = RemotingCommand.response_to(request, code, result.status.value, ext)
        if code == ResponseCode.SUCCESS:
            # The records' views of the mapped CommitLog go to the socket as they are: joining
            # a bulk pull's 4 MiB into one bytes object took a fifth of the broker's CPU.
            response.body_views = tuple(result.spans)
            self.stats.on_get(
                header.consumer_group, header.topic, result.message_count, result.buffer_total_size
            )
        return response

    def _moves_offsets(self) -> bool:
        store = self.store
        return store.role is not BrokerRole.SLAVE or store.config.offset_check_in_slave

    @staticmethod
    def _code(result: GetMessageResult, offset: int) -> int:
        status = result.status
        if status in (_S.NO_MATCHED_LOGIC_QUEUE, _S.NO_MESSAGE_IN_QUEUE):
            return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        return _CODES[status]

    def _commit_offset(
        self, connection: RemotingConnection, header: PullMessageRequestHeader
    ) -> None:
        # A slave never takes offsets from pulls: they would diverge from the master's.
        if not header.sys_flag & PULL_FLAG_COMMIT_OFFSET or self.store.role is BrokerRole.SLAVE:
            return
        if self.offset_log is not None:
            self.offset_log.commit_later(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
            return
        self.offsets.commit(
            connection.peer,
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.commit_offset,
        )
