"""The test fault proxy: pass-through, re-chunking (its plan and what it guarantees), partition and
heal, drops, start and stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support.fault_proxy import (
    MERGE_EVERY,
    PIECE_MAX,
    FaultProxy,
    Mode,
    rechunk_minimum,
    rechunk_plan,
)


class Echo:
    """An echo server on the test's loop; `received` keeps what each connection sent."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.received: list[bytearray] = []
        self.handlers: set[asyncio.Task[object]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        got = bytearray()
        self.received.append(got)
        try:
            while data := await reader.read(65536):
                got += data
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    try:
        yield server
    finally:
        server.server.close()
        await server.server.wait_closed()
        for task in server.handlers:
            task.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)


@pytest.fixture
def proxy(echo: Echo) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo.port, seed=7) as started:
        yield started


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(proxy.host, proxy.port)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_pass_through_round_trip(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    try:
        payload = os.urandom(300_000)
        writer.write(payload)
        await writer.drain()
        assert await reader.readexactly(len(payload)) == payload
    finally:
        await close(writer)
    assert proxy.accepted == 1
    assert proxy.bytes_forwarded == 2 * len(payload)
    assert proxy.splits == 0


def test_rechunk_plan_depends_on_the_seed_alone_and_keeps_its_promises() -> None:
    for stream in ("7-0-up", "7-0-down", "8-3-up"):
        merge_reads = []
        for index in range(40 * MERGE_EVERY):
            size = 2 + (index * 7919) % 70_000
            pieces, merge = rechunk_plan(stream, index, size)
            assert (pieces, merge) == rechunk_plan(stream, index, size)
            assert sum(pieces) == size
            assert len(pieces) >= 2
            assert all(1 <= piece <= PIECE_MAX for piece in pieces)
            if merge:
                merge_reads.append(index)
        # One merge read in every block, never the block's last (a next read is in the block).
        assert [i // MERGE_EVERY for i in merge_reads] == list(range(40))
        assert all(i % MERGE_EVERY != MERGE_EVERY - 1 for i in merge_reads)
    plans = [rechunk_plan(f"{seed}-0-up", 0, 5000) for seed in range(10)]
    assert len({str(plan) for plan in plans}) > 1


async def test_rechunk_splits_and_coalesces_without_changing_bytes(echo: Echo) -> None:
    # No idle release: the client closes its side when it is done, which releases held bytes
    # (as does the echo server's close), so `rechunk_minimum` holds in both directions.
    with FaultProxy("127.0.0.1", echo.port, seed=7, mode=Mode.RECHUNK, max_hold=None) as proxy:
        reader, writer = await connect(proxy)
        try:
            messages = [i.to_bytes(4, "big") + os.urandom(i % 500) for i in range(2000)]
            sent = b"".join(messages)
            # Read while writing: the echo must not wait on a full socket buffer.
            received = asyncio.create_task(reader.readexactly(len(sent)))
            for i, message in enumerate(messages):
                writer.write(message)
                if i % 4 == 0:
                    await asyncio.sleep(0)
            writer.write_eof()
            await writer.drain()
            assert await asyncio.wait_for(received, 20) == sent
        finally:
            await close(writer)
        assert echo.received[0] == sent
        splits, merges = rechunk_minimum(len(sent))
        assert splits > 0 and merges > 0
        assert proxy.splits >= 2 * splits and proxy.merges >= 2 * merges
        assert proxy.idle_releases == 0


async def test_rechunk_holds_a_lone_byte_until_the_mode_changes(echo: Echo) -> None:
    with FaultProxy("127.0.0.1", echo.port, seed=7, mode=Mode.RECHUNK, max_hold=None) as proxy:
        reader, writer = await connect(proxy)
        try:
            writer.write(b"x")
            # Held: a byte is cut only together with the read after it.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(100), 0.3)
            proxy.pass_through()
            assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
        finally:
            await close(writer)


async def test_rechunk_releases_held_bytes_to_a_peer_that_waits_for_the_answer(
    echo: Echo,
) -> None:
    with FaultProxy("127.0.0.1", echo.port, seed=7, mode=Mode.RECHUNK, max_hold=0.05) as proxy:
        reader, writer = await connect(proxy)
        try:
            # One byte in flight at a time: every read is a lone byte, released alone each way.
            for i in range(4):
                writer.write(bytes([i]))
                assert await asyncio.wait_for(reader.readexactly(1), 5) == bytes([i])
            assert proxy.idle_releases == 8
            assert (proxy.splits, proxy.merges) == (0, 0)
            # Requests of several bytes: merge reads among them, whose last pieces are held.
            for i in range(4 * MERGE_EVERY):
                request = os.urandom(20 + i)
                writer.write(request)
                assert await asyncio.wait_for(reader.readexactly(len(request)), 5) == request
            assert proxy.splits > 0
        finally:
            await close(writer)


async def test_partition_holds_bytes_and_connections_until_healed(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    late_writer: asyncio.StreamWriter | None = None
    try:
        writer.write(b"before")
        assert await reader.readexactly(6) == b"before"
        proxy.partition()
        writer.write(b"during")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(100), 0.3)
        # A connection made during the partition is accepted but reaches nothing.
        late_reader, late_writer = await connect(proxy)
        late_writer.write(b"late")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(late_reader.read(100), 0.3)
        assert proxy.open_connections == 2
        proxy.heal()
        assert await asyncio.wait_for(reader.readexactly(6), 5) == b"during"
        assert await asyncio.wait_for(late_reader.readexactly(4), 5) == b"late"
    finally:
        await close(writer)
        if late_writer is not None:
            await close(late_writer)


async def test_partition_after_stops_at_exactly_the_byte_asked(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    try:
        proxy.partition_after(15)  # 10 bytes to the echo server, 5 of the 10 coming back
        writer.write(b"abcdefghij")
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"abcde"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(100), 0.3)
        assert proxy.bytes_forwarded == 15 and proxy.mode is Mode.PARTITION
        proxy.heal()
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"fghij"
    finally:
        await close(writer)


async def test_partition_propagates_a_close_only_after_healing(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    try:
        writer.write(b"x")
        assert await reader.readexactly(1) == b"x"
        proxy.partition()
        writer.write(b"held")
        writer.write_eof()
        await asyncio.sleep(0.2)
        assert proxy.open_connections == 1
        proxy.heal()
        assert await asyncio.wait_for(reader.read(100), 5) == b"held"
        assert await asyncio.wait_for(reader.read(100), 5) == b""
    finally:
        await close(writer)


async def test_drop_aborts_open_connections_and_refuses_new_ones(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    try:
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        assert proxy.drop_connections() == 1
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(100), 5) == b""
    finally:
        await close(writer)
    proxy.set_mode(Mode.DROP)
    reader, writer = await connect(proxy)
    try:
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(100), 5) == b""
    finally:
        await close(writer)
    proxy.pass_through()
    reader, writer = await connect(proxy)
    try:
        writer.write(b"again")
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"again"
    finally:
        await close(writer)


def test_start_and_stop_from_sync_code() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        proxy = FaultProxy("127.0.0.1", listener.getsockname()[1]).start()
        try:
            with socket.create_connection((proxy.host, proxy.port), timeout=5) as client:
                upstream, _ = listener.accept()
                with upstream:
                    client.sendall(b"hello")
                    upstream.settimeout(5)
                    assert upstream.recv(100) == b"hello"
                    proxy.stop()
                    # Stopping closes both sides of every connection.
                    assert upstream.recv(100) == b""
                    client.settimeout(5)
                    with contextlib.suppress(ConnectionError):
                        assert client.recv(100) == b""
        finally:
            proxy.stop()
        with pytest.raises(OSError), socket.create_connection((proxy.host, proxy.port), 1):
            pass
        proxy.stop()  # idempotent
