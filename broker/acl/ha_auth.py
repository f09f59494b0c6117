"""With aclEnable=true and no haTlsEnable, replication is authenticated by ha/auth.py's proof:
the master challenges every admitted connection and admits it only if it proves an admin
account of the master's plain ACL; a slave answers with an admin account of its own ACL file.

Which account: the group's brokers share their plain ACL file (as RocketMQ's do), so a slave
proves the first admin account its file lists, and the master accepts any admin account of its
own (admin, because a replica reads every topic). No new key, and the secretKey stays in the ACL
file. With haTlsEnable the client certificate the master requires is the proof instead.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections.abc import Callable

from tidemq.broker.acl.rules import Account, AclRules
from tidemq.ha.auth import (
    CHALLENGE_SIZE,
    NONCE_SIZE,
    PROOF_HEAD_SIZE,
    decode_challenge,
    decode_proof_body,
    decode_proof_head,
    encode_challenge,
    encode_proof,
    proof_mac,
)
from tidemq.ha.codec import HAProtocolError
from tidemq.ha.transport import Connect, Handshake, Streams

log = logging.getLogger(__name__)

PROOF_TIMEOUT = 10.0
# Below the HA client's connect timeout (ha/slave.py CONNECT_TIMEOUT), which wraps it: the
# slave's log then says what it waited for.
CHALLENGE_TIMEOUT = 4.0


def replication_account(rules: AclRules) -> Account | None:
    """The account a slave proves itself with: the first admin account of its ACL."""
    return next((a for a in rules.accounts.values() if a.admin), None)


def master_handshake(rules: Callable[[], AclRules]) -> Handshake:
    """The master's side: challenge, then check the proof against the rules in force."""

    async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        nonce = secrets.token_bytes(NONCE_SIZE)
        writer.write(encode_challenge(nonce))
        try:
            async with asyncio.timeout(PROOF_TIMEOUT):
                await writer.drain()
                rest = decode_proof_head(await reader.readexactly(PROOF_HEAD_SIZE))
                access_key, mac = decode_proof_body(await reader.readexactly(rest))
        except TimeoutError:
            return f"aclEnable: no HA proof within {PROOF_TIMEOUT:.0f} s"
        except (asyncio.IncompleteReadError, ConnectionError):
            return "aclEnable: the peer closed the connection before its HA proof"
        except HAProtocolError as exc:
            return f"aclEnable: {exc}"
        return check_proof(rules(), access_key, mac, nonce)

    return handshake


def check_proof(rules: AclRules, access_key: str, mac: bytes, nonce: bytes) -> str | None:
    """None when `mac` proves an admin account of `rules`, else why not."""
    account = rules.accounts.get(access_key)
    if account is None:
        return f"aclEnable: HA proof for accessKey {access_key[:64]!r}, which no ACL file defines"
    if not account.admin:
        return f"aclEnable: HA proof for accessKey {access_key}, which is not an admin account"
    if not hmac.compare_digest(proof_mac(account.signing_key, nonce), mac):
        return f"aclEnable: HA proof for accessKey {access_key} does not match its secretKey"
    return None


def proving_connect(connect: Connect, rules: Callable[[], AclRules]) -> Connect:
    """The slave's side: connect as `connect` does, then answer the master's challenge."""

    async def connect_and_prove(address: str) -> Streams:
        account = replication_account(rules())
        if account is None:
            raise ConnectionError(
                "aclEnable: no admin account in this broker's ACL file to prove it to its master"
            )
        reader, writer = await connect(address)
        try:
            try:
                async with asyncio.timeout(CHALLENGE_TIMEOUT):
                    nonce = decode_challenge(await reader.readexactly(CHALLENGE_SIZE))
            except TimeoutError:
                raise TimeoutError(
                    f"the master sent no HA challenge within {CHALLENGE_TIMEOUT:.0f} s "
                    "(aclEnable=true on it too?)"
                ) from None
            except asyncio.IncompleteReadError:
                raise EOFError("the master closed the connection before its HA challenge") from None
            writer.write(encode_proof(account.access_key, account.signing_key, nonce))
            await writer.drain()
        except BaseException:
            writer.close()
            raise
        return reader, writer

    return connect_and_prove
