"""The gRPC port's front door for the TLS settings grpcio cannot serve itself.

grpcio serves a port either plaintext or TLS, and asks a client for a certificate either always
or never. RocketMQ's proxy (Netty) serves `tls.server.mode=permissive` (TLS and plaintext on
one port) and `tls.server.need.client.auth=optional` (a certificate, when sent, must be
trusted). In those two cases the gRPC server listens on an internal plaintext port on the
loopback, and this front door takes the public port (at most `MAX_RELAYS` connections at
once, those in their handshake counted; one more is closed before a byte is read, logged at
most once a minute): the remoting port's acceptor
(broker/remoting/tls.py: peeks at the first byte, runs the handshake with the server's own
context, closes plaintext on an enforcing port) hands each connection to a relay, which copies
its bytes both ways to the internal port, with back pressure each way (a side whose buffer
passes its high-water mark stops the other side's reads).

The gRPC server sees every relayed connection as coming from the relay's own loopback
address. `client_of(address)` gives back the client's address for the ACL's white-address
checks and the client table; a call arriving at the internal port on a connection that is not
a relay's (another local process dialling the port directly) has no client, and the server
refuses it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Final, cast

from tidemq.broker.remoting.tls import ClientAuth, TlsAcceptor, TlsMode, TlsServerSettings
from tidemq.common.accept import listening_socket, peer_text

log = logging.getLogger(__name__)

INTERNAL_HOST: Final = "127.0.0.1"
HIGH_WATER: Final = 64 * 1024  # bytes buffered towards one side before the other stops reading
MAX_RELAYS: Final = 10_000  # connections relayed at once (each holds two sockets)
REFUSAL_LOG_SECONDS: Final = 60.0


def needs_front(tls: TlsServerSettings) -> bool:
    """Whether grpcio cannot serve these settings on its own port."""
    return tls.mode is TlsMode.permissive or tls.client_auth is ClientAuth.optional


class _Side(asyncio.Protocol):
    """One side of a relayed connection: what it reads goes to `other`."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.other: _Side | None = None
        # Read before the other side was connected (uvloop delivers what it has already read
        # even after pause_reading in connection_made): written once it is.
        self.early: list[bytes] = []
        self.ended = False  # this side sent its end of stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses
        self.transport = stream
        stream.set_write_buffer_limits(HIGH_WATER)
        self.made(stream)

    def made(self, transport: asyncio.Transport) -> None:
        raise NotImplementedError

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is not None and other.transport is not None:
            other.transport.write(data)
        else:
            self.early.append(bytes(data))

    def eof_received(self) -> bool | None:
        self.ended = True
        other = self.other
        if (
            other is not None
            and not other.ended
            and other.transport is not None
            and other.transport.can_write_eof()
        ):
            other.transport.write_eof()
            return True  # half-close: the other way may still carry the last answers
        self.relay.close()  # both ways ended (or the other side cannot be half-closed)
        return None

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.close()


class _ClientSide(_Side):
    def made(self, transport: asyncio.Transport) -> None:
        self.relay.client_made(transport)


class _UpstreamSide(_Side):
    def made(self, transport: asyncio.Transport) -> None:
        self.relay.upstream_made(transport)


class _Relay:
    """A client's connection and its twin to the internal port."""

    def __init__(self, front: GrpcFront) -> None:
        self.front = front
        self.client = _ClientSide(self)
        self.upstream = _UpstreamSide(self)
        self.client.other, self.upstream.other = self.upstream, self.client
        self.client_address = ""
        self.relay_port: int | None = None
        self.closed = False

    def client_made(self, transport: asyncio.Transport) -> None:
        self.client_address = peer_text(transport.get_extra_info("peername"))
        transport.pause_reading()  # until the internal side can take its bytes
        self.front.relays.add(self)
        self.front.connect(self)

    def upstream_made(self, transport: asyncio.Transport) -> None:
        if self.closed:
            transport.close()
            return
        self.relay_port = int(transport.get_extra_info("sockname")[1])
        self.front.clients[self.relay_port] = self.client_address
        for data in self.client.early:
            transport.write(data)
        self.client.early.clear()
        assert self.client.transport is not None
        self.client.transport.resume_reading()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.front.relays.discard(self)
        if self.relay_port is not None:
            self.front.clients.pop(self.relay_port, None)
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.close()


class GrpcFront:
    """The public gRPC port in front of the internal one (see the module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        internal_port: int,
        tls: TlsServerSettings,
        name: str,
        *,
        max_relays: int = MAX_RELAYS,
    ) -> None:
        self.host = host
        self.max_relays = max_relays
        self._refusal_logged = -REFUSAL_LOG_SECONDS
        self.port = port
        self.internal_port = internal_port
        self.tls = tls
        self.name = name
        self.clients: dict[int, str] = {}  # the relay's local port -> the client's host:port
        self.relays: set[_Relay] = set()
        self._acceptor: TlsAcceptor | None = None
        self._connects: set[asyncio.Task[None]] = set()

    def context(self) -> ssl.SSLContext:
        context = self.tls.context()
        context.set_alpn_protocols(["h2"])  # gRPC clients refuse a TLS peer without it
        return context

    async def start(self) -> None:
        sock = listening_socket(self.host, self.port)
        self.port = int(sock.getsockname()[1])
        self._acceptor = TlsAcceptor(
            sock, self._new_relay, self.context(), self.tls.mode, self.name, self._has_room
        )
        self._acceptor.start()

    def _has_room(self, peer: str) -> bool:
        admitting = self._acceptor.admitting if self._acceptor is not None else 0
        if len(self.relays) + admitting < self.max_relays:
            return True
        now = time.monotonic()
        if now - self._refusal_logged >= REFUSAL_LOG_SECONDS:
            self._refusal_logged = now
            log.warning(
                "%s: %s refused: %d connections already (the most at once; said once a minute)",
                self.name,
                peer,
                self.max_relays,
            )
        return False

    def _new_relay(self) -> asyncio.BaseProtocol:
        return _Relay(self).client

    def connect(self, relay: _Relay) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(relay))
        self._connects.add(task)
        task.add_done_callback(self._connects.discard)

    async def _connect(self, relay: _Relay) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: relay.upstream, INTERNAL_HOST, self.internal_port)
        except OSError as exc:
            log.warning(
                "%s: cannot relay %s to the gRPC server: %s", self.name, relay.client_address, exc
            )
            relay.close()

    def client_of(self, address: str) -> str | None:
        """The client's `host:port` behind a relayed connection's `address` at the internal
        port; None for a connection that is not a relay's."""
        host, _sep, port = address.rpartition(":")
        if host != INTERNAL_HOST or not port.isdigit():
            return None
        return self.clients.get(int(port))

    async def stop(self) -> None:
        if self._acceptor is not None:
            await self._acceptor.stop()
            self._acceptor = None
        for task in list(self._connects):
            task.cancel()
        for relay in list(self.relays):
            relay.close()
