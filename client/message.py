"""Messages as users see them: `Message` to send, `ReceivedMessage` from consumers, `SendResult`.

Properties travel as RocketMQ's `name\\x01value\\x02` text; the well-known ones (TAGS, KEYS,
DELAY, WAIT, UNIQ_KEY) are fields here. `msg_id` of a sent or received message is its UNIQ_KEY,
the id the producer made (RocketMQ's client msgId); `offset_msg_id` is the broker's id, which
encodes the storing broker and the physical offset.
"""

from __future__ import annotations

import enum
import itertools
import os
import random
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.store.record import (
    FLAG_COMPRESSED,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    StoredMessage,
    encode_properties,
)

PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
KEY_SEPARATOR = " "


class SendStatus(enum.Enum):
    """SEND_OK, or stored with a warning: the three others are results, not errors."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Iterable[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    wait_store_msg_ok: bool = True
    flag: int = 0

    @property
    def key_list(self) -> list[str]:
        if self.keys is None:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(KEY_SEPARATOR) if k]
        return [k for k in self.keys if k]

    def all_properties(self, uniq_key: str | None = None) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        keys = self.key_list
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY] = str(self.delay_level)
        props[PROPERTY_WAIT] = "true" if self.wait_store_msg_ok else "false"
        if uniq_key is not None:
            props.setdefault(PROPERTY_UNIQ_KEY, uniq_key)
        return props

    def encoded_properties(self, uniq_key: str | None = None) -> str:
        return encode_properties(self.all_properties(uniq_key))


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    topic: str
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    broker_name: str
    store_timestamp: int
    born_timestamp: int
    reconsume_times: int
    commit_log_offset: int
    store_host: str
    born_host: str
    sys_flag: int
    flag: int

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(PROPERTY_DELAY, "0") or 0)

    @classmethod
    def from_stored(cls, stored: StoredMessage, broker_name: str) -> ReceivedMessage:
        body = stored.body
        if stored.sys_flag & FLAG_COMPRESSED:
            body = zlib.decompress(body)
        props = stored.properties
        keys = tuple(k for k in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k)
        offset_id = stored.msg_id
        return cls(
            topic=stored.topic,
            body=body,
            tags=props.get(PROPERTY_TAGS),
            keys=keys,
            properties=props,
            msg_id=props.get(PROPERTY_UNIQ_KEY, offset_id),
            offset_msg_id=offset_id,
            queue_id=stored.queue_id,
            queue_offset=stored.queue_offset,
            broker_name=broker_name,
            store_timestamp=stored.store_timestamp,
            born_timestamp=stored.born_timestamp,
            reconsume_times=stored.reconsume_times,
            commit_log_offset=stored.physical_offset,
            store_host=f"{stored.store_host[0]}:{stored.store_host[1]}",
            born_host=f"{stored.born_host[0]}:{stored.born_host[1]}",
            sys_flag=stored.sys_flag,
            flag=stored.flag,
        )


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK


class UniqueIdGenerator:
    """RocketMQ's MessageClientIDSetter layout: 16 bytes as 32 upper-case hex digits.

    `[4 ip][2 pid][4 random per process][4 ms since the start of the month][2 counter]`: ids are
    unique across processes (pid, random) and over time (clock, counter).
    """

    def __init__(self, ip: bytes) -> None:
        prefix = ip[-4:].rjust(4, b"\x00") + struct.pack(">H", os.getpid() & 0xFFFF)
        self._prefix = prefix + random.getrandbits(32).to_bytes(4, "big")
        self._counter = itertools.count(random.getrandbits(16))
        self._lock = threading.Lock()
        now = time.localtime()
        month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        self._base_ms = int(month_start * 1000)

    def next_id(self) -> str:
        with self._lock:
            count = next(self._counter) & 0xFFFF
        elapsed = (int(time.time() * 1000) - self._base_ms) & 0xFFFFFFFF
        return (self._prefix + struct.pack(">IH", elapsed, count)).hex().upper()
