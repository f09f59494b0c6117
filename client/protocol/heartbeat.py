"""Client-registration JSON bodies: HEART_BEAT, consumer lists, queue locks, connections.

Field names and enum spellings are RocketMQ's (`common/protocol/heartbeat/*.java`,
`common/protocol/body/*.java`). Java (fastjson) writes a HEART_BEAT (34) body like::

    {"clientID": "10.0.0.5@12345#78901234",
     "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
     "consumerDataSet": [{"groupName": "cg", "consumeType": "CONSUME_PASSIVELY",
                          "messageModel": "CLUSTERING",
                          "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": false,
                          "subscriptionDataSet": [{"classFilterMode": false, "topic": "T",
                              "subString": "A || B", "tagsSet": ["A", "B"],
                              "codeSet": [65, 66], "subVersion": 1700000000000,
                              "expressionType": "TAG"}]}]}

and that is what `to_dict()` writes. The RocketMQ C++ client (under the `rocketmq` 0.4.4 Python
wheel) writes less, and parsing accepts it: a set that is empty is left out; `subVersion` is a
string; `expressionType`, `classFilterMode` and `unitMode` are missing; its `codeSet` holds
`atoi(tag)` (0 for any tag that is not a number) instead of the tag's hash. Older C++ builds
wrote the enums as their ordinals. So the parsers accept numbers or numeric strings wherever a
number is expected, enum names or ordinals, and missing fields (RocketMQ's defaults), and a
subscription's `codeSet` is always recomputed from its tags with Java's `String.hashCode`, which
is what the broker's tag filter compares against the ConsumeQueue's tags codes.

A body that is not a JSON object, or an enum value that is neither a known name nor a known
ordinal, raises `BodyDecodeError`, as fastjson failing would make a Java broker refuse the call.
"""

from __future__ import annotations

import enum
import functools
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import dumps, loads_fastjson
from tidemq.store.javahash import java_string_hash

__all__ = [
    "SUB_ALL",
    "Connection",
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerConnection",
    "ConsumerData",
    "ExpressionType",
    "GetConsumerListByGroupResponseBody",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "MessageQueue",
    "ProducerConnection",
    "ProducerData",
    "SubscriptionData",
    "UnlockBatchRequestBody",
]

SUB_ALL = "*"
_TAG_SEPARATOR = "||"
# Java's String.trim() removes every char <= U+0020, not Unicode whitespace.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


