"""The HA port's guarded listener on both event loops the code runs on (asyncio's and uvloop, which
brokerd uses), with real sockets on loopback: a TLS slave whose ClientHello arrives with its
connect is admitted at once (it used to wait out the handshake timeout under uvloop, which reads a
new connection before a later start_tls could see its first bytes); a plaintext stranger and an
address outside the allow-list get nothing; closing the listener ends handshakes in progress."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import pytest

from tests.support.certs import Pki, make_pki, mutual_tls_contexts
from tests.support.event_loops import EVENT_LOOPS, run_on
from tidemq.ha import transport

# Well under the listener's handshake timeout: an admission that had to wait it out fails here.
PROMPT = transport.TLS_HANDSHAKE_TIMEOUT / 2


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"admitted")
    await writer.drain()
    writer.close()


async def read_all(port: int, **connect: Any) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, **connect)
    try:
        return await reader.read()
    finally:
        writer.close()


@pytest.mark.parametrize("loop_name", sorted(EVENT_LOOPS))
def test_tls_slaves_are_admitted_without_waiting(pki: Pki, loop_name: str) -> None:
    server_tls, client_tls = mutual_tls_contexts(pki)

    async def main() -> None:
        listening, port = await transport.listen_tcp(greet, "127.0.0.1", 0, tls=server_tls)
        try:
            for _ in range(5):
                got = await asyncio.wait_for(
                    read_all(port, ssl=client_tls, server_hostname="127.0.0.1"), PROMPT
                )
                assert got == b"admitted"
            # A ClientHello already in the socket when the master accepts it.
            raw = socket.create_connection(("127.0.0.1", port))
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = client_tls.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
            with pytest.raises(ssl.SSLWantReadError):
                tls.do_handshake()
            raw.sendall(outgoing.read())
            raw.setblocking(False)
            await asyncio.wait_for(_finish_handshake(raw, tls, incoming, outgoing), PROMPT)
            raw.close()
        finally:
            listening.close()
            await listening.wait_closed()

    run_on(loop_name, main())


async def _finish_handshake(
    raw: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        data = await loop.sock_recv(raw, 65536)
        assert data, "the master closed during the handshake"
        incoming.write(data)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            await loop.sock_sendall(raw, outgoing.read())
            continue
        await loop.sock_sendall(raw, outgoing.read())
        return


@pytest.mark.parametrize("loop_name", sorted(EVENT_LOOPS))
def test_strangers_get_nothing(pki: Pki, loop_name: str, caplog: pytest.LogCaptureFixture) -> None:
    server_tls, _client_tls = mutual_tls_contexts(pki)

    async def main() -> None:
        listed, listed_port = await transport.listen_tcp(
            greet, "127.0.0.1", 0, allow=lambda ip: ip == "127.0.0.1", tls=server_tls
        )
        only_listed, only_listed_port = await transport.listen_tcp(
            greet, "127.0.0.1", 0, allow=lambda ip: ip == "127.0.0.1"
        )
        try:
            # Plaintext on the TLS port: the handshake fails on its bytes, not on the timeout.
            reader, writer = await asyncio.open_connection("127.0.0.1", listed_port)
            writer.write(b"\0" * 8)
            assert await asyncio.wait_for(reader.read(), PROMPT) == b""
            writer.close()
            # An unlisted address: closed before a byte, with and without TLS.
            for port in (listed_port, only_listed_port):
                got = await asyncio.wait_for(read_all(port, local_addr=("127.0.0.2", 0)), PROMPT)
                assert got == b""
            # A listed one without TLS is admitted.
            assert await asyncio.wait_for(read_all(only_listed_port), PROMPT) == b"admitted"
            # A peer that never completes its handshake is ended by the listener's close.
            _r, silent = await asyncio.open_connection("127.0.0.1", listed_port)
            await asyncio.sleep(0)
        finally:
            listed.close()
            only_listed.close()
            await asyncio.wait_for(listed.wait_closed(), PROMPT)
            await only_listed.wait_closed()
        silent.close()

    with caplog.at_level("WARNING", logger="tidemq.ha.transport"):
        run_on(loop_name, main())
    assert "TLS handshake with 127.0.0.1" in caplog.text
    assert caplog.text.count("connection from 127.0.0.2") == 2
