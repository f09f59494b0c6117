"""tidemq's HA proof (ha/auth.py's layout, broker/acl/ha_auth.py's checks), without sockets."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from tidemq.broker.acl.ha_auth import check_proof, replication_account
from tidemq.broker.acl.rules import AclRules, parse_document
from tidemq.ha.auth import (
    CHALLENGE_SIZE,
    PROOF_HEAD_SIZE,
    decode_challenge,
    decode_proof_body,
    decode_proof_head,
    encode_challenge,
    encode_proof,
)
from tidemq.ha.codec import HAProtocolError

NONCE = bytes(range(16))
RULES_TEXT = """\
accounts:
  - accessKey: plain-user
    secretKey: plain-secret
  - accessKey: replica-admin
    secretKey: replica-secret
    admin: true
"""


def rules() -> AclRules:
    _white, accounts = parse_document(RULES_TEXT, "test")
    return AclRules((), {a.access_key: a for a in accounts})


def key(secret: str) -> hmac.HMAC:
    return hmac.new(secret.encode(), digestmod=hashlib.sha1)


def test_the_layout_round_trips() -> None:
    challenge = encode_challenge(NONCE)
    assert len(challenge) == CHALLENGE_SIZE and challenge[:8] == b"TQHA\x00\x00\x00\x01"
    assert decode_challenge(challenge) == NONCE
    proof = encode_proof("replica-admin", key("replica-secret"), NONCE)
    rest = decode_proof_head(proof[:PROOF_HEAD_SIZE])
    assert rest == len(proof) - PROOF_HEAD_SIZE == len("replica-admin") + 20
    access_key, mac = decode_proof_body(proof[PROOF_HEAD_SIZE:])
    assert access_key == "replica-admin"
    expected = hmac.new(b"replica-secret", b"tidemq HA proof v1\x00" + NONCE, hashlib.sha1)
    assert mac == expected.digest()


def test_a_rocketmq_report_is_no_proof_nor_challenge() -> None:
    report = (1234).to_bytes(8, "big")
    with pytest.raises(HAProtocolError, match="no HA proof"):
        decode_proof_head(report[:PROOF_HEAD_SIZE])
    with pytest.raises(HAProtocolError, match="no HA challenge"):
        decode_challenge(report + bytes(16))


def test_only_an_admin_account_with_its_secret_is_admitted() -> None:
    acl = rules()

    def proof(access_key: str, secret: str) -> str | None:
        encoded = encode_proof(access_key, key(secret), NONCE)
        name, mac = decode_proof_body(encoded[PROOF_HEAD_SIZE:])
        return check_proof(acl, name, mac, NONCE)

    assert proof("replica-admin", "replica-secret") is None
    assert "does not match its secretKey" in (proof("replica-admin", "other-secret") or "")
    assert "not an admin account" in (proof("plain-user", "plain-secret") or "")
    assert "which no ACL file defines" in (proof("nobody-here", "whatever") or "")
    # Another nonce (a replayed proof) does not match.
    encoded = encode_proof("replica-admin", key("replica-secret"), NONCE)
    name, mac = decode_proof_body(encoded[PROOF_HEAD_SIZE:])
    assert check_proof(acl, name, mac, bytes(16)) is not None
    account = replication_account(acl)
    assert account is not None and account.access_key == "replica-admin"
