"""Prometheus metrics of a broker and of a name server, served on `metricsPort`.

`metricsPort` (broker and name server properties): -1 (the default) serves nothing; 0 takes a
free port; any other value is the port. The endpoint listens on `bindAddress` and answers
`GET /metrics` with Prometheus' text format (`prometheus_client.generate_latest`); the values
are read on the event loop at scrape time, so they are a consistent snapshot.

Broker families use rocketmq-exporter's names and label names, so its dashboards and alert
rules (`example.rules`) work unchanged; each broker reports its own numbers (the exporter asks
every master through the admin API; scrape every broker instead):

- `rocketmq_broker_tps`, `rocketmq_broker_qps` {cluster, brokerIP, broker}: messages put and
  read per second (last 10 s).
- `rocketmq_broker_commitlog_diff` {cluster, brokerIP, broker}: the HA lag in bytes, master max
  offset minus the slave's acknowledged offset; a master reports one per slave (brokerIP is the
  slave's address).
- `rocketmq_producer_tps` {cluster, broker, topic}: messages put per second (10 s).
- `rocketmq_producer_offset` {cluster, broker, topic}: sum of the topic's queue max offsets.
- `rocketmq_consumer_tps` {cluster, broker, topic, group}: messages read per second (10 s).
- `rocketmq_consumer_offset` {cluster, broker, topic, group}: sum of committed offsets.
- `rocketmq_group_diff` {group, topic, countOfOnlineConsumers, msgModel}: the group's lag in
  messages on this broker. The three offset families come from masters only (as the exporter
  reads masters), so summing over brokers does not count a group twice.
- `rocketmq_brokeruntime_*` {cluster, brokerIP, brokerHost, des, boottime, broker_version}:
  commitlog_disk_ratio, commitlog_maxoffset, commitlog_minoffset, msg_put_total_today_now,
  msg_gettotal_today_now, dispatch_behind_bytes, put_tps10, gettransfered_tps10.
- `tidemq_ha_slave_dispatch_behind_bytes` {cluster, broker}: on a slave, the bytes received
  from its master that dispatch has not put in the ConsumeQueues yet (a catch-up appends at
  wire speed and dispatch follows; the same number as `dispatchBehindBytes` in its HA status).
- `tidemq_send_latency_seconds` and `tidemq_pull_latency_seconds` {cluster, broker}: histograms
  of the time to serve a send (replication wait included) and a pull (long-polling wait
  excluded); tidemq's own, the exporter has no latency histograms.

- `tidemq_controller_is_master`, `tidemq_controller_epoch`, `tidemq_controller_elections`,
  `tidemq_controller_sync_state_set_size` {cluster, broker, brokerId}: controller mode only
  (broker/failover.py): whether this broker holds the lease, the group's epoch, elections won,
  and the SyncStateSet's size as the master keeps it.

Name server families (tidemq's own): `tidemq_namesrv_brokers{cluster, broker}` (live addresses
of each broker group) and `tidemq_namesrv_topics` (topics with a route).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tidemq.broker.managers.clients import ConsumerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.processors.ops import VERSION_DESC
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import BrokerStats, LatencyHistogram, RateSampler
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore

if TYPE_CHECKING:
    from tidemq.broker.namesrv.route_info import RouteInfoManager

__all__ = ["BrokerCollector", "MetricsServer", "NamesrvCollector", "registry_for"]

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD: Final = 8192
READ_TIMEOUT: Final = 10.0

_BROKER_LABELS: Final = ["cluster", "brokerIP", "broker"]
_TOPIC_LABELS: Final = ["cluster", "broker", "topic"]
_GROUP_LABELS: Final = ["cluster", "broker", "topic", "group"]
_DIFF_LABELS: Final = ["group", "topic", "countOfOnlineConsumers", "msgModel"]
_RUNTIME_LABELS: Final = ["cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version"]


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _histogram(
    name: str, doc: str, labels: list[str], values: list[str], hist: LatencyHistogram
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    buckets = [("+Inf" if math.isinf(le) else repr(le), float(n)) for le, n in hist.cumulative()]
    family.add_metric(values, buckets, sum_value=hist.total_seconds)
    return family


class BrokerCollector(Collector):
    """Reads a running broker's tables and counters at scrape time."""

    def __init__(
        self,
        state: BrokerState,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        stats: BrokerStats,
        rates: RateSampler,
        *,
        ha_runtime_info: Callable[[], dict[str, object]],
        runtime_info: Callable[[], dict[str, str]],
    ) -> None:
        """`ha_runtime_info`: GET_BROKER_HA_STATUS's table; `runtime_info`:
        GET_BROKER_RUNTIME_INFO's (`OpsProcessor.runtime_info`)."""
        self.state = state
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.stats = stats
        self.rates = rates
        self.ha_runtime_info = ha_runtime_info
        self.runtime_info = runtime_info

    def collect(self) -> Iterator[Metric]:
        config = self.state.config
        cluster = config.broker_cluster_name
        name = config.broker_name
        address = self.state.advertised_address
        rates = self.rates
        put10, get10 = rates.tps(10)

        tps = _gauge("rocketmq_broker_tps", "BrokerPutNums", _BROKER_LABELS)
        tps.add_metric([cluster, address, name], put10)
        qps = _gauge("rocketmq_broker_qps", "BrokerGetNums", _BROKER_LABELS)
        qps.add_metric([cluster, address, name], get10)
        diff = _gauge("rocketmq_broker_commitlog_diff", "brokerCommitLogDiffGauge", _BROKER_LABELS)
        info = self.ha_runtime_info()
        slaves = info.get("haConnectionInfo") if info.get("master") else None
        for slave in slaves if isinstance(slaves, list) else []:
            if isinstance(slave, dict):
                diff.add_metric([cluster, str(slave["addr"]), name], float(slave["diff"]))
        yield from (tps, qps, diff)
        if info.get("master") is False:
            behind = _gauge(
                "tidemq_ha_slave_dispatch_behind_bytes",
                "Bytes a slave received from its master and has not dispatched yet",
                ["cluster", "broker"],
            )
            behind.add_metric([cluster, name], float(info.get("dispatchBehindBytes", 0)))  # type: ignore[arg-type]
            yield behind

        producer_tps = _gauge("rocketmq_producer_tps", "TopicPutNums", _TOPIC_LABELS)
        for topic, rate in sorted(rates.topic_put_tps().items()):
            producer_tps.add_metric([cluster, name, topic], rate)
        consumer_tps = _gauge("rocketmq_consumer_tps", "GroupGetNums", _GROUP_LABELS)
        for (group, topic), rate in sorted(rates.group_get_tps().items()):
            consumer_tps.add_metric([cluster, name, topic, group], rate)
        yield from (producer_tps, consumer_tps)

        controller = info.get("controller")
        if isinstance(controller, dict):
            yield from _controller_metrics(cluster, name, controller)
        if self.store.role is not BrokerRole.SLAVE:
            yield from self._offsets(cluster, name)
        yield from self._runtime(cluster, address)
        labels = ["cluster", "broker"]
        stats = self.stats
        yield _histogram(
            "tidemq_send_latency_seconds",
            "Time to serve a send (replication wait included)",
            labels,
            [cluster, name],
            stats.send_latency,
        )
        yield _histogram(
            "tidemq_pull_latency_seconds",
            "Time to serve a pull (long-polling wait excluded)",
            labels,
            [cluster, name],
            stats.pull_latency,
        )

    def _offsets(self, cluster: str, name: str) -> Iterable[Metric]:
        store = self.store
        topics = self.topics
        producer_offset = _gauge("rocketmq_producer_offset", "TopicOffset", _TOPIC_LABELS)
        consumer_offset = _gauge(
            "rocketmq_consumer_offset", "GroupBrokerTotalOffset", _GROUP_LABELS
        )
        group_diff = _gauge("rocketmq_group_diff", "GroupDiff", _DIFF_LABELS)
        max_by_topic: dict[str, dict[int, int]] = {}
        for topic in sorted(topics.topics()):
            config = topics.select(topic)
            if config is None or topics.is_system_topic(topic):
                continue
            highs = {q: store.max_offset_in_queue(topic, q) for q in range(config.write_queue_nums)}
            max_by_topic[topic] = highs
            producer_offset.add_metric([cluster, name, topic], float(sum(highs.values())))
        snapshot = self.offsets.snapshot()
        for key in sorted(snapshot):
            topic, _, group = key.partition("@")
            if topic not in max_by_topic:
                continue
            highs = max_by_topic[topic]
            queues = snapshot[key]
            consumer_offset.add_metric([cluster, name, topic, group], float(sum(queues.values())))
            lag = sum(max(high - max(queues.get(q, 0), 0), 0) for q, high in highs.items())
            info = self.consumers.get_group_info(group)
            online = 0 if info is None else len(info.channels)
            model = "" if info is None else info.message_model.value
            group_diff.add_metric([group, topic, str(online), model], float(lag))
        return (producer_offset, consumer_offset, group_diff)

    def _runtime(self, cluster: str, address: str) -> Iterable[Metric]:
        config = self.state.config
        table = self.runtime_info()
        des = config.broker_name + ("" if config.broker_id == 0 else "_slave")
        values = [cluster, address, address.rpartition(":")[0], des, table["bootTimestamp"]]
        values.append(VERSION_DESC)
        gauges = {
            "commitlog_disk_ratio": float(table["commitLogDiskRatio"]),
            "commitlog_maxoffset": float(table["commitLogMaxOffset"]),
            "commitlog_minoffset": float(table["commitLogMinOffset"]),
            "msg_put_total_today_now": float(table["msgPutTotalTodayNow"]),
            "msg_gettotal_today_now": float(table["msgGetTotalTodayNow"]),
            "dispatch_behind_bytes": float(table["dispatchBehindBytes"]),
            "put_tps10": float(table["putTps"].split()[0]),
            "gettransfered_tps10": float(table["getTransferedTps"].split()[0]),
        }
        for key, value in gauges.items():
            family = _gauge(f"rocketmq_brokeruntime_{key}", f"brokerRuntime {key}", _RUNTIME_LABELS)
            family.add_metric(values, value)
            yield family


