"""deploy/secure end to end: `tidemq-cluster secure-init` writes the certificates and credentials,
`tidemq-cluster run` starts the name server, the SYNC_MASTER and its SLAVE (ACL with no white
list, TLS on every port, HA admitted by certificate), checking them signed and in TLS.

The remoting ports run `permissive` here (`-o ...:tls.server.mode=permissive`, the variant
deploy/README.md documents) because the RocketMQ C++ client 0.4.4 speaks no TLS; every request
still needs an ACL signature. Then: the C++ client with the application account sends (SEND_OK
from the SYNC_MASTER: the slave acknowledged) and consumes; without credentials or with a wrong
secret it is refused; our client sends and consumes in TLS with the account; a plaintext
connection to the HA port, and TLS ones without a certificate of the HA CA, get no CommitLog
byte; the slave holds what the master holds, and its SlaveSynchronize (signed by the brokers
themselves) copied the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.cpp_peers import LINGER, SEND_OK, run_peer
from tests.support.launcher import LaunchedCluster
from tests.support.processes import REPO_ROOT
from tidemq.broker.acl.rules import load_rules
from tidemq.broker.daemons.cluster_access import own_credentials
from tidemq.broker.managers.topic_config import parse_topic_wrapper
from tidemq.broker.properties import load_properties
from tidemq.client.admin.api import AdminClient
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.errors import BrokerResponseError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.signing import SessionCredentials
from tidemq.client.transport.tls import TlsClientSettings

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

TOPIC = "secure-topic"
GROUP = "secure-group"
PERMISSIVE = "tls.server.mode=permissive"
REFUSED_CONSUME_TIMEOUT = 6.0


@dataclass
class Secure:
    cluster: LaunchedCluster
    folder: Path
    brokers: SessionCredentials  # the admin account the brokers sign with
    app: SessionCredentials
    tls: TlsClientSettings  # trusts the remoting CA, presents the client certificate

    def file(self, name: str) -> Path:
        return self.folder / name

    def admin(self) -> AdminClient:
        return AdminClient(
            self.cluster.namesrv_addr,
            access_key=self.brokers.access_key,
            secret_key=self.brokers.secret_key,
            tls=self.tls,
        )


def secure_init(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemq.broker.daemons.cluster", "secure-init", str(folder)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    root = tmp_path_factory.mktemp("secure")
    folder = root / "topology"
    made = secure_init(folder)
    assert made.returncode == 0, made.stderr
    app = load_properties(folder / "application.properties")
    cluster = LaunchedCluster.start(
        str(folder),
        root / "data",
        PERMISSIVE,
        launcher_args=("-o", f"namesrv:{PERMISSIVE}"),
    )
    try:
        yield Secure(
            cluster,
            folder,
            own_credentials({"aclFile": str(folder / "plain_acl.yml")}),
            SessionCredentials(app["accessKey"], app["secretKey"]),
            TlsClientSettings(
                trust_cert_path=app["tls.client.trustCertPath"],
                cert_path=app["tls.client.certPath"],
                key_path=app["tls.client.keyPath"],
            ),
        )
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def topic(secure: Secure) -> str:
    async def create() -> None:
        async with secure.admin() as admin:
            await admin.create_topic(secure.cluster.address("broker-a"), TopicConfig(TOPIC, 4, 4))

            async def routed() -> bool:
                return bool((await admin.topic_route(TOPIC)).queue_datas)

            await eventually(routed, "the topic's route", 20)

    asyncio.run(create())
    return TOPIC


async def test_the_launcher_checks_signed_and_in_tls(secure: Secure) -> None:
    assert "checks in TLS, signing as tidemq-brokers" in secure.cluster.output()
    rules = load_rules([secure.file("plain_acl.yml")])
    assert rules.global_white == ()  # nobody gets in unsigned, the brokers included
    assert [a.admin for a in rules.accounts.values()] == [True, False]


def http(method: str, url: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_the_dashboard_reads_in_tls_signed_and_changes_nothing(secure: Secure) -> None:
    """The launcher's dashboard reaches the TLS name server (client certificate required) and the
    ACL brokers with the brokers' account, read-only, on loopback."""
    base = f"http://127.0.0.1:{secure.cluster.dashboard_port}"
    status, cluster = await asyncio.to_thread(http, "GET", f"{base}/api/cluster")
    assert status == 200, cluster
    assert "broker-a" in json.dumps(cluster)
    status, refused = await asyncio.to_thread(
        http, "POST", f"{base}/api/topics", {"topic": "MadeFromTheDashboard"}
    )
    assert status == 403, refused


