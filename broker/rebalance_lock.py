"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager).

LOCK_BATCH_MQ grants a client the queues that are free, already its own, or whose lock expired
(60 s without renewal, `rocketmq.broker.rebalance.lockMaxLiveTime`); orderly consumers renew
their locks every 20 s. UNLOCK_BATCH_MQ releases the queues a client holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from tidemq.client.protocol.heartbeat import MessageQueue

log = logging.getLogger(__name__)

LOCK_MAX_LIVE_MS = 60_000


class RebalanceLockManager:
    def __init__(
        self,
        max_live_ms: int = LOCK_MAX_LIVE_MS,
        clock: Callable[[], float] = lambda: time.monotonic() * 1000,
    ) -> None:
        self.max_live_ms = max_live_ms
        self._clock = clock
        # group -> queue -> (client id, last renewal)
        self._locks: dict[str, dict[MessageQueue, tuple[str, float]]] = {}

    def try_lock_batch(
        self, group: str, queues: Iterable[MessageQueue], client_id: str
    ) -> list[MessageQueue]:
        now = self._clock()
        table = self._locks.setdefault(group, {})
        granted = []
        for queue in queues:
            holder = table.get(queue)
            if holder is None or holder[0] == client_id or now - holder[1] > self.max_live_ms:
                if holder is not None and holder[0] != client_id:
                    log.info(
                        "queue lock of %s %s moves from %s to %s",
                        group,
                        queue,
                        holder[0],
                        client_id,
                    )
                table[queue] = (client_id, now)
                granted.append(queue)
        return granted

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group)
        if not table:
            return
        for queue in queues:
            holder = table.get(queue)
            if holder is not None and holder[0] == client_id:
                del table[queue]

    def holder(self, group: str, queue: MessageQueue) -> str | None:
        entry = self._locks.get(group, {}).get(queue)
        if entry is None or self._clock() - entry[1] > self.max_live_ms:
            return None
        return entry[0]
