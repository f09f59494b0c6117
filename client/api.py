"""Typed remote calls to brokers and name servers (RocketMQ's MQClientAPIImpl), asyncio.

One method per request: it builds the header, sends it through a `RemotingClient`, checks the
response code and returns a typed result. Error codes become `BrokerResponseError` leaves;
connection and timeout failures arrive as the remoting client raises them (`ConnectError`,
`RequestTimeoutError`), not translated again. Send statuses SEND_OK,
FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are results, not errors: the
message is stored in all four cases. Pulled records are decoded with the store's record codec.

Our client writes msgpack headers (serialisation type 2) by default; `serialize_type` switches.
"""

from __future__ import annotations

import enum
import ssl
from dataclasses import dataclass, field
from typing import Final

from tidemq.client.consumer.received import decode_received
from tidemq.client.errors import BrokerResponseError
from tidemq.client.message import ReceivedMessage, SendResult, SendStatus, send_result
from tidemq.client.protocol.headers import (
    SEND_V2_KEYS,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    TopicQueueRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    encode,
    header_schema,
)
from tidemq.client.protocol.heartbeat import (
    CheckClientRequestBody,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)
from tidemq.client.protocol.models import (
    ClusterInfo,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from tidemq.client.protocol.namesrv import GetRouteInfoRequestHeader
from tidemq.client.protocol.send_frame import (
    SendFrameTemplate,
    SignedSendTemplate,
    encode_send_head,
    encode_signed_send_head,
    signed_send_template,
)
from tidemq.client.remoting.codes import (
    DEFAULT_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.json_body import dumps, loads_fastjson
from tidemq.client.remoting.signing import RequestSigner, SessionCredentials, Signer
from tidemq.client.transport.client import RemotingClient, timeout_error
from tidemq.common.frozen import maker
from tidemq.store.record import StoredMessage, decode_record

DEFAULT_TIMEOUT = 3.0


# Enum members read per send, as module constants: a class attribute of an Enum goes through
# EnumType.__getattr__ on Python 3.11 and costs ten times a global.
_SEND_V2: Final = int(RequestCode.SEND_MESSAGE_V2)
_SEND_BATCH: Final = int(RequestCode.SEND_BATCH_MESSAGE)
_PYTHON: Final = int(LanguageCode.PYTHON)

_SEND_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_SEND_OK = tuple(_SEND_STATUS)
# Kept, not looked up per send (see header_schema).
_ENCODE_SEND_V2 = header_schema(SendMessageRequestHeader, SEND_V2_KEYS).encode


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
_PULL_OK = tuple(_PULL_STATUS)


@dataclass(frozen=True, slots=True)
class SendResponse:
    """The broker's answer to one send, as the wire gives it (SendMessageResponseHeader and the
    address it came from). The producer makes the user's `message.SendResult` from it: the one
    SendResult of the API."""

    status: SendStatus
    msg_id: str
    queue_id: int
    queue_offset: int
    broker_addr: str = ""


# SendResponse(...) and MessageQueue(...) per send, without the frozen __init__'s
# object.__setattr__ per field
_SEND_RESPONSE: Final = maker(SendResponse)
_QUEUE: Final = maker(MessageQueue)
# Signed send templates kept per client: one per producer template (a topic), bounded as the
# producer bounds its templates.
_MAX_SIGNED_TEMPLATES: Final = 4096


@dataclass(frozen=True, slots=True)
class PullResult:
    """A pull's answer. `messages` are its records decoded as `StoredMessage`s, unless the pull
    left them raw in `body` for the consumers' own decoder (`received`)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    messages: list[StoredMessage] = field(default_factory=list)
    body: bytes | bytearray | memoryview = b""

    def received(self, broker_name: str) -> list[ReceivedMessage]:
        """The messages as consumers hand them to listeners."""
        if self.body:
            return decode_received(self.body, broker_name)
        return [ReceivedMessage.from_stored(m, broker_name) for m in self.messages]


def decode_records(body: bytes | bytearray | memoryview) -> list[StoredMessage]:
    """Records back to back, as a pull or query response carries them."""
    view = memoryview(body)
    out = []
    pos = 0
    while pos < len(view):
        message = decode_record(view, pos, check_crc=False)
        out.append(message)
        pos += message.total_size
    return out


class BrokerAPI:
    """Remote calls over one shared `RemotingClient`."""

    def __init__(
        self,
        remoting: RemotingClient | None = None,
        *,
        serialize_type: SerializeType = SerializeType.MSGPACK,
        timeout: float = DEFAULT_TIMEOUT,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | None = None,
        signer: Signer | None = None,
    ) -> None:
        """`signer` (with no `remoting`) signs every request the client sends, whoever built
        it: a broker's own calls (broker/acl/own_account.py)."""
        self.remoting = remoting or RemotingClient(tls=tls, signer=signer)
        self.serialize_type = serialize_type
        self.timeout = timeout
        # Signs every request built by `request` (RocketMQ's AclClientRPCHook).
        self._signer = RequestSigner(credentials) if credentials is not None else None
        # The signer's templates of the producers' templates, by id (each holds its template,
        # so an id is not reused while its entry is here).
        self._signed_templates: dict[int, SignedSendTemplate] = {}

    async def close(self) -> None:
        await self.remoting.close()

    # --- plumbing ---------------------------------------------------------------------------

    def request(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        request = RemotingCommand.request(code, ext, body, serialize_type=self.serialize_type)
        if self._signer is not None:
            self._signer.sign(request)
        return request

    async def invoke(
        self, address: str, request: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        return await self.remoting.invoke(address, request, timeout or self.timeout)

    async def call(
        self,
        address: str,
        request: RemotingCommand,
        *,
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Invoke and raise the response code's error unless it is one of `ok`."""
        response = await self.invoke(address, request, timeout)
        if response.code not in ok:
            raise BrokerResponseError.for_code(response.code, response.remark)
        return response

    # --- name server ------------------------------------------------------------------------

    async def get_route(self, namesrv: str, topic: str) -> TopicRouteData | None:
        request = self.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic).to_ext_fields()
        )
        response = await self.call(
            namesrv, request, ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        return TopicRouteData.from_dict(_object(response.body))

    async def get_cluster_info(self, namesrv: str) -> ClusterInfo:
        response = await self.call(namesrv, self.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        return ClusterInfo.from_dict(_object(response.body))

    # --- sending ----------------------------------------------------------------------------

    async def send(
        self,
        address: str,
        header: SendMessageRequestHeader,
        body: bytes,
        *,
        timeout: float | None = None,
        batch: bool = False,
    ) -> SendResponse:
        # Like Java's client, both codes carry the one-letter V2 header keys.
        return await self.send_fields(
            address, _ENCODE_SEND_V2(header), header.queue_id, body, timeout=timeout, batch=batch
        )

    async def send_fields(
        self,
        address: str,
        ext: dict[str, str],
        queue_id: int,
        body: bytes,
        *,
        timeout: float | None = None,
        batch: bool = False,
    ) -> SendResponse:
        """A send whose V2 extFields are made (`headers.send_v2_ext_fields`: the producer's
        path, no header object); `queue_id` is the one asked for, the answer's default."""
        # RemotingCommand.request's fields, positionally: a send is the hottest request
        request = RemotingCommand(
            _SEND_BATCH if batch else _SEND_V2,
            _PYTHON,
            DEFAULT_VERSION,
            0,
            0,
            None,
            ext,
            body,
            self.serialize_type,
        )
        if self._signer is not None:
            self._signer.sign(request)
        # On an open connection, its request started here: two coroutines fewer than invoke's
        remoting = self.remoting
        connection = remoting.ready_connection(address)
        budget = timeout or self.timeout
        if (
            connection is not None
            and (started := connection.start_request(request, budget)) is not None
        ):
            future, timer = started
            try:
                response = await future
            except TimeoutError:
                raise remoting.timed_out(address, request, budget) from None
            finally:
                connection.end_request(request.opaque, timer)
        else:
            response = await remoting.invoke(address, request, budget)
        if response.code not in _SEND_OK:
            raise BrokerResponseError.for_code(response.code, response.remark)
        response_ext = response.ext_fields
        return _SEND_RESPONSE(
            _SEND_STATUS[response.code],
            response_ext.get("msgId", ""),
            int(response_ext.get("queueId", queue_id)),
            int(response_ext.get("queueOffset", -1)),
            address,
        )

    async def send_templated(
        self,
        address: str,
        template: SendFrameTemplate,
        queue: MessageQueue,
        msg_id: str,
        sys_flag: int,
        born_timestamp: int,
        flag: int,
        properties: str,
        body: bytes,
        *,
        timeout: float | None = None,
    ) -> SendResult:
        """A producer's send of message `msg_id` to `queue` on `address`: what `send_fields`
        sends for `headers.send_v2_ext_fields`' extFields of these values and the template's,
        answered as the producer's `SendResult` (in the queue the broker names). On an open
        connection the frame head is written from the template (`send_frame.encode_send_head`,
        or `encode_signed_send_head` with this client's signer): no extFields dict and no
        command object."""
        queue_id = queue.queue_id
        connection = self.remoting.ready_connection(address)
        if connection is None or (opaque := connection.writable_opaque()) is None:
            ext = template.ext_fields(queue_id, sys_flag, born_timestamp, flag, properties)
            raw = await self.send_fields(
                address, ext, queue_id, body, timeout=timeout, batch=template.batch
            )
            if raw.queue_id != queue_id:
                queue = _QUEUE(queue.topic, queue.broker_name, raw.queue_id)
            return send_result(raw.status, msg_id, raw.msg_id, queue, raw.queue_offset)
        budget = timeout or self.timeout
        if self._signer is None:
            head = encode_send_head(
                template, opaque, queue_id, sys_flag, born_timestamp, flag, properties, body
            )
        else:
            signed = self._signed_templates.get(id(template))
            if signed is None or signed.template is not template:
                signed = self._signed_template(template, self._signer)
            head = encode_signed_send_head(
                signed, opaque, queue_id, sys_flag, born_timestamp, flag, properties, body
            )
        future, timer = connection.start_encoded(opaque, head, body, budget)
        try:
            response = await future
        except TimeoutError:
            raise timeout_error(address, template.code, budget) from None
        finally:
            connection.end_request(opaque, timer)
        code = response.code
        if code not in _SEND_OK:
            raise BrokerResponseError.for_code(code, response.remark)
        response_ext = response.ext_fields
        stored_in = int(response_ext.get("queueId", queue_id))
        if stored_in != queue_id:  # the broker's own queue, not a copy of the one asked for
            queue = _QUEUE(queue.topic, queue.broker_name, stored_in)
        return send_result(
            _SEND_STATUS[code],
            msg_id,
            response_ext.get("msgId", ""),
            queue,
            int(response_ext.get("queueOffset", -1)),
        )

    def _signed_template(
        self, template: SendFrameTemplate, signer: RequestSigner
    ) -> SignedSendTemplate:
        """A new signed template of `template`, kept for the next sends."""
        kept = self._signed_templates
        if len(kept) >= _MAX_SIGNED_TEMPLATES:
            kept.clear()
        signed = kept[id(template)] = signed_send_template(
            template, signer.access_key, signer.key, signer.security_token
        )
        return signed

    async def send_oneway(
        self, address: str, header: SendMessageRequestHeader, body: bytes
    ) -> None:
        request = self.request(RequestCode.SEND_MESSAGE_V2, _ENCODE_SEND_V2(header), body)
        await self.remoting.invoke_oneway(address, request)

    # --- pulling ----------------------------------------------------------------------------

    async def pull(
        self,
        address: str,
        header: PullMessageRequestHeader,
        timeout: float | None = None,
        *,
        raw: bool = False,
    ) -> PullResult:
        """PULL_MESSAGE; with `raw` the records stay undecoded in `PullResult.body`."""
        request = self.request(RequestCode.PULL_MESSAGE, encode(header))
        response = await self.call(address, request, ok=_PULL_OK, timeout=timeout)
        ext = response.ext_fields
        status = _PULL_STATUS[response.code]
        found = status is PullStatus.FOUND
        return PullResult(
            status,
            int(ext.get("nextBeginOffset", header.queue_offset)),
            int(ext.get("minOffset", 0)),
            int(ext.get("maxOffset", 0)),
            int(ext.get("suggestWhichBrokerId", 0)),
            decode_records(response.body) if found and not raw else [],
            response.body if found and raw else b"",
        )

    # --- offsets ----------------------------------------------------------------------------

    async def query_consumer_offset(
        self, address: str, group: str, topic: str, queue_id: int
    ) -> int:
        """The group's committed offset, or -1 when the broker has none (QUERY_NOT_FOUND)."""
        header = QueryConsumerOffsetRequestHeader(group, topic, queue_id)
        request = self.request(RequestCode.QUERY_CONSUMER_OFFSET, encode(header))
        response = await self.call(
            address, request, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return int(response.ext_fields.get("offset", -1))

    async def update_consumer_offset(
        self, address: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
        await self.call(address, self.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode(header)))

    async def _offset(self, address: str, code: int, topic: str, queue_id: int, key: str) -> int:
        header = TopicQueueRequestHeader(topic, queue_id)
        response = await self.call(address, self.request(code, encode(header)))
        return int(response.ext_fields.get(key, 0))

    async def get_max_offset(self, address: str, topic: str, queue_id: int) -> int:
        return await self._offset(address, RequestCode.GET_MAX_OFFSET, topic, queue_id, "offset")

    async def get_min_offset(self, address: str, topic: str, queue_id: int) -> int:
        return await self._offset(address, RequestCode.GET_MIN_OFFSET, topic, queue_id, "offset")

    async def get_earliest_msg_storetime(self, address: str, topic: str, queue_id: int) -> int:
        return await self._offset(
            address, RequestCode.GET_EARLIEST_MSG_STORETIME, topic, queue_id, "timestamp"
        )

    async def search_offset(self, address: str, topic: str, queue_id: int, timestamp: int) -> int:
        header = SearchOffsetRequestHeader(topic, queue_id, timestamp)
        response = await self.call(
            address, self.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, encode(header))
        )
        return int(response.ext_fields.get("offset", 0))

    # --- messages ---------------------------------------------------------------------------

    async def view_message(self, address: str, physical_offset: int) -> StoredMessage:
        request = self.request(
            RequestCode.VIEW_MESSAGE_BY_ID, encode(ViewMessageRequestHeader(physical_offset))
        )
        response = await self.call(address, request)
        return decode_record(memoryview(response.body), check_crc=False)

    async def query_message(
        self, address: str, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> list[StoredMessage]:
        header = QueryMessageRequestHeader(topic, key, max_num, begin, end)
        request = self.request(RequestCode.QUERY_MESSAGE, encode(header))
        response = await self.call(
            address, request, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        return decode_records(response.body)

    # --- clients ------------------------------------------------------------------------------

    async def heartbeat(self, address: str, data: HeartbeatData) -> None:
        await self.call(address, self.request(RequestCode.HEART_BEAT, body=data.encode()))

    async def check_client_config(self, address: str, body: CheckClientRequestBody) -> None:
        """CHECK_CLIENT_CONFIG: raises the broker's refusal of a subscription (e.g.
        `SubscriptionParseFailedError` for an SQL92 expression that does not parse)."""
        await self.call(address, self.request(RequestCode.CHECK_CLIENT_CONFIG, body=body.encode()))

    async def get_consumer_ids(self, address: str, group: str) -> list[str]:
        request = self.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            encode(GetConsumerListByGroupRequestHeader(group)),
        )
        response = await self.call(address, request)
        return GetConsumerListByGroupResponseBody.decode(response.body).consumer_id_list

    async def unregister_client(
        self, address: str, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        header = UnregisterClientRequestHeader(
            client_id, producer_group or None, consumer_group or None
        )
        await self.call(address, self.request(RequestCode.UNREGISTER_CLIENT, encode(header)))

    # --- administration -----------------------------------------------------------------------

    async def create_topic(self, address: str, config: TopicConfig) -> None:
        header = CreateTopicRequestHeader(
            topic=config.topic_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_filter_type=config.topic_filter_type,
            topic_sys_flag=config.topic_sys_flag,
            order=config.order,
        )
        await self.call(address, self.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode(header)))

    async def create_topic_list(self, address: str, configs: list[TopicConfig]) -> None:
        """UPDATE_AND_CREATE_TOPIC_LIST (RocketMQ 5): create or update `configs` in one request
        (CreateTopicListRequestBody; the broker applies all or none)."""
        body = dumps({"topicConfigList": [config.to_dict() for config in configs]})
        await self.call(address, self.request(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body))

    async def delete_topic_in_broker(self, address: str, topic: str) -> None:
        await self.call(
            address,
            self.request(
                RequestCode.DELETE_TOPIC_IN_BROKER, encode(DeleteTopicRequestHeader(topic))
            ),
        )

    async def all_topic_config(self, address: str) -> TopicConfigSerializeWrapper:
        response = await self.call(address, self.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        return TopicConfigSerializeWrapper.from_dict(_object(response.body))

    async def consumer_send_msg_back(
        self,
        address: str,
        header: ConsumerSendMsgBackRequestHeader,
        timeout: float | None = None,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker re-queues a failed message for a later retry."""
        request = self.request(RequestCode.CONSUMER_SEND_MSG_BACK, encode(header))
        await self.call(address, request, timeout=timeout)

    async def lock_batch(
        self, address: str, body: LockBatchRequestBody, timeout: float | None = None
    ) -> list[MessageQueue]:
        """LOCK_BATCH_MQ: the queues this client now holds the lock of (orderly consumers)."""
        request = self.request(RequestCode.LOCK_BATCH_MQ, body=body.encode())
        response = await self.call(address, request, timeout=timeout)
        return LockBatchResponseBody.decode(response.body).lock_ok_mq_set

    async def unlock_batch(self, address: str, body: UnlockBatchRequestBody) -> None:
        request = self.request(RequestCode.UNLOCK_BATCH_MQ, body=body.encode())
        await self.call(address, request)

    async def update_subscription_group(
        self, address: str, config: SubscriptionGroupConfig
    ) -> None:
        request = self.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=dumps(config.to_dict())
        )
        await self.call(address, request)

    async def update_subscription_group_list(
        self, address: str, configs: list[SubscriptionGroupConfig]
    ) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (RocketMQ 5): body SubscriptionGroupList."""
        body = dumps({"groupConfigList": [config.to_dict() for config in configs]})
        request = self.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=body)
        await self.call(address, request)


def _object(body: bytes | bytearray | memoryview) -> dict[str, object]:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise BrokerResponseError(ResponseCode.SYSTEM_ERROR, "response body is not a JSON object")
    return obj
