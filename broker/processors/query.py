"""Offset and message look-ups: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32), VIEW_MESSAGE_BY_ID (33) and
QUERY_MESSAGE (12).

VIEW_MESSAGE_BY_ID takes the physical offset the client decoded from the msgId and answers the raw
record; QUERY_MESSAGE answers the raw records whose KEYS or UNIQ_KEY match, found through the
index, with `indexLastUpdateTimestamp` and `indexLastUpdatePhyoffset`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.protocol.headers import (
    HeaderFieldError,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    ViewMessageRequestHeader,
    decode,
)
from client.remoting.codes import RequestCode, ResponseCode
from client.remoting.command import RemotingCommand
from client.remoting.connection import RemotingConnection
from store.record import decode_record

if TYPE_CHECKING:
    from broker.broker import Broker

QUERY_MAX_NUM = 64  # RocketMQ's maxMsgsNumBatch cap on QUERY_MESSAGE results


def _ok(request: RemotingCommand, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    response = RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, ext, body)
    return response


def _bad_header(request: RemotingCommand, exc: HeaderFieldError) -> RemotingCommand:
    return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, str(exc))


class QueryProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def offsets(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        store = self.broker.store
        try:
            if request.code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
                search = decode(SearchOffsetRequestHeader, request.ext_fields)
                offset = store.offset_in_queue_by_time(
                    search.topic, search.queue_id, search.timestamp
                )
                return _ok(request, {"offset": str(offset)})
            header = decode(TopicQueueRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _bad_header(request, exc)
        if request.code == RequestCode.GET_MAX_OFFSET:
            return _ok(
                request, {"offset": str(store.max_offset_in_queue(header.topic, header.queue_id))}
            )
        if request.code == RequestCode.GET_MIN_OFFSET:
            return _ok(
                request, {"offset": str(store.min_offset_in_queue(header.topic, header.queue_id))}
            )
        timestamp = store.earliest_message_time(header.topic, header.queue_id)
        return _ok(request, {"timestamp": str(timestamp)})

    async def view_by_id(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        try:
            header = decode(ViewMessageRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _bad_header(request, exc)
        store = self.broker.store
        head = store.commitlog.get_record(header.offset, 4)
        size = int.from_bytes(head, "big", signed=True) if head is not None else 0
        record = store.commitlog.get_record(header.offset, size) if size > 0 else None
        if record is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"can not find message by the offset, {header.offset}",
            )
        try:
            decode_record(record, check_crc=False)
        except ValueError:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, f"no message at offset {header.offset}"
            )
        return _ok(request, {}, bytes(record))

    async def query_message(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        try:
            header = decode(QueryMessageRequestHeader, request.ext_fields)
        except HeaderFieldError as exc:
            return _bad_header(request, exc)
        store = self.broker.store
        max_num = max(1, min(header.max_num, QUERY_MAX_NUM))
        await store.wait_index()
        result = store.query_message(
            header.topic, header.key, max_num, header.begin_timestamp, header.end_timestamp
        )
        ext = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phy_offset),
        }
        if not result.messages:
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                ext,
            )
        parts = []
        for msg in result.messages:
            record = store.commitlog.get_record(msg.physical_offset, msg.total_size)
            if record is not None:
                parts.append(bytes(record))
        return _ok(request, ext, b"".join(parts))
