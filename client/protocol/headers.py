"""Custom command headers: the typed `extFields` of RocketMQ's requests and responses.

Every header is a dataclass whose fields map to extFields keys in camelCase (RocketMQ's Java
field names); values travel as strings. The mapping is a `common.schema.Schema` in the lenient
dialect Java's `decodeCommandCustomHeader` reads: `decode(cls, ext)` converts and checks the
values, raising `HeaderFieldError` naming the field when a required one is missing or malformed
(an integer must fit Java's type: 64 bits, or 32 for the fields marked `bits=32`); `encode(h)`
gives the extFields dict. SEND_MESSAGE_V2 uses one-letter keys (`a`..`m`), see `SEND_V2_KEYS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from tidemq.common import speedups
from tidemq.common.errors import DecodeError
from tidemq.common.schema import Dialect, Schema

H = TypeVar("H")


class HeaderFieldError(DecodeError, ValueError):
    """A request header field is missing or malformed (answered with an error response)."""


REQUEST_HEADER = Dialect(
    error=HeaderFieldError,
    strict=False,
    missing="the custom field <{key}> is null",  # RocketMQ's remark, word for word
    malformed="{owner}.{key}: not {expected}: {raw!r}",
    too_wide="{owner}.{key}: {raw!r} does not fit {bits} bits",
)

# Schemas by class, and by (class, renaming): plain dicts looked up on every request, cheaper
# than a general cache. Renamings are dicts, which cannot be hashed: their schemas are found by
# the dict's identity (callers pass module constants such as SEND_V2_KEYS) and checked against
# a copy of it, so a reused id or a mutated mapping only costs a rebuild.
_CODECS: dict[type[Any], Schema[Any]] = {}
_RENAMED_CODECS: dict[tuple[type[Any], int], Schema[Any]] = {}
_MAX_RENAMED_CODECS = 64


def header_schema(cls: type[H], keys: dict[str, str] | None = None) -> Schema[H]:
    """The schema `decode(cls, ext, keys)` uses: a processor that reads one header on every
    request keeps it, and calls its `decode` without the lookup."""
    return _codec(cls, keys)


def _codec(cls: type[Any], keys: dict[str, str] | None) -> Schema[Any]:
    if not keys:
        codec = _CODECS.get(cls)
        if codec is None:
            codec = _CODECS[cls] = Schema(cls, REQUEST_HEADER)
        return codec
    codec = _RENAMED_CODECS.get((cls, id(keys)))
    if codec is None or codec.keys != keys:
        if len(_RENAMED_CODECS) >= _MAX_RENAMED_CODECS:
            _RENAMED_CODECS.clear()  # callers building renamings on the fly: stay bounded
        codec = _RENAMED_CODECS[(cls, id(keys))] = Schema(cls, REQUEST_HEADER, keys)
    return codec


def decode(cls: type[H], ext: dict[str, str], keys: dict[str, str] | None = None) -> H:
    """Build header `cls` from extFields; `keys` renames fields (attribute -> wire key)."""
    header: H = _codec(cls, keys).decode(ext)
    return header


def encode(header: Any, keys: dict[str, str] | None = None) -> dict[str, str]:
    return _codec(type(header), keys).encode(header)


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


_SEND_V1_DECODE = _codec(SendMessageRequestHeader, None).decode
_SEND_V2_DECODE = _codec(SendMessageRequestHeader, SEND_V2_KEYS).decode


def decode_send_header(ext: dict[str, str], short_keys: bool) -> SendMessageRequestHeader:
    """`decode(SendMessageRequestHeader, ext, SEND_V2_KEYS if short_keys else None)`: the
    header of every send, so it has a compiled twin (client/protocol/_headers.pyx)."""
    header: SendMessageRequestHeader = (_SEND_V2_DECODE if short_keys else _SEND_V1_DECODE)(ext)
    return header


decode_send_header = speedups.select(decode_send_header, "tidemq.client.protocol._headers")


def send_v2_ext_fields(
    producer_group: str,
    topic: str,
    default_topic: str,
    default_topic_queue_nums: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str | None,
    batch: bool,
) -> dict[str, str]:
    """The extFields of a producer's SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE), straight from its
    values: `encode(SendMessageRequestHeader(..., reconsume_times=0, batch=batch), SEND_V2_KEYS)`
    without the header object, the same keys in the same order. Written for every send, so it
    has a compiled twin (client/protocol/_headers.pyx)."""
    ext = {
        "a": producer_group,
        "b": topic,
        "c": default_topic,
        "d": str(default_topic_queue_nums),
        "e": str(queue_id),
        "f": str(sys_flag),
        "g": str(born_timestamp),
        "h": str(flag),
    }
    if properties is not None:
        ext["i"] = properties
    ext["j"] = "0"
    ext["k"] = "false"
    ext["m"] = "true" if batch else "false"
    return ext


send_v2_ext_fields = speedups.select(send_v2_ext_fields, "tidemq.client.protocol._headers")


@dataclass(slots=True)
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None


# --- transactions -----------------------------------------------------------------------------


@dataclass(slots=True)
class EndTransactionRequestHeader:
    """END_TRANSACTION (37): commitOrRollback is a sysFlag transaction value (0 unknown,
    8 commit, 12 rollback); tranStateTableOffset is the half message's queue offset."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int = dataclasses.field(metadata=_INT32)
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader:
    """CHECK_TRANSACTION_STATE (39), broker to producer; the body is the half message."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


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
    delay_level: int = dataclasses.field(metadata=_REQUIRED_INT32)
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = dataclasses.field(default=None, metadata=_INT32)


# --- admin ----------------------------------------------------------------------------------


# The most queues a topic may have on one broker. RocketMQ sets no bound; the broker loops over
# a topic's queues on the event loop (offset resets, topic stats, metrics), and clients build one
# MessageQueue per queue, so a topic created with 2**31 queues hung the broker (request fuzzer).
MAX_QUEUE_NUMS = 1024
_QUEUE_NUMS = {**_INT32, "min": 0, "max": MAX_QUEUE_NUMS}


@dataclass(slots=True)
class CreateTopicRequestHeader:
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: int = dataclasses.field(default=8, metadata=_QUEUE_NUMS)
    write_queue_nums: int = dataclasses.field(default=8, metadata=_QUEUE_NUMS)
    perm: int = dataclasses.field(default=6, metadata=_INT32)
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int | None = dataclasses.field(default=None, metadata=_INT32)
    order: bool = False


@dataclass(slots=True)
class DeleteTopicRequestHeader:
    topic: str


@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader:
    group_name: str
    clean_offset: bool = False


# --- POP consumption (RocketMQ 5: POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME) ----
# Decoded by broker/processors/pop.py (see the receipt handle,
# broker/pop/receipt.py, that `extraInfo` carries).


@dataclass(slots=True)
class PopMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int = dataclasses.field(metadata=_REQUIRED_INT32)  # -1: any queue of the topic
    max_msg_nums: int = dataclasses.field(metadata=_REQUIRED_INT32)
    invisible_time: int = dataclasses.field(metadata=_REQUIRED)  # ms
    poll_time: int = dataclasses.field(metadata=_REQUIRED)  # ms the request may be held
    born_time: int = dataclasses.field(metadata=_REQUIRED)
    init_mode: int = dataclasses.field(metadata=_REQUIRED_INT32)  # 0 last, 1 first offset
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@dataclass(slots=True)
class PopMessageResponseHeader:
    pop_time: int
    invisible_time: int
    revive_qid: int = dataclasses.field(metadata=_INT32)
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(slots=True)
class AckMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int = dataclasses.field(metadata=_REQUIRED_INT32)
    extra_info: str = dataclasses.field(metadata=_REQUIRED)
    offset: int = dataclasses.field(metadata=_REQUIRED)


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int = dataclasses.field(metadata=_REQUIRED_INT32)
    extra_info: str = dataclasses.field(metadata=_REQUIRED)
    offset: int = dataclasses.field(metadata=_REQUIRED)
    invisible_time: int = dataclasses.field(metadata=_REQUIRED)


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader:
    pop_time: int
    invisible_time: int
    revive_qid: int = dataclasses.field(metadata=_INT32)
