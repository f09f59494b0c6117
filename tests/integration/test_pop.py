"""POP consumption in the broker (broker/pop/service.py) through its two doors, in process: the
gRPC RPCs over a real channel (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue) and the remoting codes over a real connection (POP_MESSAGE,
ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, BATCH_ACK_MESSAGE). Redelivery through the revive
service, the DLQ after the group's maximum, a broker restart with checkpoints in flight, and
RocketMQ's reported failures #7724, #9583, #5408 as situations. The official 5.x client against
brokerd is tests/integration/test_rocketmq5_pop.py."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import time
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from grpc import aio

from tests.support.conditions import eventually
from tests.support.grpc_endpoint import SERVICE, grpc_broker, unary_call
from tests.support.wire import send_header
from tidemq.broker.broker import Broker
from tidemq.broker.pop import records
from tidemq.broker.pop.receipt import ReceiptHandle
from tidemq.broker.proxy import service as proxy_service
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Code,
    FilterExpression,
    FilterType,
    Message,
    MessageQueue,
    MessageType,
    Resource,
)
from tidemq.broker.proxy.service import choose_queue
from tidemq.client.api import BrokerAPI
from tidemq.client.message import SendStatus
from tidemq.client.protocol.models import PERM_WRITE, SubscriptionGroupConfig, TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.client import RemotingClient
from tidemq.store.record import StoredMessage, decode_record

pytestmark = pytest.mark.asyncio

CLIENT = (("x-mq-client-id", "pop-client"), ("x-mq-language", "PYTHON"))
TOPIC = "PT"
GROUP = "GPOP"
SHORT_MS = 300  # invisible time of the redelivery cases (the minimum is lowered for them)


def make_broker(tmp_path: Path) -> Broker:
    proxy = ProxyConfig(grpc_server_port=0, min_invisible_time_mills_for_recv=100)
    return grpc_broker(tmp_path, "pop-a", proxy)


async def started(tmp_path: Path) -> Broker:
    broker = make_broker(tmp_path)
    await broker.start()
    broker.topics.update(TopicConfig(TOPIC, 2, 2))
    return broker


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = await started(tmp_path)
    try:
        yield broker
    finally:
        await broker.stop()


def grpc_channel(broker: Broker) -> aio.Channel:
    assert broker.grpc is not None
    return aio.insecure_channel(f"127.0.0.1:{broker.grpc.port}")


@pytest.fixture
async def channel(broker: Broker) -> AsyncIterator[aio.Channel]:
    async with grpc_channel(broker) as channel:
        yield channel


async def unary(channel: aio.Channel, method: str, request: Any, response: type[Any]) -> Any:
    return await unary_call(channel, method, request, response, metadata=CLIENT, timeout=30)


async def send(channel: aio.Channel, *bodies: bytes, tag: str = "") -> None:
    messages = []
    for index, body in enumerate(bodies):
        message = Message(topic=Resource(name=TOPIC), body=body)
        message.system_properties.message_id = f"id-{body.decode()}-{index}-{time.time_ns()}"
        message.system_properties.message_type = MessageType.NORMAL
        if tag:
            message.system_properties.tag = tag
        messages.append(message)
    for message in messages:
        answer = await unary(
            channel,
            "SendMessage",
            pb.SendMessageRequest(messages=[message]),
            pb.SendMessageResponse,
        )
        assert answer.status.code == Code.OK, answer.status


async def receive(
    channel: aio.Channel,
    *,
    batch: int = 32,
    invisible_ms: int = 30_000,
    poll_ms: int = 0,
    tag: str = "*",
    timeout: float = 30,
) -> tuple[list[Any], list[Message]]:
    """The stream's answers split into statuses and messages, in the order they came; the
    call fails (DEADLINE_EXCEEDED) when they did not all come within `timeout` seconds."""
    request = pb.ReceiveMessageRequest(
        group=Resource(name=GROUP),
        message_queue=MessageQueue(topic=Resource(name=TOPIC), id=-1),
        filter_expression=FilterExpression(type=FilterType.TAG, expression=tag),
        batch_size=batch,
        invisible_duration=_duration(invisible_ms),
        long_polling_timeout=_duration(poll_ms),
    )
    call = channel.unary_stream(
        SERVICE + "ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )
    statuses: list[Any] = []
    messages: list[Message] = []
    called_ms = int(time.time() * 1000)
    answers = [answer async for answer in call(request, metadata=CLIENT, timeout=timeout)]
    answered_ms = int(time.time() * 1000) + 1
    # The proxy's order: a status, the messages, then the delivery timestamp, always last; the
    # timestamp falls inside the call (same machine, same clock).
    assert answers[-1].WhichOneof("content") == "delivery_timestamp", answers[-1]
    delivered_ms = answers[-1].delivery_timestamp.ToMilliseconds()
    assert called_ms <= delivered_ms <= answered_ms, (called_ms, delivered_ms, answered_ms)
    for answer in answers[:-1]:
        kind = answer.WhichOneof("content")
        if kind == "status":
            assert not messages, "a status after messages"
            statuses.append(answer.status)
        elif kind == "message":
            assert statuses and statuses[0].code == Code.OK, "messages before the OK status"
            messages.append(answer.message)
    return statuses, messages


async def ack(channel: aio.Channel, *messages: Message, handle: str | None = None) -> Any:
    entries = [
        pb.AckMessageEntry(
            message_id=m.system_properties.message_id,
            receipt_handle=handle or m.system_properties.receipt_handle,
        )
        for m in messages
    ]
    request = pb.AckMessageRequest(
        group=Resource(name=GROUP), topic=Resource(name=TOPIC), entries=entries
    )
    return await unary(channel, "AckMessage", request, pb.AckMessageResponse)


async def change(channel: aio.Channel, message: Message, invisible_ms: int) -> Any:
    request = pb.ChangeInvisibleDurationRequest(
        group=Resource(name=GROUP),
        topic=Resource(name=TOPIC),
        receipt_handle=message.system_properties.receipt_handle,
        invisible_duration=_duration(invisible_ms),
        message_id=message.system_properties.message_id,
    )
    return await unary(
        channel, "ChangeInvisibleDuration", request, pb.ChangeInvisibleDurationResponse
    )


def _duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def bodies(messages: list[Message]) -> list[bytes]:
    return sorted(m.body for m in messages)


async def receive_all(
    channel: aio.Channel,
    count: int,
    *,
    invisible_ms: int = 30_000,
    timeout: float = 10,
    batch: int = 32,
) -> list[Message]:
    """Receive until `count` messages came (long polls of 1 s), failing after `timeout`."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} messages came"
        _statuses, messages = await receive(
            channel, batch=batch, invisible_ms=invisible_ms, poll_ms=1000
        )
        got += messages
    return got


