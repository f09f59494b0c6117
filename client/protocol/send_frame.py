"""A producer's SEND_MESSAGE_V2 frame head, written from a per-topic template and the values that
change from send to send, without a header object, an extFields dict or a `RemotingCommand`.

The head is what `frame.encode_command_parts` gives for the command the producer used to build:
code SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE), language PYTHON, version DEFAULT_VERSION, the
connection's `opaque`, flag 0, no remark, and the extFields of `headers.send_v2_ext_fields` in a
msgpack header (serialisation 2)::

    int32 length, uint32 2 << 24 | headerLen       the frame's prefix, for the given body
    {code, language, version, opaque, flag,        msgpack map, keys in this order, integers and
     extFields: {a: group, b: topic,               strings in msgpack's smallest forms
                 c: default topic, d: queue nums,
                 e: queueId, f: sysFlag,
                 g: bornTimestamp, h: flag,
                 i: properties, j: "0", k: "false",
                 m: batch}}

`SendFrameTemplate` holds what the sends of one topic by one producer share, the msgpack bytes
of the parts before the opaque, between the opaque and queueId, and after the properties, made
once. `encode_send_head` is called for every send; its compiled twin (client/remoting/_codec.pyx)
writes the template's bytes and the varying fields into one bytes object. This pure twin builds
the command and encodes it, the reference: same bytes, same errors (EncodeError for a frame the
protocol cannot carry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgpack  # type: ignore[import-untyped]

from tidemq.client.protocol.headers import send_v2_ext_fields
from tidemq.client.remoting.codes import DEFAULT_VERSION, LanguageCode, RequestCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import encode_command_parts
from tidemq.common import speedups

__all__ = ["SendFrameTemplate", "encode_send_head", "send_frame_template"]

_SEND_V2: Final = int(RequestCode.SEND_MESSAGE_V2)
_SEND_BATCH: Final = int(RequestCode.SEND_BATCH_MESSAGE)
_PYTHON: Final = int(LanguageCode.PYTHON)
_MSGPACK: Final = SerializeType.MSGPACK


@dataclass(frozen=True, slots=True)
class SendFrameTemplate:
    """The parts of a send's frame head that one producer's sends to one topic share.

    `head`, `middle` and `tail` are msgpack bytes (see the module docstring): the map's start up
    to the "opaque" key; "flag" to the "e" key (the extFields' constant first four); the three
    constant extFields after the properties. None when a part cannot be encoded (a group with a
    lone surrogate): every send then takes the pure path, which raises as it always did."""

    code: int
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    batch: bool
    head: bytes | None
    middle: bytes | None
    tail: bytes | None

    def ext_fields(
        self, queue_id: int, sys_flag: int, born_timestamp: int, flag: int, properties: str | None
    ) -> dict[str, str]:
        """The extFields of one send of these values (`headers.send_v2_ext_fields`)."""
        return send_v2_ext_fields(
            self.producer_group,
            self.topic,
            self.default_topic,
            self.default_topic_queue_nums,
            queue_id,
            sys_flag,
            born_timestamp,
            flag,
            properties,
            self.batch,
        )


def _packed(*items: object) -> bytes:
    return b"".join(msgpack.packb(item, use_bin_type=True) for item in items)


def send_frame_template(
    producer_group: str,
    topic: str,
    default_topic: str,
    default_topic_queue_nums: int,
    batch: bool,
) -> SendFrameTemplate:
    """The template of a producer's sends (or batches) to `topic`."""
    code = _SEND_BATCH if batch else _SEND_V2
    head: bytes | None
    middle: bytes | None
    tail: bytes | None
    try:
        # 6 header keys (no remark); 12 extFields (properties given)
        head = b"\x86" + _packed("code", code, "language", _PYTHON)
        head += _packed("version", DEFAULT_VERSION, "opaque")
        middle = _packed("flag", 0, "extFields") + b"\x8c"
        middle += _packed("a", producer_group, "b", topic, "c", default_topic)
        middle += _packed("d", str(default_topic_queue_nums), "e")
        tail = _packed("j", "0", "k", "false", "m", "true" if batch else "false")
    except (ValueError, TypeError, OverflowError, UnicodeEncodeError):
        head = middle = tail = None
    return SendFrameTemplate(
        code,
        producer_group,
        topic,
        default_topic,
        default_topic_queue_nums,
        batch,
        head,
        middle,
        tail,
    )


def encode_send_head(
    template: SendFrameTemplate,
    opaque: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str | None,
    body: bytes,
) -> bytes:
    """The frame's prefix and msgpack header of one send of `body` (module docstring)."""
    ext = template.ext_fields(queue_id, sys_flag, born_timestamp, flag, properties)
    command = RemotingCommand(
        template.code, _PYTHON, DEFAULT_VERSION, opaque, 0, None, ext, body, _MSGPACK
    )
    return encode_command_parts(command)[0]


encode_send_head = speedups.select(encode_send_head, "tidemq.client.remoting._codec")
