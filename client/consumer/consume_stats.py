"""A push consumer's rates per topic, for GET_CONSUMER_RUNNING_INFO's statusTable (mqadmin
consumerStatus), as RocketMQ's ConsumerStatsManager reports them:

- pullRT: ms per pull answered; pullTPS: messages pulled per second;
- consumeRT: ms of listener time per message; consumeOKTPS / consumeFailedTPS: messages per
  second the listener consumed / asked to reconsume later, over the last minute;
- consumeFailedMsgs: messages asked to be reconsumed over the last hour.

Cost on the consuming path: a few additions per pull answer and per consumed batch (never per
message). Cumulative per-topic counters are copied into a snapshot at most every
`SNAPSHOT_STEP` seconds, when something is recorded; rates compare now with the snapshot about a
minute (or an hour) old, or with the consumer's start when it is younger.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.client.protocol.group_admin import ConsumeStatus

__all__ = ["ConsumeStatsRecorder"]

SNAPSHOT_STEP = 10.0
MINUTE, HOUR = 60.0, 3600.0


@dataclass(slots=True)
class _Totals:
    pulls: int = 0
    pull_ms: float = 0.0
    pulled: int = 0
    consume_ms: float = 0.0
    consumed_ok: int = 0
    consumed_failed: int = 0

    def copy(self) -> _Totals:
        return _Totals(
            self.pulls,
            self.pull_ms,
            self.pulled,
            self.consume_ms,
            self.consumed_ok,
            self.consumed_failed,
        )


class ConsumeStatsRecorder:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._totals: dict[str, _Totals] = {}
        started = clock()
        self._snapshots: deque[tuple[float, dict[str, _Totals]]] = deque(
            [(started, {})], maxlen=int(HOUR / SNAPSHOT_STEP) + 1
        )

    def _topic(self, topic: str) -> _Totals:
        totals = self._totals.get(topic)
        if totals is None:
            totals = self._totals[topic] = _Totals()
        now = self.clock()
        if now - self._snapshots[-1][0] >= SNAPSHOT_STEP:
            self._snapshots.append((now, {t: c.copy() for t, c in self._totals.items()}))
        return totals

    def pull_answered(self, topic: str, seconds: float) -> None:
        totals = self._topic(topic)
        totals.pulls += 1
        totals.pull_ms += seconds * 1000

    def pulled(self, topic: str, messages: int) -> None:
        self._topic(topic).pulled += messages

    def consumed(self, topic: str, seconds: float, ok: int, failed: int) -> None:
        totals = self._topic(topic)
        totals.consume_ms += seconds * 1000
        totals.consumed_ok += ok
        totals.consumed_failed += failed

    def _since(self, seconds: float) -> tuple[float, dict[str, _Totals]]:
        """The newest snapshot at least `seconds` old, else the oldest one."""
        now = self.clock()
        for at, snapshot in reversed(self._snapshots):
            if now - at >= seconds:
                return at, snapshot
        return self._snapshots[0]

    def status(self) -> dict[str, ConsumeStatus]:
        now = self.clock()
        minute_at, minute = self._since(MINUTE)
        _, hour = self._since(HOUR)
        span = max(now - minute_at, 1e-9)
        out = {}
        for topic, c in self._totals.items():
            m = minute.get(topic, _Totals())
            pulls, consumed = (
                c.pulls - m.pulls,
                (c.consumed_ok + c.consumed_failed) - (m.consumed_ok + m.consumed_failed),
            )
            out[topic] = ConsumeStatus(
                pull_rt=(c.pull_ms - m.pull_ms) / pulls if pulls else 0.0,
                pull_tps=(c.pulled - m.pulled) / span,
                consume_rt=(c.consume_ms - m.consume_ms) / consumed if consumed else 0.0,
                consume_ok_tps=(c.consumed_ok - m.consumed_ok) / span,
                consume_failed_tps=(c.consumed_failed - m.consumed_failed) / span,
                consume_failed_msgs=c.consumed_failed - hour.get(topic, _Totals()).consumed_failed,
            )
        return out