class ConsumeType(enum.Enum):
    """Push consumers are passive (the client library pulls for them); pull consumers active."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"


class MessageModel(enum.Enum):
    """How a consumer group shares a topic: CLUSTERING, each message to one consumer of the
    group; BROADCASTING, each message to every consumer."""

    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset on a queue starts: its end (LAST_OFFSET; a young
    queue is read from 0), its first message (FIRST_OFFSET), or a time (TIMESTAMP)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = (
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    )
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ExpressionType(enum.Enum):
    TAG = "TAG"
    SQL92 = "SQL92"


E = TypeVar("E", bound=enum.Enum)


def _enum(cls: type[E], value: Any, default: E) -> E:
    """An enum member from its name or its Java ordinal (declaration order, as above)."""
    if value is None or value == "":
        return default
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        try:
            return cls[value.strip()]
        except KeyError:
            raise BodyDecodeError(f"{cls.__name__}: unknown value {value!r}") from None
    members = list(cls)
    try:
        ordinal = int(value)
    except (TypeError, ValueError):
        ordinal = -1
    if not 0 <= ordinal < len(members):
        raise BodyDecodeError(f"{cls.__name__}: unknown value {value!r}")
    return members[ordinal]


def _int(obj: dict[str, Any], key: str, default: int) -> int:
    value = obj.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BodyDecodeError(f"{key}: expected a number, got {value!r}") from None


def _bool(obj: dict[str, Any], key: str, default: bool) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _str(obj: dict[str, Any], key: str, default: str = "") -> str:
    value = obj.get(key)
    return default if value is None else str(value)


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The JSON objects of array `key`; absent or null is empty, anything else is an error."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BodyDecodeError(f"{key}: expected an array of objects")
    return value


def _strings(obj: dict[str, Any], key: str) -> list[str]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyDecodeError(f"{key}: expected an array")
    return [str(v) for v in value]


def _decode_object(body: bytes | bytearray | memoryview | str, what: str) -> dict[str, Any]:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise BodyDecodeError(f"{what}: body is not a JSON object")
    return obj


def _unique(items: list[str]) -> list[str]:
    """Java keeps tags in a HashSet: drop repeats, keep first-seen order for stable output."""
    return list(dict.fromkeys(items))


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class SubscriptionData:
    """One topic a consumer group subscribes to, with its filter expression."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = field(default_factory=_now_ms)
    expression_type: ExpressionType = ExpressionType.TAG
    class_filter_mode: bool = False

    @classmethod
    def from_expression(
        cls,
        topic: str,
        expression: str | None,
        expression_type: ExpressionType = ExpressionType.TAG,
        sub_version: int | None = None,
    ) -> SubscriptionData:
        """What `FilterAPI.build` makes: `A || B` gives tags A and B with their hash codes.

        An empty expression or `*` subscribes to every tag. Raises `ValueError` when a TAG
        expression names no tag (`" || "`) or an SQL92 expression is empty.
        """
        version = _now_ms() if sub_version is None else sub_version
        if expression_type is not ExpressionType.TAG:
            if not expression:
                raise ValueError(f"{expression_type.value} expression of {topic!r} is empty")
            return cls(topic, expression, sub_version=version, expression_type=expression_type)
        if not expression or expression == SUB_ALL:
            return cls(topic, SUB_ALL, sub_version=version)
        tags = _split_tags(expression)
        if not tags:
            raise ValueError(f"subscription {expression!r} of {topic!r} names no tag")
        return cls(topic, expression, tags, [java_string_hash(t) for t in tags], version)

    @property
    def subscribes_all(self) -> bool:
        return self.sub_string == SUB_ALL or (
            self.expression_type is ExpressionType.TAG and not self.tags_set
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": list(self.tags_set),
            "codeSet": list(self.code_set),
            "subVersion": self.sub_version,
            "expressionType": self.expression_type.value,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> SubscriptionData:
        """Parse Java's or the C++ client's form; `codeSet` is recomputed from the tags."""
        expression_type = _enum(ExpressionType, obj.get("expressionType"), ExpressionType.TAG)
        sub_string = _str(obj, "subString", SUB_ALL) or SUB_ALL
        tags = _unique(_strings(obj, "tagsSet"))
        if not tags and expression_type is ExpressionType.TAG and sub_string != SUB_ALL:
            tags = _split_tags(sub_string)  # a client that sent only the expression
        return cls(
            topic=_str(obj, "topic"),
            sub_string=sub_string,
            tags_set=tags,
            code_set=[java_string_hash(t) for t in tags],
            sub_version=_int(obj, "subVersion", 0),
            expression_type=expression_type,
            class_filter_mode=_bool(obj, "classFilterMode", False),
        )


def _split_tags(expression: str) -> list[str]:
    return _unique(
        [t for t in (p.strip(_JAVA_TRIM) for p in expression.split(_TAG_SEPARATOR)) if t]
    )


@dataclass(slots=True)
class CheckClientRequestBody:
    """CHECK_CLIENT_CONFIG's body: a consumer asks, at start, whether a broker takes its
    subscription (an SQL92 one: the broker's enablePropertyFilter, the expression's syntax)."""

    client_id: str
    group: str
    subscription_data: SubscriptionData | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "group": self.group,
            "subscriptionData": (
                None if self.subscription_data is None else self.subscription_data.to_dict()
            ),
        }

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> CheckClientRequestBody:
        obj = _decode_object(body, "CheckClientRequestBody")
        data = obj.get("subscriptionData")
        if data is not None and not isinstance(data, dict):
            raise BodyDecodeError("subscriptionData: expected an object")
        return cls(
            _str(obj, "clientId"),
            _str(obj, "group"),
            None if data is None else SubscriptionData.from_dict(data),
        )