# --- the RocketMQ C++ client ------------------------------------------------------------------


def require_cpp_client() -> None:
    pytest.importorskip(
        "rocketmq.client",
        reason="the RocketMQ C++ client (rocketmq==0.4.4, x86_64 Linux only) cannot be imported",
        exc_type=ImportError,
    )


def cpp_spec(
    secure: Secure, op: str, credentials: SessionCredentials | None, **more: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"op": op, "namesrv": secure.cluster.namesrv_addr, "topic": TOPIC}
    if credentials is not None:
        spec["credentials"] = [credentials.access_key, credentials.secret_key, "LOCAL"]
    return {**spec, **more}


async def cpp_send(
    tmp_path: Path, secure: Secure, credentials: SessionCredentials | None, body: str
) -> list[dict[str, Any]]:
    spec = cpp_spec(secure, "produce", credentials, group="PG-secure", messages=[{"body": body}])
    return await run_peer(tmp_path, spec, must_succeed=False)


async def cpp_consume(
    tmp_path: Path,
    secure: Secure,
    credentials: SessionCredentials | None,
    expect: int,
    timeout: float,
) -> list[str]:
    spec = cpp_spec(
        secure, "consume", credentials, group=GROUP, expect=expect, timeout=timeout, linger=LINGER
    )
    events = await run_peer(tmp_path, spec)
    return [e["body"] for e in events if e["event"] == "received"]


async def test_cpp_client_with_the_application_account_sends_and_consumes(
    secure: Secure, topic: str, tmp_path: Path
) -> None:
    require_cpp_client()
    events = await cpp_send(tmp_path, secure, secure.app, "from cpp")
    # SEND_OK from a SYNC_MASTER: its slave acknowledged the message.
    assert [e["status"] for e in events if e["event"] == "sent"] == [SEND_OK], events
    assert await cpp_consume(tmp_path, secure, secure.app, expect=1, timeout=25) == ["from cpp"]


@pytest.mark.parametrize("who", ["no-credentials", "wrong-secret"])
async def test_cpp_client_without_the_account_is_refused(
    secure: Secure, topic: str, tmp_path: Path, who: str
) -> None:
    require_cpp_client()
    credentials = None
    if who == "wrong-secret":
        credentials = SessionCredentials(secure.app.access_key, "not-the-secret-key")
    events = await cpp_send(tmp_path, secure, credentials, f"refused {who}")
    assert not [e for e in events if e["event"] == "sent" and e["status"] == SEND_OK], events
    assert [e["event"] for e in events][-1] == "error", events
    consumed = await cpp_consume(tmp_path, secure, credentials, 1, REFUSED_CONSUME_TIMEOUT)
    assert consumed == []


# --- our client in TLS ------------------------------------------------------------------------


