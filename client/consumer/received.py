"""Pull response bodies into `ReceivedMessage`s, one pass per body: what consumers receive.

A body is CommitLog records back to back (RocketMQ's v1 layout, see `store.record`). Records
with IPv4 hosts and an uncompressed body (what brokers normally hold) have a fixed layout up to
the body, read with one unpack:

    0 total  4 magic  8 body CRC  12 queue id  16 flag  20 queue offset  28 physical offset
    36 sys flag  40 born timestamp  48 born host (8)  56 store timestamp  64 store host (8)
    72 reconsume times  76 prepared transaction offset  84 body length  88 body
    then topic length (1) + topic, properties length (2) + properties

Everything a listener may never read stays raw in the message (properties, hosts; see
`ReceivedMessage`). Any other record (IPv6 hosts, a compressed body) and any record whose lengths
disagree goes through `store.record.decode_record`, so a damaged body raises what that raises
(`RecordFormatError`), and the result equals `ReceivedMessage.from_stored` of it. Compressed
bodies are inflated after every record was decoded, so a body with both a damaged record and a
body that does not inflate raises the RecordFormatError, as decoding all, then inflating, did.
"""

from __future__ import annotations

import struct
from typing import Final

from tidemq.client.inflate import inflate_body
from tidemq.client.message import (
    UNSET,
    ReceivedMessage,
    _ReceivedFields,
    fields_of_stored,
    frozen,
)
from tidemq.common import speedups
from tidemq.store.layout import (
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    HEAD_V4_FORMAT,
    MAGIC_V1,
)
from tidemq.store.record import decode_record

_HEAD: Final = struct.Struct(HEAD_V4_FORMAT)
_GENERAL_PATH: Final = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6 | FLAG_COMPRESSED


def decode_received(
    body: bytes | bytearray | memoryview, broker_name: str
) -> list[ReceivedMessage]:
    """The messages of a pull response body, in order (see the module docstring)."""
    data = body if type(body) is bytes else bytes(body)
    end = len(data)
    unpack = _HEAD.unpack_from
    new = _ReceivedFields
    received = ReceivedMessage
    unset = UNSET
    out: list[ReceivedMessage] = []
    append = out.append
    inflate: list[_ReceivedFields] = []
    topic_key = b""  # the last topic's length byte and bytes, and its text
    topic = ""
    pos = 0
    while pos < end:
        if pos + 88 > end:
            pos = _general(data, pos, broker_name, out, inflate)  # a short tail: raises
            continue
        (
            total,
            magic,
            _crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            _prepared,
            body_len,
        ) = unpack(data, pos)
        record_end = pos + total
        at = pos + 88 + body_len  # the topic's length byte
        if (
            sys_flag & _GENERAL_PATH
            or magic != MAGIC_V1
            or record_end > end
            or body_len < 0
            or at + 3 > record_end
        ):
            pos = _general(data, pos, broker_name, out, inflate)
            continue
        topic_end = at + 1 + data[at]
        props_at = topic_end + 2
        # the properties' length is a signed short: a high first byte is negative, refused
        if (
            props_at > record_end
            or data[topic_end] > 0x7F
            or props_at + (data[topic_end] << 8 | data[topic_end + 1]) != record_end
        ):
            pos = _general(data, pos, broker_name, out, inflate)
            continue
        if not data.startswith(topic_key, at) or len(topic_key) != topic_end - at:
            topic_key = data[at:topic_end]
            topic = topic_key[1:].decode("utf-8", "replace")
        msg = new()
        msg.topic = topic
        msg.body = data[pos + 88 : at]
        msg.queue_id = queue_id
        msg.queue_offset = queue_offset
        msg.broker_name = broker_name
        msg.store_timestamp = store_timestamp
        msg.born_timestamp = born_timestamp
        msg.reconsume_times = reconsume_times
        msg.commit_log_offset = physical_offset
        msg.sys_flag = sys_flag
        msg.flag = flag
        msg._raw_properties = data[props_at:record_end]
        msg._raw_born_host = born_host
        msg._raw_store_host = store_host
        msg._properties = msg._tags = msg._keys = msg._msg_id = unset
        msg._offset_msg_id = msg._born_host = msg._store_host = unset
        msg.__class__ = received  # frozen() inline: a call per message is 5% of the loop
        append(msg)  # type: ignore[arg-type]  # a ReceivedMessage now
        pos = record_end
    for fields in inflate:
        fields.body = inflate_body(fields.body)
        frozen(fields)
    return out


# The compiled twin (client/consumer/_received.pyx) when built: the same loop in C, sending the
# records it does not read itself to `_general` below. It fills each message's slots directly and
# leaves the message untracked by the cyclic garbage collector (Python code cannot untrack an
# object).
decode_received = speedups.select(decode_received, "tidemq.client.consumer._received")


def _general(
    data: bytes,
    pos: int,
    broker_name: str,
    out: list[ReceivedMessage],
    inflate: list[_ReceivedFields],
) -> int:
    """Decode the record at `pos` the long way into `out`; returns where the next one starts.

    Raises RecordFormatError if it is not a record. A compressed one joins `inflate` (its
    fields are in `out` already, made a ReceivedMessage once inflated).
    """
    stored = decode_record(data, pos, check_crc=False)
    fields = fields_of_stored(stored, broker_name)
    if stored.sys_flag & FLAG_COMPRESSED:
        inflate.append(fields)
        out.append(fields)  # type: ignore[arg-type]  # a ReceivedMessage once inflated
    else:
        out.append(frozen(fields))
    return pos + stored.total_size