# --- gRPC ----------------------------------------------------------------------------------


async def test_receive_answers_status_then_messages_with_handles_and_ack_ends_them(
    broker: Broker, channel: aio.Channel
) -> None:
    await send(channel, b"a", b"b", b"c")
    statuses, messages = await receive(channel)
    assert [s.code for s in statuses] == [Code.OK]
    assert bodies(messages) == [b"a", b"b", b"c"]
    for message in messages:
        system = message.system_properties
        assert message.topic.name == TOPIC
        assert system.delivery_attempt == 1
        handle = ReceiptHandle.decode(system.receipt_handle)
        assert handle.invisible_time == 30_000 and handle.broker_name == "pop-a"
        assert system.invisible_duration.seconds == 30
    answer = await ack(channel, *messages)
    assert answer.status.code == Code.OK
    assert [e.status.code for e in answer.entries] == [Code.OK] * 3
    # Nothing more: the next receive's one answer is MESSAGE_NOT_FOUND.
    statuses, messages = await receive(channel)
    assert [s.code for s in statuses] == [Code.MESSAGE_NOT_FOUND] and not messages
    await eventually(
        lambda: broker.pop.in_flight(TOPIC, GROUP) == 0 and broker.pop.ledgers,
        "the acks read by the revive service",
    )


