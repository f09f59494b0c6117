"""Hostile connections that announce a large frame and send it slowly (issue 30 item 4).

`trickle(address, connections, ...)` opens `connections` TCP connections (`open_at_once` at a
time), and on each writes a frame prefix announcing `announce` bytes (the length field, then a
JSON type word with a header length of 0), then `chunk` bytes of it every `interval` seconds
until `send` bytes went out; it keeps every connection open until `hold` seconds after the
start. A connection the peer closes (EOF, reset, a write refused) is counted with the time it
closed; one refused before its prefix went out counts as refused. The frame never completes, so
the peer holds what it received until it gives up on it.

Run as `python -m tests.support.trickle HOST:PORT [options]` it prints its `TrickleResult` as one
JSON line (the benchmark runs it in a process of its own, apart from the client it measures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import struct
import time
from dataclasses import asdict, dataclass, field

_PREFIX = struct.Struct(">iI")


@dataclass
class TrickleResult:
    opened: int = 0
    refused: int = 0  # closed or reset before the prefix was written
    closed_by_peer: int = 0
    bytes_sent: int = 0
    close_seconds: list[float] = field(default_factory=list)  # after the start, per close

    @property
    def still_open(self) -> int:
        return self.opened - self.closed_by_peer


def raise_fd_limit(wanted: int) -> None:
    """Raise the open-file limit of this process (children inherit it) to `wanted`, at most
    to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def _one(
    host: str,
    port: int,
    gate: asyncio.Semaphore,
    result: TrickleResult,
    started: float,
    announce: int,
    send: int,
    chunk: int,
    interval: float,
    hold: float,
) -> None:
    try:
        async with gate:  # a backlog's worth of connects at a time: no SYN retransmits
            reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        result.refused += 1
        return
    result.opened += 1
    closed = asyncio.create_task(reader.read(1))  # b"" or an error: the peer closed it
    try:
        writer.write(_PREFIX.pack(announce, 0))
        sent = 0
        piece = bytes(chunk)
        while sent < send and not closed.done():
            size = min(chunk, send - sent)
            writer.write(piece[:size])
            await writer.drain()
            sent += size
            result.bytes_sent += size
            await asyncio.wait([closed], timeout=interval)
        remaining = hold - (time.monotonic() - started)
        if not closed.done() and remaining > 0:
            await asyncio.wait([closed], timeout=remaining)
    except OSError:
        pass  # a write to a connection the peer closed
    if closed.done() or writer.transport.is_closing():
        result.closed_by_peer += 1
        result.close_seconds.append(time.monotonic() - started)
    closed.cancel()
    writer.transport.abort()


async def trickle(
    address: str,
    connections: int,
    *,
    announce: int = 15 * 1024 * 1024,
    send: int = 1024 * 1024,
    chunk: int = 64 * 1024,
    interval: float = 0.2,
    hold: float = 10.0,
    open_at_once: int = 100,
) -> TrickleResult:
    host, port = address.rsplit(":", 1)
    result = TrickleResult()
    started = time.monotonic()
    gate = asyncio.Semaphore(open_at_once)
    await asyncio.gather(
        *(
            _one(host, int(port), gate, result, started, announce, send, chunk, interval, hold)
            for _ in range(connections)
        )
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--announce", type=int, default=15 * 1024 * 1024)
    parser.add_argument("--send", type=int, default=1024 * 1024)
    parser.add_argument("--chunk", type=int, default=64 * 1024)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--hold", type=float, default=10.0)
    args = parser.parse_args()
    raise_fd_limit(args.connections + 256)
    result = asyncio.run(
        trickle(
            args.address,
            args.connections,
            announce=args.announce,
            send=args.send,
            chunk=args.chunk,
            interval=args.interval,
            hold=args.hold,
        )
    )
    print(json.dumps({**asdict(result), "still_open": result.still_open}), flush=True)


if __name__ == "__main__":
    main()
