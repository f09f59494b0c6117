"""The HA port closed by default, with real processes: a stranger (127.0.0.2, while the group's
brokers are on 127.0.0.1) connecting to a default-config master's haListenPort gets no byte and
its acks release no SYNC_MASTER send, while a real slave still replicates with no new key; with
aclEnable a peer without the ACL's credentials is refused with the log line that says why, and
a slave with them replicates (broker/ha_members.py, broker/acl/ha_auth.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import struct
import time
from pathlib import Path

import pytest

from tests.support.certs import make_pki
from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING, ha_status, wait_caught_up, wait_slave_connected
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.dashboard.cli import READY_PREFIX, command_line
from tidemq.ha.auth import CHALLENGE_SIZE, decode_challenge, encode_proof

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

ADMISSION = "haAdmissionTimeout=1500"
ADMIN_KEY, ADMIN_SECRET = "replica-admin", "replica-secret"
USER_KEY, USER_SECRET = "plain-user", "plain-user-secret"
# Remoting stays open to loopback (for this test's own unsigned calls); what is checked here is
# the HA port, which the white list does not open.
ACL_FILE = f"""\
globalWhiteRemoteAddresses: ["127.0.0.1"]
accounts:
  - accessKey: {USER_KEY}
    secretKey: {USER_SECRET}
    defaultTopicPerm: PUB|SUB
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
"""


def start_master(
    processes: ProcessGroup, namesrv: Daemon, store: Path, ha_port: int, *extra: str
) -> Daemon:
    return processes.brokerd(
        namesrv.address,
        store,
        "brokerRole=SYNC_MASTER",
        f"haListenPort={ha_port}",
        "slaveTimeout=1000",
        ADMISSION,
        *HA_TIMING,
        *extra,
        name="master",
    )


def start_slave(processes: ProcessGroup, namesrv: Daemon, store: Path, *extra: str) -> Daemon:
    # No haMasterAddress: the slave learns its master from its registration, as deployed.
    return processes.brokerd(
        namesrv.address,
        store,
        "brokerRole=SLAVE",
        "brokerId=1",
        *HA_TIMING,
        *extra,
        name="slave",
    )


class FakeSlave:
    """A raw HA peer acting as a slave: reports, then acks the end of every frame it gets."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.received = bytearray()

    @classmethod
    async def connect(cls, ha_port: int, source: str) -> FakeSlave:
        reader, writer = await asyncio.open_connection("127.0.0.1", ha_port, local_addr=(source, 0))
        return cls(reader, writer)

    async def report(self, offset: int) -> None:
        self.writer.write(struct.pack(">q", offset))
        await self.writer.drain()

    async def run(self) -> None:
        """Until the master closes: every frame acknowledged at once."""
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                header = await self.reader.readexactly(12)
                self.received += header
                offset, size = struct.unpack(">qi", header)
                self.received += await self.reader.readexactly(size)
                await self.report(offset + size)

    async def until_closed(self, timeout: float = 10.0) -> bytes:
        """All the master sent until it closed (TimeoutError if it does not)."""
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(timeout):
                while chunk := await self.reader.read(65536):
                    self.received += chunk
        return bytes(self.received)

    def close(self) -> None:
        self.writer.close()


async def master_max(api: BrokerAPI, master: Daemon) -> int:
    return int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])  # type: ignore[call-overload]


async def send(api: BrokerAPI, master: Daemon, i: int) -> SendStatus:
    result = await api.send(master.address, send_header("HA-DOORS", i % 4), os.urandom(100))
    return result.status


