"""A 5.x client's `Message` (definition.proto) as the store keeps a message: sans-IO.

What the RocketMQ 5 proxy writes, in 4.x's property names, so that 4.x consumers read a message
sent over gRPC as one of their own:

| gRPC field                          | stored as                                              |
|-------------------------------------|--------------------------------------------------------|
| body (IDENTITY or GZIP encoding)    | the record's body, inflated (bounded by maxMessageSize) |
| system_properties.tag               | TAGS                                                   |
| system_properties.keys              | KEYS, joined by one space                               |
| system_properties.message_id        | UNIQ_KEY (the client's message id, answered back)       |
| system_properties.message_group     | __SHARDINGKEY (FIFO: also picks the queue)              |
| system_properties.delivery_timestamp | TIMER_DELIVER_MS; without the wheel DELAY (below) |
| system_properties.born_timestamp    | the record's born timestamp                             |
| system_properties.trace_context     | TRACE_CONTEXT                                          |
| user_properties                     | as they are (a system key is refused)                  |
| (the topic)                         | PGROUP (5.x producers have no group: the topic's)    |
| message_type TRANSACTION            | TRAN_MSG=true: a half message until EndTransaction     |
| orphaned_transaction_recovery_duration | CHECK_IMMUNITY_TIME_IN_SECONDS                      |

Refusals carry RocketMQ 5's codes: an empty body MESSAGE_BODY_EMPTY, a large one
MESSAGE_BODY_TOO_LARGE, a bad tag / key / group / property ILLEGAL_MESSAGE_TAG / _KEY / _GROUP /
_PROPERTY_KEY, a type its fields contradict MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, a digest that
does not match MESSAGE_CORRUPTED. Control characters are refused everywhere: 4.x properties
are `key\\x01value\\x02` text, and one in a value would cut it.

A delivery timestamp becomes TIMER_DELIVER_MS, which the store's timer wheel delivers at that
millisecond (store/timer_store.py; a time already past is delivered at once); one further ahead
than timerMaxDelaySec is refused with ILLEGAL_DELIVERY_TIME naming the limit. With
timerWheelEnable=false it maps onto the delay levels (messageDelayLevel) instead: the first
level at least as long as the wait, never an earlier one, a time past the longest refused.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Final

from tidemq.broker.proxy.protocol.definition_pb2 import (
    Code,
    DigestType,
    Encoding,
    Message,
    MessageType,
)
from tidemq.broker.proxy.status import Rejected
from tidemq.store.record import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)
from tidemq.store.timer_message import PROPERTY_TIMER_DELIVER_MS

PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
PROPERTY_TRACE_CONTEXT: Final = "TRACE_CONTEXT"
KEY_SEPARATOR: Final = " "
MAX_USER_PROPERTIES: Final = 128
MAX_USER_PROPERTY_BYTES: Final = 16 * 1024
MAX_MESSAGE_GROUP_BYTES: Final = 64

# RocketMQ's MessageConst names a user property may not take.
SYSTEM_PROPERTY_KEYS: Final = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID",
        "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
        "MSG_TYPE", PROPERTY_SHARDING_KEY, PROPERTY_TIMER_DELIVER_MS, "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "__BORNHOST", PROPERTY_TRACE_CONTEXT,
        "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "INNER_NUM", "INNER_BASE", "__STARTDELIVERTIME",
    }
)  # fmt: skip

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """What the broker accepts: `max_body_size` is maxMessageSize, `delay_levels` the store's
    messageDelayLevel in milliseconds (level 1 first), `timer_max_delay_ms` timerMaxDelaySec
    in milliseconds, or None when the timer wheel is off (timerWheelEnable=false)."""

    max_body_size: int
    delay_levels: Sequence[int]
    timer_max_delay_ms: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """A message ready for the store: its properties in 4.x names."""

    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    message_id: str
    message_group: str
    transactional: bool = False


def to_store(message: Message, limits: Limits, now_ms: int) -> Outgoing:
    """The stored form of `message`, or `Rejected` saying what is wrong with it."""
    system = message.system_properties
    if not system.message_id.strip():
        raise Rejected(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    properties = _user_properties(message.user_properties)
    properties[PROPERTY_UNIQ_KEY] = system.message_id
    properties[PROPERTY_PRODUCER_GROUP] = message.topic.name
    if system.HasField("tag"):
        properties[PROPERTY_TAGS] = _checked_tag(system.tag)
    keys = [_checked_key(key) for key in system.keys if key]
    if keys:
        properties[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
    group = _checked_group(system.message_group) if system.HasField("message_group") else ""
    if group:
        properties[PROPERTY_SHARDING_KEY] = group
    if system.HasField("trace_context") and system.trace_context:
        properties[PROPERTY_TRACE_CONTEXT] = _no_control(
            system.trace_context, Code.BAD_REQUEST, "trace context"
        )
    deliver_at = _delivery_ms(message) if system.HasField("delivery_timestamp") else None
    _check_type(system.message_type, group, deliver_at)
    if deliver_at is not None:
        if limits.timer_max_delay_ms is None:
            # The level alone: a timer property would make the store refuse the message
            # (WHEEL_TIMER_NOT_ENABLE) when its time has come and there is no level.
            level = delay_level(deliver_at - now_ms, limits.delay_levels)
            if level:
                properties[PROPERTY_DELAY] = str(level)
        elif deliver_at - now_ms > limits.timer_max_delay_ms:
            raise Rejected(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery time {deliver_at - now_ms} ms ahead is past timerMaxDelaySec "
                f"({limits.timer_max_delay_ms // 1000} s)",
            )
        else:
            properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_at)
    transactional = system.message_type == MessageType.TRANSACTION
    if transactional:
        properties[PROPERTY_TRANSACTION_PREPARED] = "true"
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = system.orphaned_transaction_recovery_duration.seconds
            properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(0, seconds))
    body = _body(message, limits.max_body_size)
    born = system.born_timestamp
    if system.HasField("born_timestamp") and not _valid_timestamp(born.seconds, born.nanos):
        # stored, it would be a time no 5.x consumer can be handed (see `from_store`)
        raise Rejected(Code.BAD_REQUEST, "born timestamp is not a valid time")
    born_ms = born.seconds * 1000 + born.nanos // 1_000_000
    if not system.HasField("born_timestamp") or born_ms <= 0:
        born_ms = now_ms
    return Outgoing(body, properties, born_ms, system.message_id, group, transactional)


def delay_level(wait_ms: int, levels: Sequence[int]) -> int:
    """The first delay level (1-based) at least `wait_ms` long; 0 when the time has come."""
    if wait_ms <= 0:
        return 0
    index = bisect.bisect_left(levels, wait_ms)
    if index >= len(levels):
        raise Rejected(
            Code.ILLEGAL_DELIVERY_TIME,
            f"delivery time {wait_ms} ms ahead is past the longest delay level "
            f"({levels[-1]} ms, messageDelayLevel; timerWheelEnable=false)",
        )
    return index + 1


def _check_type(kind: MessageType.ValueType, group: str, deliver_at: int | None) -> None:
    name = MessageType.Name(kind) if kind in MessageType.values() else str(kind)
    if kind in (MessageType.LITE, MessageType.PRIORITY):
        raise Rejected(Code.UNSUPPORTED, f"{name} messages are not served over gRPC yet")
    expected = {
        MessageType.NORMAL: (False, False),
        MessageType.TRANSACTION: (False, False),
        MessageType.FIFO: (True, False),
        MessageType.DELAY: (False, True),
    }.get(kind)
    if expected is None:
        raise Rejected(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"unknown message type {name}")
    if expected != (bool(group), deliver_at is not None):
        raise Rejected(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"a {name} message has "
            + ("a message group" if kind is MessageType.FIFO else "no message group")
            + " and "
            + ("a delivery timestamp" if kind is MessageType.DELAY else "no delivery timestamp"),
        )


def _user_properties(given: Mapping[str, str]) -> dict[str, str]:
    if len(given) > MAX_USER_PROPERTIES:
        raise Rejected(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"too many user properties, max is {MAX_USER_PROPERTIES}",
        )
    size = 0
    properties: dict[str, str] = {}
    for key, value in given.items():
        if key in SYSTEM_PROPERTY_KEYS:
            raise Rejected(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if not key:
            raise Rejected(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "a property key cannot be empty")
        _no_control(key, Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of a property")
        _no_control(value, Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of a property")
        size += len(key.encode()) + len(value.encode())
        properties[key] = value
    if size > MAX_USER_PROPERTY_BYTES:
        raise Rejected(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the user properties are {size} bytes, max is {MAX_USER_PROPERTY_BYTES}",
        )
    return properties


def _no_control(text: str, code: Code.ValueType, what: str) -> str:
    if _CONTROL.search(text):
        raise Rejected(code, f"{what} cannot contain control characters")
    return text


def _checked_tag(tag: str) -> str:
    if not tag.strip():
        raise Rejected(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be blank")
    if "|" in tag:
        raise Rejected(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    return _no_control(tag, Code.ILLEGAL_MESSAGE_TAG, "tag")


def _checked_key(key: str) -> str:
    if not key.strip():
        raise Rejected(Code.ILLEGAL_MESSAGE_KEY, "key cannot be only whitespace")
    return _no_control(key, Code.ILLEGAL_MESSAGE_KEY, "key")


def _checked_group(group: str) -> str:
    if not group.strip():
        raise Rejected(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be blank")
    if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
        raise Rejected(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"message group is longer than {MAX_MESSAGE_GROUP_BYTES - 1} bytes",
        )
    return _no_control(group, Code.ILLEGAL_MESSAGE_GROUP, "message group")


# google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z
TIMESTAMP_MIN_SECONDS: Final = -62_135_596_800
TIMESTAMP_MAX_SECONDS: Final = 253_402_300_799


def _valid_timestamp(seconds: int, nanos: int) -> bool:
    return TIMESTAMP_MIN_SECONDS <= seconds <= TIMESTAMP_MAX_SECONDS and 0 <= nanos < 10**9


def _timestamp_ms(millis: int) -> int:
    """`millis` within the range a Timestamp holds."""
    low, high = TIMESTAMP_MIN_SECONDS * 1000, TIMESTAMP_MAX_SECONDS * 1000 + 999
    return min(max(millis, low), high)


def _delivery_ms(message: Message) -> int:
    stamp = message.system_properties.delivery_timestamp
    if stamp.seconds < 0 or not 0 <= stamp.nanos < 1_000_000_000:
        raise Rejected(Code.ILLEGAL_DELIVERY_TIME, "delivery timestamp is not a valid time")
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def _body(message: Message, max_size: int) -> bytes:
    body = message.body
    if not body:
        raise Rejected(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    _check_digest(message)
    encoding = message.system_properties.body_encoding
    if encoding == Encoding.GZIP:
        body = _gunzip(body, max_size)
    elif encoding not in (Encoding.IDENTITY, Encoding.ENCODING_UNSPECIFIED):
        raise Rejected(Code.BAD_REQUEST, f"unknown body encoding {encoding}")
    if len(body) > max_size:
        raise Rejected(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_size}"
        )
    return body


def _gunzip(body: bytes, max_size: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        plain = inflater.decompress(body, max_size + 1)
    except zlib.error as exc:
        raise Rejected(Code.MESSAGE_CORRUPTED, f"GZIP body cannot be read: {exc}") from None
    if len(plain) > max_size or inflater.unconsumed_tail:
        raise Rejected(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_size} inflated"
        )
    if not inflater.eof:
        raise Rejected(Code.MESSAGE_CORRUPTED, "GZIP body is cut short")
    return plain


def _check_digest(message: Message) -> None:
    system = message.system_properties
    if not system.HasField("body_digest") or not system.body_digest.checksum:
        return
    digest = system.body_digest
    body = message.body
    if digest.type == DigestType.CRC32:
        actual = f"{zlib.crc32(body):08X}"
    elif digest.type == DigestType.MD5:
        actual = hashlib.md5(body, usedforsecurity=False).hexdigest()
    elif digest.type == DigestType.SHA1:
        actual = hashlib.sha1(body, usedforsecurity=False).hexdigest()
    else:
        return
    if actual.lstrip("0").upper() != digest.checksum.lstrip("0").upper():
        raise Rejected(Code.MESSAGE_CORRUPTED, "message body does not match its digest")


def from_store(stored: StoredMessage) -> Message:
    """A stored message as the 5.x clients read one: its real topic (a half or delayed message's
    REAL_TOPIC), 4.x properties back in their fields, the rest as user properties."""
    props = stored.properties
    message = Message(body=stored.body)
    message.topic.name = props.get(PROPERTY_REAL_TOPIC) or stored.topic
    system = message.system_properties
    system.message_id = props.get(PROPERTY_UNIQ_KEY) or stored.msg_id
    if props.get(PROPERTY_TAGS):
        system.tag = props[PROPERTY_TAGS]
    system.keys.extend(k for k in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k)
    if props.get(PROPERTY_SHARDING_KEY):
        system.message_group = props[PROPERTY_SHARDING_KEY]
    if props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
        system.message_type = MessageType.TRANSACTION
    elif system.HasField("message_group"):
        system.message_type = MessageType.FIFO
    else:
        system.message_type = MessageType.NORMAL
    system.body_encoding = Encoding.IDENTITY
    # As the proxy answers (MD5, upper-case hex): the clients check it. Not CRC32: the clients
    # disagree on its text (Python 8 hex digits, Node.js decimal), and the Node.js push
    # consumer discards, unconsumed, a message whose digest it reads as a mismatch.
    system.body_digest.type = DigestType.MD5
    system.body_digest.checksum = (
        hashlib.md5(stored.body, usedforsecurity=False).hexdigest().upper()
    )
    # A 4.x producer may store any 64-bit born time: clamped into what a Timestamp can hold,
    # or the message could never be handed to a 5.x consumer (each receive of it failed).
    system.born_timestamp.FromMilliseconds(_timestamp_ms(stored.born_timestamp))
    system.store_timestamp.FromMilliseconds(_timestamp_ms(stored.store_timestamp))
    system.born_host = stored.born_host[0]
    system.store_host = f"{stored.store_host[0]}:{stored.store_host[1]}"
    system.queue_id = stored.queue_id
    system.queue_offset = stored.queue_offset
    system.delivery_attempt = stored.reconsume_times + 1
    for key, value in props.items():
        if key not in SYSTEM_PROPERTY_KEYS:
            message.user_properties[key] = value
    return message
