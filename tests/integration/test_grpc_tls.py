"""TLS on the gRPC port (broker/proxy/server.py `server_credentials`) with the remoting port's
settings, through an in-process Broker over real channels: a key with a password, client
certificates required, and a file that does not load named in one line; permissive mode and
optional client certificates through the front door (broker/proxy/front.py). The official
client over TLS against brokerd is tests/integration/test_rocketmq5_security.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from grpc import aio

from tests.support.certs import Pki, make_pki
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig, RemotingConfig
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import Code, Resource
from tidemq.broker.proxy.server import server_credentials
from tidemq.broker.remoting.tls import ClientAuth, TlsMode, TlsServerSettings
from tidemq.client.transport.tls import TlsSetupError
from tidemq.ha.config import HAConfig
from tidemq.store.config import StoreConfig

SERVICE = "/apache.rocketmq.v2.MessagingService/"


def encrypted_key(pki: Pki, folder: Path) -> Path:
    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), None)
    path = folder / "server-encrypted.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"key-pass"),
        )
    )
    return path


async def heartbeat_on(channel: aio.Channel, client_id: str = "c") -> int:
    call = channel.unary_unary(
        SERVICE + "Heartbeat",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.HeartbeatResponse.FromString,
    )
    request = pb.HeartbeatRequest(group=Resource(name="g"))
    answer = await call(request, metadata=(("x-mq-client-id", client_id),), timeout=10)
    return int(answer.status.code)


async def heartbeat(port: int, credentials: grpc.ChannelCredentials | None) -> int:
    """A heartbeat's status code over TLS with `credentials`, or plaintext with None."""
    target = f"127.0.0.1:{port}"
    if credentials is None:
        async with aio.insecure_channel(target) as channel:
            return await heartbeat_on(channel)
    async with aio.secure_channel(target, credentials) as channel:
        return await heartbeat_on(channel)


def make_broker(tmp_path: Path, tls: TlsServerSettings) -> Broker:
    """A broker whose remoting TLS keys are `tls`'s: its gRPC port serves them too."""
    return Broker(
        BrokerConfig(broker_name="tls-a", listen_port=0, broker_ip1="127.0.0.1"),
        StoreConfig(
            store_path_root_dir=str(tmp_path / "store"),
            mapped_file_size_commit_log=4 * 1024 * 1024,
            mapped_file_size_consume_queue=6000,
            max_hash_slot_num=5000,
            max_index_num=20000,
        ),
        RemotingConfig(
            bind_address="127.0.0.1",
            tls_server_mode=tls.mode,
            tls_server_cert_path=tls.cert_path,
            tls_server_key_path=tls.key_path,
            tls_server_key_password=tls.key_password,
            tls_server_trust_cert_path=tls.trust_cert_path,
            tls_server_need_client_auth=tls.client_auth,
        ),
        HAConfig(ha_listen_port=0),
        proxy_config=ProxyConfig(grpc_server_port=0),
    )


@contextlib.asynccontextmanager
async def started(tmp_path: Path, tls: TlsServerSettings) -> AsyncIterator[Broker]:
    broker = make_broker(tmp_path, tls)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, tls: TlsServerSettings) -> AsyncIterator[int]:
    """The gRPC port of a started broker."""
    async with started(tmp_path, tls) as broker:
        assert broker.grpc is not None
        yield broker.grpc.port


@pytest.mark.asyncio
async def test_a_key_with_a_password_serves_tls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    tls = TlsServerSettings(
        TlsMode.enforcing, str(pki.server.cert), str(encrypted_key(pki, tmp_path)), "key-pass"
    )
    async with serving(tmp_path, tls) as port:
        trusted = grpc.ssl_channel_credentials(pki.ca.read_bytes())
        assert await heartbeat(port, trusted) == Code.OK
        stranger = grpc.ssl_channel_credentials(pki.stranger_ca.read_bytes())
        with pytest.raises(aio.AioRpcError) as caught:
            await heartbeat(port, stranger)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.asyncio
