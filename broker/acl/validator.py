"""The plain ACL check of every request (RocketMQ's PlainAccessValidator), as a request hook.

Installed on the broker's remoting server only when `aclEnable=true`. For each request, in
RocketMQ's order (PlainPermissionManager.validate):

1. a peer matching a `globalWhiteRemoteAddresses` pattern passes;
2. no `AccessKey` field: "No accessKey is configured"; an access key no file defines:
   "No acl config for <key>";
3. a peer matching the account's `whiteRemoteAddress` passes;
4. the `Signature` must be the HMAC-SHA1 of the request (client/remoting/signing.py) with the
   account's secret key: else "Check signature failed for accessKey=<key>";
5. a send to RMQ_SYS_TRACE_TOPIC passes; an admin request (topic and group create/delete,
   broker config update) needs `admin: true`: else "Need admin permission for request
   code=<code>, but accessKey=<key> is not"; then each resource the request touches needs its
   permission, from the account's lists or else its defaults: else "No default permission for
   topic:<t>" (or "group:<g>"). What a request touches:

   - send (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE: 10, 310, 320): PUB on the
     topic; a retry topic (%RETRY%group): SUB on its group;
   - PULL_MESSAGE (11): SUB on the topic and on the consumer group;
   - QUERY_MESSAGE (12): SUB on the topic;
   - UPDATE_CONSUMER_OFFSET (15): SUB on the group and the topic;
   - HEART_BEAT (34): SUB on each consumer group and each topic it subscribes;
   - UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38): SUB on the consumer group;
   - CONSUMER_SEND_MSG_BACK (36): SUB on the group.

A refusal is answered as RocketMQ 4.x answers an AclException raised by its RPC hook:
SYSTEM_ERROR with the exception as remark ("org.apache.rocketmq.acl.common.AclException: ..."),
and is logged with the peer and the access key (never the secret). The processor does not run,
so nothing is written. A send to a retry topic is checked against the group the topic names
(RocketMQ reads a `group` field the send header does not have, and so checks nothing).

`rules` is replaced whole when the files change (broker/acl/watch.py): a request sees one
version of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from tidemq.broker.acl.addresses import matches_nothing
from tidemq.broker.acl.rules import (
    PUB,
    RETRY_PREFIX,
    SUB,
    Account,
    AclRules,
    permission_allows,
    retry_topic,
)
from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.protocol.heartbeat import decode_heartbeat
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.signing import ACCESS_KEY, signature_matches
from tidemq.client.transport.connection import RemotingConnection

log = logging.getLogger(__name__)

REMARK_PREFIX: Final = "org.apache.rocketmq.acl.common.AclException: "
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
ADMIN_CODES: Final = frozenset(
    int(code)
    for code in (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC,
    )
)

Needs = list[tuple[str, int]]


class AclRefused(Exception):
    """Why a request is refused (the AclException message)."""


def _group(name: str | None) -> Needs:
    return [] if not name else [(retry_topic(name), SUB)]


def _topic(name: str | None, perm: int = SUB) -> Needs:
    return [] if not name else [(name, perm)]


def _send(topic: str | None) -> Needs:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        return [(topic, SUB)]  # the retry topic is its group's resource
    return _topic(topic, PUB)


def _heartbeat(request: RemotingCommand) -> Needs:
    try:
        data = decode_heartbeat(request.body)
    except (BodyDecodeError, ValueError) as exc:
        raise AclRefused(f"bad heartbeat body: {exc}") from None
    needs: Needs = []
    for consumer in data.consumers:
        needs += _group(consumer.group_name)
        needs += [(s.topic, SUB) for s in consumer.subscriptions if s.topic]
    return needs


_NEEDS: Final[dict[int, Callable[[RemotingCommand], Needs]]] = {
    RequestCode.SEND_MESSAGE: lambda r: _send(r.ext_fields.get("topic")),
    RequestCode.SEND_MESSAGE_V2: lambda r: _send(r.ext_fields.get("b")),
    # Batches carry the V2 header's one-letter keys; the long ones when a client sends V1.
    RequestCode.SEND_BATCH_MESSAGE: lambda r: _send(
        r.ext_fields.get("b", r.ext_fields.get("topic"))
    ),
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda r: _group(r.ext_fields.get("group")),
    RequestCode.PULL_MESSAGE: lambda r: (
        _topic(r.ext_fields.get("topic")) + _group(r.ext_fields.get("consumerGroup"))
    ),
    RequestCode.QUERY_MESSAGE: lambda r: _topic(r.ext_fields.get("topic")),
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: lambda r: _group(r.ext_fields.get("consumerGroup")),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda r: _group(r.ext_fields.get("consumerGroup")),
    RequestCode.UPDATE_CONSUMER_OFFSET: lambda r: (
        _group(r.ext_fields.get("consumerGroup")) + _topic(r.ext_fields.get("topic"))
    ),
}


# The sends, whose needs are a function of their "b" (V2 and batches) or "topic" (V1) field.
_SEND_CODES: Final = frozenset(
    (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
)
_SEND_OUTCOMES_MAX: Final = 4096


def peer_ip(peer: str) -> str:
    """The address part of a connection's "ip:port" peer text."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")


