"""What the request fuzzer sends: every code the name server and the broker serve, each with
its header's fields (wire key and kind) and the kind of body it reads.

Header fields come from the header dataclasses the servers decode (`client.protocol.*`), so a
new field is fuzzed without a change here. `served_codes()` reads the servers' own registration
tables (the name server's `NamesrvProcessor.handlers`, the broker's `register` table in
broker/broker.py); tests/fuzz/test_requests.py checks this catalog names every one of them.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.processor import NamesrvProcessor
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.client.protocol import admin, group_admin, namesrv
from tidemq.client.protocol import headers as h
from tidemq.client.remoting.codes import RequestCode as C
from tidemq.common.schema import camel_case

__all__ = ["CATALOG", "Body", "CodeSpec", "Field", "Kind", "Server", "served_codes"]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]


class Server(enum.Enum):
    NAMESRV = "namesrv"
    BROKER = "broker"


class Kind(enum.Enum):
    """A header field's type, as the server's schema reads it."""

    TEXT = "text"
    INT = "int"
    BOOL = "bool"


class Body(enum.Enum):
    """What a code reads from its body."""

    NONE = "none"
    MESSAGE = "message"  # raw message bytes
    BATCH = "batch"  # store.batch_body
    HEARTBEAT = "heartbeat"
    CHECK_CLIENT = "check_client"
    LOCK_BATCH = "lock_batch"
    GROUP_CONFIG = "group_config"
    TOPIC_CONFIG_LIST = "topic_config_list"  # CreateTopicListRequestBody
    GROUP_CONFIG_LIST = "group_config_list"  # SubscriptionGroupList
    BROKER_PROPERTIES = "broker_properties"  # key=value lines
    NAMESRV_PROPERTIES = "namesrv_properties"
    REGISTER_BROKER = "register_broker"
    BATCH_ACK = "batch_ack"  # BatchAckMessageRequestBody


@dataclass(frozen=True, slots=True)
class Field:
    key: str
    kind: Kind
    required: bool


@dataclass(frozen=True, slots=True)
class CodeSpec:
    code: int
    server: Server
    fields: tuple[Field, ...] = ()
    body: Body = Body.NONE

    @property
    def name(self) -> str:
        try:
            return C(self.code).name
        except ValueError:
            return str(self.code)


def _kind(annotation: object) -> Kind:
    text = str(annotation)
    if "bool" in text:
        return Kind.BOOL
    if "int" in text:
        return Kind.INT
    return Kind.TEXT


def fields_of(cls: type[Any], keys: dict[str, str] | None = None) -> tuple[Field, ...]:
    """The wire keys of a header dataclass (`keys` renames attributes, as SEND_V2_KEYS)."""
    out = []
    for f in dataclasses.fields(cls):
        key = (keys or {}).get(f.name) or f.metadata.get("key") or camel_case(f.name)
        required = (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ) or bool(f.metadata.get("required"))
        out.append(Field(key, _kind(f.type), required))
    return tuple(out)


def _broker(code: int, header: type[Any] | None = None, body: Body = Body.NONE) -> CodeSpec:
    return CodeSpec(code, Server.BROKER, fields_of(header) if header else (), body)


def _namesrv(code: int, header: type[Any] | None = None, body: Body = Body.NONE) -> CodeSpec:
    return CodeSpec(code, Server.NAMESRV, fields_of(header) if header else (), body)


_BROKER_SPECS: Final = (
    CodeSpec(C.SEND_MESSAGE, Server.BROKER, fields_of(h.SendMessageRequestHeader), Body.MESSAGE),
    CodeSpec(
        C.SEND_MESSAGE_V2,
        Server.BROKER,
        fields_of(h.SendMessageRequestHeader, h.SEND_V2_KEYS),
        Body.MESSAGE,
    ),
    CodeSpec(
        C.SEND_BATCH_MESSAGE,
        Server.BROKER,
        fields_of(h.SendMessageRequestHeader, h.SEND_V2_KEYS),
        Body.BATCH,
    ),
    _broker(C.END_TRANSACTION, h.EndTransactionRequestHeader),
    _broker(C.PULL_MESSAGE, h.PullMessageRequestHeader),
    _broker(C.GET_MAX_OFFSET, h.TopicQueueRequestHeader),
    _broker(C.GET_MIN_OFFSET, h.TopicQueueRequestHeader),
    _broker(C.SEARCH_OFFSET_BY_TIMESTAMP, h.SearchOffsetRequestHeader),
    _broker(C.GET_EARLIEST_MSG_STORETIME, h.TopicQueueRequestHeader),
    _broker(C.VIEW_MESSAGE_BY_ID, h.ViewMessageRequestHeader),
    _broker(C.QUERY_MESSAGE, h.QueryMessageRequestHeader),
    _broker(C.HEART_BEAT, None, Body.HEARTBEAT),
    _broker(C.CHECK_CLIENT_CONFIG, None, Body.CHECK_CLIENT),
    _broker(C.UNREGISTER_CLIENT, h.UnregisterClientRequestHeader),
    _broker(C.GET_CONSUMER_LIST_BY_GROUP, h.GetConsumerListByGroupRequestHeader),
    _broker(C.QUERY_CONSUMER_OFFSET, h.QueryConsumerOffsetRequestHeader),
    _broker(C.UPDATE_CONSUMER_OFFSET, h.UpdateConsumerOffsetRequestHeader),
    _broker(C.LOCK_BATCH_MQ, None, Body.LOCK_BATCH),
    _broker(C.UNLOCK_BATCH_MQ, None, Body.LOCK_BATCH),
    _broker(C.UPDATE_AND_CREATE_TOPIC, h.CreateTopicRequestHeader),
    _broker(C.UPDATE_AND_CREATE_TOPIC_LIST, None, Body.TOPIC_CONFIG_LIST),
    _broker(C.DELETE_TOPIC_IN_BROKER, h.DeleteTopicRequestHeader),
    _broker(C.GET_ALL_TOPIC_CONFIG),
    _broker(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, Body.GROUP_CONFIG),
    _broker(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, None, Body.GROUP_CONFIG_LIST),
    _broker(C.DELETE_SUBSCRIPTIONGROUP, h.DeleteSubscriptionGroupRequestHeader),
    _broker(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
    _broker(C.GET_ALL_CONSUMER_OFFSET),
    _broker(C.GET_ALL_DELAY_OFFSET),
    _broker(C.GET_BROKER_HA_STATUS),
    _broker(C.GET_TIMER_CHECK_POINT),
    _broker(C.GET_TIMER_METRICS),
    _broker(C.GET_GRPC_CLIENT_LIST),
    CodeSpec(
        C.GET_POP_PROGRESS,
        Server.BROKER,
        (Field("consumerGroup", Kind.TEXT, False), Field("topic", Kind.TEXT, False)),
    ),
    _broker(C.CONSUMER_SEND_MSG_BACK, h.ConsumerSendMsgBackRequestHeader),
    _broker(C.GET_BROKER_RUNTIME_INFO),
    _broker(C.GET_TOPIC_STATS_INFO, admin.GetTopicStatsInfoRequestHeader),
    _broker(C.GET_CONSUME_STATS, admin.GetConsumeStatsRequestHeader),
    _broker(C.GET_CONSUMER_CONNECTION_LIST, admin.GetConsumerConnectionListRequestHeader),
    _broker(C.GET_PRODUCER_CONNECTION_LIST, admin.GetProducerConnectionListRequestHeader),
    _broker(C.UPDATE_BROKER_CONFIG, None, Body.BROKER_PROPERTIES),
    _broker(C.GET_BROKER_CONFIG),
    _broker(C.INVOKE_BROKER_TO_RESET_OFFSET, admin.ResetOffsetRequestHeader),
    # read as a bare "topic" key by the processor
    CodeSpec(C.QUERY_TOPIC_CONSUME_BY_WHO, Server.BROKER, (Field("topic", Kind.TEXT, False),)),
    _broker(C.CLONE_GROUP_OFFSET, group_admin.CloneGroupOffsetRequestHeader),
    _broker(C.GET_BROKER_CONSUME_STATS, group_admin.GetConsumeStatsInBrokerHeader),
    _broker(C.VIEW_BROKER_STATS_DATA, group_admin.ViewBrokerStatsDataRequestHeader),
    _broker(C.GET_CONSUMER_RUNNING_INFO, group_admin.GetConsumerRunningInfoRequestHeader),
    _broker(C.POP_MESSAGE, h.PopMessageRequestHeader),
    _broker(C.ACK_MESSAGE, h.AckMessageRequestHeader),
    _broker(C.CHANGE_MESSAGE_INVISIBLETIME, h.ChangeInvisibleTimeRequestHeader),
    _broker(C.BATCH_ACK_MESSAGE, None, Body.BATCH_ACK),
)

_NAMESRV_SPECS: Final = (
    _namesrv(C.REGISTER_BROKER, namesrv.RegisterBrokerRequestHeader, Body.REGISTER_BROKER),
    _namesrv(C.UNREGISTER_BROKER, namesrv.UnregisterBrokerRequestHeader),
    _namesrv(C.GET_ROUTEINFO_BY_TOPIC, namesrv.GetRouteInfoRequestHeader),
    _namesrv(C.GET_BROKER_CLUSTER_INFO),
    _namesrv(C.PUT_KV_CONFIG, namesrv.PutKVConfigRequestHeader),
    _namesrv(C.GET_KV_CONFIG, namesrv.GetKVConfigRequestHeader),
    _namesrv(C.DELETE_KV_CONFIG, namesrv.DeleteKVConfigRequestHeader),
    _namesrv(C.GET_KVLIST_BY_NAMESPACE, namesrv.GetKVListByNamespaceRequestHeader),
    _namesrv(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
    _namesrv(C.DELETE_TOPIC_IN_NAMESRV, namesrv.DeleteTopicFromNamesrvRequestHeader),
    _namesrv(C.GET_TOPICS_BY_CLUSTER, namesrv.GetTopicsByClusterRequestHeader),
    _namesrv(C.GET_SYSTEM_TOPIC_LIST_FROM_NS),
    _namesrv(C.GET_UNIT_TOPIC_LIST),
    _namesrv(C.GET_HAS_UNIT_SUB_TOPIC_LIST),
    _namesrv(C.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST),
    _namesrv(C.WIPE_WRITE_PERM_OF_BROKER, namesrv.WipeWritePermOfBrokerRequestHeader),
    _namesrv(C.ADD_WRITE_PERM_OF_BROKER, namesrv.AddWritePermOfBrokerRequestHeader),
    _namesrv(C.QUERY_DATA_VERSION, namesrv.QueryDataVersionRequestHeader),
    _namesrv(C.GET_NAMESRV_CONFIG),
    _namesrv(C.UPDATE_NAMESRV_CONFIG, None, Body.NAMESRV_PROPERTIES),
)

CATALOG: Final[dict[tuple[Server, int], CodeSpec]] = {
    (spec.server, spec.code): spec for spec in (*_BROKER_SPECS, *_NAMESRV_SPECS)
}

# The broker's own handlers, beside its processors': `table[RequestCode.X] = handler`.
_TABLE_ENTRY: Final = re.compile(r"^\s+table\[RequestCode\.([A-Z_0-9]+)\] = ", re.MULTILINE)


def served_codes() -> dict[Server, set[int]]:
    """The codes each daemon registers, read from the servers themselves."""
    names = NamesrvProcessor(RouteInfoManager(), KvConfigStore(), update_config=lambda _: None)
    # The broker's table is built inside Broker's start-up with live collaborators: the codes
    # its processors declare (`SERVES`, broker/processors), and a `table[RequestCode.X] = ...`
    # line for each handler of its own.
    source = (REPO_ROOT / "broker" / "broker.py").read_text()
    broker = {int(C[name]) for name in _TABLE_ENTRY.findall(source)}
    for module in pkgutil.iter_modules([str(REPO_ROOT / "broker" / "processors")]):
        loaded = importlib.import_module(f"tidemq.broker.processors.{module.name}")
        for value in vars(loaded).values():
            if isinstance(value, type) and value.__module__ == loaded.__name__:
                broker |= {int(code) for code in getattr(value, "SERVES", {})}
    broker.discard(int(C.CONTROLLER_ELECT_MASTER))  # controller mode only, not started here
    return {Server.NAMESRV: set(names.handlers), Server.BROKER: broker}
