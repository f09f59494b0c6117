"""How the HA services obtain their streams: TCP by default, anything that yields asyncio streams
when injected (the unit tests wire master and slave to each other in memory).

- `Listen(accept, host, port)` starts accepting: every connection is handed to `accept` as a
  (reader, writer) pair. It returns the `Listening` handle (closed by the service's stop) and the
  port actually bound (port 0 asks for a free one).
- `Connect(address)` opens one connection to a master's "host:port" HA address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

# The slave's stream buffers up to twice this before it stops reading the socket: a catch-up
# receives megabytes per event-loop turn (asyncio's 64 KiB default allows 128 KiB a turn).
SLAVE_READ_LIMIT = 8 * 1024 * 1024
# What a master's connection may hold unsent before its writer waits (drain): a few transfer
# spans, so that the socket always has the next one while the service reads the file.
MASTER_WRITE_BUFFER = 16 * 1024 * 1024

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Accept = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Listening(Protocol):
    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


Listen = Callable[[Accept, str, int], Awaitable[tuple[Listening, int]]]
Connect = Callable[[str], Awaitable[Streams]]


async def listen_tcp(accept: Accept, host: str, port: int) -> tuple[Listening, int]:
    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.set_write_buffer_limits(MASTER_WRITE_BUFFER)
        await accept(reader, writer)

    server = await asyncio.start_server(accepted, host, port, reuse_address=True)
    sockets = server.sockets
    return server, sockets[0].getsockname()[1] if sockets else port


async def connect_tcp(address: str) -> Streams:
    host, _sep, port = address.rpartition(":")
    return await asyncio.open_connection(host.strip("[]"), int(port), limit=SLAVE_READ_LIMIT)
