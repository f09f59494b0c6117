"""The admin API (RocketMQ's DefaultMQAdminExt), asyncio: what mqadmin, the dashboard-like tools
and the local cluster launcher use.

`AdminClient(namesrv_addr)` asks the name servers for clusters and routes and the brokers for
their runtime info, stats, connections and configuration. Broker-level calls take a broker
address; `examine_*` calls fan out to every master that serves a topic or belongs to a cluster
and merge the answers, as DefaultMQAdminExt does. Failures raise `client.errors` exceptions
(`BrokerResponseError` leaves carry the broker's code and remark).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from dataclasses import dataclass

from tidemq.client.api import BrokerAPI, PullResult, SendResult
from tidemq.client.config import parse_namesrv_addr, session_credentials
from tidemq.client.errors import BrokerResponseError, ClientError, TideMQError, TopicNotExistError
from tidemq.client.message import Message, UniqueIdGenerator
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
from tidemq.client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode,
)
from tidemq.client.protocol.heartbeat import ConsumerConnection, MessageQueue, ProducerConnection
from tidemq.client.protocol.models import (
    MASTER_ID,
    PERM_WRITE,
    ClusterInfo,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicRouteData,
)
from tidemq.client.protocol.namesrv import KVTable, TopicList
from tidemq.client.remoting.client import RemotingClient
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.client.remoting.tls import TlsClientSettings
from tidemq.store.lifecycle import Service, Step
from tidemq.store.record import StoredMessage, decode_message_id, pack_host

__all__ = ["AdminClient", "BrokerAddress", "parse_namesrv_addr"]

DEFAULT_ADMIN_TIMEOUT = 5.0
ADMIN_PRODUCER_GROUP = "TOOLS_PRODUCER"


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
    ) -> tuple[int, bytes, dict[str, str]]:
        response = await self.api.call(address, self.api.request(code, ext, body), ok=ok)
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

    async def broker_config(self, address: str) -> dict[str, str]:
        _, body, _ = await self._call(address, RequestCode.GET_BROKER_CONFIG)
        return decode_properties_text(body)

    async def update_broker_config(self, address: str, props: dict[str, str]) -> None:
        await self._call(
            address, RequestCode.UPDATE_BROKER_CONFIG, body=encode_properties_text(props)
        )

    async def create_topic(self, address: str, config: TopicConfig) -> None:
        await self.api.create_topic(address, config)

    async def delete_topic_in_broker(self, address: str, topic: str) -> None:
        await self.api.delete_topic_in_broker(address, topic)

    async def update_subscription_group(
        self, address: str, config: SubscriptionGroupConfig
    ) -> None:
        await self.api.update_subscription_group(address, config)

    async def delete_subscription_group(
        self, address: str, group: str, clean_offset: bool = False
    ) -> None:
        ext = {"groupName": group, "cleanOffset": "true" if clean_offset else "false"}
        await self._call(address, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)

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

    # --- across brokers -------------------------------------------------------------------

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

    # --- messages -------------------------------------------------------------------------

    async def view_message(self, msg_id: str) -> StoredMessage:
        """A message by its offsetMsgId (store host + physical offset)."""
        try:
            (host, port), offset = decode_message_id(msg_id)
        except ValueError as exc:
            raise ClientError(f"not an offset message id: {msg_id}") from exc
        return await self.api.view_message(f"{host}:{port}", offset)

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

    async def pull(
        self, broker_name: str, topic: str, queue_id: int, offset: int, max_nums: int = 32
    ) -> PullResult:
        route = await self.topic_route(topic)
        data = next((b for b in route.broker_datas if b.broker_name == broker_name), None)
        address = None if data is None else data.select_broker_addr()
        if address is None:
            raise ClientError(f"broker {broker_name} does not serve topic {topic}")
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
            subscription="*",
            expression_type="TAG",
        )
        return await self.api.pull(address, header)

    async def send_message(
        self, msg: Message, broker_name: str | None = None, queue_id: int | None = None
    ) -> tuple[str, int, SendResult]:
        """Send to a writable master queue (the one given, else a random one):
        (broker name, queue id, result)."""
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


def _object(body: bytes) -> dict[str, object]:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise BrokerResponseError(ResponseCode.SYSTEM_ERROR, "response body is not a JSON object")
    return obj
