"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

Checks follow RocketMQ's AbstractSendMessageProcessor.msgCheck: the broker must be writable, the
topic must be valid and not a system topic meant for the broker only, it is created from the
default topic when missing (autoCreateTopicEnable), and the queue id must exist. Store statuses
map to response codes as `SendMessageProcessor.handlePutMessageResult` does; the three "stored,
but" statuses carry msgId, queueId and queueOffset like a success.

"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Mapping
from typing import ClassVar, Final

from tidemq.broker.managers.topic_config import (
    TopicConfigManager,
    is_not_allowed_send_topic,
    validate_topic_name,
)
from tidemq.broker.remoting.server import RequestRejected
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import BrokerStats
from tidemq.broker.transaction.messages import is_prepared_send, park_half
from tidemq.broker.transaction.service import TransactionalMessageService
from tidemq.client.protocol.headers import (
    SEND_V2_KEYS,
    HeaderFieldError,
    SendMessageRequestHeader,
    decode_send_header,
)
from tidemq.client.protocol.models import PERM_WRITE
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.commitlog import PutStatus
from tidemq.store.message_store import MessageStore, PutMessageResult
from tidemq.store.record import (
    PROPERTY_CLUSTER,
    PROPERTY_TRANSACTION_PREPARED,
    MessageBatch,
    MessageToStore,
    decode_properties,
    encode_properties,
    pack_host,
    with_property,
)

log = logging.getLogger(__name__)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: "
    "the broker's disk is full, messages are put to the slave, message store has been shut down"
)


