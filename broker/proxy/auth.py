"""RocketMQ 5 clients' signatures and permissions on the gRPC endpoint, against the plain ACL
accounts of the remoting port (broker/acl), sans-IO.

A 5.x client signs every call with two metadata headers (apache/rocketmq-clients' Signature,
read by RocketMQ's proxy as AuthorizationHeader / DefaultAuthenticationContextBuilder):

    x-mq-date-time: 20261129T141500Z
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secretKey, the x-mq-date-time text)>

(one line). The header is a method, one space, then `key=value` items separated by commas;
`Credential` may carry more after a `/` (only the access key is read); the signature is hex
(either case). As in RocketMQ, the date-time is signed but not compared with the clock (the
clients write their local time with a `Z`), so a captured header stays valid: TLS keeps it
from being captured.

The check of a call, in the remoting validator's order (broker/acl/validator.py):
1. a peer matching a `globalWhiteRemoteAddresses` pattern passes;
2. no `authorization` header or an empty `Credential`: UNAUTHORIZED "No accessKey is
   configured"; an unknown access
   key: "No acl config for <key>"; a header that does not parse or no date-time: UNAUTHORIZED
   naming what is wrong;
3. a peer matching the account's `whiteRemoteAddress` passes;
4. the signature must be the account's: else UNAUTHORIZED "Check signature failed for
   accessKey=<key>";
5. the resources the request touches need their permission (`check_resources`): else
   FORBIDDEN "No default permission for topic:<t>" (or "group:<g>"). What a request touches
   (RocketMQ's PlainAccessResource for gRPC requests, with ChangeInvisibleDuration added, and
   groups checked as groups: RocketMQ checks a gRPC group against the topic permissions):

   - SendMessage, EndTransaction, RecallMessage: PUB on the topic (a retry topic: SUB on its
     group);
   - ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue:
     SUB on the group and the topic;
   - Heartbeat: SUB on its group, when it names one;
   - Telemetry, per settings command: PUB on each published topic; SUB on the subscription's
     group and each topic it subscribes;
   - the others (QueryRoute, QueryAssignment, NotifyClientTermination, the ones not served):
     a valid signature only.

Names are the stored ones (`<namespace>%<name>`, as broker/proxy/service.py forms them); the
handler checks their characters afterwards. The account's secret is never logged.
"""

from __future__ import annotations

import binascii
import dataclasses
import hmac
from collections.abc import Callable, Mapping
from typing import Any, Final

from tidemq.broker.acl.rules import PUB, RETRY_PREFIX, SUB, Account, AclRules, retry_topic
from tidemq.broker.acl.validator import AclRefused, Needs, check_resources
from tidemq.broker.proxy.protocol.definition_pb2 import Code, Resource
from tidemq.broker.proxy.status import Rejected

AUTHORIZATION: Final = "authorization"
DATE_TIME: Final = "x-mq-date-time"
METHOD: Final = "MQv2-HMAC-SHA1"
HEADER_LIMIT: Final = 4096  # an authorization header is ~120 characters
WHITE_CACHE_LIMIT: Final = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signature: bytes  # the HMAC-SHA1 digest the client sent


def parse_authorization(header: str) -> Authorization:
    """The access key and signature of an `authorization` header (`AclRefused` naming what is
    wrong otherwise)."""
    if len(header) > HEADER_LIMIT:
        raise AclRefused(f"authorization header of {len(header)} characters")
    method, space, items = header.partition(" ")
    if not space or method != METHOD:
        raise AclRefused(f"authorization header is incorrect: method must be {METHOD}")
    access_key = signature = None
    for item in items.split(","):
        key, equals, value = item.strip().partition("=")
        if not equals:
            raise AclRefused(f"authorization item {item.strip()[:40]!r} is not key=value")
        if key == "Credential":
            access_key = value.split("/", 1)[0]
        elif key == "Signature":
            try:
                signature = binascii.unhexlify(value)
            except (binascii.Error, ValueError):
                raise AclRefused("authorization Signature is not hex") from None
    if not access_key:  # the official clients sign with "Credential=" when given no key
        raise AclRefused("No accessKey is configured")
    if signature is None:
        raise AclRefused("authorization header has no Signature")
    return Authorization(access_key, signature)


def stored_name(resource: Resource) -> str:
    if resource.resource_namespace:
        return f"{resource.resource_namespace}%{resource.name}"
    return resource.name


def _group(resource: Resource) -> Needs:
    name = stored_name(resource)
    return [(retry_topic(name), SUB)] if name else []


