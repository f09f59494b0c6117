"""The slave's receive path (ha/transport.py's ChunkReceiver reading into ha/codec.py's
TransferBuffer) over real loopback sockets, plain and TLS, on both event loops the code runs on
(asyncio's and uvloop, which brokerd uses): every frame arrives byte for byte in order, the
writer keeps working beside it, a bad header ends the session with the decoder's error and the
peer's close ends it quietly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.support.certs import Pki, make_pki, mutual_tls_contexts
from tests.support.event_loops import EVENT_LOOPS, run_on
from tidemq.ha import transport
from tidemq.ha.codec import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_TRANSFER_BATCH_SIZE,
    BatchReceived,
    HAProtocolError,
    TransferBuffer,
    TransferEvent,
)

TIMEOUT = 30.0
START = 3 << 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def frames() -> list[tuple[int, bytes]]:
    """(offset, body) of a contiguous stream, b"" a heartbeat: full 32 KiB frames, small and
    odd-sized ones, and one of the largest size a slave takes."""
    sizes = [DEFAULT_TRANSFER_BATCH_SIZE] * 100 + [1, 0, 12, 4095] + [DEFAULT_MAX_BODY_SIZE]
    sizes += [DEFAULT_TRANSFER_BATCH_SIZE - 7] * 40 + [0]
    out, offset = [], START
    for size in sizes:
        out.append((offset, os.urandom(size)))
        offset += size
    return out


def wire(stream: list[tuple[int, bytes]]) -> bytes:
    # Built with struct here, not with the codec, so a shared mistake cannot hide.
    return b"".join(struct.pack(">qi", offset, len(body)) + body for offset, body in stream)


class Collect:
    """A ReadSink that keeps a copy of every frame (the slave appends them instead)."""

    def __init__(self) -> None:
        self.frames = TransferBuffer()
        self.got: list[tuple[int, bytes]] = []

    def get_buffer(self) -> memoryview:
        return self.frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        events: list[TransferEvent] = self.frames.received(nbytes)
        for event in events:
            body = bytes(event.body) if isinstance(event, BatchReceived) else b""
            self.got.append((event.offset, body))


async def serve(
    tls: ssl.SSLContext | None, send: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]
) -> tuple[transport.Listening, int]:
    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await send(reader, writer)
        finally:
            writer.close()

    return await transport.listen_tcp(accept, "127.0.0.1", 0, tls=tls)


@contextlib.asynccontextmanager
async def receiving(
    pki: Pki,
    secure: bool,
    send: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
    sink: Collect | None = None,
    wake_on_data: bool = True,
) -> AsyncIterator[tuple[asyncio.StreamWriter, Collect, transport.ChunkReceiver]]:
    """A peer running `send`, and a connection to it whose reads go through a ChunkReceiver
    into a `Collect` (or `sink`); the listener is closed on the way out."""
    server_tls, client_tls = mutual_tls_contexts(pki)
    listening, port = await serve(server_tls if secure else None, send)
    try:
        reader, writer = await transport.connect_tcp(
            f"127.0.0.1:{port}", tls=client_tls if secure else None
        )
        sink = sink or Collect()
        yield (
            writer,
            sink,
            transport.ChunkReceiver(reader, writer, sink, wake_on_data=wake_on_data),
        )
    finally:
        listening.close()
        await listening.wait_closed()


@pytest.mark.parametrize("secure", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize("loop_name", sorted(EVENT_LOOPS))
def test_frames_arrive_byte_for_byte_and_a_bad_header_ends_the_session(
    pki: Pki, loop_name: str, secure: bool
) -> None:
    stream = frames()
    data = wire(stream)
    bad_header = struct.pack(">qi", START, -1)

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Writes of odd sizes: frames cut anywhere, several in one write.
        at = 0
        for size in (5, 70_000, 12, 1 << 20, 3):
            writer.write(data[at : at + size])
            at += size
        writer.write(data[at:])
        await writer.drain()
        # The receiving side answers on the same connection before the bad header comes.
        assert await reader.readexactly(8) == b"received"
        writer.write(bad_header)
        await writer.drain()
        await reader.read()  # until the receiving side closes

    async def main() -> None:
        async with receiving(pki, secure, send) as (writer, sink, receiver):
            # The transport reads into the sink's buffer (no StreamReader in between).
            assert isinstance(writer.transport.get_protocol(), asyncio.BufferedProtocol)
            while len(sink.got) < len(stream):
                assert await asyncio.wait_for(receiver.received(), TIMEOUT)
            assert sink.got == stream
            writer.write(b"received")
            await writer.drain()
            with pytest.raises(HAProtocolError, match="negative body size -1"):
                while await asyncio.wait_for(receiver.received(), TIMEOUT):
                    pass
            assert sink.got == stream
            writer.close()
            await writer.wait_closed()

    run_on(loop_name, main())


@pytest.mark.parametrize("secure", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize("loop_name", sorted(EVENT_LOOPS))
def test_the_peers_close_ends_the_session(pki: Pki, loop_name: str, secure: bool) -> None:
    stream = frames()[:10]

    async def send(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire(stream))
        await writer.drain()

    async def main() -> None:
        async with receiving(pki, secure, send) as (writer, sink, receiver):
            while await asyncio.wait_for(receiver.received(), TIMEOUT):
                pass
            assert sink.got == stream
            assert sink.frames.buffered == 0
            writer.close()

    run_on(loop_name, main())


class Answering(Collect):
    """A sink that answers each read itself, from the read's callback (as the slave acks):
    how many frames it holds so far, 8 bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.writer: asyncio.StreamWriter | None = None

    def buffer_updated(self, nbytes: int) -> None:
        super().buffer_updated(nbytes)
        assert self.writer is not None
        self.writer.write(struct.pack(">q", len(self.got)))


@pytest.mark.parametrize("secure", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize("loop_name", sorted(EVENT_LOOPS))
def test_a_sink_that_answers_each_read_itself_wakes_no_one_until_the_end(
    pki: Pki, loop_name: str, secure: bool
) -> None:
    """wake_on_data=False (the slave's acks): every read is answered by its own callback while
    `received()` stays asleep; it returns only at the peer's close (False)."""
    stream = frames()
    data = wire(stream)
    answered: list[int] = []

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        at = 0
        for size in (5, 70_000, 12, 1 << 20, 3, len(data)):
            writer.write(data[at : at + size])
            at += size
            await writer.drain()
        while not answered or answered[-1] < len(stream):  # the answers, until the last frame
            answered.append(struct.unpack(">q", await reader.readexactly(8))[0])

    async def main() -> None:
        sink = Answering()
        async with receiving(pki, secure, send, sink, wake_on_data=False) as (
            writer,
            _sink,
            receiver,
        ):
            sink.writer = writer
            assert await asyncio.wait_for(receiver.received(), TIMEOUT) is False
            assert sink.got == stream
            assert answered == sorted(answered) and answered[-1] == len(stream)
            writer.close()

    run_on(loop_name, main())