async def test_a_failure_after_the_first_message_ends_the_stream_without_a_second_status(
    broker: Broker, channel: aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: an error mid-stream answered a status after messages, which the 5.x
    clients do not expect (status, messages, timestamp). The stream ends early instead; what
    was popped and not sent comes back after its invisible time."""
    await send(channel, b"a", b"b", b"c")
    real = proxy_service.from_store
    converted: list[object] = []

    def failing_on_the_second(stored: StoredMessage) -> Message:
        converted.append(stored)
        if len(converted) == 2:
            raise RuntimeError("injected")
        return real(stored)

    monkeypatch.setattr(proxy_service, "from_store", failing_on_the_second)
    statuses, messages = await receive(channel)  # asserts no status after messages
    assert [s.code for s in statuses] == [Code.OK]
    assert len(messages) == 1 and messages[0].body in (b"a", b"b", b"c")


async def test_a_long_poll_is_answered_when_a_message_arrives(
    broker: Broker, channel: aio.Channel
) -> None:
    import asyncio

    # The poll outlasts the call's deadline: a receive that only the end of its poll answers
    # fails by DEADLINE_EXCEEDED (a condition of the call, not a measured time).
    assert broker.proxy_config is not None
    poll_ms = broker.proxy_config.grpc_client_consumer_max_long_polling_timeout_millis
    waiting = asyncio.ensure_future(receive(channel, poll_ms=poll_ms, timeout=poll_ms / 2000))
    await eventually(lambda: broker.pull_holds.held_count == 1, "the receive held")
    await send(channel, b"late")
    statuses, messages = await waiting
    assert [s.code for s in statuses] == [Code.OK] and bodies(messages) == [b"late"]
    # Empty and not held: answered at once with MESSAGE_NOT_FOUND.
    statuses, _ = await receive(channel, poll_ms=0)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND


async def test_a_receive_held_before_the_retry_topic_exists_gets_the_first_redelivery(
    broker: Broker, channel: aio.Channel
) -> None:
    """Found while timing the suite: the official 5.x push consumer's first redelivery came
    at the end of its 20 s long poll, not after its backoff. A receive held while the group
    had no retry topic waited on the topic's queues only; the put-back that makes the retry
    topic woke nothing. As in the long-poll test, only a wake-up answers within the deadline."""
    await send(channel, b"again")
    _s, first = await receive(channel, invisible_ms=1000)
    assert bodies(first) == [b"again"]
    held = asyncio.ensure_future(receive(channel, poll_ms=25_000, timeout=10))
    await eventually(lambda: broker.pull_holds.held_count == 1, "the receive held")
    assert broker.topics.select(f"%RETRY%{GROUP}") is None, "held after the put-back"
    statuses, again = await held
    assert [s.code for s in statuses] == [Code.OK] and bodies(again) == [b"again"]
    assert again[0].system_properties.delivery_attempt == 2
    assert broker.pull_holds.ended_by["arrival"] >= 1


async def test_a_broker_without_read_permission_pops_nothing(
    broker: Broker, channel: aio.Channel
) -> None:
    """Found in review: POP ignored brokerPermission (a pull is refused NO_PERMISSION on a
    broker that is not readable), on both doors."""
    await send(channel, b"kept")
    readable = broker.state.config
    broker.state.config = dataclasses.replace(readable, broker_permission=PERM_WRITE)
    popped = await remoting(broker, RequestCode.POP_MESSAGE, pop_header())
    assert popped.code == ResponseCode.NO_PERMISSION, popped.remark
    statuses, messages = await receive(channel)
    assert [s.code for s in statuses] == [Code.FORBIDDEN] and not messages
    broker.state.config = readable
    assert bodies(await receive_all(channel, 1)) == [b"kept"]  # nothing was handed out


async def test_a_full_long_polling_service_refuses_to_hold_a_pop(
    broker: Broker, channel: aio.Channel
) -> None:
    """Found in review: a POP's long poll was held whatever the number held already (a pull
    is refused at pullThreadPoolQueueCapacity); now refused as RocketMQ's POLLING_FULL."""
    broker.pull_holds.max_held = 0
    popped = await remoting(broker, RequestCode.POP_MESSAGE, pop_header(pollTime="60000"))
    assert popped.code == ResponseCode.POLLING_FULL, popped.remark
    statuses, _ = await receive(channel, poll_ms=60_000, timeout=30)
    assert [s.code for s in statuses] == [Code.TOO_MANY_REQUESTS]
    # Not held: a pop with nothing to wait for is answered as before.
    statuses, _ = await receive(channel, poll_ms=0)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND


async def test_unacknowledged_messages_come_back_with_one_more_attempt(
    broker: Broker, channel: aio.Channel
) -> None:
    await send(channel, b"x", b"y")
    _s, first = await receive(channel, invisible_ms=SHORT_MS)
    assert bodies(first) == [b"x", b"y"]
    await ack(channel, next(m for m in first if m.body == b"x"))
    again = await receive_all(channel, 1, invisible_ms=30_000)
    assert bodies(again) == [b"y"]  # the acknowledged one never comes back (#7724)
    assert again[0].system_properties.delivery_attempt == 2
    assert again[0].topic.name == TOPIC
    assert (
        again[0].system_properties.message_id
        == next(m for m in first if m.body == b"y").system_properties.message_id
    )
    assert (await ack(channel, *again)).status.code == Code.OK
    await eventually(lambda: broker.pop.in_flight(TOPIC, GROUP) == 0, "nothing in flight")
    statuses, _ = await receive(channel, poll_ms=SHORT_MS * 4)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND


