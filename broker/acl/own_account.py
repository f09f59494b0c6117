"""With aclEnable=true, the broker signs every request it sends on its own behalf: registration
and unregistration with the name servers and its queries of them, a slave's SlaveSynchronize of
its master's tables, a master's offset reconciliation with its slaves and its questions to them
(broker/slave_names.py, broker/ha_members.py). So an ACL topology needs no
`globalWhiteRemoteAddresses` for its own brokers, which on one machine (127.0.0.1) would let
every local process in unsigned.

Which account: the same one a slave proves over HA (broker/acl/ha_auth.py), the first admin account
of the broker's own ACL file, read from the rules in force at each request (a reload that
changes it is used at once). Admin, because a slave asks its master for every table; the group's
brokers share their ACL file, as RocketMQ's do, so the account is one the peer knows. RocketMQ
4.x has no key for this (its BrokerOuterAPI takes an RPC hook no configuration fills: brokers
are white-listed); 5.x's ACL 2.0 adds `innerClientAuthenticationCredentials`, a user of its own
for inner calls. tidemq keeps plain ACL's one file: no new key, the secretKey stays in it.

Requests a broker sends to clients (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED) go over
the clients' own connections and are not signed, as in RocketMQ. The name server (no ACL, as in
RocketMQ 4.x) reads the headers it knows and ignores the signature fields.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidemq.broker.acl.ha_auth import replication_account
from tidemq.broker.acl.rules import AclRules
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.signing import sign_request

log = logging.getLogger(__name__)


class OwnAccountSigner:
    """Signs the broker's own requests with the first admin account of the rules in force."""

    __slots__ = ("_rules", "_warned")

    def __init__(self, rules: Callable[[], AclRules]) -> None:
        self._rules = rules
        self._warned = False

    def sign(self, request: RemotingCommand) -> None:
        account = replication_account(self._rules())
        if account is None:
            # Sent unsigned: an ACL peer refuses it and says why; said here once as well.
            if not self._warned:
                self._warned = True
                log.warning(
                    "aclEnable: no admin account in this broker's ACL file to sign its own "
                    "requests with (to its master, slaves and name servers)"
                )
            return
        self._warned = False
        sign_request(request, account.access_key, account.signing_key)
