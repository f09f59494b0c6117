"""RocketMQ 5 clients against a broker with ACL and TLS: the official Python 5.x client
(`.venv-rmq5`, its Credentials and TLS option) and a raw gRPC channel against a real brokerd
with `aclEnable=true`, an `aclFile` and `tls.server.mode` with the test CA's certificate.

An allowed account sends and receives over TLS; a wrong secret, no credentials, an unknown
account and a denied topic or group are refused with a status naming why (UNAUTHORIZED or
FORBIDDEN), and a refused send stores nothing; the port is permissive: a plaintext client is
served too, its signature checked the same way. What the signature check does with each
malformed header is tests/unit/test_proxy_auth.py.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio

from tests.support.certs import Pki, make_pki
from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.rmq5_clients import Rmq5Consumer, rmq5_send
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Code,
    FilterExpression,
    Message,
    MessageQueue,
    MessageType,
    Resource,
)
from tidemq.client.admin.api import AdminClient
from tidemq.client.protocol.models import SubscriptionGroupConfig, TopicConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

ACCESS_KEY, SECRET_KEY = "app-key", "app-secret"
ADMIN_KEY, ADMIN_SECRET = "admin-key", "admin-secret"
TOPIC, DENIED, GROUP, DENIED_GROUP = "sec-topic", "sec-denied", "sec-group", "sec-denied-group"
ACL_FILE = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {DENIED}=DENY
    groupPerms:
      - {GROUP}=SUB
      - {DENIED_GROUP}=DENY
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
"""
SERVICE = "/apache.rocketmq.v2.MessagingService/"


@dataclass
class SecureBroker:
    namesrv: Daemon
    broker: Daemon
    endpoint: str  # host:port of the TLS gRPC port
    pki: Pki
    client_home: Path  # the official client logs under ~/logs/rocketmq_python

    @property
    def env(self) -> dict[str, str]:
        """The official client's TLS option trusts the CAs of this file (grpcio's default);
        its log goes to this test's folder."""
        return {
            "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(self.pki.ca),
            "HOME": str(self.client_home),
        }

    def client_log(self) -> str:
        """What the official client logged: the statuses it does not put in its exceptions
        (a refused QueryRoute becomes "failed to fetch topic:<t> route.")."""
        folder = self.client_home / "logs" / "rocketmq_python"
        return "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log*")))


def admin(namesrv: Daemon) -> AdminClient:
    return AdminClient(namesrv.address, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)


@pytest.fixture
async def secure(processes: ProcessGroup, namesrv: Daemon, tmp_path: Path) -> SecureBroker:
    pki = make_pki(tmp_path / "pki")
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    grpc_port = free_port()
    broker = processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        "aclEnable=true",
        f"aclFile={acl_file}",
        # permissive: TLS and plaintext on both ports (our admin client creates the topics in
        # plaintext)
        "tls.server.mode=permissive",
        f"tls.server.certPath={pki.server.cert}",
        f"tls.server.keyPath={pki.server.key}",
        f"grpcServerPort={grpc_port}",
    )
    client = admin(namesrv)
    try:
        for topic in (TOPIC, DENIED):
            await client.create_topic(broker.address, TopicConfig(topic, 2, 2))
        for group in (GROUP, DENIED_GROUP):
            await client.api.update_subscription_group(
                broker.address, SubscriptionGroupConfig(group)
            )

        async def routed() -> bool:
            return all([await client.api.get_route(namesrv.address, t) for t in (TOPIC, DENIED)])

        await eventually(routed, "the routes of the test topics", 15)
    finally:
        await client.close()
    home = tmp_path / "client-home"
    home.mkdir()
    return SecureBroker(namesrv, broker, f"127.0.0.1:{grpc_port}", pki, home)


async def stored_count(secure: SecureBroker, topic: str) -> int:
    client = admin(secure.namesrv)
    try:
        stats = await client.topic_stats(secure.broker.address, topic)
    finally:
        await client.close()
    return sum(offset.max_offset for offset in stats.offset_table.values())


def send(secure: SecureBroker, topic: str, **options: Any) -> list[dict[str, Any]]:
    messages = [{"body": "one"}, {"body": "two"}]
    return rmq5_send(secure.endpoint, topic, messages, env=secure.env, tls=True, **options)


async def test_an_allowed_account_sends_and_receives_over_tls(secure: SecureBroker) -> None:
    receipts = send(secure, TOPIC, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    assert all("message_id" in r for r in receipts), receipts
    consumer = await Rmq5Consumer.start(
        secure.endpoint,
        env=secure.env,
        mode="simple",
        topic=TOPIC,
        group=GROUP,
        await_seconds=2,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        tls=True,
    )
    try:
        got = await consumer.receive_until(2)
        assert sorted(m["body"] for m in got) == ["one", "two"]
        for message in got:
            await consumer.call(op="ack", id=message["id"])
    finally:
        await consumer.close()
    assert "ACL refused" not in secure.broker.log_text()


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"access_key": ACCESS_KEY, "secret_key": "not-the-secret"}, "Check signature failed"),
        ({}, "No accessKey is configured"),
        ({"access_key": "nobody", "secret_key": "x"}, "No acl config for nobody"),
    ],
    ids=["wrong-secret", "no-credentials", "unknown-account"],
)
async def test_a_client_that_is_not_who_it_says_is_refused(
    secure: SecureBroker, keys: dict[str, str], expected: str
) -> None:
    receipts = send(secure, TOPIC, **keys)
    assert all("error" in r for r in receipts), receipts
    # the client raises its own words for a refused route and logs the broker's status
    assert f"{Code.UNAUTHORIZED}, {expected}" in secure.client_log(), receipts
    assert await stored_count(secure, TOPIC) == 0