async def test_change_of_invisible_duration_keeps_both_handles_valid_9583(
    broker: Broker, channel: aio.Channel
) -> None:
    await send(channel, b"slow", b"slower")
    _s, messages = await receive(channel, invisible_ms=SHORT_MS * 2)
    slow = next(m for m in messages if m.body == b"slow")
    slower = next(m for m in messages if m.body == b"slower")
    changed = await change(channel, slow, 30_000)
    assert changed.status.code == Code.OK
    new = ReceiptHandle.decode(changed.receipt_handle)
    old = ReceiptHandle.decode(slow.system_properties.receipt_handle)
    assert new.offset == old.offset and new.invisible_time == 30_000
    longer = await change(channel, slower, 30_000)
    # slow: past its first invisible time it does not come back (the new CK holds it) ...
    await asyncio_sleep_past(SHORT_MS * 2 + 1500)
    statuses, _ = await receive(channel)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND
    # ... and the OLD handle still acknowledges it; the new one acknowledges slower.
    assert (await ack(channel, slow)).status.code == Code.OK
    assert (await ack(channel, slower, handle=longer.receipt_handle)).status.code == Code.OK
    await eventually(lambda: broker.pop.in_flight(TOPIC, GROUP) == 0, "both acknowledged")
    # An expired handle cannot be changed (its message may be revived already).
    await send(channel, b"expired")
    _s, messages = await receive(channel, invisible_ms=100)
    await asyncio_sleep_past(300)
    refused = await change(channel, messages[0], 30_000)
    assert refused.status.code == Code.INVALID_RECEIPT_HANDLE


async def asyncio_sleep_past(ms: int) -> None:
    """Let an invisible time run out (the one thing a test must wait for by the clock)."""
    import asyncio

    await asyncio.sleep(ms / 1000)


async def test_after_max_attempts_a_message_goes_to_the_dlq(
    broker: Broker, channel: aio.Channel
) -> None:
    broker.groups.update(SubscriptionGroupConfig(group_name=GROUP, retry_max_times=1))
    await send(channel, b"poison")
    _s, first = await receive(channel, invisible_ms=SHORT_MS)
    second = await receive_all(channel, 1, invisible_ms=SHORT_MS)
    assert second[0].system_properties.delivery_attempt == 2
    dlq = "%DLQ%" + GROUP
    await eventually(lambda: broker.store.max_offset_in_queue(dlq, 0) == 1, "the DLQ", 10)
    stored = decode_record(broker.store.get_message("", dlq, 0, 0, 1).messages[0])
    assert stored.body == b"poison" and stored.properties["RETRY_TOPIC"] == TOPIC
    statuses, _ = await receive(channel, poll_ms=SHORT_MS * 4)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND
    del first


async def test_forward_to_dead_letter_queue_stores_and_acknowledges(
    broker: Broker, channel: aio.Channel
) -> None:
    await send(channel, b"bad")
    _s, messages = await receive(channel, invisible_ms=SHORT_MS)
    request = pb.ForwardMessageToDeadLetterQueueRequest(
        group=Resource(name=GROUP),
        topic=Resource(name=TOPIC),
        receipt_handle=messages[0].system_properties.receipt_handle,
        message_id=messages[0].system_properties.message_id,
        delivery_attempt=1,
        max_delivery_attempts=1,
    )
    answer = await unary(
        channel,
        "ForwardMessageToDeadLetterQueue",
        request,
        pb.ForwardMessageToDeadLetterQueueResponse,
    )
    assert answer.status.code == Code.OK
    assert broker.store.max_offset_in_queue("%DLQ%" + GROUP, 0) == 1
    statuses, _ = await receive(channel, poll_ms=SHORT_MS * 5)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND  # acknowledged: never revived


async def test_forward_to_dead_letter_needs_a_known_group(
    broker: Broker, channel: aio.Channel
) -> None:
    """Found in review: any group name made a `%DLQ%<group>` topic (a handle names no group)."""
    await send(channel, b"bad")
    _s, messages = await receive(channel)
    broker.groups.auto_create = False  # as autoCreateSubscriptionGroup=false
    request = pb.ForwardMessageToDeadLetterQueueRequest(
        group=Resource(name="NobodysGroup"),
        topic=Resource(name=TOPIC),
        receipt_handle=messages[0].system_properties.receipt_handle,
        message_id=messages[0].system_properties.message_id,
        delivery_attempt=1,
        max_delivery_attempts=1,
    )
    answer = await unary(
        channel,
        "ForwardMessageToDeadLetterQueue",
        request,
        pb.ForwardMessageToDeadLetterQueueResponse,
    )
    assert answer.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    assert "%DLQ%NobodysGroup" not in broker.topics


