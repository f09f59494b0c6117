"""TLS on remoting ports: a remoting server in this process for each mode and bad peer, then
name server and broker processes in `enforcing` and `permissive` with our client, mqadmin and
the RocketMQ C++ client (plaintext on the permissive port).

Certificates are made by the test (tests/support/certs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.certs import Pki, make_pki
from tests.support.conditions import eventually
from tests.support.cpp_peers import SEND_OK, run_peer
from tests.support.processes import Daemon, DaemonError, ProcessGroup
from tidemq.broker.remoting.server import RemotingServer
from tidemq.broker.remoting.tls import ClientAuth, TlsMode, TlsServerSettings
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.errors import ConnectError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.connection import RemotingConnection
from tidemq.client.transport.tls import TlsClientSettings, TlsSetupError

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def echo(connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
    del connection
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, "pong")


@contextlib.asynccontextmanager
async def server(
    pki: Pki,
    mode: TlsMode,
    client_auth: ClientAuth = ClientAuth.none,
    cert: tuple[Path, Path] | None = None,
) -> AsyncIterator[RemotingServer]:
    cert_path, key_path = cert or (pki.server.cert, pki.server.key)
    tls = TlsServerSettings(mode, str(cert_path), str(key_path), "", str(pki.ca), client_auth)
    remoting = RemotingServer("127.0.0.1", 0, tls=tls, name="tls-test")
    remoting.register(RequestCode.GET_BROKER_RUNTIME_INFO, echo)
    await remoting.start()
    try:
        yield remoting
    finally:
        await remoting.stop()


async def ping(port: int, tls: TlsClientSettings | None) -> str:
    client = RemotingClient(tls=tls.context() if tls is not None else None, connect_timeout=3)
    try:
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        response = await client.invoke(f"127.0.0.1:{port}", request, 3)
        return response.remark or ""
    finally:
        await client.close()


def trusting(pki: Pki, **more: str) -> TlsClientSettings:
    return TlsClientSettings(trust_cert_path=str(pki.ca), **more)  # type: ignore[arg-type]


async def raw_exchange(port: int, data: bytes) -> bytes:
    """What the port answers to `data` before it closes (b"" when it just closes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


# --- one port, every mode -------------------------------------------------------------------


async def test_enforcing_takes_tls_and_refuses_plaintext(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    async with server(pki, TlsMode.enforcing) as remoting:
        assert await ping(remoting.port, trusting(pki)) == "pong"
        with caplog.at_level(logging.WARNING), pytest.raises((ConnectError, TimeoutError)):
            await ping(remoting.port, None)
        await eventually(lambda: "plaintext from 127.0.0.1" in caplog.text, "the refusal log")
        # A handshake of garbage: refused, logged, and the port goes on serving.
        answer = await raw_exchange(remoting.port, b"\x16\x03\x01\x00\x05garbage-garbage")
        assert b"pong" not in answer  # closed (after an alert at most), never served
        await eventually(lambda: "TLS handshake with 127.0.0.1" in caplog.text, "the handshake log")
        assert await ping(remoting.port, trusting(pki)) == "pong"


async def test_permissive_takes_both(pki: Pki) -> None:
    async with server(pki, TlsMode.permissive) as remoting:
        assert await ping(remoting.port, trusting(pki)) == "pong"
        assert await ping(remoting.port, None) == "pong"


async def test_the_client_verifies_the_server_by_default(pki: Pki) -> None:
    async with server(pki, TlsMode.enforcing) as remoting:
        # The system's CAs do not know the test CA.
        with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await ping(remoting.port, TlsClientSettings())
        assert await ping(remoting.port, TlsClientSettings(verify=False)) == "pong"
    async with server(pki, TlsMode.enforcing, cert=(pki.expired.cert, pki.expired.key)) as remoting:
        with pytest.raises(ConnectError, match="expired"):
            await ping(remoting.port, trusting(pki))
    async with server(
        pki, TlsMode.enforcing, cert=(pki.stranger.cert, pki.stranger.key)
    ) as remoting:
        with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await ping(remoting.port, trusting(pki))


async def test_client_authentication(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    client = trusting(pki, cert_path=str(pki.client.cert), key_path=str(pki.client.key))
    stranger = trusting(pki, cert_path=str(pki.stranger.cert), key_path=str(pki.stranger.key))
    expired = trusting(pki, cert_path=str(pki.expired.cert), key_path=str(pki.expired.key))
    async with server(pki, TlsMode.enforcing, ClientAuth.require) as remoting:
        assert await ping(remoting.port, client) == "pong"
        for refused in (trusting(pki), stranger, expired):
            with caplog.at_level(logging.WARNING), pytest.raises((ConnectError, TimeoutError)):
                await ping(remoting.port, refused)
        await eventually(lambda: "TLS handshake with" in caplog.text, "the refusal log")
    async with server(pki, TlsMode.enforcing, ClientAuth.optional) as remoting:
        assert await ping(remoting.port, trusting(pki)) == "pong"
        assert await ping(remoting.port, client) == "pong"
        with pytest.raises((ConnectError, TimeoutError)):
            await ping(remoting.port, stranger)


async def test_bad_files_name_their_key(pki: Pki, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(TlsSetupError, match=r"tls\.server"):
        TlsServerSettings(TlsMode.enforcing, missing, missing).context()
    with pytest.raises(TlsSetupError, match=r"tls\.server\.certPath"):
        TlsServerSettings(TlsMode.enforcing).context()
    with pytest.raises(TlsSetupError, match=r"tls\.client\.trustCertPath"):
        TlsClientSettings(trust_cert_path=missing).context()
    # A certificate with another certificate's key.
    with pytest.raises(TlsSetupError, match=r"tls\.server"):
        TlsServerSettings(TlsMode.enforcing, str(pki.server.cert), str(pki.client.key)).context()


# --- daemons --------------------------------------------------------------------------------


def tls_overrides(pki: Pki, mode: str) -> tuple[str, ...]:
    return (
        f"tls.server.mode={mode}",
        f"tls.server.certPath={pki.server.cert}",
        f"tls.server.keyPath={pki.server.key}",
        "tls.enable=true",
        f"tls.client.trustCertPath={pki.ca}",
    )


def start_daemons(
    processes: ProcessGroup, tmp_path: Path, pki: Pki, mode: str
) -> tuple[Daemon, Daemon]:
    namesrv = processes.namesrvd(*tls_overrides(pki, mode), name="namesrvd-tls")
    broker = processes.brokerd(
        namesrv.address, tmp_path / "store", *tls_overrides(pki, mode), name="brokerd-tls"
    )
    return namesrv, broker


def mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("mqadmin")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def send_and_consume(namesrv: Daemon, tls: TlsClientSettings | None, topic: str) -> None:
    producer = AsyncProducer("tls-producer", namesrv.address, tls=tls)
    await producer.start()
    try:
        await producer.send(Message(topic, b"over tls"))
    finally:
        await producer.shutdown()
    consumer = AsyncPullConsumer(
        "tls-group",
        namesrv.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        tls=tls,
    )
    consumer.subscribe(topic)
    await consumer.start()
    try:
        got: list[bytes] = []

        async def polled() -> bool:
            got.extend(m.body for m in await consumer.poll(0.2))
            return bool(got)

        await eventually(polled, "the message polled over TLS", 20)
        assert got == [b"over tls"]
    finally:
        await consumer.shutdown()


async def test_enforcing_daemons_serve_our_client_and_mqadmin_over_tls(
    processes: ProcessGroup, tmp_path: Path, pki: Pki
) -> None:
    namesrv, broker = await asyncio.to_thread(start_daemons, processes, tmp_path, pki, "enforcing")
    tls = trusting(pki)
    base = ["-n", namesrv.address, "--tls", "--tls-trust", str(pki.ca)]
    made = await asyncio.to_thread(
        mqadmin, "updateTopic", *base, "-b", broker.address, "-t", "secure-topic"
    )
    assert made.returncode == 0, made.stderr
    listed = await asyncio.to_thread(mqadmin, "clusterList", *base)
    assert listed.returncode == 0 and broker.address in listed.stdout, listed.stderr
    await send_and_consume(namesrv, tls, "secure-topic")
    # Plaintext is refused by both daemons.
    plain = await asyncio.to_thread(mqadmin, "clusterList", "-n", namesrv.address)
    assert plain.returncode == 1
    with pytest.raises((ConnectError, TimeoutError)):
        await ping(broker.port, None)
    assert "plaintext from 127.0.0.1" in broker.log_text()
    assert "plaintext from 127.0.0.1" in namesrv.log_text()


async def test_permissive_daemons_serve_tls_and_the_cpp_client_in_plaintext(
    processes: ProcessGroup, tmp_path: Path, pki: Pki
) -> None:
    pytest.importorskip(
        "rocketmq.client",
        reason="the RocketMQ C++ client (rocketmq==0.4.4, x86_64 Linux only) cannot be imported",
        exc_type=ImportError,
    )
    namesrv, _broker = await asyncio.to_thread(
        start_daemons, processes, tmp_path, pki, "permissive"
    )
    await send_and_consume(namesrv, trusting(pki), "mixed-topic")
    await send_and_consume(namesrv, None, "plain-topic")
    spec = {
        "op": "produce",
        "namesrv": namesrv.address,
        "group": "PG-tls",
        "topic": "mixed-topic",
        "messages": [{"body": "cpp in plaintext"}],
    }
    events = await run_peer(tmp_path, spec)
    assert [e["status"] for e in events if e["event"] == "sent"] == [SEND_OK]


async def test_bad_tls_settings_stop_start_up(processes: ProcessGroup, pki: Pki) -> None:
    for overrides, reason in (
        (
            ["tls.server.mode=enforcing", f"tls.server.certPath={pki.server.cert}"],
            r"tls\.server\.keyPath: required",
        ),
        (["tls.server.mode=sometimes"], r"tls\.server\.mode"),
        (
            [
                "tls.server.mode=enforcing",
                f"tls.server.certPath={pki.server.cert}",
                f"tls.server.keyPath={pki.client.key}",
            ],
            r"tls\.server: cannot load",
        ),
    ):
        with pytest.raises(DaemonError, match=reason):
            await asyncio.to_thread(processes.namesrvd, *overrides)
