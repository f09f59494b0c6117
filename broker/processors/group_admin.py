"""Group and statistics admin calls (RocketMQ 4.9's AdminBrokerProcessor):

- CLONE_GROUP_OFFSET (314): copy a group's offsets of a topic (every topic it holds offsets of
  when none is named) to another group. Unless `offline`, a topic the source group's online
  consumers do not subscribe to is skipped, as in RocketMQ.
- GET_BROKER_CONSUME_STATS (317): every subscription group's ConsumeStats per topic it holds
  offsets of (`isOrder`: ordered topics only), with the broker's total lag.
- VIEW_BROKER_STATS_DATA (315): a counter's last minute, hour and day (`broker.stats`);
  an unknown name or key answers SYSTEM_ERROR "The stats <name> <key> not exist".
- GET_CONSUMER_RUNNING_INFO (307): forwarded to the consumer client named by clientId over its
  own connection; its answer is returned as is (re-encoded in fastjson's form for a Java
  requester). A client not online answers SYSTEM_ERROR, a
  client that does not answer within the timeout CONSUME_MSG_TIMEOUT (RocketMQ's remarks).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import ClassVar

from tidemq.broker.managers.clients import ConsumerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.offset_log import OffsetLog
from tidemq.broker.processors.decoding import request_header
from tidemq.broker.processors.ops import map_form
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.stats import StatsWindows
from tidemq.client.errors import TideMQError
from tidemq.client.protocol.admin import ConsumeStats, MapForm
from tidemq.client.protocol.group_admin import (
    BrokerStatsData,
    BrokerStatsItem,
    CloneGroupOffsetRequestHeader,
    ConsumerRunningInfo,
    ConsumeStatsList,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    ViewBrokerStatsDataRequestHeader,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.transport.connection import RemotingConnection

log = logging.getLogger(__name__)

CALL_CONSUMER_TIMEOUT = 5.0  # seconds, as RocketMQ's callClient

_OK = ResponseCode.SUCCESS


class GroupAdminProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.CLONE_GROUP_OFFSET: "clone_group_offset",
        RequestCode.GET_BROKER_CONSUME_STATS: "get_broker_consume_stats",
        RequestCode.VIEW_BROKER_STATS_DATA: "view_broker_stats_data",
        RequestCode.GET_CONSUMER_RUNNING_INFO: "get_consumer_running_info",
    }

    def __init__(
        self,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        windows: StatsWindows,
        *,
        consume_stats: Callable[[str, str], ConsumeStats],
        broker_addr: Callable[[], str],
    ) -> None:
        """`consume_stats(group, topic)`: the group's ConsumeStats on this broker (the ops
        processor's); `broker_addr()`: this broker's address as registered."""
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.consumers = consumers
        self.windows = windows
        self.consume_stats = consume_stats
        self.broker_addr = broker_addr
        # Controller mode: offset changes go through the CommitLog (broker/offset_log.py).
        self.offset_log: OffsetLog | None = None

    def _skipped_by_online_consumers(self, group: str, topic: str) -> bool:
        """RocketMQ's rule: the group has online consumers, and none subscribes to `topic`."""
        info = self.consumers.get_group_info(group)
        return (
            bool(info and info.subscriptions)
            and self.consumers.find_subscription(group, topic) is None
        )

    async def clone_group_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(CloneGroupOffsetRequestHeader, request)
        offset_log = self.offset_log
        if offset_log is not None and (refused := offset_log.on_slave("offset clone")):
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, refused)
        if header.topic:
            topics = [header.topic]
        else:
            topics = sorted(self.offsets.topics_of_group(header.src_group))
        cloned = []
        for topic in topics:
            if self.topics.select(topic) is None:
                log.warning("[cloneGroupOffset] topic %s does not exist", topic)
                continue
            if not header.offline and self._skipped_by_online_consumers(header.src_group, topic):
                log.warning(
                    "[cloneGroupOffset] group %s online does not subscribe to %s",
                    header.src_group,
                    topic,
                )
                continue
            if offset_log is not None:
                # Controller mode: the copy is a commit of the destination group's offsets
                # through the CommitLog (broker/offset_log.py), answered once applied.
                offsets = self.offsets.query_all(header.src_group, topic)
                if not offsets:
                    continue
                error = await offset_log.commit_table({f"{topic}@{header.dest_group}": offsets})
                if error is not None:
                    raise RequestRejected(ResponseCode.SYSTEM_ERROR, error)
                cloned.append(topic)
            elif self.offsets.clone(header.src_group, header.dest_group, topic):
                cloned.append(topic)
        log.info(
            "[cloneGroupOffset] %s -> %s topics %s (by %s)",
            header.src_group,
            header.dest_group,
            cloned,
            connection.peer,
        )
        return RemotingCommand.response_to(request, _OK)

    def broker_consume_stats(self, is_order: bool) -> ConsumeStatsList:
        out = ConsumeStatsList(self.broker_addr())
        for group in sorted(self.groups.groups()):
            stats = []
            for topic in sorted(self.offsets.topics_of_group(group)):
                config = self.topics.select(topic)
                if config is None or (is_order and not config.order):
                    continue
                if self._skipped_by_online_consumers(group, topic):
                    continue
                one = self.consume_stats(group, topic)
                out.total_diff += one.total_diff()
                stats.append(one)
            out.groups.append((group, stats))
        return out

    async def get_broker_consume_stats(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(GetConsumeStatsInBrokerHeader, request)
        body = self.broker_consume_stats(header.is_order).encode(map_form(request))
        return RemotingCommand.response_to(request, _OK, body=body)

    async def view_broker_stats_data(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(ViewBrokerStatsDataRequestHeader, request)
        name, key = header.stats_name, header.stats_key
        if not self.windows.known(name, key):
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist"
            )
        items = []
        for span in ("minute", "hour", "day"):
            w = self.windows.window(name, key, span)
            items.append(BrokerStatsItem(w.sum, w.tps, w.avgpt))
        return RemotingCommand.response_to(request, _OK, body=BrokerStatsData(*items).encode())

    async def get_consumer_running_info(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(GetConsumerRunningInfoRequestHeader, request)
        group, client_id = header.consumer_group, header.client_id
        info = self.consumers.find_channel(group, client_id)
        if info is None or not isinstance(info.channel, RemotingConnection):
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        forward = RemotingCommand.request(request.code, dict(request.ext_fields), request.body)
        try:
            answer = await info.channel.request(forward, CALL_CONSUMER_TIMEOUT)
        except TimeoutError:
            raise RequestRejected(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> Timeout: no answer in "
                f"{CALL_CONSUMER_TIMEOUT:.0f} s",
            ) from None
        except (TideMQError, OSError) as exc:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {exc}",
            ) from None
        log.info("consumer running info of %s %s asked by %s", group, client_id, connection.peer)
        body = answer.body
        if answer.code == _OK and map_form(request) is MapForm.FASTJSON:
            # Our clients answer in the pairs form; a Java tool reads fastjson's object keys.
            with contextlib.suppress(BodyDecodeError):
                body = ConsumerRunningInfo.decode(body).encode(MapForm.FASTJSON)
        return RemotingCommand.response_to(request, answer.code, answer.remark, body=body)
