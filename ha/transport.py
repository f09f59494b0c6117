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
unchanged.

`ChunkReceiver` is how the slave reads: every received chunk is handed to a callback as soon as
it arrives. On a transport that lets its protocol be replaced (TCP), the callback runs in the
transport's own receive callback, so the bytes are appended to the CommitLog while they are
still in the CPU's cache (appends of ~256 KiB chunks cost half the CPU of 4 MiB ones), with no
stream buffer copying them in and out; the writer keeps working (its flow control and close are
forwarded to the stream protocol). Other transports (the in-memory ones of the tests) are read
through their StreamReader.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

# What one read of a StreamReader may return (transports that keep their stream protocol).
STREAM_READ_CHUNK = 1024 * 1024
# What a master's connection may hold unsent before its writer waits (drain): a few transfer
# spans, so that the socket always has the next one while the service reads the file.
MASTER_WRITE_BUFFER = 16 * 1024 * 1024

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT = 10.0

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Accept = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Listening(Protocol):
    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


Listen = Callable[[Accept, str, int], Awaitable[tuple[Listening, int]]]
Connect = Callable[[str], Awaitable[Streams]]


async def listen_tcp(
    accept: Accept,
    host: str,
    port: int,
    *,
    allow: Callable[[str], bool] | None = None,
    tls: ssl.SSLContext | None = None,
) -> tuple[Listening, int]:
    if allow is not None or tls is not None:
        guarded = GuardedListener(accept, allow, tls)
        return guarded, await guarded.listen(host, port)

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.set_write_buffer_limits(MASTER_WRITE_BUFFER)
        await accept(reader, writer)

    server = await asyncio.start_server(accepted, host, port, reuse_address=True)
    sockets = server.sockets
    return server, sockets[0].getsockname()[1] if sockets else port


class GuardedListener:
    """Accepts sockets itself, so that a peer is judged before its connection has a transport:
    an address outside the allow-list is closed with nothing read or sent, and TLS starts with the
    connection (`connect_accepted_socket`), so the handshake reads the peer's first bytes. (A
    plaintext transport upgraded later with start_tls may already have read them: uvloop starts
    reading as the connection is made, and a ClientHello sent with the connect then lands in the
    stream's buffer, where the handshake waits for it until its timeout.)"""

    def __init__(
        self, accept: Accept, allow: Callable[[str], bool] | None, tls: ssl.SSLContext | None
    ) -> None:
        self._accept = accept
        self._allow = allow
        self._tls = tls
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()

    async def listen(self, host: str, port: int) -> int:
        listener = socket.create_server((host, port), family=_family(host), backlog=128)
        listener.setblocking(False)
        self._socket = listener
        self._accepting = asyncio.create_task(self._accept_loop(listener))
        return int(listener.getsockname()[1])

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: the port stays open
                log.warning("HA: accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            ip, address = str(peer[0]), f"{peer[0]}:{peer[1]}"
            if self._allow is not None and not self._allow(ip):
                log.warning(
                    "HA: connection from %s refused: not in haAllowedSlaveAddresses", address
                )
                conn.close()
                continue
            admitting = asyncio.create_task(self._admit(conn, address))
            self._admitting.add(admitting)
            admitting.add_done_callback(self._admitting.discard)

    async def _admit(self, conn: socket.socket, address: str) -> None:
        loop = asyncio.get_running_loop()
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
        # Admitted: the connection's life belongs to the service, not to this listener's close.
        current = asyncio.current_task()
        if current is not None:
            self._admitting.discard(current)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        transport.set_write_buffer_limits(MASTER_WRITE_BUFFER)
        await self._accept(reader, writer)

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for admitting in list(self._admitting):
            admitting.cancel()
        if self._socket is not None:
            self._socket.close()

    async def wait_closed(self) -> None:
        pending = [task for task in (self._accepting, *self._admitting) if task is not None]
        await asyncio.gather(*pending, return_exceptions=True)


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


OnChunk = Callable[[bytes], None]


class _ChunkProtocol(asyncio.Protocol):
    """Receives for `ChunkReceiver`; the rest of the connection's life goes to the stream's."""

    def __init__(self, stream: asyncio.BaseProtocol, on_chunk: OnChunk) -> None:
        self.stream = stream
        self.on_chunk = on_chunk
        self.arrived = asyncio.Event()
        self.failure: BaseException | None = None
        self.eof = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.failure is not None:
            return  # the session is ending with it; what follows is not appended
        try:
            self.on_chunk(data)
        except Exception as exc:  # noqa: BLE001 - raised again by `received()`, in the session
            self.failure = exc
            if self.transport is not None:
                self.transport.pause_reading()
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
    """Hands every chunk the peer sends to `on_chunk`; `received()` waits for the next ones.

    Install it before anything can arrive (the slave does, before its first report).
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_chunk: OnChunk
    ) -> None:
        self._reader = reader
        self._on_chunk = on_chunk
        transport = writer.transport
        self._protocol: _ChunkProtocol | None = None
        try:
            protocol = _ChunkProtocol(transport.get_protocol(), on_chunk)
            transport.set_protocol(protocol)
        except NotImplementedError:
            return  # read through the StreamReader
        protocol.connection_made(transport)
        self._protocol = protocol

    async def received(self) -> bool:
        """Until `on_chunk` took more bytes (True) or the peer closed (False); raises what
        `on_chunk` raised."""
        protocol = self._protocol
        if protocol is None:
            data = await self._reader.read(STREAM_READ_CHUNK)
            if not data:
                return False
            self._on_chunk(data)
            return True
        await protocol.arrived.wait()
        protocol.arrived.clear()
        if protocol.failure is not None:
            raise protocol.failure
        return not protocol.eof
