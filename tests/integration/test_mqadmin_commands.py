"""The mqadmin commands operators reach for, against a running name server and broker.

One `namesrvd` and one `brokerd` (broker-a of DefaultCluster) for the module, started with
`tests.support.processes` on free ports and stopped at the end, passed or failed. mqadmin runs
in-process through click's CliRunner (its output checked), and as the installed console script
where the test is about what a shell sees: exit status, one line on stderr, no traceback.
Clients use the blocking API, whose own loop keeps a consumer running while mqadmin runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.conditions import eventually_sync
from tests.support.processes import Daemon, ProcessGroup, free_port
from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli import main as mqadmin
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import ConsumeResult, PushConsumer
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import Producer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere

BIN = Path(sys.executable).parent
CPP_PEER = Path(__file__).parent / "cpp_peer.py"  # the RocketMQ C++ client (rocketmq==0.4.4)
CONSOLE_SCRIPTS = ("namesrvd", "brokerd", "mqadmin", "tidemq-cluster", "tidemq-ingest")


@dataclass
class Cluster:
    namesrv: Daemon
    broker: Daemon
    store: Path

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    @property
    def broker_addr(self) -> str:
        return self.broker.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("mqadmin")
    processes = ProcessGroup(root / "logs")
    try:
        namesrv = processes.namesrvd(name="namesrvd")
        broker = processes.brokerd(
            namesrv.address,
            root / "store",
            "flushConsumerOffsetInterval=500",
            "brokerClusterName=DefaultCluster",
            name="brokerd",
        )
        yield Cluster(namesrv, broker, root / "store")
    finally:
        processes.stop_all()


def cli(cluster: Cluster, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(mqadmin, [args[0], "-n", cluster.namesrv_addr, *args[1:]])
    assert result.exit_code == code, f"mqadmin {' '.join(args)}: {result.output}"
    return result.output


def cli_json(cluster: Cluster, *args: str) -> object:
    """--json before the subcommand: the other place it is accepted."""
    result = CliRunner().invoke(mqadmin, ["--json", args[0], "-n", cluster.namesrv_addr, *args[1:]])
    assert result.exit_code == 0, f"mqadmin --json {' '.join(args)}: {result.output}"
    return json.loads(result.output)


def shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60, check=False
    )


def config(cluster: Cluster) -> ClientConfig:
    return ClientConfig.create(
        cluster.namesrv_addr,
        poll_name_server_interval=1.0,
        heartbeat_broker_interval=1.0,
        persist_consumer_offset_interval=1.0,
    )


def create_topic(cluster: Cluster, topic: str, queues: int = 2) -> None:
    cli(
        cluster,
        "updateTopic",
        "-b",
        cluster.broker_addr,
        "-t",
        topic,
        "-r",
        str(queues),
        "-w",
        str(queues),
    )
    eventually_sync(
        lambda: (
            CliRunner()
            .invoke(mqadmin, ["topicRoute", "-n", cluster.namesrv_addr, "-t", topic])
            .exit_code
            == 0
        ),
        f"route of {topic}",
        30,
    )


@pytest.fixture(scope="module")
def producer(cluster: Cluster) -> Iterator[Producer]:
    made = Producer("mqadmin-test-pg", config=config(cluster))
    made.start()
    try:
        yield made
    finally:
        made.shutdown()


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []

    def listener(self, msg: ReceivedMessage) -> ConsumeResult:
        with self.lock:
            self.bodies.append(msg.body)
        return ConsumeResult.SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(set(self.bodies))


# --- every console script, help ---------------------------------------------------------------


def test_every_console_script_prints_its_version() -> None:
    for script in CONSOLE_SCRIPTS:
        done = shell(script, "--version")
        assert done.returncode == 0, done.stderr
        name, package, version = done.stdout.split()
        assert (name, package) == (script, "(tidemq)") and version[0].isdigit()


def test_help_prints_a_commands_options_and_refuses_an_unknown_one() -> None:
    text = CliRunner().invoke(mqadmin, ["help", "queryMsgById"], prog_name="mqadmin").output
    assert "Usage: mqadmin queryMsgById" in text and "--msgId" in text
    done = shell("mqadmin", "help", "queryMsgByID")
    assert done.returncode == 1
    assert (
        done.stderr.strip() == "mqadmin help: no command queryMsgByID (did you mean queryMsgById?)"
    )


# --- messages -----------------------------------------------------------------------------------


def test_query_msg_by_id_finds_a_message_by_either_id_a_send_returns(
    cluster: Cluster, producer: Producer
) -> None:
    create_topic(cluster, "AdminQuery")
    result = producer.send(Message("AdminQuery", b"find me", tags="T1", keys="k1"))
    assert result.msg_id != result.offset_msg_id
    # The broker indexes keys after the send returns (its index worker), as RocketMQ's reput.
    eventually_sync(
        lambda: (
            CliRunner()
            .invoke(mqadmin, ["queryMsgById", "-n", cluster.namesrv_addr, "-i", result.msg_id])
            .exit_code
            == 0
        ),
        "the message's UNIQ_KEY indexed",
        30,
    )
    for msg_id in (result.msg_id, result.offset_msg_id):  # no -t: the bug this fixes
        text = cli(cluster, "queryMsgById", "-i", msg_id)
        assert f"Message ID:          {result.msg_id}" in text
        assert "Topic:               AdminQuery" in text
        assert "Message Body:        find me" in text
        data = cli_json(cluster, "queryMsgById", "-i", msg_id)
        assert isinstance(data, dict)
        assert (data["msgId"], data["offsetMsgId"]) == (result.msg_id, result.offset_msg_id)
    both = cli_json(cluster, "queryMsgById", "-i", f"{result.msg_id},{result.offset_msg_id}")
    assert isinstance(both, list) and len(both) == 2

    # sendMessage prints the client msgId, as RocketMQ's does; queryMsgById takes it.
    sent = cli_json(cluster, "sendMessage", "-t", "AdminQuery", "-p", "from mqadmin")
    assert isinstance(sent, dict) and sent["sendStatus"] == "SEND_OK"

    def found_by_its_msg_id() -> bool:
        args = ["queryMsgById", "-n", cluster.namesrv_addr, "-i", sent["msgId"], "--json"]
        done = CliRunner().invoke(mqadmin, args)
        return done.exit_code == 0 and json.loads(done.output)["body"] == "from mqadmin"

    eventually_sync(found_by_its_msg_id, "sendMessage's msgId indexed", 30)

    text = cli(cluster, "queryMsgByUniqueKey", "-i", result.msg_id, "-t", "AdminQuery")
    assert f"OffsetID:            {result.offset_msg_id}" in text
    missing = cli(cluster, "queryMsgByUniqueKey", "-i", "0" * 32, "-t", "AdminQuery", code=1)
    assert "not found in topic AdminQuery" in missing


def test_bad_input_gets_one_line_and_status_1(cluster: Cluster) -> None:
    ns = cluster.namesrv_addr
    silent = f"127.0.0.1:{free_port()}"  # nothing listens there
    cases = [
        (["queryMsgById", "-n", ns, "-i", "not-an-id"], "not a message id"),
        (["queryMsgById", "-n", ns, "-i", "ABCD"], "expected 32 or 56 hex digits"),
        (["queryMsgById", "-n", ns, "-i", "F" * 32], "not found in any topic"),
        (["topicClusterList", "-n", ns, "-t", "NoSuchTopic"], "No topic route info"),
        (["consumerStatus", "-n", ns, "-g", "no-such-group"], "not online"),
        (
            [
                "updateTopicPerm",
                "-n",
                ns,
                "-b",
                cluster.broker_addr,
                "-t",
                "NoSuchTopic",
                "-p",
                "4",
            ],
            "does not exist",
        ),
        (["getNamesrvConfig", "-n", silent], "cannot connect"),
        (["brokerConsumeStats", "-n", ns, "-b", silent], "cannot connect"),
        (["queryMsgByUniqueKey", "-n", ns, "-t", "AdminQuery", "-i", "junk"], "not a message id"),
        (["statsAll", "-n", ns, "-t", "NoSuchTopic"], "No topic route info"),
        (["printMsg", "-n", ns, "-t", "NoSuchTopic"], "No topic route info"),
        (["skipAccumulatedMessage", "-n", ns, "-g", "g", "-t", "NoSuchTopic"], "No topic route"),
        (["cloneGroupOffset", "-n", ns, "-s", "a", "-d", "b", "-t", "NoSuchTopic"], "No topic"),
        (["sendMsgStatus", "-n", ns, "-b", "no-such-broker", "-c", "1"], "No topic route info"),
        (["clusterRT", "-n", ns, "-c", "NoSuchCluster"], "cluster NoSuchCluster not found"),
        (["deleteKvConfig", "-n", silent, "-s", "NS", "-k", "k"], "cannot connect"),
        (
            ["updateNamesrvConfig", "-n", ns, "-k", "listenPort", "-v", "1"],
            "cannot change listenPort",
        ),
        (
            ["updateNamesrvConfig", "-n", ns, "-k", "orderMessageEnabled", "-v", "true"],
            "unknown key orderMessageEnabled: did you mean orderMessageEnable?",
        ),
        # RocketMQ's consumerProgress fails for a group no broker has offsets of.
        (["consumerProgress", "-n", ns, "-g", "no-such-group"], "has no consume offsets"),
        # A key the broker has but cannot change now, told apart from one it does not have.
        (
            [
                *("updateBrokerConfig", "-n", ns, "-b", cluster.broker_addr),
                "-k",
                "listenPort",
                "-v",
                "1",
            ],
            "cannot change listenPort while the broker runs",
        ),
        (
            [
                *("updateBrokerConfig", "-n", ns, "-b", cluster.broker_addr),
                "-k",
                "brokerPermision",
                "-v",
                "6",
            ],
            "unknown key brokerPermision: did you mean brokerPermission?",
        ),
        (
            [
                *("updateBrokerConfig", "-n", ns, "-b", cluster.broker_addr),
                "-k",
                "noSuchKeyAtAll",
                "-v",
                "6",
            ],
            "unknown key noSuchKeyAtAll: no broker configuration has it",
        ),
    ]
    for args, reason in cases:
        done = shell("mqadmin", *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert lines[0].startswith(f"mqadmin {args[0]}: ") and reason in lines[0], lines


def test_compressed_bodies_read_as_sent_and_properties_as_rocketmq_prints_them(
    cluster: Cluster, producer: Producer
) -> None:
    """A 12,000-byte body is compressed by the producer (over 4 KiB): every command that
    shows it shows it as sent."""
    create_topic(cluster, "AdminBig", queues=1)
    text = "twelve thousand bytes " * 546
    result = producer.send(Message("AdminBig", text.encode(), tags="Big", keys="big-1"))
    by_key = ["queryMsgByKey", "-t", "AdminBig", "-k", "big-1"]
    eventually_sync(lambda: len(cli(cluster, *by_key).splitlines()) == 2, "the key indexed", 30)
    preview = text[:512] + "..."
    shown = cli(cluster, "queryMsgById", "-i", result.offset_msg_id).splitlines()
    assert f"Message Body:        {preview}" in shown
    assert "System Flag:         1" in shown  # as stored: compressed
    [props] = [line for line in shown if line.startswith("Properties:")]
    assert props.startswith("Properties:          {") and "KEYS=big-1" in props
    assert "TAGS=Big" in props and f"UNIQ_KEY={result.msg_id}" in props and "'" not in props
    at = ["-t", "AdminBig", "-b", "broker-a", "-i", "0", "-o", "0"]
    shown = cli(cluster, "queryMsgByOffset", *at)
    assert f"Message Body:        {preview}" in shown.splitlines()
    data = cli_json(cluster, "queryMsgByKey", "-t", "AdminBig", "-k", "big-1")
    assert isinstance(data, list) and [m["body"] for m in data] == [preview]
    printed = cli(cluster, "printMsg", "-t", "AdminBig").splitlines()
    assert printed[-1].endswith(f"BODY: {text}")


def test_query_msg_by_key_says_when_it_stops_at_its_limit(
    cluster: Cluster, producer: Producer
) -> None:
    create_topic(cluster, "AdminMany", queues=1)
    for i in range(5):
        producer.send(Message("AdminMany", f"m-{i}".encode(), keys="many"))
    args = ["queryMsgByKey", "-t", "AdminMany", "-k", "many"]
    eventually_sync(lambda: len(cli(cluster, *args).splitlines()) == 6, "5 keys indexed", 30)
    done = shell("mqadmin", args[0], "-n", cluster.namesrv_addr, *args[1:])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert len(done.stdout.splitlines()) == 6
    done = shell("mqadmin", args[0], "-n", cluster.namesrv_addr, *args[1:], "-m", "3")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 4  # the header and 3 rows
    assert done.stderr.splitlines() == [
        "mqadmin queryMsgByKey: stopped at 3 messages (broker broker-a answered its limit of 3): "
        "more may carry key many; narrow the time with -b/-e or raise -m (at most 64 per broker)"
    ]
    done = shell("mqadmin", args[0], "-n", cluster.namesrv_addr, *args[1:], "-m", "3", "--json")
    assert len(json.loads(done.stdout)) == 3 and "stopped at 3 messages" in done.stderr


def test_print_msg_and_print_msg_by_queue(cluster: Cluster, producer: Producer) -> None:
    create_topic(cluster, "AdminPrint", queues=1)
    for i, tag in enumerate(["A", "A", "B"]):
        producer.send(Message("AdminPrint", f"p-{i}".encode(), tags=tag))

    def dispatched() -> bool:  # the queue's max offset moves when the broker dispatches
        status = cli_json(cluster, "topicStatus", "-t", "AdminPrint")
        return isinstance(status, list) and status[0]["maxOffset"] == 3

    eventually_sync(dispatched, "3 messages in the consume queue", 30)
    text = cli(cluster, "printMsg", "-t", "AdminPrint")
    assert (
        "minOffset=0, maxOffset=3, MessageQueue [topic=AdminPrint, brokerName=broker-a, queueId=0]"
        in text
    )
    assert [
        line.rsplit("BODY: ", 1)[1] for line in text.splitlines() if line.startswith("MSGID: ")
    ] == [
        "p-0",
        "p-1",
        "p-2",
    ]
    only_b = cli_json(cluster, "printMsg", "-t", "AdminPrint", "-s", "B")
    assert isinstance(only_b, list) and [m["body"] for m in only_b] == ["p-2"]

    text = cli(
        cluster,
        "printMsgByQueue",
        "-t",
        "AdminPrint",
        "-a",
        "broker-a",
        "-i",
        "0",
        "-p",
        "true",
        "-d",
        "true",
        "-f",
        "true",
    )
    assert text.count("MSGID: ") == 3
    assert [line.split() for line in text.splitlines() if line.startswith("Tag: ")] == [
        ["Tag:", "A", "Count:", "2"],
        ["Tag:", "B", "Count:", "1"],
    ]
    future = cli_json(
        cluster,
        "printMsgByQueue",
        "-t",
        "AdminPrint",
        "-a",
        "broker-a",
        "-i",
        "0",
        "-b",
        "4102444800000",
    )
    assert isinstance(future, dict) and future["messageCount"] == 0


# --- name server --------------------------------------------------------------------------------


def test_namesrv_config_and_kv_config(cluster: Cluster) -> None:
    text = cli(cluster, "getNamesrvConfig")
    assert f"============{cluster.namesrv_addr}============" in text
    assert f"listenPort{' ' * 40}=  {cluster.namesrv.port}" in text
    assert "update name server config success!" in cli(
        cluster, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true"
    )
    config = cli_json(cluster, "getNamesrvConfig")
    assert isinstance(config, dict) and config[cluster.namesrv_addr]["orderMessageEnable"] == "true"

    # The KV table is what the name server serves as a route's orderTopicConf.
    create_topic(cluster, "AdminOrdered")
    out = cli(
        cluster,
        "updateKvConfig",
        "-s",
        "ORDER_TOPIC_CONFIG",
        "-k",
        "AdminOrdered",
        "-v",
        "broker-a:2",
    )
    assert out.strip() == "create or update kv config to namespace success."
    route = cli_json(cluster, "topicRoute", "-t", "AdminOrdered")
    assert isinstance(route, dict) and route["orderTopicConf"] == "broker-a:2"
    assert kv_value(cluster, "ORDER_TOPIC_CONFIG", "AdminOrdered") == "broker-a:2"
    out = cli(cluster, "deleteKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "AdminOrdered")
    assert out.strip() == "delete kv config from namespace success."
    route = cli_json(cluster, "topicRoute", "-t", "AdminOrdered")
    assert isinstance(route, dict) and not route.get("orderTopicConf")
    assert kv_value(cluster, "ORDER_TOPIC_CONFIG", "AdminOrdered") is None
    cli(cluster, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")


def kv_value(cluster: Cluster, namespace: str, key: str) -> str | None:
    async def get() -> str | None:
        async with AdminClient(cluster.namesrv_addr) as admin:
            return await admin.get_kv_config(namespace, key)

    return asyncio.run(get())


# --- topics -------------------------------------------------------------------------------------


def test_topic_cluster_list_and_update_topic_perm(cluster: Cluster) -> None:
    create_topic(cluster, "AdminPerm")
    assert cli(cluster, "topicClusterList", "-t", "AdminPerm").split() == ["DefaultCluster"]
    out = cli(cluster, "updateTopicPerm", "-b", cluster.broker_addr, "-t", "AdminPerm", "-p", "4")
    assert f"update topic perm from 6 to 4 in {cluster.broker_addr} success." in out
    assert "TopicConfig [topicName=AdminPerm, readQueueNums=2, writeQueueNums=2, perm=R--" in out

    def route_perm() -> object:
        route = cli_json(cluster, "topicRoute", "-t", "AdminPerm")
        assert isinstance(route, dict)
        return route["queueDatas"][0]["perm"]

    eventually_sync(lambda: route_perm() == 4, "the route to show perm 4", 40)
    sent = shell("mqadmin", "sendMessage", "-n", cluster.namesrv_addr, "-t", "AdminPerm", "-p", "x")
    assert sent.returncode == 1 and "no writable queue" in sent.stderr
    again = cli(cluster, "updateTopicPerm", "-c", "DefaultCluster", "-t", "AdminPerm", "-p", "4")
    assert "new perm equals to the old one" in again
    cli(cluster, "updateTopicPerm", "-c", "DefaultCluster", "-t", "AdminPerm", "-p", "6")
    eventually_sync(lambda: route_perm() == 6, "the route to show perm 6", 40)


# --- groups, consumers and stats ----------------------------------------------------------------


def test_group_commands_against_a_running_consumer(cluster: Cluster, producer: Producer) -> None:
    topic, group = "AdminGroups", "admin-groups"
    create_topic(cluster, topic)
    sent = [producer.send(Message(topic, f"g-{i}".encode())) for i in range(10)]
    received = Received()
    consumer = PushConsumer(
        group, config=config(cluster), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic, "*", received.listener)
    consumer.start()
    try:
        eventually_sync(lambda: received.count() == 10, "10 messages consumed", 40)

        def progress(name: str) -> dict[str, object]:
            data = cli_json(cluster, "consumerProgress", "-g", name, "-t", topic)
            assert isinstance(data, dict)
            return data

        eventually_sync(
            lambda: (
                progress(group)["diffTotal"] == 0
                and sum(q["consumerOffset"] for q in progress(group)["queues"]) == 10
            ),  # type: ignore[attr-defined]
            "the group's offsets committed to the broker",
            40,
        )

        # queryMsgById: which groups consumed the message.
        track = f"MessageTrack [consumerGroup={group}, trackType=CONSUMED, exceptionDesc=None]"
        assert track in cli(cluster, "queryMsgById", "-i", sent[0].offset_msg_id)

        # consumerStatus: the broker asks the consumer client itself.
        text = cli(cluster, "consumerStatus", "-g", group)
        assert "Same subscription in the same group of consumer" in text
        assert "Rebalance OK" in text
        data = cli_json(cluster, "consumerStatus", "-g", group)
        assert isinstance(data, dict) and data["rebalanceOk"] is True
        [(client_id, info)] = data["clients"].items()
        assert info["properties"]["consumerGroup"] == group
        assert {
            q["messageQueue"]["queueId"]
            for q in info["mqTable"]
            if q["messageQueue"]["topic"] == topic
        } == {0, 1}
        rates = info["statusTable"][topic]
        assert rates["pullTPS"] > 0 and rates["consumeOKTPS"] > 0
        assert rates["consumeFailedMsgs"] == 0
        # consumerProgress -s true: which client consumes each queue, as RocketMQ's shows it.
        text = cli(cluster, "consumerProgress", "-g", group, "-t", topic, "-s", "true")
        assert [c.strip() for c in text.splitlines()[0].split("#")[1:]] == [
            "Topic",
            "Broker Name",
            "QID",
            "Broker Offset",
            "Consumer Offset",
            "Client IP",
            "Diff",
            "LastTime",
        ]
        ips = {line.split()[5] for line in text.splitlines()[1:] if line.startswith(topic)}
        assert ips == {client_id.split("@")[0]}, text
        # Versions by name, as RocketMQ's tools print them (the client says 401).
        text = cli(cluster, "consumerConnection", "-g", group)
        assert text.splitlines()[1].split()[-1] == "V4_9_4"
        groups = cli(cluster, "consumerProgress")
        [row] = [line.split() for line in groups.splitlines() if line.startswith(f"{group} ")]
        assert row[:4] == [group, "1", "V4_9_4", "PUSH"]
        detail = cli(cluster, "consumerStatus", "-g", group, "-i", client_id)
        assert "#Consumer Properties#" in detail and "#Consumer MQ Detail#" in detail
        assert "#Consumer RT&TPS#" in detail
        assert f"Topic: {topic}" in detail

        # brokerConsumeStats: every group on the broker, queue by queue.
        stats = cli(cluster, "brokerConsumeStats", "-b", cluster.broker_addr)
        assert [c.strip() for c in stats.splitlines()[0].split("#")[1:]] == [
            "Topic",
            "Group",
            "Broker Name",
            "QID",
            "Broker Offset",
            "Consumer Offset",
            "Diff",
            "LastTime",
        ]
        rows = [line.split() for line in stats.splitlines() if line.startswith(f"{topic} ")]
        assert sorted((r[1], r[3], r[6]) for r in rows) == [(group, "0", "0"), (group, "1", "0")]
        assert "Diff Total:" in stats

        # cloneGroupOffset: a new group starts where this one is.
        out = cli(
            cluster, "cloneGroupOffset", "-s", group, "-d", "admin-clone", "-t", topic, "-o", "true"
        )
        assert (
            out.strip()
            == f"clone group offset success. srcGroup[{group}], destGroup=[admin-clone], "
            f"topic[{topic}]"
        )
        cloned = progress("admin-clone")
        assert sum(q["consumerOffset"] for q in cloned["queues"]) == 10  # type: ignore[attr-defined]

        # statsAll: traffic of the topic and of the group.
        rows_all = cli_json(cluster, "statsAll", "-t", topic)
        assert isinstance(rows_all, list)
        [row] = [r for r in rows_all if r["consumerGroup"] == group]
        assert row["inMsg24Hour"] == 10 and row["outMsg24Hour"] >= 10 and row["accumulation"] == 0
        text = cli(cluster, "statsAll", "-t", topic)
        assert text.split("\n")[0].split() == [
            "#Topic",
            "#Consumer",
            "Group",
            "#Accumulation",
            "#InTPS",
            "#OutTPS",
            "#InMsg24Hour",
            "#OutMsg24Hour",
        ]
    finally:
        consumer.shutdown()

    # skipAccumulatedMessage: a group with a backlog jumps to the end.
    late_sent = [producer.send(Message(topic, f"late-{i}".encode())) for i in range(4)]
    eventually_sync(lambda: progress(group)["diffTotal"] == 4, "a backlog of 4", 30)
    late = cli_json(cluster, "queryMsgById", "-i", late_sent[0].offset_msg_id)
    assert isinstance(late, dict)
    assert late["messageTracks"] == [  # both hold offsets of the topic, neither is online
        {
            "consumerGroup": name,
            "trackType": "NOT_ONLINE",
            "exceptionDesc": f"CODE:206 DESC:the consumer group[{name}] not online",
        }
        for name in ("admin-clone", group)
    ]
    out = cli_json(cluster, "skipAccumulatedMessage", "-g", group, "-t", topic)
    assert isinstance(out, list) and sum(q["offset"] for q in out) == 14
    assert progress(group)["diffTotal"] == 0


def test_send_probes(cluster: Cluster) -> None:
    text = cli(cluster, "sendMsgStatus", "-b", "broker-a", "-c", "3", "-s", "64")
    lines = text.strip().splitlines()
    assert len(lines) == 3 and all(
        "SendResult=SEND_OK" in line and line.startswith("rt=") for line in lines
    )
    rt = cli_json(cluster, "clusterRT", "-a", "5", "-s", "32")
    assert isinstance(rt, list)
    assert [(r["clusterName"], r["brokerName"], r["successCount"], r["failCount"]) for r in rt] == [
        ("DefaultCluster", "broker-a", 5, 0)
    ]
    assert rt[0]["rtMs"] > 0
    header = cli(cluster, "clusterRT", "-a", "1").splitlines()[0]
    assert [c.strip() for c in header.split("#")[1:]] == [
        "Cluster Name",
        "Broker Name",
        "RT",
        "successCount",
        "failCount",
    ]


def test_consumer_status_of_a_rocketmq_cpp_consumer(cluster: Cluster, tmp_path: Path) -> None:
    """The C++ client answers GET_CONSUMER_RUNNING_INFO in fastjson's form (queues as object
    keys): consumerStatus reads it."""
    topic, group = "AdminCpp", "admin-cpp"
    create_topic(cluster, topic)
    spec = {
        "op": "consume",
        "namesrv": cluster.namesrv_addr,
        "group": group,
        "topic": topic,
        "expression": "*",
        "expect": 1,
        "timeout": 120,
        "linger": 0,
    }
    (tmp_path / "home").mkdir()
    with (tmp_path / "cpp-peer.stderr").open("w") as stderr:
        peer = subprocess.Popen(
            [sys.executable, str(CPP_PEER), json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "HOME": str(tmp_path / "home")},
        )
    try:
        assert peer.stdout is not None
        assert json.loads(peer.stdout.readline())["event"] == "started"

        def queues_held() -> set[int]:
            result = CliRunner().invoke(
                mqadmin, ["consumerStatus", "-n", cluster.namesrv_addr, "-g", group, "--json"]
            )
            if result.exit_code != 0:
                return set()
            [info] = json.loads(result.output)["clients"].values()
            return {
                q["messageQueue"]["queueId"]
                for q in info["mqTable"]
                if q["messageQueue"]["topic"] == topic
            }

        eventually_sync(lambda: queues_held() == {0, 1}, "the C++ consumer's queues listed", 60)
        text = cli(cluster, "consumerStatus", "-g", group)
        assert "Same subscription in the same group of consumer" in text and "Rebalance OK" in text
        data = cli_json(cluster, "consumerStatus", "-g", group)
        assert isinstance(data, dict)
        [(client_id, info)] = data["clients"].items()
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        detail = cli(cluster, "consumerStatus", "-g", group, "-i", client_id)
        assert f"Topic: {topic}" in detail and "#Consumer MQ Detail#" in detail
    finally:
        peer.kill()
        peer.communicate()  # reaps it and closes its stdout


# --- batch creation (RocketMQ 5's list requests) ------------------------------------------------


def broker_tables(cluster: Cluster) -> tuple[set[str], dict[str, object]]:
    """The topics and the subscription groups the broker holds (GET_ALL_* requests)."""

    async def get() -> tuple[set[str], dict[str, object]]:
        async with AdminClient(cluster.namesrv_addr) as admin:
            wrapper = await admin.api.all_topic_config(cluster.broker_addr)
            groups = await admin.subscription_groups(cluster.broker_addr)
            return set(wrapper.topic_config_table), dict(groups)

    return asyncio.run(get())


def test_update_topic_list_and_sub_group_list_from_files(cluster: Cluster, tmp_path: Path) -> None:
    # 2,500 topics: two requests of the list (2,000 and 500), each one change of the table.
    names = [f"Batch{i:04d}" for i in range(2500)]
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(
        json.dumps(
            [{"topicName": n, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6} for n in names]
        )
    )
    out = cli(cluster, "updateTopicList", "-b", cluster.broker_addr, "-f", str(topics_file))
    assert f"submit batch of topic config to {cluster.broker_addr} success" in out
    topics, _groups = broker_tables(cluster)
    assert set(names) <= topics
    eventually_sync(
        lambda: (
            shell("mqadmin", "topicRoute", "-n", cluster.namesrv_addr, "-t", names[-1]).returncode
            == 0
        ),
        "the last topic of the batch routable",
        40,
    )
    # One bad name refuses the whole file: nothing of it is created.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"topicName": "GoodOfBadBatch"}, {"topicName": "../escape"}]))
    refused = shell(
        "mqadmin",
        "updateTopicList",
        "-n",
        cluster.namesrv_addr,
        "-c",
        "DefaultCluster",
        "-f",
        str(bad),
    )
    assert refused.returncode == 1 and "topicConfigList.topicName" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "GoodOfBadBatch" not in broker_tables(cluster)[0]
    missing = shell(
        "mqadmin",
        "updateTopicList",
        "-n",
        cluster.namesrv_addr,
        "-b",
        cluster.broker_addr,
        "-f",
        str(tmp_path / "none.json"),
    )
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    # Subscription groups, by cluster.
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(
        json.dumps([{"groupName": "batch-g1", "retryMaxTimes": 3}, {"groupName": "batch-g2"}])
    )
    out = cli(cluster, "updateSubGroupList", "-c", "DefaultCluster", "-f", str(groups_file))
    assert "submit batch of subscription group config to" in out
    groups = broker_tables(cluster)[1]
    assert {"batch-g1", "batch-g2"} <= groups.keys()
    g1 = groups["batch-g1"]
    assert getattr(g1, "retry_max_times", None) == 3
    # The running broker's tables, exported as RocketMQ's JSON files.
    exported = shell(
        "tidemq-cluster", "export-config", str(cluster.store), "-o", str(tmp_path / "x")
    )
    assert exported.returncode == 0, exported.stderr
    topics_json = json.loads((tmp_path / "x" / "topics.json").read_text())
    assert set(names) <= topics_json["topicConfigTable"].keys()
    assert topics_json["topicConfigTable"][names[0]]["readQueueNums"] == 2
    groups_json = json.loads((tmp_path / "x" / "subscriptionGroup.json").read_text())
    assert groups_json["subscriptionGroupTable"]["batch-g1"]["retryMaxTimes"] == 3
