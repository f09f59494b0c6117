"""tidemq's HA proof: with aclEnable=true (and no haTlsEnable, whose client certificate is the
proof then), a slave proves it holds an admin account of the group's plain ACL before the master
sends it a CommitLog byte. RocketMQ 4.x's HA has no handshake, so this one is tidemq's own; it
comes before RocketMQ's byte stream, which follows unchanged. Without ACL nothing of it is sent.

Master -> slave, as soon as the connection is admitted (CHALLENGE, 24 bytes)::

    [4 magic b"TQHA"] [4 version, big-endian, 1] [16 nonce, random per connection]

Slave -> master (PROOF, 26 + n bytes)::

    [4 magic b"TQHA"] [2 n, big-endian, 1..255] [n accessKey, UTF-8]
    [20 HMAC-SHA1 keyed with the account's secretKey (UTF-8) of PROOF_DOMAIN + nonce]

HMAC-SHA1 because that is the key plain ACL already keeps per account (its request signatures,
client/remoting/signing.py); the domain string keeps a proof from ever being a valid request
signature or the reverse. The master answers nothing: it checks the proof and either closes
the connection (one log line saying why) or reads the slave's first 8-byte report, as RocketMQ's
master does. The nonce makes a recorded proof useless on another connection.
"""

from __future__ import annotations

import struct
from typing import Final

from tidemq.common.mac import Mac
from tidemq.ha.codec import HAProtocolError

MAGIC: Final = b"TQHA"
VERSION: Final = 1
NONCE_SIZE: Final = 16
MAC_SIZE: Final = 20  # HMAC-SHA1
MAX_ACCESS_KEY: Final = 255
PROOF_DOMAIN: Final = b"tidemq HA proof v1\x00"

_CHALLENGE = struct.Struct(">4sI16s")
_PROOF_HEAD = struct.Struct(">4sH")
CHALLENGE_SIZE: Final = _CHALLENGE.size
PROOF_HEAD_SIZE: Final = _PROOF_HEAD.size
assert CHALLENGE_SIZE == 24 and PROOF_HEAD_SIZE == 6


def encode_challenge(nonce: bytes) -> bytes:
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"a nonce is {NONCE_SIZE} bytes, not {len(nonce)}")
    return _CHALLENGE.pack(MAGIC, VERSION, nonce)


def decode_challenge(data: bytes) -> bytes:
    """The nonce of a CHALLENGE (HAProtocolError when `data` is not one)."""
    magic, version, nonce = _CHALLENGE.unpack(data)
    if magic != MAGIC:
        raise HAProtocolError("the master sent no HA challenge (is aclEnable=true on it too?)")
    if version != VERSION:
        raise HAProtocolError(f"HA challenge version {version}, this slave speaks {VERSION}")
    return bytes(nonce)


def proof_mac(key: Mac, nonce: bytes) -> bytes:
    """The MAC of a proof, from an HMAC-SHA1 keyed with the secretKey (copied, not changed)."""
    mac = key.copy()
    mac.update(PROOF_DOMAIN + nonce)
    return mac.digest()


def encode_proof(access_key: str, key: Mac, nonce: bytes) -> bytes:
    name = access_key.encode("utf-8")
    if not 0 < len(name) <= MAX_ACCESS_KEY:
        raise ValueError(f"an accessKey of 1..{MAX_ACCESS_KEY} bytes, not {len(name)}")
    return _PROOF_HEAD.pack(MAGIC, len(name)) + name + proof_mac(key, nonce)


def decode_proof_head(data: bytes) -> int:
    """How many bytes follow the 6-byte head: the accessKey's and the MAC's."""
    magic, length = _PROOF_HEAD.unpack(data)
    if magic != MAGIC:
        raise HAProtocolError("no HA proof (a slave without aclEnable, or not a tidemq slave)")
    if not 0 < length <= MAX_ACCESS_KEY:
        raise HAProtocolError(f"an HA proof's accessKey of {length} bytes")
    return int(length) + MAC_SIZE


def decode_proof_body(data: bytes) -> tuple[str, bytes]:
    """(accessKey, MAC) of what follows the head."""
    name, mac = data[:-MAC_SIZE], data[-MAC_SIZE:]
    try:
        return name.decode("utf-8"), bytes(mac)
    except UnicodeDecodeError:
        raise HAProtocolError("an HA proof's accessKey is not UTF-8") from None
