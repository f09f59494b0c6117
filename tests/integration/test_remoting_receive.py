"""The client's buffered receive path (BufferedRemotingConnection reading into
client/transport/receive.py's FrameReceiver) over real loopback sockets, plain and TLS, on both
event loops the clients run on: responses of every size arrive byte for byte while many are in
flight, a large body the caller keeps stays intact while later ones arrive, and a malformed
frame closes that connection, failing its calls, with a log line."""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.support.certs import Pki, make_pki, mutual_tls_contexts
from tests.support.event_loops import EVENT_LOOPS, run_on
from tidemq.client.errors import ConnectError
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.connection import BufferedRemotingConnection, RemotingConnection
from tidemq.client.transport.receive import RECEIVE_BUFFER

TIMEOUT = 30.0
SIZES = [0, 100, 65_000, 70_000, 300_000, 1 << 20, 5 << 20, 123]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def body_of(size: int, seed: int) -> bytes:
    return random.Random(seed * 7919 + size).randbytes(size)


async def answer(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
    size, seed = int(request.ext_fields["size"]), int(request.ext_fields["seed"])
    response = RemotingCommand.response_to(request, 0)
    response.body = body_of(size, seed)
    return response


@asynccontextmanager
async def broker_like(tls: ssl.SSLContext | None) -> AsyncIterator[str]:
    """A server of the broker's connection class answering with the body asked for."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RemotingConnection(answer), "127.0.0.1", 0, ssl=tls)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


def tls_pair(pki: Pki, tls: bool) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    return mutual_tls_contexts(pki) if tls else (None, None)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("loop_name", list(EVENT_LOOPS))
def test_responses_of_every_size_arrive_byte_for_byte(pki: Pki, loop_name: str, tls: bool) -> None:
    server_tls, client_tls = tls_pair(pki, tls)

    async def main() -> None:
        async with broker_like(server_tls) as address:
            client = RemotingClient(tls=client_tls)
            try:

                async def call(size: int, seed: int) -> RemotingCommand:
                    request = RemotingCommand.request(11, {"size": str(size), "seed": str(seed)})
                    return await client.invoke(address, request, TIMEOUT)

                connection = await client.connection(address)
                assert isinstance(connection, BufferedRemotingConnection)
                kept = await call(3 << 20, 99)  # kept while everything below arrives
                for round_ in range(3):
                    calls = [(size, round_ * 100 + i) for i, size in enumerate(SIZES * 2)]
                    random.Random(round_).shuffle(calls)
                    responses = await asyncio.gather(*(call(s, seed) for s, seed in calls))
                    for (size, seed), got in zip(calls, responses, strict=True):
                        assert bytes(got.body) == body_of(size, seed), (size, seed)
                        if size > RECEIVE_BUFFER:  # cannot have come whole in one read
                            assert isinstance(got.body, memoryview)
                    del responses  # their buffers are free for the next round
                assert bytes(kept.body) == body_of(3 << 20, 99)
            finally:
                await client.close()

    run_on(loop_name, asyncio.wait_for(main(), TIMEOUT * 2))


@pytest.mark.parametrize("loop_name", list(EVENT_LOOPS))
def test_a_malformed_frame_closes_the_connection_and_fails_its_calls(
    loop_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        served = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read(100)
                # the start of a large frame, then a header length beyond its frame length
                writer.write(b"\x00\x10\x00\x00\x00\x20\x00\x00")
                await reader.read()  # until the client closes
                writer.close()
                await writer.wait_closed()
            finally:
                served.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        client = RemotingClient()
        try:
            with pytest.raises(ConnectError):
                await client.invoke(address, RemotingCommand.request(11, {}), TIMEOUT)
            await served.wait()
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger="tidemq.client.transport.connection"):
        run_on(loop_name, asyncio.wait_for(main(), TIMEOUT))
    assert "malformed frame: header length" in caplog.text
