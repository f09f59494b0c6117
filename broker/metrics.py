"""Prometheus metrics of a broker and of a name server, served on `metricsPort`.

`metricsPort` (broker and name server properties): -1 (the default) serves nothing; 0 takes a
free port; any other value is the port. The endpoint listens on `bindAddress` and answers
`GET /metrics` with Prometheus' text format (`prometheus_client.generate_latest`); the values
are read on the event loop at scrape time, so they are a consistent snapshot. `GET /health` is
for probes (systemd, Kubernetes, load balancers): 200 "serving", or 503 and a JSON body with the
reasons (broker/health.py); a name server answers "serving" while it answers at all.

Broker families use rocketmq-exporter's names and label names, so its dashboards and alert
rules (`example.rules`) work unchanged; each broker reports its own numbers (the exporter asks
every master through the admin API; scrape every broker instead):

- `rocketmq_broker_tps`, `rocketmq_broker_qps` {cluster, brokerIP, broker}: messages put and
  read per second (last 10 s).
- `rocketmq_broker_commitlog_diff` {cluster, brokerIP, broker}: the HA lag in bytes, master max
  offset minus the slave's acknowledged offset; a master reports one per slave (brokerIP is the
  slave's broker address, `host:listenPort`, once the master has asked it; see
  broker/slave_names.py).
- `rocketmq_producer_tps` {cluster, broker, topic}: messages put per second (10 s);
  `rocketmq_producer_message_size` the same in bytes per second.
- `rocketmq_producer_offset` {cluster, broker, topic}: sum of the topic's queue max offsets;
  `rocketmq_topic_retry_offset` the same for `%RETRY%` topics and `rocketmq_topic_dlq_offset`
  {cluster, broker, group} for `%DLQ%` topics.
- `rocketmq_consumer_tps` {cluster, broker, topic, group}: messages read per second (10 s);
  `rocketmq_consumer_message_size` the same in bytes per second.
- `rocketmq_consumer_offset` {cluster, broker, topic, group}: sum of committed offsets.
- `rocketmq_group_diff` {group, topic, countOfOnlineConsumers, msgModel}: the group's lag in
  messages on this broker; `rocketmq_group_retrydiff` the same on its `%RETRY%` topic,
  `rocketmq_group_dlqdiff` the messages in its `%DLQ%` topic beyond what it consumed of it.
  msgModel is the exporter's ordinal: 0 BROADCASTING, 1 CLUSTERING (also for a group with no
  consumer online: its offsets are on the broker, so it is a CLUSTERING group).
- `rocketmq_producer_count` {cluster, broker, group}: producer instances of each group
  connected; `rocketmq_group_count` {caddr, localaddr, group}: consumers of each group online
  (their connections' addresses and client ids, comma-joined, as the exporter labels them).
- `rocketmq_message_accumulation` {cluster, broker, topic, group}: the lag again, labelled as
  the consumer families (the exporter's dashboard computes it from the offsets).
- `rocketmq_group_get_latency_by_storetime` {cluster, broker, topic, group}: how long (ms) the
  oldest message the group has not consumed has been stored, the largest over the queues; 0
  when caught up. The offset and group families come from masters only (as the exporter reads
  masters), so summing over brokers does not count a group twice.
- `rocketmq_brokeruntime_*` {cluster, brokerIP, brokerHost, des, boottime, broker_version}:
  from GET_BROKER_RUNTIME_INFO's table: commitlog_disk_ratio, consumequeue_disk_ratio,
  commitlog_maxoffset, commitlog_minoffset, msg_put_total_today_now, msg_gettotal_today_now,
  msg_puttotal_todaymorning, msg_gettotal_todaymorning, msg_puttotal_yesterdaymorning,
  msg_gettotal_yesterdaymorning, put_message_size_total, put_message_average_size,
  putmessage_times_total, earliest_message_timestamp, dispatch_behind_bytes,
  remain_howmanydata_toflush (GiB, as RocketMQ writes it), put_tps10/60/600,
  gettransfered_tps10/60/600; commitlogdir_capacity_total/free (bytes); put_latency_99 and
  put_latency_999 (ms: the upper bound of the histogram bucket holding the quantile) and the
  pmdt_* counts of sends by time taken in RocketMQ's steps (0ms = under 1 ms, 0to10ms, ...,
  10stomore). Families tidemq has no number for (thread-pool queues: it has none; page-cache
  lock time; transient store buffers) are left out rather than reported as a constant 0.
- `tidemq_ha_slave_dispatch_behind_bytes` {cluster, broker}: on a slave, the bytes received
  from its master that dispatch has not put in the ConsumeQueues yet (a catch-up appends at
  wire speed and dispatch follows; the same number as `dispatchBehindBytes` in its HA status).
- `tidemq_send_latency_seconds` and `tidemq_pull_latency_seconds` {cluster, broker}: histograms
  of the time to serve a send (replication wait included) and a pull (long-polling wait
  excluded); tidemq's own, the exporter has no latency histograms.
- `tidemq_broker_serving` {cluster, broker}: 1 when GET /health answers 200, else 0 (issue 30
  item 3, broker/health.py); `tidemq_dispatch_stuck` 1 while dispatch retries a record it
  cannot dispatch; `tidemq_dispatch_behind_bytes` the bytes not dispatched yet (every role);
  `tidemq_dispatch_quarantined_queues` the queues dispatch skips; counters
  `tidemq_dispatch_errors_total` (failed attempts), `tidemq_dispatch_quarantined_records_total`
  (records skipped) and `tidemq_schedule_undeliverable_total` (delayed or retry messages
  skipped because they can never be delivered). See store/dispatch_faults.py for the policy.
- `tidemq_pulls_held` {cluster, broker}: pulls and POPs held by long polling now;
  `tidemq_held_pulls_total` {cluster, broker, cause}: held ones ended, by cause (arrival,
  check, release, timeout, stop: broker/long_polling.py). `check` counts wake-ups the arrival
  missed, found by the periodic check (late answers).
- `tidemq_timer_pending` {cluster, broker}: timer messages waiting in the time wheel
  (broker/timer.py; RocketMQ's timerCongestNum), `tidemq_timer_read_behind_seconds` how far
  delivery is behind the clock, `tidemq_timer_offset_behind` timer messages stored but not yet
  in the wheel.
- The process's own (prometheus_client's collectors): `process_cpu_seconds_total`,
  `process_resident_memory_bytes`, `process_open_fds`, ..., `python_info`,
  `python_gc_collections_total`, ... (name servers too).

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
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from tidemq.broker.health import Health, check_health
from tidemq.broker.long_polling import PullRequestHoldService
from tidemq.broker.managers.clients import ConsumerManager, ProducerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.broker.processors.ops import VERSION_DESC
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import LATENCY_BUCKETS, BrokerStats, LatencyHistogram, RateSampler
from tidemq.client.protocol.heartbeat import MessageModel
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
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
MODEL_ORDINALS: Final = {MessageModel.BROADCASTING: "0", MessageModel.CLUSTERING: "1"}
# rocketmq_brokeruntime_pmdt_<key>: [first, last) slices of LatencyHistogram.counts (buckets up
# to 1 ms, 5 ms, 10 ms, 50 ms, 100 ms, 200 ms, 500 ms, 1 s, 2 s, 3 s, 4 s, 5 s, 10 s, more).
PMDT_STEPS: Final = {
    "0ms": (0, 1),  # under 1 ms (RocketMQ counts whole milliseconds: 0)
    "0to10ms": (1, 3),
    "10to50ms": (3, 4),
    "50to100ms": (4, 5),
    "100to200ms": (5, 6),
    "200to500ms": (6, 7),
    "500to1s": (7, 8),
    "1to2s": (8, 9),
    "2to3s": (9, 10),
    "3to4s": (10, 11),
    "4to5s": (11, 12),
    "5to10s": (12, 13),
    "10stomore": (13, 14),
}


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
        producers: ProducerManager,
        pull_holds: PullRequestHoldService | None = None,
        ha_runtime_info: Callable[[], dict[str, object]],
        runtime_info: Callable[[], dict[str, str]],
        health: Callable[[], Health] | None = None,
    ) -> None:
        """`ha_runtime_info`: GET_BROKER_HA_STATUS's table; `runtime_info`:
        GET_BROKER_RUNTIME_INFO's (`OpsProcessor.runtime_info`)."""
        self.state = state
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.producers = producers
        self.pull_holds = pull_holds
        self.stats = stats
        self.rates = rates
        self.ha_runtime_info = ha_runtime_info
        self.runtime_info = runtime_info
        self.health = health if health is not None else lambda: check_health(store)

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
                # The slave's broker address when known (broker/slave_names.py), not the
                # temporary port its HA connection comes from.
                slave_ip = str(slave.get("slaveBrokerAddr") or slave["addr"])
                diff.add_metric([cluster, slave_ip, name], float(slave["diff"]))
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
        producer_size = _gauge(
            "rocketmq_producer_message_size", "TopicPutMessageSize", _TOPIC_LABELS
        )
        for topic, rate in sorted(rates.topic_put_bytes().items()):
            producer_size.add_metric([cluster, name, topic], rate)
        consumer_size = _gauge(
            "rocketmq_consumer_message_size", "GroupGetMessageSize", _GROUP_LABELS
        )
        for (group, topic), rate in sorted(rates.group_get_bytes().items()):
            consumer_size.add_metric([cluster, name, topic, group], rate)
        yield from (producer_tps, consumer_tps, producer_size, consumer_size)

        controller = info.get("controller")
        if isinstance(controller, dict):
            yield from _controller_metrics(cluster, name, controller)
        if self.store.role is not BrokerRole.SLAVE:
            yield from self._offsets(cluster, name)
            yield from self._clients(cluster, name)
        yield from self._runtime(cluster, address)
        yield from self._health(cluster, name)
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
        if self.pull_holds is not None:
            yield from _held_pulls(self.pull_holds, [cluster, name])

    def _offsets(self, cluster: str, name: str) -> Iterable[Metric]:
        store = self.store
        topics = self.topics
        producer_offset = _gauge("rocketmq_producer_offset", "TopicOffset", _TOPIC_LABELS)
        retry_offset = _gauge("rocketmq_topic_retry_offset", "TopicRetryOffset", _TOPIC_LABELS)
        dlq_offset = _gauge(
            "rocketmq_topic_dlq_offset", "TopicDLQOffset", ["cluster", "broker", "group"]
        )
        consumer_offset = _gauge(
            "rocketmq_consumer_offset", "GroupBrokerTotalOffset", _GROUP_LABELS
        )
        group_diff = _gauge("rocketmq_group_diff", "GroupDiff", _DIFF_LABELS)
        retry_diff = _gauge("rocketmq_group_retrydiff", "GroupRetryDiff", _DIFF_LABELS)
        dlq_diff = _gauge("rocketmq_group_dlqdiff", "GroupDLQDiff", _DIFF_LABELS)
        accumulation = _gauge("rocketmq_message_accumulation", "MessageAccumulation", _GROUP_LABELS)
        latency = _gauge(
            "rocketmq_group_get_latency_by_storetime", "GroupGetLatencyByStoreTime", _GROUP_LABELS
        )
        max_by_topic: dict[str, dict[int, int]] = {}
        for topic in sorted(topics.topics()):
            config = topics.select(topic)
            if config is None:
                continue
            highs = {q: store.max_offset_in_queue(topic, q) for q in range(config.write_queue_nums)}
            max_by_topic[topic] = highs
            total = float(sum(highs.values()))
            if topic.startswith(RETRY_PREFIX):
                retry_offset.add_metric([cluster, name, topic], total)
            elif topic.startswith(DLQ_PREFIX):
                dlq_offset.add_metric([cluster, name, topic[len(DLQ_PREFIX) :]], total)
            elif not topics.is_system_topic(topic):
                producer_offset.add_metric([cluster, name, topic], total)
        snapshot = self.offsets.snapshot()
        now_ms = int(time.time() * 1000)
        for key in sorted(snapshot):
            topic, _, group = key.partition("@")
            if topic not in max_by_topic or topics.is_system_topic(topic):
                continue
            highs = max_by_topic[topic]
            queues = snapshot[key]
            lag = sum(max(high - max(queues.get(q, 0), 0), 0) for q, high in highs.items())
            diff_labels = self._diff_labels(group, topic)
            if topic.startswith(RETRY_PREFIX):
                retry_diff.add_metric(diff_labels, float(lag))
                continue
            if topic.startswith(DLQ_PREFIX):
                continue  # below, with the DLQs nobody consumes
            consumer_offset.add_metric([cluster, name, topic, group], float(sum(queues.values())))
            group_diff.add_metric(diff_labels, float(lag))
            accumulation.add_metric([cluster, name, topic, group], float(lag))
            behind = self._oldest_unconsumed_ms(topic, highs, queues, now_ms)
            latency.add_metric([cluster, name, topic, group], float(behind))
        for topic, highs in max_by_topic.items():
            if topic.startswith(DLQ_PREFIX):
                group = topic[len(DLQ_PREFIX) :]
                done = snapshot.get(f"{topic}@{group}", {})
                lows = {q: max(done.get(q, 0), store.min_offset_in_queue(topic, q)) for q in highs}
                waiting = sum(max(high - lows[q], 0) for q, high in highs.items())
                dlq_diff.add_metric(self._diff_labels(group, topic), float(waiting))
        return (
            producer_offset,
            retry_offset,
            dlq_offset,
            consumer_offset,
            group_diff,
            retry_diff,
            dlq_diff,
            accumulation,
            latency,
        )

    def _clients(self, cluster: str, name: str) -> Iterable[Metric]:
        """Producer instances per group and the consumers online per group (the exporter's
        caddr: their connections' addresses, localaddr: their client ids, comma-joined)."""
        producer_count = _gauge(
            "rocketmq_producer_count", "producer instance counter", ["cluster", "broker", "group"]
        )
        for group in sorted(self.producers.groups()):
            count = len(self.producers.group_channels(group))
            producer_count.add_metric([cluster, name, group], float(count))
        group_count = _gauge("rocketmq_group_count", "GroupCount", ["caddr", "localaddr", "group"])
        for group in sorted(self.consumers.groups()):
            info = self.consumers.get_group_info(group)
            members = (
                []
                if info is None
                else sorted((c.channel.peer, c.client_id) for c in info.channels.values())
            )
            caddr = ",".join(peer for peer, _ in members)
            localaddr = ",".join(client for _, client in members)
            group_count.add_metric([caddr, localaddr, group], float(len(members)))
        return (producer_count, group_count)

    def _diff_labels(self, group: str, topic: str) -> list[str]:
        """group, topic, countOfOnlineConsumers, msgModel: the exporter writes the model's
        ordinal (0 BROADCASTING, 1 CLUSTERING) and CLUSTERING for a group with no consumer
        online (its offsets are on the broker, which only a CLUSTERING group's are)."""
        info = self.consumers.get_group_info(group)
        online = 0 if info is None else len(info.channels)
        model = MessageModel.CLUSTERING if info is None else info.message_model
        return [group, topic, str(online), MODEL_ORDINALS[model]]

    def _oldest_unconsumed_ms(
        self, topic: str, highs: dict[int, int], done: dict[int, int], now_ms: int
    ) -> int:
        """How long the oldest message the group has not consumed has been stored (ms; 0 when
        it is caught up), the largest over the queues, as the exporter computes it."""
        store = self.store
        oldest = 0
        for queue, high in highs.items():
            offset = max(done.get(queue, 0), store.min_offset_in_queue(topic, queue))
            if offset >= high:
                continue
            stored = store.commitlog.store_timestamp_at(
                store.commitlog_offset_in_queue(topic, queue, offset)
            )
            if stored > 0:
                oldest = max(oldest, now_ms - stored)
        return oldest

    def _runtime(self, cluster: str, address: str) -> Iterable[Metric]:
        config = self.state.config
        table = self.runtime_info()
        des = config.broker_name + ("" if config.broker_id == 0 else "_slave")
        values = [cluster, address, address.rpartition(":")[0], des, table["bootTimestamp"]]
        values.append(VERSION_DESC)
        put_tps = [float(v) for v in table["putTps"].split()]
        get_tps = [float(v) for v in table["getTransferedTps"].split()]
        gauges = {
            "commitlog_disk_ratio": float(table["commitLogDiskRatio"]),
            "consumequeue_disk_ratio": float(table["consumeQueueDiskRatio"]),
            "commitlog_maxoffset": float(table["commitLogMaxOffset"]),
            "commitlog_minoffset": float(table["commitLogMinOffset"]),
            "msg_put_total_today_now": float(table["msgPutTotalTodayNow"]),
            "msg_gettotal_today_now": float(table["msgGetTotalTodayNow"]),
            "msg_puttotal_todaymorning": float(table["msgPutTotalTodayMorning"]),
            "msg_gettotal_todaymorning": float(table["msgGetTotalTodayMorning"]),
            "msg_puttotal_yesterdaymorning": float(table["msgPutTotalYesterdayMorning"]),
            "msg_gettotal_yesterdaymorning": float(table["msgGetTotalYesterdayMorning"]),
            "put_message_size_total": float(table["putMessageSizeTotal"]),
            "put_message_average_size": float(table["putMessageAverageSize"]),
            "putmessage_times_total": float(table["putMessageTimesTotal"]),
            "earliest_message_timestamp": float(table["earliestMessageTimeStamp"]),
            "dispatch_behind_bytes": float(table["dispatchBehindBytes"]),
            # As RocketMQ writes it: GiB (the exporter takes the number before the unit).
            "remain_howmanydata_toflush": float(table["remainHowManyDataToFlush"].split()[0]),
            "put_tps10": put_tps[0],
            "put_tps60": put_tps[1],
            "put_tps600": put_tps[2],
            "gettransfered_tps10": get_tps[0],
            "gettransfered_tps60": get_tps[1],
            "gettransfered_tps600": get_tps[2],
        }
        with contextlib.suppress(OSError):
            usage = shutil.disk_usage(self.store.config.commit_log_dir)
            gauges["commitlogdir_capacity_total"] = float(usage.total)
            gauges["commitlogdir_capacity_free"] = float(usage.free)
        histogram = self.stats.send_latency
        gauges["put_latency_99"] = _quantile_ms(histogram, 0.99)
        gauges["put_latency_999"] = _quantile_ms(histogram, 0.999)
        for key, value in gauges.items():
            family = _gauge(f"rocketmq_brokeruntime_{key}", f"brokerRuntime {key}", _RUNTIME_LABELS)
            family.add_metric(values, value)
            yield family
        # putMessageDistributeTime: sends by time taken, in RocketMQ's steps.
        counts = histogram.counts
        for key, (first, last) in PMDT_STEPS.items():
            family = _gauge(
                f"rocketmq_brokeruntime_pmdt_{key}", f"PutMessageDistributeTimeMap{key}",
                _RUNTIME_LABELS,
            )  # fmt: skip
            family.add_metric(values, float(sum(counts[first:last])))
            yield family

    def _health(self, cluster: str, name: str) -> Iterable[Metric]:
        """Whether the broker serves, and what dispatch and the schedule could not do."""
        labels = ["cluster", "broker"]
        values = [cluster, name]
        health = self.health()
        faults = self.store.reput.faults
        serving = _gauge(
            "tidemq_broker_serving", "1 when GET /health answers 200 (serving), else 0", labels
        )
        serving.add_metric(values, 1.0 if health.serving else 0.0)
        stuck = _gauge(
            "tidemq_dispatch_stuck",
            "1 while dispatch retries a record it cannot dispatch (nothing after it moves)",
            labels,
        )
        stuck.add_metric(values, 1.0 if faults.stuck is not None else 0.0)
        behind = _gauge(
            "tidemq_dispatch_behind_bytes",
            "CommitLog bytes readable but not dispatched to the ConsumeQueues yet",
            labels,
        )
        behind.add_metric(values, float(self.store.reput.behind_bytes))
        queues = _gauge(
            "tidemq_dispatch_quarantined_queues",
            "Queues whose records dispatch skips (their ConsumeQueue cannot be written)",
            labels,
        )
        queues.add_metric(values, float(len(faults.quarantined)))
        yield from (serving, stuck, behind, queues)
        timers = self.runtime_info()
        for metric, doc, key in (
            (
                "tidemq_timer_pending",
                "Timer messages waiting in the time wheel (RocketMQ's timerCongestNum)",
                "timerCongestNum",
            ),
            (
                "tidemq_timer_read_behind_seconds",
                "How far timer delivery is behind the clock (RocketMQ's timerReadBehind)",
                "timerReadBehind",
            ),
            (
                "tidemq_timer_offset_behind",
                "Timer messages stored but not in the wheel yet (RocketMQ's timerOffsetBehind)",
                "timerOffsetBehind",
            ),
        ):
            gauge = _gauge(metric, doc, labels)
            gauge.add_metric(values, float(timers.get(key, "0")))
            yield gauge
        for metric, doc, value in (
            ("tidemq_dispatch_errors", "Failed dispatch attempts", faults.errors_total),
            (
                "tidemq_dispatch_quarantined_records",
                "Records skipped by dispatch because their queue is quarantined",
                faults.quarantined_records,
            ),
            (
                "tidemq_schedule_undeliverable",
                "Delayed and retry messages skipped because they can never be delivered",
                health.undeliverable,
            ),
        ):
            counter = CounterMetricFamily(metric, doc, labels=labels)
            counter.add_metric(values, float(value))
            yield counter


