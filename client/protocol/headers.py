"""Custom command headers: the typed `extFields` of RocketMQ's requests and responses.

Every header is a dataclass whose fields map to extFields keys in camelCase (RocketMQ's Java
field names); values travel as strings. `decode(cls, ext)` converts and checks them, raising
`HeaderFieldError` naming the field when a required one is missing or malformed (an integer
must fit Java's type: 64 bits, or 32 for the fields marked `bits=32`); `encode(h)` gives the
extFields dict. SEND_MESSAGE_V2 uses one-letter keys (`a`..`n`), see `SEND_V2_KEYS`.
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


_Field = tuple[str, str, Any, bool, int]
_FIELD_CACHE: dict[type[Any], list[_Field]] = {}


def _fields(cls: type[Any]) -> list[_Field]:
    """(attribute, extFields key, type, required, bits of an integer) per field."""
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
        required = f.metadata.get("required", False) or (
            f.default is _MISSING and f.default_factory is _MISSING and not optional
        )
        key = f.metadata.get("key") or _camel(f.name)
        out.append((f.name, key, kind, required, f.metadata.get("bits", 64)))
    _FIELD_CACHE[cls] = out
    return out


def _convert(cls_name: str, key: str, raw: str, kind: Any, bits: int) -> Any:
    if kind is int:
        try:
            value = int(raw)
        except ValueError:
            raise HeaderFieldError(f"{cls_name}.{key}: not an integer: {raw!r}") from None
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):  # Java: Integer or Long
            raise HeaderFieldError(f"{cls_name}.{key}: {raw!r} does not fit {bits} bits")
        return value
    if kind is bool:
        return raw.strip().lower() == "true"
    return raw


def decode(cls: type[H], ext: dict[str, str], keys: dict[str, str] | None = None) -> H:
    """Build header `cls` from extFields; `keys` renames fields (attribute -> wire key)."""
    values: dict[str, Any] = {}
    for name, key, kind, required, bits in _fields(cls):
        wire = keys.get(name, key) if keys else key
        raw = ext.get(wire)
        if raw is None or (raw == "" and kind is int):
            if required:
                raise HeaderFieldError(f"the custom field <{key}> is null")
            continue
        values[name] = _convert(cls.__name__, key, raw, kind, bits)
    return cls(**values)


def encode(header: Any, keys: dict[str, str] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, key, _kind, _required, _bits in _fields(type(header)):
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


# A field a caller may leave at its default but a request must carry (Java's @CFNotNull), and
# an integer field that is a Java Integer rather than a Long.
_REQUIRED = {"required": True}
_INT32 = {"bits": 32}
_REQUIRED_INT32 = {**_REQUIRED, **_INT32}


@dataclass(slots=True)
class SendMessageRequestHeader:
    producer_group: str
    topic: str
    default_topic: str = dataclasses.field(default="TBW102", metadata=_REQUIRED)
    default_topic_queue_nums: int = dataclasses.field(default=4, metadata=_REQUIRED_INT32)
    queue_id: int = dataclasses.field(default=-1, metadata=_REQUIRED_INT32)
    sys_flag: int = dataclasses.field(default=0, metadata=_REQUIRED_INT32)
    born_timestamp: int = dataclasses.field(default=0, metadata=_REQUIRED)
    flag: int = dataclasses.field(default=0, metadata=_REQUIRED_INT32)
    properties: str | None = None
    reconsume_times: int | None = dataclasses.field(default=None, metadata=_INT32)
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = dataclasses.field(default=None, metadata=_INT32)


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
