"""The name server as a real `namesrvd` process, driven over TCP by `RemotingClient`.

Broker addresses here are only what brokers advertise: the name server never connects to them,
so nothing needs to listen there. Each simulated broker uses its own `RemotingClient`, i.e. its
own connection, as a real broker does.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.protocol.models import ClusterInfo, DataVersion, TopicConfig, TopicRouteData
from tidemq.client.protocol.namesrv import (
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerResult,
    UnregisterBrokerRequestHeader,
    check_success,
    parse_cluster_info_response,
    parse_register_broker_response,
    parse_route_response,
    parse_topic_list_response,
    register_broker_request,
    simple_request,
    topic_config_wrapper,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.client import RemotingClient

TIMEOUT = 3.0
CLUSTER = "DefaultCluster"
MASTER, MASTER_HA = "127.0.0.1:20911", "127.0.0.1:20912"
SLAVE, SLAVE_HA = "127.0.0.1:20921", "127.0.0.1:20922"


@pytest.fixture
async def clients() -> AsyncIterator[Callable[[], RemotingClient]]:
    """A factory of clients (one per simulated broker), all closed at the end."""
    made: list[RemotingClient] = []

    def make() -> RemotingClient:
        made.append(RemotingClient())
        return made[-1]

    try:
        yield make
    finally:
        for client in made:
            await client.close()


def topics(*specs: tuple[str, int], counter: int = 1) -> RegisterBrokerBody:
    configs = [TopicConfig(name, queues, queues) for name, queues in specs]
    return RegisterBrokerBody(
        topic_config_wrapper(configs, DataVersion(1_700_000_000_000, counter))
    )


async def register(
    client: RemotingClient,
    namesrv: str,
    *,
    broker_id: int,
    addr: str,
    ha: str,
    body: RegisterBrokerBody,
    name: str = "broker-a",
    cluster: str = CLUSTER,
    compressed: bool = False,
) -> RegisterBrokerResult:
    request = register_broker_request(
        broker_name=name,
        broker_addr=addr,
        cluster_name=cluster,
        ha_server_addr=ha,
        broker_id=broker_id,
        body=body,
        compressed=compressed,
    )
    return parse_register_broker_response(await client.invoke(namesrv, request, TIMEOUT))


async def route(client: RemotingClient, namesrv: str, topic: str) -> TopicRouteData | None:
    request = simple_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic))
    return parse_route_response(await client.invoke(namesrv, request, TIMEOUT))


async def cluster_info(client: RemotingClient, namesrv: str) -> ClusterInfo:
    request = simple_request(RequestCode.GET_BROKER_CLUSTER_INFO)
    return parse_cluster_info_response(await client.invoke(namesrv, request, TIMEOUT))


async def topic_list(client: RemotingClient, namesrv: str, cluster: str | None = None) -> set[str]:
    if cluster is None:
        request = simple_request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    else:
        header = GetTopicsByClusterRequestHeader(cluster)
        request = simple_request(RequestCode.GET_TOPICS_BY_CLUSTER, header)
    return set(parse_topic_list_response(await client.invoke(namesrv, request, TIMEOUT)).topic_list)


async def test_master_and_slave_route(
    namesrv: Daemon, clients: Callable[[], RemotingClient]
) -> None:
    master, slave, user = clients(), clients(), clients()
    result = await register(
        master,
        namesrv.address,
        broker_id=0,
        addr=MASTER,
        ha=MASTER_HA,
        body=topics(("TopicA", 4), ("TopicB", 8)),
    )
    assert (result.ha_server_addr, result.master_addr) == (None, None)

    # The slave's own table differs: the group's queue data must still be the master's.
    result = await register(
        slave,
        namesrv.address,
        broker_id=1,
        addr=SLAVE,
        ha=SLAVE_HA,
        body=topics(("TopicA", 1), ("SlaveOnly", 2)),
    )
    assert (result.ha_server_addr, result.master_addr) == (MASTER_HA, MASTER)

    found = await route(user, namesrv.address, "TopicA")
    assert found is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in found.queue_datas] == [
        ("broker-a", 4, 4)
    ]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in found.broker_datas] == [
        (CLUSTER, "broker-a", {0: MASTER, 1: SLAVE})
    ]
    assert await route(user, namesrv.address, "SlaveOnly") is None

    request = simple_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("Nope"))
    response = await user.invoke(namesrv.address, request, TIMEOUT)
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark == "No topic route info in name server for the topic: Nope"
    assert "broker registered: broker-a[1] 127.0.0.1:20921" in namesrv.log_text()


async def test_cluster_info_topics_delete_and_unregister(
    namesrv: Daemon, clients: Callable[[], RemotingClient]
) -> None:
    a, b, user = clients(), clients(), clients()
    await register(
        a,
        namesrv.address,
        broker_id=0,
        addr=MASTER,
        ha=MASTER_HA,
        body=topics(("Shared", 4), ("OnlyA", 4)),
        cluster="C1",
    )
    await register(
        b,
        namesrv.address,
        broker_id=0,
        addr=SLAVE,
        ha=SLAVE_HA,
        body=topics(("Shared", 2), ("OnlyB", 2)),
        name="broker-b",
        cluster="C2",
    )
    info = await cluster_info(user, namesrv.address)
    assert info.cluster_addr_table == {"C1": {"broker-a"}, "C2": {"broker-b"}}
    assert {n: d.broker_addrs for n, d in info.broker_addr_table.items()} == {
        "broker-a": {0: MASTER},
        "broker-b": {0: SLAVE},
    }
    assert await topic_list(user, namesrv.address) == {"Shared", "OnlyA", "OnlyB"}
    assert await topic_list(user, namesrv.address, "C2") == {"Shared", "OnlyB"}

    delete = DeleteTopicFromNamesrvRequestHeader("Shared", cluster_name="C1")
    check_success(
        await user.invoke(
            namesrv.address, simple_request(RequestCode.DELETE_TOPIC_IN_NAMESRV, delete), TIMEOUT
        )
    )
    shared = await route(user, namesrv.address, "Shared")
    assert shared is not None
    assert [q.broker_name for q in shared.queue_datas] == ["broker-b"]
    delete = DeleteTopicFromNamesrvRequestHeader("Shared")
    check_success(
        await user.invoke(
            namesrv.address, simple_request(RequestCode.DELETE_TOPIC_IN_NAMESRV, delete), TIMEOUT
        )
    )
    assert await route(user, namesrv.address, "Shared") is None

    goodbye = UnregisterBrokerRequestHeader("broker-b", SLAVE, "C2", 0)
    check_success(
        await b.invoke(
            namesrv.address, simple_request(RequestCode.UNREGISTER_BROKER, goodbye), TIMEOUT
        )
    )
    info = await cluster_info(user, namesrv.address)
    assert info.cluster_addr_table == {"C1": {"broker-a"}}
    assert set(info.broker_addr_table) == {"broker-a"}
    assert await topic_list(user, namesrv.address) == {"OnlyA"}
    assert "(unregistered, group gone)" in namesrv.log_text()


async def test_closing_a_broker_connection_removes_it_at_once(
    namesrv: Daemon, clients: Callable[[], RemotingClient]
) -> None:
    master, slave, user = clients(), clients(), clients()
    body = topics(("TopicA", 4))
    await register(master, namesrv.address, broker_id=0, addr=MASTER, ha=MASTER_HA, body=body)
    await register(slave, namesrv.address, broker_id=1, addr=SLAVE, ha=SLAVE_HA, body=body)

    await master.close()

    async def master_gone() -> bool:
        found = await route(user, namesrv.address, "TopicA")
        assert found is not None  # the group lives on in its slave, with its queue data
        return found.broker_datas[0].broker_addrs == {1: SLAVE}

    await eventually(master_gone, timeout=2.0)
    await slave.close()

    async def group_gone() -> bool:
        return await route(user, namesrv.address, "TopicA") is None

    await eventually(group_gone, timeout=2.0)
    info = await cluster_info(user, namesrv.address)
    assert (info.broker_addr_table, info.cluster_addr_table) == ({}, {})
    assert (
        "broker removed: broker-a[0] 127.0.0.1:20911 cluster DefaultCluster (connection closed)"
        in (namesrv.log_text())
    )


async def test_silent_broker_expires_while_a_registering_one_stays(
    processes: ProcessGroup, clients: Callable[[], RemotingClient]
) -> None:
    namesrv = processes.namesrvd("brokerChannelExpiredTime=1000", "scanNotActiveBrokerInterval=200")
    silent, chatty, user = clients(), clients(), clients()
    await register(
        silent, namesrv.address, broker_id=0, addr=MASTER, ha=MASTER_HA, body=topics(("T1", 1))
    )
    registered_at = time.monotonic()
    connection = await silent.connection(namesrv.address)

    async def keep_registering() -> None:
        body = topics(("T2", 1))
        while True:
            await register(
                chatty, namesrv.address, broker_id=0, addr=SLAVE, ha=SLAVE_HA, body=body, name="b"
            )
            await asyncio.sleep(0.25)

    heartbeat = asyncio.create_task(keep_registering())
    try:

        async def silent_gone() -> bool:
            return await route(user, namesrv.address, "T1") is None

        await eventually(silent_gone, timeout=4.0)
        waited = time.monotonic() - registered_at
        assert waited >= 0.9, f"expired after {waited:.2f} s, before brokerChannelExpiredTime"
        assert await route(user, namesrv.address, "T2") is not None
        # RocketMQ closes an expired broker's connection; the name server did so too.
        await asyncio.wait_for(connection.closed.wait(), 2.0)
    finally:
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)
    assert "(expired: no registration for" in namesrv.log_text()


async def test_two_name_servers_hold_what_was_sent_to_each(
    processes: ProcessGroup, clients: Callable[[], RemotingClient]
) -> None:
    first, second = processes.namesrvd(), processes.namesrvd()
    a, b, user = clients(), clients(), clients()
    await register(a, first.address, broker_id=0, addr=MASTER, ha=MASTER_HA, body=topics(("A", 1)))
    await register(
        b, second.address, broker_id=0, addr=SLAVE, ha=SLAVE_HA, body=topics(("B", 1)), name="b"
    )
    assert set((await cluster_info(user, first.address)).broker_addr_table) == {"broker-a"}
    assert set((await cluster_info(user, second.address)).broker_addr_table) == {"b"}
    assert await route(user, first.address, "B") is None

    # A broker registers with every name server: the second one learns broker-a too.
    await register(a, second.address, broker_id=0, addr=MASTER, ha=MASTER_HA, body=topics(("A", 1)))
    assert set((await cluster_info(user, second.address)).broker_addr_table) == {"broker-a", "b"}
    assert set((await cluster_info(user, first.address)).broker_addr_table) == {"broker-a"}


async def test_crc_mismatch_is_rejected_and_compressed_bodies_register(
    namesrv: Daemon, clients: Callable[[], RemotingClient]
) -> None:
    broker = clients()
    request = register_broker_request(
        broker_name="broker-a",
        broker_addr=MASTER,
        cluster_name=CLUSTER,
        ha_server_addr=MASTER_HA,
        broker_id=0,
        body=topics(("TopicA", 4)),
    )
    request.ext_fields["bodyCrc32"] = str((int(request.ext_fields["bodyCrc32"]) + 1) & 0x7FFFFFFF)
    response = await broker.invoke(namesrv.address, request, TIMEOUT)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert await route(broker, namesrv.address, "TopicA") is None

    await register(
        broker,
        namesrv.address,
        broker_id=0,
        addr=MASTER,
        ha=MASTER_HA,
        body=topics(("TopicA", 4)),
        compressed=True,
    )
    found = await route(broker, namesrv.address, "TopicA")
    assert found is not None and found.queue_datas[0].write_queue_nums == 4


async def test_answers_in_the_request_serialisation_and_refuses_unknown_codes(
    namesrv: Daemon, remoting_client: RemotingClient
) -> None:
    request = RemotingCommand.request(
        RequestCode.GET_BROKER_CLUSTER_INFO, serialize_type=SerializeType.ROCKETMQ
    )
    response = await remoting_client.invoke(namesrv.address, request, TIMEOUT)
    assert response.serialize_type == SerializeType.ROCKETMQ
    assert response.code == ResponseCode.SUCCESS
    response = await remoting_client.invoke(
        namesrv.address, RemotingCommand.request(RequestCode.SEND_MESSAGE), TIMEOUT
    )
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def run_namesrvd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemq.broker.namesrv", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("scanNotActiveBrokerInterval=soon",), "scanNotActiveBrokerInterval"),
        (("-c", "/nonexistent/namesrv.properties"), "/nonexistent/namesrv.properties"),
    ],
)
def test_bad_configuration_stops_start_up_naming_the_key(args: tuple[str, ...], named: str) -> None:
    done = run_namesrvd(*args)
    assert done.returncode != 0
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and named in errors[0], done.stderr
    assert "listening" not in done.stdout


def test_print_config_shows_the_effective_keys(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=7777\norderMessageEnable=true\nrocketmqHome=/opt/rocketmq\n")
    done = run_namesrvd("-c", str(config), "-p", "listenPort=1234")
    assert done.returncode == 0, done.stderr
    lines = set(done.stdout.splitlines())
    assert {"listenPort=1234", "orderMessageEnable=true", "bindAddress=0.0.0.0"} <= lines
    assert {"scanNotActiveBrokerInterval=10000", "brokerChannelExpiredTime=120000"} <= lines
    assert "rocketmqHome" in done.stderr  # warned about, not fatal


def test_sigterm_and_sigint_stop_cleanly(processes: ProcessGroup) -> None:
    first, second = processes.namesrvd(), processes.namesrvd()
    assert first.signal(signal.SIGTERM) == 0
    assert "SIGTERM received, stopping" in first.log_text()
    assert f"namesrvd listening on 127.0.0.1:{first.port}" in first.log_text()
    assert second.signal(signal.SIGINT) == 0
    assert "SIGINT received, stopping" in second.log_text()
