"""The live charts' figures: sampled by the dashboard every `interval` seconds, kept in memory.

Each sample asks every broker for its message totals (GET_BROKER_RUNTIME_INFO's
msgPutTotalTodayNow / msgGetTotalTodayNow), every user topic for the sum of its queues' max
offsets (GET_TOPIC_STATS_INFO) and every user group for its total lag (GET_CONSUME_STATS). Rates
are the change between two samples over the time between them, so a chart shows the last
interval, not a moving average. The last `keep` samples are kept: `snapshot()` is the JSON the
charts page draws,

    {"interval": s, "times": [ms...], "brokerIn": {"broker-a/0": [msg/s...]},
     "brokerOut": {...}, "topicIn": {"TopicA": [msg/s...]}, "groupLag": {"G": [messages...]},
     "error": "last sampling failure or empty"}

A series starts with the sample its name first appeared in (earlier points are null), and is
left out once the newest sample has no figure for it: a broker stopped (or not answering), a
topic deleted, a group gone are dropped from the charts and their legends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from tidemq.client.admin.api import AdminClient
from tidemq.client.dashboard.views import group_is_system, topic_kind
from tidemq.client.errors import TideMQError

log = logging.getLogger(__name__)

DEFAULT_INTERVAL: Final = 2.0
DEFAULT_KEEP: Final = 150
# Topics and groups charted at most: one request each per sample.
MAX_SERIES: Final = 50


@dataclass(slots=True)
class Sample:
    at: float
    broker_put: dict[str, int] = field(default_factory=dict)
    broker_get: dict[str, int] = field(default_factory=dict)
    topic_offsets: dict[str, int] = field(default_factory=dict)
    group_lag: dict[str, int] = field(default_factory=dict)


class Sampler:
    def __init__(
        self, admin: AdminClient, interval: float = DEFAULT_INTERVAL, keep: int = DEFAULT_KEEP
    ) -> None:
        self.admin = admin
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=keep + 1)
        self.error = ""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dashboard-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.samples.append(await self.sample())
                if self.error:
                    log.warning("sampling the cluster works again")
                self.error = ""
            except (TideMQError, OSError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
                if error != self.error:  # once per new failure, not every interval
                    log.warning("sampling the cluster failed: %s", error)
                self.error = error
            await asyncio.sleep(max(self.interval - (time.monotonic() - started), 0.1))

    async def sample(self) -> Sample:
        admin = self.admin
        sample = Sample(at=time.time())
        info = await admin.cluster_info()
        own_names = frozenset(info.cluster_addr_table) | frozenset(info.broker_addr_table)
        for broker in await admin.brokers():
            label = f"{broker.broker_name}/{broker.broker_id}"
            try:
                runtime = await admin.runtime_info(broker.address)
            except (TideMQError, OSError, TimeoutError):
                continue
            sample.broker_put[label] = int(runtime.get("msgPutTotalTodayNow", 0) or 0)
            sample.broker_get[label] = int(runtime.get("msgGetTotalTodayNow", 0) or 0)
        topics = [t for t in await admin.topic_list() if topic_kind(t, own_names) == "normal"]
        for topic in topics[:MAX_SERIES]:
            try:
                stats = await admin.examine_topic_stats(topic)
            except TideMQError:
                continue
            sample.topic_offsets[topic] = sum(o.max_offset for o in stats.offset_table.values())
        groups = [g for g in await admin.examine_groups() if not group_is_system(g)]
        for group in groups[:MAX_SERIES]:
            try:
                progress = await admin.examine_consume_stats(group)
            except TideMQError:
                continue
            sample.group_lag[group] = progress.total_diff()
        return sample

    def snapshot(self) -> dict[str, Any]:
        samples = list(self.samples)
        pairs = list(itertools.pairwise(samples))
        return {
            "interval": self.interval,
            "times": [int(new.at * 1000) for _, new in pairs],
            "brokerIn": _rates(pairs, "broker_put"),
            "brokerOut": _rates(pairs, "broker_get"),
            "topicIn": _rates(pairs, "topic_offsets"),
            "groupLag": _levels(samples[1:]),
            "error": self.error,
        }


def _rates(pairs: list[tuple[Sample, Sample]], name: str) -> dict[str, list[float | None]]:
    """Per second between consecutive samples; None where a series has no earlier figure."""
    names = sorted(getattr(pairs[-1][1], name)) if pairs else []
    out: dict[str, list[float | None]] = {}
    for key in names:
        series: list[float | None] = []
        for old, new in pairs:
            before, after = getattr(old, name).get(key), getattr(new, name).get(key)
            if before is None or after is None or new.at <= old.at:
                series.append(None)
            else:
                # A restarted broker counts from 0 again: no negative rates.
                series.append(round(max(after - before, 0) / (new.at - old.at), 2))
        out[key] = series
    return out


def _levels(samples: list[Sample]) -> dict[str, list[float | None]]:
    names = sorted(samples[-1].group_lag) if samples else []
    return {
        key: [
            float(sample.group_lag[key]) if key in sample.group_lag else None for sample in samples
        ]
        for key in names
    }
