"""The broker's request pipeline without sockets: a rejection answered by the server's dispatch,
the header and body helpers naming what is wrong, and hooks around every request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from tidemq.broker.processors.decoding import request_body, request_header
from tidemq.broker.remoting.server import RemotingServer, RequestRejected, answers_at_once
from tidemq.client.protocol.headers import TopicQueueRequestHeader, encode
from tidemq.client.protocol.heartbeat import HeartbeatData
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection

TOPIC_QUEUE = encode(TopicQueueRequestHeader(topic="T", queue_id=3))


def get_max_offset(
    ext: dict[str, str], serialize_type: SerializeType = SerializeType.JSON
) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET, dict(ext), opaque=77, serialize_type=serialize_type
    )


async def offsets_processor(
    connection: RemotingConnection, request: RemotingCommand
) -> RemotingCommand:
    """A processor as the broker's are written: the header helper, then the answer."""
    del connection
    header = request_header(TopicQueueRequestHeader, request)
    ext = {"offset": str(header.queue_id * 10)}
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, ext)


def server_with(processor: object = offsets_processor) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0)
    server.register(RequestCode.GET_MAX_OFFSET, processor)  # type: ignore[arg-type]
    return server


class Recorder:
    """A hook that records what it sees; refuses requests whose topic is `refuse_topic`."""

    def __init__(self, name: str, log: list[tuple[str, ...]], refuse_topic: str = "") -> None:
        self.name = name
        self.log = log
        self.refuse_topic = refuse_topic
        self.responses: list[RemotingCommand | None] = []

    def before_request(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        self.log.append(("before", self.name, connection.peer))
        if self.refuse_topic and request.ext_fields.get("topic") == self.refuse_topic:
            raise RequestRejected(ResponseCode.NO_PERMISSION, f"{self.name} refuses")

    def after_response(
        self,
        connection: RemotingConnection,
        request: RemotingCommand,
        response: RemotingCommand | None,
    ) -> None:
        del connection, request
        self.log.append(("after", self.name))
        self.responses.append(response)


def connection_from(peer: str) -> RemotingConnection:
    connection = RemotingConnection()
    connection.peer = peer
    return connection


# --- the rejection --------------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", list(SerializeType))
async def test_a_rejection_is_answered_with_its_code_and_remark_in_the_requests_serialisation(
    serialize_type: SerializeType,
) -> None:
    async def refusing(connection: RemotingConnection, request: RemotingCommand) -> None:
        raise RequestRejected(ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")

    request = get_max_offset(TOPIC_QUEUE, serialize_type)
    response = await server_with(refusing).dispatch(connection_from("peer:1"), request)
    assert response is not None
    assert (response.code, response.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")
    assert response.is_response
    assert (response.opaque, response.serialize_type) == (77, serialize_type)


async def test_an_unexpected_exception_is_left_to_the_connection() -> None:
    # The connection logs it and answers SYSTEM_ERROR with the exception's name and text.
    async def broken(connection: RemotingConnection, request: RemotingCommand) -> None:
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        await server_with(broken).dispatch(connection_from("peer:1"), get_max_offset(TOPIC_QUEUE))


async def test_an_unknown_code_is_not_supported() -> None:
    request = RemotingCommand.request(9999, opaque=5)
    response = await server_with().dispatch(connection_from("peer:1"), request)
    assert response is not None
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.opaque == 5


# --- the header and body helpers ------------------------------------------------------------


def test_request_header_decodes_the_schema() -> None:
    header = request_header(TopicQueueRequestHeader, get_max_offset(TOPIC_QUEUE))
    assert (header.topic, header.queue_id) == ("T", 3)


@pytest.mark.parametrize(
    ("ext", "remark"),
    [
        ({"topic": "T"}, "the custom field <queueId> is null"),
        ({"queueId": "3"}, "the custom field <topic> is null"),
        ({"topic": "T", "queueId": "three"}, "queueId: not an integer: 'three'"),
        ({"topic": "T", "queueId": str(2**63)}, f"queueId: '{2**63}' does not fit 64 bits"),
    ],
)
def test_request_header_rejects_naming_the_field(ext: dict[str, str], remark: str) -> None:
    with pytest.raises(RequestRejected) as rejected:
        request_header(TopicQueueRequestHeader, get_max_offset(ext))
    assert rejected.value.code == ResponseCode.SYSTEM_ERROR
    assert remark in rejected.value.remark


def test_request_header_takes_a_key_renaming() -> None:
    renamed = {"topic": "t", "queue_id": "q"}
    header = request_header(TopicQueueRequestHeader, get_max_offset({"t": "T", "q": "1"}), renamed)
    assert (header.topic, header.queue_id) == ("T", 1)


def test_request_body_rejects_what_the_parser_cannot_read() -> None:
    request = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{not json")
    with pytest.raises(RequestRejected) as rejected:
        request_body(HeartbeatData.decode, request, "heartbeat")
    assert rejected.value.code == ResponseCode.SYSTEM_ERROR
    assert rejected.value.remark.startswith("bad heartbeat body: ")
    good = RemotingCommand.request(RequestCode.HEART_BEAT, body=b'{"clientID": "c1"}')
    assert request_body(HeartbeatData.decode, good, "heartbeat").client_id == "c1"


async def test_a_bad_header_through_the_dispatch_names_the_field() -> None:
    response = await server_with().dispatch(
        connection_from("peer:1"), get_max_offset({"topic": "T"}, SerializeType.MSGPACK)
    )
    assert response is not None
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "the custom field <queueId> is null",
    )
    assert response.serialize_type == SerializeType.MSGPACK


# --- hooks ----------------------------------------------------------------------------------


async def test_hooks_run_in_order_before_and_after_and_see_the_response() -> None:
    log: list[tuple[str, ...]] = []
    first, second = Recorder("first", log), Recorder("second", log)
    server = server_with()
    server.add_hook(first)
    server.add_hook(second)
    response = await server.dispatch(connection_from("10.0.0.1:5"), get_max_offset(TOPIC_QUEUE))
    assert response is not None and response.ext_fields == {"offset": "30"}
    assert log == [
        ("before", "first", "10.0.0.1:5"),
        ("before", "second", "10.0.0.1:5"),
        ("after", "first"),
        ("after", "second"),
    ]
    assert first.responses == [response] and second.responses == [response]


async def test_a_hook_before_the_request_may_reject_it() -> None:
    log: list[tuple[str, ...]] = []
    served: list[RemotingCommand] = []

    async def processor(connection: RemotingConnection, request: RemotingCommand) -> None:
        served.append(request)

    refusing, later = Recorder("acl", log, refuse_topic="Secret"), Recorder("later", log)
    server = server_with(processor)
    server.add_hook(refusing)
    server.add_hook(later)
    request = get_max_offset({"topic": "Secret", "queueId": "0"}, SerializeType.ROCKETMQ)
    response = await server.dispatch(connection_from("10.0.0.1:5"), request)
    assert response is not None
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "acl refuses")
    assert response.serialize_type == SerializeType.ROCKETMQ
    assert served == [], "the processor ran for a rejected request"
    # the hooks after the rejecting one do not run before it; every hook sees the response
    assert log == [
        ("before", "acl", "10.0.0.1:5"),
        ("after", "acl"),
        ("after", "later"),
    ]
    assert later.responses == [response]


async def test_hooks_see_a_processors_rejection_and_a_oneway_none() -> None:
    log: list[tuple[str, ...]] = []
    hook = Recorder("stats", log)
    server = server_with()
    server.add_hook(hook)
    rejected = await server.dispatch(connection_from("p:1"), get_max_offset({"topic": "T"}))
    assert rejected is not None and rejected.code == ResponseCode.SYSTEM_ERROR

    async def oneway(connection: RemotingConnection, request: RemotingCommand) -> None:
        return None

    server.register(RequestCode.GET_MIN_OFFSET, oneway)
    request = RemotingCommand.request(RequestCode.GET_MIN_OFFSET, oneway=True)
    assert await server.dispatch(connection_from("p:1"), request) is None
    assert hook.responses == [rejected, None]


def test_without_hooks_the_list_is_an_empty_tuple() -> None:
    # The dispatch's fast path tests `if self.hooks:`: nothing is built per request.
    server = server_with()
    assert server.hooks == ()
    server.add_hook(Recorder("a", []))
    assert isinstance(server.hooks, tuple) and len(server.hooks) == 1


# --- processors that answer at once ---------------------------------------------------------


def test_a_processor_that_answers_at_once_is_dispatched_without_a_coroutine() -> None:
    # END_TRANSACTION's process_now: its answer comes back from dispatch_now itself, after the
    # gate and with the hooks around it, as an async processor's does through dispatch
    log: list[tuple[str, ...]] = []
    hook = Recorder("stats", log, refuse_topic="Refused")
    server = RemotingServer("127.0.0.1", 0)
    server.add_hook(hook)

    @answers_at_once
    def at_once(connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        log.append(("processor", request.ext_fields["topic"]))
        if request.ext_fields["topic"] == "Missing":
            raise RequestRejected(ResponseCode.TOPIC_NOT_EXIST, "topic[Missing] not exist")
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, "done")

    server.register(RequestCode.GET_MAX_OFFSET, at_once)
    assert RequestCode.GET_MAX_OFFSET in server.now_processors
    answer = server.dispatch_now(connection_from("p:1"), get_max_offset({"topic": "T"}))
    assert isinstance(answer, RemotingCommand)
    assert (answer.code, answer.remark, answer.opaque) == (ResponseCode.SUCCESS, "done", 77)
    assert log == [("before", "stats", "p:1"), ("processor", "T"), ("after", "stats")]
    rejected = server.dispatch_now(connection_from("p:1"), get_max_offset({"topic": "Missing"}))
    assert isinstance(rejected, RemotingCommand)
    assert (rejected.code, rejected.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "topic[Missing] not exist",
    )
    refused = server.dispatch_now(connection_from("p:1"), get_max_offset({"topic": "Refused"}))
    assert isinstance(refused, RemotingCommand) and refused.code == ResponseCode.NO_PERMISSION
    assert ("processor", "Refused") not in log
    assert hook.responses == [answer, rejected, refused]


async def test_a_processor_that_answers_at_once_is_served_by_dispatch_too() -> None:
    # dispatch (awaited by callers other than the connections) serves it as any processor,
    # an answer given at once or through an awaitable; an async processor registered over it
    # takes its code back from dispatch_now
    server = RemotingServer("127.0.0.1", 0)

    async def later(request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, "later")

    @answers_at_once
    def at_once(
        connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        if request.ext_fields.get("topic") == "Later":
            return later(request)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, "now")

    server.register(RequestCode.GET_MAX_OFFSET, at_once)
    now = await server.dispatch(connection_from("p:1"), get_max_offset({"topic": "T"}))
    assert now is not None and now.remark == "now"
    pending = server.dispatch_now(connection_from("p:1"), get_max_offset({"topic": "Later"}))
    assert pending is not None and not isinstance(pending, RemotingCommand)
    answered = await pending
    assert answered is not None and answered.remark == "later"
    server.register(RequestCode.GET_MAX_OFFSET, offsets_processor)
    assert RequestCode.GET_MAX_OFFSET not in server.now_processors
    response = await server.dispatch(connection_from("p:1"), get_max_offset(TOPIC_QUEUE))
    assert response is not None and response.ext_fields == {"offset": "30"}
