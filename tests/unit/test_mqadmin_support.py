"""What mqadmin and the metrics stand on: admin bodies, rate sampling, latency buckets, the
launcher's topology loading, the name server's metrics (no sockets)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidemq.broker.daemons.brokerd import load_settings
from tidemq.broker.daemons.cluster import ClusterError, RateMeter, load_topology, parse_override
from tidemq.broker.metrics import NamesrvCollector, registry_for
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.broker.processors.ops import mask_permission
from tidemq.broker.stats import LATENCY_BUCKETS, BrokerStats, LatencyHistogram, RateSampler
from tidemq.client.protocol.admin import (
    ConsumeStats,
    HARuntimeInfo,
    MapForm,
    OffsetWrapper,
    ResetOffsetBody,
    TopicOffset,
    TopicStatsTable,
    decode_properties_text,
    encode_properties_text,
)
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.models import TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.remoting.errors import BodyDecodeError

MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-b", 1)
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_reset_offset_body_pairs_round_trip_and_fastjson_form() -> None:
    body = ResetOffsetBody({MQ1: 5, MQ0: 3})
    pairs = json.loads(body.encode())
    assert pairs == {
        "offsetTable": [
            [{"topic": "T", "brokerName": "broker-a", "queueId": 0}, 3],
            [{"topic": "T", "brokerName": "broker-b", "queueId": 1}, 5],
        ]
    }
    assert ResetOffsetBody.decode(body.encode()).offset_table == {MQ0: 3, MQ1: 5}
    # fastjson's Map<MessageQueue, Long>: object keys, bean properties in alphabetical order.
    assert body.encode(MapForm.FASTJSON) == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:3,'
        b'{"brokerName":"broker-b","queueId":1,"topic":"T"}:5}}'
    )
    assert ResetOffsetBody.decode(b'{"offsetTable":{"T@broker-a@0":7}}').offset_table == {MQ0: 7}
    with pytest.raises(BodyDecodeError):
        ResetOffsetBody.decode(b'{"offsetTable":[[1,2]]}')


def test_consume_and_topic_stats_round_trip() -> None:
    stats = ConsumeStats({MQ0: OffsetWrapper(10, 4, 99), MQ1: OffsetWrapper(3, 3)}, 2.5)
    decoded = ConsumeStats.decode(stats.encode())
    assert decoded == stats
    assert decoded.total_diff() == 6
    assert json.loads(stats.encode())["consumeTps"] == 2.5
    fast = stats.encode(MapForm.FASTJSON).decode()
    assert '{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"brokerOffset":10,' in fast
    table = TopicStatsTable({MQ0: TopicOffset(1, 9, 5)})
    assert TopicStatsTable.decode(table.encode()) == table


def test_ha_runtime_info_reads_master_and_slave_answers() -> None:
    master = HARuntimeInfo.decode(
        b'{"master":true,"masterCommitLogMaxOffset":500,"inSyncSlaveNums":1,"haConnectionInfo":'
        b'[{"addr":"1.2.3.4:5","slaveAckOffset":400,"diff":100,"inSync":true,'
        b'"transferredByteInSecond":10,"transferFromWhere":400}]}'
    )
    assert master.master and master.ha_connection_info[0].diff == 100
    slave = HARuntimeInfo.decode(b'{"master":false,"masterAddr":"1.2.3.4:5","maxOffset":42}')
    assert slave.ha_client_runtime_info is not None
    assert slave.ha_client_runtime_info.max_offset == 42


def test_properties_text() -> None:
    text = encode_properties_text({"a": "1", "brokerPermission": "4"})
    assert text == b"a=1\nbrokerPermission=4\n"
    assert decode_properties_text(b"# c\n\n a = 1 \nb=x=y\n") == {"a": "1", "b": "x=y"}
    with pytest.raises(BodyDecodeError):
        decode_properties_text(b"novalue\n")


def test_rate_sampler_windows_and_day_change() -> None:
    now = [0.0]
    day = [datetime.date(2024, 1, 1)]
    stats = BrokerStats()
    sampler = RateSampler(stats, clock=lambda: now[0], today=lambda: day[0])
    for _ in range(20):
        now[0] += 1
        stats.on_put("T", 10, 100)
        stats.on_get("g", "T", 5, 50)
        sampler.sample()
    assert sampler.tps(10) == (10.0, 5.0)
    assert sampler.topic_put_tps() == {"T": 10.0}
    assert sampler.group_get_tps() == {("g", "T"): 5.0}
    assert sampler.today_morning == (0, 0)
    day[0] = datetime.date(2024, 1, 2)
    now[0] += 1
    sampler.sample()
    assert sampler.today_morning == (200, 100)
    assert sampler.yesterday_morning == (0, 0)


def test_latency_histogram_buckets() -> None:
    hist = LatencyHistogram()
    for seconds in (0.0005, 0.003, 0.003, 20.0):
        hist.observe(seconds)
    cumulative = dict(hist.cumulative())
    assert cumulative[LATENCY_BUCKETS[0]] == 1
    assert cumulative[0.005] == 3
    assert cumulative[10.0] == 3
    assert cumulative[float("inf")] == 4
    assert hist.count == 4


def test_mask_permission_follows_a_read_only_broker() -> None:
    assert mask_permission(6, 6) == 6
    assert mask_permission(6, 4) == 4
    assert mask_permission(7, 2) == 2


def test_topology_loading(tmp_path: Path) -> None:
    topology = load_topology(
        DEPLOY / "2m-2s-sync",
        tmp_path,
        [
            "namesrv:listenPort=19876",
            "all:mappedFileSizeCommitLog=4194304",
            "broker-b:listenPort=1",
        ],
    )
    assert [p.name for p in topology.processes] == [
        "namesrv",
        "broker-a",
        "broker-b",
        "broker-a-s",
        "broker-b-s",
    ]
    assert topology.namesrv_addr == "127.0.0.1:19876"
    a_slave = next(p for p in topology.brokers if p.name == "broker-a-s")
    assert a_slave.name == "broker-a-s" and a_slave.is_slave and a_slave.broker_id == 1
    assert "namesrvAddr=127.0.0.1:19876" in a_slave.args
    assert f"storePathRootDir={tmp_path / 'broker-a-s'}" in a_slave.args
    assert "mappedFileSizeCommitLog=4194304" in a_slave.args
    broker_b = next(p for p in topology.brokers if p.name == "broker-b")
    assert broker_b.port == 1 and broker_b.props["brokerRole"] == "SYNC_MASTER"
    with pytest.raises(ClusterError):
        load_topology(DEPLOY / "single", tmp_path, ["broker-z:listenPort=1"])
    with pytest.raises(ClusterError):
        parse_override("broker-a=listenPort")


@pytest.mark.parametrize("name", ["single", "2m-noslave", "2m-2s-async", "2m-2s-sync", "local"])
def test_sample_topologies_hold_rocketmq_keys(name: str, tmp_path: Path) -> None:
    topology = load_topology(DEPLOY / name, tmp_path)
    ports = [port for p in topology.processes for _, port in p.fixed_ports()]
    assert len(set(ports)) == len(ports)  # listen, HA and metrics ports all distinct
    for broker in topology.brokers:
        for key in ("brokerClusterName", "brokerName", "brokerId", "deleteWhen",
                    "fileReservedTime", "brokerRole", "flushDiskType"):  # fmt: skip
            assert key in broker.props, (broker.name, key)
        assert broker.is_slave == (broker.props["brokerId"] != "0")
        # Laptop-sized store files (deploy/README.md, "Disk").
        assert int(broker.props["mappedFileSizeCommitLog"]) <= 64 * 1024 * 1024
        assert int(broker.props["maxIndexNum"]) <= 2_000_000


def test_fixed_ports_of_a_master_a_slave_and_the_name_server(tmp_path: Path) -> None:
    topology = load_topology(
        DEPLOY / "local",
        tmp_path,
        ["namesrv:listenPort=7000", "namesrv:metricsPort=0", "broker-a:listenPort=7100",
         "broker-a:metricsPort=7102", "broker-a:grpcServerPort=7103", "broker-a-s:listenPort=7200",
         "broker-a-s:metricsPort=-1", "broker-a-s:grpcServerPort=-1"],
    )  # fmt: skip
    assert topology.namesrv.fixed_ports() == [("listenPort", 7000)]  # 0: any free port
    master = next(p for p in topology.brokers if not p.is_slave)
    slave = next(p for p in topology.brokers if p.is_slave)
    assert master.fixed_ports() == [
        ("listenPort", 7100),
        ("haListenPort", 7101),
        ("metricsPort", 7102),
        ("grpcServerPort", 7103),
    ]
    assert slave.fixed_ports() == [("listenPort", 7200)]  # a slave does not listen for HA
    bad = load_topology(DEPLOY / "single", tmp_path, ["broker-a:metricsPort=x"])
    with pytest.raises(ClusterError, match="broker-a: metricsPort: not an integer"):
        bad.brokers[0].fixed_ports()


def test_rate_meter_counts_the_messages_since_the_previous_sample() -> None:
    meter = RateMeter()
    assert meter.rates({"a:1": (100, 10)}, 50.0) == (0.0, 0.0, 0.0)  # the starting point
    assert meter.rates({"a:1": (300, 10), "b:1": (5, 0)}, 52.0) == (100.0, 0.0, 2.0)
    # b:1 counts from its first sample; a:1 restarted (its total fell): what it did since.
    assert meter.rates({"a:1": (40, 0), "b:1": (25, 4)}, 53.0) == (60.0, 4.0, 1.0)


def test_namesrv_metrics() -> None:
    routes = RouteInfoManager(clock=lambda: 0)
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T")})
    for broker_id in (0, 1):
        routes.register_broker(
            cluster_name="C",
            broker_addr=f"h:{broker_id}",
            broker_name="broker-a",
            broker_id=broker_id,
            ha_server_addr="",
            topic_config_wrapper=wrapper,
            filter_server_list=None,
            connection=object(),
        )
    text = generate_latest(registry_for(NamesrvCollector(routes))).decode()
    samples = {
        s.name: (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples["tidemq_namesrv_brokers"] == ({"cluster": "C", "broker": "broker-a"}, 2.0)
    assert samples["tidemq_namesrv_topics"][1] == 1.0


def test_put_message_distribute_time_steps_cover_every_bucket_once() -> None:
    from tidemq.broker.metrics import PMDT_STEPS, _quantile_ms
    from tidemq.broker.stats import LATENCY_BUCKETS, LatencyHistogram

    covered = [i for first, last in PMDT_STEPS.values() for i in range(first, last)]
    assert covered == list(range(len(LATENCY_BUCKETS) + 1))  # in order, none twice
    histogram = LatencyHistogram()
    assert _quantile_ms(histogram, 0.99) == 0.0
    for _ in range(98):
        histogram.observe(0.0005)  # under 1 ms
    histogram.observe(0.003)
    histogram.observe(3.5)
    assert histogram.counts[PMDT_STEPS["3to4s"][0]] == 1
    assert _quantile_ms(histogram, 0.99) == 5.0  # the 99th of 100 is in the 1-5 ms bucket
    assert _quantile_ms(histogram, 0.999) == 4000.0


def test_a_broker_behind_acl_serves_its_grpc_port_too() -> None:
    """The gRPC endpoint checks 5.x signatures against the ACL accounts (broker/proxy/auth.py)
    and serves TLS: a guarded broker opens it like any other, and its port is checked."""
    plain = load_settings({"grpcServerPort": "7300"})
    guarded = load_settings({"grpcServerPort": "7300", "aclEnable": "true", "aclFile": "a.yml"})
    assert ("grpcServerPort", 7300) in plain.fixed_ports()
    assert ("grpcServerPort", 7300) in guarded.fixed_ports()
