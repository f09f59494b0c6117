"""The 5.x signature and permission check of gRPC calls (broker/proxy/auth.py), sans-IO: the
official client's header read back, every malformed header refused naming why, white
addresses, and what each request touches. The official client against a real brokerd with
ACL and TLS is tests/integration/test_rocketmq5_security.py."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from tidemq.broker.acl.rules import PUB, SUB, AclRules, parse_document
from tidemq.broker.proxy.auth import GrpcGuard, needs_of, parse_authorization, telemetry_needs
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import Code, Message, Resource
from tidemq.broker.proxy.status import Rejected

DATE = "20261129T141500Z"
RULES = """\
globalWhiteRemoteAddresses: [10.9.9.*]
accounts:
  - accessKey: app-key
    secretKey: app-secret
    whiteRemoteAddress: 192.168.0.7
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [t=PUB|SUB, ns%t=PUB, readonly=SUB]
    groupPerms: [g=SUB]
"""


def rules() -> AclRules:
    white, accounts = parse_document(RULES, "test")
    return AclRules(tuple(white), {a.access_key: a for a in accounts})


def header(
    access_key: str = "app-key", secret: str = "app-secret", date: str = DATE
) -> dict[str, str]:
    """The metadata the official Python client writes (rocketmq/v5/util/signature.py)."""
    signature = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
    return {
        "x-mq-date-time": date,
        "authorization": f"MQv2-HMAC-SHA1 Credential={access_key}, "
        f"SignedHeaders=x-mq-date-time, Signature={signature}",
    }


def refusal(metadata: dict[str, str], ip: str = "127.0.0.1") -> Rejected:
    with pytest.raises(Rejected) as caught:
        GrpcGuard(rules).authenticate(metadata, ip)
    assert caught.value.code == Code.UNAUTHORIZED
    return caught.value


def test_the_official_clients_header_is_read_back() -> None:
    given = parse_authorization(header()["authorization"])
    assert given.access_key == "app-key"
    assert given.signature == hmac.new(b"app-secret", DATE.encode(), hashlib.sha1).digest()
    # RocketMQ's Credential may carry more after a slash; hex in upper case is the same bytes
    upper = header()["authorization"].replace(
        "Credential=app-key", "Credential=app-key/2026/region"
    )
    upper = upper[: upper.index("Signature=")] + upper[upper.index("Signature=") :].upper()
    assert parse_authorization(upper.replace("SIGNATURE=", "Signature=")).access_key == "app-key"
    account = GrpcGuard(rules).authenticate(header(), "127.0.0.1")
    assert account is not None and account.access_key == "app-key"


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({}, "No accessKey is configured"),
        ({**header(), "authorization": ""}, "No accessKey is configured"),
        (header(access_key=""), "No accessKey is configured"),
        (header(access_key="who"), "No acl config for who"),
        (header(secret="wrong"), "Check signature failed for accessKey=app-key"),
        ({**header(), "x-mq-date-time": "20261129T141501Z"}, "Check signature failed"),
        ({k: v for k, v in header().items() if k != "x-mq-date-time"}, "x-mq-date-time"),
        ({"authorization": "MQv2-HMAC-SHA1"}, "method must be"),
        ({"authorization": "HMAC Credential=app-key, Signature=00"}, "method must be"),
        ({"authorization": "MQv2-HMAC-SHA1 Credential"}, "is not key=value"),
        ({"authorization": "MQv2-HMAC-SHA1 Credential=app-key, Signature=zz"}, "not hex"),
        ({"authorization": "MQv2-HMAC-SHA1 Credential=app-key, Signature=abc"}, "not hex"),
        ({"authorization": "MQv2-HMAC-SHA1 Credential=app-key"}, "no Signature"),
        ({"authorization": "MQv2-HMAC-SHA1 " + "x" * 5000}, "5015 characters"),
    ],
)
def test_a_caller_that_does_not_prove_its_account_is_told_why(
    metadata: dict[str, str], why: str
) -> None:
    assert why in refusal(metadata).message


def test_white_addresses_pass_without_a_signature() -> None:
    guard = GrpcGuard(rules)
    assert guard.authenticate({}, "10.9.9.4") is None  # global white list
    assert guard.authenticate(header(secret="wrong"), "192.168.0.7") is None  # the account's
    refusal(header(secret="wrong"), "192.168.0.8")


def needs(method: str, request: object) -> list[tuple[str, int]]:
    return needs_of(method, request)


def test_what_each_request_touches() -> None:
    topic, group = Resource(name="t"), Resource(name="g")
    send = pb.SendMessageRequest(messages=[Message(topic=topic), Message(topic=topic)])
    assert needs("SendMessage", send) == [("t", PUB)]
    namespaced = pb.SendMessageRequest(
        messages=[Message(topic=Resource(resource_namespace="ns", name="t"))]
    )
    assert needs("SendMessage", namespaced) == [("ns%t", PUB)]
    retry = pb.SendMessageRequest(messages=[Message(topic=Resource(name="%RETRY%g"))])
    assert needs("SendMessage", retry) == [("%RETRY%g", SUB)]
    for method, request in (
        ("AckMessage", pb.AckMessageRequest(group=group, topic=topic)),
        ("ChangeInvisibleDuration", pb.ChangeInvisibleDurationRequest(group=group, topic=topic)),
        (
            "ForwardMessageToDeadLetterQueue",
            pb.ForwardMessageToDeadLetterQueueRequest(group=group, topic=topic),
        ),
    ):
        assert needs(method, request) == [("%RETRY%g", SUB), ("t", SUB)], method
    receive = pb.ReceiveMessageRequest(group=group)
    receive.message_queue.topic.name = "t"
    assert needs("ReceiveMessage", receive) == [("%RETRY%g", SUB), ("t", SUB)]
    assert needs("EndTransaction", pb.EndTransactionRequest(topic=topic)) == [("t", PUB)]
    assert needs("Heartbeat", pb.HeartbeatRequest(group=group)) == [("%RETRY%g", SUB)]
    assert needs("Heartbeat", pb.HeartbeatRequest()) == []
    assert needs("QueryRoute", pb.QueryRouteRequest(topic=topic)) == []
    settings = pb.TelemetryCommand()
    settings.settings.publishing.topics.extend([topic, Resource(name="u")])
    assert telemetry_needs(settings) == [("t", PUB), ("u", PUB)]
    settings = pb.TelemetryCommand()
    settings.settings.subscription.group.name = "g"
    settings.settings.subscription.subscriptions.add().topic.name = "t"
    assert telemetry_needs(settings) == [("%RETRY%g", SUB), ("t", SUB)]
    assert telemetry_needs(pb.TelemetryCommand()) == []


def test_permissions_are_the_accounts() -> None:
    guard = GrpcGuard(rules)
    account = guard.authenticate(header(), "127.0.0.1")
    guard.authorize(account, [("t", PUB), ("%RETRY%g", SUB), ("ns%t", PUB)])
    guard.authorize(None, [("denied", PUB)])  # a white address: everything
    for needed, named in (
        ([("readonly", PUB)], "topic:readonly"),
        ([("other", SUB)], "topic:other"),
        ([("%RETRY%h", SUB)], "group:h"),
    ):
        with pytest.raises(Rejected) as caught:
            guard.authorize(account, needed)
        assert caught.value.code == Code.FORBIDDEN
        assert caught.value.message == f"No default permission for {named}"


def test_a_reload_of_the_files_is_seen_at_the_next_call() -> None:
    """White-address answers are remembered per peer for one version of the rules only."""
    white_file = RULES.replace("[10.9.9.*]", "[127.0.0.*]")
    white, accounts = parse_document(white_file, "test")
    current = [AclRules(tuple(white), {a.access_key: a for a in accounts})]
    guard = GrpcGuard(lambda: current[0])
    assert guard.authenticate({}, "127.0.0.1") is None
    assert guard.authenticate({}, "127.0.0.1") is None  # remembered
    current[0] = rules()  # the file edited: no white list for 127.0.0.*
    with pytest.raises(Rejected):
        guard.authenticate({}, "127.0.0.1")
