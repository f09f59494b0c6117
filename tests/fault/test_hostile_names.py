"""Hostile names against a real name server, SYNC_MASTER and SLAVE: each request is refused
naming its field, nothing is written or deleted outside the stores, dispatch keeps up on both
brokers, and both restart and serve.

These are the requests that, before the name gate (broker/name_gate.py), wrote a ConsumeQueue
folder outside the store and stopped dispatch for good (a CONSUMER_SEND_MSG_BACK whose group
held `../`), deleted folders outside the store (DELETE_TOPIC_IN_BROKER of `../x` or an absolute
path), stopped dispatch and restarts (a group with a NUL byte), created `%RETRY%` topics from
hostile groups (HEART_BEAT) or made a retry that could never be delivered (a group whose
`%RETRY%` topic is over 127 characters). What the test cannot see: names in requests it does
not send (the unit test test_name_gate.py checks that every served code is gated, and the
request fuzzer in tests/fuzz sends the rest).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from tests.support.conditions import eventually
from tests.support.ha_processes import start_master, start_slave, wait_caught_up, wait_transfer
from tests.support.processes import REPO_ROOT, Daemon, ProcessGroup
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.protocol.heartbeat import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    ProducerData,
    SubscriptionData,
)
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.json_body import dumps

TOPIC: Final = "HostileNamesControl"
ESCAPES: Final = ("../escaped", "../../escaped", "..", "/tmp/tidemq-escaped", "a\0b", "a/b")


@dataclass(slots=True)
class Cluster:
    root: Path  # holds the stores, the logs, and a victim folder beside them
    processes: ProcessGroup
    namesrv: Daemon
    master: Daemon
    slave: Daemon
    ha_port: int


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    root = tmp_path / "sandbox"
    processes = ProcessGroup(root / "logs")
    try:
        namesrv = processes.namesrvd(name="namesrvd")
        master, ha_port = start_master(processes, namesrv, root / "store-master")
        slave = start_slave(processes, namesrv, root / "store-slave")
        yield Cluster(root, processes, namesrv, master, slave, ha_port)
    finally:
        processes.stop_all()


@pytest.fixture
async def api() -> AsyncIterator[BrokerAPI]:
    client = BrokerAPI(timeout=5.0)
    try:
        yield client
    finally:
        await client.close()


def tree(folder: Path, skip: set[str]) -> set[str]:
    """Every path under `folder` (relative), leaving out the top-level entries in `skip`."""
    found: set[str] = set()
    for base, dirs, files in os.walk(folder):
        relative = os.path.relpath(base, folder)
        if relative == ".":
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        found.update(os.path.normpath(os.path.join(relative, name)) for name in dirs + files)
    return found


def escaped_to_tmp() -> bool:
    return os.path.lexists("/tmp/tidemq-escaped")


def heartbeat(producer: str, consumer: str, topic: str) -> bytes:
    subscription = SubscriptionData.from_expression(topic, "*")
    consumers = [ConsumerData(consumer, subscriptions=[subscription])]
    return HeartbeatData("hostile-client", [ProducerData(producer)], consumers).encode()


def hostile_requests(offset: int) -> Iterator[tuple[str, int, dict[str, str], bytes]]:
    """(field the remark must name, code, extFields, body) for each hostile request."""
    for name in ESCAPES:
        yield (
            "group",
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": str(offset),
                "group": name,
                "delayLevel": "-1",  # straight to %DLQ%<group>
                "originTopic": TOPIC,
            },
            b"",
        )
        yield "topic", RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name}, b""
        yield "topic", RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": name}, b""
        yield "topic", RequestCode.GET_MAX_OFFSET, {"topic": name, "queueId": "0"}, b""
        yield (
            "consumerGroup",
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": name,
                "topic": TOPIC,
                "queueId": "0",
                "commitOffset": "1",
            },
            b"",
        )
        yield "consumerDataSet.groupName", RequestCode.HEART_BEAT, {}, heartbeat("P", name, TOPIC)
        yield "subscriptionDataSet.topic", RequestCode.HEART_BEAT, {}, heartbeat("P", "C", name)
        yield "producerDataSet.groupName", RequestCode.HEART_BEAT, {}, heartbeat(name, "C", TOPIC)
        lock = LockBatchRequestBody(name, "c", [MessageQueue(TOPIC, "b", 0)])
        yield "consumerGroup", RequestCode.LOCK_BATCH_MQ, {}, lock.encode()
        group = dumps({"groupName": name, "retryQueueNums": 1})
        yield "groupName", RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group
    too_long = "g" * 121  # its %RETRY% topic would be 128 characters: no delivery possible
    yield (
        "group",
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "offset": str(offset),
            "group": too_long,
            "delayLevel": "1",
        },
        b"",
    )
    yield "consumerDataSet.groupName", RequestCode.HEART_BEAT, {}, heartbeat("P", too_long, TOPIC)


async def send_and_read_back(api: BrokerAPI, cluster: Cluster, body: bytes) -> None:
    sent = await api.send(cluster.master.address, send_header(TOPIC, 0), body)
    assert sent.status is SendStatus.SEND_OK, sent
    for broker in (cluster.master, cluster.slave):

        async def readable(broker: Daemon = broker) -> bool:
            pulled = await api.pull(broker.address, pull_header(TOPIC, 0, sent.queue_offset))
            return pulled.status is PullStatus.FOUND and pulled.messages[0].body == body

        await eventually(readable, f"{body!r} pullable from {broker.name}", 15.0)


async def test_hostile_names_are_refused_and_nothing_leaves_the_stores(
    cluster: Cluster, api: BrokerAPI
) -> None:
    victim = cluster.root / "victim"
    (victim / "0").mkdir(parents=True)
    await wait_transfer(api, cluster.master)
    await api.create_topic(cluster.master.address, TopicConfig(TOPIC, 4, 4))
    sent = await api.send(cluster.master.address, send_header(TOPIC, 0), b"before")
    assert sent.status is SendStatus.SEND_OK, sent
    skip = {"store-master", "store-slave", "logs"}
    before, repo_before = tree(cluster.root.parent, skip | {"sandbox"}), set(os.listdir(REPO_ROOT))
    sandbox_before = tree(cluster.root, skip)

    first_record = 0  # "before" is the first record of the new store
    for field, code, ext, body in hostile_requests(first_record):
        request = api.request(code, ext, body)
        response = await api.invoke(cluster.master.address, request)
        what = f"{RequestCode(code).name} {ext} {body[:80]!r}"
        assert response.code == ResponseCode.SYSTEM_ERROR, (what, response)
        assert (response.remark or "").startswith(f"{field}: "), (what, response.remark)

    assert (victim / "0").is_dir()
    assert tree(cluster.root, skip) == sandbox_before
    assert tree(cluster.root.parent, skip | {"sandbox"}) == before
    assert set(os.listdir(REPO_ROOT)) == repo_before
    assert not escaped_to_tmp()
    topics = await api.all_topic_config(cluster.master.address)
    assert all("/" not in t and "." not in t for t in topics.topic_config_table), topics

    # Dispatch kept up on both: a message sent after the hostile requests is read from each.
    await send_and_read_back(api, cluster, b"after")
    await wait_caught_up(api, cluster.master, cluster.slave)

    # Both restart on their stores and serve.
    for daemon in (cluster.slave, cluster.master):
        assert daemon.stop() == 0, daemon.log_tail()
    namesrv, processes = cluster.namesrv, cluster.processes
    cluster.master, _ = start_master(
        processes,
        namesrv,
        cluster.root / "store-master",
        port=cluster.master.port,
        ha_port=cluster.ha_port,
        name="master-again",
    )
    cluster.slave = start_slave(
        processes,
        namesrv,
        cluster.root / "store-slave",
        port=cluster.slave.port,
        name="slave-again",
    )
    await wait_transfer(api, cluster.master)
    await send_and_read_back(api, cluster, b"after restart")
