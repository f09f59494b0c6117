"""Request signatures of RocketMQ's plain ACL (AclClientRPCHook, AclUtils, AclSigner).

A signed request carries, among its ext fields, `AccessKey`, optionally `SecurityToken`, and
`Signature`: the Base64 of the HMAC-SHA1, keyed with the account's secret key (UTF-8), of::

    value(k1) + value(k2) + ... + body

where k1 < k2 < ... are every ext field key but `Signature` and `_UNIQUE_KEY_QUERY`, sorted by
code point (Java's TreeMap of strings; keys the receiver does not know, such as the C++ client's
`OnsChannel`, count too), the values concatenated as text and encoded as UTF-8, and `body` the
request body's bytes as sent. The broker leaves `_UNIQUE_KEY_QUERY` out of what it checks, so our
signer leaves it out too (Java's client signs it, and its unique-key queries then fail).

`signed_content_digest` is the one computation, shared by the signer here and the broker's check
(`signature_matches`, broker/acl/validator.py). An account's key is made once (`signing_key`) and
copied per request. Compiled (client/remoting/_codec.pyx), the key is an `_HmacSha1` holding
OpenSSL's two SHA-1 contexts by value, and the compiled twins feed a stack copy of them each
value where it lies: no allocation per request (OpenSSL 3's HMAC objects, which the pure twins
use, allocate and free contexts on every copy and digest).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.common import speedups
from tidemq.common.mac import Mac

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
_UNSIGNED: Final = frozenset((SIGNATURE, UNIQUE_KEY_QUERY))


def signing_key(secret_key: str) -> Mac:
    """An HMAC-SHA1 keyed with `secret_key`, to `copy()` per request (the key schedule is paid
    once per account, not per request).

    The OpenSSL HMAC object itself when CPython's `hmac.HMAC` wraps one (its `_hmac`): the same
    copy, update and digest, without a Python frame of the wrapper around each call of every
    signed request (about 0.35 us of the 1.7 a single send's HMAC took)."""
    mac = hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)
    raw: Mac | None = getattr(mac, "_hmac", None)
    return raw if raw is not None else mac


# The compiled twin gives an _HmacSha1 (client/remoting/_codec.pyx): the same HMAC, its state two
# structs that a copy or a request's HMAC copies without allocating.
signing_key = speedups.select(signing_key, "tidemq.client.remoting._codec")


# The signed keys in order, by the keys as a request lists them: a client sends the same keys in
# the same order request after request, and a look-up costs less than a sort. Bounded: a peer
# varying its keys fills it once, then it is sorted per request.
_KEY_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}
_KEY_ORDERS_MAX: Final = 1024


def _signed_keys(ext_fields: Mapping[str, str]) -> tuple[str, ...]:
    keys = tuple(ext_fields)
    order = _KEY_ORDERS.get(keys)
    if order is None:
        order = tuple(sorted(k for k in keys if k not in _UNSIGNED))
        if len(_KEY_ORDERS) < _KEY_ORDERS_MAX:
            _KEY_ORDERS[keys] = order
    return order


def signed_content_digest(key: Mac, ext_fields: Mapping[str, str], body: Body) -> bytes:
    """The raw HMAC-SHA1 of a request's signed content (see the module docstring)."""
    mac = key.copy()
    mac.update("".join(map(ext_fields.__getitem__, _signed_keys(ext_fields))).encode("utf-8"))
    if body:
        mac.update(body)
    return mac.digest()


# The compiled twin feeds the values to a stack copy of an _HmacSha1's state, in C.
signed_content_digest = speedups.select(signed_content_digest, "tidemq.client.remoting._codec")


def signature_matches(key: Mac, ext_fields: Mapping[str, str], body: Body) -> bool:
    """Whether the request's `Signature` field (none: "") is the Base64 of its signed content's
    HMAC with `key`, compared in constant time: the broker's check of every signed request."""
    given = ext_fields.get(SIGNATURE, "")
    expected = binascii.b2a_base64(signed_content_digest(key, ext_fields, body), newline=False)
    return hmac.compare_digest(expected, given.encode("utf-8", "replace"))


# The compiled twin reads the fields once, in C, and keeps the last key order it sorted.
signature_matches = speedups.select(signature_matches, "tidemq.client.remoting._codec")


def signature(secret_key: str, ext_fields: Mapping[str, str], body: Body) -> str:
    """The `Signature` value of a request with these fields and body."""
    digest = signed_content_digest(signing_key(secret_key), ext_fields, body)
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """An account of the broker's plain ACL (RocketMQ's SessionCredentials)."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")


class Signer(Protocol):
    """What signs a request in place before it is sent (RocketMQ's RPCHook.doBeforeRequest)."""

    def sign(self, request: RemotingCommand) -> None: ...


def sign_request(
    request: RemotingCommand, access_key: str, key: Mac, security_token: str = ""
) -> None:
    """Add `AccessKey`, `SecurityToken` (when there is one) and `Signature` to `request`, the
    signature made with `key` (`signing_key` of the account's secret key)."""
    ext = request.ext_fields
    ext[ACCESS_KEY] = access_key
    if security_token:
        ext[SECURITY_TOKEN] = security_token
    digest = signed_content_digest(key, ext, request.body)
    # binascii's own call: base64.b64encode is a Python wrapper around it
    ext[SIGNATURE] = binascii.b2a_base64(digest, newline=False).decode("ascii")


class RequestSigner:
    """Signs requests in place with one account's credentials (AclClientRPCHook)."""

    __slots__ = ("_access_key", "_key", "_token")

    def __init__(self, credentials: SessionCredentials) -> None:
        self._access_key = credentials.access_key
        self._token = credentials.security_token
        self._key = signing_key(credentials.secret_key)

    def sign(self, request: RemotingCommand) -> None:
        """Add `AccessKey`, `SecurityToken` (when there is one) and `Signature` to `request`."""
        sign_request(request, self._access_key, self._key, self._token)

    @property
    def access_key(self) -> str:
        return self._access_key

    @property
    def key(self) -> Mac:
        """`signing_key` of the account's secret key."""
        return self._key

    @property
    def security_token(self) -> str:
        return self._token
