"""The broker's own signature (broker/acl/own_account.py), without sockets: the first admin
account of the rules in force, checked by the same validator the peer runs; none, and nothing is
signed."""

from __future__ import annotations

import logging

import pytest

from tidemq.broker.acl.own_account import OwnAccountSigner
from tidemq.broker.acl.rules import AclRules, parse_document
from tidemq.broker.acl.validator import AclRefused, PlainAccessValidator
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.signing import ACCESS_KEY, SIGNATURE

PEER = "127.0.0.1"  # no white list: the signature is what lets it in


def rules(*accounts: tuple[str, str, bool]) -> AclRules:
    text = "accounts:\n" + "".join(
        f"  - accessKey: {key}\n    secretKey: {secret}\n    admin: {str(admin).lower()}\n"
        for key, secret, admin in accounts
    )
    white, parsed = parse_document(text, "plain_acl.yml")
    return AclRules(tuple(white), {a.access_key: a for a in parsed})


def sync_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}, b"")


def test_signs_with_the_first_admin_account_and_the_peer_accepts_it() -> None:
    current = rules(("application", "app-secret", False), ("brokers1", "brokers-secret", True))
    request = sync_request()
    OwnAccountSigner(lambda: current).sign(request)
    assert request.ext_fields[ACCESS_KEY] == "brokers1"
    PlainAccessValidator(current).check(PEER, request)
    # Another secret for the same key: the peer refuses it.
    other = rules(("brokers1", "another-secret", True))
    with pytest.raises(AclRefused, match="Check signature failed for accessKey=brokers1"):
        PlainAccessValidator(other).check(PEER, request)


def test_a_reload_is_used_at_once() -> None:
    current = [rules(("brokers1", "brokers-secret", True))]
    signer = OwnAccountSigner(lambda: current[0])
    current[0] = rules(("brokers2", "rotated-secret", True))
    request = sync_request()
    signer.sign(request)
    assert request.ext_fields[ACCESS_KEY] == "brokers2"
    PlainAccessValidator(current[0]).check(PEER, request)


def test_without_an_admin_account_nothing_is_signed_and_that_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    current = rules(("application", "app-secret", False))
    signer = OwnAccountSigner(lambda: current)
    with caplog.at_level(logging.WARNING, logger="tidemq.broker.acl.own_account"):
        for _ in range(3):
            request = sync_request()
            signer.sign(request)
            assert ACCESS_KEY not in request.ext_fields and SIGNATURE not in request.ext_fields
    assert len([r for r in caplog.records if "no admin account" in r.message]) == 1
    with pytest.raises(AclRefused, match="No accessKey is configured"):
        PlainAccessValidator(current).check(PEER, request)
