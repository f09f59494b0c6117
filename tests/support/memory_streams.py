"""asyncio streams wired to each other in memory: HA master and slave without sockets.

The model is h11's `ConnectionPair` (two endpoints that talk to each other directly), made to
speak asyncio's `StreamReader`/`StreamWriter` so that HAService and HAClient run their real
code over it. What a socket pair would do, this does too:

- bytes written on one end are read, in order, from the other; `close()` on one end is EOF for
  the other, and `wait_closed()` returns once the end is closed;
- backpressure: when the reading end holds more than twice its `limit` unread (asyncio's own
  rule for pausing a transport), the writing end's `drain()` blocks until the reader catches up;
  `write_blocked(writer)` tells whether that is happening now.

`MemoryNetwork` plays the network: `listen` (an `ha.transport.Listen`) registers a handler at
"host:port" (port 0 takes the next free number), `connect` (an `ha.transport.Connect`) makes a
pair, hands one end to the handler in a new task and returns the other.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tidemq.ha.transport import Accept, Listening, Streams

DEFAULT_LIMIT = 64 * 1024


class MemoryTransport(asyncio.Transport):
    """The writing half of one end: what it is given lands in the peer's reader."""

    def __init__(self, protocol: asyncio.StreamReaderProtocol, name: str, peer_name: str) -> None:
        super().__init__({"sockname": _split(name), "peername": _split(peer_name)})
        self.protocol = protocol
        self.peer: MemoryTransport | None = None
        self.closing = False
        self.write_blocked = False  # the peer's reader asked us to stop: drain() waits

    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self.peer
        if self.closing or peer is None or peer.closing:
            return  # a socket whose peer is gone drops the data too (then resets)
        peer.protocol.data_received(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    # The peer's reader calls these on its own transport, i.e. on the end that must stop writing.
    def pause_reading(self) -> None:
        if self.peer is not None and not self.peer.write_blocked:
            self.peer.write_blocked = True
            self.peer.protocol.pause_writing()

    def resume_reading(self) -> None:
        if self.peer is not None and self.peer.write_blocked:
            self.peer.write_blocked = False
            self.peer.protocol.resume_writing()

    def is_reading(self) -> bool:
        return self.peer is None or not self.peer.write_blocked

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        loop = asyncio.get_running_loop()
        peer = self.peer
        if peer is not None and not peer.closing:
            loop.call_soon(peer.protocol.eof_received)
            if peer.write_blocked:  # nobody reads its bytes any more: they are dropped
                peer.write_blocked = False
                peer.protocol.resume_writing()
        loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False


def _split(name: str) -> tuple[str, int]:
    host, _sep, port = name.rpartition(":")
    return host, int(port)


def _end(
    name: str, peer_name: str, limit: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, MemoryTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport = MemoryTransport(protocol, name, peer_name)
    protocol.connection_made(transport)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop), transport


def stream_pair(
    name_a: str = "memory-a:1",
    name_b: str = "memory-b:1",
    *,
    limit_a: int = DEFAULT_LIMIT,
    limit_b: int = DEFAULT_LIMIT,
) -> tuple[Streams, Streams]:
    """Two connected ends, (reader, writer) each; a `limit` sets that reader's pause threshold."""
    reader_a, writer_a, transport_a = _end(name_a, name_b, limit_a)
    reader_b, writer_b, transport_b = _end(name_b, name_a, limit_b)
    transport_a.peer, transport_b.peer = transport_b, transport_a
    return (reader_a, writer_a), (reader_b, writer_b)


def write_blocked(writer: asyncio.StreamWriter) -> bool:
    """Whether this end's peer has stopped reading long enough that `drain()` waits."""
    transport = writer.transport
    assert isinstance(transport, MemoryTransport), transport
    return transport.write_blocked


class MemoryListening:
    def __init__(self, network: MemoryNetwork, address: str) -> None:
        self.network = network
        self.address = address

    def close(self) -> None:
        self.network.listeners.pop(self.address, None)

    async def wait_closed(self) -> None:
        return None


class MemoryNetwork:
    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.listeners: dict[str, Accept] = {}
        self.accepted = 0
        self._ports = itertools.count(40000)
        self._handlers: set[asyncio.Task[None]] = set()

    async def listen(self, accept: Accept, host: str, port: int) -> tuple[Listening, int]:
        port = port or next(self._ports)
        address = f"{host}:{port}"
        if address in self.listeners:
            raise OSError(f"address already in use: {address}")
        self.listeners[address] = accept
        return MemoryListening(self, address), port

    async def connect(self, address: str) -> Streams:
        return self.connect_now(address)

    def connect_now(self, address: str, *, limit: int | None = None) -> Streams:
        """`connect`, done at once; `limit` (default: the network's) sets the client's reader."""
        accept = self.listeners.get(address)
        if accept is None:
            raise ConnectionRefusedError(f"nothing listens at {address}")
        client_name = f"memory-client:{next(self._ports)}"
        (client_reader, client_writer), (server_reader, server_writer) = stream_pair(
            client_name, address, limit_a=limit or self.limit, limit_b=self.limit
        )
        self.accepted += 1
        handler = asyncio.create_task(accept(server_reader, server_writer))
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)
        return client_reader, client_writer
