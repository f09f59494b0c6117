"""Broker traffic counters (RocketMQ's BrokerStatsManager, reduced to what we report).

Counters only ever grow; rates (TPS) are computed by whoever samples them, over their own
interval: the status line of the local cluster, `clusterList`'s InTPS/OutTPS and the metrics.
`StatsWindows` keeps snapshots of the per-topic and per-group counters for VIEW_BROKER_STATS_DATA
(`statsAll`): the messages of the last minute, hour and day, as RocketMQ's StatsItem reports
them (for a broker younger than the window: since it started).
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import math
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

K = TypeVar("K")


@dataclass(slots=True)
class Counter:
    messages: int = 0
    bytes: int = 0
    calls: int = 0  # requests that added messages: RocketMQ's StatsItem "times"

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size
        self.calls += 1


@dataclass(slots=True)
class BrokerStats:
    started_at: float = field(default_factory=time.time)
    put_total: Counter = field(default_factory=Counter)
    get_total: Counter = field(default_factory=Counter)
    put_by_topic: defaultdict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    get_by_group_topic: defaultdict[tuple[str, str], Counter] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    send_latency: LatencyHistogram = field(default_factory=lambda: LatencyHistogram())
    pull_latency: LatencyHistogram = field(default_factory=lambda: LatencyHistogram())

    def on_put(self, topic: str, messages: int, size: int) -> None:
        # Counter.add, inline for both: once per send
        total = self.put_total
        total.messages += messages
        total.bytes += size
        total.calls += 1
        by_topic = self.put_by_topic[topic]
        by_topic.messages += messages
        by_topic.bytes += size
        by_topic.calls += 1

    def on_get(self, group: str, topic: str, messages: int, size: int) -> None:
        self.get_total.add(messages, size)
        self.get_by_group_topic[(group, topic)].add(messages, size)

    def on_send_latency(self, seconds: float) -> None:
        self.send_latency.observe(seconds)

    def on_pull_latency(self, seconds: float) -> None:
        self.pull_latency.observe(seconds)


TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"  # key: topic
GROUP_GET_NUMS = "GROUP_GET_NUMS"  # key: topic@group


@dataclass(frozen=True, slots=True)
class WindowStats:
    """One window of RocketMQ's StatsSnapshot: messages, messages per second, and messages per
    request (avgpt)."""

    sum: int
    tps: float
    avgpt: float


@dataclass(slots=True)
class _Snapshot:
    at: float
    counts: dict[tuple[str, str], tuple[int, int]]  # (stats name, key) -> (messages, calls)


class StatsWindows:
    """Snapshots of `BrokerStats`' keyed counters: every 10 s for a minute, every minute for an
    hour, every hour for a day. `sample()` is called about once a second; `window()` answers
    the sum, rate and messages per request over the last minute, hour or day."""

    SPANS: tuple[tuple[str, float, int], ...] = (
        ("minute", 10.0, 7),
        ("hour", 60.0, 61),
        ("day", 3600.0, 25),
    )

    def __init__(self, stats: BrokerStats, clock: Callable[[], float] = time.monotonic) -> None:
        self.stats = stats
        self.clock = clock
        first = _Snapshot(clock(), {})
        self._windows = {
            name: (step, deque([first], maxlen=size)) for name, step, size in self.SPANS
        }

    def _counts(self) -> dict[tuple[str, str], tuple[int, int]]:
        out = {
            (TOPIC_PUT_NUMS, t): (c.messages, c.calls) for t, c in self.stats.put_by_topic.items()
        }
        for (group, topic), c in self.stats.get_by_group_topic.items():
            out[(GROUP_GET_NUMS, f"{topic}@{group}")] = (c.messages, c.calls)
        return out

    def sample(self) -> None:
        now = self.clock()
        snapshot: _Snapshot | None = None
        for step, snapshots in self._windows.values():
            if now - snapshots[-1].at >= step:
                snapshot = snapshot or _Snapshot(now, self._counts())
                snapshots.append(snapshot)

    def known(self, name: str, key: str) -> bool:
        return (name, key) in self._counts()

    def window(self, name: str, key: str, span: str) -> WindowStats:
        """`span`: minute, hour or day. Counts up to now against the oldest snapshot kept."""
        now = self.clock()
        messages, calls = self._counts().get((name, key), (0, 0))
        oldest = self._windows[span][1][0]
        old_messages, old_calls = oldest.counts.get((name, key), (0, 0))
        total, times = messages - old_messages, calls - old_calls
        elapsed = now - oldest.at
        tps = total / elapsed if elapsed > 0 else 0.0
        return WindowStats(total, tps, total / times if times else 0.0)


# Upper bounds (seconds) of the latency buckets; RocketMQ's putMessageDistributeTime steps.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
)


@dataclass(slots=True)
class LatencyHistogram:
    """Request latencies in `LATENCY_BUCKETS` (plus one bucket for anything slower)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total_seconds: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total_seconds += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with (+inf, count)."""
        running = list(itertools.accumulate(self.counts))
        return [*zip(LATENCY_BUCKETS, running, strict=False), (math.inf, running[-1])]


@dataclass(slots=True)
class _Sample:
    at: float
    put: int
    get: int
    put_by_topic: dict[str, int]
    get_by_group_topic: dict[tuple[str, str], int]
    put_bytes_by_topic: dict[str, int]
    get_bytes_by_group_topic: dict[tuple[str, str], int]


class RateSampler:
    """Rates from `BrokerStats` counters, sampled once a second by the broker.

    Totals are kept for 600 s (RocketMQ's putTps/getTransferedTps report 10 s, 60 s and 600 s
    windows); per-topic and per-group counters for `KEY_WINDOW` seconds. The totals at the first
    sample of each local day are kept too: RocketMQ's msgPutTotalTodayMorning and
    msgPutTotalYesterdayMorning (0 until the broker has run through a midnight).
    """

    MAX_WINDOW = 600
    KEY_WINDOW = 10

    def __init__(
        self,
        stats: BrokerStats,
        clock: Callable[[], float] = time.monotonic,
        today: Callable[[], datetime.date] = datetime.date.today,
    ) -> None:
        self.stats = stats
        self.clock = clock
        self.today = today
        self._totals: deque[tuple[float, int, int]] = deque(maxlen=self.MAX_WINDOW + 1)
        self._keyed: deque[_Sample] = deque(maxlen=self.KEY_WINDOW + 1)
        self._date = today()
        self.today_morning = (0, 0)
        self.yesterday_morning = (0, 0)
        self.sample()

    def sample(self) -> None:
        stats = self.stats
        now = self.clock()
        put, get = stats.put_total.messages, stats.get_total.messages
        self._totals.append((now, put, get))
        self._keyed.append(
            _Sample(
                now,
                put,
                get,
                {t: c.messages for t, c in stats.put_by_topic.items()},
                {k: c.messages for k, c in stats.get_by_group_topic.items()},
                {t: c.bytes for t, c in stats.put_by_topic.items()},
                {k: c.bytes for k, c in stats.get_by_group_topic.items()},
            )
        )
        date = self.today()
        if date != self._date:
            self._date = date
            self.yesterday_morning = self.today_morning
            self.today_morning = (put, get)

    def _window(self, seconds: float) -> tuple[tuple[float, int, int], tuple[float, int, int]]:
        last = self._totals[-1]
        first = last
        for entry in reversed(self._totals):
            first = entry
            if last[0] - entry[0] >= seconds:
                break
        return first, last

    def tps(self, seconds: float) -> tuple[float, float]:
        """(messages put, messages got) per second over the last `seconds`."""
        first, last = self._window(seconds)
        span = last[0] - first[0]
        if span <= 0:
            return 0.0, 0.0
        return (last[1] - first[1]) / span, (last[2] - first[2]) / span

    def _keyed_rates(self, counts: Callable[[_Sample], dict[K, int]]) -> dict[K, float]:
        first, last = self._keyed[0], self._keyed[-1]
        span = last.at - first.at
        now, before = counts(last), counts(first)
        if span <= 0:
            return {k: 0.0 for k in now}
        return {k: (n - before.get(k, 0)) / span for k, n in now.items()}

    def topic_put_tps(self) -> dict[str, float]:
        return self._keyed_rates(lambda s: s.put_by_topic)

    def group_get_tps(self) -> dict[tuple[str, str], float]:
        """Messages per second read by (group, topic)."""
        return self._keyed_rates(lambda s: s.get_by_group_topic)

    def topic_put_bytes(self) -> dict[str, float]:
        """Bytes per second put, by topic (rocketmq-exporter's TopicPutMessageSize)."""
        return self._keyed_rates(lambda s: s.put_bytes_by_topic)

    def group_get_bytes(self) -> dict[tuple[str, str], float]:
        """Bytes per second read by (group, topic) (the exporter's GroupGetMessageSize)."""
        return self._keyed_rates(lambda s: s.get_bytes_by_group_topic)
