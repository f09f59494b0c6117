"""Timer messages waiting, per real topic (RocketMQ 5's TimerMetrics `timingCount`).

The delivering broker counts one up when a timer message enters the wheel (its REAL_TOPIC) and
one down when it leaves it (delivered, rolled on, or skipped as undeliverable); a roll enters
the wheel again and counts again, so a message waiting is counted once. GET_TIMER_METRICS (61)
answers the table; `mqadmin getTimerMetrics` and the dashboard show it.

Kept in `<storePathRootDir>/config/timermetrics` in RocketMQ's JSON (client/protocol/operators5.py
says it), written with the timer store's flush when it changed: a clean stop keeps it exact; a
killed broker loses the changes of its last flush interval (a count can then be off by them
until those timers leave; never below 0). A slave does not count (it delivers nothing): it
copies its master's table every slaveSynchronizeInterval (as RocketMQ 5's slaves do), and once
elected counts on from the last copy (timers parked after it are missing from its table until
they leave; timerCongestNum, the total, stays exact).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from tidemq.client.protocol.operators5 import decode_timer_metrics, encode_timer_metrics
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.common.files import write_file_safely

log = logging.getLogger(__name__)


class TimerMetrics:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._counts: dict[str, tuple[int, int]] = {}  # topic -> (count, last change ms)
        self._counter = 0  # dataVersion's counter: one per change
        self._saved = 0

    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            body = json.loads(self.path.read_bytes())
            counts = decode_timer_metrics(body)
        except (ValueError, BodyDecodeError) as exc:
            log.warning("timer metrics %s not read (%s): counting from 0", self.path, exc)
            return
        self._counts = {c.topic: (max(0, c.count), c.timestamp) for c in counts if c.count > 0}
        version = body.get("dataVersion", {}) if isinstance(body, dict) else {}
        counter = version.get("counter", 0) if isinstance(version, dict) else 0
        self._counter = self._saved = counter if isinstance(counter, int) else 0

    def replace(self, body: object) -> None:
        """A slave: the master's table as it is (GET_TIMER_METRICS, broker/slave_sync.py); a
        body that does not read leaves the table as it was (BodyDecodeError is a ValueError)."""
        counts = decode_timer_metrics(body)
        table = {c.topic: (c.count, c.timestamp) for c in counts if c.count > 0}
        if table != self._counts:
            self._counts = table
            self._counter += 1

    def add(self, topic: str, delta: int, now_ms: int | None = None) -> None:
        if not topic:
            return
        count, _ = self._counts.get(topic, (0, 0))
        count = max(0, count + delta)
        stamp = now_ms if now_ms is not None else int(time.time() * 1000)
        if count:
            self._counts[topic] = (count, stamp)
        else:
            self._counts.pop(topic, None)
        self._counter += 1

    def count(self, topic: str) -> int:
        return self._counts.get(topic, (0, 0))[0]

    def body(self) -> dict[str, Any]:
        version = {
            "timestamp": int(time.time() * 1000),
            "counter": self._counter,
            "stateVersion": 0,
        }
        return encode_timer_metrics(dict(sorted(self._counts.items())), version)

    def snapshot(self) -> tuple[int, bytes] | None:
        """What `write` stores (taken on the event loop), or None when nothing changed."""
        if self.path is None or self._counter == self._saved:
            return None
        return self._counter, json.dumps(self.body()).encode()

    def write(self, snapshot: tuple[int, bytes]) -> None:
        """Store a `snapshot` (in a worker thread: it fsyncs)."""
        assert self.path is not None
        counter, data = snapshot
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_safely(self.path, data, keep_backup=False)
        self._saved = counter

    def save(self) -> None:
        snapshot = self.snapshot()
        if snapshot is not None:
            self.write(snapshot)
