"""Operations calls: runtime info, topic and consume stats, connections, config, offset reset.

GET_BROKER_RUNTIME_INFO (28), GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208),
GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204), UPDATE_BROKER_CONFIG (25),
GET_BROKER_CONFIG (26), INVOKE_BROKER_TO_RESET_OFFSET (222), QUERY_TOPIC_CONSUME_BY_WHO (300).

Bodies are RocketMQ's (`client.protocol.admin`); the three keyed by MessageQueue are written in
fastjson's object-key form to a JAVA requester and in tidemq's pairs form to everyone else.

Differences from RocketMQ 4.9.7, on purpose:

- UPDATE_BROKER_CONFIG accepts only the keys that take effect at once (`RUNTIME_KEYS`) and
  refuses the others with the reason, instead of storing values that silently do nothing until
  a restart; a key that is no configuration key at all is refused as unknown (with the key it
  is likely a mistyping of), told apart from a key that cannot change while the broker runs.
  Changes live in memory: put them in the properties file to keep them.
- INVOKE_BROKER_TO_RESET_OFFSET also commits the new offsets to this broker's offset table, so
  a group with no consumer online is reset too (RocketMQ answers CONSUMER_NOT_ONLINE and its
  mqadmin falls back to committing offsets itself). Online consumers get
  RESET_CONSUMER_CLIENT_OFFSET (220) as in RocketMQ.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final

from tidemq.broker.config import BrokerConfig
from tidemq.broker.health import Health, check_health
from tidemq.broker.managers.clients import ConsumerManager, ProducerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.offset_log import OffsetLog
from tidemq.broker.processors.decoding import request_body, request_header
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import BrokerStats, RateSampler
from tidemq.client.protocol.admin import (
    ConsumeStats,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    MapForm,
    OffsetWrapper,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    TopicOffset,
    TopicStatsTable,
    decode_properties_text,
    encode_properties_text,
)
from tidemq.client.protocol.headers import encode
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.models import PERM_READ, PERM_WRITE, perm_to_string
from tidemq.client.protocol.namesrv import KVTable
from tidemq.client.remoting.codes import DEFAULT_VERSION, LanguageCode, RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.json_body import dumps
from tidemq.client.transport.connection import RemotingConnection
from tidemq.client.version import TIDEMQ_VERSION
from tidemq.common.errors import ConfigError
from tidemq.common.settings import closest_key, from_properties, to_properties
from tidemq.store.message_store import MessageStore
from tidemq.store.services import disk_used_ratio

log = logging.getLogger(__name__)

VERSION_DESC: Final = "V4_9_4"  # what DEFAULT_VERSION (401) means to RocketMQ's tools

# BrokerConfig keys whose new value is read by the broker at its next use.
RUNTIME_KEYS: Final = frozenset(
    {
        "brokerPermission",
        "slaveReadEnable",
        "longPollingEnable",
        "shortPollingTimeMills",
        "channelExpiredTimeout",
        "flushConsumerOffsetInterval",
    }
)


_OK = ResponseCode.SUCCESS


def map_form(request: RemotingCommand) -> MapForm:
    """fastjson's object keys for Java tools, standard JSON pairs for everyone else."""
    return MapForm.FASTJSON if request.language == LanguageCode.JAVA else MapForm.PAIRS


def _duration(seconds: float) -> str:
    s = int(seconds)
    return (
        f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"
    )


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


class OpsProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.GET_BROKER_RUNTIME_INFO: "get_runtime_info",
        RequestCode.GET_TOPIC_STATS_INFO: "get_topic_stats",
        RequestCode.GET_CONSUME_STATS: "get_consume_stats",
        RequestCode.GET_CONSUMER_CONNECTION_LIST: "get_consumer_connections",
        RequestCode.GET_PRODUCER_CONNECTION_LIST: "get_producer_connections",
        RequestCode.UPDATE_BROKER_CONFIG: "update_broker_config",
        RequestCode.GET_BROKER_CONFIG: "get_config",
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: "invoke_reset_offset",
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: "topic_consumed_by",
    }

    def __init__(
        self,
        state: BrokerState,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        producers: ProducerManager,
        stats: BrokerStats,
        rates: RateSampler,
        *,
        fixed_configs: tuple[Any, ...],
        listen_ports: Callable[[], tuple[int, int]],
        request_registration: Callable[[], None],
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        """`fixed_configs`: the config dataclasses that do not change while the broker runs
        (store, remoting, HA), reported by GET_BROKER_CONFIG after the broker's own;
        `listen_ports`: (remoting, HA) ports; `request_registration`: register with the name
        servers soon; `spawn`: run a send in the background."""
        self.state = state
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.producers = producers
        self.stats = stats
        self.rates = rates
        self.fixed_configs = fixed_configs
        self.listen_ports = listen_ports
        # The gRPC endpoint's bound port (-1: none), when the broker has one (broker/proxy).
        self.grpc_port: Callable[[], int] | None = None
        self.request_registration = request_registration
        self.spawn = spawn
        # The broker's health (Broker.health: with HA and the schedule); the store's alone
        # until the broker sets it.
        self.health: Callable[[], Health] = lambda: check_health(store)
        # The timer keys (timerCongestNum: timers waiting), until the broker sets it.
        self.timer_info: Callable[[], dict[str, str]] = dict
        # Controller mode: offset changes go through the CommitLog (broker/offset_log.py).
        self.offset_log: OffsetLog | None = None

    # --- runtime info ---------------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (RocketMQ's keys; values are strings)."""
        store = self.store
        sampler = self.rates
        put10, get10 = sampler.tps(10)
        put60, get60 = sampler.tps(60)
        put600, get600 = sampler.tps(600)
        stats = self.stats
        commitlog_dir = store.config.commit_log_dir
        ratio = disk_used_ratio(commitlog_dir if commitlog_dir.exists() else store.root)
        try:
            usage = shutil.disk_usage(store.root)
            capacity = f"Total : {_gib(usage.total)}, Free : {_gib(usage.free)}."
        except OSError:
            capacity = "Total : 0, Free : 0."
        min_phy = store.min_phy_offset
        earliest = (
            store.commitlog.store_timestamp_at(min_phy) if store.max_phy_offset > min_phy else 0
        )
        send_hist = stats.send_latency
        average_size = stats.put_total.bytes / max(stats.put_total.messages, 1)
        return {
            "brokerVersionDesc": VERSION_DESC,
            "brokerVersion": str(DEFAULT_VERSION),
            "tidemqVersion": TIDEMQ_VERSION,
            "brokerRole": store.role.value,
            "brokerActive": "true",
            "bootTimestamp": str(int(stats.started_at * 1000)),
            "runtime": _duration(time.time() - stats.started_at),
            "msgPutTotalYesterdayMorning": str(sampler.yesterday_morning[0]),
            "msgPutTotalTodayMorning": str(sampler.today_morning[0]),
            "msgPutTotalTodayNow": str(stats.put_total.messages),
            "msgGetTotalYesterdayMorning": str(sampler.yesterday_morning[1]),
            "msgGetTotalTodayMorning": str(sampler.today_morning[1]),
            "msgGetTotalTodayNow": str(stats.get_total.messages),
            "putMessageSizeTotal": str(stats.put_total.bytes),
            "putMessageTimesTotal": str(send_hist.count),
            "putMessageAverageSize": f"{average_size:.2f}",
            "putTps": f"{put10:.2f} {put60:.2f} {put600:.2f}",
            "getTransferedTps": f"{get10:.2f} {get60:.2f} {get600:.2f}",
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "commitLogDiskRatio": f"{max(ratio, 0.0):.4f}",
            "consumeQueueDiskRatio": f"{max(ratio, 0.0):.4f}",
            "commitLogDirCapacity": capacity,
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogMinOffset": str(min_phy),
            "remainHowManyDataToFlush": _gib(
                max(store.max_phy_offset - store.commitlog.segments.flushed_where, 0)
            ),
            "dispatchBehindBytes": str(store.reput.behind_bytes),
            **self._dispatch_health(),
            "earliestMessageTimeStamp": str(max(earliest, 0)),
            "timerReadBehind": "0",
            "timerOffsetBehind": "0",
            "timerCongestNum": "0",
            "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0",
            **self.timer_info(),
        }

    def _dispatch_health(self) -> dict[str, str]:
        """tidemq's keys (issue 30 item 3): the broker's health and what dispatch skipped."""
        health = self.health()
        faults = self.store.reput.faults
        stuck = faults.stuck
        return {
            "brokerHealth": health.summary(),
            "brokerHealthNotes": "; ".join(health.notes),
            "dispatchState": (
                "stuck" if stuck is not None or self.store.reput.stalled_at >= 0 else "ok"
            ),
            "dispatchStuck": stuck or "",
            "dispatchErrorsTotal": str(faults.errors_total),
            "dispatchQuarantinedQueues": str(len(faults.quarantined)),
            "dispatchQuarantinedRecords": str(faults.quarantined_records),
            "dispatchQuarantine": faults.listing(),
            "scheduleUndeliverable": str(health.undeliverable),
        }

    async def get_runtime_info(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        return RemotingCommand.response_to(request, _OK, body=KVTable(self.runtime_info()).encode())

    # --- topic and consume stats ----------------------------------------------------------

    def topic_stats(self, topic: str) -> TopicStatsTable | None:
        config = self.topics.select(topic)
        if config is None:
            return None
        store = self.store
        broker_name = self.state.config.broker_name
        table: dict[MessageQueue, TopicOffset] = {}
        for qid in range(config.write_queue_nums):
            high = store.max_offset_in_queue(topic, qid)
            last = store.message_store_timestamp(topic, qid, high - 1) if high > 0 else 0
            table[MessageQueue(topic, broker_name, qid)] = TopicOffset(
                store.min_offset_in_queue(topic, qid), high, max(last, 0)
            )
        return TopicStatsTable(table)

    async def get_topic_stats(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(GetTopicStatsInfoRequestHeader, request)
        stats = self.topic_stats(header.topic)
        if stats is None:
            raise RequestRejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        return RemotingCommand.response_to(request, _OK, body=stats.encode(map_form(request)))

    def consume_stats(self, group: str, topic: str = "") -> ConsumeStats:
        """The group's offsets against each queue's max, over `topic` or every topic it holds
        offsets of (its retry topic included, as in RocketMQ)."""
        store = self.store
        broker_name = self.state.config.broker_name
        topics = [topic] if topic else sorted(self.offsets.topics_of_group(group))
        table: dict[MessageQueue, OffsetWrapper] = {}
        for name in topics:
            config = self.topics.select(name)
            if config is None:
                continue
            for qid in range(config.write_queue_nums):
                consumer = max(self.offsets.query(group, name, qid), 0)
                last = store.message_store_timestamp(name, qid, consumer - 1) if consumer else 0
                table[MessageQueue(name, broker_name, qid)] = OffsetWrapper(
                    store.max_offset_in_queue(name, qid), consumer, max(last, 0)
                )
        rates = self.rates.group_get_tps()
        tps = sum(rate for (g, t), rate in rates.items() if g == group and t in topics)
        return ConsumeStats(table, tps)

    async def get_consume_stats(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(GetConsumeStatsRequestHeader, request)
        if header.topic and self.topics.select(header.topic) is None:
            raise RequestRejected(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        stats = self.consume_stats(header.consumer_group, header.topic)
        return RemotingCommand.response_to(request, _OK, body=stats.encode(map_form(request)))

    # --- connections ----------------------------------------------------------------------

    async def get_consumer_connections(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(GetConsumerConnectionListRequestHeader, request)
        found = self.consumers.consumer_connection(header.consumer_group)
        if found is None or not found.connections:
            raise RequestRejected(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{header.consumer_group}] not online",
            )
        return RemotingCommand.response_to(request, _OK, body=dumps(found.to_dict()))

    async def get_producer_connections(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(GetProducerConnectionListRequestHeader, request)
        found = self.producers.producer_connection(header.producer_group)
        if found is None or not found.connections:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group[{header.producer_group}] not exist",
            )
        return RemotingCommand.response_to(request, _OK, body=dumps(found.to_dict()))

    async def topic_consumed_by(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO (300): groups online on the topic or holding its offsets."""
        del connection
        topic = request.ext_fields.get("topic", "")
        groups = self.consumers.groups_of_topic(topic) | self.offsets.groups_of_topic(topic)
        return RemotingCommand.response_to(request, _OK, body=dumps({"groupList": sorted(groups)}))

    # --- configuration --------------------------------------------------------------------

    def config_properties(self) -> dict[str, str]:
        """Every configuration key of this broker with its effective value."""
        props: dict[str, str] = {}
        for config in (self.state.config, *self.fixed_configs):
            props.update(to_properties(config))
        listen_port, ha_listen_port = self.listen_ports()
        props["listenPort"] = str(listen_port)
        props["haListenPort"] = str(ha_listen_port)
        if self.grpc_port is not None:
            props["grpcServerPort"] = str(self.grpc_port())
        return dict(sorted(props.items()))

    async def get_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        version = dumps(self.topics.data_version.to_dict()).decode()
        body = encode_properties_text(self.config_properties())
        return RemotingCommand.response_to(request, _OK, None, {"version": version}, body)

    def update_config(self, changes: dict[str, str]) -> str | None:
        """Apply `changes`; None on success, else the reason nothing was changed: a key that
        is not one of this broker's (with the known key it may be a mistyping of) is told apart
        from a key it has but cannot change while it runs."""
        known = self.config_properties()
        for key in sorted(set(changes) - set(known)):
            near = closest_key(key, known)
            hint = f"did you mean {near}?" if near else "no broker configuration has it"
            return f"unknown key {key}: {hint}"
        refused = sorted(set(changes) - RUNTIME_KEYS)
        if refused:
            return (
                f"cannot change {', '.join(refused)} while the broker runs (changeable: "
                f"{', '.join(sorted(RUNTIME_KEYS))}); set it in the properties file and restart"
            )
        state = self.state
        old = state.config
        props = {**to_properties(old), **changes}
        try:
            new = from_properties(BrokerConfig, props)
        except ConfigError as exc:
            return str(exc)
        state.config = new
        for key, value in changes.items():
            log.info("broker config %s changed to %s", key, value)
        if new.broker_permission != old.broker_permission:
            log.info(
                "broker permission now %s: registering with the name servers",
                perm_to_string(new.broker_permission),
            )
            self.topics.data_version.next_version()
            self.request_registration()
        return None

    async def update_broker_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        changes = request_body(decode_properties_text, request, "broker config")
        log.info("update broker config %s requested by %s", changes, connection.peer)
        problem = self.update_config(changes)
        if problem is not None:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, problem)
        return RemotingCommand.response_to(request, _OK)

    # --- offset reset ---------------------------------------------------------------------

    def reset_offsets(self, header: ResetOffsetRequestHeader) -> dict[MessageQueue, int] | str:
        """Offsets for each queue of the topic at `header.timestamp` (-1: the end); a reason
        string when the topic or the group's offsets are unknown."""
        config = self.topics.select(header.topic)
        if config is None:
            return f"[reset-offset] topic[{header.topic}] not exist"
        store = self.store
        broker_name = self.state.config.broker_name
        table: dict[MessageQueue, int] = {}
        for qid in range(config.write_queue_nums):
            current = self.offsets.query(header.group, header.topic, qid)
            if header.timestamp == -1:
                target = store.max_offset_in_queue(header.topic, qid)
            else:
                target = store.offset_in_queue_by_time(header.topic, qid, header.timestamp)
            target = max(target, 0)
            if not header.is_force and current >= 0 and target >= current:
                target = current  # without force, offsets only move back
            table[MessageQueue(header.topic, broker_name, qid)] = target
        return table

    async def invoke_reset_offset(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = request_header(ResetOffsetRequestHeader, request)
        offset_log = self.offset_log
        if offset_log is not None and (refused := offset_log.on_slave("offset reset")):
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, refused)
        table = self.reset_offsets(header)
        if isinstance(table, str):
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, table)
        if offset_log is not None:
            # Controller mode: the reset goes through the CommitLog like a commit, so that the
            # next master has it (broker/offset_log.py); answered once applied.
            error = await offset_log.commit_table(
                {f"{header.topic}@{header.group}": {mq.queue_id: o for mq, o in table.items()}}
            )
            if error is not None:
                raise RequestRejected(ResponseCode.SYSTEM_ERROR, error)
        else:
            for mq, offset in table.items():
                self.offsets.commit(connection.peer, header.group, mq.topic, mq.queue_id, offset)
        log.info(
            "[reset-offset] group %s topic %s to timestamp %d (force %s) by %s: %s",
            header.group,
            header.topic,
            header.timestamp,
            header.is_force,
            connection.peer,
            {mq.queue_id: offset for mq, offset in table.items()},
        )
        info = self.consumers.get_group_info(header.group)
        channels = [] if info is None else info.all_channels()
        for channel in channels:
            if isinstance(channel, RemotingConnection):
                command = RemotingCommand.request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    encode(header),
                    ResetOffsetBody(table).encode(
                        MapForm.FASTJSON
                        if info is not None
                        and (found := info.channels.get(channel)) is not None
                        and found.language == "JAVA"
                        else MapForm.PAIRS
                    ),
                )
                self.spawn(channel.oneway(command))
        body = ResetOffsetBody(table).encode(map_form(request))
        return RemotingCommand.response_to(request, _OK, body=body)


def mask_permission(perm: int, broker_permission: int) -> int:
    """A topic's permission as registered: limited by a broker that is not readable/writable."""
    if broker_permission & PERM_READ and broker_permission & PERM_WRITE:
        return perm
    return perm & broker_permission
