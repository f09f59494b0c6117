"""Operations against a real 2m-2s cluster started by the launcher (deploy/2m-2s-async), and
the launcher's own behaviour on real processes (busy ports, a daemon that cannot start or dies,
the status line's rates and names).

One cluster for the module (name server, broker-a and broker-b with a slave each, on free
ports); `mqadmin` runs in-process through click's CliRunner; clients use the blocking API (its
own background loop), so a consumer keeps running while mqadmin commands are invoked. The
launcher is stopped with SIGINT at the end, passed or failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

from tests.support.conditions import eventually_sync
from tests.support.launcher import LaunchedCluster, alive, choose_ports, index_workers_of
from tests.support.metrics import scrape
from tests.support.processes import REPO_ROOT, TEST_STORE_OVERRIDES, free_port
from tidemq.broker.daemons.port_owner import pid_listens_on, port_is_free
from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli import main as mqadmin
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import ConsumeResult, PushConsumer
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import Producer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere

pytestmark = pytest.mark.slow

TIMING = (
    "slaveSynchronizeInterval=1000",
    "flushConsumerOffsetInterval=500",
    "haSendHeartbeatInterval=500",
    "slaveReadEnable=true",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedCluster]:
    launched = LaunchedCluster.start("2m-2s-async", tmp_path_factory.mktemp("2m2s"), *TIMING)
    try:
        yield launched
    finally:
        launched.stop()


def admin_cli(cluster: LaunchedCluster, *args: str) -> Result:
    result = CliRunner().invoke(mqadmin, [args[0], "-n", cluster.namesrv_addr, *args[1:]])
    assert result.exit_code == 0, f"mqadmin {' '.join(args)} failed: {result.output}"
    return result


def admin_json(cluster: LaunchedCluster, *args: str) -> object:
    return json.loads(admin_cli(cluster, *args, "--json").output)


def client_config(cluster: LaunchedCluster) -> ClientConfig:
    return ClientConfig.create(
        cluster.namesrv_addr,
        poll_name_server_interval=1.0,
        heartbeat_broker_interval=1.0,
        persist_consumer_offset_interval=1.0,
    )


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[ReceivedMessage] = []

    def listener(self, msg: ReceivedMessage) -> ConsumeResult:
        with self.lock:
            self.messages.append(msg)
        return ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.messages]


def create_topic(cluster: LaunchedCluster, topic: str) -> None:
    admin_cli(cluster, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")

    def routed() -> bool:
        route = admin_json(cluster, "topicRoute", "-t", topic)
        assert isinstance(route, dict)
        return len(route["queueDatas"]) == 2

    eventually_sync(routed, f"route of {topic}", 20)


def send(producer: Producer, topic: str, prefix: str, count: int) -> list[str]:
    brokers = []
    for i in range(count):
        result = producer.send(Message(topic, f"{prefix}-{i}".encode(), keys=f"{prefix}-{i}"))
        brokers.append(result.message_queue.broker_name)
    return brokers


def test_cluster_list_shows_four_brokers(cluster: LaunchedCluster) -> None:
    text = admin_cli(cluster, "clusterList").output
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["#Cluster", "Name", "#Broker"]
    assert "#InTPS(LOAD)" in lines[0] and "#ACTIVATED" in lines[0]
    rows = [line.split() for line in lines[1:]]
    assert sorted((r[1], r[2]) for r in rows) == [
        ("broker-a", "0"),
        ("broker-a", "1"),
        ("broker-b", "0"),
        ("broker-b", "1"),
    ]
    data = admin_json(cluster, "clusterList")
    assert isinstance(data, list) and len(data) == 4
    assert {b["address"] for b in data} == {cluster.address(n) for n in cluster.ports}


def test_ha_status_and_lag_metric_name_each_slave_by_its_broker(cluster: LaunchedCluster) -> None:
    """Not by the temporary port of its HA connection: the master asks its slaves
    (broker/slave_names.py), so the status and `brokerIP` carry the slave's broker address."""
    slave_address = cluster.address("broker-a-s")

    def named() -> bool:
        [status] = [
            s
            for s in admin_json(cluster, "haStatus", "-c", "DefaultCluster")  # type: ignore[union-attr]
            if s["brokerAddr"] == cluster.address("broker-a")
        ]
        [slave] = status["haConnectionInfo"]
        return bool(slave["slaveBrokerAddr"] == slave_address and slave["slaveBrokerId"] == 1)

    eventually_sync(named, "the master to know its slave's broker address", 30)
    samples = scrape(cluster.ports["broker-a"].metrics)["rocketmq_broker_commitlog_diff"]
    assert [labels["brokerIP"] for labels, _ in samples] == [slave_address]