@dataclass(slots=True)
class ProducerData:
    group_name: str

    def to_dict(self) -> dict[str, Any]:
        return {"groupName": self.group_name}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> ProducerData:
        return cls(_str(obj, "groupName"))


@dataclass(slots=True)
class ConsumerData:
    """One consumer group of a client; missing enums take RocketMQ's push-consumer defaults."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "consumeType": self.consume_type.value,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "subscriptionDataSet": [s.to_dict() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> ConsumerData:
        return cls(
            group_name=_str(obj, "groupName"),
            consume_type=_enum(ConsumeType, obj.get("consumeType"), ConsumeType.CONSUME_PASSIVELY),
            message_model=_enum(MessageModel, obj.get("messageModel"), MessageModel.CLUSTERING),
            consume_from_where=_enum(
                ConsumeFromWhere,
                obj.get("consumeFromWhere"),
                ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            ),
            subscriptions=[
                SubscriptionData.from_dict(s) for s in _objects(obj, "subscriptionDataSet")
            ],
            unit_mode=_bool(obj, "unitMode", False),
        )


@dataclass(slots=True)
class HeartbeatData:
    """The HEART_BEAT (34) request body: every producer and consumer group of one client."""

    client_id: str
    producers: list[ProducerData] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "producerDataSet": [p.to_dict() for p in self.producers],
            "consumerDataSet": [c.to_dict() for c in self.consumers],
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> HeartbeatData:
        return cls(
            client_id=_str(obj, "clientID"),
            producers=[ProducerData.from_dict(p) for p in _objects(obj, "producerDataSet")],
            consumers=[ConsumerData.from_dict(c) for c in _objects(obj, "consumerDataSet")],
        )

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> HeartbeatData:
        return cls.from_dict(_decode_object(body, "HeartbeatData"))


# Distinct heartbeat bodies kept decoded (`decode_heartbeat`): one per client of a broker with
# 10,000 clients, a few hundred bytes each.
HEARTBEATS_KEPT = 16384


def decode_heartbeat(body: bytes | bytearray | memoryview | str) -> HeartbeatData:
    """`HeartbeatData.decode`, remembered for bodies seen before (immutable `bytes` only).

    A client sends the same heartbeat body every 30 s (its id, groups and subscriptions, whose
    subVersion stays), and the broker's name gate, ACL validator and heartbeat processor each
    read it: the decode was over half of the broker's cost per heartbeat (py-spy, 3,000 idle
    clients). Readers must not change the data."""
    if isinstance(body, bytes):
        return _decode_kept(body)
    return HeartbeatData.decode(body)


@functools.lru_cache(maxsize=HEARTBEATS_KEPT)
def _decode_kept(body: bytes) -> HeartbeatData:
    return HeartbeatData.decode(body)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """A queue of a topic on one broker group; orders as Java's compareTo (topic, broker, id)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_dict(self) -> dict[str, Any]:
        """As RocketMQ's JSON carries it: topic, brokerName, queueId."""
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> MessageQueue:
        """From RocketMQ's JSON (`to_dict`'s keys)."""
        return cls(_str(obj, "topic"), _str(obj, "brokerName"), _int(obj, "queueId", 0))


def _queues(obj: dict[str, Any], key: str) -> list[MessageQueue]:
    # A Java Set: repeats collapse; first-seen order is kept so responses are deterministic.
    return list(dict.fromkeys(MessageQueue.from_dict(q) for q in _objects(obj, key)))