async def test_bad_handles_and_arguments_get_their_codes(channel: aio.Channel) -> None:
    await send(channel, b"m")
    _s, messages = await receive(channel)
    bad = await ack(channel, messages[0], handle="not a handle")
    assert bad.status.code == Code.INVALID_RECEIPT_HANDLE
    assert "fields" in bad.entries[0].status.message
    # Entries that end differently: each its own status, the request's MULTIPLE_RESULTS.
    entries = [
        pb.AckMessageEntry(message_id="good", receipt_handle=handle)
        for handle in (messages[0].system_properties.receipt_handle, "not a handle")
    ]
    acks = pb.AckMessageRequest(
        group=Resource(name=GROUP), topic=Resource(name=TOPIC), entries=entries
    )
    mixed = await unary(channel, "AckMessage", acks, pb.AckMessageResponse)
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [Code.OK, Code.INVALID_RECEIPT_HANDLE]
    statuses, _ = await receive(channel, invisible_ms=50)  # below the minimum (100 here)
    assert statuses[0].code == Code.ILLEGAL_INVISIBLE_TIME
    request = pb.ReceiveMessageRequest(
        group=Resource(name=GROUP),
        message_queue=MessageQueue(topic=Resource(name="NOPE"), id=-1),
        batch_size=1,
    )
    call = channel.unary_stream(
        SERVICE + "ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )
    answers = [a async for a in call(request, metadata=CLIENT, timeout=10)]
    assert [a.WhichOneof("content") for a in answers] == ["status", "delivery_timestamp"]
    assert answers[0].status.code == Code.TOPIC_NOT_FOUND


async def test_a_restart_keeps_what_is_in_flight_and_forgets_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    broker = await started(tmp_path)
    try:
        async with grpc_channel(broker) as channel:
            await send(channel, *(str(i).encode() for i in range(10)))
            _s, messages = await receive(channel, invisible_ms=2000)
            assert len(messages) == 10
            acked = [m for m in messages if int(m.body) % 2 == 0]
            await ack(channel, *acked)
    finally:
        await broker.stop()
    broker = await started(tmp_path)  # the revive service reads the checkpoints again
    try:
        async with grpc_channel(broker) as channel:
            back = await receive_all(channel, 5, timeout=15)
            assert bodies(back) == [b"1", b"3", b"5", b"7", b"9"]
            assert {m.system_properties.delivery_attempt for m in back} == {2}
            await ack(channel, *back)
            await eventually(lambda: broker.pop.in_flight(TOPIC, GROUP) == 0, "all acked")
            # #5408: the revive offset is not stuck behind checkpoints that are done.
            topic = broker.pop.revive_topic

            def caught_up() -> bool:
                return all(
                    broker.offsets.query(records.REVIVE_GROUP, topic, qid)
                    in (-1, broker.store.max_offset_in_queue(topic, qid))
                    for qid in range(broker.pop.revive_queue_num)
                )

            await eventually(caught_up, "every revive offset past what is done")
            statuses, _ = await receive(channel, poll_ms=3000)
            assert statuses[0].code == Code.MESSAGE_NOT_FOUND
    finally:
        await broker.stop()


# --- remoting ------------------------------------------------------------------------------


async def remoting(broker: Broker, code: int, ext: dict[str, str], body: bytes = b"") -> Any:
    client = RemotingClient(idle_timeout=0)
    try:
        request = RemotingCommand.request(code, ext, body=body)
        return await client.invoke(f"127.0.0.1:{broker.listen_port}", request, timeout=30)
    finally:
        await client.close()


def pop_header(**given: str) -> dict[str, str]:
    header = {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": "30000",
        "pollTime": "0",
        "bornTime": str(int(time.time() * 1000)),
        "initMode": "0",
    }
    header.update(given)
    return header


def handles_of(response: RemotingCommand, broker_name: str) -> list[str]:
    """Each popped message's receipt handle, built as RocketMQ's client builds it from the
    header's startOffsetInfo and msgOffsetInfo."""
    ext = response.ext_fields
    starts = {}
    for item in ext["startOffsetInfo"].split(";"):
        kind, queue, start = item.split(" ")
        starts[(kind, queue)] = start
    out = []
    for item in ext["msgOffsetInfo"].split(";"):
        kind, queue, offsets = item.split(" ")
        for offset in offsets.split(","):
            out.append(
                " ".join(
                    (
                        starts[(kind, queue)],
                        ext["popTime"],
                        ext["invisibleTime"],
                        ext["reviveQid"],
                        kind,
                        broker_name,
                        queue,
                        offset,
                    )
                )
            )
    return out


async def test_remoting_pop_ack_change_and_batch_ack(broker: Broker, channel: aio.Channel) -> None:
    await send(channel, b"r1", b"r2", b"r3")
    popped = await remoting(broker, RequestCode.POP_MESSAGE, pop_header())
    assert popped.code == ResponseCode.SUCCESS, popped.remark
    records_ = []
    view = memoryview(bytes(popped.body))
    pos = 0
    while pos < len(view):
        record = decode_record(view, pos)
        records_.append(record)
        pos += record.total_size
    assert sorted(r.body for r in records_) == [b"r1", b"r2", b"r3"]
    handles = handles_of(popped, "pop-a")
    assert len(handles) == 3
    one, two, three = (h.split(" ") for h in handles)
    # ACK_MESSAGE: RocketMQ's 7-field extraInfo with the offset in the header
    acked = await remoting(
        broker,
        RequestCode.ACK_MESSAGE,
        {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": one[6],
            "extraInfo": " ".join(one[:7]),
            "offset": one[7],
        },
    )
    assert acked.code == ResponseCode.SUCCESS, acked.remark
    changed = await remoting(
        broker,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": two[6],
            "extraInfo": " ".join(two),
            "offset": two[7],
            "invisibleTime": "60000",
        },
    )
    assert changed.code == ResponseCode.SUCCESS, changed.remark
    assert changed.ext_fields["invisibleTime"] == "60000"
    start, bit = int(three[0]), int(three[7]) - int(three[0])
    bits = bytearray(bit // 8 + 1)
    bits[bit // 8] |= 1 << (bit % 8)
    body = {
        "brokerName": "pop-a",
        "acks": [
            {
                "c": GROUP,
                "t": TOPIC,
                "r": three[4],
                "so": start,
                "q": int(three[6]),
                "rq": int(three[3]),
                "pt": int(three[1]),
                "it": int(three[2]),
                "b": base64.b64encode(bytes(bits)).decode(),
            }
        ],
    }
    batch = await remoting(broker, RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps(body).encode())
    assert batch.code == ResponseCode.SUCCESS, batch.remark
    await eventually(
        lambda: broker.pop.in_flight(TOPIC, GROUP) == 1, "only the changed one in flight"
    )
    empty = await remoting(broker, RequestCode.POP_MESSAGE, pop_header(pollTime="200"))
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    illegal = await remoting(broker, RequestCode.POP_MESSAGE, pop_header(topic="a/b"))
    assert illegal.code == ResponseCode.SYSTEM_ERROR and "topic" in (illegal.remark or "")
    bad = await remoting(
        broker,
        RequestCode.ACK_MESSAGE,
        {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "extraInfo": "x", "offset": "0"},
    )
    assert bad.code == ResponseCode.MESSAGE_ILLEGAL


async def test_a_change_in_the_pops_own_millisecond_keeps_its_checkpoint(
    broker: Broker, channel: aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the remoting test: a change of the first offset of a pop within the pop's
    millisecond wrote a CK with the old CK's key; the ledger took it for a re-read and the
    ack of the old CK then ended the message for good (never revived: lost)."""
    await send(channel, b"same-ms")
    frozen = time.time()
    # The POP service's clock alone (not time.time itself): the store's timestamps and the
    # rest of the broker keep the real one.
    clock = types.SimpleNamespace(time=lambda: frozen, monotonic=time.monotonic)
    monkeypatch.setattr("tidemq.broker.pop.service.time", clock)
    result = await broker.pop.pop(GROUP, TOPIC, -1, 1, 500, 0)
    handle = result.messages[0].handle
    assert handle.start_offset == handle.offset  # the pop's first offset
    new = await broker.pop.change_invisible(GROUP, TOPIC, handle.encode(), 500)
    assert new.pop_time != handle.pop_time
    monkeypatch.undo()
    back = await receive_all(channel, 1, timeout=10)  # revived after the new CK's time
    assert bodies(back) == [b"same-ms"]
    assert back[0].system_properties.delivery_attempt == 2


async def send_group(channel: aio.Channel, group: str, *bodies: bytes) -> None:
    for body in bodies:
        message = Message(topic=Resource(name=TOPIC), body=body)
        message.system_properties.message_id = f"fifo-{body.decode()}-{time.time_ns()}"
        message.system_properties.message_type = MessageType.FIFO
        message.system_properties.message_group = group
        answer = await unary(
            channel,
            "SendMessage",
            pb.SendMessageRequest(messages=[message]),
            pb.SendMessageResponse,
        )
        assert answer.status.code == Code.OK, answer.status


async def test_a_fifo_group_gets_a_message_groups_next_only_after_the_ack(
    broker: Broker, channel: aio.Channel
) -> None:
    broker.groups.update(
        SubscriptionGroupConfig(group_name=GROUP, retry_max_times=1, consume_message_orderly=True)
    )
    await send_group(channel, "order-7", b"f1", b"f2", b"f3")
    _s, first = await receive(channel, batch=1, invisible_ms=30_000)
    assert bodies(first) == [b"f1"]
    statuses, _ = await receive(channel, batch=1, poll_ms=300)
    assert statuses[0].code == Code.MESSAGE_NOT_FOUND  # f2 waits for f1's ack
    assert (await ack(channel, *first)).status.code == Code.OK
    _s, second = await receive(channel, batch=1, invisible_ms=SHORT_MS)
    assert bodies(second) == [b"f2"] and second[0].system_properties.delivery_attempt == 1
    # Not acknowledged: f2 again once visible, its second attempt, in the topic itself.
    again = await receive_all(channel, 1, invisible_ms=SHORT_MS, batch=1)
    assert bodies(again) == [b"f2"] and again[0].system_properties.delivery_attempt == 2
    assert again[0].topic.name == TOPIC
    # retryMaxTimes 1: a third delivery goes to the DLQ instead, and f3 comes next.
    third = await receive_all(channel, 1, batch=1)
    assert bodies(third) == [b"f3"] and third[0].system_properties.delivery_attempt == 1
    assert broker.store.max_offset_in_queue("%DLQ%" + GROUP, 0) == 1
    assert (await ack(channel, *third)).status.code == Code.OK
    assert broker.pop.in_flight(TOPIC, GROUP) == 0
    settings_fifo = broker.groups.get(GROUP)
    assert settings_fifo is not None and settings_fifo.to_dict()["consumeMessageOrderly"]


async def test_fifo_message_groups_on_one_queue_wait_only_for_their_own(
    tmp_path: Path,
) -> None:
    """Three message groups in one queue: one message of each in flight at a time, an ack lets
    its group's next go while the others wait; after a restart the unacknowledged come back
    with their attempt counts going on (the FIFO state is persisted)."""
    broker = await started(tmp_path)
    config = SubscriptionGroupConfig(group_name=GROUP, consume_message_orderly=True)
    broker.groups.update(config)
    names = [f"order-{i}" for i in range(100) if choose_queue(2, f"order-{i}") == 0]
    ga, gb, gc = names[:3]
    try:
        async with grpc_channel(broker) as channel:
            await send_group(channel, ga, b"a0", b"a1")
            await send_group(channel, gb, b"b0", b"b1")
            await send_group(channel, gc, b"c0")
            assert broker.store.max_offset_in_queue(TOPIC, 0) == 5  # one queue holds them
            _s, first = await receive(channel, batch=10, invisible_ms=3000)
            assert bodies(first) == [b"a0", b"b0", b"c0"]
            assert (await ack(channel, *[m for m in first if m.body == b"b0"])).status.code == (
                Code.OK
            )
            _s, second = await receive(channel, batch=10, invisible_ms=3000)
            assert bodies(second) == [b"b1"]  # gb goes on; ga and gc wait for their acks
            statuses, _ = await receive(channel, batch=10, poll_ms=200)
            assert statuses[0].code == Code.MESSAGE_NOT_FOUND
    finally:
        await broker.stop()
    broker = await started(tmp_path)
    try:
        async with grpc_channel(broker) as channel:
            back = await receive_all(channel, 3, batch=10, invisible_ms=30_000, timeout=20)
            assert bodies(back) == [b"a0", b"b1", b"c0"]
            assert {m.system_properties.delivery_attempt for m in back} == {2}
            await ack(channel, *back)
            last = await receive_all(channel, 1, batch=10, timeout=20)
            assert bodies(last) == [b"a1"] and last[0].system_properties.delivery_attempt == 1
            await ack(channel, *last)
            assert broker.pop.in_flight(TOPIC, GROUP) == 0
            assert broker.offsets.query(GROUP, TOPIC, 0) == 5
    finally:
        await broker.stop()


async def test_a_fifo_ack_wakes_a_receive_held_on_the_queue(
    broker: Broker, channel: aio.Channel
) -> None:
    """A receive long-polling while the group's next message waits on an ack is answered by
    that ack (before, only by the end of its 25 s poll: its 10 s deadline would pass)."""
    broker.groups.update(SubscriptionGroupConfig(group_name=GROUP, consume_message_orderly=True))
    await send_group(channel, "order-9", b"g1", b"g2")
    _s, first = await receive(channel, batch=1)
    assert bodies(first) == [b"g1"]
    held = asyncio.ensure_future(receive(channel, batch=1, poll_ms=25_000, timeout=10))
    await eventually(lambda: broker.pull_holds.held_count >= 1, "the receive is held", 10)
    assert (await ack(channel, *first)).status.code == Code.OK
    _s, second = await held
    assert bodies(second) == [b"g2"]


async def receive_renewed(channel: aio.Channel, client: str) -> list[Message]:
    """A push consumer's receive: auto_renew, no invisible duration (the broker chooses)."""
    request = pb.ReceiveMessageRequest(
        group=Resource(name=GROUP),
        message_queue=MessageQueue(topic=Resource(name=TOPIC), id=-1),
        filter_expression=FilterExpression(type=FilterType.TAG, expression="*"),
        batch_size=32,
        auto_renew=True,
        long_polling_timeout=_duration(1000),
    )
    call = channel.unary_stream(
        SERVICE + "ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )
    metadata = (("x-mq-client-id", client), ("x-mq-language", "PYTHON"))
    answers = [a async for a in call(request, metadata=metadata, timeout=30)]
    return [a.message for a in answers if a.WhichOneof("content") == "message"]


async def test_auto_renewed_messages_stay_invisible_until_acked_or_their_client_goes(
    tmp_path: Path,
) -> None:
    """The broker chooses 1 s for an auto-renewed receive and renews it: 3 s later the message
    is still invisible, and the ack with the handle the client received ends it. A client
    that terminates gets its messages made visible again at once (1 s later), for others."""
    proxy = ProxyConfig(
        grpc_server_port=0,
        default_invisible_time_mills=1000,
        renew_ahead_time_millis=500,
        renew_schedule_period_millis=100,
    )
    broker = grpc_broker(tmp_path, "pop-a", proxy)
    await broker.start()
    broker.topics.update(TopicConfig(TOPIC, 2, 2))
    try:
        async with grpc_channel(broker) as channel:
            await send(channel, b"long")
            [first] = await receive_renewed(channel, "pusher-1")
            assert first.system_properties.invisible_duration.ToMilliseconds() == 1000
            await asyncio.sleep(3)  # a bounded look: three invisible durations go by
            assert await receive_renewed(channel, "pusher-2") == []
            assert broker.pop.revived == 0
            client_metadata = (("x-mq-client-id", "pusher-1"),)
            request = pb.AckMessageRequest(
                group=Resource(name=GROUP),
                topic=Resource(name=TOPIC),
                entries=[
                    pb.AckMessageEntry(
                        message_id=first.system_properties.message_id,
                        receipt_handle=first.system_properties.receipt_handle,
                    )
                ],
            )
            acked = await unary_call(
                channel, "AckMessage", request, pb.AckMessageResponse,
                metadata=client_metadata, timeout=10,
            )  # fmt: skip
            assert acked.status.code == Code.OK
            assert broker.grpc is not None and len(broker.grpc.service.renewals) == 0
            await send(channel, b"orphan")
            assert bodies(await receive_renewed(channel, "pusher-1")) == [b"orphan"]
            ended = await unary_call(
                channel, "NotifyClientTermination",
                pb.NotifyClientTerminationRequest(group=Resource(name=GROUP)),
                pb.NotifyClientTerminationResponse, metadata=client_metadata, timeout=10,
            )  # fmt: skip
            assert ended.status.code == Code.OK
            back = await receive_all(channel, 1, timeout=15)
            assert bodies(back) == [b"orphan"]
            assert back[0].system_properties.delivery_attempt == 2
    finally:
        await broker.stop()


async def test_a_4x_message_with_any_born_time_reaches_a_5x_consumer(
    broker: Broker, channel: aio.Channel
) -> None:
    """A 4.x producer may store any 64-bit born time; a Timestamp holds years 1-9999 only.
    Before the clamp each ReceiveMessage that popped it failed with INTERNAL_SERVER_ERROR
    (found by the gRPC fuzzer through a 5.x send), and it came back after every invisible time."""
    api = BrokerAPI(timeout=30)
    try:
        for born, body in ((2**63 - 1, b"far"), (-(2**63), b"before")):
            header = dataclasses.replace(send_header(TOPIC, 0), born_timestamp=born)
            sent = await api.send(f"127.0.0.1:{broker.listen_port}", header, body)
            assert sent.status is SendStatus.SEND_OK
    finally:
        await api.close()
    messages = await receive_all(channel, 2)
    assert bodies(messages) == [b"before", b"far"]
    stamps = sorted(m.system_properties.born_timestamp.ToJsonString() for m in messages)
    assert stamps == ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"]
    assert (await ack(channel, *messages)).status.code == Code.OK
