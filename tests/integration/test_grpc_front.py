"""The gRPC port's front door (broker/proxy/front.py) over real sockets, in front of an echo
server standing for the internal gRPC port (the relay copies bytes, whatever they mean):
plaintext and TLS on one permissive port, the client's address behind a relay, the bound on
connections at once. gRPC itself through it: tests/integration/test_grpc_tls.py and, with the
official client under brokerd, test_rocketmq5_security.py."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.certs import Pki, make_pki
from tests.support.conditions import eventually
from tidemq.broker.proxy.front import GrpcFront
from tidemq.broker.remoting.tls import TlsMode, TlsServerSettings

pytestmark = pytest.mark.asyncio


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


async def started_front(pki: Pki, internal: int, max_relays: int = 100) -> GrpcFront:
    tls = TlsServerSettings(TlsMode.permissive, str(pki.server.cert), str(pki.server.key))
    front = GrpcFront("127.0.0.1", 0, internal, tls, "test-front", max_relays=max_relays)
    await front.start()
    return front


def client_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.check_hostname = False
    context.set_alpn_protocols(["h2"])
    return context


async def round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), 10)


async def test_plaintext_and_tls_are_relayed_on_one_port(pki: Pki, echo_port: int) -> None:
    front = await started_front(pki, echo_port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        big = bytes(range(256)) * 4096  # 1 MiB: past the buffers' high-water marks
        assert await round_trip(reader, writer, b"PRI * plain") == b"PRI * plain"
        assert await round_trip(reader, writer, big) == big
        writer.close()
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", front.port, ssl=client_context(pki)
        )
        assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
        assert await round_trip(reader, writer, big) == big
        writer.close()
    finally:
        await front.stop()


async def test_the_client_behind_a_relay_is_known_by_its_own_address(
    pki: Pki, echo_port: int
) -> None:
    front = await started_front(pki, echo_port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        await round_trip(reader, writer, b"x")  # relayed: the internal side is connected
        host, port = writer.get_extra_info("sockname")[:2]
        [relay_port] = front.clients
        assert front.client_of(f"127.0.0.1:{relay_port}") == f"{host}:{port}"
        assert front.client_of(f"127.0.0.1:{port}") is None  # not a relay: refused upstream
        assert front.client_of("10.0.0.1:1") is None
        writer.close()
        await eventually(lambda: not front.clients, "the relay forgotten", 10)
    finally:
        await front.stop()


async def test_connections_past_the_bound_are_closed_unread(
    pki: Pki, echo_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    front = await started_front(pki, echo_port, max_relays=2)
    try:
        held = [await asyncio.open_connection("127.0.0.1", front.port) for _ in range(2)]
        for reader, writer in held:
            await round_trip(reader, writer, b"held")
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(b"one too many")
        assert await asyncio.wait_for(reader.read(100), 10) == b""  # closed, nothing echoed
        writer.close()
        assert "refused: 2 connections already" in caplog.text
        held[0][1].close()
        await eventually(lambda: len(front.relays) < 2, "a relay gone", 10)
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        assert await round_trip(reader, writer, b"room again") == b"room again"
        writer.close()
        held[1][1].close()
    finally:
        await front.stop()