async def test_required_client_certificates_are_checked(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    tls = TlsServerSettings(
        TlsMode.enforcing,
        str(pki.server.cert),
        str(pki.server.key),
        trust_cert_path=str(pki.ca),
        client_auth=ClientAuth.require,
    )
    async with serving(tmp_path, tls) as port:
        ca = pki.ca.read_bytes()
        with_cert = grpc.ssl_channel_credentials(
            ca, pki.client.key.read_bytes(), pki.client.cert.read_bytes()
        )
        assert await heartbeat(port, with_cert) == Code.OK
        for credentials in (
            grpc.ssl_channel_credentials(ca),
            grpc.ssl_channel_credentials(
                ca, pki.stranger.key.read_bytes(), pki.stranger.cert.read_bytes()
            ),
        ):
            with pytest.raises(aio.AioRpcError) as caught:
                await heartbeat(port, credentials)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.asyncio
async def test_permissive_serves_tls_and_plaintext_on_one_port(tmp_path: Path) -> None:
    """Left open before: grpcio serves one or the other, so permissive was TLS only."""
    pki = make_pki(tmp_path)
    tls = TlsServerSettings(TlsMode.permissive, str(pki.server.cert), str(pki.server.key))
    async with started(tmp_path, tls) as broker:
        grpc_server = broker.grpc
        assert grpc_server is not None
        port = grpc_server.port
        assert await heartbeat(port, grpc.ssl_channel_credentials(pki.ca.read_bytes())) == Code.OK
        assert await heartbeat(port, None) == Code.OK
        with pytest.raises(aio.AioRpcError) as caught:  # an untrusted server certificate
            await heartbeat(port, grpc.ssl_channel_credentials(pki.stranger_ca.read_bytes()))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        # The service sees the client's address, not the relay's.
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await heartbeat_on(channel, "seen") == Code.OK
            front = grpc_server._front
            assert front is not None
            client = grpc_server.service.clients.get("seen")
            assert client is not None
            assert client.peer in {relay.client_address for relay in front.relays}
            assert front.client_of(client.peer) is None  # not a relay's own address
        # The internal port answers nobody but the front door's relays.
        assert await heartbeat(front.internal_port, None) == Code.UNAUTHORIZED


@pytest.mark.asyncio
async def test_optional_client_certificates_are_checked_when_sent(tmp_path: Path) -> None:
    """Left open before: grpcio asks for a certificate always or never, so optional asked
    for none (an untrusted one passed)."""
    pki = make_pki(tmp_path)
    tls = TlsServerSettings(
        TlsMode.enforcing,
        str(pki.server.cert),
        str(pki.server.key),
        trust_cert_path=str(pki.ca),
        client_auth=ClientAuth.optional,
    )
    async with serving(tmp_path, tls) as port:
        ca = pki.ca.read_bytes()
        assert await heartbeat(port, grpc.ssl_channel_credentials(ca)) == Code.OK
        with_cert = grpc.ssl_channel_credentials(
            ca, pki.client.key.read_bytes(), pki.client.cert.read_bytes()
        )
        assert await heartbeat(port, with_cert) == Code.OK
        stranger = grpc.ssl_channel_credentials(
            ca, pki.stranger.key.read_bytes(), pki.stranger.cert.read_bytes()
        )
        with pytest.raises(aio.AioRpcError) as caught:
            await heartbeat(port, stranger)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(aio.AioRpcError) as caught:  # enforcing: no plaintext
            await heartbeat(port, None)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_files_that_do_not_load_are_named(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cases = [
        (TlsServerSettings(TlsMode.enforcing, str(tmp_path / "none.pem")), "certPath"),
        (
            TlsServerSettings(TlsMode.enforcing, str(pki.server.cert), str(pki.server.cert)),
            "tls.server.keyPath",
        ),
        (
            TlsServerSettings(
                TlsMode.enforcing,
                str(pki.server.cert),
                str(encrypted_key(pki, tmp_path)),
                "wrong-pass",
            ),
            "tls.server.keyPath",
        ),
        (
            TlsServerSettings(
                TlsMode.enforcing,
                str(pki.server.cert),
                str(pki.server.key),
                trust_cert_path=str(tmp_path / "none.pem"),
                client_auth=ClientAuth.require,
            ),
            "tls.server.trustCertPath",
        ),
    ]
    for settings, key in cases:
        with pytest.raises(TlsSetupError) as caught:
            server_credentials(settings)
        assert key in str(caught.value)
        assert "\n" not in str(caught.value)
