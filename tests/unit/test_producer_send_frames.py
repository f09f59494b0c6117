"""A producer's send as `BrokerAPI.send_templated` writes it: on an open connection with no
signer, the frame head comes from the topic's template (client/protocol/send_frame.py), and it
must be the very frame the producer wrote before (a `RemotingCommand` of
`send_v2_ext_fields`' extFields); with a signer, or no open connection, the send goes the
command's way (signed, connected). Answers, refusals and timeouts end as they did. A fake
transport, no socket."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.fake_transport import FakeTransport
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import BrokerResponseError, RequestTimeoutError
from tidemq.client.message import SendResult, SendStatus
from tidemq.client.protocol.headers import send_v2_ext_fields
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.send_frame import send_frame_template
from tidemq.client.remoting.codes import (
    DEFAULT_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import FrameDecoder, encode_command, encode_command_parts
from tidemq.client.remoting.signing import SessionCredentials
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.connection import RemotingConnection

ADDRESS = "127.0.0.1:10911"
QUEUE = MessageQueue("T", "broker-a", 3)
PROPERTIES = "UNIQ_KEY\x01ABC\x02WAIT\x01true\x02"
BODY = b"x" * 100


def _client(credentials: SessionCredentials | None = None) -> tuple[BrokerAPI, FakeTransport]:
    remoting = RemotingClient()
    connection = RemotingConnection(name=ADDRESS)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    remoting._connections[ADDRESS] = connection
    return BrokerAPI(remoting, credentials=credentials), transport


def _send(api: BrokerAPI, timeout: float = 5.0, batch: bool = False) -> Any:
    template = send_frame_template("PG", "T", "TBW102", 4, batch)
    return api.send_templated(
        ADDRESS, template, QUEUE, "UNIQ", 0, 1_700_000_000_000, 0, PROPERTIES, BODY,
        timeout=timeout,
    )  # fmt: skip


async def _sent(transport: FakeTransport) -> RemotingCommand:
    await eventually(lambda: transport.writes, "the send on the wire")
    (command,) = FrameDecoder().feed(b"".join(transport.writes))
    return command


def _answer(api: BrokerAPI, request: RemotingCommand, code: int, **ext: str) -> None:
    connection = api.remoting._connections[ADDRESS]
    response = RemotingCommand.response_to(request, code, "remark", ext)
    connection.data_received(encode_command(response))


@pytest.mark.parametrize("batch", [False, True])
async def test_a_templated_send_is_the_frame_the_producer_wrote_before(batch: bool) -> None:
    api, transport = _client()
    sending = asyncio.ensure_future(_send(api, batch=batch))
    request = await _sent(transport)
    ext = send_v2_ext_fields("PG", "T", "TBW102", 4, 3, 0, 1_700_000_000_000, 0, PROPERTIES, batch)
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    before = RemotingCommand(
        int(code),
        int(LanguageCode.PYTHON),
        DEFAULT_VERSION,
        request.opaque,
        0,
        None,
        ext,
        BODY,
        SerializeType.MSGPACK,
    )
    assert b"".join(transport.writes) == b"".join(encode_command_parts(before))
    _answer(api, request, ResponseCode.SUCCESS, msgId="OFFSETID", queueId="3", queueOffset="9")
    result = await sending
    assert result == SendResult(SendStatus.SEND_OK, "UNIQ", "OFFSETID", QUEUE, 9)
    assert result.message_queue is QUEUE  # the producer's own queue object, not a copy
    assert not api.remoting._connections[ADDRESS]._pending


async def test_a_stored_but_status_is_a_result_in_the_queue_the_broker_names() -> None:
    api, transport = _client()
    sending = asyncio.ensure_future(_send(api))
    request = await _sent(transport)
    _answer(api, request, ResponseCode.FLUSH_SLAVE_TIMEOUT, msgId="M", queueId="5")
    result = await sending
    assert result.status is SendStatus.FLUSH_SLAVE_TIMEOUT
    assert (result.message_queue, result.queue_offset) == (MessageQueue("T", "broker-a", 5), -1)


async def test_a_refusal_raises_its_code_error() -> None:
    api, transport = _client()
    sending = asyncio.ensure_future(_send(api))
    _answer(api, await _sent(transport), ResponseCode.TOPIC_NOT_EXIST)
    with pytest.raises(BrokerResponseError) as caught:
        await sending
    assert (caught.value.code, caught.value.remark) == (ResponseCode.TOPIC_NOT_EXIST, "remark")


async def test_an_unanswered_send_times_out_as_a_command_did() -> None:
    api, _transport = _client()
    with pytest.raises(RequestTimeoutError) as caught:
        await _send(api, timeout=0.05)
    assert str(caught.value) == (
        f"no response from {ADDRESS} to request code {int(RequestCode.SEND_MESSAGE_V2)} in 0.1 s"
    )
    assert not api.remoting._connections[ADDRESS]._pending


async def test_a_signed_send_goes_as_a_signed_command() -> None:
    api, transport = _client(SessionCredentials("ak", "secret-key"))
    sending = asyncio.ensure_future(_send(api))
    request = await _sent(transport)
    assert request.ext_fields["AccessKey"] == "ak" and request.ext_fields["Signature"]
    unsigned = send_v2_ext_fields(
        "PG", "T", "TBW102", 4, 3, 0, 1_700_000_000_000, 0, PROPERTIES, False
    )
    assert {k: v for k, v in request.ext_fields.items() if k in unsigned} == unsigned
    _answer(api, request, ResponseCode.SUCCESS, msgId="M", queueId="3", queueOffset="1")
    assert (await sending).queue_offset == 1


async def test_a_paused_connection_sends_once_it_takes_writes_again() -> None:
    api, transport = _client()
    connection = api.remoting._connections[ADDRESS]
    connection.pause_writing()
    sending = asyncio.ensure_future(_send(api))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not transport.writes and not sending.done()
    connection.resume_writing()
    request = await _sent(transport)
    _answer(api, request, ResponseCode.SUCCESS, msgId="M", queueId="3", queueOffset="2")
    assert (await sending).queue_offset == 2
