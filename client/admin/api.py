"""The admin API (RocketMQ's DefaultMQAdminExt), asyncio: what mqadmin, the dashboard-like tools
and the local cluster launcher use.

`AdminClient(namesrv_addr)` asks the name servers for clusters and routes and the brokers for
their runtime info, stats, connections and configuration. Broker-level calls take a broker
address; `examine_*` calls fan out to every master that serves a topic or belongs to a cluster
and merge the answers, as DefaultMQAdminExt does. Failures raise `client.errors` exceptions
(`BrokerResponseError` leaves carry the broker's code and remark).

Messages come back as stored: a body its producer compressed stays compressed (its sysFlag
says so); what shows one to a person reads it through `client.inflate.readable_body`, and
what sends one on (a dead letter resent) or decodes one (trace batches) inflates it first.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass

from tidemq.client.api import BrokerAPI, PullResult, PullStatus, SendResponse
from tidemq.client.config import parse_namesrv_addr, session_credentials
from tidemq.client.errors import (
    BrokerResponseError,
    ClientError,
    DecodeError,
    TideMQError,
    TopicNotExistError,
)
from tidemq.client.inflate import producer_body
from tidemq.client.message import (
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    Message,
    UniqueIdGenerator,
)
from tidemq.client.protocol.admin import (
    ConsumeStats,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    HARuntimeInfo,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    TopicStatsTable,
    decode_properties_text,
    encode_properties_text,
)
from tidemq.client.protocol.group_admin import (
    BrokerStatsData,
    CloneGroupOffsetRequestHeader,
    ConsumerRunningInfo,
    ConsumeStatsList,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    ViewBrokerStatsDataRequestHeader,
)
from tidemq.client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode,
)
from tidemq.client.protocol.heartbeat import (
    ConsumerConnection,
    ConsumeType,
    MessageQueue,
    ProducerConnection,
)
from tidemq.client.protocol.models import (
    MASTER_ID,
    PERM_WRITE,
    ClusterInfo,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicRouteData,
)
from tidemq.client.protocol.namesrv import KVTable, TopicList
from tidemq.client.protocol.operators5 import (
    GrpcClientInfo,
    PopQueueProgress,
    TimerTopicCount,
    decode_grpc_clients,
    decode_pop_progress,
    decode_timer_metrics,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.client.trace import TRACE_TOPIC, TraceRecord, TraceType, decode_records
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.client.validators import check_message
from tidemq.common.lifecycle import Service, Step
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    StoredMessage,
    decode_message_id,
    pack_host,
)

__all__ = ["AdminClient", "BrokerAddress", "MessageTrack", "TrackType", "parse_namesrv_addr"]

DEFAULT_ADMIN_TIMEOUT = 5.0
# Topics every broker has that hold no user's messages (searched last for a client msgId).
SYSTEM_TOPICS = frozenset({"TBW102", "SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT"})
ADMIN_PRODUCER_GROUP = "TOOLS_PRODUCER"
# INVOKE_BROKER_TO_RESET_OFFSET's "the end of every queue".
SKIP_BACKLOG_TIMESTAMP = -1
MESSAGES_BY_TIME_LIMIT = 2000
PULL_BATCH = 32
DLQ_PREFIX = "%DLQ%"
# What a resent dead letter must not carry over: the broker's bookkeeping of its old life, and
# the ids the new send gives it.
RESEND_DROPPED_PROPERTIES = frozenset(
    {
        PROPERTY_UNIQ_KEY,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_MAX_RECONSUME_TIMES,
        PROPERTY_DELAY,
        PROPERTY_WAIT,
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        "REAL_TOPIC",
        "REAL_QID",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "CLUSTER",
    }
)


class TrackType(enum.Enum):
    """What a consumer group did with a message (RocketMQ's TrackType)."""

    CONSUMED = "CONSUMED"
    CONSUMED_BUT_FILTERED = "CONSUMED_BUT_FILTERED"
    PULL = "PULL"
    NOT_CONSUME_YET = "NOT_CONSUME_YET"
    NOT_ONLINE = "NOT_ONLINE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class MessageTrack:
    consumer_group: str
    track_type: TrackType
    exception_desc: str | None = None

    def __str__(self) -> str:
        return (
            f"MessageTrack [consumerGroup={self.consumer_group}, "
            f"trackType={self.track_type.value}, exceptionDesc={self.exception_desc}]"
        )


@dataclass(frozen=True, slots=True, order=True)
class BrokerAddress:
    cluster: str
    broker_name: str
    broker_id: int
    address: str


class AdminClient(Service):
    """Usable at once; `async with` closes it at the end, as `close()` does."""

    def __init__(
        self,
        namesrv_addr: str | Iterable[str] | None,
        *,
        timeout: float = DEFAULT_ADMIN_TIMEOUT,
        serialize_type: SerializeType = SerializeType.JSON,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
    ) -> None:
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        if not self.namesrv_addrs:
            raise ClientError("no name server address: pass -n host:port or set NAMESRV_ADDR")
        self.api = BrokerAPI(
            RemotingClient(connect_timeout=timeout, tls=tls.context() if tls is not None else None),
            serialize_type=serialize_type,
            timeout=timeout,
            credentials=session_credentials(access_key, secret_key),
        )
        self._ids: UniqueIdGenerator | None = None
        super().__init__()
        self.add_child(Step(stop=self.close))

    async def close(self) -> None:
        await self.api.close()

    # --- plumbing -------------------------------------------------------------------------

    async def _call(
        self,
        address: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
        timeout: float | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        response = await self.api.call(
            address, self.api.request(code, ext, body), ok=ok, timeout=timeout
        )
        return response.code, bytes(response.body), dict(response.ext_fields)

    async def _namesrv(
        self, code: int, ext: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
    ) -> tuple[int, bytes, dict[str, str]]:
        """Ask the name servers in turn until one answers."""
        last: TideMQError | None = None
        for address in self.namesrv_addrs:
            try:
                return await self._call(address, code, ext, ok=ok)
            except TideMQError as exc:
                last = exc
        assert last is not None
        raise last

    # --- name server ----------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        last: TideMQError | None = None
        for address in self.namesrv_addrs:
            try:
                return await self.api.get_cluster_info(address)
            except TideMQError as exc:
                last = exc
        assert last is not None
        raise last

    async def brokers(self, cluster: str | None = None) -> list[BrokerAddress]:
        """Every broker address (masters and slaves), sorted by cluster, name and id."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise ClientError(f"cluster {cluster} not found")
        out = []
        for name, data in info.broker_addr_table.items():
            if cluster is not None and name not in info.cluster_addr_table[cluster]:
                continue
            for broker_id, address in data.broker_addrs.items():
                out.append(BrokerAddress(data.cluster, name, broker_id, address))
        return sorted(out)

    async def masters(self, cluster: str | None = None) -> list[BrokerAddress]:
        return [b for b in await self.brokers(cluster) if b.broker_id == MASTER_ID]

    async def topic_route(self, topic: str) -> TopicRouteData:
        last: TideMQError | None = None
        for address in self.namesrv_addrs:
            try:
                route = await self.api.get_route(address, topic)
            except TideMQError as exc:
                last = exc
                continue
            if route is None:
                raise TopicNotExistError(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"No topic route info in name server for the topic: {topic}",
                )
            return route
        assert last is not None
        raise last

    async def topic_list(self, cluster: str | None = None) -> list[str]:
        if cluster is None:
            _, body, _ = await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            _, body, _ = await self._namesrv(
                RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}
            )
        return sorted(TopicList.decode(body).topic_list)

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        ext = {"topic": topic}
        if cluster:
            ext["clusterName"] = cluster
        for address in self.namesrv_addrs:
            await self._call(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    async def _write_perm(self, code: int, broker_name: str, key: str) -> list[tuple[str, int]]:
        out = []
        for address in self.namesrv_addrs:
            _, _, ext = await self._call(address, code, {"brokerName": broker_name})
            out.append((address, int(ext.get(key, 0))))
        return out

    async def wipe_write_perm(self, broker_name: str) -> list[tuple[str, int]]:
        """(name server, topics changed) for each name server."""
        return await self._write_perm(
            RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name, "wipeTopicCount"
        )

    async def add_write_perm(self, broker_name: str) -> list[tuple[str, int]]:
        return await self._write_perm(
            RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name, "addTopicCount"
        )

    async def namesrv_config(self) -> dict[str, dict[str, str]]:
        """{name server: its effective configuration} (GET_NAMESRV_CONFIG) of each one."""
        out = {}
        for address in self.namesrv_addrs:
            _, body, _ = await self._call(address, RequestCode.GET_NAMESRV_CONFIG)
            out[address] = decode_properties_text(body)
        return out

    async def update_namesrv_config(self, props: dict[str, str]) -> list[str]:
        """UPDATE_NAMESRV_CONFIG on every name server; the ones changed."""
        body = encode_properties_text(props)
        for address in self.namesrv_addrs:
            await self._call(address, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
        return list(self.namesrv_addrs)

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG on every name server (each keeps its own table, as in RocketMQ)."""
        ext = {"namespace": namespace, "key": key, "value": value}
        for address in self.namesrv_addrs:
            await self._call(address, RequestCode.PUT_KV_CONFIG, ext)

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        ext = {"namespace": namespace, "key": key}
        for address in self.namesrv_addrs:
            await self._call(address, RequestCode.DELETE_KV_CONFIG, ext)

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """The value the first name server that answers holds; None when it has none."""
        code, _, ext = await self._namesrv(
            RequestCode.GET_KV_CONFIG,
            {"namespace": namespace, "key": key},
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        return ext.get("value") if code == ResponseCode.SUCCESS else None

    # --- one broker -----------------------------------------------------------------------

    async def runtime_info(self, address: str) -> dict[str, str]:
        _, body, _ = await self._call(address, RequestCode.GET_BROKER_RUNTIME_INFO)
        return KVTable.decode(body).table

    async def elect_master(self, address: str, broker_name: str, broker_id: int) -> None:
        """Controller mode: ask the group's master at `address` to hand over to `broker_id`
        (RocketMQ 5's CONTROLLER_ELECT_MASTER; a refusal raises with the reason)."""
        ext = {"brokerName": broker_name, "brokerId": str(broker_id)}
        await self._call(address, RequestCode.CONTROLLER_ELECT_MASTER, ext)

    async def ha_status(self, address: str) -> HARuntimeInfo:
        _, body, _ = await self._call(address, RequestCode.GET_BROKER_HA_STATUS)
        return HARuntimeInfo.decode(body)

    async def topic_stats(self, address: str, topic: str) -> TopicStatsTable:
        header = GetTopicStatsInfoRequestHeader(topic)
        _, body, _ = await self._call(address, RequestCode.GET_TOPIC_STATS_INFO, encode(header))
        return TopicStatsTable.decode(body)

    async def consume_stats(self, address: str, group: str, topic: str = "") -> ConsumeStats:
        header = GetConsumeStatsRequestHeader(group, topic)
        _, body, _ = await self._call(address, RequestCode.GET_CONSUME_STATS, encode(header))
        return ConsumeStats.decode(body)

    async def consumer_connection(self, address: str, group: str) -> ConsumerConnection:
        header = GetConsumerConnectionListRequestHeader(group)
        _, body, _ = await self._call(
            address, RequestCode.GET_CONSUMER_CONNECTION_LIST, encode(header)
        )
        return ConsumerConnection.from_dict(_object(body))

    async def producer_connection(self, address: str, group: str) -> ProducerConnection:
        header = GetProducerConnectionListRequestHeader(group)
        _, body, _ = await self._call(
            address, RequestCode.GET_PRODUCER_CONNECTION_LIST, encode(header)
        )
        return ProducerConnection.from_dict(_object(body))

    # --- the RocketMQ 5 side (client/protocol/operators5.py) ----------------------------------

    async def grpc_clients(self, address: str) -> list[GrpcClientInfo]:
        """The 5.x clients connected to the gRPC endpoint of the broker at `address`."""
        _, body, _ = await self._call(address, RequestCode.GET_GRPC_CLIENT_LIST)
        return decode_grpc_clients(_object(body))

    async def pop_progress(
        self, address: str, group: str = "", topic: str = ""
    ) -> list[PopQueueProgress]:
        ext = {k: v for k, v in (("consumerGroup", group), ("topic", topic)) if v}
        _, body, _ = await self._call(address, RequestCode.GET_POP_PROGRESS, ext)
        return decode_pop_progress(_object(body))

    async def timer_metrics(self, address: str) -> list[TimerTopicCount]:
        """Timer messages waiting per real topic (GET_TIMER_METRICS)."""
        _, body, _ = await self._call(address, RequestCode.GET_TIMER_METRICS)
        return decode_timer_metrics(_object(body))

    async def examine_grpc_clients(self, cluster: str | None = None) -> list[GrpcClientInfo]:
        """Every master's 5.x clients (one client connected to several brokers: once each)."""
        found: list[GrpcClientInfo] = []
        for broker in await self.masters(cluster):
            found += await self.grpc_clients(broker.address)
        return found

    async def examine_pop_progress(
        self, group: str = "", topic: str = "", cluster: str | None = None
    ) -> list[PopQueueProgress]:
        found: list[PopQueueProgress] = []
        for broker in await self.masters(cluster):
            found += await self.pop_progress(broker.address, group, topic)
        return found

    async def broker_config(self, address: str) -> dict[str, str]:
        _, body, _ = await self._call(address, RequestCode.GET_BROKER_CONFIG)
        return decode_properties_text(body)

    async def update_broker_config(self, address: str, props: dict[str, str]) -> None:
        await self._call(
            address, RequestCode.UPDATE_BROKER_CONFIG, body=encode_properties_text(props)
        )

    async def topic_config(self, address: str, topic: str) -> TopicConfig:
        """The broker's own config of `topic` (GET_ALL_TOPIC_CONFIG)."""
        table = (await self.api.all_topic_config(address)).topic_config_table
        config = table.get(topic)
        if config is None:
            raise TopicNotExistError(
                ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist on broker {address}"
            )
        return config

    async def create_topic(self, address: str, config: TopicConfig) -> None:
        await self.api.create_topic(address, config)

    async def create_topic_list(self, address: str, configs: list[TopicConfig]) -> None:
        await self.api.create_topic_list(address, configs)

    async def delete_topic_in_broker(self, address: str, topic: str) -> None:
        await self.api.delete_topic_in_broker(address, topic)

    async def update_subscription_group(
        self, address: str, config: SubscriptionGroupConfig
    ) -> None:
        await self.api.update_subscription_group(address, config)

    async def update_subscription_group_list(
        self, address: str, configs: list[SubscriptionGroupConfig]
    ) -> None:
        await self.api.update_subscription_group_list(address, configs)

    async def delete_subscription_group(
        self, address: str, group: str, clean_offset: bool = False
    ) -> None:
        ext = {"groupName": group, "cleanOffset": "true" if clean_offset else "false"}
        await self._call(address, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)

    async def subscription_groups(self, address: str) -> dict[str, SubscriptionGroupConfig]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: the broker's subscription groups by name."""
        _, body, _ = await self._call(address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        table = _object(body).get("subscriptionGroupTable") or {}
        if not isinstance(table, dict):
            return {}
        return {
            str(name): SubscriptionGroupConfig.from_dict(config)
            for name, config in table.items()
            if isinstance(config, dict)
        }

    async def search_offset(self, address: str, topic: str, queue_id: int, timestamp: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the queue offset stored at `timestamp` (ms)."""
        return await self.api.search_offset(address, topic, queue_id, timestamp)

    async def topic_consumed_by(self, address: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO: the groups consuming `topic` on that broker."""
        _, body, _ = await self._call(
            address, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}
        )
        groups = _object(body).get("groupList") or []
        return sorted(str(g) for g in groups) if isinstance(groups, list) else []

    async def reset_offset(
        self, address: str, topic: str, group: str, timestamp: int, force: bool = True
    ) -> dict[MessageQueue, int]:
        header = ResetOffsetRequestHeader(topic, group, timestamp, force)
        _, body, _ = await self._call(
            address, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, encode(header)
        )
        return ResetOffsetBody.decode(body).offset_table

    async def clone_group_offset(
        self, address: str, src_group: str, dest_group: str, topic: str, offline: bool
    ) -> None:
        header = CloneGroupOffsetRequestHeader(src_group, dest_group, topic, offline)
        await self._call(address, RequestCode.CLONE_GROUP_OFFSET, encode(header))

    async def broker_consume_stats(
        self, address: str, is_order: bool = False, timeout: float | None = None
    ) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS: every group's progress on that broker."""
        header = GetConsumeStatsInBrokerHeader(is_order)
        _, body, _ = await self._call(
            address, RequestCode.GET_BROKER_CONSUME_STATS, encode(header), timeout=timeout
        )
        return ConsumeStatsList.decode(body)

    async def broker_stats_data(self, address: str, name: str, key: str) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA: a counter's last minute, hour and day on that broker."""
        header = ViewBrokerStatsDataRequestHeader(name, key)
        _, body, _ = await self._call(address, RequestCode.VIEW_BROKER_STATS_DATA, encode(header))
        return BrokerStatsData.decode(body)

    async def consumer_running_info(
        self, address: str, group: str, client_id: str, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO through the broker at `address` to the consumer client."""
        header = GetConsumerRunningInfoRequestHeader(group, client_id, jstack)
        _, body, _ = await self._call(
            address, RequestCode.GET_CONSUMER_RUNNING_INFO, encode(header)
        )
        return ConsumerRunningInfo.decode(body)

    # --- across brokers -------------------------------------------------------------------

    async def examine_consumer_running_info(
        self, group: str, client_id: str, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """Ask the consumer through the first master it is connected to."""
        last: BrokerResponseError | None = None
        for broker in await self.masters():
            try:
                return await self.consumer_running_info(broker.address, group, client_id, jstack)
            except BrokerResponseError as exc:
                last = exc
        raise last or BrokerResponseError(
            ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
        )

    async def clone_group_offset_everywhere(
        self, src_group: str, dest_group: str, topic: str, offline: bool
    ) -> list[str]:
        """CLONE_GROUP_OFFSET on every master serving `topic`; their addresses."""
        masters = await self.route_masters(topic)
        for _, address in masters:
            await self.clone_group_offset(address, src_group, dest_group, topic, offline)
        return [address for _, address in masters]

    async def route_masters(self, topic: str) -> list[tuple[str, str]]:
        """(broker name, master address) of every group serving `topic`."""
        route = await self.topic_route(topic)
        return sorted(
            (b.broker_name, b.broker_addrs[MASTER_ID])
            for b in route.broker_datas
            if MASTER_ID in b.broker_addrs
        )

    async def examine_topic_stats(self, topic: str) -> TopicStatsTable:
        merged = TopicStatsTable()
        for _, address in await self.route_masters(topic):
            merged.offset_table.update((await self.topic_stats(address, topic)).offset_table)
        return merged

    async def examine_consume_stats(self, group: str, topic: str = "") -> ConsumeStats:
        """The group's progress on every master of every cluster (or of `topic`'s route)."""
        if topic:
            addresses = [a for _, a in await self.route_masters(topic)]
        else:
            addresses = [b.address for b in await self.masters()]
        merged = ConsumeStats()
        for address in addresses:
            try:
                merged.merge(await self.consume_stats(address, group, topic))
            except TopicNotExistError:
                continue
        return merged

    async def examine_consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's connections as the first master that knows them reports."""
        last: BrokerResponseError | None = None
        for broker in await self.masters():
            try:
                return await self.consumer_connection(broker.address, group)
            except BrokerResponseError as exc:
                last = exc
        raise last or BrokerResponseError(
            ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
        )

    async def examine_producer_connection(self, group: str, topic: str) -> ProducerConnection:
        last: BrokerResponseError | None = None
        for _, address in await self.route_masters(topic):
            try:
                return await self.producer_connection(address, group)
            except BrokerResponseError as exc:
                last = exc
        raise last or BrokerResponseError(
            ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
        )

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: int, force: bool = True
    ) -> dict[MessageQueue, int]:
        merged: dict[MessageQueue, int] = {}
        for _, address in await self.route_masters(topic):
            merged.update(await self.reset_offset(address, topic, group, timestamp, force))
        return merged

    async def skip_backlog(self, group: str, topic: str) -> dict[MessageQueue, int]:
        """RocketMQ's skipAccumulatedMessage: the group's offsets to the end of every queue."""
        return await self.reset_offset_by_time(group, topic, SKIP_BACKLOG_TIMESTAMP)

    async def examine_groups(
        self, cluster: str | None = None
    ) -> dict[str, SubscriptionGroupConfig]:
        """Every subscription group the masters (of `cluster`) know, by name."""
        merged: dict[str, SubscriptionGroupConfig] = {}
        for broker in await self.masters(cluster):
            for name, config in (await self.subscription_groups(broker.address)).items():
                merged.setdefault(name, config)
        return dict(sorted(merged.items()))

    # --- messages -------------------------------------------------------------------------

    async def view_message(self, msg_id: str) -> StoredMessage:
        """A message by its offsetMsgId (store host + physical offset)."""
        located = offset_message_address(msg_id)
        if located is None:
            raise ClientError(f"not an offset message id (no store host in it): {msg_id}")
        address, offset = located
        return await self.api.view_message(address, offset)

    async def find_message(self, msg_id: str, topic: str | None = None) -> StoredMessage:
        """A message by either id a send returns, as RocketMQ's `viewMessage(topic, msgId)`:
        an offsetMsgId names its store host and offset and is read there; a client msgId
        (UNIQ_KEY) names no broker and is looked up in the index of `topic`, or of every
        topic (user topics first) when none is given. Raises `ClientError` for a string that
        is not a message id and when nothing is found."""
        located = offset_message_address(msg_id)
        view_failure = ""
        if located is not None:
            try:
                return await self.api.view_message(*located)
            except TideMQError as exc:  # or a client msgId that decodes as a host and port
                view_failure = f"; as an offsetMsgId, {located[0]} answered: {exc}"
        topics = [topic] if topic else _search_order(await self.topic_list())
        for name in topics:
            found = await self.query_unique_key(name, msg_id, 1)
            if found:
                return found[0][1]
        where = f"topic {topic}" if topic else "any topic"
        raise ClientError(f"message {msg_id} not found in {where}{view_failure}")

    async def message_tracks(self, msg: StoredMessage) -> list[MessageTrack]:
        """RocketMQ's messageTrackDetail: for each group consuming the message's topic, whether
        it consumed the message (its offset on the message's queue is past the message)."""
        groups: set[str] = set()
        masters = await self.route_masters(msg.topic)
        for _, address in masters:
            groups.update(await self.topic_consumed_by(address, msg.topic))
        store = f"{msg.store_host[0]}:{msg.store_host[1]}"
        info = await self.cluster_info()
        broker_name = next(
            (
                name
                for name, data in info.broker_addr_table.items()
                if data.broker_addrs.get(MASTER_ID) == store
            ),
            None,
        )
        tracks = []
        for group in sorted(groups):
            try:
                connection = await self.examine_consumer_connection(group)
            except BrokerResponseError as exc:
                online = exc.code != ResponseCode.CONSUMER_NOT_ONLINE
                kind = TrackType.UNKNOWN if online else TrackType.NOT_ONLINE
                tracks.append(MessageTrack(group, kind, f"CODE:{exc.code} DESC:{exc.remark}"))
                continue
            if connection.consume_type is ConsumeType.CONSUME_ACTIVELY:
                tracks.append(MessageTrack(group, TrackType.PULL))
                continue
            stats = await self.examine_consume_stats(group, msg.topic)
            consumed = any(
                mq.topic == msg.topic
                and mq.queue_id == msg.queue_id
                and mq.broker_name == broker_name
                and offsets.consumer_offset > msg.queue_offset
                for mq, offsets in stats.offset_table.items()
            )
            kind = TrackType.CONSUMED if consumed else TrackType.NOT_CONSUME_YET
            sub = connection.subscriptions.get(msg.topic)
            tags = [] if sub is None else sub.tags_set
            if consumed and tags and "*" not in tags and (msg.tags or "") not in tags:
                kind = TrackType.CONSUMED_BUT_FILTERED
            tracks.append(MessageTrack(group, kind))
        return tracks

    async def query_unique_key(
        self, topic: str, msg_id: str, max_num: int = 32
    ) -> list[tuple[str, StoredMessage]]:
        """(broker name, message) for the messages of `topic` whose UNIQ_KEY is `msg_id` (more
        than one when a send was retried, or a consumer sent it back)."""
        found: list[tuple[str, StoredMessage]] = []
        for name, address in await self.route_masters(topic):
            messages = await self.api.query_message(address, topic, msg_id, max_num, 0, _now_ms())
            found.extend((name, m) for m in messages if m.properties.get("UNIQ_KEY") == msg_id)
        return found[:max_num]

    async def query_message(
        self, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int | None = None
    ) -> list[tuple[str, StoredMessage]]:
        """(broker name, message) for messages whose KEYS or UNIQ_KEY contain `key`."""
        end = int(time.time() * 1000) if end is None else end
        found: list[tuple[str, StoredMessage]] = []
        for name, address in await self.route_masters(topic):
            messages = await self.api.query_message(address, topic, key, max_num, begin, end)
            found.extend((name, msg) for msg in messages)
        return found

    async def message_trace(
        self, msg_id: str, trace_topic: str = TRACE_TOPIC, max_messages: int = 256
    ) -> tuple[list[TraceRecord], list[str]]:
        """The trace records of the message with client msgId `msg_id` (oldest first), found
        through `trace_topic`'s index, and a line for each trace message that did not decode."""
        found = await self.query_message(trace_topic, msg_id, max_messages)
        records: list[TraceRecord] = []
        skipped: list[str] = []
        for _broker, msg in found:
            try:  # batches over 4 KiB are compressed by the trace producer, as any body
                text = producer_body(msg).decode("utf-8")
                records.extend(r for r in decode_records(text) if r.msg_id == msg_id)
            except (DecodeError, UnicodeDecodeError) as exc:
                skipped.append(f"skipped trace message {msg.msg_id}: {exc}")
        # SubAfter has its own time since 4.9: records without one sort after their SubBefore.
        records.sort(key=lambda r: (r.timestamp, r.type is TraceType.SUB_AFTER))
        return records, skipped

    async def messages_by_time(
        self, topic: str, begin: int, end: int, limit: int = MESSAGES_BY_TIME_LIMIT
    ) -> tuple[list[tuple[str, StoredMessage]], bool]:
        """(broker name, message) for the topic's messages stored in [begin, end] (ms), newest
        first, and whether more than `limit` were there (then the newest `limit` per queue are
        read and the newest `limit` of those kept: RocketMQ Dashboard caps its result too)."""
        found: list[tuple[str, StoredMessage]] = []
        truncated = False
        stats = await self.examine_topic_stats(topic)
        masters = dict(await self.route_masters(topic))
        for mq in sorted(stats.offset_table):
            queue = stats.offset_table[mq]
            address = masters.get(mq.broker_name)
            if address is None or queue.max_offset <= queue.min_offset:
                continue
            # The search answers the nearest message, either side: one more at each end.
            first = await self.search_offset(address, topic, mq.queue_id, begin)
            first = max(queue.min_offset, min(first, queue.max_offset) - 1)
            stop = await self.search_offset(address, topic, mq.queue_id, end)
            stop = max(first, min(stop + 1, queue.max_offset))
            # Only the newest `limit` of a long range are read, not the whole queue.
            start = max(first, stop - limit)
            in_queue: list[StoredMessage] = []
            offset = start
            while offset < stop:
                count = min(PULL_BATCH, stop - offset)
                result = await self.pull(mq.broker_name, topic, mq.queue_id, offset, count)
                if result.status is not PullStatus.FOUND or not result.messages:
                    break
                in_queue.extend(m for m in result.messages if begin <= m.store_timestamp <= end)
                offset = result.next_begin_offset
            if start - 1 > first and in_queue and in_queue[0].queue_offset == start:
                truncated = True  # the message before the first read was in the range too
            if len(in_queue) > limit:
                truncated = True
                in_queue = in_queue[-limit:]
            found.extend((mq.broker_name, msg) for msg in in_queue)
        found.sort(
            key=lambda pair: (pair[1].store_timestamp, pair[1].physical_offset), reverse=True
        )
        if len(found) > limit:
            truncated = True
        return found[:limit], truncated

    async def resend_dead_letter(self, msg_id: str) -> tuple[str, int, SendResponse]:
        """Send a copy of a dead-letter message (by offsetMsgId) back to the topic it was
        first sent to (its RETRY_TOPIC property), keys, tags and user properties kept:
        (broker name, queue id, result) of the send."""
        stored = await self.view_message(msg_id)
        if not stored.topic.startswith(DLQ_PREFIX):
            raise ClientError(f"message {msg_id} is in {stored.topic}, not a dead-letter queue")
        origin = stored.properties.get(PROPERTY_RETRY_TOPIC)
        if not origin:
            raise ClientError(f"message {msg_id} does not name the topic it came from")
        kept = {k: v for k, v in stored.properties.items() if k not in RESEND_DROPPED_PROPERTIES}
        kept[PROPERTY_ORIGIN_MESSAGE_ID] = stored.properties.get(PROPERTY_UNIQ_KEY, msg_id)
        try:  # the send below carries no sysFlag: the body goes as the producer gave it
            body = producer_body(stored)
        except DecodeError as exc:
            raise ClientError(f"message {msg_id}: {exc}") from None
        resent = Message(origin, body, tags=stored.tags, keys=stored.keys, properties=kept)
        return await self.send_message(resent)

    async def _reader_address(self, broker_name: str, topic: str) -> str:
        route = await self.topic_route(topic)
        data = next((b for b in route.broker_datas if b.broker_name == broker_name), None)
        address = None if data is None else data.select_broker_addr()
        if address is None:
            raise ClientError(f"broker {broker_name} does not serve topic {topic}")
        return address

    async def queue_offsets(
        self,
        broker_name: str,
        topic: str,
        queue_id: int,
        begin: int | None = None,
        end: int | None = None,
    ) -> tuple[int, int]:
        """[first, past-last) queue offsets of the messages stored from `begin` to `end` (ms;
        None: the queue's first / last message), as RocketMQ's printMsg picks them."""
        address = await self._reader_address(broker_name, topic)
        if begin is None:
            low = await self.api.get_min_offset(address, topic, queue_id)
        else:
            low = await self.api.search_offset(address, topic, queue_id, begin)
        if end is None:
            high = await self.api.get_max_offset(address, topic, queue_id)
        else:
            high = await self.api.search_offset(address, topic, queue_id, end)
        return low, max(low, high)

    async def pull(
        self,
        broker_name: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        subscription: str = "*",
    ) -> PullResult:
        """One pull of up to `max_nums` messages matching the tag expression `subscription`."""
        address = await self._reader_address(broker_name, topic)
        header = PullMessageRequestHeader(
            consumer_group="TOOLS_CONSUMER",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription=subscription,
            expression_type="TAG",
        )
        return await self.api.pull(address, header)

    async def send_message(
        self, msg: Message, broker_name: str | None = None, queue_id: int | None = None
    ) -> tuple[str, int, SendResponse]:
        """Send to a writable master queue (the one given, else a random one):
        (broker name, queue id, result)."""
        check_message(msg)  # as a producer's send does: a bad message fails here, named
        route = await self.topic_route(msg.topic)
        addrs = {b.broker_name: b.broker_addrs.get(MASTER_ID) for b in route.broker_datas}
        choices = [
            (q.broker_name, qid)
            for q in route.queue_datas
            if q.perm & PERM_WRITE and addrs.get(q.broker_name)
            for qid in range(q.write_queue_nums)
            if (broker_name is None or q.broker_name == broker_name)
            and (queue_id is None or qid == queue_id)
        ]
        if not choices:
            raise ClientError(f"no writable queue of topic {msg.topic} matches")
        name, qid = random.choice(choices)
        address = addrs[name]
        assert address is not None
        if self._ids is None:
            self._ids = UniqueIdGenerator(pack_host("127.0.0.1", 0)[:4])
        header = SendMessageRequestHeader(
            producer_group=ADMIN_PRODUCER_GROUP,
            topic=msg.topic,
            queue_id=qid,
            born_timestamp=int(time.time() * 1000),
            flag=msg.flag,
            properties=msg.encoded_properties(self._ids.next_id()),
        )
        result = await self.api.send(address, header, msg.body)
        return name, qid, result


def offset_message_address(msg_id: str) -> tuple[str, int] | None:
    """(store address, commit log offset) an offsetMsgId names; None for an id of the right
    shape that names no usable host (a client msgId: its pid and random bytes stand where the
    port would be). Raises `ClientError` for a string that is no message id at all."""
    text = msg_id.strip()
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ClientError(f"not a message id (expected hex digits): {msg_id!r}") from None
    if len(raw) not in (16, 28):
        raise ClientError(
            f"not a message id (expected 32 or 56 hex digits, got {len(text)}): {msg_id!r}"
        )
    try:
        (host, port), offset = decode_message_id(text)
    except ValueError:
        return None
    if not 0 < port <= 0xFFFF or offset < 0 or host in ("0.0.0.0", "::"):
        return None
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), offset


def _search_order(topics: list[str]) -> list[str]:
    """User topics first, then retry and dead-letter topics, then the system ones."""

    def rank(topic: str) -> int:
        if topic.startswith(("%RETRY%", "%DLQ%")):
            return 1
        if topic.startswith(("RMQ_SYS_", "SCHEDULE_TOPIC", "rmq_sys_")) or topic in SYSTEM_TOPICS:
            return 2
        return 0

    return sorted(topics, key=lambda t: (rank(t), t))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _object(body: bytes) -> dict[str, object]:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise BrokerResponseError(ResponseCode.SYSTEM_ERROR, "response body is not a JSON object")
    return obj
