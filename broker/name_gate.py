"""The name gate: the step of the request pipeline that checks every name a request carries.

Names become paths (a ConsumeQueue folder is `consumequeue/<topic>/<queueId>`), file names,
table keys and topics (`%RETRY%<group>`, `%DLQ%<group>`). Before a request reaches its
processor, the remoting server's dispatch calls `NameGate.check(request)`, which looks up the
request code in two tables built once per daemon:

- header names: `(extFields key, kind)` pairs, e.g. SEND_MESSAGE_V2 `("b", TOPIC)`;
- body names: a function that reads the names out of the request body (heartbeats, lock
  batches, subscription group configs, registrations); a body it cannot read passes the gate,
  and the processor refuses it with its own remark.

A name that breaks its kind's rule (client/protocol/names.py) refuses the request with
SYSTEM_ERROR (the code RocketMQ answers an illegal topic with) and the remark
`<field>: <why>`, e.g. `consumerGroup: the specified group[../x] contains illegal characters,
allowing only ^[%|a-zA-Z0-9_-]+$`. A field the request lacks is left to the processor (which
names it as missing); an optional field may be empty.

The gate covers every code whose processor reads a name, reads included: a lookup of a queue
that does not exist yet creates its ConsumeQueue. tests/unit/test_name_gate.py holds the list
of codes that carry no name and fails when a served code is in neither. Names proved valid are
remembered (a bounded set), so a send pays two set look-ups, not two pattern matches.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.protocol.heartbeat import LockBatchRequestBody, decode_heartbeat
from tidemq.client.protocol.names import NameKind, name_problem
from tidemq.client.protocol.namesrv import RegisterBrokerBody
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.common.errors import DecodeError

log = logging.getLogger(__name__)

TOPIC: Final = NameKind.TOPIC
GROUP: Final = NameKind.GROUP
CONSUMER_GROUP: Final = NameKind.CONSUMER_GROUP
KV: Final = NameKind.KV
BROKER: Final = NameKind.BROKER

# A header field: (extFields key, kind, optional). An optional field may be empty.
HeaderName = tuple[str, NameKind, bool]
# The names in a request body: (field, kind, value) for each.
BodyNames = Callable[[Body], Iterator[tuple[str, NameKind, str]]]

_REMEMBERED_NAMES: Final = 1 << 16


def _required(key: str, kind: NameKind) -> HeaderName:
    return (key, kind, False)


def _optional(key: str, kind: NameKind) -> HeaderName:
    return (key, kind, True)


_TOPIC = _required("topic", TOPIC)
_CONSUMER = _required("consumerGroup", CONSUMER_GROUP)
_PRODUCER = _required("producerGroup", GROUP)
_SEND = (_PRODUCER, _TOPIC, _optional("defaultTopic", TOPIC))

BROKER_HEADER_NAMES: Final[Mapping[int, tuple[HeaderName, ...]]] = {
    RequestCode.SEND_MESSAGE: _SEND,
    RequestCode.SEND_BATCH_MESSAGE: _SEND,
    # SEND_MESSAGE_V2's one-letter keys (client.protocol.headers.SEND_V2_KEYS).
    RequestCode.SEND_MESSAGE_V2: (
        _required("a", GROUP),
        _required("b", TOPIC),
        _optional("c", TOPIC),
    ),
    RequestCode.END_TRANSACTION: (_PRODUCER,),
    RequestCode.PULL_MESSAGE: (_CONSUMER, _TOPIC),
    RequestCode.GET_MAX_OFFSET: (_TOPIC,),
    RequestCode.GET_MIN_OFFSET: (_TOPIC,),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: (_TOPIC,),
    RequestCode.GET_EARLIEST_MSG_STORETIME: (_TOPIC,),
    RequestCode.QUERY_MESSAGE: (_TOPIC,),
    RequestCode.UNREGISTER_CLIENT: (
        _optional("producerGroup", GROUP),
        _optional("consumerGroup", CONSUMER_GROUP),
    ),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: (_CONSUMER,),
    RequestCode.QUERY_CONSUMER_OFFSET: (_CONSUMER, _TOPIC),
    RequestCode.UPDATE_CONSUMER_OFFSET: (_CONSUMER, _TOPIC),
    RequestCode.UPDATE_AND_CREATE_TOPIC: (_TOPIC, _optional("defaultTopic", TOPIC)),
    RequestCode.DELETE_TOPIC_IN_BROKER: (_TOPIC,),
    RequestCode.DELETE_SUBSCRIPTIONGROUP: (_required("groupName", CONSUMER_GROUP),),
    RequestCode.CONSUMER_SEND_MSG_BACK: (
        _required("group", CONSUMER_GROUP),
        _optional("originTopic", TOPIC),
    ),
    RequestCode.GET_TOPIC_STATS_INFO: (_TOPIC,),
    RequestCode.GET_CONSUME_STATS: (_CONSUMER, _optional("topic", TOPIC)),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: (_CONSUMER,),
    RequestCode.GET_PRODUCER_CONNECTION_LIST: (_PRODUCER,),
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: (_TOPIC, _required("group", CONSUMER_GROUP)),
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: (_TOPIC,),
    RequestCode.GET_POP_PROGRESS: (
        _optional("consumerGroup", CONSUMER_GROUP),
        _optional("topic", TOPIC),
    ),
    RequestCode.CLONE_GROUP_OFFSET: (
        _required("srcGroup", CONSUMER_GROUP),
        _required("destGroup", CONSUMER_GROUP),
        _optional("topic", TOPIC),
    ),
    RequestCode.GET_CONSUMER_RUNNING_INFO: (_CONSUMER,),
    RequestCode.POP_MESSAGE: (_CONSUMER, _TOPIC),
    RequestCode.ACK_MESSAGE: (_CONSUMER, _TOPIC),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: (_CONSUMER, _TOPIC),
}

_BROKER_IDENTITY = (_required("brokerName", BROKER), _required("clusterName", BROKER))

NAMESRV_HEADER_NAMES: Final[Mapping[int, tuple[HeaderName, ...]]] = {
    RequestCode.REGISTER_BROKER: _BROKER_IDENTITY,
    RequestCode.UNREGISTER_BROKER: _BROKER_IDENTITY,
    RequestCode.QUERY_DATA_VERSION: _BROKER_IDENTITY,
    RequestCode.PUT_KV_CONFIG: (_required("namespace", KV), _required("key", KV)),
    RequestCode.GET_KV_CONFIG: (_required("namespace", KV), _required("key", KV)),
    RequestCode.DELETE_KV_CONFIG: (_required("namespace", KV), _required("key", KV)),
    RequestCode.GET_KVLIST_BY_NAMESPACE: (_required("namespace", KV),),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: (_TOPIC,),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: (_required("brokerName", BROKER),),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: (_required("brokerName", BROKER),),
}


# --- bodies -----------------------------------------------------------------------------------


def heartbeat_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    data = decode_heartbeat(body)
    for producer in data.producers:
        yield "producerDataSet.groupName", GROUP, producer.group_name
    for consumer in data.consumers:
        yield "consumerDataSet.groupName", CONSUMER_GROUP, consumer.group_name
        for subscription in consumer.subscriptions:
            yield "subscriptionDataSet.topic", TOPIC, subscription.topic


def lock_batch_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    data = LockBatchRequestBody.decode(body)
    yield "consumerGroup", CONSUMER_GROUP, data.consumer_group
    for queue in data.mq_set:
        yield "mqSet.topic", TOPIC, queue.topic


def subscription_group_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    obj: Any = loads_fastjson(body)
    if isinstance(obj, dict) and "groupName" in obj:
        yield "groupName", CONSUMER_GROUP, obj["groupName"]


def topic_list_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    obj: Any = loads_fastjson(body)
    for entry in obj["topicConfigList"]:
        yield "topicConfigList.topicName", TOPIC, entry["topicName"]


def subscription_group_list_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    obj: Any = loads_fastjson(body)
    for entry in obj["groupConfigList"]:
        yield "groupConfigList.groupName", CONSUMER_GROUP, entry["groupName"]


def registration_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    # Decoded once for here and the processor (RegisterBrokerBody.decode remembers the last).
    # An empty body stands for no topics; a compressed one is read by the processor alone
    # (its topics come from a broker that checked them when they were created).
    if not len(body) or body[:1] != b"{":
        return
    # Topics read into `topic_queue_rows` have valid names by the shape they were read in.
    data = RegisterBrokerBody.decode_routes(body)
    table = data.topic_config_wrapper.topic_config_table
    if _all_valid_broker_names(table.keys()) and all(
        not config.topic_name or config.topic_name == topic for topic, config in table.items()
    ):
        table = {}  # a full registration's part of 800: one match, not 800 (they all pass)
    for topic, config in table.items():
        # The broker's own topic is its name, by default the host's, which may hold dots
        # (RocketMQ registers it so): table keys here, never paths.
        yield "topicConfigTable", BROKER, topic
        if config.topic_name and config.topic_name != topic:
            # the route table is keyed by the entry's own name (RouteInfoManager's)
            yield "topicConfigTable.topicName", BROKER, config.topic_name
    for topic in data.deleted_topics:  # an incremental registration's
        yield "deletedTopicList", BROKER, topic


# Valid BROKER names (client/protocol/names.py), each followed by a newline: many checked in one
# match over them joined.
_BROKER_NAME_LINES: Final = re.compile(r"(?:(?!\.+\n)[%|a-zA-Z0-9_.:-]{1,255}\n)*")


def _all_valid_broker_names(names: Iterable[str]) -> bool:
    """True when every name is a valid BROKER name (False says nothing about which)."""
    lines = [f"{name}\n" for name in names]
    text = "".join(lines)
    # a name holding a newline would read as two
    return text.count("\n") == len(lines) and _BROKER_NAME_LINES.fullmatch(text) is not None


def batch_ack_names(body: Body) -> Iterator[tuple[str, NameKind, str]]:
    obj: Any = loads_fastjson(body)
    acks = obj.get("acks") if isinstance(obj, dict) else None
    for ack in acks if isinstance(acks, list) else ():
        if isinstance(ack, dict):
            if isinstance(ack.get("c"), str):
                yield "acks.c", CONSUMER_GROUP, ack["c"]
            if isinstance(ack.get("t"), str):
                yield "acks.t", TOPIC, ack["t"]


BROKER_BODY_NAMES: Final[Mapping[int, BodyNames]] = {
    RequestCode.BATCH_ACK_MESSAGE: batch_ack_names,
    RequestCode.HEART_BEAT: heartbeat_names,
    RequestCode.LOCK_BATCH_MQ: lock_batch_names,
    RequestCode.UNLOCK_BATCH_MQ: lock_batch_names,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: subscription_group_names,
    RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: topic_list_names,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: subscription_group_list_names,
}

NAMESRV_BODY_NAMES: Final[Mapping[int, BodyNames]] = {
    RequestCode.REGISTER_BROKER: registration_names,
}


# --- the gate ---------------------------------------------------------------------------------


class NameGate:
    """Checks the names of each request against their rules (see the module's docstring)."""

    __slots__ = ("_bodies", "_headers", "_valid")

    def __init__(
        self,
        headers: Mapping[int, tuple[HeaderName, ...]],
        bodies: Mapping[int, BodyNames],
    ) -> None:
        # One set of proved names per kind, shared by every field of that kind and bound to
        # each field once here: a send's names cost a type test and a set look-up each.
        self._valid: dict[NameKind, set[str]] = {kind: set() for kind in NameKind}
        self._headers = {
            code: tuple((key, kind, optional, self._valid[kind]) for key, kind, optional in fields)
            for code, fields in headers.items()
        }
        self._bodies = dict(bodies)

    @classmethod
    def for_broker(cls) -> NameGate:
        return cls(BROKER_HEADER_NAMES, BROKER_BODY_NAMES)

    @classmethod
    def for_namesrv(cls) -> NameGate:
        return cls(NAMESRV_HEADER_NAMES, NAMESRV_BODY_NAMES)

    def covers(self, code: int) -> bool:
        return code in self._headers or code in self._bodies

    def check(self, request: RemotingCommand) -> None:
        """Raise `RequestRejected` when a name of `request` breaks its rule."""
        fields = self._headers.get(request.code)
        if fields is not None:
            ext = request.ext_fields
            for key, kind, optional, valid in fields:
                value = ext.get(key)
                if value.__class__ is str and value in valid:
                    continue
                if value is None or (optional and value == ""):
                    continue
                self._check(key, kind, value)
        names = self._bodies.get(request.code)
        if names is not None:
            self._check_body(names, request.body)

    def _check_body(self, names: BodyNames, body: Body) -> None:
        # Each name as it is read: a body that turns unreadable later still has the names
        # before that point checked (its processor may read more of it than the gate).
        try:
            for field, kind, value in names(body):
                self._check(field, kind, value)
        except (DecodeError, ValueError, TypeError, AttributeError, KeyError):
            return  # the processor reads the body again and refuses it, naming why

    def _check(self, field: str, kind: NameKind, value: object) -> None:
        if not isinstance(value, str):  # a msgpack header may hold any type
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR, f"{field}: not a string: {type(value).__name__}"
            )
        valid = self._valid[kind]
        if value in valid:
            return
        problem = name_problem(kind, value)
        if problem is not None:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, f"{field}: {problem}")
        if len(valid) >= _REMEMBERED_NAMES:
            valid.clear()  # names are checked again; nothing else is lost
        valid.add(value)
