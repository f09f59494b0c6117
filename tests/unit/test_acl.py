"""The plain ACL without sockets: address patterns, plain_acl.yml parsing and its bad files, the
signature, the order of the checks and the permissions each request needs, the reload."""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.acl.addresses import AddressPatternError, address_matcher
from tidemq.broker.acl.rules import AclFileError, AclRules, load_rules, parse_document
from tidemq.broker.acl.validator import REMARK_PREFIX, AclRefused, PlainAccessValidator, peer_ip
from tidemq.broker.acl.watch import AclWatcher, acl_paths
from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.protocol.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.headers import decode_header, encode_header
from tidemq.client.remoting.signing import (
    RequestSigner,
    SessionCredentials,
    signature,
    signing_key,
)
from tidemq.client.transport.connection import RemotingConnection
from tidemq.common.errors import ConfigError

ACL_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
      - topicD=PUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 172.16.1.{1,2}
    admin: true
"""

USER = SessionCredentials("RocketMQ", "12345678")
ADMIN = SessionCredentials("rocketmq2", "12345678")
PEER = "127.0.0.1"


def rules(text: str = ACL_YML) -> AclRules:
    white, accounts = parse_document(text, "plain_acl.yml")
    return AclRules(tuple(white), {a.access_key: a for a in accounts})


def signed(
    code: int,
    ext: dict[str, str],
    body: bytes = b"",
    credentials: SessionCredentials | None = USER,
) -> RemotingCommand:
    request = RemotingCommand.request(code, dict(ext), body)
    if credentials is not None:
        RequestSigner(credentials).sign(request)
    return request


def refusal(request: RemotingCommand, ip: str = PEER, text: str = ACL_YML) -> str | None:
    try:
        PlainAccessValidator(rules(text)).check(ip, request)
    except AclRefused as refused:
        return str(refused)
    return None


def send_v2(topic: str, group: str = "P") -> dict[str, str]:
    return {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1"}


# --- address patterns ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["1.2.3.4"]),
        ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
        ("192.168.1.1,10.0.0.1", ["10.0.0.1"], ["10.0.0.2"]),
        ("192.168.*.*", ["192.168.200.7"], ["192.169.0.1"]),
        ("192.168.1-10.*", ["192.168.1.0", "192.168.10.255"], ["192.168.11.0", "192.168.0.9"]),
        ("10.1.2.1-3", ["10.1.2.1", "10.1.2.3"], ["10.1.2.4", "10.1.3.2"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("1050:0:0:0:5:600:300c:326b", ["1050::5:600:300c:326b"], ["1050::5:600:300c:326c"]),
        ("1050:0:0:0:5:*", ["1050:0:0:0:5:9::"], ["1050:0:0:0:6::"]),
        ("1050::5:{1,2}", ["1050::5:2"], ["1050::5:3"]),
    ],
)
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    match = address_matcher(pattern)
    assert all(match(a) for a in inside)
    assert not any(match(a) for a in outside)


@pytest.mark.parametrize(
    "pattern",
    [
        "1.2.3",
        "300.1.1.1",
        "1.2.3.{1,x}",
        "1.2.3.4-2",
        "1.2.*",
        "abc",
        "-1.2.3.4",
        "1.2.3.*x",
        "1.2.3.{1,2",
        "1:*:3",
    ],
)
def test_bad_address_patterns(pattern: str) -> None:
    with pytest.raises(AddressPatternError, match=r"address|part|range|pattern"):
        address_matcher(pattern)


def test_a_peer_address_is_parsed_once_whatever_the_patterns_ask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A white list's patterns each read the peer's address on every request: parsed once, kept.
    parsed: list[str] = []
    real = ipaddress.ip_address

    def counted(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        parsed.append(address)
        return real(address)

    matchers = [address_matcher(p) for p in ("10.10.103.*", "192.168.0.*", "198.51.100.{7,9}")]
    monkeypatch.setattr(ipaddress, "ip_address", counted)
    peer = "198.51.100.9"  # TEST-NET-2: no other test asks for it
    answers = [[m(peer) for m in matchers] for _ in range(3)]
    assert answers == [[False, False, True]] * 3
    assert parsed.count(peer) <= 1


@given(
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
    st.ip_addresses(v=4),
)
def test_ipv4_ranges_match_exactly_their_range(a: int, low: int, high: int, peer: object) -> None:
    low, high = min(low, high), max(low, high)
    match = address_matcher(f"{a}.7.{low}-{high}.*")
    octets = [int(p) for p in str(peer).split(".")]
    assert match(str(peer)) == (octets[0] == a and octets[1] == 7 and low <= octets[2] <= high)


@given(st.ip_addresses(v=6))
def test_one_ipv6_address_matches_every_spelling(peer: ipaddress.IPv6Address) -> None:
    assert address_matcher(peer.exploded)(peer.compressed)


# --- plain_acl.yml --------------------------------------------------------------------------


def test_rocketmq_sample_file_reads() -> None:
    loaded = rules()
    user, admin = loaded.accounts["RocketMQ"], loaded.accounts["rocketmq2"]
    assert user.secret_key == "12345678"  # an unquoted YAML number, read as text
    assert not user.admin and admin.admin and admin.perms is None
    assert user.perms == {
        "topicA": 1, "topicB": 12, "topicC": 8, "topicD": 4, "%RETRY%groupA": 1,
        "%RETRY%groupB": 12,
    }  # fmt: skip
    assert loaded.global_white[0]("10.10.103.9")
    assert "12345678" not in repr(user)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("accounts: [", "not YAML"),
        ("- a\n- b\n", "top level is not a mapping"),
        ("accounts: {a: 1}", "accounts is not a list"),
        ("accounts: [{accessKey: RocketMQ, secretKey: '123456'}]", "secretKey must be longer"),
        ("accounts: [{accessKey: short, secretKey: '12345678'}]", "accessKey must be longer"),
        ("accounts: [{secretKey: '12345678'}]", "accessKey must be longer"),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: '12345678', topicPerms: [t=PUBLISH]}]",
            "unknown permission 'PUBLISH'",
        ),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: '12345678', defaultTopicPerm: ALL}]",
            "defaultTopicPerm: unknown permission 'ALL'",
        ),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: '12345678', groupPerms: [g]}]",
            "'g' is not of the form name=PERM",
        ),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: '12345678', whiteRemoteAddress: 1.2}]",
            "whiteRemoteAddress: .1.2. is not an IPv4 or IPv6 address",
        ),
        (
            "accounts: [{accessKey: RocketMQ, secretKey: '12345678', admin: maybe}]",
            "admin is not true or false",
        ),
        ("globalWhiteRemoteAddresses: [1.2.3.999]", "globalWhiteRemoteAddresses"),
        ("accounts: [[1, 2]]", r"accounts\[0\]: is not a mapping"),
    ],
)
def test_bad_files_are_refused_naming_the_problem(text: str, reason: str) -> None:
    with pytest.raises(AclFileError, match=reason) as raised:
        parse_document(text, "/conf/plain_acl.yml")
    assert "/conf/plain_acl.yml" in str(raised.value)
    assert "12345678" not in str(raised.value)  # a secret is never repeated


def test_an_empty_file_holds_no_rules(tmp_path: Path) -> None:
    (tmp_path / "plain_acl.yml").write_text("")
    assert load_rules([tmp_path / "plain_acl.yml", tmp_path / "missing.yml"]) == AclRules()


def test_files_merge_and_the_first_definition_of_a_key_wins(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "acl").mkdir(parents=True)
    (conf / "acl" / "team.yml").write_text(
        "globalWhiteRemoteAddresses: [10.0.0.1]\n"
        "accounts: [{accessKey: RocketMQ, secretKey: first-secret}]\n"
    )
    (conf / "plain_acl.yml").write_text(ACL_YML)
    paths = acl_paths("", str(tmp_path))
    assert paths == [conf / "acl" / "team.yml", conf / "plain_acl.yml"]
    loaded = load_rules(paths)
    assert loaded.accounts["RocketMQ"].secret_key == "first-secret"
    assert "rocketmq2" in loaded.accounts
    assert len(loaded.global_white) == 3
    assert acl_paths(str(tmp_path / "mine.yml"), str(tmp_path)) == [tmp_path / "mine.yml"]
    with pytest.raises(ConfigError, match="aclEnable"):
        acl_paths("", None)


# --- the signature --------------------------------------------------------------------------


def test_signature_is_rocketmqs_content_hmac() -> None:
    # RocketMQ: sorted keys' values concatenated, then the body; HMAC-SHA1, Base64.
    ext = {"b": "2", "a": "1", "AccessKey": "ak", "_UNIQUE_KEY_QUERY": "true", "Signature": "x"}
    import hashlib
    import hmac

    expected = hmac.new(b"secretkey", b"ak12" + b"body", hashlib.sha1).digest()
    assert signature("secretkey", ext, b"body") == base64.b64encode(expected).decode()


@given(st.text(max_size=20), st.lists(st.binary(max_size=300), max_size=4))
def test_a_signing_key_gives_each_copy_the_hmac_of_what_it_was_given(
    secret: str, parts: list[bytes]
) -> None:
    import hashlib
    import hmac

    key = signing_key(secret)
    first, second = key.copy(), key.copy()
    for part in parts:
        first.update(part)
    expected = hmac.new(secret.encode(), b"".join(parts), hashlib.sha1).digest()
    assert first.digest() == expected
    # the key itself and the other copy are untouched
    assert second.digest() == key.copy().digest() == hmac.new(secret.encode(), b"", "sha1").digest()


def test_signer_adds_the_fields_and_the_broker_accepts_them() -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"hello")
    assert request.ext_fields["AccessKey"] == "RocketMQ"
    assert "SecretKey" not in request.ext_fields
    assert refusal(request) is None
    token = SessionCredentials("RocketMQ", "12345678", "token")
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"x", token)
    assert request.ext_fields["SecurityToken"] == "token"
    assert refusal(request) is None


def test_every_header_serialisation_keeps_the_signature_valid() -> None:
    for serialize_type in SerializeType:
        request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"body")
        request.serialize_type = serialize_type
        decoded = decode_header(int(serialize_type), encode_header(request), b"body")
        assert refusal(decoded) is None


def test_ext_fields_the_broker_does_not_know_are_signed_too() -> None:
    ext = {**send_v2("topicB"), "OnsChannel": "ALIYUN"}
    request = signed(RequestCode.SEND_MESSAGE_V2, ext, b"x")
    assert refusal(request) is None
    request.ext_fields["OnsChannel"] = "CLOUD"
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"


# --- order of the checks and refusals ---------------------------------------------------------


def test_global_white_list_passes_without_credentials() -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicA"), credentials=None)
    assert refusal(request, "10.10.103.20") is None
    assert refusal(request, "10.10.104.20") == "No accessKey is configured"


def test_unknown_access_key() -> None:
    stranger = SessionCredentials("nobody-here", "12345678")
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), credentials=stranger)
    assert refusal(request) == "No acl config for nobody-here"


def test_account_white_list_passes_without_a_signature_or_permissions() -> None:
    request = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"}, credentials=None)
    request.ext_fields["AccessKey"] = "rocketmq2"
    assert refusal(request, "172.16.1.2") is None
    assert refusal(request, "172.16.1.3") == "Check signature failed for accessKey=rocketmq2"


@pytest.mark.parametrize(
    "forged",
    ["", "not base64 at all!", "AAAA", "é" * 28, base64.b64encode(b"\0" * 20).decode()],
)
def test_wrong_missing_or_garbage_signatures(forged: str) -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"body")
    request.ext_fields["Signature"] = forged
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"
    del request.ext_fields["Signature"]
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"


def test_wrong_secret() -> None:
    wrong = SessionCredentials("RocketMQ", "87654321")
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), credentials=wrong)
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"


def test_a_replay_with_another_body_or_field_is_refused() -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"pay 10")
    assert refusal(request) is None
    request.body = b"pay 1000"
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"pay 10")
    request.ext_fields["b"] = "topicD"
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"


def test_duplicated_ext_fields_are_checked_as_the_processor_reads_them() -> None:
    # A JSON header naming a key twice: the decoder keeps the last value, which is the one the
    # signature covers and the processor reads; a signature over the first is refused.
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"x")
    raw = encode_header(request).decode()
    doubled = raw.replace('"b":"topicB"', '"b":"topicB","b":"topicA"')
    decoded = decode_header(0, doubled.encode(), b"x")
    assert decoded.ext_fields["b"] == "topicA"
    assert refusal(decoded) == "Check signature failed for accessKey=RocketMQ"


def test_oversized_fields_are_refused_without_trouble() -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"x")
    request.ext_fields["padding"] = "x" * (4 << 20)
    assert refusal(request) == "Check signature failed for accessKey=RocketMQ"
    request.ext_fields["AccessKey"] = "k" * 100_000
    assert refusal(request) == "No acl config for " + "k" * 64


def test_refusal_is_rocketmqs_answer_and_is_logged_without_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    validator = PlainAccessValidator(rules())
    connection = RemotingConnection(None)
    connection.peer = "127.0.0.1:50123"
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicA"))
    with caplog.at_level(logging.WARNING), pytest.raises(RequestRejected) as raised:
        validator.before_request(connection, request)
    assert raised.value.code == ResponseCode.SYSTEM_ERROR
    assert raised.value.remark == REMARK_PREFIX + "No default permission for topic:topicA"
    assert "127.0.0.1:50123" in caplog.text and "RocketMQ" in caplog.text
    assert "12345678" not in caplog.text
    assert peer_ip("[::1]:9") == "::1"


# --- permissions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "ext", "reason"),
    [
        (RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), None),
        (RequestCode.SEND_MESSAGE_V2, send_v2("topicD"), None),
        (RequestCode.SEND_MESSAGE_V2, send_v2("topicA"), "No default permission for topic:topicA"),
        (RequestCode.SEND_MESSAGE_V2, send_v2("topicC"), "No default permission for topic:topicC"),
        (RequestCode.SEND_MESSAGE_V2, send_v2("other"), "No default permission for topic:other"),
        (RequestCode.SEND_BATCH_MESSAGE, send_v2("topicB"), None),
        (RequestCode.SEND_BATCH_MESSAGE, send_v2("topicC"), "topic:topicC"),
        (RequestCode.SEND_MESSAGE, {"topic": "topicD", "producerGroup": "P"}, None),
        (RequestCode.SEND_MESSAGE, {"topic": "topicC"}, "topic:topicC"),
        (RequestCode.SEND_MESSAGE_V2, send_v2("%RETRY%groupB"), None),
        (RequestCode.SEND_MESSAGE_V2, send_v2("%RETRY%groupA"), "group:groupA"),
        (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupB"}, None),
        (RequestCode.PULL_MESSAGE, {"topic": "topicD", "consumerGroup": "groupB"}, "topic:topicD"),
        (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupA"}, "group:groupA"),
        (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "any"}, None),
        (RequestCode.QUERY_MESSAGE, {"topic": "topicC"}, None),
        (RequestCode.QUERY_MESSAGE, {"topic": "topicA"}, "topic:topicA"),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "groupB"}, None),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "groupA"}, "group:groupA"),
        (RequestCode.UNREGISTER_CLIENT, {"consumerGroup": "groupA"}, "group:groupA"),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "groupA"}, "group:groupA"),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "groupB"}, None),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "topicC"}, None),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "x"}, "topic:x"),
        (RequestCode.GET_MAX_OFFSET, {"topic": "topicA", "queueId": "0"}, None),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"}, "Need admin permission"),
        (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "t"}, "Need admin permission"),
        (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, "Need admin permission"),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g"}, "Need admin permission"),
        (RequestCode.UPDATE_BROKER_CONFIG, {}, "request code=25, but accessKey=RocketMQ is not"),
        (RequestCode.SEND_MESSAGE_V2, send_v2("RMQ_SYS_TRACE_TOPIC"), None),
    ],
)
def test_permissions_per_request(code: int, ext: dict[str, str], reason: str | None) -> None:
    found = refusal(signed(code, ext, b"x"))
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_admin_may_do_everything_without_lists() -> None:
    for code, ext in (
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"}),
        (RequestCode.SEND_MESSAGE_V2, send_v2("anything")),
        (RequestCode.PULL_MESSAGE, {"topic": "t", "consumerGroup": "g"}),
    ):
        assert refusal(signed(code, ext, credentials=ADMIN)) is None


def heartbeat(group: str, topics: list[str]) -> bytes:
    subscriptions = [SubscriptionData.from_expression(t, "*") for t in topics]
    return HeartbeatData("c1", [], [ConsumerData(group, subscriptions=subscriptions)]).encode()


def test_heartbeat_needs_sub_on_each_group_and_topic() -> None:
    assert refusal(signed(RequestCode.HEART_BEAT, {}, heartbeat("groupB", ["topicC"]))) is None
    found = refusal(signed(RequestCode.HEART_BEAT, {}, heartbeat("groupB", ["topicC", "topicD"])))
    assert found == "No default permission for topic:topicD"
    found = refusal(signed(RequestCode.HEART_BEAT, {}, heartbeat("groupA", ["topicC"])))
    assert found == "No default permission for group:groupA"
    found = refusal(signed(RequestCode.HEART_BEAT, {}, b"{not json"))
    assert found is not None and found.startswith("bad heartbeat body")


# --- reload ----------------------------------------------------------------------------------


def test_watcher_reloads_on_change_and_keeps_the_last_good_rules(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_YML)
    validator = PlainAccessValidator(AclRules())
    watcher = AclWatcher(lambda: [path], validator.use)
    watcher.load_now()
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicC"))
    with pytest.raises(AclRefused):
        validator.check(PEER, request)
    assert not watcher.poll()  # nothing changed

    path.write_text(ACL_YML.replace("topicC=SUB", "topicC=PUB"))
    assert watcher.poll()
    validator.check(PEER, request)

    with caplog.at_level(logging.ERROR):
        path.write_text(ACL_YML.replace("topicC=SUB", "topicC=PUBLISH") + "\n")
        assert not watcher.poll()
        assert not watcher.poll()  # the same broken file is reported once
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        f"ACL: keeping the previous rules: {path}: accounts[0] (accessKey RocketMQ): "
        "topicPerms: 'topicC=PUBLISH': unknown permission 'PUBLISH' (PUB, SUB, PUB|SUB or DENY)"
    ]
    validator.check(PEER, request)  # still the last good rules


def test_a_bad_file_at_start_stops_start_up(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: [")
    watcher = AclWatcher(lambda: [path], PlainAccessValidator(AclRules()).use)
    with pytest.raises(ConfigError, match=r"^aclFile: .*plain_acl.yml: not YAML"):
        watcher.load_now()


# --- our clients sign ------------------------------------------------------------------------


def test_every_client_signs_when_given_keys() -> None:
    from tidemq.client.admin.api import AdminClient
    from tidemq.client.consumer.pull import AsyncPullConsumer, PullConsumer
    from tidemq.client.consumer.push import AsyncPushConsumer, PushConsumer
    from tidemq.client.errors import ClientError
    from tidemq.client.instance import ClientInstance
    from tidemq.client.producer import AsyncProducer, Producer

    keys = {"access_key": USER.access_key, "secret_key": USER.secret_key}
    clients = [
        AsyncProducer("g", "127.0.0.1:1", **keys),
        AsyncPushConsumer("g", "127.0.0.1:1", **keys),
        AsyncPullConsumer("g", "127.0.0.1:1", **keys),
        Producer("g", "127.0.0.1:1", **keys)._async,
        PushConsumer("g", "127.0.0.1:1", **keys)._async,
        PullConsumer("g", "127.0.0.1:1", **keys)._async,
    ]
    for client in clients:
        assert client.config.credentials == USER
        api = ClientInstance(client.config).api
        request = api.request(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"), b"x")
        assert refusal(request) is None
    admin = AdminClient("127.0.0.1:1", **keys)
    assert refusal(admin.api.request(RequestCode.PULL_MESSAGE, {"topic": "topicC"})) is None
    unsigned = AsyncProducer("g", "127.0.0.1:1")
    assert unsigned.config.credentials is None
    with pytest.raises(ClientError, match="access key needs its secret key"):
        AsyncProducer("g", "127.0.0.1:1", access_key="only-the-key")


@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=12),
    st.binary(max_size=64),
    st.randoms(use_true_random=False),
)
def test_signature_is_the_sorted_reference_whatever_the_key_order(
    ext: dict[str, str], body: bytes, rnd: object
) -> None:
    import hashlib
    import hmac

    content = "".join(ext[k] for k in sorted(ext) if k not in ("Signature", "_UNIQUE_KEY_QUERY"))
    expected = hmac.new(b"secret-key", content.encode() + body, hashlib.sha1).digest()
    keys = list(ext)
    rnd.shuffle(keys)  # type: ignore[attr-defined]
    for order in (list(ext), keys):
        shuffled = {k: ext[k] for k in order}
        assert signature("secret-key", shuffled, body) == base64.b64encode(expected).decode()


_CODES = [
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE, RequestCode.HEART_BEAT,
    RequestCode.UNREGISTER_CLIENT, RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.GET_MAX_OFFSET,
]  # fmt: skip
_FIELDS = st.sampled_from(
    ["a", "b", "topic", "group", "consumerGroup", "AccessKey", "Signature", "x", "%RETRY%g"]
)
_JSON_ISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)


@given(
    st.sampled_from(_CODES),
    st.dictionaries(_FIELDS | st.text(max_size=6), st.text(max_size=12), max_size=8),
    st.one_of(
        st.binary(max_size=64),
        _JSON_ISH.map(lambda v: json.dumps(v).encode()),
        # heartbeat-shaped, with anything in its places
        st.fixed_dictionaries(
            {},
            optional={
                "consumerDataSet": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "groupName": _JSON_ISH,
                            "subscriptionDataSet": st.lists(
                                st.fixed_dictionaries({}, optional={"topic": _JSON_ISH})
                                | _JSON_ISH,
                                max_size=3,
                            )
                            | _JSON_ISH,
                        },
                    )
                    | _JSON_ISH,
                    max_size=3,
                )
                | _JSON_ISH
            },
        ).map(lambda v: json.dumps(v).encode()),
    ),
    st.booleans(),
)
def test_any_request_is_passed_or_refused_with_a_reason(
    code: int, ext: dict[str, str], body: bytes, sign: bool
) -> None:
    request = signed(code, ext, body, USER if sign else None)
    try:
        PlainAccessValidator(rules()).check(PEER, request)
    except AclRefused as refused:
        assert str(refused)


def test_watcher_sees_files_added_to_the_acl_folder(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "plain_acl.yml").write_text(ACL_YML)
    validator = PlainAccessValidator(AclRules())
    watcher = AclWatcher(lambda: acl_paths("", str(tmp_path)), validator.use)
    watcher.load_now()
    newcomer = SessionCredentials("team-account", "team-secret")
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("teamTopic"), b"x", newcomer)
    with pytest.raises(AclRefused, match="No acl config for team-account"):
        validator.check(PEER, request)
    (conf / "acl" / "teams").mkdir(parents=True)
    (conf / "acl" / "teams" / "team.yaml").write_text(
        "accounts: [{accessKey: team-account, secretKey: team-secret, defaultTopicPerm: PUB}]"
    )
    assert watcher.poll()
    validator.check(PEER, request)
    (conf / "acl" / "teams" / "team.yaml").unlink()
    assert watcher.poll()
    with pytest.raises(AclRefused, match="No acl config"):
        validator.check(PEER, request)


def test_a_send_checked_again_gets_the_same_answer_until_the_rules_change() -> None:
    """Send outcomes are kept per account, code and topic fields: the second check of each
    answers as the first (refusals with their message), a reload answers by the new rules, and
    a full table starts over."""
    validator = PlainAccessValidator(rules())
    sends = [
        (RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}, None),
        (RequestCode.SEND_MESSAGE_V2, {"b": "topicC"}, "No default permission for topic:topicC"),
        (RequestCode.SEND_MESSAGE, {"topic": "topicD"}, None),
        (RequestCode.SEND_MESSAGE, {"topic": "topicA"}, "No default permission for topic:topicA"),
        (RequestCode.SEND_BATCH_MESSAGE, {"topic": "topicB"}, None),
        (RequestCode.SEND_BATCH_MESSAGE, {"b": "topicA"}, "No default permission for topic:topicA"),
        (
            RequestCode.SEND_MESSAGE_V2,
            {"b": "%RETRY%groupA"},
            "No default permission for group:groupA",
        ),
    ]
    for _ in range(2):
        for code, ext, expected in sends:
            try:
                validator.check(PEER, signed(code, ext))
                answer = None
            except AclRefused as refused:
                answer = str(refused)
            assert answer == expected, (code, ext)
    validator.use(rules(ACL_YML.replace("topicC=SUB", "topicC=PUB")))
    validator.check(PEER, signed(RequestCode.SEND_MESSAGE_V2, {"b": "topicC"}))
    for i in range(5000):  # past the table's bound: it starts over, the answers stay right
        with pytest.raises(AclRefused, match=f"topic:t{i}$"):
            validator.check(PEER, signed(RequestCode.SEND_MESSAGE_V2, {"b": f"t{i}"}))
    validator.check(PEER, signed(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}))


NO_WHITE_LISTS = """\
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: PUB
"""


@pytest.mark.parametrize(
    ("text", "peer", "reads"),
    [
        (NO_WHITE_LISTS, "127.0.0.1:50123", 0),  # no list asks: the address is not read
        (ACL_YML, "127.0.0.1:50123", 1),  # the global list asks, once
        (ACL_YML, "10.10.103.7:50123", 1),  # and passes it
        (ACL_YML.replace("whiteRemoteAddress:\n", "whiteRemoteAddress: 1.2.3.4\n"), "[::1]:9", 1),
    ],
)
def test_the_peer_address_is_read_only_when_a_white_list_asks(
    text: str, peer: str, reads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidemq.broker.acl import validator as validator_module

    read: list[str] = []

    def counted(text: str) -> str:
        read.append(text)
        return peer_ip(text)

    monkeypatch.setattr(validator_module, "peer_ip", counted)
    connection = RemotingConnection(None)
    connection.peer = peer
    request = signed(RequestCode.SEND_MESSAGE_V2, send_v2("topicB"))
    expected = refusal(request, peer_ip(peer), text)
    try:
        PlainAccessValidator(rules(text)).before_request(connection, request)
        got = None
    except RequestRejected as rejected:
        got = rejected.remark.removeprefix(REMARK_PREFIX)
    assert got == expected  # what check(ip, ...) answers for the peer's address
    assert read == [peer] * reads