def _controller_metrics(cluster: str, name: str, info: dict[str, object]) -> Iterable[Metric]:
    labels = ["cluster", "broker", "brokerId"]
    values = [cluster, name, str(info.get("brokerId"))]
    members = info.get("syncStateSet")
    for metric, doc, value in (
        ("tidemq_controller_is_master", "1 when this broker holds its group's lease", "isMaster"),
        ("tidemq_controller_epoch", "The group's epoch as this broker knows it", "epoch"),
        ("tidemq_controller_elections", "Elections this broker won since it started", "elections"),
    ):
        gauge = _gauge(metric, doc, labels)
        gauge.add_metric(values, float(info.get(value) or 0))  # type: ignore[arg-type]
        yield gauge
    size = _gauge(
        "tidemq_controller_sync_state_set_size",
        "Members of the SyncStateSet (a master's view; 0 on a slave)",
        labels,
    )
    size.add_metric(values, float(len(members)) if isinstance(members, list) else 0.0)
    yield size


class NamesrvCollector(Collector):
    def __init__(self, routes: RouteInfoManager) -> None:
        self.routes = routes

    def collect(self) -> Iterator[Metric]:
        brokers = _gauge(
            "tidemq_namesrv_brokers", "Live addresses of each broker group", ["cluster", "broker"]
        )
        for name, data in sorted(self.routes.broker_addr_table.items()):
            brokers.add_metric([data.cluster, name], float(len(data.broker_addrs)))
        topics = GaugeMetricFamily(
            "tidemq_namesrv_topics",
            "Topics with a route",
            value=float(len(self.routes.topic_queue_table)),
        )
        yield from (brokers, topics)


def registry_for(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class MetricsServer:
    """A minimal HTTP/1.0 server on the event loop: `GET /metrics`, anything else 404."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] == b"/metrics":
                body = generate_latest(self.registry)
                status, kind = b"200 OK", CONTENT_TYPE_LATEST.encode()
            else:
                body, status, kind = b"not found: try /metrics\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.0 " + status + b"\r\nContent-Type: " + kind
                + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