def _topic(resource: Resource, perm: int = SUB) -> Needs:
    name = stored_name(resource)
    if name.startswith(RETRY_PREFIX):
        return [(name, SUB)]  # a retry topic is its group's resource
    return [(name, perm)] if name else []


def _send(request: Any) -> Needs:
    needs: Needs = []
    for message in request.messages:
        for need in _topic(message.topic, PUB):
            if need not in needs:
                needs.append(need)
    return needs


def _consume(request: Any) -> Needs:
    return _group(request.group) + _topic(request.topic)


_NEEDS: Final[dict[str, Callable[[Any], Needs]]] = {
    "SendMessage": _send,
    "EndTransaction": lambda r: _topic(r.topic, PUB),
    "RecallMessage": lambda r: _topic(r.topic, PUB),
    "ReceiveMessage": lambda r: _group(r.group) + _topic(r.message_queue.topic),
    "AckMessage": _consume,
    "ChangeInvisibleDuration": _consume,
    "ForwardMessageToDeadLetterQueue": _consume,
    "Heartbeat": lambda r: _group(r.group) if r.HasField("group") else [],
}


def needs_of(method: str, request: Any) -> Needs:
    """The (resource, permission) pairs an RPC's request touches."""
    needs = _NEEDS.get(method)
    return needs(request) if needs is not None else []


def telemetry_needs(command: Any) -> Needs:
    """What a Telemetry command touches: a settings command's topics and group."""
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    needs: Needs = []
    if settings.HasField("publishing"):
        for topic in settings.publishing.topics:
            needs += _topic(topic, PUB)
    if settings.HasField("subscription"):
        subscription = settings.subscription
        needs += _group(subscription.group)
        for entry in subscription.subscriptions:
            needs += _topic(entry.topic)
    return needs


class GrpcGuard:
    """The ACL check of gRPC calls (see the module docstring); `rules()` is the current
    version of the ACL files (the remoting validator's, replaced whole on a reload)."""

    def __init__(self, rules: Callable[[], AclRules]) -> None:
        self.rules = rules
        # White-address answers per peer (and account) for the rules they were computed with:
        # matching parses the address (~50 us a call otherwise); a client calls from one.
        self._cached_rules: AclRules | None = None
        self._white: dict[tuple[str, str], bool] = {}

    def _is_white(self, rules: AclRules, ip: str, account: Account | None) -> bool:
        if rules is not self._cached_rules:
            self._cached_rules, self._white = rules, {}
        key = (account.access_key if account is not None else "", ip)
        white = self._white.get(key)
        if white is None:
            if account is None:
                white = any(match(ip) for match in rules.global_white)
            else:
                white = account.white_address(ip)
            if len(self._white) >= WHITE_CACHE_LIMIT:
                self._white.clear()  # peers come and go: the memory stays bounded
            self._white[key] = white
        return white

    def authenticate(self, metadata: Mapping[str, str], ip: str) -> Account | None:
        """The caller's account, or None when its address is trusted without one (a global
        or the account's white address); `Rejected` UNAUTHORIZED otherwise."""
        try:
            return self._authenticate(metadata, ip)
        except AclRefused as refused:
            raise Rejected(Code.UNAUTHORIZED, str(refused)) from None

    def _authenticate(self, metadata: Mapping[str, str], ip: str) -> Account | None:
        rules = self.rules()
        if self._is_white(rules, ip, None):
            return None
        header = metadata.get(AUTHORIZATION)
        if not header:
            raise AclRefused("No accessKey is configured")
        given = parse_authorization(header)
        account = rules.accounts.get(given.access_key)
        if account is None:
            raise AclRefused(f"No acl config for {given.access_key[:64]}")
        if self._is_white(rules, ip, account):
            return None
        date_time = metadata.get(DATE_TIME)
        if not date_time:
            raise AclRefused(f"the {DATE_TIME} header is missing")
        signer = account.signing_key.copy()
        signer.update(date_time.encode("utf-8"))
        if not hmac.compare_digest(signer.digest(), given.signature):
            raise AclRefused(f"Check signature failed for accessKey={account.access_key}")
        return account

    @staticmethod
    def authorize(account: Account | None, needs: Needs) -> None:
        """`Rejected` FORBIDDEN unless `account` (None: a trusted address) holds `needs`."""
        if account is None or not needs:
            return
        try:
            check_resources(account, needs)
        except AclRefused as refused:
            raise Rejected(Code.FORBIDDEN, str(refused)) from None