_MAX_SENDABLE_NAMES: Final = 100_000
# Enum members read per send, as module constants: a class attribute of an Enum goes through
# EnumType.__getattr__ on Python 3.11 and costs ten times a global.
_SEND_V2: Final = RequestCode.SEND_MESSAGE_V2
_SEND_BATCH: Final = RequestCode.SEND_BATCH_MESSAGE
_SUCCESS: Final = ResponseCode.SUCCESS
_PUT_OK: Final = PutStatus.PUT_OK
_UNKNOWN_STATUS: Final = (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR")
_V2_TOPIC_KEY: Final = SEND_V2_KEYS["topic"]
_V2_BATCH_KEY: Final = SEND_V2_KEYS["batch"]
_PREPARED_MARKER: Final = PROPERTY_TRANSACTION_PREPARED + "\x01"


def _decode_header(request: RemotingCommand) -> SendMessageRequestHeader:
    ext = request.ext_fields
    # Java sends SEND_BATCH_MESSAGE with SendMessageRequestHeaderV2's one-letter keys (the
    # broker's parseRequestHeader reads it as V2); the long keys are accepted there as well.
    code = request.code
    short = code == _SEND_V2 or (code == _SEND_BATCH and _V2_TOPIC_KEY in ext)
    try:
        header = decode_send_header(ext, short)
    except HeaderFieldError as exc:
        raise RequestRejected(ResponseCode.SYSTEM_ERROR, str(exc)) from None
    # rocketmq-client-cpp writes booleans as "1"/"0" and sends its batches as SEND_MESSAGE with
    # batch=1: Java's parseBoolean reads false and stores the whole batch as one message
    # (rocketmq-client-cpp#189, #363). A "1" can only mean a batch, so take it as one.
    batch = ext.get(_V2_BATCH_KEY if short else "batch")
    if batch is not None and str(batch).strip() == "1":
        header.batch = True
    return header


class SendProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.SEND_MESSAGE: "process",
        RequestCode.SEND_MESSAGE_V2: "process",
        RequestCode.SEND_BATCH_MESSAGE: "process",
    }

    def __init__(
        self,
        state: BrokerState,
        topics: TopicConfigManager,
        store: MessageStore,
        stats: BrokerStats,
        transactions: TransactionalMessageService,
    ) -> None:
        self.state = state
        self.topics = topics
        self.store = store
        self.stats = stats
        self.transactions = transactions
        # Topic names that passed validate_topic_name and may be sent to: the checks are a
        # regular expression and a set lookup per send otherwise. Whether the name may be sent
        # to never changes; whether the topic exists is looked up on every send.
        self._sendable_names: set[str] = set()

    async def process(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """Serve a send; its time to answer, refusals included, goes to the latency histogram."""
        started = time.perf_counter()
        try:
            header = _decode_header(request)
            self._check(connection, header)
            born_host = peer_born_host(connection.peer)
            if request.code == _SEND_BATCH or header.batch:
                return await self._send_batch(request, header, born_host)
            return await self._send_one(request, header, born_host)
        finally:
            # stats.on_send_latency, inline: once per send
            self.stats.send_latency.observe(time.perf_counter() - started)

    # --- checks ---------------------------------------------------------------------------

    def _check(self, connection: RemotingConnection, header: SendMessageRequestHeader) -> None:
        """Refuse a send this broker must not store (`RequestRejected`); choose a queue for
        a request that leaves it to the broker (queueId < 0)."""
        state = self.state
        if not state.config.broker_permission & PERM_WRITE:
            raise RequestRejected(
                ResponseCode.NO_PERMISSION,
                f"the broker[{state.advertised_address}] sending message is forbidden",
            )
        if header.topic not in self._sendable_names:
            self._check_name(header.topic)
        topics = self.topics
        config = topics.select(header.topic)
        if config is None:
            sys_flag = 0
            if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                config = topics.create_in_send_back(header.topic, 1, 6, sys_flag)
            else:
                config = topics.create_in_send(
                    header.topic,
                    header.default_topic,
                    connection.peer,
                    header.default_topic_queue_nums,
                    sys_flag,
                )
            if config is None:
                raise RequestRejected(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{header.topic}] not exist, apply first please!",
                )
        queue_nums = max(config.read_queue_nums, config.write_queue_nums)
        if header.queue_id >= queue_nums:
            raise RequestRejected(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{header.queue_id}] is illegal, topic:{header.topic} "
                f"topicConfig.writeQueueNums:{config.write_queue_nums} consumer:{connection.peer}",
            )
        if header.queue_id < 0:
            header.queue_id = random.randrange(max(1, config.write_queue_nums))

    def _check_name(self, topic: str) -> None:
        problem = validate_topic_name(topic)
        if problem:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, problem)
        if is_not_allowed_send_topic(topic):
            raise RequestRejected(
                ResponseCode.NO_PERMISSION, f"sending message to topic[{topic}] is forbidden"
            )
        if len(self._sendable_names) >= _MAX_SENDABLE_NAMES:
            self._sendable_names.clear()  # names are checked again, nothing else is lost
        self._sendable_names.add(topic)

    # --- storing ----------------------------------------------------------------------------

    async def _send_one(
        self, request: RemotingCommand, header: SendMessageRequestHeader, born: bytes
    ) -> RemotingCommand:
        state = self.state
        # with_cluster, inline: once per send
        properties = with_property(
            header.properties or "", PROPERTY_CLUSTER, state.config.broker_cluster_name
        )
        # positional, in field order: keywords make type() build a dict per message
        msg = MessageToStore(
            header.topic,
            header.queue_id,
            bytes(request.body),
            properties,
            header.flag,
            header.sys_flag,
            header.born_timestamp or int(time.time() * 1000),
            born,
            state.store_host,
            header.reconsume_times or 0,
        )
        if _PREPARED_MARKER in properties and is_prepared_send(properties):
            park_half(msg)  # stored in the half queue until END_TRANSACTION
            result = await self.store.put_message(msg, self.transactions.on_prepared)
            return self._answer(request, header, result)
        result = await self.store.put_message(msg)
        return self._answer(request, header, result)

    async def _send_batch(
        self, request: RemotingCommand, header: SendMessageRequestHeader, born: bytes
    ) -> RemotingCommand:
        # The batch's own properties, CLUSTER included, follow each message's (see MessageBatch).
        shared = decode_properties(header.properties or "")
        shared[PROPERTY_CLUSTER] = self.state.config.broker_cluster_name
        batch = MessageBatch(
            topic=header.topic,
            queue_id=header.queue_id,
            body=request.body,
            properties=encode_properties(shared),
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp or int(time.time() * 1000),
            born_host=born,
            store_host=self.state.store_host,
            reconsume_times=header.reconsume_times or 0,
        )
        result = await self.store.put_message_batch(batch)
        return self._answer(request, header, result)

    def _answer(
        self, request: RemotingCommand, header: SendMessageRequestHeader, result: PutMessageResult
    ) -> RemotingCommand:
        append = result.append
        code: int
        remark: str | None
        if result.status is _PUT_OK and append is not None:
            # nearly always: no look-up of the status (an Enum's hash is Python code)
            code, remark = _SUCCESS, None
        else:
            code, remark = _STATUS_CODES.get(result.status, _UNKNOWN_STATUS)
            if result.remark and code != _SUCCESS:
                remark = result.remark  # the store says exactly why (disk full, slave, size)
            if not result.ok or append is None:
                return RemotingCommand.response_to(request, code, remark)
        self.stats.on_put(header.topic, append.msg_num, append.wrote_bytes)
        ext = {
            "msgId": append.msg_id,
            "queueId": str(header.queue_id),
            "queueOffset": str(append.queue_offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        return RemotingCommand.response_to(request, code, remark, ext)


_STATUS_CODES: dict[PutStatus, tuple[int, str | None]] = {
    PutStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutStatus.CREATE_MAPEDFILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched.",
    ),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg properties length limit 32k.",
    ),
    PutStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE, _NOT_AVAILABLE_REMARK),
    PutStatus.TOO_MANY_REQUESTS: (
        ResponseCode.SYSTEM_BUSY,
        "[TOO_MANY_REQUESTS]broker busy, start flow control for a while",
    ),
    PutStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    # RocketMQ 5's answer (no code of its own): the store's remark names the set and the key
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (
        ResponseCode.SYSTEM_ERROR,
        "in-sync replicas not enough",
    ),
    # RocketMQ 5's answers to timer messages; the store's remark names the property and limit
    PutStatus.WHEEL_TIMER_MSG_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "timer message illegal, the delay time should not be bigger than the max delay",
    ),
    PutStatus.WHEEL_TIMER_FLOW_CONTROL: (
        ResponseCode.SYSTEM_ERROR,
        "timer message is under flow control",
    ),
    PutStatus.WHEEL_TIMER_NOT_ENABLE: (
        ResponseCode.SYSTEM_ERROR,
        "accurate timer message is not enabled, timerWheelEnable is false",
    ),
    PutStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


def with_cluster(properties: str, cluster: str) -> str:
    """`properties` with CLUSTER set to `cluster` (appended to canonical text)."""
    return with_property(properties, PROPERTY_CLUSTER, cluster)


# Every request of a connection comes from the same address: parse it once, not per send
# (gRPC sends too: broker/proxy).
@functools.lru_cache(maxsize=4096)
def peer_born_host(peer: str) -> bytes:
    """The record's born host (4 or 16 address bytes and the port) of a `host:port` peer;
    127.0.0.1:0 for a peer that is no address."""
    host, _sep, port = peer.rpartition(":")
    try:
        return pack_host(host.strip("[]"), int(port))
    except ValueError:
        return pack_host("127.0.0.1", 0)