async def test_a_denied_topic_is_refused_and_stores_nothing(secure: SecureBroker) -> None:
    receipts = send(secure, DENIED, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    assert all("error" in r for r in receipts), receipts
    assert all(f"No default permission for topic:{DENIED}" in r["error"] for r in receipts)
    assert await stored_count(secure, DENIED) == 0


async def test_a_plaintext_client_of_the_permissive_port_is_checked_the_same(
    secure: SecureBroker,
) -> None:
    """The permissive gRPC port was TLS only (grpcio serves one or the other); its front door
    (broker/proxy/front.py) now takes plaintext too, under brokerd's uvloop."""
    wrong = rmq5_send(
        secure.endpoint,
        TOPIC,
        [{"body": "plain"}],
        env=secure.env,
        access_key=ACCESS_KEY,
        secret_key="not-the-secret",
    )
    assert "error" in wrong[0], wrong
    assert await stored_count(secure, TOPIC) == 0
    receipts = rmq5_send(
        secure.endpoint,
        TOPIC,
        [{"body": "plain"}],
        env=secure.env,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
    )
    assert "message_id" in receipts[0], receipts
    assert await stored_count(secure, TOPIC) == 1


# --- a raw channel: each RPC's refusal as a status ---------------------------------------


def signed(access_key: str, secret: str, date_time: str = "20261129T120000Z") -> list[Any]:
    signature = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature}"
    )
    return [
        ("x-mq-client-id", "raw-client"),
        ("x-mq-date-time", date_time),
        ("authorization", authorization),
    ]


@pytest.fixture
async def channel(secure: SecureBroker) -> AsyncIterator[aio.Channel]:
    credentials = grpc.ssl_channel_credentials(secure.pki.ca.read_bytes())
    async with aio.secure_channel(secure.endpoint, credentials) as channel:
        yield channel


async def unary(
    channel: aio.Channel, method: str, request: Any, response: type[Any], metadata: list[Any]
) -> Any:
    call = channel.unary_unary(
        SERVICE + method,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response.FromString,
    )
    return await call(request, metadata=metadata, timeout=30)


def message(topic: str) -> Message:
    sent = Message(topic=Resource(name=topic), body=b"raw")
    sent.system_properties.message_id = f"raw-{topic}"
    sent.system_properties.message_type = MessageType.NORMAL
    return sent


async def test_each_rpc_refuses_with_a_status_and_the_stream_lives_on(
    secure: SecureBroker, channel: aio.Channel
) -> None:
    good = signed(ACCESS_KEY, SECRET_KEY)
    wrong = signed(ACCESS_KEY, "wrong")
    route = pb.QueryRouteRequest(topic=Resource(name=TOPIC))
    answer = await unary(channel, "QueryRoute", route, pb.QueryRouteResponse, good)
    assert answer.status.code == Code.OK and answer.message_queues
    answer = await unary(channel, "QueryRoute", route, pb.QueryRouteResponse, wrong)
    assert answer.status.code == Code.UNAUTHORIZED, answer.status
    sends = pb.SendMessageRequest(messages=[message(DENIED)])
    answer = await unary(channel, "SendMessage", sends, pb.SendMessageResponse, good)
    assert answer.status.code == Code.FORBIDDEN, answer.status
    assert f"topic:{DENIED}" in answer.status.message
    # a group the account may not consume as: refused before anything is popped
    receive = pb.ReceiveMessageRequest(
        group=Resource(name=DENIED_GROUP),
        message_queue=MessageQueue(topic=Resource(name=TOPIC), id=-1),
        filter_expression=FilterExpression(expression="*"),
        batch_size=1,
    )
    stream = channel.unary_stream(
        SERVICE + "ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )
    answers = [a async for a in stream(receive, metadata=good, timeout=30)]
    assert [a.status.code for a in answers] == [Code.FORBIDDEN], answers
    assert f"group:{DENIED_GROUP}" in answers[0].status.message
    # Telemetry: a refused settings command gets its status, the next good one its settings
    telemetry = channel.stream_stream(
        SERVICE + "Telemetry",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.TelemetryCommand.FromString,
    )
    call = telemetry(metadata=good, timeout=30)
    denied = pb.TelemetryCommand()
    denied.settings.client_type = 1  # PRODUCER
    denied.settings.publishing.topics.append(Resource(name=DENIED))
    await call.write(denied)
    assert (await call.read()).status.code == Code.FORBIDDEN
    allowed = pb.TelemetryCommand()
    allowed.CopyFrom(denied)
    allowed.settings.publishing.topics[0].name = TOPIC
    await call.write(allowed)
    answer = await call.read()
    assert answer.status.code == Code.OK and answer.WhichOneof("command") == "settings"
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    # a stream opened with a bad signature: every command is told why, none is served, and
    # the stream ends when the client's side does (ended at the first refusal, the client's
    # writes still in flight failed: gRPC INTERNAL, found by the gRPC fuzzer)
    call = telemetry(metadata=wrong, timeout=30)
    padded = pb.TelemetryCommand()
    padded.CopyFrom(allowed)
    padded.settings.client_properties["pad"] = "x" * 1_000_000
    for _ in range(6):
        await call.write(padded)
    await call.done_writing()
    answers = [a async for a in call]
    assert [a.status.code for a in answers] == [Code.UNAUTHORIZED] * 6, answers
    assert await call.code() == grpc.StatusCode.OK
    assert await stored_count(secure, DENIED) == 0
    assert "ACL refused gRPC SendMessage" in secure.broker.log_text()
    assert "app-secret" not in secure.broker.log_text()
