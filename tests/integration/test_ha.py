"""Master/slave replication with real processes: namesrvd, a master, a slave."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING, ha_status, wait_caught_up, wait_slave_connected
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer
from tidemq.client.errors import ServiceNotAvailableError
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import SubscriptionGroupConfig

pytestmark = pytest.mark.asyncio


def start_pair(
    processes: ProcessGroup,
    namesrv: Daemon,
    tmp_path: Path,
    *,
    role: str = "SYNC_MASTER",
    master_extra: tuple[str, ...] = (),
    slave_extra: tuple[str, ...] = (),
    start_slave: bool = True,
) -> tuple[Daemon, Daemon | None]:
    master = processes.brokerd(
        namesrv.address,
        tmp_path / "master",
        f"brokerRole={role}",
        *HA_TIMING,
        *master_extra,
        name="master",
    )
    slave = None
    if start_slave:
        slave = start_slave_broker(processes, namesrv, tmp_path, *slave_extra)
    return master, slave


def start_slave_broker(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, *extra: str, port: int | None = None
) -> Daemon:
    return processes.brokerd(
        namesrv.address,
        tmp_path / "slave",
        "brokerRole=SLAVE",
        "brokerId=1",
        *HA_TIMING,
        *extra,
        port=port,
        name="slave",
    )


def commitlog_bytes(store: Path, upto: int) -> bytes:
    files = sorted((store / "commitlog").iterdir())
    data = b"".join(f.read_bytes() for f in files if f.name.isdigit())
    first = int(files[0].name)
    assert first == 0
    return data[:upto]


async def test_sync_master_replicates_byte_identical(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, slave = start_pair(processes, namesrv, tmp_path)
    assert slave is not None
    await wait_slave_connected(api, master)
    sem = asyncio.Semaphore(64)
    statuses: list[SendStatus] = []

    async def send(i: int) -> None:
        async with sem:
            result = await api.send(
                master.address,
                send_header("HA1", i % 4, TAGS=f"t{i % 3}", KEYS=f"k{i}"),
                os.urandom(100 + i % 900),
            )
            statuses.append(result.status)

    await asyncio.gather(*(send(i) for i in range(10_000)))
    assert statuses.count(SendStatus.SEND_OK) == 10_000
    end = await wait_caught_up(api, master, slave)
    assert commitlog_bytes(tmp_path / "slave", end) == commitlog_bytes(tmp_path / "master", end)
    # The slave's own dispatch built the queues: pulls from it return the master's messages.
    for queue_id in range(4):
        from_master = await api.pull(master.address, pull_header("HA1", queue_id, 100))
        from_slave = await api.pull(slave.address, pull_header("HA1", queue_id, 100))
        assert from_slave.status is PullStatus.FOUND
        assert [m.msg_id for m in from_slave.messages] == [m.msg_id for m in from_master.messages]
        assert [m.body for m in from_slave.messages] == [m.body for m in from_master.messages]


async def test_no_slave_gives_slave_not_available(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, _ = start_pair(processes, namesrv, tmp_path, start_slave=False)
    result = await api.send(master.address, send_header("HA2", 0), b"m")
    assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
    # Stored on the master all the same.
    assert await api.get_max_offset(master.address, "HA2", 0) == 1
    assert "no slave is connected" in master.log_text()


async def test_async_master_answers_without_slave(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, _ = start_pair(processes, namesrv, tmp_path, role="ASYNC_MASTER", start_slave=False)
    result = await api.send(master.address, send_header("HA3", 0), b"m")
    assert result.status is SendStatus.SEND_OK


async def test_stopped_slave_gives_flush_slave_timeout_then_recovers(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, slave = start_pair(
        processes,
        namesrv,
        tmp_path,
        master_extra=("slaveTimeout=1000", "haHousekeepingInterval=20000"),
    )
    assert slave is not None and slave.pid is not None
    await wait_slave_connected(api, master)
    assert (
        await api.send(master.address, send_header("HA4", 0), b"a")
    ).status is SendStatus.SEND_OK
    os.kill(slave.pid, signal.SIGSTOP)
    try:
        # Answered within the client's 10 s: slaveTimeout (1 s) ended the wait, not the 20 s
        # housekeeping that would drop the slave (a condition, not a clock).
        result = await api.send(master.address, send_header("HA4", 0), b"b", timeout=10)
        assert result.status is SendStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        os.kill(slave.pid, signal.SIGCONT)
    result = await api.send(master.address, send_header("HA4", 0), b"c", timeout=10)
    assert result.status is SendStatus.SEND_OK


async def test_late_slave_catches_up_and_serves_pulls(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, _ = start_pair(processes, namesrv, tmp_path, role="ASYNC_MASTER", start_slave=False)
    for i in range(500):
        await api.send(master.address, send_header("HA5", 0), b"late-%d" % i)
    slave = start_slave_broker(processes, namesrv, tmp_path)
    end = await wait_caught_up(api, master, slave)
    assert commitlog_bytes(tmp_path / "slave", end) == commitlog_bytes(tmp_path / "master", end)

    async def topic_synced() -> bool:
        return "HA5" in (await api.all_topic_config(slave.address)).topic_config_table

    await eventually(topic_synced, "SlaveSynchronize to copy the topic", 15)
    pulled = await api.pull(slave.address, pull_header("HA5", 0, 0))
    assert [m.body for m in pulled.messages][:3] == [b"late-0", b"late-1", b"late-2"]
    # Sends to a slave are refused.
    with pytest.raises(ServiceNotAvailableError):
        await api.send(slave.address, send_header("HA5", 0), b"x")


async def test_cold_consumer_is_told_to_read_from_the_slave(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    # A tiny RAM figure makes every message "cold" (accessMessageInMemoryMaxRatio of 4 KiB).
    master, slave = start_pair(
        processes,
        namesrv,
        tmp_path,
        role="ASYNC_MASTER",
        master_extra=(
            "slaveReadEnable=true",
            "physicalMemoryBytes=10240",
            "accessMessageInMemoryMaxRatio=40",
        ),
    )
    assert slave is not None
    for _ in range(20):
        await api.send(master.address, send_header("HA6", 0), os.urandom(1000))
    pulled = await api.pull(master.address, pull_header("HA6", 0, 0))
    assert pulled.suggest_which_broker_id == 1
    # A group configured to read from the slave (updateSubGroup -i 1) is pointed there too.
    await api.update_subscription_group(
        master.address, SubscriptionGroupConfig("CG-slave", broker_id=1)
    )
    master_only = await api.pull(master.address, pull_header("HA6", 0, 0, group="CG-slave"))
    assert master_only.suggest_which_broker_id == 1


async def test_slave_synchronize_copies_tables_and_keeps_larger_offsets(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, slave = start_pair(processes, namesrv, tmp_path, role="ASYNC_MASTER")
    assert slave is not None
    await api.send(master.address, send_header("HA7", 0), b"m")
    await api.update_consumer_offset(master.address, "G", "HA7", 0, 5)
    await api.update_consumer_offset(slave.address, "G", "HA7", 1, 9)

    async def synced() -> bool:
        topics = await api.all_topic_config(slave.address)
        offset0 = await api.query_consumer_offset(slave.address, "G", "HA7", 0)
        return "HA7" in topics.topic_config_table and offset0 == 5

    await eventually(synced, "SlaveSynchronize to copy the master's tables", 15)
    # An offset committed to the slave (master down, say) is not overwritten by the master's.
    await api.update_consumer_offset(master.address, "G", "HA7", 1, 3)
    await asyncio.sleep(1.5)
    assert await api.query_consumer_offset(slave.address, "G", "HA7", 1) == 9


async def test_consumer_reads_from_slave_with_master_down(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, slave = start_pair(processes, namesrv, tmp_path, role="ASYNC_MASTER")
    assert slave is not None
    for i in range(50):
        await api.send(master.address, send_header("HA8", 0), b"m%d" % i)
    await wait_caught_up(api, master, slave)
    master.kill()
    route = await api.get_route(namesrv.address, "HA8")
    assert route is not None
    assert route.broker_datas[0].broker_addrs == {1: slave.address}
    pulled = await api.pull(slave.address, pull_header("HA8", 0, 10))
    assert [m.body for m in pulled.messages][:2] == [b"m10", b"m11"]
    await api.update_consumer_offset(slave.address, "G8", "HA8", 0, 12)
    assert await api.query_consumer_offset(slave.address, "G8", "HA8", 0) == 12


async def test_push_consumer_moves_to_the_slave_when_its_master_dies(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    """A consumer with a backlog whose master is SIGKILLed goes on from the slave: its failed
    pull asks for the route at once (issue 16). Its periodic route refresh is 600 s here, so
    only that can bring it to the slave within the test."""
    master, slave = start_pair(processes, namesrv, tmp_path, role="ASYNC_MASTER")
    assert slave is not None
    for i in range(300):
        await api.send(master.address, send_header("HA9", 0), b"b%d" % i)
    await wait_caught_up(api, master, slave)
    delivered: list[bytes] = []

    async def listener(message: ReceivedMessage) -> None:
        await asyncio.sleep(0.005)  # a backlog remains when the master dies
        delivered.append(message.body)

    consumer = AsyncPushConsumer(
        "G9",
        config=ClientConfig.create(namesrv.address, poll_name_server_interval=600.0),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        pull_batch_size=1,
        pull_threshold_for_queue=1,
        max_concurrency=1,
        offset_store_dir=tmp_path / "offsets",
    )
    consumer.subscribe("HA9", "*", listener)
    await consumer.start()
    try:
        await eventually(lambda: len(delivered) >= 20, "the first deliveries", 30)
        master.kill()
        await eventually(lambda: len(set(delivered)) == 300, "the backlog read from the slave", 60)
    finally:
        await consumer.shutdown()
    assert delivered[:20] == [b"b%d" % i for i in range(20)]


async def test_ha_status_reports_both_sides(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    master, slave = start_pair(processes, namesrv, tmp_path)
    assert slave is not None
    await wait_slave_connected(api, master)
    await api.send(master.address, send_header("HA9", 0), b"m")
    info = await ha_status(api, master.address)
    assert info["master"] is True
    conns = info["haConnectionInfo"]
    assert isinstance(conns, list) and len(conns) == 1
    assert conns[0]["state"] == "TRANSFER"
    assert conns[0]["slaveAckOffset"] == info["masterCommitLogMaxOffset"]
    slave_info = await ha_status(api, slave.address)
    assert slave_info["master"] is False
    assert slave_info["state"] == "TRANSFER"
    assert slave_info["maxOffset"] == info["masterCommitLogMaxOffset"]
    # What the slave received and has not dispatched yet: none, once dispatch has followed.
    assert isinstance(slave_info["dispatchBehindBytes"], int)
    await eventually(
        lambda: _dispatch_behind(api, slave.address), "the slave's dispatch to catch up"
    )


async def _dispatch_behind(api: BrokerAPI, address: str) -> bool:
    return (await ha_status(api, address))["dispatchBehindBytes"] == 0
