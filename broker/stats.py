"""Broker traffic counters (RocketMQ's BrokerStatsManager, reduced to what we report).

Counters only ever grow; rates (TPS) are computed by whoever samples them, over their own
interval: the status line of the local cluster, `clusterList`'s InTPS/OutTPS and the metrics.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(slots=True)
class Counter:
    messages: int = 0
    bytes: int = 0

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size


@dataclass(slots=True)
class BrokerStats:
    started_at: float = field(default_factory=time.time)
    put_total: Counter = field(default_factory=Counter)
    get_total: Counter = field(default_factory=Counter)
    put_by_topic: defaultdict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    get_by_group_topic: defaultdict[tuple[str, str], Counter] = field(
        default_factory=lambda: defaultdict(Counter)
    )

    def on_put(self, topic: str, messages: int, size: int) -> None:
        self.put_total.add(messages, size)
        self.put_by_topic[topic].add(messages, size)

    def on_get(self, group: str, topic: str, messages: int, size: int) -> None:
        self.get_total.add(messages, size)
        self.get_by_group_topic[(group, topic)].add(messages, size)
