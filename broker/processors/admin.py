"""Topic and subscription-group administration, and the tables a slave copies from its master.

UPDATE_AND_CREATE_TOPIC (17), UPDATE_AND_CREATE_TOPIC_LIST (18), DELETE_TOPIC_IN_BROKER (215),
GET_ALL_TOPIC_CONFIG (21), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225), DELETE_SUBSCRIPTIONGROUP (207),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45).

The two list requests are RocketMQ 5's: no header fields, a JSON body
(CreateTopicListRequestBody / SubscriptionGroupList)::

    {"topicConfigList": [{"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8,
                          "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                          "order": false}, ...]}
    {"groupConfigList": [{"groupName": "cg", "retryMaxTimes": 16, ...}, ...]}

Every entry is checked before any is applied (one bad name or queue count refuses the whole
request, as RocketMQ does); then the batch is one change of the table: one transaction, one
DataVersion step, one registration. Unlike RocketMQ 5, whose broker answers SUCCESS without
creating the rest of the list as soon as one entry equals the existing topic, an unchanged
entry is only skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager, validate_topic_name
from tidemq.broker.offset_log import OffsetLog
from tidemq.broker.processors.decoding import request_body, request_header
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.client.protocol.headers import (
    MAX_QUEUE_NUMS,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
)
from tidemq.client.protocol.models import SubscriptionGroupConfig, TopicConfig
from tidemq.client.protocol.namesrv import topic_wrapper_json
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import dumps, loads_fastjson
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.message_store import MessageStore

log = logging.getLogger(__name__)

_OK = ResponseCode.SUCCESS


def _group_config(body: Body) -> SubscriptionGroupConfig:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise BodyDecodeError("subscription group config must be a JSON object")
    return SubscriptionGroupConfig.from_dict(obj)


def _entries(body: Body, list_name: str) -> list[dict[str, Any]]:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise BodyDecodeError("not a JSON object")
    entries = obj.get(list_name)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BodyDecodeError(f"{list_name} must be a list of objects")
    return entries


def _topic_list(body: Body) -> list[TopicConfig]:
    configs = [TopicConfig.from_dict(entry) for entry in _entries(body, "topicConfigList")]
    for config in configs:
        for nums in (config.read_queue_nums, config.write_queue_nums):
            if not 0 <= nums <= MAX_QUEUE_NUMS:
                raise ValueError(
                    f"{config.topic_name[:200]}: queue nums must be 0 to {MAX_QUEUE_NUMS}"
                )
    return configs


def _group_list(body: Body) -> list[SubscriptionGroupConfig]:
    return [SubscriptionGroupConfig.from_dict(e) for e in _entries(body, "groupConfigList")]


class AdminProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.UPDATE_AND_CREATE_TOPIC: "update_topic",
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: "update_topic_list",
        RequestCode.DELETE_TOPIC_IN_BROKER: "delete_topic",
        RequestCode.GET_ALL_TOPIC_CONFIG: "all_topics",
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: "update_group",
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: "update_group_list",
        RequestCode.DELETE_SUBSCRIPTIONGROUP: "delete_group",
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "all_groups",
        RequestCode.GET_ALL_CONSUMER_OFFSET: "all_offsets",
        RequestCode.GET_ALL_DELAY_OFFSET: "all_delay_offsets",
    }

    def __init__(
        self,
        state: BrokerState,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        delay_offsets: DelayOffsetTable,
    ) -> None:
        self.state = state
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        # Controller mode: offset changes go through the CommitLog (broker/offset_log.py).
        self.offset_log: OffsetLog | None = None

    def _check_topic(self, topic: str) -> None:
        problem = validate_topic_name(topic)
        if problem is None and topic == self.state.config.broker_cluster_name:
            problem = f"the topic[{topic}] is conflict with system topic."
        if problem is not None:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, problem)

    async def update_topic(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(CreateTopicRequestHeader, request)
        self._check_topic(header.topic)
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
        self.topics.update(config)
        return RemotingCommand.response_to(request, _OK)

    async def update_topic_list(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        configs = request_body(_topic_list, request, "topic config list")
        for config in configs:
            self._check_topic(config.topic_name)
        latest = {config.topic_name: config for config in configs}  # the last of a name wins
        # update_many leaves out the configs equal to the current ones
        changed = self.topics.update_many(latest.values())
        log.info(
            "update %d topics (%d changed) in one batch, requested by %s",
            len(latest),
            len(changed),
            connection.peer,
        )
        return RemotingCommand.response_to(request, _OK)

    async def delete_topic(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(DeleteTopicRequestHeader, request)
        log.info("delete topic %s requested by %s", header.topic, connection.peer)
        await self._remove_offsets(topic=header.topic)
        self.topics.delete(header.topic)
        self.store.delete_topics({header.topic})
        return RemotingCommand.response_to(request, _OK)

    async def all_topics(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        # the rows' texts as they are: a million topics are not decoded and encoded again
        body = topic_wrapper_json(self.topics.json_rows(), self.topics.data_version)
        return RemotingCommand.response_to(request, _OK, body=body)

    async def update_group(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        config = request_body(_group_config, request, "subscription group")
        if not config.group_name:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, "groupName is empty")
        log.info("update subscription group %s requested by %s", config.group_name, connection.peer)
        self.groups.update(config)
        return RemotingCommand.response_to(request, _OK)

    async def update_group_list(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        configs = request_body(_group_list, request, "subscription group list")
        if any(not config.group_name for config in configs):
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, "groupName is empty")
        latest = {config.group_name: config for config in configs}
        changed = [c for c in latest.values() if self.groups.get(c.group_name) != c]
        log.info(
            "update %d subscription groups (%d changed) in one batch, requested by %s",
            len(latest),
            len(changed),
            connection.peer,
        )
        self.groups.update_many(changed)
        return RemotingCommand.response_to(request, _OK)

    async def delete_group(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(DeleteSubscriptionGroupRequestHeader, request)
        log.info("delete subscription group %s requested by %s", header.group_name, connection.peer)
        if header.clean_offset:
            await self._remove_offsets(group=header.group_name)
        self.groups.delete(header.group_name)
        return RemotingCommand.response_to(request, _OK)

    async def _remove_offsets(self, *, topic: str | None = None, group: str | None = None) -> None:
        """Drop every group's offsets of `topic`, or every offset of `group`. In controller mode
        through the CommitLog (broker/offset_log.py), before anything else is deleted, so that
        a removal the group could not confirm is refused whole; a slave leaves it to its
        master's log (its table follows it)."""
        offset_log = self.offset_log
        if offset_log is None:
            if topic is not None:
                self.offsets.remove_topic(topic)
            if group is not None:
                self.offsets.remove_group(group)
            return
        if offset_log.on_slave("offset removal") is not None:
            return
        error = await offset_log.remove(topic=topic, group=group)
        if error is not None:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, error)

    async def all_groups(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        body = dumps(self.groups.wrapper().to_dict())
        return RemotingCommand.response_to(request, _OK, body=body)

    async def all_offsets(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return RemotingCommand.response_to(request, _OK, body=self.offsets.encode_body())

    async def all_delay_offsets(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return RemotingCommand.response_to(request, _OK, body=self.delay_offsets.encode_body())
