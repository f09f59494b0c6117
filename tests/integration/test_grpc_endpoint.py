"""The broker's RocketMQ 5 gRPC endpoint (broker/proxy) called over a real gRPC channel, in
process (loopback, port 0): what each served RPC answers, the refusals with their codes, and
that bad bytes or an RPC not served yet get a status, never a dead call. What an official 5.x
client does against it is tests/integration/test_rocketmq5_client.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc import aio

from tests.support.conditions import eventually
from tests.support.grpc_endpoint import SERVICE, grpc_broker, unary_call
from tidemq.broker.broker import Broker
from tidemq.broker.proxy.channel import OUTBOX_LIMIT
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import (
    ClientType,
    Code,
    Message,
    MessageType,
    Permission,
    Publishing,
    Resource,
    Settings,
    Subscription,
    TransactionResolution,
)
from tidemq.broker.recall_handle import RecallHandle
from tidemq.client.protocol.models import TopicConfig
from tidemq.store.record import decode_record

pytestmark = pytest.mark.asyncio

CLIENT = (("x-mq-client-id", "client-1"), ("x-mq-language", "PYTHON"))
TOPIC = "GT"


def make_broker(tmp_path: Path, proxy: ProxyConfig) -> Broker:
    return grpc_broker(tmp_path, "grpc-a", proxy)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = make_broker(tmp_path, ProxyConfig(grpc_server_port=0))
    await broker.start()
    try:
        broker.topics.update(TopicConfig(TOPIC, 4, 2))
        yield broker
    finally:
        await broker.stop()


@pytest.fixture
async def channel(broker: Broker) -> AsyncIterator[aio.Channel]:
    assert broker.grpc is not None
    async with aio.insecure_channel(f"127.0.0.1:{broker.grpc.port}") as channel:
        yield channel


async def unary(
    channel: aio.Channel, method: str, request: Any, response: type[Any], *, client: bool = True
) -> Any:
    metadata = CLIENT if client else ()
    return await unary_call(channel, method, request, response, metadata=metadata, timeout=10)


def message(body: bytes = b"x", **system: Any) -> Message:
    built = Message(topic=Resource(name=TOPIC), body=body)
    built.system_properties.message_id = system.pop("message_id", "id-1")
    built.system_properties.message_type = system.pop("message_type", MessageType.NORMAL)
    for key, value in system.items():
        if key == "delivery_timestamp":
            built.system_properties.delivery_timestamp.CopyFrom(value)
        elif key == "keys":
            built.system_properties.keys.extend(value)
        else:
            setattr(built.system_properties, key, value)
    return built


async def send(channel: aio.Channel, *messages: Message) -> pb.SendMessageResponse:
    request = pb.SendMessageRequest(messages=messages)
    return await unary(channel, "SendMessage", request, pb.SendMessageResponse)


async def test_query_route_lists_the_topics_queues_at_the_grpc_endpoint(
    broker: Broker, channel: aio.Channel
) -> None:
    request = pb.QueryRouteRequest(topic=Resource(name=TOPIC))
    answer = await unary(channel, "QueryRoute", request, pb.QueryRouteResponse)
    assert answer.status.code == Code.OK
    queues = answer.message_queues
    # 4 read, 2 write queues: 2 read-only first, then 2 read-write (RouteActivity's order)
    assert [(q.id, q.permission) for q in queues] == [
        (0, Permission.READ),
        (1, Permission.READ),
        (2, Permission.READ_WRITE),
        (3, Permission.READ_WRITE),
    ]
    assert broker.grpc is not None
    address = queues[0].broker.endpoints.addresses[0]
    assert (address.host, address.port) == ("127.0.0.1", broker.grpc.port)
    assert queues[0].broker.name == "grpc-a" and queues[0].broker.id == 0
    assert set(queues[0].accept_message_types) == {
        MessageType.NORMAL,
        MessageType.FIFO,
        MessageType.DELAY,
        MessageType.TRANSACTION,
    }


async def test_query_route_refuses_a_missing_or_illegal_topic(channel: aio.Channel) -> None:
    missing = pb.QueryRouteRequest(topic=Resource(name="NoSuchTopic"))
    answer = await unary(channel, "QueryRoute", missing, pb.QueryRouteResponse)
    assert answer.status.code == Code.TOPIC_NOT_FOUND
    illegal = pb.QueryRouteRequest(topic=Resource(name="../etc"))
    answer = await unary(channel, "QueryRoute", illegal, pb.QueryRouteResponse)
    assert answer.status.code == Code.ILLEGAL_TOPIC
    assert "illegal characters" in answer.status.message


async def test_undecodable_bytes_and_rpcs_not_served_get_a_status(channel: aio.Channel) -> None:
    answer = await unary(channel, "QueryRoute", b"\xff\xff\xff", pb.QueryRouteResponse)
    assert answer.status.code == Code.BAD_REQUEST
    assert "QueryRouteRequest" in answer.status.message
    offset = await unary(channel, "QueryOffset", pb.QueryOffsetRequest(), pb.QueryOffsetResponse)
    assert offset.status.code == Code.NOT_IMPLEMENTED
    pull = channel.unary_stream(
        SERVICE + "PullMessage",
        request_serializer=pb.PullMessageRequest.SerializeToString,
        response_deserializer=pb.PullMessageResponse.FromString,
    )
    answers = [a async for a in pull(pb.PullMessageRequest(), metadata=CLIENT, timeout=10)]
    assert [a.status.code for a in answers] == [Code.NOT_IMPLEMENTED]


async def test_heartbeat_and_termination_keep_and_forget_the_client(
    broker: Broker, channel: aio.Channel
) -> None:
    assert broker.grpc is not None
    clients = broker.grpc.service.clients
    beat = pb.HeartbeatRequest(client_type=ClientType.PRODUCER)
    anonymous = await unary(channel, "Heartbeat", beat, pb.HeartbeatResponse, client=False)
    assert anonymous.status.code == Code.CLIENT_ID_REQUIRED
    assert (await unary(channel, "Heartbeat", beat, pb.HeartbeatResponse)).status.code == Code.OK
    known = clients.get("client-1")
    assert known is not None and known.client_type == ClientType.PRODUCER
    assert known.language == "PYTHON" and known.peer.startswith("127.0.0.1:")
    bad_group = pb.HeartbeatRequest(
        client_type=ClientType.SIMPLE_CONSUMER, group=Resource(name="g/../x")
    )
    answer = await unary(channel, "Heartbeat", bad_group, pb.HeartbeatResponse)
    assert answer.status.code == Code.ILLEGAL_CONSUMER_GROUP
    bye = pb.NotifyClientTerminationRequest()
    answer = await unary(
        channel, "NotifyClientTermination", bye, pb.NotifyClientTerminationResponse
    )
    assert answer.status.code == Code.OK
    assert clients.get("client-1") is None


async def test_telemetry_answers_settings_and_survives_a_bad_command(
    broker: Broker, channel: aio.Channel
) -> None:
    stream = channel.stream_stream(
        SERVICE + "Telemetry",
        request_serializer=pb.TelemetryCommand.SerializeToString,
        response_deserializer=pb.TelemetryCommand.FromString,
    )
    call = stream(metadata=CLIENT, timeout=10)
    producer = Settings(
        client_type=ClientType.PRODUCER, publishing=Publishing(topics=[Resource(name=TOPIC)])
    )
    await call.write(pb.TelemetryCommand(settings=producer))
    answer = await call.read()
    assert answer.status.code == Code.OK
    assert answer.settings.publishing.max_body_size == broker.store.config.max_message_size
    assert answer.settings.backoff_policy.max_attempts == 3
    # a producer of TOPIC, as the transaction check and producer listings find producers
    connection = broker.producers.producer_connection(TOPIC)
    assert connection is not None
    assert [(c.client_id, c.language) for c in connection.connections] == [("client-1", "PYTHON")]
    await call.write(pb.TelemetryCommand())  # no command at all
    assert (await call.read()).status.code == Code.BAD_REQUEST
    consumer = Settings(
        client_type=ClientType.PUSH_CONSUMER, subscription=Subscription(group=Resource(name="G1"))
    )
    await call.write(pb.TelemetryCommand(settings=consumer))  # the same stream goes on
    answer = await call.read()
    assert answer.status.code == Code.OK
    assert answer.settings.subscription.receive_batch_size == 32
    assert answer.settings.subscription.long_polling_timeout.seconds == 20
    assert answer.settings.backoff_policy.max_attempts == 17  # retryMaxTimes 16, plus one
    assert [d.seconds for d in answer.settings.backoff_policy.customized_backoff.next] == [10]
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    bye = pb.NotifyClientTerminationRequest()
    await unary(channel, "NotifyClientTermination", bye, pb.NotifyClientTerminationResponse)
    assert broker.producers.producer_connection(TOPIC) is None


async def test_a_client_that_reads_no_telemetry_answers_is_read_no_further(
    broker: Broker, channel: aio.Channel
) -> None:
    """Answers a client leaves unread are bounded (OUTBOX_LIMIT): the broker stops reading its
    commands, gRPC's flow control holds its writes, and every answer still comes, in order,
    once it reads. Before the bound the broker read all 4,096 16 KB commands and held their
    answers (64 MB for one stream)."""
    stream = channel.stream_stream(
        SERVICE + "Telemetry",
        request_serializer=pb.TelemetryCommand.SerializeToString,
        response_deserializer=pb.TelemetryCommand.FromString,
    )
    call = stream(metadata=CLIENT, timeout=120)
    count = 4 * OUTBOX_LIMIT

    def command(n: int) -> pb.TelemetryCommand:
        settings = Settings(
            client_type=ClientType.PRODUCER, publishing=Publishing(topics=[Resource(name=TOPIC)])
        )
        settings.user_agent.hostname = f"n{n}"
        settings.client_properties["pad"] = "x" * 16_384
        return pb.TelemetryCommand(settings=settings)

    async def write_all() -> None:
        for n in range(count):
            await call.write(command(n))
        await call.done_writing()

    writer = asyncio.get_running_loop().create_task(write_all())
    try:
        done, _ = await asyncio.wait({writer}, timeout=15)
        assert not done, "the broker read every command while no answer was read"
        assert broker.grpc is not None
        last = broker.grpc.service.clients.get("client-1")
        assert last is not None and last.settings is not None
        read_so_far = int(last.settings.user_agent.hostname[1:]) + 1
        assert OUTBOX_LIMIT <= read_so_far < count, read_so_far
        for n in range(count):
            answer = await call.read()
            assert answer.status.code == Code.OK and answer.settings.user_agent.hostname == f"n{n}"
        await writer
        assert await call.code() == grpc.StatusCode.OK
    finally:
        writer.cancel()
        call.cancel()


async def test_send_stores_a_4x_message_in_the_groups_queue(
    broker: Broker, channel: aio.Channel
) -> None:
    sent = message(b"body", tag="TagA", keys=["k1", "k2"], message_id="uniq-1")
    sent.user_properties["color"] = "blue"
    answers = [await send(channel, sent)]
    for i in range(3):
        grouped = message(b"g%d" % i, message_type=MessageType.FIFO, message_group="grp")
        answers.append(await send(channel, grouped))
    assert [a.status.code for a in answers] == [Code.OK] * 4
    assert answers[0].entries[0].message_id == "uniq-1"
    stored = {}
    for queue_id in range(2):  # the topic's two write queues
        result = broker.store.get_message("G", TOPIC, queue_id, 0, 32)
        for span in result.spans:
            pos = 0
            while pos < len(span):
                record = decode_record(span, pos)
                stored[record.body] = record
                pos += record.total_size
    first = stored[b"body"]
    assert (first.tags, first.keys) == ("TagA", "k1 k2")
    assert first.properties["UNIQ_KEY"] == "uniq-1" and first.properties["color"] == "blue"
    assert first.properties["PGROUP"] == TOPIC
    assert first.queue_offset == answers[0].entries[0].offset
    group_queues = {stored[b"g%d" % i].queue_id for i in range(3)}
    assert len(group_queues) == 1  # one message group, one queue, in order
    assert [stored[b"g%d" % i].properties["__SHARDINGKEY"] for i in range(3)] == ["grp"] * 3


async def test_send_refusals_name_the_cause(channel: aio.Channel) -> None:
    cases = [
        (message(b""), Code.MESSAGE_BODY_EMPTY),
        (message(message_id=""), Code.ILLEGAL_MESSAGE_ID),
        (message(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (message(message_type=MessageType.FIFO), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (message(message_group="g"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (message(message_type=MessageType.LITE), Code.UNSUPPORTED),
        (
            message(message_type=MessageType.TRANSACTION, message_group="g"),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
    ]
    system_key = message()
    system_key.user_properties["UNIQ_KEY"] = "forged"
    cases.append((system_key, Code.ILLEGAL_MESSAGE_PROPERTY_KEY))
    control = message()
    control.user_properties["k"] = "a\x01b"
    cases.append((control, Code.ILLEGAL_MESSAGE_PROPERTY_KEY))
    far = Timestamp(seconds=int(time.time()) + 4 * 24 * 3600)  # past timerMaxDelaySec (3 days)
    cases.append(
        (
            message(message_type=MessageType.DELAY, delivery_timestamp=far),
            Code.ILLEGAL_DELIVERY_TIME,
        )
    )
    for sent, code in cases:
        answer = await send(channel, sent)
        assert answer.status.code == code, (sent, answer)
        assert answer.status.message


async def test_query_assignment_gives_the_whole_topic_to_pop(channel: aio.Channel) -> None:
    request = pb.QueryAssignmentRequest(topic=Resource(name=TOPIC), group=Resource(name="G1"))
    answer = await unary(channel, "QueryAssignment", request, pb.QueryAssignmentResponse)
    assert answer.status.code == Code.OK
    [assignment] = answer.assignments
    assert assignment.message_queue.id == -1
    assert assignment.message_queue.permission == Permission.READ_WRITE


async def test_end_transaction_commits_once_and_refuses_what_it_did_not_give(
    broker: Broker, channel: aio.Channel
) -> None:
    sent = await send(channel, message(b"tx", message_type=MessageType.TRANSACTION))
    [entry] = sent.entries
    assert entry.status.code == Code.OK and entry.transaction_id

    async def end(transaction_id: str, message_id: str = "id-1") -> Code.ValueType:
        request = pb.EndTransactionRequest(
            topic=Resource(name=TOPIC),
            message_id=message_id,
            transaction_id=transaction_id,
            resolution=TransactionResolution.COMMIT,
        )
        answer = await unary(channel, "EndTransaction", request, pb.EndTransactionResponse)
        assert answer.status.message
        return answer.status.code

    assert await end("not-an-id") == Code.INVALID_TRANSACTION_ID
    assert await end(entry.transaction_id, "another-id") == Code.INVALID_TRANSACTION_ID
    assert sum(broker.store.max_offset_in_queue(TOPIC, q) for q in range(4)) == 0
    assert await end(entry.transaction_id) == Code.OK
    assert sum(broker.store.max_offset_in_queue(TOPIC, q) for q in range(4)) == 1
    assert await end(entry.transaction_id) == Code.INVALID_TRANSACTION_ID  # ended already


async def test_a_flood_of_client_ids_is_bounded(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, ProxyConfig(grpc_server_port=0, grpc_server_max_clients=1))
    await broker.start()
    try:
        assert broker.grpc is not None
        async with aio.insecure_channel(f"127.0.0.1:{broker.grpc.port}") as channel:
            beat = pb.HeartbeatRequest(client_type=ClientType.PRODUCER)

            async def heartbeat(client_id: str) -> Code.ValueType:
                call = channel.unary_unary(
                    SERVICE + "Heartbeat",
                    request_serializer=pb.HeartbeatRequest.SerializeToString,
                    response_deserializer=pb.HeartbeatResponse.FromString,
                )
                answer = await call(beat, metadata=(("x-mq-client-id", client_id),), timeout=10)
                return answer.status.code

            assert await heartbeat("first") == Code.OK
            assert await heartbeat("first") == Code.OK  # known: refreshed
            assert await heartbeat("second") == Code.TOO_MANY_REQUESTS
            bye = pb.NotifyClientTerminationRequest()
            call = channel.unary_unary(
                SERVICE + "NotifyClientTermination",
                request_serializer=pb.NotifyClientTerminationRequest.SerializeToString,
                response_deserializer=pb.NotifyClientTerminationResponse.FromString,
            )
            await call(bye, metadata=(("x-mq-client-id", "first"),), timeout=10)
            assert await heartbeat("second") == Code.OK
    finally:
        await broker.stop()


def stored_in(broker: Broker, topic: str) -> int:
    return sum(broker.store.max_offset_in_queue(topic, q) for q in range(4))


async def recall(channel: aio.Channel, handle: str, topic: str = TOPIC) -> Any:
    request = pb.RecallMessageRequest(topic=Resource(name=topic), recall_handle=handle)
    return await unary(channel, "RecallMessage", request, pb.RecallMessageResponse)


async def test_a_recalled_delay_message_is_never_delivered(
    broker: Broker, channel: aio.Channel
) -> None:
    """SendMessage answers a delay message with a recall handle (a normal one without);
    RecallMessage with it cancels the delivery; the other delay message arrives."""
    due_ms = int(time.time() * 1000) + 1500
    due = Timestamp(seconds=due_ms // 1000, nanos=due_ms % 1000 * 1_000_000)
    kept, gone = (
        message(b"k", message_id=i, message_type=MessageType.DELAY, delivery_timestamp=due)
        for i in ("KEPT", "GONE")
    )
    answers = [await send(channel, m) for m in (kept, gone, message(b"n", message_id="NORMAL"))]
    assert [a.status.code for a in answers] == [Code.OK] * 3
    handles = [a.entries[0].recall_handle for a in answers]
    assert handles[0] and handles[1] and handles[2] == ""
    assert RecallHandle.decode(handles[1]) == RecallHandle(TOPIC, "grpc-a", due_ms, "GONE")
    answer = await recall(channel, handles[1])
    assert (answer.status.code, answer.message_id) == (Code.OK, "GONE")
    assert stored_in(broker, TOPIC) == 1  # the normal one only, so far
    timer = broker.timer
    assert timer is not None
    await eventually(lambda: stored_in(broker, TOPIC) == 2, "the kept one delivered", 15)
    await eventually(lambda: timer.recalled == 1, "the recalled one dropped", 15)
    assert stored_in(broker, TOPIC) == 2
    # Its time passed: recalled or delivered, it cannot be recalled now.
    late = await recall(channel, handles[0])
    assert late.status.code == Code.ILLEGAL_DELIVERY_TIME and "delivered" in late.status.message


async def test_recall_refusals_name_the_cause(broker: Broker, channel: aio.Channel) -> None:
    ahead = int(time.time() * 1000) + 60_000
    sent = await send(channel, message(b"n", message_id="PLAIN"))
    assert sent.status.code == Code.OK
    cases = [
        ("", Code.BAD_REQUEST, "empty"),
        ("%%%", Code.BAD_REQUEST, "base64"),
        (RecallHandle("Other", "grpc-a", ahead, "X").encode(), Code.BAD_REQUEST, "topic"),
        (RecallHandle(TOPIC, "grpc-b", ahead, "X").encode(), Code.NOT_FOUND, "grpc-b"),
        # A well-formed handle of no timer: unknown, and a normal message's id likewise.
        (RecallHandle(TOPIC, "grpc-a", ahead, "NOSUCH").encode(), Code.NOT_FOUND, "no timer"),
        (RecallHandle(TOPIC, "grpc-a", ahead, "PLAIN").encode(), Code.NOT_FOUND, "no timer"),
        (
            RecallHandle(TOPIC, "grpc-a", ahead - 70_000, "X").encode(),
            Code.ILLEGAL_DELIVERY_TIME,
            "ago",
        ),
        (
            RecallHandle(TOPIC, "grpc-a", ahead + 4 * 86_400_000, "X").encode(),
            Code.ILLEGAL_DELIVERY_TIME,
            "timerMaxDelaySec",
        ),
    ]
    for handle, code, says in cases:
        answer = await recall(channel, handle)
        assert (answer.status.code, says in answer.status.message) == (code, True), (
            handle,
            answer,
        )
    missing = await recall(channel, RecallHandle("NoSuch", "grpc-a", ahead, "X").encode(), "NoSuch")
    assert missing.status.code == Code.TOPIC_NOT_FOUND
    assert broker.timer is not None and broker.timer.recalled == 0
