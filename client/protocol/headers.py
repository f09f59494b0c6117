"""Custom command headers: the typed `extFields` of RocketMQ's requests and responses.

Every header is a dataclass whose fields map to extFields keys in camelCase (RocketMQ's Java
field names); values travel as strings. `decode(cls, ext)` converts and checks them, raising
`HeaderFieldError` naming the field when a required one is missing or malformed; `encode(h)`
gives the extFields dict. SEND_MESSAGE_V2 uses one-letter keys (`a`..`n`), see `SEND_V2_KEYS`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

H = TypeVar("H")

_MISSING = dataclasses.MISSING


class HeaderFieldError(ValueError):
    """A request header field is missing or malformed (answered with an error response)."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_FIELD_CACHE: dict[type[Any], list[tuple[str, str, Any, bool]]] = {}


def _fields(cls: type[Any]) -> list[tuple[str, str, Any, bool]]:
    """(attribute, extFields key, type, required) per field."""
    cached = _FIELD_CACHE.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        optional = type(None) in typing.get_args(kind)
        if optional:
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        required = f.default is _MISSING and f.default_factory is _MISSING and not optional
        out.append((f.name, f.metadata.get("key") or _camel(f.name), kind, required))
    _FIELD_CACHE[cls] = out
    return out


def _convert(cls_name: str, key: str, raw: str, kind: Any) -> Any:
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise HeaderFieldError(f"{cls_name}.{key}: not an integer: {raw!r}") from None
    if kind is bool:
        return raw.strip().lower() == "true"
    return raw


def decode(cls: type[H], ext: dict[str, str], keys: dict[str, str] | None = None) -> H:
    """Build header `cls` from extFields; `keys` renames fields (attribute -> wire key)."""
    values: dict[str, Any] = {}
    for name, key, kind, required in _fields(cls):
        wire = keys.get(name, key) if keys else key
        raw = ext.get(wire)
        if raw is None or (raw == "" and kind is int):
            if required:
                raise HeaderFieldError(f"the custom field <{key}> is null")
            continue
        values[name] = _convert(cls.__name__, key, raw, kind)
    return cls(**values)


def encode(header: Any, keys: dict[str, str] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, key, _kind, _required in _fields(type(header)):
        value = getattr(header, name)
        if value is None:
            continue
        wire = keys.get(name, key) if keys else key
        if isinstance(value, bool):
            out[wire] = "true" if value else "false"
        else:
            out[wire] = str(value)
    return out


# --- send -------------------------------------------------------------------------------------


@dataclass(slots=True)
class SendMessageRequestHeader:
    producer_group: str
    topic: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    queue_id: int = -1
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None


SEND_V2_KEYS = {
    "producer_group": "a",
    "topic": "b",
    "default_topic": "c",
    "default_topic_queue_nums": "d",
    "queue_id": "e",
    "sys_flag": "f",
    "born_timestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsume_times": "j",
    "unit_mode": "k",
    "max_reconsume_times": "l",
    "batch": "m",
}


@dataclass(slots=True)
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None


# --- pull -------------------------------------------------------------------------------------

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8
PULL_FLAG_LITE_PULL = 0x10


@dataclass(slots=True)
class PullMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None


@dataclass(slots=True)
class PullMessageResponseHeader:
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


# --- offsets and queries --------------------------------------------------------------------


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(slots=True)
class OffsetResponseHeader:
    offset: int


@dataclass(slots=True)
class TopicQueueRequestHeader:
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""

    topic: str
    queue_id: int


@dataclass(slots=True)
class SearchOffsetRequestHeader:
    topic: str
    queue_id: int
    timestamp: int


@dataclass(slots=True)
class EarliestMsgStoretimeResponseHeader:
    timestamp: int


@dataclass(slots=True)
class ViewMessageRequestHeader:
    offset: int


@dataclass(slots=True)
class QueryMessageRequestHeader:
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(slots=True)
class QueryMessageResponseHeader:
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


# --- clients --------------------------------------------------------------------------------


@dataclass(slots=True)
class UnregisterClientRequestHeader:
    client_id: str = dataclasses.field(metadata={"key": "clientID"})
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class GetConsumerListByGroupRequestHeader:
    consumer_group: str


@dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader:
    consumer_group: str


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader:
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


# --- admin ----------------------------------------------------------------------------------


@dataclass(slots=True)
class CreateTopicRequestHeader:
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int | None = None
    order: bool = False


@dataclass(slots=True)
class DeleteTopicRequestHeader:
    topic: str


@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader:
    group_name: str
    clean_offset: bool = False
