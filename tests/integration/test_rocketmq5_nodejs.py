"""The official RocketMQ 5 Node.js client (`rocketmq-client-nodejs` from npm, pinned in
tests/support/rmq5node/package.json) against real namesrvd and brokerd processes: Producer
normal, FIFO, delay and transactional sends (and the broker's transaction check over
Telemetry); SimpleConsumer receive, ack, change of invisible duration and redelivery after it
expires; PushConsumer; messages crossing with tidemq's 4.x client and with RocketMQ's C++ 4.x
client both ways; a broker restarted under a producer and a consumer that stay up.

One name server and one broker for the module (`--dist loadscope` runs the module in one
worker); each test has its own topics and groups. Each client is a `node` process
(tests/support/rmq5node/client.js) driven line by line."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.cpp_peers import SEND_OK, run_peer
from tests.support.processes import BROKER_BOOTED
from tests.support.rmq5_clients import LEVELS, GrpcCluster, grpc_cluster
from tests.support.rmq5node_clients import NodeClient
from tidemq.client.admin.api import AdminClient
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig

pytestmark = pytest.mark.asyncio

# Short invisible durations for the redelivery cases (ProxyConfig's minimum is 10 s); a quick
# transaction check for the checker case.
BROKER_OVERRIDES = (
    LEVELS,
    "minInvisibleTimeMillsForRecv=1000",
    "transactionTimeOut=1000",
    "transactionCheckInterval=1000",
)


Cluster = GrpcCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with grpc_cluster(tmp_path_factory.mktemp("nodejs"), *BROKER_OVERRIDES) as started:
        yield started


@pytest.fixture
async def clients(cluster: Cluster) -> AsyncIterator[list[NodeClient]]:
    """Every Node.js client a test starts, closed (killed if need be) at its end."""
    started: list[NodeClient] = []
    try:
        yield started
    finally:
        for client in started:
            await client.close()


async def topic(cluster: Cluster, name: str, queues: int = 4) -> str:
    admin = AdminClient(cluster.namesrv.address)
    try:
        await admin.create_topic(cluster.broker.address, TopicConfig(name, queues, queues))

        async def routed() -> bool:
            return bool(await admin.api.get_route(cluster.namesrv.address, name))

        await eventually(routed, f"the route of {name}", 15)
    finally:
        await admin.close()
    return name


async def start(
    cluster: Cluster, clients: list[NodeClient], role: str, **request: Any
) -> NodeClient:
    log = cluster.root / "logs" / f"node-{role}-{request.get('topic', '')}-{len(clients)}.log"
    client = await NodeClient.start(cluster.endpoint, log, role=role, **request)
    clients.append(client)
    return client


async def consume_4x(cluster: Cluster, name: str, count: int) -> list[ReceivedMessage]:
    """`count` messages of topic `name`, read by tidemq's 4.x push consumer from its start."""
    received: list[ReceivedMessage] = []

    async def listener(message: ReceivedMessage) -> ConsumeResult:
        received.append(message)
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(
        f"G4-{name}",
        config=ClientConfig.create(cluster.namesrv.address, poll_name_server_interval=1.0),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(name, "*", listener)
    await consumer.start()
    try:
        await eventually(lambda: len(received) >= count, f"{count} messages of {name}", 30)
    finally:
        await consumer.shutdown()
    return received


async def send_4x(cluster: Cluster, name: str, bodies: list[str], tag: str = "") -> None:
    producer = AsyncProducer("PG-node", cluster.namesrv.address)
    await producer.start()
    try:
        for body in bodies:
            await producer.send(Message(name, body.encode(), tags=tag or None))
    finally:
        await producer.stop()


def ok(answer: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in answer, answer
    return answer


async def test_node_producer_normal_fifo_and_delay_read_by_a_4x_consumer(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    name = await topic(cluster, "NODE-kinds")
    producer = await start(cluster, clients, "producer", topic=name)
    normal = ok(
        await producer.send(
            body="héllo from node", tag="TagA", keys=["k1", "k2"], properties={"region": "eu"}
        )
    )
    fifo = [ok(await producer.send(body=f"fifo-{i}", message_group="g-1")) for i in range(4)]
    sent_at_ms = time.time() * 1000
    delayed = ok(await producer.send(body="later", delay_ms=2000))
    received = await consume_4x(cluster, name, 6)
    by_id = {m.msg_id: m for m in received}
    first = by_id[normal["message_id"]]  # the 5.x message id is the 4.x msgId
    assert first.body == "héllo from node".encode() and first.tags == "TagA"
    assert set(first.key_list) == {"k1", "k2"} and first.properties["region"] == "eu"
    assert first.queue_offset == normal["offset"]
    in_group = [by_id[r["message_id"]] for r in fifo]
    assert len({m.queue_id for m in in_group}) == 1  # one message group, one queue
    assert [m.queue_offset for m in in_group] == sorted(m.queue_offset for m in in_group)
    later = by_id[delayed["message_id"]]
    deliver_ms = int(later.properties["TIMER_DELIVER_MS"])
    assert deliver_ms >= sent_at_ms + 2000 - 50  # the client's clock: its own Date.now()
    assert later.store_timestamp >= deliver_ms  # put into the topic by the timer wheel, not before


async def test_node_transactions_commit_roll_back_and_answer_the_brokers_check(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    name = await topic(cluster, "NODE-tx")
    producer = await start(cluster, clients, "producer", topic=name, check="commit")
    committed = ok(await producer.send(body="committed", transaction="commit"))
    ok(await producer.send(body="rolled back", transaction="rollback"))
    left = ok(await producer.send(body="left open", transaction="leave"))
    # The open one: the broker's check reaches the checker over Telemetry, which commits it.
    received = await consume_4x(cluster, name, 2)
    assert sorted(m.body for m in received) == [b"committed", b"left open"]
    assert {m.msg_id for m in received} == {committed["message_id"], left["message_id"]}
    checked = producer.checks or [await producer.answer(timeout=30)]  # printed on its own
    assert checked[0] == {"checked": left["message_id"], "topic": name}
    admin = AdminClient(cluster.namesrv.address)
    try:  # the rollback stored nothing in the topic
        stats = await admin.topic_stats(cluster.broker.address, name)
    finally:
        await admin.close()
    assert sum(o.max_offset for o in stats.offset_table.values()) == 2


async def test_node_simple_consumer_acks_changes_and_gets_redeliveries(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    """Messages of tidemq's 4.x producer: one acknowledged, one left to expire (back with its
    second attempt), one whose invisible duration is extended (not back while extended, and its
    new handle acknowledges)."""
    name = await topic(cluster, "NODE-simple", queues=1)
    await send_4x(cluster, name, ["ack-me", "let-expire", "extend"], tag="T")
    consumer = await start(cluster, clients, "simple", topic=name, group="GN-simple", await_ms=1000)
    first = {m["body"]: m for m in await consumer.receive_until(3, invisible_ms=10_000)}
    assert set(first) == {"ack-me", "let-expire", "extend"}
    assert {m["attempt"] for m in first.values()} == {1}
    assert {m["tag"] for m in first.values()} == {"T"} and {m["topic"] for m in first.values()} == {
        name
    }
    ok(await consumer.call(op="ack", id=first["ack-me"]["id"]))
    changed = ok(await consumer.call(op="change", id=first["extend"]["id"], invisible_ms=60_000))
    assert changed["handle"] != first["extend"]["handle"]
    back: list[dict[str, Any]] = []
    deadline = time.monotonic() + 40
    while not back:
        assert time.monotonic() < deadline, "let-expire never came back"
        back = await consumer.receive(invisible_ms=60_000)
    assert [(m["body"], m["attempt"]) for m in back] == [("let-expire", 2)]
    assert back[0]["id"] == first["let-expire"]["id"]
    ok(await consumer.call(op="ack", id=back[0]["id"]))
    ok(await consumer.call(op="ack", id=first["extend"]["id"]))  # with its new handle
    for _ in range(3):  # nothing acknowledged comes back
        assert await consumer.receive(invisible_ms=60_000) == []


async def test_a_change_of_invisible_duration_to_zero_gives_the_message_back(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    """What the Node.js push consumer does with a failed message (its retry policy ignores the
    CUSTOMIZED backoff of the settings, so its delay is 0): the message comes back with its
    next attempt, as RocketMQ does; the broker refused 0 and the message waited for its whole
    invisible time."""
    name = await topic(cluster, "NODE-nack", queues=1)
    await send_4x(cluster, name, ["nack-me"])
    consumer = await start(cluster, clients, "simple", topic=name, group="GN-nack", await_ms=1000)
    [first] = await consumer.receive_until(1, invisible_ms=300_000)
    ok(await consumer.call(op="change", id=first["id"], invisible_ms=0))
    [again] = await consumer.receive_until(1, invisible_ms=300_000)
    assert (again["id"], again["attempt"]) == (first["id"], 2)


async def test_node_simple_consumer_receives_from_every_queue(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    """The Node.js SimpleConsumer names queue 0 in every ReceiveMessage (its load balancer keeps
    the queues whose id equals the master's broker id); the broker pops every queue of the topic
    as RocketMQ's proxy does, so messages in the other queues arrive too."""
    name = await topic(cluster, "NODE-queues", queues=4)
    bodies = [f"q-{i}" for i in range(12)]
    await send_4x(cluster, name, bodies)  # round robin over the 4 queues
    consumer = await start(cluster, clients, "simple", topic=name, group="GN-queues", await_ms=1000)
    got: list[dict[str, Any]] = []
    for _ in range(6):  # each answers what is there: 12 in one or two receives
        got += await consumer.receive(max_num=32, invisible_ms=60_000)
        if len(got) >= len(bodies):
            break
    assert sorted(m["body"] for m in got) == sorted(bodies)


async def test_node_and_the_cpp_4x_client_on_the_same_topic(
    cluster: Cluster, clients: list[NodeClient], tmp_path: Path
) -> None:
    """The RocketMQ C++ 4.x client (`rocketmq==0.4.4`) and the Node.js 5.x client crossing on
    one topic: C++ sends, Node.js receives (tag, keys, the same message id); Node.js sends, a C++
    push consumer receives."""
    name = await topic(cluster, "NODE-cpp", queues=2)
    base = {"namesrv": cluster.namesrv.address, "topic": name}
    produced = await run_peer(
        tmp_path,
        {
            **base,
            "op": "produce",
            "group": "PG-cpp",
            "messages": [
                {"body": "from-cpp-0", "tags": "TagC", "keys": "k-cpp"},
                {"body": "from-cpp-1", "tags": "TagC"},
            ],
        },
    )
    sent = [e for e in produced if e["event"] == "sent"]
    assert [e["status"] for e in sent] == [SEND_OK, SEND_OK], produced
    consumer = await start(cluster, clients, "simple", topic=name, group="GN-cpp", tag="TagC")
    got = {m["body"]: m for m in await consumer.receive_until(2, invisible_ms=60_000)}
    assert set(got) == {"from-cpp-0", "from-cpp-1"}
    assert got["from-cpp-0"]["tag"] == "TagC" and got["from-cpp-0"]["keys"] == ["k-cpp"]
    assert {m["id"] for m in got.values()} == {e["msg_id"] for e in sent}
    for message in got.values():
        ok(await consumer.call(op="ack", id=message["id"]))
    producer = await start(cluster, clients, "producer", topic=name)
    receipts = [ok(await producer.send(body=f"from-node-{i}", tag="TagN")) for i in range(2)]
    events = await run_peer(
        tmp_path,
        {**base, "op": "consume", "group": "CG-cpp", "expression": "TagN", "expect": 2,
         "timeout": 40, "linger": 1},
    )  # fmt: skip
    received = [e for e in events if e["event"] == "received"]
    assert sorted(e["body"] for e in received) == ["from-node-0", "from-node-1"], events
    assert {e["msg_id"] for e in received} == {r["message_id"] for r in receipts}
    assert {e["tags"] for e in received} == {"TagN"}


async def test_node_push_consumer_consumes_and_retries_what_node_sent(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    name = await topic(cluster, "NODE-push")
    producer = await start(cluster, clients, "producer", topic=name)
    bodies = [f"push-{i}" for i in range(5)] + ["fail-once"]
    receipts = [ok(await producer.send(body=b)) for b in bodies]
    consumer = await start(cluster, clients, "push", topic=name, group="GN-push")
    consumed: list[dict[str, Any]] = []
    # fail-once is answered FAILURE on attempt 1 and comes back with attempt 2.
    while not any(m["body"] == "fail-once" and m["attempt"] == 2 for m in consumed):
        consumed.append((await consumer.answer(timeout=90))["consumed"])
    assert sorted(m["body"] for m in consumed if m["attempt"] == 1) == sorted(bodies)
    assert {m["id"] for m in consumed} == {r["message_id"] for r in receipts}


async def test_node_clients_live_through_a_broker_restart(
    cluster: Cluster, clients: list[NodeClient]
) -> None:
    """The broker stops (SIGTERM) and starts again under a Node.js producer and simple
    consumer that stay up: sends before and after arrive, what was acknowledged before does not
    come back, what was in flight comes back with its next attempt."""
    name = await topic(cluster, "NODE-restart", queues=1)
    producer = await start(cluster, clients, "producer", topic=name)
    consumer = await start(
        cluster, clients, "simple", topic=name, group="GN-restart", await_ms=1000
    )
    for body in ("before-1", "before-2"):
        ok(await producer.send(body=body))
    got = {m["body"]: m for m in await consumer.receive_until(2, invisible_ms=10_000)}
    ok(await consumer.call(op="ack", id=got["before-1"]["id"]))
    broker = cluster.broker
    broker.stop()
    cluster.broker = cluster.processes.start(
        broker.args, port=broker.port, name="brokerd-restarted", ready_text=BROKER_BOOTED
    )
    # The client's channel backs off after the refused connections of the downtime: a send
    # may fail fast (UNAVAILABLE) until it dials again; the application sends again.
    after: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    while "message_id" not in after:
        assert time.monotonic() < deadline, after
        after = await producer.send(body="after")
    seen: dict[str, list[int]] = {}
    deadline = time.monotonic() + 60
    while not ("after" in seen and "before-2" in seen):
        assert time.monotonic() < deadline, seen
        answer = await consumer.call(op="receive", max=32, invisible_ms=60_000)
        for message in answer.get("messages", []):  # errors while the broker was away: again
            seen.setdefault(message["body"], []).append(message["attempt"])
            ok(await consumer.call(op="ack", id=message["id"]))
    assert "before-1" not in seen
    assert seen["before-2"] == [2] and seen["after"] == [1]
    assert after["message_id"]
