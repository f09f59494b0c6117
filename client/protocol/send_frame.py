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

A signed send (client/remoting/signing.py) has three or four more extFields, after `m` in the
order `RequestSigner.sign` adds them: `AccessKey`, `SecurityToken` when the account has one, and
`Signature`, the Base64 of the HMAC-SHA1 of the values in key order, then the body. In that
order (code points: upper case first) the values are::

    AccessKey [SecurityToken] a b c d | e f g h i | j k m

the first run and the last constant for one template and account. `SignedSendTemplate` holds the
account's HMAC already fed the first run (copied per send), the last run's bytes, and the
template's msgpack parts for the longer map. `encode_signed_send_head` is what the command path
gives (`sign_request`, then the general encode); its compiled twin feeds a stack copy of that
HMAC's state (an `_HmacSha1`'s, client/remoting/_codec.pyx) the varying values and the body
and writes the head with the Base64 in C.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import msgpack  # type: ignore[import-untyped]

from tidemq.client.protocol.headers import send_v2_ext_fields
from tidemq.client.remoting.codes import DEFAULT_VERSION, LanguageCode, RequestCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import encode_command_parts
from tidemq.client.remoting.signing import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, sign_request
from tidemq.common import speedups
from tidemq.common.mac import Mac

__all__ = [
    "SendFrameTemplate",
    "SignedSendTemplate",
    "encode_send_head",
    "encode_signed_send_head",
    "send_frame_template",
    "signed_send_template",
]

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


_EXT_FIELDS_KEY: Final = _packed("flag", 0, "extFields")


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
        middle = _EXT_FIELDS_KEY + b"\x8c"
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


@dataclass(frozen=True, slots=True)
class SignedSendTemplate:
    """What one account's signed sends with one `SendFrameTemplate` share (module docstring).

    `prefix_mac`: a copy of `key` fed the signed values before queueId; `middle`: the template's
    middle with the longer extFields map; `tail`: the template's tail, then the signer's fields
    up to the "Signature" key; `suffix`: the signed values after the properties (j, k, m). The
    four are None when a part cannot be encoded: every send then takes the pure path."""

    template: SendFrameTemplate
    access_key: str
    key: Mac = field(repr=False)
    security_token: str = field(repr=False)
    prefix_mac: Mac | None = field(repr=False)
    middle: bytes | None
    tail: bytes | None
    suffix: bytes | None


def signed_send_template(
    template: SendFrameTemplate, access_key: str, key: Mac, security_token: str = ""
) -> SignedSendTemplate:
    """The signed sends of `template` by the account of `access_key` (`signing_key` of its
    secret key as `key`)."""
    prefix_mac: Mac | None = None
    middle: bytes | None = None
    tail: bytes | None = None
    suffix: bytes | None = None
    if template.middle is not None and template.tail is not None:
        try:
            prefix = access_key + security_token + template.producer_group + template.topic
            prefix += template.default_topic + str(template.default_topic_queue_nums)
            mac = key.copy()
            mac.update(prefix.encode("utf-8"))
            signer_fields: tuple[str, ...] = (ACCESS_KEY, access_key)
            if security_token:
                signer_fields += (SECURITY_TOKEN, security_token)
            tail = template.tail + _packed(*signer_fields, SIGNATURE)
            # the template's middle ends with the map's start (fixmap of 12): 2 or 3 more
            count = 12 + len(signer_fields) // 2 + 1
            if count > 15:  # not a fixmap: the general encode's shape
                raise ValueError(count)
            at = len(_EXT_FIELDS_KEY)
            middle = template.middle[:at] + bytes((0x80 | count,)) + template.middle[at + 1 :]
            suffix = ("0" + "false" + ("true" if template.batch else "false")).encode("ascii")
            prefix_mac = mac
        except (ValueError, TypeError, OverflowError, UnicodeEncodeError):
            prefix_mac = middle = tail = suffix = None
    return SignedSendTemplate(
        template, access_key, key, security_token, prefix_mac, middle, tail, suffix
    )


def encode_signed_send_head(
    signed: SignedSendTemplate,
    opaque: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str | None,
    body: bytes,
) -> bytes:
    """The frame's prefix and msgpack header of one signed send of `body`: the command path's
    (`sign_request` on the send's command, then its encode)."""
    template = signed.template
    ext = template.ext_fields(queue_id, sys_flag, born_timestamp, flag, properties)
    command = RemotingCommand(
        template.code, _PYTHON, DEFAULT_VERSION, opaque, 0, None, ext, body, _MSGPACK
    )
    sign_request(command, signed.access_key, signed.key, signed.security_token)
    return encode_command_parts(command)[0]


encode_signed_send_head = speedups.select(encode_signed_send_head, "tidemq.client.remoting._codec")