class PlainAccessValidator:
    """The ACL request hook (see the module docstring)."""

    def __init__(self, rules: AclRules) -> None:
        self.rules = rules
        # A send's permission outcome (None: allowed, else the refusal) by account, code and
        # its topic fields: it depends on nothing else, and sends are most requests. Emptied
        # with the rules, and when full (topics come from clients: the memory stays bounded).
        self._send_outcomes: dict[tuple[str, int, str | None, str | None], str | None] = {}

    def use(self, rules: AclRules) -> None:
        """Check requests against `rules` from now on (a reload)."""
        self.rules = rules
        self._send_outcomes = {}

    def before_request(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        try:
            self._check(connection.peer, None, request)
        except AclRefused as refused:
            access_key = request.ext_fields.get(ACCESS_KEY, "")
            log.warning(
                "ACL refused request code %d from %s (accessKey %r): %s",
                request.code,
                connection.peer,
                access_key[:64],
                refused,
            )
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, REMARK_PREFIX + str(refused)) from None

    def after_response(
        self,
        connection: RemotingConnection,
        request: RemotingCommand,
        response: RemotingCommand | None,
    ) -> None:
        pass

    def check(self, ip: str, request: RemotingCommand) -> None:
        """Raise `AclRefused` unless the rules let a peer at `ip` make `request`."""
        self._check("", ip, request)

    def _check(self, peer: str, ip: str | None, request: RemotingCommand) -> None:
        """`check` of a request from `peer` ("ip:port"), whose address is read from it only
        when a white list asks (`ip`: already read)."""
        rules = self.rules
        if rules.global_white:
            if ip is None:
                ip = peer_ip(peer)
            for white in rules.global_white:
                if white(ip):
                    return
        ext = request.ext_fields
        access_key = ext.get(ACCESS_KEY)
        if access_key is None:
            raise AclRefused("No accessKey is configured")
        account = rules.accounts.get(access_key)
        if account is None:
            raise AclRefused(f"No acl config for {access_key[:64]}")
        white_address = account.white_address
        if white_address is not matches_nothing:
            if ip is None:
                ip = peer_ip(peer)
            if white_address(ip):
                return
        if not signature_matches(account.signing_key, ext, request.body):
            raise AclRefused(f"Check signature failed for accessKey={account.access_key}")
        code = request.code
        if code not in _SEND_CODES:
            _check_permissions(account, request)
            return
        outcomes = self._send_outcomes
        key = (access_key, code, ext.get("b"), ext.get("topic"))
        try:
            refusal = outcomes[key]
        except KeyError:
            try:
                _check_permissions(account, request)
                refusal = None
            except AclRefused as refused:
                refusal = str(refused)
            if len(outcomes) >= _SEND_OUTCOMES_MAX:
                outcomes.clear()
            outcomes[key] = refusal
        if refusal is not None:
            raise AclRefused(refusal)


def _check_permissions(account: Account, request: RemotingCommand) -> None:
    code = request.code
    needs_of = _NEEDS.get(code)
    needs = needs_of(request) if needs_of is not None else []
    if needs and needs[0] == (TRACE_TOPIC, PUB):  # only a send needs PUB, on its one topic
        return
    if code in ADMIN_CODES and not account.admin:
        raise AclRefused(
            f"Need admin permission for request code={code}, "
            f"but accessKey={account.access_key} is not"
        )
    check_resources(account, needs)


def check_resources(account: Account, needs: Needs) -> None:
    """Raise `AclRefused` unless `account` holds each (resource, permission) of `needs`
    (groups as their retry topic), from its lists or else its defaults."""
    owned = account.perms
    if owned is None and account.admin:
        return
    for resource, needed in needs:
        is_group = resource.startswith(RETRY_PREFIX)
        perm = owned.get(resource) if owned is not None else None
        if perm is None:
            perm = account.default_group_perm if is_group else account.default_topic_perm
        if not permission_allows(needed, perm):
            name = f"group:{resource[len(RETRY_PREFIX) :]}" if is_group else f"topic:{resource}"
            raise AclRefused(f"No default permission for {name}")