async def test_a_stranger_gets_nothing_and_releases_nothing_a_slave_replicates(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """Fails on c82965c: the stranger is sent the CommitLog and its acks answer SEND_OK."""
    ha_port = free_port()
    master = start_master(processes, namesrv, tmp_path / "master", ha_port)
    assert await send(api, master, 0) is SendStatus.SLAVE_NOT_AVAILABLE  # no slave yet

    stranger = await FakeSlave.connect(ha_port, "127.0.0.2")
    await stranger.report(await master_max(api, master))
    acking = asyncio.create_task(stranger.run())
    try:
        # While the stranger is connected (held, then refused), a SYNC_MASTER send still has no
        # slave: its acks count for nothing.
        statuses = []
        deadline = time.monotonic() + 8  # the master refuses it after 1.5 s (ADMISSION)
        while not acking.done() and time.monotonic() < deadline:
            statuses.append(await send(api, master, len(statuses)))
            await asyncio.wait({acking}, timeout=0.05)
        assert set(statuses) == {SendStatus.SLAVE_NOT_AVAILABLE}, statuses
        assert stranger.received == b""
        assert acking.done(), "the master did not close the stranger's connection"
    finally:
        acking.cancel()
        stranger.close()
    log = master.log_text()
    assert "HA: connection from 127.0.0.2:" in log
    assert "refused: not a slave of group" in log

    # The group's slave, configured as before: admitted, replicating, its acks release sends.
    slave = start_slave(processes, namesrv, tmp_path / "slave")
    await wait_slave_connected(api, master)
    for i in range(20):
        assert await send(api, master, i) is SendStatus.SEND_OK
    await wait_caught_up(api, master, slave)


async def test_allow_list_opens_the_door_explicitly(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """haAllowedSlaveAddresses=0.0.0.0/0 admits anyone, as before (passes on c82965c too: it
    checks the way back, not the closing)."""
    ha_port = free_port()
    master = start_master(
        processes, namesrv, tmp_path / "master", ha_port, "haAllowedSlaveAddresses=0.0.0.0/0"
    )
    await send(api, master, 0)
    peer = await FakeSlave.connect(ha_port, "127.0.0.2")
    try:
        await peer.report(0)
        async with asyncio.timeout(10):
            header = await peer.reader.readexactly(12)
        assert struct.unpack(">qi", header)[1] > 0
    finally:
        peer.close()


def acl_args(acl_file: Path) -> tuple[str, ...]:
    return ("aclEnable=true", f"aclFile={acl_file}")


async def test_with_acl_a_peer_must_prove_an_admin_account(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """Fails on c82965c: a peer without credentials is sent the CommitLog, no challenge."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    ha_port = free_port()
    master = start_master(processes, namesrv, tmp_path / "master", ha_port, *acl_args(acl_file))
    slave = start_slave(processes, namesrv, tmp_path / "slave", *acl_args(acl_file))
    await wait_slave_connected(api, master)
    for i in range(20):
        assert await send(api, master, i) is SendStatus.SEND_OK
    await wait_caught_up(api, master, slave)

    # From the slave's own address (so admitted by address), a RocketMQ-style peer that just
    # reports: it gets the challenge and nothing else.
    bare = await FakeSlave.connect(ha_port, "127.0.0.1")
    try:
        await bare.report(0)
        received = await bare.until_closed(15)
    finally:
        bare.close()
    assert len(received) == CHALLENGE_SIZE
    decode_challenge(received)  # a challenge, no CommitLog byte

    # Right account, wrong secret; and a right secret of an account that is not an admin.
    for key, secret, why in (
        (ADMIN_KEY, "not-the-secret", f"accessKey {ADMIN_KEY} does not match its secretKey"),
        (USER_KEY, USER_SECRET, f"accessKey {USER_KEY}, which is not an admin account"),
    ):
        peer = await FakeSlave.connect(ha_port, "127.0.0.1")
        try:
            nonce = decode_challenge(await peer.reader.readexactly(CHALLENGE_SIZE))
            mac_key = hmac.new(secret.encode(), digestmod=hashlib.sha1)
            peer.writer.write(encode_proof(key, mac_key, nonce))
            await peer.report(0)
            assert await peer.until_closed(10) == b""
        finally:
            peer.close()
        await eventually(lambda why=why: why in master.log_text(), f"the log line {why!r}")
    log = master.log_text()
    assert "HA: connection from 127.0.0.1:" in log
    assert "refused: aclEnable: no HA proof" in log

    # The slave kept replicating throughout.
    for i in range(20):
        assert await send(api, master, i) is SendStatus.SEND_OK
    await wait_caught_up(api, master, slave)


async def test_each_daemon_warns_once_per_open_door(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """Fails on c82965c: nothing is said. (The loopback daemons of the other tests say
    nothing: checked here on the fixture's name server.)"""
    assert "open door" not in namesrv.log_text()
    exposed = processes.namesrvd("bindAddress=0.0.0.0", name="namesrvd-exposed")
    broker = processes.brokerd(
        namesrv.address, tmp_path / "master", "bindAddress=0.0.0.0", name="master-exposed"
    )
    await eventually(lambda: "open door" in exposed.log_text(), "the name server's warning")
    (door,) = [line for line in exposed.log_text().splitlines() if "open door" in line]
    assert "WARNING" in door and "name server port 0.0.0.0:" in door
    lines = [line for line in broker.log_text().splitlines() if "open door" in line]
    assert len(lines) == 2, lines
    assert "remoting port 0.0.0.0:" in lines[0] and "HA port 0.0.0.0:" in lines[1]
    # A writable dashboard (it has --ak/--sk) on every address.
    port = free_port()
    keys = ("--ak", "dash-admin", "--sk", "dash-admin-secret")
    dashboard = processes.start(
        command_line(namesrv.address, port, "0.0.0.0", *keys),
        port=port,
        name="dashboard-exposed",
        ready_text=READY_PREFIX,
    )
    (door,) = [line for line in dashboard.log_text().splitlines() if "open door" in line]
    assert "writable dashboard on 0.0.0.0:" in door and "as dash-admin" in door


async def test_with_acl_and_ha_tls_the_certificate_is_the_proof(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """A regression guard, not a new behaviour (passes on c82965c): with haTlsEnable the client
    certificate the master requires proves the slave, and no tidemq challenge is added inside
    TLS, so the stream inside is RocketMQ's."""
    pki = make_pki(tmp_path / "pki")
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)

    def ha_tls(cert: Path, key: Path) -> tuple[str, ...]:
        return (
            "haTlsEnable=true",
            f"haTlsCertPath={cert}",
            f"haTlsKeyPath={key}",
            f"haTlsTrustCertPath={pki.ca}",
        )

    ha_port = free_port()
    master = start_master(
        processes,
        namesrv,
        tmp_path / "master",
        ha_port,
        *acl_args(acl_file),
        *ha_tls(pki.server.cert, pki.server.key),
    )
    slave = start_slave(
        processes,
        namesrv,
        tmp_path / "slave",
        *acl_args(acl_file),
        *ha_tls(pki.client.cert, pki.client.key),
    )
    await wait_slave_connected(api, master)
    for i in range(20):
        assert await send(api, master, i) is SendStatus.SEND_OK
    await wait_caught_up(api, master, slave)
    assert "HA proof" not in master.log_text()
