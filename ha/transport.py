"""How the HA services obtain their streams: TCP by default, anything that yields asyncio streams
when injected (the unit tests wire master and slave to each other in memory).

- `Listen(accept, host, port)` starts accepting: every connection is handed to `accept` as a
  (reader, writer) pair. It returns the `Listening` handle (closed by the service's stop) and the
  port actually bound (port 0 asks for a free one).
- `Connect(address)` opens one connection to a master's "host:port" HA address.

On TCP, the HA port may be guarded (tidemq's own keys, beyond RocketMQ; the broker builds the
arguments from ha/config.py): `allow` is asked for each connecting peer's IP before anything
else happens, and a peer it refuses is closed before a byte is read or sent, with one log line;
`tls` then starts TLS on the allowed connection as it is made (the broker's context asks for a
client certificate trusted by `haTlsTrustCertPath`, so a slave must hold one), and a failed
handshake is closed and logged the same way. The slave connects with its own context (verifying the
master's certificate and presenting its own). The bytes inside TLS are RocketMQ's HA stream,
unchanged. Two more hooks, both optional: `admit` is awaited for a peer's IP that `allow` let
through (or for every peer when there is no `allow`), with no transport yet, so the peer is held
(nothing read, nothing sent) until it answers None (admitted) or the reason of a refusal; at
most `MAX_PENDING_ADMISSIONS` peers are held at once, the next ones refused at once.
`handshake` runs on the admitted connection's streams (inside TLS when there is TLS) before the
service sees it, and answers the same way (broker/acl/ha_auth.py's ACL proof).

`ChunkReceiver` is how the slave reads: the transport reads straight into the room a sink
gives (asyncio's BufferedProtocol: the slave's TransferBuffer, reused, so no read allocates a
bytes object or copies it), and the sink acts on the bytes in the transport's own receive
callback, so they are appended to the CommitLog while they are still in the CPU's cache
(appends of 1 MiB reads cost less than half the CPU of 4 MiB ones), with no stream buffer
copying them in and out; the writer keeps working (its flow control and close are forwarded to
the stream protocol). This holds on TCP and TLS, on asyncio's loop and uvloop (both hand a
buffered protocol the decrypted bytes). Other transports (the in-memory ones of the tests) are
read through their StreamReader, each read copied into the sink's room.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

from tidemq.common.accept import AcceptLoop

# What one read of a StreamReader may return (transports that keep their stream protocol).
STREAM_READ_CHUNK = 1024 * 1024
# What a master's connection may hold unsent before its writer waits (drain): a few transfer
# spans, so that the socket always has the next one while the service reads the file.
MASTER_WRITE_BUFFER = 16 * 1024 * 1024

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT = 10.0
# Peers held by `admit` at once (a stranger opening connections cannot hold more sockets).
MAX_PENDING_ADMISSIONS = 64

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Accept = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Listening(Protocol):
    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


Listen = Callable[[Accept, str, int], Awaitable[tuple[Listening, int]]]
Connect = Callable[[str], Awaitable[Streams]]
# None: admitted; else why the peer is refused (logged).
Admit = Callable[[str], Awaitable[str | None]]
Handshake = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[str | None]]


async def listen_tcp(
    accept: Accept,
    host: str,
    port: int,
    *,
    allow: Callable[[str], bool] | None = None,
    tls: ssl.SSLContext | None = None,
    admit: Admit | None = None,
    handshake: Handshake | None = None,
) -> tuple[Listening, int]:
    if allow is not None or tls is not None or admit is not None or handshake is not None:
        guarded = GuardedListener(accept, allow, tls, admit, handshake)
        return guarded, await guarded.listen(host, port)

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.set_write_buffer_limits(MASTER_WRITE_BUFFER)
        await accept(reader, writer)

    server = await asyncio.start_server(accepted, host, port, reuse_address=True)
    sockets = server.sockets
    return server, sockets[0].getsockname()[1] if sockets else port


class GuardedListener:
    """Accepts sockets itself, on the common accept loop (common/accept.py), so that a peer is
    judged before its connection has a transport: an address outside the allow-list is closed
    with nothing read or sent, and TLS starts with the connection (`connect_accepted_socket`), so
    the handshake reads the peer's first bytes. (A plaintext transport upgraded later with
    start_tls may already have read them: uvloop starts reading as the connection is made, and a
    ClientHello sent with the connect then lands in the stream's buffer, where the handshake
    waits for it until its timeout.)"""

    def __init__(
        self,
        accept: Accept,
        allow: Callable[[str], bool] | None,
        tls: ssl.SSLContext | None,
        admit: Admit | None = None,
        handshake: Handshake | None = None,
    ) -> None:
        self._accept = accept
        self._allow = allow
        self._tls = tls
        self._admit_peer = admit
        self._handshake = handshake
        self._loop: AcceptLoop | None = None

    async def listen(self, host: str, port: int) -> int:
        listener = socket.create_server((host, port), family=_family(host), backlog=128)
        self._loop = AcceptLoop(
            listener,
            self._admit,
            "HA",
            screen=self._screen,
            max_pending=MAX_PENDING_ADMISSIONS if self._admit_peer is not None else None,
        )
        self._loop.start()
        return int(listener.getsockname()[1])

    def _screen(self, address: str) -> bool:
        if self._allow is None or self._allow(_ip(address)):
            return True
        log.warning("HA: connection from %s refused: not in haAllowedSlaveAddresses", address)
        return False

    async def _admit(self, conn: socket.socket, address: str) -> None:
        loop = asyncio.get_running_loop()
        if self._admit_peer is not None:
            try:
                refused = await self._admit_peer(_ip(address))
            except BaseException:
                conn.close()
                raise
            if refused is not None:
                log.warning("HA: connection from %s refused: %s", address, refused)
                conn.close()
                return
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            if self._tls is None:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
            else:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol,
                    conn,
                    ssl=self._tls,
                    ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
                )
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            log.warning("HA: TLS handshake with %s failed: %s", address, exc or "timeout")
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        if self._handshake is not None:
            try:
                refused = await self._handshake(reader, writer)
            except BaseException:
                transport.close()
                raise
            if refused is not None:
                log.warning("HA: connection from %s refused: %s", address, refused)
                transport.close()
                return
        # Admitted: the connection's life belongs to the service, not to this listener's close.
        if self._loop is not None:
            self._loop.handed_over()
        transport.set_write_buffer_limits(MASTER_WRITE_BUFFER)
        await self._accept(reader, writer)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()

    async def wait_closed(self) -> None:
        if self._loop is not None:
            await self._loop.wait_closed()


def _ip(address: str) -> str:
    """The host part of "host:port" (an IPv6 host keeps its colons)."""
    return address.rpartition(":")[0]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


async def connect_tcp(address: str, *, tls: ssl.SSLContext | None = None) -> Streams:
    host, _sep, port = address.rpartition(":")
    host = host.strip("[]")
    if tls is None:
        return await asyncio.open_connection(host, int(port))
    return await asyncio.open_connection(
        host, int(port), ssl=tls, server_hostname=host, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT
    )


class ReadSink(Protocol):
    """Where `ChunkReceiver` puts what the peer sends (ha/codec.py's TransferBuffer, wrapped)."""

    def get_buffer(self) -> memoryview:
        """Room for the next read (at least one byte)."""
        ...

    def buffer_updated(self, nbytes: int) -> None:
        """The last read put `nbytes` at the start of that room: act on them."""
        ...


class _ChunkProtocol(asyncio.BufferedProtocol):
    """Receives for `ChunkReceiver`; the rest of the connection's life goes to the stream's."""

    def __init__(self, stream: asyncio.BaseProtocol, sink: ReadSink, wake_on_data: bool) -> None:
        self.stream = stream
        self.sink = sink
        self.wake_on_data = wake_on_data
        self.arrived = asyncio.Event()
        self.failure: BaseException | None = None
        self.eof = False
        self.transport: asyncio.Transport | None = None
        self._discard: memoryview | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.failure is not None:
            # A read may still come after pausing: it goes nowhere (the session is ending).
            if self._discard is None:
                self._discard = memoryview(bytearray(STREAM_READ_CHUNK))
            return self._discard
        return self.sink.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.failure is not None:
            return  # the session is ending with it; what follows is not appended
        try:
            self.sink.buffer_updated(nbytes)
        except Exception as exc:  # noqa: BLE001 - raised again by `received()`, in the session
            self.failure = exc
            if self.transport is not None:
                self.transport.pause_reading()
            self.arrived.set()
            return
        if self.wake_on_data:
            self.arrived.set()

    def eof_received(self) -> bool | None:
        self.eof = True
        self.arrived.set()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.arrived.set()
        self.stream.connection_lost(exc)

    def pause_writing(self) -> None:
        self.stream.pause_writing()

    def resume_writing(self) -> None:
        self.stream.resume_writing()


class ChunkReceiver:
    """Hands what the peer sends to `sink` as it arrives; `received()` waits for more.

    Install it before anything can arrive (the slave does, before its first report).
    `wake_on_data=False`: the sink acts on the bytes itself, so `received()` returns only when
    the peer closed or the sink failed (on transports read through their StreamReader it still
    returns after each read, as that read is what feeds the sink).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sink: ReadSink,
        *,
        wake_on_data: bool = True,
    ) -> None:
        self._reader = reader
        self._sink = sink
        transport = writer.transport
        self._protocol: _ChunkProtocol | None = None
        try:
            protocol = _ChunkProtocol(transport.get_protocol(), sink, wake_on_data)
            transport.set_protocol(protocol)
        except NotImplementedError:
            return  # read through the StreamReader
        protocol.connection_made(transport)
        self._protocol = protocol

    async def received(self) -> bool:
        """Until `sink` took more bytes (True) or the peer closed (False); raises what
        `sink` raised."""
        protocol = self._protocol
        if protocol is None:
            data = await self._reader.read(STREAM_READ_CHUNK)
            if not data:
                return False
            self._copy_in(data)
            return True
        if not (protocol.eof or protocol.failure is not None):
            await protocol.arrived.wait()
        protocol.arrived.clear()
        if protocol.failure is not None:
            raise protocol.failure
        return not protocol.eof

    def _copy_in(self, data: bytes) -> None:
        """A read of the StreamReader, into the sink's room (as many times as it takes)."""
        done = 0
        while done < len(data):
            room = self._sink.get_buffer()
            n = min(len(room), len(data) - done)
            room[:n] = data[done : done + n]
            self._sink.buffer_updated(n)
            done += n
