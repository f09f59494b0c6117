"""A broker group under plain ACL with no `globalWhiteRemoteAddresses`: the brokers sign their own
requests with the first admin account of their ACL file (broker/acl/own_account.py), so the slave's
SlaveSynchronize and the master's questions to its slave pass the master's and the slave's ACL
checks, and registration with the name server (which has no ACL) is unharmed by the signature."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING, ha_status, wait_caught_up, wait_slave_connected
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import send_header
from tidemq.broker.managers.topic_config import parse_topic_wrapper
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode, SerializeType
from tidemq.client.remoting.signing import SessionCredentials

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

BROKERS = SessionCredentials("broker-admin", "broker-admin-secret")
APP = SessionCredentials("application", "application-secret")
# The brokers' account is listed second: the first *admin* account is what they sign with.
ACL_FILE = f"""\
accounts:
  - accessKey: {APP.access_key}
    secretKey: {APP.secret_key}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: {BROKERS.access_key}
    secretKey: {BROKERS.secret_key}
    admin: true
"""
TOPIC = "signed-sync-topic"


@pytest.fixture
async def admin_api() -> AsyncIterator[BrokerAPI]:
    api = BrokerAPI(serialize_type=SerializeType.JSON, credentials=BROKERS)
    try:
        yield api
    finally:
        await api.close()


def start_group(processes: ProcessGroup, namesrv: Daemon, tmp_path: Path) -> tuple[Daemon, Daemon]:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    acl = ("aclEnable=true", f"aclFile={acl_file}", *HA_TIMING)
    master = processes.brokerd(
        namesrv.address, tmp_path / "master", "brokerRole=SYNC_MASTER", *acl, name="master"
    )
    slave = processes.brokerd(
        namesrv.address, tmp_path / "slave", "brokerRole=SLAVE", "brokerId=1", *acl, name="slave"
    )
    return master, slave


async def topics_of(api: BrokerAPI, broker: Daemon) -> set[str]:
    response = await api.call(broker.address, api.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    return set(parse_topic_wrapper(bytes(response.body)).topic_config_table)


async def test_slave_synchronizes_and_master_names_its_slave_without_a_white_list(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, admin_api: BrokerAPI
) -> None:
    """Fails on dad113a: the slave's SlaveSynchronize is unsigned, the master refuses it
    ("No accessKey is configured"), and the topic never reaches the slave."""
    master, slave = start_group(processes, namesrv, tmp_path)
    await wait_slave_connected(admin_api, master)
    await admin_api.create_topic(master.address, TopicConfig(TOPIC, 2, 2))

    async def synchronized() -> bool:
        return TOPIC in await topics_of(admin_api, slave)

    await eventually(synchronized, "the slave's SlaveSynchronize to copy the topic", 20)

    # The master asked the slave for its HA status (broker/slave_names.py), signed too.
    async def slave_named() -> bool:
        connections = (await ha_status(admin_api, master.address)).get("haConnectionInfo")
        return isinstance(connections, list) and any(
            c.get("slaveBrokerId") == 1 for c in connections
        )

    await eventually(slave_named, "the master to name its slave by broker id", 20)

    # The application account sends SEND_OK through the SYNC_MASTER: the slave replicates.
    app = BrokerAPI(credentials=APP)
    try:
        result = await app.send(master.address, send_header(TOPIC, 0), b"signed")
        assert result.status is SendStatus.SEND_OK
    finally:
        await app.close()
    await wait_caught_up(admin_api, master, slave)

    for daemon in (master, slave):
        assert "ACL refused" not in daemon.log_text(), daemon.name
    assert BROKERS.secret_key not in master.log_text() + slave.log_text()
    # The name server read the signed registrations as any other.
    info = await admin_api.get_cluster_info(namesrv.address)
    assert sorted(info.broker_addr_table["broker-a"].broker_addrs) == [0, 1]
