"""Offset and message look-ups: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32), VIEW_MESSAGE_BY_ID (33) and
QUERY_MESSAGE (12).

VIEW_MESSAGE_BY_ID takes the physical offset the client decoded from the msgId and answers the raw
record, if it ends within what the store serves (`MessageStore.served_end`: on a controller-mode
slave, what its master confirmed; a record past it is not found, as one past the log's end is,
for an election could cut it); QUERY_MESSAGE answers the raw records whose KEYS or UNIQ_KEY
match, found through the index (built by dispatch, so capped alike), with
`indexLastUpdateTimestamp` and `indexLastUpdatePhyoffset`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tidemq.broker.processors.decoding import request_header
from tidemq.client.protocol.headers import (
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    ViewMessageRequestHeader,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.message_store import MessageStore
from tidemq.store.record import decode_record

QUERY_MAX_NUM = 64  # RocketMQ's maxMsgsNumBatch cap on QUERY_MESSAGE results

_OK = ResponseCode.SUCCESS


class QueryProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.GET_MAX_OFFSET: "offsets",
        RequestCode.GET_MIN_OFFSET: "offsets",
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: "offsets",
        RequestCode.GET_EARLIEST_MSG_STORETIME: "offsets",
        RequestCode.VIEW_MESSAGE_BY_ID: "view_by_id",
        RequestCode.QUERY_MESSAGE: "query_message",
    }

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def offsets(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        store = self.store
        if request.code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            search = request_header(SearchOffsetRequestHeader, request)
            offset = store.offset_in_queue_by_time(search.topic, search.queue_id, search.timestamp)
            return RemotingCommand.response_to(request, _OK, None, {"offset": str(offset)})
        header = request_header(TopicQueueRequestHeader, request)
        if request.code == RequestCode.GET_MAX_OFFSET:
            offset = store.max_offset_in_queue(header.topic, header.queue_id)
        elif request.code == RequestCode.GET_MIN_OFFSET:
            offset = store.min_offset_in_queue(header.topic, header.queue_id)
        else:
            timestamp = store.earliest_message_time(header.topic, header.queue_id)
            return RemotingCommand.response_to(request, _OK, None, {"timestamp": str(timestamp)})
        return RemotingCommand.response_to(request, _OK, None, {"offset": str(offset)})

    async def view_by_id(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(ViewMessageRequestHeader, request)
        store = self.store
        head = store.commitlog.get_record(header.offset, 4)
        size = int.from_bytes(head, "big", signed=True) if head is not None else 0
        served = size > 0 and header.offset + size <= store.served_end
        record = store.commitlog.get_record(header.offset, size) if served else None
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
        return RemotingCommand.response_to(request, _OK, body=bytes(record))

    async def query_message(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        header = request_header(QueryMessageRequestHeader, request)
        store = self.store
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
        return RemotingCommand.response_to(request, _OK, None, ext, b"".join(parts))
