"""Fixtures for the Spark source's tests: one local Spark session per module, real daemons.

- `spark`: a `local[2]` session with the source registered, made once per test module (start-up
  costs 10-20 s on two cores) and stopped after it; UI off, one shuffle partition, a JVM tuned
  to start fast (see client/spark/session.py).
- `cluster`: a name server and two master brokers (broker-a, broker-b) for the module.
- `Cluster.create_topic` / `Cluster.produce`: topics with a known queue layout and messages sent
  straight to chosen queues (SEND_BATCH_MESSAGE), so each test knows every (brokerName,
  queueId, queueOffset) it must read back. Message i of a run has key `<prefix>-<i>` and a body
  starting with that key. `Cluster.send` sends such messages with our producer instead, which
  spreads them over every queue of the route (both broker groups); the send results say where
  each one went.
- `standalone`: a Spark standalone cluster (a master and a worker process, see
  tests/support/spark_standalone.py) for the module, and `cluster_spark`: a session whose
  master it is, the source registered; stopped before the cluster.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tests.support.spark_standalone import SparkStandalone
from tidemq.client.api import BrokerAPI
from tidemq.client.message import Message, SendStatus
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.protocol.models import TopicConfig
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import encode_properties

BATCH = 64
FILLER = b"." * 200


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 on the PATH")
    from tidemq.client.spark import local_session

    session = local_session(
        "local[2]",
        app_name="tidemq-tests",
        conf={"spark.sql.shuffle.partitions": "1"},
        fast_start=True,
    )
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 on the PATH")
    with SparkStandalone(tmp_path_factory.mktemp("spark-standalone")) as spark_cluster:
        yield spark_cluster


@pytest.fixture(scope="module")
def cluster_spark(standalone: SparkStandalone) -> Iterator[Any]:
    """A session on the standalone cluster, using one of its cores (`spark.cores.max`): the
    other is left for a second application (a `tidemq-ingest` the test starts)."""
    from tidemq.client.spark import local_session

    session = local_session(
        standalone.master_url,
        app_name="tidemq-cluster-tests",
        conf={**standalone.driver_conf(), **CLUSTER_APP_CONF},
        fast_start=True,
    )
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()


# One core and one executor per application, one shuffle partition.
CLUSTER_APP_CONF = {
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.sql.shuffle.partitions": "1",
}


@dataclass
class Cluster:
    """Daemons of one module; `masters` maps brokerName to its master's address."""

    processes: ProcessGroup
    namesrv: Daemon
    masters: dict[str, str]
    daemons: dict[str, Daemon] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    def create_topic(
        self, topic: str, queues: int = 4, brokers: Sequence[str] | None = None
    ) -> None:
        """The topic with `queues` queues on each master, then wait for the name server's route."""
        asyncio.run(self._create_topic(topic, queues, list(brokers or self.masters)))

    async def _create_topic(self, topic: str, queues: int, brokers: list[str]) -> None:
        api = BrokerAPI()
        try:
            for name in brokers:
                await api.create_topic(self.masters[name], TopicConfig(topic, queues, queues))

            async def routed() -> bool:
                route = await api.get_route(self.namesrv_addr, topic)
                return route is not None and {q.broker_name for q in route.queue_datas} >= set(
                    brokers
                )

            await eventually(routed, f"the route of {topic} on {brokers}", 20)
        finally:
            await api.close()

    def produce(
        self,
        topic: str,
        count: int,
        prefix: str,
        queues: Sequence[tuple[str, int]],
        *,
        tags: Sequence[str | None] = ("TagA",),
        body_size: int = 0,
        batch: int = BATCH,
    ) -> dict[str, tuple[str, int]]:
        """`count` messages round robin over `queues`; returns key -> (brokerName, queueId)."""
        return asyncio.run(self._produce(topic, count, prefix, queues, tags, body_size, batch))

    async def _produce(
        self,
        topic: str,
        count: int,
        prefix: str,
        queues: Sequence[tuple[str, int]],
        tags: Sequence[str | None],
        body_size: int,
        batch: int,
    ) -> dict[str, tuple[str, int]]:
        placed: dict[str, tuple[str, int]] = {}
        per_queue: dict[tuple[str, int], list[tuple[int, bytes, str]]] = {q: [] for q in queues}
        cycle = itertools.cycle(queues)
        for i in range(count):
            key = f"{prefix}-{i}"
            queue = next(cycle)
            props: dict[str, str] = {"KEYS": key, "UNIQ_KEY": f"{prefix}-id-{i}", "WAIT": "true"}
            tag = tags[i % len(tags)]
            if tag is not None:
                props["TAGS"] = tag
            body = key.encode() + b":" + (FILLER * (body_size // len(FILLER) + 1))[:body_size]
            per_queue[queue].append((0, body, encode_properties(props)))
            placed[key] = queue
        api = BrokerAPI()
        try:
            for (broker, queue_id), messages in per_queue.items():
                for at in range(0, len(messages), batch):
                    header = SendMessageRequestHeader(
                        producer_group="spark-tests",
                        topic=topic,
                        queue_id=queue_id,
                        born_timestamp=int(time.time() * 1000),
                        batch=True,
                    )
                    body = encode_batch_body(messages[at : at + batch])
                    result = await api.send(
                        self.masters[broker], header, body, batch=True, timeout=15
                    )
                    assert result.status is SendStatus.SEND_OK, result
        finally:
            await api.close()
        return placed

    def send(
        self, topic: str, count: int, prefix: str, *, batch: int = 32, body_size: int = 0
    ) -> dict[str, tuple[str, int]]:
        """`count` messages by our producer in batches; returns key -> (brokerName, queueId)."""
        return asyncio.run(self._send(topic, count, prefix, batch, body_size))

    async def _send(
        self, topic: str, count: int, prefix: str, batch: int, body_size: int
    ) -> dict[str, tuple[str, int]]:
        placed: dict[str, tuple[str, int]] = {}
        filler = (FILLER * (body_size // len(FILLER) + 1))[:body_size]
        async with AsyncProducer("spark-tests-producer", self.namesrv_addr) as producer:
            for at in range(0, count, batch):
                keys = [f"{prefix}-{i}" for i in range(at, min(count, at + batch))]
                messages = [
                    Message(topic, key.encode() + b":" + filler, tags="TagA", keys=key)
                    for key in keys
                ]
                result = await producer.send_batch(messages, timeout=15)
                assert result.ok, result
                queue = result.message_queue
                placed.update((key, (queue.broker_name, queue.queue_id)) for key in keys)
        return placed

    def max_offsets(
        self, topic: str, queues: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        return asyncio.run(self._offsets(topic, queues, "max"))

    def min_offsets(
        self, topic: str, queues: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        return asyncio.run(self._offsets(topic, queues, "min"))

    async def _offsets(
        self, topic: str, queues: Sequence[tuple[str, int]], which: str
    ) -> dict[tuple[str, int], int]:
        api = BrokerAPI()
        try:
            out = {}
            for broker, queue_id in queues:
                ask = api.get_max_offset if which == "max" else api.get_min_offset
                out[(broker, queue_id)] = await ask(self.masters[broker], topic, queue_id)
            return out
        finally:
            await api.close()


def start_cluster(
    processes: ProcessGroup, root: Path, brokers: Sequence[str], *overrides: str
) -> Cluster:
    namesrv = processes.namesrvd(name="namesrvd")
    cluster = Cluster(processes, namesrv, {})
    for name in brokers:
        daemon = processes.brokerd(
            namesrv.address, root / name, f"brokerName={name}", *overrides, name=name
        )
        cluster.masters[name] = daemon.address
        cluster.daemons[name] = daemon
    return cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("spark-cluster")
    processes = ProcessGroup(root / "logs")
    try:
        yield start_cluster(processes, root, ["broker-a", "broker-b"])
    finally:
        processes.stop_all()


def spark_subprocess_env() -> dict[str, str]:
    """The environment a Spark driver subprocess of a test runs with."""
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env