async def test_our_client_in_tls_with_the_account_sends_and_consumes(
    secure: Secure, topic: str
) -> None:
    app = secure.app
    keys = {"access_key": app.access_key, "secret_key": app.secret_key}
    producer = AsyncProducer(
        "PG-secure-py", secure.cluster.namesrv_addr, tls=secure.tls, retry_times=0, **keys
    )
    await producer.start()
    try:
        sent = await producer.send(Message(topic, b"from python over tls"))
        assert sent.status.name == "SEND_OK"
    finally:
        await producer.shutdown()
    unsigned = AsyncProducer(
        "PG-secure-none", secure.cluster.namesrv_addr, tls=secure.tls, retry_times=0
    )
    await unsigned.start()
    try:
        with pytest.raises(BrokerResponseError, match="No accessKey is configured"):
            await unsigned.send(Message(topic, b"unsigned"))
    finally:
        await unsigned.shutdown()

    consumer = AsyncPullConsumer(
        "secure-py-group",
        secure.cluster.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        tls=secure.tls,
        **keys,
    )
    consumer.subscribe(topic)
    await consumer.start()
    try:
        got: list[bytes] = []

        async def polled() -> bool:
            got.extend(m.body for m in await consumer.poll(0.2))
            return b"from python over tls" in got

        await eventually(polled, "the message polled in TLS with the account", 20)
        assert b"unsigned" not in got
    finally:
        await consumer.shutdown()


# --- HA: admitted by certificate, replicating -------------------------------------------------


async def ha_receives(port: int, tls: ssl.SSLContext | None) -> bytes:
    """What the master's HA port sends a peer on 127.0.0.1 (the slave's address, so admitted by
    address) that reports offset 0 as a slave does, until it closes."""
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
        )
    except (ssl.SSLError, ConnectionError):
        return b""  # refused in the handshake
    try:
        writer.write(struct.pack(">q", 0))
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 15)
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        await close(writer)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ssl.SSLError, ConnectionError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 5)


def tls_to_ha(secure: Secure, cert: str | None) -> ssl.SSLContext:
    """A client context that trusts the HA CA and presents `cert` (a name in the folder)."""
    context = ssl.create_default_context(cafile=str(secure.file("ha-ca.pem")))
    if cert is not None:
        context.load_cert_chain(secure.file(f"{cert}.pem"), secure.file(f"{cert}.key"))
    return context


async def test_the_ha_port_admits_only_a_broker_certificate(secure: Secure, topic: str) -> None:
    port = secure.cluster.ports["broker-a"].ha
    assert await ha_receives(port, None) == b""  # plaintext
    assert await ha_receives(port, tls_to_ha(secure, None)) == b""  # no certificate
    # The applications' client certificate is of the remoting CA, not the HA CA.
    assert await ha_receives(port, tls_to_ha(secure, "client")) == b""
    # The brokers' own certificate is admitted: the master sends (a heartbeat at least).
    assert await ha_receives_some(port, tls_to_ha(secure, "ha"))


async def ha_receives_some(port: int, tls: ssl.SSLContext) -> bool:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1"
    )
    try:
        writer.write(struct.pack(">q", 0))
        await writer.drain()
        return len(await asyncio.wait_for(reader.readexactly(12), 15)) == 12
    finally:
        await close(writer)


async def test_the_slave_holds_what_the_master_holds(secure: Secure, topic: str) -> None:
    master, slave = secure.cluster.address("broker-a"), secure.cluster.address("broker-a-s")
    async with secure.admin() as admin:
        await admin.send_message(Message(topic, b"replicated"))

        async def caught_up() -> bool:
            info = await admin.ha_status(master)
            return bool(info.ha_connection_info) and all(
                c.diff == 0 for c in info.ha_connection_info
            )

        await eventually(caught_up, "the slave to hold every byte of the master", 20)
        # SlaveSynchronize (signed by the slave itself: no white list) copied the topic.
        response = await admin.api.call(slave, admin.api.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert topic in parse_topic_wrapper(bytes(response.body)).topic_config_table
    logs = secure.cluster.output_path.parent / "logs"
    for name in ("broker-a", "broker-a-s"):
        text = (logs / f"{name}.log").read_text()
        # Refusals of the tests' own unsigned requests name no account; the brokers' would.
        assert "accessKey 'tidemq-brokers'" not in text, name
        assert secure.brokers.secret_key not in text, name
