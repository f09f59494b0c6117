"""POP over remoting (RocketMQ 5's codes): POP_MESSAGE (200050), ACK_MESSAGE (200051),
CHANGE_MESSAGE_INVISIBLETIME (200053), BATCH_ACK_MESSAGE (200151), on broker/pop/service.py.

POP_MESSAGE answers as RocketMQ's PopMessageProcessor: SUCCESS with the stored records back to
back as a pull's body, and in the header popTime, invisibleTime, reviveQid, restNum,
startOffsetInfo (`<t> <queueId> <startOffset>` per queue read, joined by `;`, t = 0 the topic,
1 its %RETRY%<group>) and msgOffsetInfo (`<t> <queueId> <offset>,<offset>...`), from which a
client builds each message's receipt handle (ExtraInfoUtil); PULL_NOT_FOUND when nothing came
within pollTime. ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME take the handle as `extraInfo`.
BATCH_ACK_MESSAGE's body is RocketMQ's BatchAckMessageRequestBody JSON:
{"brokerName", "acks": [{"c" group, "t" topic, "r" "1" for the retry topic, "so" start offset,
"q" queue, "rq" revive queue, "pt" pop time, "it" invisible time, "b" base64 of a Java BitSet's
bytes: bit i acknowledges start offset + i}]}.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from tidemq.broker.pop.receipt import ReceiptHandle, TopicType
from tidemq.broker.pop.service import PopRefused, PopResult, PopService, Refusal
from tidemq.broker.processors.decoding import request_body, request_header
from tidemq.broker.property_filter import property_filter
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.client.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)
from tidemq.client.protocol.heartbeat import ExpressionType
from tidemq.client.protocol.models import PERM_READ
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.tags import MATCH_ALL, parse_tag_expression

MAX_BATCH_ACKS: Final = 1024
MAX_BITSET_BYTES: Final = 1024  # 8192 offsets after one start offset


class PopProcessor:
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.POP_MESSAGE: "pop",
        RequestCode.ACK_MESSAGE: "ack",
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: "change_invisible_time",
        RequestCode.BATCH_ACK_MESSAGE: "batch_ack",
    }

    def __init__(self, state: BrokerState, pop: PopService) -> None:
        self.state = state
        self.pop_service = pop

    async def pop(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(PopMessageRequestHeader, request)
        if not self.state.config.broker_permission & PERM_READ:
            raise RequestRejected(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.state.advertised_address}] pop message is forbidden",
            )
        expression_type = (header.exp_type or ExpressionType.TAG.value).upper()
        if expression_type == ExpressionType.TAG.value:
            tags, record = parse_tag_expression(header.exp), None
        else:
            tags, record = (
                MATCH_ALL,
                property_filter(self.state.config, expression_type, header.exp),
            )
        try:
            result = await self.pop_service.pop(
                header.consumer_group,
                header.topic,
                header.queue_id,
                header.max_msg_nums,
                header.invisible_time,
                header.poll_time,
                tags,
                record,
                header.init_mode,
            )
        except PopRefused as refused:
            raise _rejected(refused) from None
        ext = {
            "popTime": str(result.pop_time),
            "invisibleTime": str(result.invisible_time),
            "reviveQid": str(result.revive_queue_id),
            "restNum": str(result.rest),
        }
        if not result.messages:
            return RemotingCommand.response_to(
                request, ResponseCode.PULL_NOT_FOUND, "no new message", ext
            )
        ext.update(offset_infos(result))
        response = RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, ext)
        response.body_views = tuple(memoryview(p.record) for p in result.messages)
        return response

    async def ack(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(AckMessageRequestHeader, request)
        handle = _with_offset(header.extra_info, header.queue_id, header.offset)
        try:
            await self.pop_service.ack(header.consumer_group, header.topic, handle)
        except PopRefused as refused:
            raise _rejected(refused) from None
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def change_invisible_time(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(ChangeInvisibleTimeRequestHeader, request)
        handle = _with_offset(header.extra_info, header.queue_id, header.offset)
        try:
            new = await self.pop_service.change_invisible(
                header.consumer_group, header.topic, handle, header.invisible_time
            )
        except PopRefused as refused:
            raise _rejected(refused) from None
        ext = {
            "popTime": str(new.pop_time),
            "invisibleTime": str(new.invisible_time),
            "reviveQid": str(new.revive_queue_id),
        }
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, ext)

    async def batch_ack(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        handles = request_body(
            lambda body: batch_ack_handles(body, self.pop_service.broker_name()),
            request,
            "BatchAckMessageRequestBody",
        )
        # The acks of one checkpoint in one revive record (PopService.ack_all); a refused
        # handle is answered after the others are written.
        by_group: dict[tuple[str, str], list[str]] = {}
        for group, topic, handle in handles:
            by_group.setdefault((group, topic), []).append(handle)
        refusals: list[PopRefused] = []
        for (group, topic), texts in by_group.items():
            answers = await self.pop_service.ack_all(group, topic, texts)
            refusals += [a for a in answers if isinstance(a, PopRefused)]
        if refusals:
            raise _rejected(refusals[0])
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


_REFUSAL_CODES: Final = {
    Refusal.NO_TOPIC: ResponseCode.TOPIC_NOT_EXIST,
    Refusal.NO_GROUP: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    Refusal.BAD_HANDLE: ResponseCode.MESSAGE_ILLEGAL,
    Refusal.POLLING_FULL: ResponseCode.POLLING_FULL,
}


def _rejected(refused: PopRefused) -> RequestRejected:
    return RequestRejected(
        _REFUSAL_CODES.get(refused.kind, ResponseCode.SYSTEM_ERROR), refused.reason
    )


def _with_offset(extra_info: str, queue_id: int, offset: int) -> str:
    """The handle an ack names: RocketMQ's extraInfo lacks the offset when the header gives it
    (7 fields: startOffset popTime invisibleTime reviveQid t brokerName queueId)."""
    parts = extra_info.split(" ")
    if len(parts) == 7:
        if parts[6] != str(queue_id):
            raise RequestRejected(ResponseCode.MESSAGE_ILLEGAL, "queueId differs from extraInfo")
        return f"{extra_info} {offset}"
    return extra_info


def offset_infos(result: PopResult) -> dict[str, str]:
    """startOffsetInfo and msgOffsetInfo of a pop's answer (see the module docstring)."""
    starts: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], list[int]] = {}
    for popped in result.messages:
        handle = popped.handle
        key = (handle.topic_type.value, handle.queue_id)
        starts.setdefault(key, handle.start_offset)
        offsets.setdefault(key, []).append(handle.offset)
    return {
        "startOffsetInfo": ";".join(f"{t} {q} {s}" for (t, q), s in starts.items()),
        "msgOffsetInfo": ";".join(
            f"{t} {q} {','.join(map(str, o))}" for (t, q), o in offsets.items()
        ),
    }