@dataclass(slots=True)
class GetConsumerListByGroupResponseBody:
    """GET_CONSUMER_LIST_BY_GROUP (38) response: the client ids of a group's live consumers."""

    consumer_id_list: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"consumerIdList": list(self.consumer_id_list)}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> GetConsumerListByGroupResponseBody:
        return cls(_strings(obj, "consumerIdList"))

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(
        cls, body: bytes | bytearray | memoryview | str
    ) -> GetConsumerListByGroupResponseBody:
        return cls.from_dict(_decode_object(body, "GetConsumerListByGroupResponseBody"))


@dataclass(slots=True)
class LockBatchRequestBody:
    """LOCK_BATCH_MQ (41) request. `onlyThisBroker` is 5.x's; written only when set."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = field(default_factory=list)
    only_this_broker: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "consumerGroup": self.consumer_group,
            "clientId": self.client_id,
            "mqSet": [q.to_dict() for q in self.mq_set],
        }
        if self.only_this_broker:
            out["onlyThisBroker"] = True
        return out

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> LockBatchRequestBody:
        return cls(
            consumer_group=_str(obj, "consumerGroup"),
            client_id=_str(obj, "clientId"),
            mq_set=_queues(obj, "mqSet"),
            only_this_broker=_bool(obj, "onlyThisBroker", False),
        )

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> LockBatchRequestBody:
        return cls.from_dict(_decode_object(body, cls.__name__))


class UnlockBatchRequestBody(LockBatchRequestBody):
    """UNLOCK_BATCH_MQ (42) request: the same fields as the lock request."""

    __slots__ = ()


@dataclass(slots=True)
class LockBatchResponseBody:
    """LOCK_BATCH_MQ (41) response: the queues this client now holds the lock of."""

    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"lockOKMQSet": [q.to_dict() for q in self.lock_ok_mq_set]}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> LockBatchResponseBody:
        return cls(_queues(obj, "lockOKMQSet"))

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> LockBatchResponseBody:
        return cls.from_dict(_decode_object(body, "LockBatchResponseBody"))


@dataclass(frozen=True, slots=True)
class Connection:
    """One client connection as admin tools list it (`language` is a LanguageCode name)."""

    client_id: str
    client_addr: str
    language: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "clientAddr": self.client_addr,
            "language": self.language,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Connection:
        return cls(
            _str(obj, "clientId"),
            _str(obj, "clientAddr"),
            _str(obj, "language"),
            _int(obj, "version", 0),
        )


@dataclass(slots=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST (203) response body."""

    connections: list[Connection] = field(default_factory=list)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET

    def to_dict(self) -> dict[str, Any]:
        return {
            "connectionSet": [c.to_dict() for c in self.connections],
            "subscriptionTable": {t: s.to_dict() for t, s in self.subscriptions.items()},
            "consumeType": self.consume_type.value,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> ConsumerConnection:
        table = obj.get("subscriptionTable") or {}
        if not isinstance(table, dict):
            raise BodyDecodeError("subscriptionTable: expected an object")
        return cls(
            connections=[Connection.from_dict(c) for c in _objects(obj, "connectionSet")],
            subscriptions={str(t): SubscriptionData.from_dict(s) for t, s in table.items()},
            consume_type=_enum(ConsumeType, obj.get("consumeType"), ConsumeType.CONSUME_PASSIVELY),
            message_model=_enum(MessageModel, obj.get("messageModel"), MessageModel.CLUSTERING),
            consume_from_where=_enum(
                ConsumeFromWhere,
                obj.get("consumeFromWhere"),
                ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            ),
        )


@dataclass(slots=True)
class ProducerConnection:
    """GET_PRODUCER_CONNECTION_LIST (204) response body."""

    connections: list[Connection] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"connectionSet": [c.to_dict() for c in self.connections]}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> ProducerConnection:
        return cls([Connection.from_dict(c) for c in _objects(obj, "connectionSet")])
