"""Messages as users see them: `Message` to send, `ReceivedMessage` from consumers, `SendResult`.

Properties travel as RocketMQ's `name\\x01value\\x02` text; the well-known ones (TAGS, KEYS,
DELAY, WAIT, UNIQ_KEY, and RocketMQ 5's TIMER_DELIVER_MS / TIMER_DELAY_MS as `deliver_at_ms` /
`delay_ms`) are fields here. `msg_id` of a sent or received message is its UNIQ_KEY,
the id the producer made (RocketMQ's client msgId); `offset_msg_id` is the broker's id, which
encodes the storing broker and the physical offset.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import os
import random
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tidemq.client.inflate import inflate_body
from tidemq.client.protocol.heartbeat import ExpressionType, MessageQueue
from tidemq.common import speedups
from tidemq.common.frozen import maker
from tidemq.store.layout import FLAG_COMPRESSED
from tidemq.store.record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    StoredMessage,
    decode_properties,
    encode_properties,
    message_id,
    pack_host,
    unpack_host,
)
from tidemq.store.timer_message import PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS

PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
KEY_SEPARATOR = " "
# Items of Message.encoded_properties's one-string path, as encode_properties writes them.
_TAGS_ITEM: Final = f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}"
_WAIT_TRUE: Final = f"{PROPERTY_WAIT}{NAME_VALUE_SEPARATOR}true{PROPERTY_SEPARATOR}"
_WAIT_FALSE: Final = f"{PROPERTY_WAIT}{NAME_VALUE_SEPARATOR}false{PROPERTY_SEPARATOR}"
_UNIQ_ITEM: Final = f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}"


class SendStatus(enum.Enum):
    """SEND_OK, or stored with a warning: the three others are results, not errors."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class Message:
    """A message to send (RocketMQ's Message).

    `body` is bytes; `tags` one tag (a consumer's subscription filters on it); `keys` what the
    broker's index finds the message by (mqadmin queryMsgByKey): one str with the keys
    separated by a space, as RocketMQ's setKeys takes them, or an iterable of keys. Either
    travels as the KEYS property, the keys joined by a space, and a consumer reads it back as
    `ReceivedMessage.keys`, that one str. `properties` are user properties; `delay_level`
    1-18 delays delivery by RocketMQ's levels (1s 5s 10s 30s 1m ... 2h); `wait_store_msg_ok`
    False lets the broker answer before the message is flushed or replicated; `flag` is
    RocketMQ's user flag, stored as is.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Iterable[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    wait_store_msg_ok: bool = True
    flag: int = 0
    # A timer message (RocketMQ 5, any time up to the broker's timerMaxDelaySec): delivered at
    # this epoch millisecond (TIMER_DELIVER_MS), or this many ms after the broker stores it
    # (TIMER_DELAY_MS). A delay_level wins over both, as in RocketMQ.
    deliver_at_ms: int | None = None
    delay_ms: int | None = None

    @property
    def key_list(self) -> list[str]:
        """Each of the message's keys (a str of keys split at its spaces)."""
        if self.keys is None:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(KEY_SEPARATOR) if k]
        return [k for k in self.keys if k]

    def all_properties(self, uniq_key: str | None = None) -> dict[str, str]:
        """The properties a send carries: the user's, with TAGS, KEYS, DELAY, WAIT and, when
        given and not set already, UNIQ_KEY."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        keys = self.key_list
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY] = str(self.delay_level)
        if self.deliver_at_ms is not None:
            props[PROPERTY_TIMER_DELIVER_MS] = str(int(self.deliver_at_ms))
        if self.delay_ms is not None:
            props[PROPERTY_TIMER_DELAY_MS] = str(int(self.delay_ms))
        props[PROPERTY_WAIT] = "true" if self.wait_store_msg_ok else "false"
        if uniq_key is not None:
            props.setdefault(PROPERTY_UNIQ_KEY, uniq_key)
        return props

    def encoded_properties(self, uniq_key: str | None = None) -> str:
        """`all_properties` as the send header carries them (name\x01value\x02...)."""
        if (
            self.properties
            or self.keys
            or self.delay_level > 0
            or self.deliver_at_ms is not None
            or self.delay_ms is not None
            or uniq_key is None
        ):
            return encode_properties(self.all_properties(uniq_key))
        # What all_properties encodes for a message of at most a tag, as one string: most
        # sends, and a dict per send for three items cost more than the rest of this method.
        wait = _WAIT_TRUE if self.wait_store_msg_ok else _WAIT_FALSE
        tags = self.tags
        if tags:
            return f"{_TAGS_ITEM}{tags}{PROPERTY_SEPARATOR}{wait}{_UNIQ_ITEM}{uniq_key}\x02"
        return f"{wait}{_UNIQ_ITEM}{uniq_key}{PROPERTY_SEPARATOR}"


_FIELDS: Final = (
    "topic",
    "body",
    "tags",
    "keys",
    "properties",
    "msg_id",
    "offset_msg_id",
    "queue_id",
    "queue_offset",
    "broker_name",
    "store_timestamp",
    "born_timestamp",
    "reconsume_times",
    "commit_log_offset",
    "store_host",
    "born_host",
    "sys_flag",
    "flag",
)


class _ReceivedFields:
    """The slots of a `ReceivedMessage`; decoders fill them, then make the object frozen.

    What a listener may never read stays raw until it is read: the properties (and the tags,
    keys and msg_id that come from them), the hosts and the broker's message id. Each of those
    has a cache slot, UNSET until computed (or set by the keyword constructor), and the
    `_raw_*` slots hold the record's bytes they are decoded from.
    """

    __slots__ = (
        "_born_host",
        "_keys",
        "_msg_id",
        "_offset_msg_id",
        "_properties",
        "_raw_born_host",
        "_raw_properties",
        "_raw_store_host",
        "_store_host",
        "_tags",
        "body",
        "born_timestamp",
        "broker_name",
        "commit_log_offset",
        "flag",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_timestamp",
        "sys_flag",
        "topic",
    )

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    broker_name: str
    store_timestamp: int
    born_timestamp: int
    reconsume_times: int
    commit_log_offset: int
    sys_flag: int
    flag: int
    _raw_properties: bytes
    _raw_born_host: bytes
    _raw_store_host: bytes
    _properties: Any
    _tags: Any
    _keys: Any
    _msg_id: Any
    _offset_msg_id: Any
    _born_host: Any
    _store_host: Any

    def unset_caches(self) -> None:
        """Mark every lazily decoded field as not decoded yet (decoders, before freezing)."""
        self._properties = self._tags = self._keys = self._msg_id = UNSET
        self._offset_msg_id = self._born_host = self._store_host = UNSET


UNSET: Final[Any] = object()  # a lazily decoded field not decoded yet


class ReceivedMessage(_ReceivedFields):
    """A consumed message (RocketMQ's MessageExt); frozen, compared by its fields.

    Made by the consumers' decoder (`client.consumer.received.decode_received`); the keyword
    constructor is for building one by hand. Properties, tags, keys, msg_id, the hosts and
    offset_msg_id of a decoded message are decoded from its record when first read.
    """

    __slots__ = ()

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        tags: str | None,
        keys: str | None,
        properties: Mapping[str, str],
        msg_id: str,
        offset_msg_id: str,
        queue_id: int,
        queue_offset: int,
        broker_name: str,
        store_timestamp: int,
        born_timestamp: int,
        reconsume_times: int,
        commit_log_offset: int,
        store_host: str,
        born_host: str,
        sys_flag: int,
        flag: int,
    ) -> None:
        given = {
            "topic": topic,
            "body": body,
            "queue_id": queue_id,
            "queue_offset": queue_offset,
            "broker_name": broker_name,
            "store_timestamp": store_timestamp,
            "born_timestamp": born_timestamp,
            "reconsume_times": reconsume_times,
            "commit_log_offset": commit_log_offset,
            "sys_flag": sys_flag,
            "flag": flag,
            "_raw_properties": b"",
            "_raw_born_host": b"",
            "_raw_store_host": b"",
            "_properties": properties,
            "_tags": tags,
            "_keys": keys,
            "_msg_id": msg_id,
            "_offset_msg_id": offset_msg_id,
            "_born_host": born_host,
            "_store_host": store_host,
        }
        for name, value in given.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return self.fields() == other.fields()

    __hash__ = None  # type: ignore[assignment]  # as the dataclass it was: properties is a dict

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.fields().items())
        return f"ReceivedMessage({shown})"

    def __reduce__(self) -> tuple[object, ...]:
        # pickle and copy: rebuilt from the decoded fields (slots set through __setattr__
        # would be refused, and the not-yet-decoded marker is not picklable by identity)
        return (_from_fields, (self.fields(),))

    def fields(self) -> dict[str, object]:
        """Every field by name, decoded (what equality compares)."""
        return {name: getattr(self, name) for name in _FIELDS}

    def replace(self, **changes: object) -> ReceivedMessage:
        """A copy with some public fields changed (what is still raw stays raw, shared)."""
        copy = _ReceivedFields()
        for name in _ReceivedFields.__slots__:
            setattr(copy, name, getattr(self, name))
        for name, value in changes.items():
            if name not in _FIELDS:
                raise TypeError(f"ReceivedMessage has no field {name!r}")
            setattr(copy, name if name in _PLAIN else f"_{name}", value)
        return frozen(copy)

    # --- decoded when first read ------------------------------------------------------------

    @property
    def properties(self) -> Mapping[str, str]:
        """Every property: the user's and RocketMQ's (TAGS, KEYS, UNIQ_KEY, ...)."""
        props = self._properties
        if props is UNSET:
            props = decode_properties(self._raw_properties.decode("utf-8", "replace"))
            object.__setattr__(self, "_properties", props)
        return props  # type: ignore[no-any-return]

    @property
    def tags(self) -> str | None:
        """Its tag, None when it has none."""
        tags = self._tags
        if tags is UNSET:
            tags = self.properties.get(PROPERTY_TAGS)
            object.__setattr__(self, "_tags", tags)
        return tags  # type: ignore[no-any-return]

    @property
    def keys(self) -> str | None:
        """The message's keys as RocketMQ's getKeys() gives them: one str, the keys separated
        by a space (as its producer gave them, a str or several), None when it has none."""
        keys = self._keys
        if keys is UNSET:
            keys = self.properties.get(PROPERTY_KEYS) or None
            object.__setattr__(self, "_keys", keys)
        return keys  # type: ignore[no-any-return]

    @property
    def key_list(self) -> list[str]:
        """Each of the message's keys (`keys` split at its spaces)."""
        keys = self.keys
        return [k for k in keys.split(KEY_SEPARATOR) if k] if keys else []

    @property
    def msg_id(self) -> str:
        """The client msgId its producer gave it (UNIQ_KEY), else its offsetMsgId."""
        msg_id = self._msg_id
        if msg_id is UNSET:
            msg_id = self.properties.get(PROPERTY_UNIQ_KEY)
            if msg_id is None:
                msg_id = self.offset_msg_id
            object.__setattr__(self, "_msg_id", msg_id)
        return msg_id  # type: ignore[no-any-return]

    @property
    def offset_msg_id(self) -> str:
        """The broker's id of the stored message: its store host and CommitLog offset."""
        offset_id = self._offset_msg_id
        if offset_id is UNSET:
            offset_id = message_id(self._raw_store_host, self.commit_log_offset)
            object.__setattr__(self, "_offset_msg_id", offset_id)
        return offset_id  # type: ignore[no-any-return]

    @property
    def store_host(self) -> str:
        """The broker that stored it, "ip:port"."""
        host = self._store_host
        if host is UNSET:
            host = _host_text(self._raw_store_host)
            object.__setattr__(self, "_store_host", host)
        return host  # type: ignore[no-any-return]

    @property
    def born_host(self) -> str:
        """The producer's address, "ip:port"."""
        host = self._born_host
        if host is UNSET:
            host = _host_text(self._raw_born_host)
            object.__setattr__(self, "_born_host", host)
        return host  # type: ignore[no-any-return]

    @property
    def message_queue(self) -> MessageQueue:
        """The queue it was consumed from."""
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @property
    def delay_level(self) -> int:
        """The delay level it was sent with (0: none)."""
        return int(self.properties.get(PROPERTY_DELAY, "0") or 0)

    @classmethod
    def from_stored(cls, stored: StoredMessage, broker_name: str) -> ReceivedMessage:
        """A decoded record as consumers hand it to listeners (its body inflated)."""
        fields = fields_of_stored(stored, broker_name)
        if stored.sys_flag & FLAG_COMPRESSED:
            fields.body = inflate_body(fields.body)
        return frozen(fields)


def fields_of_stored(stored: StoredMessage, broker_name: str) -> _ReceivedFields:
    """A `ReceivedMessage`'s fields from a decoded record, the body as stored (not inflated)."""
    fields = _ReceivedFields()
    fields.topic = stored.topic
    fields.body = stored.body
    fields.queue_id = stored.queue_id
    fields.queue_offset = stored.queue_offset
    fields.broker_name = broker_name
    fields.store_timestamp = stored.store_timestamp
    fields.born_timestamp = stored.born_timestamp
    fields.reconsume_times = stored.reconsume_times
    fields.commit_log_offset = stored.physical_offset
    fields.sys_flag = stored.sys_flag
    fields.flag = stored.flag
    fields._raw_properties = b""
    fields._raw_born_host = pack_host(*stored.born_host)
    fields._raw_store_host = pack_host(*stored.store_host)
    fields.unset_caches()
    fields._properties = stored.properties
    return fields


def _from_fields(fields: dict[str, Any]) -> ReceivedMessage:
    return ReceivedMessage(**fields)


# Public fields held as they are; the others are read through a decoding property.
_PLAIN: Final = frozenset(_ReceivedFields.__slots__) & frozenset(_FIELDS)


def frozen(fields: _ReceivedFields) -> ReceivedMessage:
    """`fields`, filled in, as the ReceivedMessage it now is (no copy: its class changes).

    Decoders fill a plain slots object and change its class: a frozen object's fields can only
    be set through object.__setattr__, which costs a microsecond per message of 18 fields.
    """
    fields.__class__ = ReceivedMessage
    return fields  # type: ignore[return-value]  # its class is ReceivedMessage now


def _host_text(raw: bytes) -> str:
    ip, port = unpack_host(raw)
    return f"{ip}:{port}"


@dataclass(frozen=True, slots=True)
class SendResult:
    """A send's outcome (RocketMQ's SendResult): `status`, the client `msg_id` (UNIQ_KEY) and
    the broker's `offset_msg_id`, the queue it went to and its offset there."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int

    @property
    def ok(self) -> bool:
        """SEND_OK: stored, flushed and replicated as the broker is configured to."""
        return self.status is SendStatus.SEND_OK


# SendResult(...) positionally, without the frozen __init__'s object.__setattr__ per field
_MAKE_SEND_RESULT: Final = maker(SendResult)


def send_result(
    status: SendStatus,
    msg_id: str,
    offset_msg_id: str,
    message_queue: MessageQueue,
    queue_offset: int,
) -> SendResult:
    """`SendResult(status, msg_id, offset_msg_id, message_queue, queue_offset)`, made once per
    send: its compiled twin (client/remoting/_codec.pyx) writes the five slots in C."""
    return _MAKE_SEND_RESULT(status, msg_id, offset_msg_id, message_queue, queue_offset)


send_result = speedups.select(send_result, "tidemq.client.remoting._codec")


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """A subscription's filter (RocketMQ's MessageSelector): `by_tag("A || B")` on tags, or
    `by_sql("a BETWEEN 3 AND 5")` on properties, evaluated by brokers with
    enablePropertyFilter so that only matching messages leave them."""

    expression: str
    expression_type: ExpressionType = ExpressionType.TAG

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        """Messages whose tag is one of `expression` ("TagA || TagB"; "*": all)."""
        return cls(expression, ExpressionType.TAG)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """Messages whose properties match the SQL92 `expression` ("a BETWEEN 3 AND 5"),
        filtered by brokers with enablePropertyFilter."""
        return cls(expression, ExpressionType.SQL92)


def selector_of(expression: str | MessageSelector) -> MessageSelector:
    """A subscribe() argument as a selector: a plain string is a TAG expression."""
    return expression if isinstance(expression, MessageSelector) else MessageSelector(expression)


class UniqueIdGenerator:
    """RocketMQ's MessageClientIDSetter layout: 16 bytes as 32 upper-case hex digits.

    `[4 ip][2 pid][4 random per process][4 ms since the start of the month][2 counter]`: ids are
    unique across processes (pid, random) and over time (clock, counter).
    """

    def __init__(self, ip: bytes) -> None:
        prefix = ip[-4:].rjust(4, b"\x00") + struct.pack(">H", os.getpid() & 0xFFFF)
        self._prefix = (prefix + random.getrandbits(32).to_bytes(4, "big")).hex().upper()
        # next() of an itertools.count is one C call, atomic under the GIL: no lock needed
        self._counter = itertools.count(random.getrandbits(16))
        now = time.localtime()
        month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        self._base_ms = int(month_start * 1000)
        # The id up to its counter, for the millisecond it was made in: sends in one
        # millisecond (dozens, under load) format the clock once.
        self._head_ms = -1
        self._head = ""

    def next_id(self) -> str:
        count = next(self._counter) & 0xFFFF
        now_ms = int(time.time() * 1000)
        if now_ms != self._head_ms:
            self._head = f"{self._prefix}{(now_ms - self._base_ms) & 0xFFFFFFFF:08X}"
            self._head_ms = now_ms
        return self._head + _HEX_BYTE[count >> 8] + _HEX_BYTE[count & 0xFF]


# "00" .. "FF": a counter's four hex digits as two lookups instead of a format.
_HEX_BYTE: Final = tuple(f"{i:02X}" for i in range(256))
