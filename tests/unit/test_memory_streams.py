"""The in-memory stream pair behaves like a socket pair where the HA services can tell."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.conditions import eventually
from tests.support.memory_streams import MemoryNetwork, stream_pair, write_blocked


async def test_bytes_arrive_in_order_and_close_is_eof_for_the_peer() -> None:
    (reader_a, writer_a), (reader_b, writer_b) = stream_pair("a:1", "b:2")
    assert writer_a.get_extra_info("peername") == ("b", 2)
    writer_a.write(b"one ")
    writer_a.writelines([b"two ", b"three"])
    await writer_a.drain()
    assert await reader_b.readexactly(13) == b"one two three"
    writer_b.write(b"back")
    assert await reader_a.readexactly(4) == b"back"

    writer_a.close()
    await writer_a.wait_closed()
    assert await reader_b.read(100) == b""  # EOF
    writer_b.write(b"to nobody")  # dropped, as a socket whose peer left would
    await writer_b.drain()
    writer_b.close()
    await writer_b.wait_closed()


async def test_a_reader_that_does_not_read_blocks_the_writers_drain() -> None:
    (reader_a, writer_a), (_reader_b, writer_b) = stream_pair(limit_a=1000)
    writer_b.write(b"x" * 1500)
    await writer_b.drain()  # under 2 * limit: no wait
    assert not write_blocked(writer_b)
    writer_b.write(b"x" * 1000)
    assert write_blocked(writer_b)
    drain = asyncio.create_task(writer_b.drain())
    await asyncio.sleep(0.05)  # nothing to wait for: the drain must still be waiting
    assert not drain.done()

    assert len(await reader_a.read(4096)) == 2500  # the reader catches up
    await asyncio.wait_for(drain, 1)
    assert not write_blocked(writer_b)
    writer_a.close()
    writer_b.close()


async def test_a_closing_reader_releases_a_blocked_writer() -> None:
    (_reader_a, writer_a), (_reader_b, writer_b) = stream_pair(limit_a=10)
    writer_b.write(b"x" * 100)
    drain = asyncio.create_task(writer_b.drain())
    await eventually(lambda: write_blocked(writer_b), "the writer to block")
    writer_a.close()
    await asyncio.wait_for(drain, 1)
    writer_b.close()


async def test_network_accepts_at_the_listened_address_and_refuses_elsewhere() -> None:
    network = MemoryNetwork()
    accepted: list[bytes] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(await reader.readexactly(5))
        writer.write(b"hello back")
        writer.close()

    listening, port = await network.listen(accept, "127.0.0.1", 0)
    assert port > 0
    with pytest.raises(OSError, match="in use"):
        await network.listen(accept, "127.0.0.1", port)
    reader, writer = await network.connect(f"127.0.0.1:{port}")
    writer.write(b"hello")
    assert await reader.read() == b"hello back"
    assert accepted == [b"hello"]
    assert network.accepted == 1

    listening.close()
    await listening.wait_closed()
    with pytest.raises(ConnectionRefusedError):
        await network.connect(f"127.0.0.1:{port}")
    writer.close()