def _held_pulls(holds: PullRequestHoldService, values: list[str]) -> Iterator[Metric]:
    held = _gauge("tidemq_pulls_held", "Pulls and POPs held by long polling", ["cluster", "broker"])
    held.add_metric(values, float(holds.held_count))
    yield held
    ended = CounterMetricFamily(
        "tidemq_held_pulls",
        "Held pulls and POPs ended, by cause",
        labels=["cluster", "broker", "cause"],
    )
    for cause, count in holds.ended_by.items():
        ended.add_metric([*values, cause], float(count))
    yield ended


def _quantile_ms(histogram: LatencyHistogram, q: float) -> float:
    """The upper bound (ms) of the bucket holding the `q` quantile of the sends; 0 if none."""
    if histogram.count == 0:
        return 0.0
    wanted = q * histogram.count
    for bound, seen in histogram.cumulative():
        if seen >= wanted:
            return bound * 1000 if not math.isinf(bound) else LATENCY_BUCKETS[-1] * 1000
    return LATENCY_BUCKETS[-1] * 1000


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
    """`collector` with the process's own metrics: prometheus_client's process collector
    (process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...), Python's
    (python_info) and its garbage collector's (python_gc_collections_total, ...)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


# (status line, content type, body) of GET /health (broker/health.py Health.http)
HealthAnswer = Callable[[], tuple[bytes, bytes, bytes]]
SERVING: Final = (b"200 OK", b"text/plain; charset=utf-8", b"serving\n")


class MetricsServer:
    """A minimal HTTP/1.0 server on the event loop: `GET /metrics`, `GET /health` (200
    "serving", or 503 with the reasons: `health`; a name server is serving while it answers),
    anything else 404."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        health: HealthAnswer | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.health = health
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
            path = parts[1].split(b"?")[0] if len(parts) >= 2 and parts[0] == b"GET" else b""
            if path == b"/metrics":
                body = generate_latest(self.registry)
                status, kind = b"200 OK", CONTENT_TYPE_LATEST.encode()
            elif path == b"/health":
                status, kind, body = self.health() if self.health is not None else SERVING
            else:
                body, status, kind = (
                    b"not found: try /metrics or /health\n",
                    b"404 Not Found",
                    b"text/plain",
                )
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
