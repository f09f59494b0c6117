"""TLS for remoting ports (RocketMQ's TlsSystemConfig and TlsHelper): settings, contexts, and the
accept loop of a port that speaks TLS.

Server modes (`tls.server.mode`): `disabled` (plaintext only; tidemq's default, RocketMQ's is
permissive with a self-signed test certificate), `permissive` (TLS and plaintext on one port)
and `enforcing` (TLS only). A TLS port accepts each connection itself and peeks at its first
byte without consuming it: 0x16 (a TLS handshake record) is handed to asyncio with the server's
SSL context, anything else is plaintext, taken in permissive mode and closed in enforcing mode
with one log line naming the peer. A handshake that fails (garbage, an untrusted or expired
certificate, a client without the certificate a `require` port asks for) closes the connection
with one log line giving the reason; other connections are not affected. A connection that
sends nothing for `FIRST_BYTE_TIMEOUT` seconds is closed. The acceptor asks `admit(peer)` first
(the server's connection limit, those still being admitted counted in, `admitting`): a
connection it refuses is closed before a byte is read.

Client authentication (`tls.server.need.client.auth`): `none`, `optional` (a certificate, when
sent, must be trusted) or `require`. Client certificates are checked against
`tls.server.trustCertPath` (a PEM bundle of CAs).

The client's side (`TlsClientSettings`, the loading of certificates) is client/transport/tls.py.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tidemq.client.transport.tls import TlsSetupError, load_chain, load_trust
from tidemq.common.accept import AcceptLoop

log = logging.getLogger(__name__)

TLS_HANDSHAKE: Final = 0x16  # the content type of a TLS handshake record
FIRST_BYTE_TIMEOUT: Final = 10.0
HANDSHAKE_TIMEOUT: Final = 10.0


# Member names are RocketMQ's words: configuration files name enums by member name.
class TlsMode(enum.Enum):
    disabled = "disabled"
    permissive = "permissive"
    enforcing = "enforcing"


class ClientAuth(enum.Enum):
    none = "none"
    optional = "optional"
    require = "require"


@dataclass(frozen=True, slots=True)
class TlsServerSettings:
    mode: TlsMode = TlsMode.disabled
    cert_path: str = ""
    key_path: str = ""
    key_password: str = field(default="", repr=False)
    trust_cert_path: str = ""
    client_auth: ClientAuth = ClientAuth.none

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsMode.disabled

    def context(self) -> ssl.SSLContext:
        """The server's SSL context (`TlsSetupError` naming the file that does not load)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if not self.cert_path:
            raise TlsSetupError("tls.server.certPath: a TLS port needs a certificate")
        load_chain(context, self.cert_path, self.key_path, self.key_password, "tls.server")
        if self.client_auth is not ClientAuth.none:
            if not self.trust_cert_path:
                raise TlsSetupError(
                    "tls.server.trustCertPath: client authentication needs the CAs to trust"
                )
            load_trust(context, self.trust_cert_path, "tls.server.trustCertPath")
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth is ClientAuth.require else ssl.CERT_OPTIONAL
            )
        return context


class TlsAcceptor:
    """The admission of a TLS port's sockets (see the module docstring), on the common accept
    loop (common/accept.py): each accepted socket is peeked at, then handed to
    `loop.connect_accepted_socket` with or without the context."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        context: ssl.SSLContext,
        mode: TlsMode,
        name: str,
        admit: Callable[[str], bool] | None = None,
    ) -> None:
        self.factory = factory
        self.context = context
        self.mode = mode
        self.name = name
        self._loop = AcceptLoop(sock, self._admit, name, screen=admit)

    @property
    def sock(self) -> socket.socket:
        return self._loop.sock

    def start(self) -> None:
        self._loop.start()

    @property
    def admitting(self) -> int:
        """Connections accepted and not yet handed over (peeked at, in their handshake)."""
        return self._loop.admitting

    async def _admit(self, conn: socket.socket, peer: str) -> None:
        try:
            await self._hand_over(conn, peer)
        except BaseException:  # cancelled by stop(): the socket is ours to close
            conn.close()
            raise

    async def _hand_over(self, conn: socket.socket, peer: str) -> None:
        conn.setblocking(False)
        try:
            first = await asyncio.wait_for(_peek(conn), FIRST_BYTE_TIMEOUT)
        except (TimeoutError, OSError):
            conn.close()
            return
        if not first:
            conn.close()
            return
        is_tls = first[0] == TLS_HANDSHAKE
        if not is_tls and self.mode is TlsMode.enforcing:
            log.warning("%s: plaintext from %s on a TLS-only port: closed", self.name, peer)
            conn.close()
            return
        loop = asyncio.get_running_loop()
        try:
            if is_tls:
                await loop.connect_accepted_socket(
                    self.factory, conn, ssl=self.context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
                )
            else:
                await loop.connect_accepted_socket(self.factory, conn)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            log.warning("%s: TLS handshake with %s failed: %s", self.name, peer, exc or "timeout")
            conn.close()

    async def stop(self) -> None:
        await self._loop.stop()


async def _peek(conn: socket.socket) -> bytes:
    """The first byte `conn` has to read, left in the socket for whoever reads next."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    fd = conn.fileno()

    def wake() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await readable
    finally:
        loop.remove_reader(fd)
    return conn.recv(1, socket.MSG_PEEK)