def batch_ack_handles(body: Body, broker_name: str) -> list[tuple[str, str, str]]:
    """(group, topic, handle text) for each acknowledged offset of a BATCH_ACK body."""
    obj: Any = loads_fastjson(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("acks"), list):
        raise BodyDecodeError("no acks list")
    acks = obj["acks"]
    if len(acks) > MAX_BATCH_ACKS:
        raise BodyDecodeError(f"more than {MAX_BATCH_ACKS} acks")
    out: list[tuple[str, str, str]] = []
    for ack in acks:
        if not isinstance(ack, dict):
            raise BodyDecodeError("an ack is not an object")
        group, topic = _text(ack, "c"), _text(ack, "t")
        kind = TopicType.RETRY if str(ack.get("r", "0")) == "1" else TopicType.NORMAL
        start = _int(ack, "so")
        bits = _bitset(ack.get("b"))
        for index in bits:
            handle = ReceiptHandle(
                start,
                _int(ack, "pt"),
                _int(ack, "it"),
                _int(ack, "rq"),
                kind,
                broker_name,
                _int(ack, "q"),
                start + index,
            )
            out.append((group, topic, handle.encode()))
    return out


def _bitset(value: object) -> list[int]:
    if not isinstance(value, str):
        raise BodyDecodeError("field 'b' is not a base64 bit set")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BodyDecodeError("field 'b' is not base64") from None
    if len(data) > MAX_BITSET_BYTES:
        raise BodyDecodeError(f"field 'b' is longer than {MAX_BITSET_BYTES} bytes")
    return [i * 8 + bit for i, byte in enumerate(data) for bit in range(8) if byte >> bit & 1]


def _text(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise BodyDecodeError(f"field {name!r} is not a non-empty string")
    return value


def _int(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BodyDecodeError(f"field {name!r} is not a non-negative number")
    return value
