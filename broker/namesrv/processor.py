"""The name server's request handlers (RocketMQ 4.9.7 `DefaultRequestProcessor`).

One handler per request code, each `(connection, request) -> response`, over a
`RouteInfoManager` and a `KvConfigStore`. Headers and bodies are read and written with
`client.protocol.namesrv` (formats documented there); bodies are JSON. A header that lacks a
required key or has a malformed number, or a body that does not decode, refuses the request
(`RequestRejected`) with SYSTEM_ERROR and the reason as remark (RocketMQ answers a
RemotingCommandException the same way); the remoting server's dispatch answers refusals, in the
request's serialisation.

Codes served: REGISTER_BROKER 103, UNREGISTER_BROKER 104, GET_ROUTEINFO_BY_TOPIC 105,
GET_BROKER_CLUSTER_INFO 106, PUT/GET/DELETE_KV_CONFIG 100/101/102, GET_KVLIST_BY_NAMESPACE 219,
GET_ALL_TOPIC_LIST_FROM_NAMESERVER 206, DELETE_TOPIC_IN_NAMESRV 216, GET_TOPICS_BY_CLUSTER 224,
GET_SYSTEM_TOPIC_LIST_FROM_NS 304, GET_UNIT_TOPIC_LIST 311, GET_HAS_UNIT_SUB_TOPIC_LIST 312,
GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST 313, WIPE_WRITE_PERM_OF_BROKER 205,
ADD_WRITE_PERM_OF_BROKER 327, QUERY_DATA_VERSION 322, GET_NAMESRV_CONFIG 319,
UPDATE_NAMESRV_CONFIG 318. Anything else is left to the remoting server, which answers
REQUEST_CODE_NOT_SUPPORTED.

UPDATE_NAMESRV_CONFIG's body is `key=value` lines, as RocketMQ's (an empty body changes nothing;
kvConfigPath or configStorePath answer NO_PERMISSION "Can not update config path"); the change is
applied by the `update_config` callable, which refuses (SYSTEM_ERROR, remark naming the keys)
keys that cannot change while the name server runs, instead of storing values that do nothing
until a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.route_info import BrokerRemoved, RouteInfoManager
from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.protocol.admin import decode_properties_text
from tidemq.client.protocol.namesrv import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    AddWritePermOfBrokerRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVTable,
    NamesrvProtocolError,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResult,
    TopicList,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    body_crc32,
    decode_data_version,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import dumps
from tidemq.client.transport.connection import RemotingConnection

__all__ = ["NamesrvProcessor", "log_broker_removed"]

log = logging.getLogger("tidemq.broker.namesrv")

Handler = Callable[[RemotingConnection, RemotingCommand], RemotingCommand]


def log_broker_removed(removed: BrokerRemoved) -> None:
    """One line per broker address leaving the tables, with the reason."""
    group = ", group gone" if removed.group_removed else ""
    log.info(
        "broker removed: %s[%s] %s cluster %s (%s%s)",
        removed.broker_name or "?",
        "?" if removed.broker_id is None else removed.broker_id,
        removed.broker_addr,
        removed.cluster_name or "?",
        removed.reason,
        group,
    )


def _ok(request: RemotingCommand, body: bytes = b"", **ext: str) -> RemotingCommand:
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, ext_fields=ext, body=body)


class NamesrvProcessor:
    def __init__(
        self,
        routes: RouteInfoManager,
        kv_config: KvConfigStore,
        *,
        order_message_enable: bool = False,
        config_text: Callable[[], str] = str,
        update_config: Callable[[dict[str, str]], str | None] | None = None,
    ) -> None:
        """`config_text()` is the effective configuration as properties text, for
        GET_NAMESRV_CONFIG; `update_config(changes)` applies UPDATE_NAMESRV_CONFIG, returning
        None or the reason nothing changed (None: the request is not served)."""
        self.routes = routes
        self.kv_config = kv_config
        self.order_message_enable = order_message_enable
        self.config_text = config_text
        self.update_config = update_config
        self.handlers: dict[int, Handler] = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self._topic_list(unit=True, unit_sub=None),
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self._topic_list(unit=None, unit_sub=True),
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self._topic_list(
                unit=False, unit_sub=True
            ),
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }
        if update_config is not None:
            self.handlers[RequestCode.UPDATE_NAMESRV_CONFIG] = self.put_config

    async def process(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """The remoting server's processor for the codes of `processors()`: bad input refuses
        the request with SYSTEM_ERROR."""
        try:
            return self.handlers[request.code](connection, request)
        except NamesrvProtocolError as exc:
            log.warning("bad request code %d from %s: %s", request.code, connection.peer, exc)
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    def processors(
        self,
    ) -> dict[int, Callable[[RemotingConnection, RemotingCommand], Awaitable[RemotingCommand]]]:
        """`{code: processor}` to register with a `RemotingServer`."""
        return {code: self.process for code in self.handlers}

    # --- brokers --------------------------------------------------------------------------

    def register_broker(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        if header.body_crc32 != 0 and body_crc32(request.body) != header.body_crc32:
            log.warning(
                "registration of %s from %s: crc32 not match", header.broker_addr, connection.peer
            )
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if len(request.body):
            body = RegisterBrokerBody.decode_routes(request.body, header.compressed)
        else:
            body = RegisterBrokerBody.empty()
        split = self._split_of(header)
        if header.incremental:
            if body.base_data_version is None:
                raise RequestRejected(
                    ResponseCode.SYSTEM_ERROR, "incremental registration without baseDataVersion"
                )
            outcome = self.routes.register_increment(
                cluster_name=header.cluster_name,
                broker_addr=header.broker_addr,
                broker_name=header.broker_name,
                broker_id=header.broker_id,
                ha_server_addr=header.ha_server_addr,
                base_version=body.base_data_version,
                topic_config_wrapper=body.topic_config_wrapper,
                deleted_topics=body.deleted_topics,
                connection=connection,
                master_epoch=header.master_epoch,
                topic_queue_rows=body.topic_queue_rows,
            )
            if outcome.full_registration_needed:
                log.info(
                    "incremental registration of %s[%d] %s does not follow the version held "
                    "here: asking for a full one",
                    header.broker_name,
                    header.broker_id,
                    header.broker_addr,
                )
                return _ok(request, b"", fullRegistrationNeeded="true", incremental="true")
        else:
            outcome = self.routes.register_broker(
                cluster_name=header.cluster_name,
                broker_addr=header.broker_addr,
                broker_name=header.broker_name,
                broker_id=header.broker_id,
                ha_server_addr=header.ha_server_addr,
                topic_config_wrapper=body.topic_config_wrapper,
                filter_server_list=body.filter_server_list,
                connection=connection,
                master_epoch=header.master_epoch,
                split=split,
                topic_queue_rows=body.topic_queue_rows,
            )
        if outcome.stale_against is not None:
            log.warning(
                "registration of %s[0] %s with epoch %s ignored: a master of epoch %d registered",
                header.broker_name,
                header.broker_addr,
                header.master_epoch,
                outcome.stale_against,
            )
            return _ok(request)
        if outcome.new_broker:
            log.info(
                "broker registered: %s[%d] %s cluster %s, HA %s, %d topics%s",
                header.broker_name,
                header.broker_id,
                header.broker_addr,
                header.cluster_name,
                header.ha_server_addr,
                body.topic_count,
                "" if outcome.master_addr is None else f", master {outcome.master_addr}",
            )
        result = RegisterBrokerResult(
            outcome.ha_server_addr, outcome.master_addr, incremental=bool(header.incremental)
        )
        order = self.kv_config.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        body_out = b"" if order is None else KVTable(order).encode()
        ext = result.ext_fields() if split is None else result.ext_fields_of_part(split[0])
        return _ok(request, body_out, **ext)

    @staticmethod
    def _split_of(header: RegisterBrokerRequestHeader) -> tuple[int, int] | None:
        if header.split_count is None and header.split_index is None:
            return None
        index, count = header.split_index, header.split_count
        if index is None or count is None or not 0 <= index < count:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR,
                f"splitIndex {index} and splitCount {count}: need 0 <= splitIndex < splitCount",
            )
        return index, count

    def unregister_broker(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        removed = self.routes.unregister_broker(
            cluster_name=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        if removed is not None:
            log_broker_removed(removed)
        return _ok(request)

    def query_data_version(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_ext_fields(request.ext_fields)
        version = decode_data_version(request.body)
        changed = self.routes.is_topic_config_changed(header.broker_addr, version)
        if not changed:
            self.routes.touch(header.broker_addr)
        known = self.routes.query_data_version(header.broker_addr)
        body = b"" if known is None else dumps(known.to_dict())
        return _ok(request, body, changed="true" if changed else "false")

    def wipe_write_perm(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = WipeWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields)
        count = self.routes.wipe_write_perm(header.broker_name)
        log.info(
            "wiped write permission of %s on %d topics (from %s)",
            header.broker_name,
            count,
            connection.peer,
        )
        return _ok(request, wipeTopicCount=str(count))

    def add_write_perm(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = AddWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields)
        count = self.routes.add_write_perm(header.broker_name)
        log.info(
            "added write permission of %s on %d topics (from %s)",
            header.broker_name,
            count,
            connection.peer,
        )
        return _ok(request, addTopicCount=str(count))

    # --- routes and topics ----------------------------------------------------------------

    def get_route_info(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        topic = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields).topic
        route = self.routes.get_route(topic)
        if route is None:
            raise RequestRejected(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        if self.order_message_enable:
            route.order_topic_conf = self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        return _ok(request, dumps(route.to_dict()))

    def get_cluster_info(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return _ok(request, dumps(self.routes.cluster_info().to_dict()))

    def get_all_topics(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return _ok(request, self.routes.all_topics().encode())

    def delete_topic(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
        # An empty clusterName means "everywhere", as RocketMQ 5.x reads it.
        cluster = header.cluster_name or None
        if self.routes.delete_topic(header.topic, cluster):
            where = "" if cluster is None else f" on cluster {cluster}"
            log.info("topic %s deleted%s (from %s)", header.topic, where, connection.peer)
        return _ok(request)

    def get_topics_by_cluster(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        cluster = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields).cluster
        return _ok(request, self.routes.topics_by_cluster(cluster).encode())

    def get_system_topics(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return _ok(request, self.routes.system_topic_list().encode())

    def _topic_list(self, *, unit: bool | None, unit_sub: bool | None) -> Handler:
        def handler(connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
            topics: TopicList = self.routes.topics_with_flags(unit=unit, unit_sub=unit_sub)
            return _ok(request, topics.encode())

        return handler

    # --- KV configuration -----------------------------------------------------------------

    def put_kv_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        self.kv_config.put(header.namespace, header.key, header.value)
        log.info(
            "KV config put %s/%s=%s (from %s)",
            header.namespace,
            header.key,
            header.value,
            connection.peer,
        )
        return _ok(request)

    def get_kv_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        value = self.kv_config.get(header.namespace, header.key)
        if value is None:
            raise RequestRejected(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return _ok(request, value=value)

    def delete_kv_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        header = DeleteKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        if self.kv_config.delete(header.namespace, header.key):
            log.info(
                "KV config deleted %s/%s (from %s)", header.namespace, header.key, connection.peer
            )
        return _ok(request)

    def get_kv_list(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        namespace = GetKVListByNamespaceRequestHeader.from_ext_fields(request.ext_fields).namespace
        table = self.kv_config.namespace(namespace)
        if table is None:
            raise RequestRejected(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}"
            )
        return _ok(request, KVTable(table).encode())

    def get_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return _ok(request, self.config_text().encode("utf-8"))

    def put_config(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        assert self.update_config is not None
        try:
            changes = decode_properties_text(request.body)
        except BodyDecodeError as exc:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, f"bad config body: {exc}") from None
        if not changes:
            return _ok(request)  # RocketMQ: no body, nothing to change
        if {"kvConfigPath", "configStorePath"} & set(changes):
            raise RequestRejected(ResponseCode.NO_PERMISSION, "Can not update config path")
        problem = self.update_config(changes)
        if problem is not None:
            log.warning("config update %s from %s refused: %s", changes, connection.peer, problem)
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, problem)
        log.info("config updated: %s (from %s)", changes, connection.peer)
        return _ok(request)