def test_ha_status_shows_each_slave_lag(cluster: LaunchedCluster) -> None:
    text = admin_cli(cluster, "haStatus", "-c", "DefaultCluster").output
    assert text.count("#SlaveAddr") == 2
    assert text.count("#MasterAddr") == 2
    statuses = admin_json(cluster, "haStatus", "-c", "DefaultCluster")
    assert isinstance(statuses, list)
    assert sorted(s["brokerAddr"] for s in statuses) == sorted(
        [cluster.address("broker-a"), cluster.address("broker-b")]
    )
    for status in statuses:
        assert status["master"] is True
        [slave] = status["haConnectionInfo"]
        assert slave["diff"] >= 0
        assert slave["slaveAckOffset"] <= status["masterCommitLogMaxOffset"]


def test_progress_diff_reaches_zero_and_reset_by_time_reads_again(
    cluster: LaunchedCluster,
) -> None:
    topic, group = "OpsProgress", "ops-progress"
    create_topic(cluster, topic)
    before = int(time.time() * 1000) - 1000
    received = Received()
    consumer = PushConsumer(
        group,
        config=client_config(cluster),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", received.listener)
    producer = Producer("ops-progress-pg", config=client_config(cluster))
    consumer.start()
    producer.start()
    try:
        send(producer, topic, "m", 30)
        eventually_sync(lambda: len(set(received.bodies())) == 30, "30 messages consumed", 30)

        def drained() -> bool:
            data = admin_json(cluster, "consumerProgress", "-g", group, "-t", topic)
            assert isinstance(data, dict)
            return data["diffTotal"] == 0 and len(data["queues"]) == 4

        eventually_sync(drained, "consumerProgress diff 0", 20)
        text = admin_cli(cluster, "consumerProgress", "-g", group).output
        assert [c.strip() for c in text.splitlines()[0].split("#")[1:]] == [
            "Topic",
            "Broker Name",
            "QID",
            "Broker Offset",
            "Consumer Offset",
            "Diff",
            "LastTime",
        ]
        assert "Diff Total: 0" in text

        conn = admin_json(cluster, "consumerConnection", "-g", group)
        assert isinstance(conn, dict) and len(conn["connectionSet"]) == 1
        assert topic in conn["subscriptionTable"]

        # A broker knows the producer from a heartbeat: at the producer's start, to the brokers
        # its client knew then, else the next periodic one (every second here), which a loaded
        # machine may delay: wait for it.
        def producer_listed() -> bool:
            args = ["-n", cluster.namesrv_addr, "-g", "ops-progress-pg", "-t", topic, "--json"]
            result = CliRunner().invoke(mqadmin, ["producerConnection", *args])
            return result.exit_code == 0 and len(json.loads(result.output)["connectionSet"]) == 1

        eventually_sync(producer_listed, "the producer's connection listed", 40)

        reset = admin_cli(
            cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(before)
        ).output
        assert "#brokerName" in reset
        eventually_sync(lambda: len(received.bodies()) >= 60, "every message consumed again", 40)
        assert sorted(set(received.bodies())) == sorted(f"m-{i}".encode() for i in range(30))
    finally:
        producer.shutdown()
        consumer.shutdown()


def slave_reads(cluster: LaunchedCluster) -> int:
    total = 0
    for name in ("broker-a-s", "broker-b-s"):
        data = admin_json(cluster, "brokerStatus", "-b", cluster.address(name))
        assert isinstance(data, dict)
        total += int(data[cluster.address(name)]["msgGetTotalTodayNow"])
    return total


def test_update_sub_group_broker_id_1_reads_from_the_slave(cluster: LaunchedCluster) -> None:
    topic, group = "OpsSlaveRead", "ops-slave-read"
    create_topic(cluster, topic)
    out = admin_cli(cluster, "updateSubGroup", "-c", "DefaultCluster", "-g", group, "-i", "1")
    assert out.output.count("create subscription group to") == 2
    assert "brokerId=1" in out.output
    time.sleep(1.5)  # the slaves copy the group's config (slaveSynchronizeInterval=1000)
    reads_before = slave_reads(cluster)
    received = Received()
    consumer = PushConsumer(
        group,
        config=client_config(cluster),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*", received.listener)
    producer = Producer("ops-slave-read-pg", config=client_config(cluster))
    consumer.start()
    producer.start()
    try:
        send(producer, topic, "first", 10)
        eventually_sync(lambda: len(received.bodies()) >= 10, "the first messages", 30)
        # The master's answers told the consumer to read from broker id 1 from now on.
        send(producer, topic, "second", 20)
        eventually_sync(lambda: len(received.bodies()) >= 30, "the second messages", 30)
        eventually_sync(
            lambda: slave_reads(cluster) - reads_before >= 15,
            f"reads from slaves (before {reads_before}, now {slave_reads(cluster)})",
            10,
        )
    finally:
        producer.shutdown()
        consumer.shutdown()


def commitlog_diff(cluster: LaunchedCluster) -> float:
    samples = scrape(cluster.ports["broker-a"].metrics)["rocketmq_broker_commitlog_diff"]
    [(labels, value)] = samples
    assert labels["broker"] == "broker-a" and labels["cluster"] == "DefaultCluster"
    return value


def test_metrics_show_ha_lag_rising_while_a_slave_is_stopped(cluster: LaunchedCluster) -> None:
    topic = "OpsMetrics"
    create_topic(cluster, topic)
    eventually_sync(lambda: commitlog_diff(cluster) == 0, "no HA lag to start with", 20)
    slave_pid = cluster.pids["broker-a-s"]
    os.kill(slave_pid, signal.SIGSTOP)
    try:

        async def send_to_a(count: int) -> None:
            async with AdminClient(cluster.namesrv_addr) as admin:
                for _ in range(count):
                    await admin.send_message(Message(topic, b"x" * 2048), "broker-a")

        asyncio.run(send_to_a(40))
        lag = commitlog_diff(cluster)
        assert lag >= 40 * 2048
        asyncio.run(send_to_a(10))
        assert commitlog_diff(cluster) > lag  # still rising
    finally:
        os.kill(slave_pid, signal.SIGCONT)
    eventually_sync(lambda: commitlog_diff(cluster) == 0, "the slave to catch up", 30)
    # The slave's dispatch lag behind what it received: reported, and none once it followed.
    eventually_sync(
        lambda: slave_dispatch_behind(cluster) == 0, "the slave's dispatch to catch up", 30
    )

    metrics = scrape(cluster.ports["broker-a"].metrics)
    assert "tidemq_ha_slave_dispatch_behind_bytes" not in metrics  # slaves only
    offsets = {s[0]["topic"]: s[1] for s in metrics["rocketmq_producer_offset"]}
    assert offsets[topic] == 50
    # Rates come from the broker's once-a-second samples: the next one counts the sends.
    eventually_sync(
        lambda: any(
            v > 0
            for _, v in scrape(cluster.ports["broker-a"].metrics).get("rocketmq_producer_tps", [])
        ),
        "the sends in rocketmq_producer_tps",
        10,
    )
    [(_, count)] = metrics["tidemq_send_latency_seconds_count"]
    assert count >= 50
    assert "tidemq_pull_latency_seconds_bucket" in metrics
    assert "rocketmq_brokeruntime_commitlog_disk_ratio" in metrics
    slave_metrics = scrape(cluster.ports["broker-a-s"].metrics)
    assert slave_metrics["rocketmq_broker_tps"][0][0]["broker"] == "broker-a"


def family_values(
    metrics: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> list[float]:
    return [
        value
        for sample_labels, value in metrics.get(name, [])
        if all(sample_labels.get(k) == v for k, v in labels.items())
    ]


def test_exporter_families_for_groups_with_lag_retries_and_a_dlq(cluster: LaunchedCluster) -> None:
    """Two groups fail one message each: one retries it (%RETRY%), one (maxReconsumeTimes 0)
    sends it to its DLQ; then 5 more messages arrive with no consumer online. The masters'
    metrics show the lag, its age, the retry and DLQ backlogs, the sizes and the process."""
    topic = "OpsGroups"
    create_topic(cluster, topic)
    groups = {"ops-groups-retry": 16, "ops-groups-dlq": 0}
    producer = Producer("ops-groups-pg", config=client_config(cluster))
    producer.start()
    consumers = []
    try:
        send(producer, topic, "m", 10)
        failed: dict[str, int] = dict.fromkeys(groups, 0)
        done: dict[str, set[bytes]] = {g: set() for g in groups}

        def listener_for(group: str) -> Callable[[ReceivedMessage], ConsumeResult]:
            def listener(msg: ReceivedMessage) -> ConsumeResult:
                if msg.body == b"m-0" and failed[group] == 0:
                    failed[group] += 1
                    return ConsumeResult.RECONSUME_LATER
                done[group].add(msg.body)
                return ConsumeResult.SUCCESS

            return listener

        for group, retries in groups.items():
            consumer = PushConsumer(
                group,
                config=client_config(cluster),
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                max_reconsume_times=retries,
            )
            consumer.subscribe(topic, "*", listener_for(group))
            consumer.start()
            consumers.append(consumer)

        def online_as_clustering() -> bool:
            metrics = {**scrape(cluster.ports["broker-a"].metrics)}
            models = {
                labels["msgModel"]
                for labels, _ in metrics.get("rocketmq_group_diff", [])
                if labels["group"] in groups and labels["countOfOnlineConsumers"] != "0"
            }
            return models == {"1"}  # CLUSTERING's ordinal, as the exporter writes it

        eventually_sync(online_as_clustering, "the groups online, msgModel 1", 30)

        def clients_counted() -> bool:
            m = scrape(cluster.ports["broker-a"].metrics)
            members = [
                (labels, v)
                for labels, v in m.get("rocketmq_group_count", [])
                if labels["group"] == "ops-groups-retry"
            ]
            producers = family_values(m, "rocketmq_producer_count", group="ops-groups-pg")
            return (
                len(members) == 1
                and members[0][1] == 1
                and members[0][0]["caddr"].startswith("127.0.0.1:")
                and "@" in members[0][0]["localaddr"]
                and producers == [1.0]
            )

        eventually_sync(clients_counted, "the producer and the consumers counted", 30)
        eventually_sync(
            lambda: all(len(done[g]) >= 9 for g in groups), "9 messages consumed by each", 30
        )
        for consumer in consumers:
            consumer.shutdown()
        consumers.clear()
        send(producer, topic, "later", 5)

        def metrics_of_both() -> dict[str, list[tuple[dict[str, str], float]]]:
            out: dict[str, list[tuple[dict[str, str], float]]] = {}
            for name in ("broker-a", "broker-b"):
                for family, samples in scrape(cluster.ports[name].metrics).items():
                    out.setdefault(family, []).extend(samples)
            return out

        def backlog_seen() -> bool:
            m = metrics_of_both()
            return (
                all(
                    sum(family_values(m, "rocketmq_message_accumulation", topic=topic, group=g))
                    == 5
                    and sum(family_values(m, "rocketmq_group_diff", topic=topic, group=g)) == 5
                    for g in groups
                )
                and sum(family_values(m, "rocketmq_group_dlqdiff", group="ops-groups-dlq")) == 1
            )

        eventually_sync(backlog_seen, "5 messages behind in each group, 1 in the DLQ", 40)
        metrics = metrics_of_both()
        for group in groups:
            ages = family_values(
                metrics, "rocketmq_group_get_latency_by_storetime", topic=topic, group=group
            )
            assert ages and max(ages) > 0, ages
        assert family_values(metrics, "rocketmq_group_dlqdiff", topic="%DLQ%ops-groups-dlq")
        assert family_values(
            metrics, "rocketmq_group_retrydiff", topic="%RETRY%ops-groups-retry"
        ), "the retry group's %RETRY% topic has a row"
        assert family_values(metrics, "rocketmq_topic_dlq_offset", group="ops-groups-dlq") == [1.0]
        assert "rocketmq_producer_message_size" in metrics
        assert "rocketmq_consumer_message_size" in metrics
        for family in ("rocketmq_brokeruntime_put_tps60", "rocketmq_brokeruntime_pmdt_0to10ms",
                       "rocketmq_brokeruntime_commitlogdir_capacity_free",
                       "process_resident_memory_bytes", "python_info"):  # fmt: skip
            assert family in metrics, family
        [(_, rss)] = scrape(cluster.ports["broker-a"].metrics)["process_resident_memory_bytes"]
        assert rss > 10 * 1024 * 1024
    finally:
        for consumer in consumers:
            consumer.shutdown()
        producer.shutdown()


DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "tidemq-dashboard.json"
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}


def dashboard_metric_names() -> set[str]:
    """The metric names in the dashboard's queries: words that are not functions (followed
    by `(`), keywords, label names in `by (...)`, durations or numbers."""
    names = set()
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", target["expr"])
            expr = re.sub(r"\[[^\]]*\]|\{[^}]*\}", " ", expr)
            for word in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*(?!\w*\s*\()", expr):
                if word not in PROMQL_KEYWORDS:
                    names.add(word)
    return names


def test_every_dashboard_query_names_a_metric_the_daemons_export(cluster: LaunchedCluster) -> None:
    names = dashboard_metric_names()
    assert {"rocketmq_broker_tps", "tidemq_send_latency_seconds_bucket"} <= names
    assert "sum" not in names and "rate" not in names and "le" not in names
    exported: set[str] = set()
    ports = [cluster.ports["broker-a"].metrics, cluster.ports["broker-a-s"].metrics]
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        # Every family the daemon declares (# TYPE), with the sample names a histogram or a
        # counter adds: a family without a sample right now is still exported.
        for family in text_string_to_metric_families(text):
            exported.add(family.name)
            exported.update(
                f"{family.name}{suffix}" for suffix in ("_bucket", "_count", "_sum", "_total")
            )
    namesrv_metrics = scrape(cluster.namesrv_metrics_port)
    exported.update(namesrv_metrics)
    missing = sorted(names - exported)
    assert not missing, f"the dashboard queries metrics no daemon exports: {missing}"


def slave_dispatch_behind(cluster: LaunchedCluster) -> float:
    samples = scrape(cluster.ports["broker-a-s"].metrics)["tidemq_ha_slave_dispatch_behind_bytes"]
    [(labels, value)] = samples
    assert labels == {"cluster": "DefaultCluster", "broker": "broker-a"}
    return value


def publishing_brokers(producer: Producer, topic: str) -> set[str]:
    """The brokers whose queues the producer sends `topic` to now."""
    info = producer._async.instance.publish_infos.get(topic)
    return set() if info is None else {q.broker_name for q in info.queues}


def test_wipe_write_perm_moves_producers_to_the_other_master(cluster: LaunchedCluster) -> None:
    topic = "OpsWipe"
    create_topic(cluster, topic)
    producer = Producer("ops-wipe-pg", config=client_config(cluster))
    producer.start()
    try:
        assert set(send(producer, topic, "before", 20)) == {"broker-a", "broker-b"}
        out = admin_cli(cluster, "wipeWritePerm", "-b", "broker-a").output
        assert f"wipe write perm of broker[broker-a] in name server[{cluster.namesrv_addr}] OK" in (
            out
        )
        # The producer refreshes its routes every second; it sends only to writable queues.
        eventually_sync(
            lambda: publishing_brokers(producer, topic) == {"broker-b"},
            "broker-a's queues to go",
            10,
        )
        assert set(send(producer, topic, "during", 20)) == {"broker-b"}
        admin_cli(cluster, "addWritePerm", "-b", "broker-a")
        eventually_sync(
            lambda: publishing_brokers(producer, topic) == {"broker-a", "broker-b"},
            "broker-a's queues to come back",
            10,
        )
        assert set(send(producer, topic, "after", 20)) == {"broker-a", "broker-b"}
    finally:
        producer.shutdown()
        CliRunner().invoke(mqadmin, ["addWritePerm", "-n", cluster.namesrv_addr, "-b", "broker-a"])


def test_make_run_starts_the_local_cluster_and_ctrl_c_stops_every_process(
    tmp_path: Path,
) -> None:
    """`make run` (free ports through RUN_ARGS), then SIGINT to its process group: a terminal's
    Ctrl-C. The launcher stops the slave, the master and the name server, in that order."""
    launched = LaunchedCluster.start("local", tmp_path / "local", via_make=True)
    try:
        assert set(launched.pids) == {"namesrv", "broker-a", "broker-a-s", "dashboard"}
        assert all(alive(pid) for pid in launched.pids.values())
        # The dashboard started with the cluster, at the address "cluster ready" names.
        url = f"http://127.0.0.1:{launched.dashboard_port}/"
        assert f"dashboard {url};" in launched.output()
        with urllib.request.urlopen(url + "api/cluster", timeout=30) as answer:
            shown = json.loads(answer.read())
        assert {b["address"] for b in shown["brokers"]} == {
            launched.address("broker-a"),
            launched.address("broker-a-s"),
        }
        # No ACL and bound to 127.0.0.1: the dashboard of `make run` may change the cluster.
        with urllib.request.urlopen(url + "api/overview", timeout=30) as answer:
            overview = json.loads(answer.read())
        assert overview["writable"] is True, overview
        eventually_sync(lambda: "HA: broker-a/1 lag" in launched.output(), "the status line", 10)
        workers = {
            worker
            for name in ("broker-a", "broker-a-s")
            for worker in index_workers_of(launched.pids[name])
        }
        assert len(workers) == 2, "each broker builds its index in a worker process"
        launched.interrupt()
        launched.process.wait(60)
        eventually_sync(lambda: "stopped; stores and logs kept" in launched.output(), "the end", 30)
    finally:
        launched.stop()
    assert not [name for name, pid in launched.pids.items() if alive(pid)]
    assert not [pid for pid in workers if alive(pid)], "index workers outlived Ctrl-C"
    output = launched.output()
    assert output.index("stopped dashboard") < output.index("stopped broker-a-s")
    assert output.index("stopped broker-a-s") < output.index("stopped broker-a ")
    assert output.index("stopped broker-a ") < output.index("stopped namesrv")
    assert (tmp_path / "local" / "logs" / "broker-a.log").exists()


def free_block(size: int) -> int:
    """A base below the ephemeral range with `size` ports free from it (checked, not held)."""
    for _ in range(50):
        base = free_port(span=size)
        if all(port_is_free("0.0.0.0", base + i) for i in range(size)):
            return base
    raise AssertionError(f"no {size} free ports in a row")


def test_make_run_port_base_moves_every_port_at_once(tmp_path: Path) -> None:
    """`make run PORT_BASE=N`: the name server on N (metrics N+2), broker-a on N+10..N+13,
    broker-a-s on N+20, N+22 and N+23 (gRPC last), the dashboard on N+30, each held by the
    daemon named."""
    base = free_block(40)
    data = tmp_path / "local"
    data.mkdir()
    run_args = ["--data", str(data), "--interval", "1"]
    for item in (*TEST_STORE_OVERRIDES, "bindAddress=127.0.0.1"):
        run_args += ["-o", f"all:{item}"]
    output_path = data / "launcher.out"
    with output_path.open("wb") as out:
        make = subprocess.Popen(
            ["make", "-s", "--no-print-directory", "run", f"PORT_BASE={base}",
             f"RUN_ARGS={shlex.join(run_args)}"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
            start_new_session=True,
        )  # fmt: skip
    try:

        def ready() -> bool:
            text = output_path.read_text(errors="replace")
            assert make.poll() is None, text
            return "cluster ready" in text

        eventually_sync(ready, "make run ready", 120)
        text = output_path.read_text(errors="replace")
        pids = {m[1]: int(m[2]) for m in re.finditer(r"started (\S+) \(pid (\d+),", text)}
        expected = {
            base: "namesrv",
            base + 2: "namesrv",
            base + 10: "broker-a",
            base + 11: "broker-a",
            base + 12: "broker-a",
            base + 13: "broker-a",
            base + 20: "broker-a-s",
            base + 22: "broker-a-s",
            base + 23: "broker-a-s",
            base + 30: "dashboard",
        }
        for port, name in expected.items():
            assert pid_listens_on(pids[name], port), (name, port)
        assert f"name server 127.0.0.1:{base};" in text
        assert f"dashboard http://127.0.0.1:{base + 30}/;" in text
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)
            try:
                make.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait()


# --- the launcher tells the truth (issue 19) ------------------------------------------------


def status_lines(launched: LaunchedCluster) -> list[str]:
    return [line for line in launched.output().splitlines() if line.startswith("[")]


def test_a_busy_port_stops_the_launcher_before_anything_starts(tmp_path: Path) -> None:
    """Any fixed port held by another program (here the slave's metrics port, held by this
    test): one line naming the port, what it is for and the holder's pid; exit 1; no daemon."""
    namesrv_port, ports = choose_ports("local")
    busy = ports["broker-a-s"].metrics
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        launched = LaunchedCluster.start(
            "local", tmp_path / "c", ports=(namesrv_port, ports), wait_ready=False
        )
        try:
            assert launched.process.wait(60) == 1
        finally:
            launched.stop()
    output = launched.output()
    assert f"port {busy} (broker-a-s metricsPort) is in use by pid {os.getpid()} (" in output
    assert "started " not in output and "cluster ready" not in output
    assert not (tmp_path / "c" / "logs").exists()


def test_a_daemon_that_cannot_start_stops_the_launch_with_status_1(tmp_path: Path) -> None:
    """The slave refuses its configuration and exits 1: the launcher says so at once (not after
    its start timeout), stops what it started, exits 1 and never says "cluster ready"."""
    logs = tmp_path / "c" / "logs"
    logs.mkdir(parents=True)
    (logs / "broker-a-s.log").write_text("an earlier run's last line: broker shutting down\n")
    launched = LaunchedCluster.start(
        "local",
        tmp_path / "c",
        "brokerId=0",  # -o all: a SLAVE with brokerId 0 is refused
        launcher_args=("--start-timeout", "600"),
        wait_ready=False,
    )
    try:
        assert launched.process.wait(120) == 1
    finally:
        launched.stop()
    output = launched.output()
    assert "broker-a-s exited while starting (exit status 1)" in output
    assert "a SLAVE's brokerId must be > 0" in output
    # The log is appended to; the tail quoted is this run's only.
    assert "\n----- tidemq-cluster: started " in (logs / "broker-a-s.log").read_text()
    assert "cluster ready" not in output
    assert "an earlier run's last line" not in output
    assert "stopped broker-a (exit status 0)" in output


def test_a_dead_master_is_reported_while_its_slave_keeps_serving(tmp_path: Path) -> None:
    """Rates over the last second, slaves named by broker name and id; then kill -9 of the
    master: reported on its own line and as DOWN on the status line, the name server and the
    slave keep running and serving, and the launcher exits 1 at Ctrl-C (a daemon is down)."""
    launched = LaunchedCluster.start("local", tmp_path / "c")
    try:
        eventually_sync(
            lambda: any("HA: broker-a/1 lag" in line for line in status_lines(launched)),
            "the slave named broker-a/1 on the status line",
            30,
        )

        sent_from = len(status_lines(launched))
        with Producer("launcher-pg", launched.namesrv_addr) as producer:
            for _ in range(400):
                producer.send(Message("LauncherRates", b"x" * 64))
        lines_after_sending = len(status_lines(launched))
        eventually_sync(
            lambda: any(
                re.search(r" in [1-9][0-9.]* msg/s", line)
                for line in status_lines(launched)[sent_from:]
            ),
            "a status line with messages in",
            30,
        )
        # Over the last second: the rate is back to 0 once sending stopped (a 10-second
        # average, as RocketMQ's putTps, would still show most of it).
        eventually_sync(
            lambda: any(
                " in 0.0 msg/s  out 0.0 msg/s (last " in line
                for line in status_lines(launched)[lines_after_sending + 1 :]
            ),
            "the rate back to 0 after sending stopped",
            30,
        )

        os.kill(launched.pids["broker-a"], signal.SIGKILL)
        eventually_sync(
            lambda: (
                "broker-a died (killed by SIGKILL); the others keep running" in (launched.output())
            ),
            "the death reported",
            30,
        )
        eventually_sync(
            lambda: "DOWN: broker-a (killed by SIGKILL)" in (status_lines(launched) or [""])[-1],
            "DOWN on the status line",
            30,
        )
        assert alive(launched.pids["namesrv"]) and alive(launched.pids["broker-a-s"])
        assert launched.process.poll() is None

        async def slave_role() -> str:
            async with AdminClient(launched.namesrv_addr) as admin:
                return (await admin.runtime_info(launched.address("broker-a-s")))["brokerRole"]

        assert asyncio.run(slave_role()) == "SLAVE"
        launched.interrupt()
        assert launched.process.wait(60) == 1
    finally:
        launched.stop()
    assert "down at the end: broker-a (killed by SIGKILL)" in launched.output()
    assert "stopped broker-a-s (exit status 0)" in launched.output()


def test_restart_starts_a_dead_daemon_again(tmp_path: Path) -> None:
    launched = LaunchedCluster.start("single", tmp_path / "c", launcher_args=("--restart",))
    try:
        first = launched.pids["broker-a"]
        os.kill(first, signal.SIGKILL)
        eventually_sync(lambda: "restarting broker-a" in launched.output(), "the restart", 60)
        eventually_sync(lambda: launched.refresh_pids()["broker-a"] != first, "a new broker-a", 60)
        eventually_sync(
            lambda: (
                "1 master(s)" in (status_lines(launched) or [""])[-1]
                and "DOWN" not in status_lines(launched)[-1]
            ),
            "the restarted master on the status line",
            60,
        )
        assert alive(launched.pids["broker-a"])
        launched.interrupt()
        assert launched.process.wait(60) == 0
    finally:
        launched.stop()


def test_sigterm_while_starting_stops_what_started_and_exits_1(tmp_path: Path) -> None:
    """The slave is pointed at an HA port nobody listens on, so the cluster never becomes
    healthy; SIGTERM then stops every daemon started so far and the launcher exits 1."""
    launched = LaunchedCluster.start(
        "local",
        tmp_path / "c",
        launcher_args=(
            "--start-timeout",
            "600",
            "-o",
            f"broker-a-s:haMasterAddress=127.0.0.1:{free_port()}",
        ),
        wait_ready=False,
    )
    try:
        eventually_sync(lambda: "started broker-a-s" in launched.output(), "the slave started", 60)
        launched.refresh_pids()
        launched.process.send_signal(signal.SIGTERM)
        assert launched.process.wait(60) == 1
    finally:
        launched.stop()
    output = launched.output()
    assert "interrupted while starting: the cluster never came up" in output
    assert "cluster ready" not in output
    assert not [name for name, pid in launched.pids.items() if alive(pid)]
