"""The HA port's guards with real processes: a slave replicating over TLS with certificates on
both sides, strangers refused (an address outside haAllowedSlaveAddresses, a peer without a
trusted certificate, plaintext) before a byte of the CommitLog is sent."""

from __future__ import annotations

import asyncio
import os
import ssl
import struct
from pathlib import Path

import pytest

from tests.support.certs import Pki, make_pki
from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING, wait_caught_up, wait_slave_connected
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.ha.transport import TLS_HANDSHAKE_TIMEOUT

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def ha_tls(pki: Pki, cert: Path, key: Path) -> tuple[str, ...]:
    return (
        "haTlsEnable=true",
        f"haTlsCertPath={cert}",
        f"haTlsKeyPath={key}",
        f"haTlsTrustCertPath={pki.ca}",
    )


def start_master(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, ha_port: int, *extra: str
) -> Daemon:
    return processes.brokerd(
        namesrv.address,
        tmp_path / "master",
        "brokerRole=SYNC_MASTER",
        f"haListenPort={ha_port}",
        *HA_TIMING,
        *extra,
        name="master",
    )


def start_slave(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, ha_port: int, *extra: str
) -> Daemon:
    return processes.brokerd(
        namesrv.address,
        tmp_path / "slave",
        "brokerRole=SLAVE",
        "brokerId=1",
        f"haMasterAddress=127.0.0.1:{ha_port}",
        *HA_TIMING,
        *extra,
        name="slave",
    )


async def stranger_receives(
    ha_port: int, *, source: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> bytes:
    """Everything the master sends a peer that reports offset 0 (as a slave would), until it
    closes."""
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1",
            ha_port,
            local_addr=(source, 0),
            ssl=tls,
            server_hostname="127.0.0.1" if tls is not None else None,
        )
    except (ssl.SSLError, ConnectionError):
        return b""  # refused during the handshake
    try:
        writer.write(struct.pack(">q", 0))
        await writer.drain()
        # TLS starts with the connection, so plaintext fails the handshake at once.
        return await asyncio.wait_for(reader.read(), TLS_HANDSHAKE_TIMEOUT)
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        writer.close()


async def send_some(api: BrokerAPI, master: Daemon, count: int) -> None:
    for i in range(count):
        result = await api.send(master.address, send_header("HA-TLS", i % 4), os.urandom(200))
        assert result.status is SendStatus.SEND_OK


async def test_slave_replicates_over_tls_and_strangers_are_refused(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI, pki: Pki
) -> None:
    ha_port = free_port()
    master = start_master(
        processes,
        namesrv,
        tmp_path,
        ha_port,
        *ha_tls(pki, pki.server.cert, pki.server.key),
        "haAllowedSlaveAddresses=127.0.0.1",
    )
    slave = start_slave(
        processes, namesrv, tmp_path, ha_port, *ha_tls(pki, pki.client.cert, pki.client.key)
    )
    await wait_slave_connected(api, master)
    await send_some(api, master, 300)
    end = await wait_caught_up(api, master, slave)
    master_log = (tmp_path / "master" / "commitlog").iterdir()
    first = sorted(master_log)[0].name
    assert (tmp_path / "slave" / "commitlog" / first).read_bytes()[:end] == (
        tmp_path / "master" / "commitlog" / first
    ).read_bytes()[:end]

    # Plaintext, no certificate, an untrusted certificate, a listed address without TLS, and an
    # unlisted address: nothing of the CommitLog.
    no_cert = ssl.create_default_context(cafile=str(pki.ca))
    untrusted = ssl.create_default_context(cafile=str(pki.ca))
    untrusted.load_cert_chain(pki.stranger.cert, pki.stranger.key)
    assert await stranger_receives(ha_port) == b""
    assert await stranger_receives(ha_port, tls=no_cert) == b""
    assert await stranger_receives(ha_port, tls=untrusted) == b""
    assert await stranger_receives(ha_port, source="127.0.0.2") == b""
    log = master.log_text()
    assert "HA: connection from 127.0.0.2" in log and "not in haAllowedSlaveAddresses" in log
    assert log.count("HA: TLS handshake with 127.0.0.1") >= 3
    # The slave kept replicating throughout.
    await send_some(api, master, 50)
    await wait_caught_up(api, master, slave)


async def test_allow_list_without_tls(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    ha_port = free_port()
    master = start_master(
        processes,
        namesrv,
        tmp_path,
        ha_port,
        "brokerRole=ASYNC_MASTER",
        "haAllowedSlaveAddresses=10.0.0.0/8;127.0.0.1/32",
    )
    # A listed peer is a slave like any other: it gets the master's bytes.
    await send_some(api, master, 10)
    assert len(await asyncio.wait_for(_first_bytes(ha_port), 10)) > 0
    # An unlisted one is closed before a byte.
    assert await stranger_receives(ha_port, source="127.0.0.3") == b""
    await eventually(
        lambda: "HA: connection from 127.0.0.3" in master.log_text(), "the refusal's log line"
    )


async def _first_bytes(ha_port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", ha_port)
    try:
        writer.write(struct.pack(">q", 0))
        await writer.drain()
        return await reader.read(12)
    finally:
        writer.close()


async def test_bad_ha_settings_stop_start_up(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, pki: Pki
) -> None:
    from tests.support.processes import DaemonError

    for extra, reason in (
        (("haAllowedSlaveAddresses=10.0.0.300",), "haAllowedSlaveAddresses: '10.0.0.300'"),
        (("haTlsEnable=true",), "haTlsCertPath: required"),
        (
            ha_tls(pki, pki.server.cert, pki.client.key),
            "haTlsCertPath/haTlsKeyPath/haTlsTrustCertPath: cannot load",
        ),
    ):
        with pytest.raises(DaemonError, match=reason):
            await asyncio.to_thread(start_master, processes, namesrv, tmp_path, free_port(), *extra)
