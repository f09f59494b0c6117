"""What operators see of the RocketMQ 5 side, with real processes: namesrvd and brokerd, the
official Python 5.x SimpleConsumer (`.venv-rmq5`) and the official Node.js producer connected,
and `mqadmin` run as the installed console script (--json):

- grpcClientConnection lists both clients with the language and version of their settings
  (the Node.js client's `x-mq-language` header says "HTTP"; its settings say NODE_JS);
- popConsumerProgress shows the group's pop offset, messages in flight and still invisible,
  and the acknowledgements, per queue;
- getTimerMetrics counts timer messages waiting per topic, down as they are delivered, and
  keeps the counts across a broker restart (config/timermetrics); a slave shows its master's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.ha_processes import start_master, start_slave
from tests.support.processes import BROKER_BOOTED, Daemon, ProcessGroup
from tests.support.rmq5_clients import GrpcCluster, Rmq5Consumer, grpc_cluster
from tests.support.rmq5node_clients import NodeClient
from tidemq.client.admin.api import AdminClient
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.models import TopicConfig

pytestmark = pytest.mark.asyncio

MQADMIN = Path(sys.executable).parent / "mqadmin"


Cluster = GrpcCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with grpc_cluster(
        tmp_path_factory.mktemp("operators5"),
        "minInvisibleTimeMillsForRecv=1000",
        "timerFlushIntervalMs=200",
    ) as started:
        yield started


@pytest.fixture
async def closing() -> AsyncIterator[list[Rmq5Consumer | NodeClient]]:
    started: list[Rmq5Consumer | NodeClient] = []
    try:
        yield started
    finally:
        for client in started:
            await client.close()


async def create_topic(cluster: Cluster, name: str, queues: int = 2) -> str:
    admin = AdminClient(cluster.namesrv.address)
    try:
        await admin.create_topic(cluster.broker.address, TopicConfig(name, queues, queues))

        async def routed() -> bool:
            return bool(await admin.api.get_route(cluster.namesrv.address, name))

        await eventually(routed, f"the route of {name}", 15)
    finally:
        await admin.close()
    return name


async def mqadmin(cluster: Cluster, *args: str, code: int = 0) -> Any:
    """The console script's --json answer (its stderr line when `code` is not 0)."""
    process = await asyncio.create_subprocess_exec(
        str(MQADMIN),
        "--json",
        args[0],
        "-n",
        cluster.namesrv.address,
        *args[1:],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == code, (args, out, err)
    return json.loads(out) if code == 0 else err.decode()


async def send_4x(cluster: Cluster, messages: list[Message]) -> None:
    async with AsyncProducer("PG-ops5", cluster.namesrv.address) as producer:
        for message in messages:
            await producer.send(message)


async def test_grpc_clients_are_listed_with_language_and_version(
    cluster: Cluster, closing: list[Rmq5Consumer | NodeClient]
) -> None:
    topic = await create_topic(cluster, "OPS5-clients")
    consumer = await Rmq5Consumer.start(
        cluster.endpoint, mode="simple", topic=topic, group="G-ops5-clients", await_seconds=1
    )
    closing.append(consumer)
    log = cluster.root / "logs" / "node-producer-ops5.log"
    producer = await NodeClient.start(cluster.endpoint, log, role="producer", topic=topic)
    closing.append(producer)

    async def both() -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = await mqadmin(cluster, "grpcClientConnection", "-t", topic)
        kinds = {c["clientType"] for c in listed}
        return listed if kinds == {"PRODUCER", "SIMPLE_CONSUMER"} else []

    await eventually(both, "both clients listed", 30)
    listed = {c["clientType"]: c for c in await both()}
    python, node = listed["SIMPLE_CONSUMER"], listed["PRODUCER"]
    assert (python["language"], python["version"]) == ("PYTHON", "5.1.2")
    assert python["group"] == "G-ops5-clients" and python["topics"] == [topic]
    assert python["brokerName"] == "broker-a" and python["clientAddr"].startswith("127.0.0.1:")
    assert (node["language"], node["version"]) == ("NODE_JS", "1.0.8")  # not its "HTTP" header
    assert node["topics"] == [topic] and node["group"] == ""
    assert abs(python["lastHeartbeatTimestamp"] - time.time() * 1000) < 60_000
    only = await mqadmin(cluster, "grpcClientConnection", "-g", "G-ops5-clients")
    assert [c["clientId"] for c in only] == [python["clientId"]]
    # consumerConnection lists the group's 5.x consumers, as RocketMQ 5 does.
    connection = await mqadmin(cluster, "consumerConnection", "-g", "G-ops5-clients")
    assert [c["clientId"] for c in connection["grpcClients"]] == [python["clientId"]]
    assert connection["grpcClients"][0]["language"] == "PYTHON"
    producers = await mqadmin(cluster, "grpcClientConnection", "-r", "producer", "-t", topic)
    assert [c["clientId"] for c in producers] == [node["clientId"]]
    # Gone from the list once they end (NotifyClientTermination).
    await consumer.close()
    await producer.close()

    async def none_left() -> bool:
        return not await mqadmin(cluster, "grpcClientConnection", "-t", topic)

    await eventually(none_left, "the clients forgotten", 30)


async def test_pop_progress_shows_in_flight_invisible_and_acknowledged(
    cluster: Cluster, closing: list[Rmq5Consumer | NodeClient]
) -> None:
    topic = await create_topic(cluster, "OPS5-pop", queues=1)
    group = "G-ops5-pop"
    await send_4x(cluster, [Message(topic, f"m{i}".encode()) for i in range(5)])
    consumer = await Rmq5Consumer.start(
        cluster.endpoint, mode="simple", topic=topic, group=group, await_seconds=1
    )
    closing.append(consumer)
    got = await consumer.receive_until(5, invisible=120)
    for message in got[:2]:
        await consumer.call(op="ack", id=message["id"])

    async def settled() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = await mqadmin(cluster, "popConsumerProgress", "-g", group)
        return rows if rows and rows[0]["acked"] == 2 else []

    await eventually(settled, "two acknowledgements read", 30)
    [row] = [r for r in await settled() if r["topic"] == topic]
    assert (row["queueId"], row["brokerOffset"], row["popOffset"], row["diff"]) == (0, 5, 5, 0)
    assert (row["inFlight"], row["invisible"], row["acked"]) == (3, 3, 2)
    assert row["brokerName"] == "broker-a"
    # consumerProgress shows the same beside the offsets (RocketMQ 5's #Inflight column).
    progress = await mqadmin(cluster, "consumerProgress", "-g", group, "-t", topic)
    [queue] = progress["queues"]
    assert (queue["inflight"], queue["invisible"], queue["acked"]) == (3, 3, 2), queue
    # A group that never popped: one line, exit 1.
    error = await mqadmin(cluster, "popConsumerProgress", "-g", "G-never", code=1)
    assert "G-never has no POP consumption" in error and "Traceback" not in error


async def test_timer_metrics_count_per_topic_and_survive_a_restart(cluster: Cluster) -> None:
    far, near = (
        await create_topic(cluster, "OPS5-timer-far"),
        await create_topic(cluster, "OPS5-timer-near"),
    )
    later = [Message(far, b"later", delay_ms=600_000), Message(far, b"later 2", delay_ms=600_000)]
    await send_4x(cluster, [*later, Message(near, b"soon", delay_ms=1500)])
    address = cluster.broker.address

    async def pending() -> dict[str, int]:
        rows = await mqadmin(cluster, "getTimerMetrics", "-b", address)
        return {r["topic"]: r["pending"] for r in rows}

    async def counted(expected: dict[str, int]) -> bool:
        shown = await pending()
        return {t: shown.get(t, 0) for t in expected} == expected

    # Both parked, then the near one delivered and no longer counted.
    await eventually(lambda: counted({far: 2}), "the far timers counted", 30)
    await eventually(lambda: counted({far: 2, near: 0}), "the near timer delivered", 30)
    broker = cluster.broker
    broker.stop()
    cluster.broker = cluster.processes.start(
        broker.args, port=broker.port, name="brokerd-restarted", ready_text=BROKER_BOOTED
    )
    assert (await pending()).get(far) == 2  # read back from config/timermetrics


async def test_a_slave_copies_its_masters_timer_metrics(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """A slave shows its master's timers waiting per topic (GET_TIMER_METRICS copied by
    SlaveSynchronize, as RocketMQ 5's slaves do): it counts none itself, delivering none."""
    master, _ha_port = start_master(processes, namesrv, tmp_path / "master", role="ASYNC_MASTER")
    slave = start_slave(processes, namesrv, tmp_path / "slave", "slaveSynchronizeInterval=500")
    admin = AdminClient(namesrv.address)
    try:
        await admin.create_topic(master.address, TopicConfig("OPS5-slave-timers", 1, 1))
        async with AsyncProducer("PG-ops5-slave", namesrv.address) as producer:
            for body in (b"one", b"two"):
                await producer.send(Message("OPS5-slave-timers", body, delay_ms=600_000))

        async def copied() -> bool:
            counts = await admin.timer_metrics(slave.address)
            return [(c.topic, c.count) for c in counts] == [("OPS5-slave-timers", 2)]

        await eventually(copied, "the master's timer metrics on the slave", 30)
    finally:
        await admin.close()
