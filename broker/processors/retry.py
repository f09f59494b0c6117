"""CONSUMER_SEND_MSG_BACK (36): a consumer gives back a message it failed to consume.

As RocketMQ 4.9.7's asyncConsumerSendMsgBack: the broker looks the message up by its CommitLog
offset and stores a copy in the group's retry topic `%RETRY%<group>` with delay level
`3 + reconsumeTimes` (unless the consumer asked for a level), reconsumeTimes + 1, the original
topic in RETRY_TOPIC and the original id in ORIGIN_MESSAGE_ID. The delay schedule then delivers
it to the retry topic, which every push consumer of the group subscribes to. A message that has
been retried maxReconsumeTimes times (the request's, else the group's retryMaxTimes, 16 by
default), or sent back with a negative level, goes to the dead-letter topic `%DLQ%<group>`
instead, and the broker logs the move.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from typing import ClassVar, Final

from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.processors.decoding import request_header
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.client.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from tidemq.client.protocol.headers import ConsumerSendMsgBackRequestHeader
from tidemq.client.protocol.models import PERM_READ, PERM_WRITE
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageToStore,
    encode_properties,
    pack_host,
)

_INT32_MAX: Final = 2**31 - 1

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
DLQ_QUEUE_NUMS = 1


class RetryProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.CONSUMER_SEND_MSG_BACK: "send_back",
    }

    def __init__(
        self,
        state: BrokerState,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
    ) -> None:
        self.state = state
        self.store = store
        self.topics = topics
        self.groups = groups

    async def send_back(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(ConsumerSendMsgBackRequestHeader, request)
        state = self.state
        group = self.groups.find(header.group)
        if group is None:
            raise RequestRejected(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {header.group}",
            )
        if not state.config.broker_permission & PERM_WRITE:
            raise RequestRejected(
                ResponseCode.NO_PERMISSION,
                f"the broker[{state.advertised_address}] sending message is forbidden",
            )
        if group.retry_queue_nums <= 0:
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        stored = self.store.look_message_by_offset(header.offset)
        if stored is None:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}"
            )
        props = dict(stored.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, stored.topic)
        props[PROPERTY_WAIT] = "false"
        max_times = (
            header.max_reconsume_times
            if header.max_reconsume_times is not None
            else group.retry_max_times
        )
        delay = header.delay_level
        if stored.reconsume_times >= max_times or delay < 0:
            topic = DLQ_PREFIX + header.group
            queue_nums = DLQ_QUEUE_NUMS
            props.pop(PROPERTY_DELAY, None)
            log.warning(
                "message %s of group %s moved to %s after %d reconsume times (original topic %s)",
                props.get(PROPERTY_UNIQ_KEY, stored.msg_id),
                header.group,
                topic,
                stored.reconsume_times,
                props[PROPERTY_RETRY_TOPIC],
            )
        else:
            topic = RETRY_PREFIX + header.group
            queue_nums = group.retry_queue_nums
            props[PROPERTY_DELAY] = str(delay if delay > 0 else 3 + stored.reconsume_times)
        config = self.topics.create_in_send_back(topic, queue_nums, PERM_READ | PERM_WRITE, 0)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, header.origin_msg_id or stored.msg_id)
        msg = MessageToStore(
            topic=topic,
            queue_id=random.randrange(max(1, config.write_queue_nums)),
            body=stored.body,
            properties=encode_properties(props),
            flag=stored.flag,
            sys_flag=stored.sys_flag,
            born_timestamp=stored.born_timestamp or int(time.time() * 1000),
            born_host=pack_host(*stored.born_host),
            store_host=state.store_host,
            # a record's int32 (Java's int); a message sent with reconsumeTimes 2**31-1 made
            # this 2**31, which the record cannot hold (request fuzzer, issue 30)
            reconsume_times=min(stored.reconsume_times + 1, _INT32_MAX),
        )
        result = await self.store.put_message(msg)
        if not result.ok:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, result.remark or result.status.value)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
