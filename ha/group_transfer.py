"""SYNC_MASTER acknowledgement (RocketMQ's GroupTransferService and isSlaveOK).

A SYNC_MASTER send that waits for its store (property WAIT not "false") first asks
`is_slave_ok(end)`: no usable slave means SLAVE_NOT_AVAILABLE at once (the message is already on
the master). A slave is usable when it is connected and its known offset is within
haSlaveFallbehindMax of the end of the send. Otherwise the send waits until some slave's ack
covers its end offset, or slaveTimeout passes (FLUSH_SLAVE_TIMEOUT). Waits are deadline based
(RocketMQ <= 4.6 counted wake-ups, #1244), and one ack releases every waiting send it covers.

`acked_offset` (RocketMQ's push2SlaveMaxOffset) only grows and only takes acks: a connection's
first report is where the slave stands, not an acknowledgement (#3015), so it counts for
"usable" but releases nothing.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger(__name__)

REASON_LOG_INTERVAL = 10.0


class SlaveView(Protocol):
    """What the transfer service needs to know of a connected slave."""

    @property
    def known_offset(self) -> int: ...

    @property
    def address(self) -> str: ...


class GroupTransferService:
    def __init__(
        self,
        slaves: Callable[[], Iterable[SlaveView]],
        *,
        slave_timeout_ms: int,
        fallbehind_max: int,
    ) -> None:
        self._slaves = slaves
        self.slave_timeout = slave_timeout_ms / 1000
        self.fallbehind_max = fallbehind_max
        self.acked_offset = 0
        self._waiting: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._sequence = itertools.count()
        self._last_reason_logged = 0.0
        self.ack_listeners: list[Callable[[int], None]] = []

    # --- ReplicationHook ------------------------------------------------------------------------

    def is_slave_ok(self, master_put_where: int) -> bool:
        problem = self.slave_problem(master_put_where)
        if problem is not None:
            self._explain(problem)
            return False
        return True

    def slave_problem(self, master_put_where: int) -> str | None:
        """Why no slave is usable for a send ending at `master_put_where`, None when one is
        (also the broker's health, broker/health.py)."""
        slaves = list(self._slaves())
        if not slaves:
            return "no slave is connected to the HA port"
        nearest = max(s.known_offset for s in slaves)
        gap = master_put_where - max(nearest, self.acked_offset)
        if gap >= self.fallbehind_max:
            return (
                f"the nearest slave is {gap} bytes behind (haSlaveFallbehindMax "
                f"{self.fallbehind_max}); slaves: "
                + ", ".join(f"{s.address} at {s.known_offset}" for s in slaves)
            )
        return None

    async def wait_for_slave(self, next_offset: int) -> bool:
        if self.acked_offset >= next_offset:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (next_offset, next(self._sequence), future))
        try:
            return await asyncio.wait_for(future, self.slave_timeout)
        except TimeoutError:
            log.warning(
                "SYNC_MASTER send ending at %d not acknowledged by a slave within %.1f s "
                "(acknowledged up to %d): FLUSH_SLAVE_TIMEOUT",
                next_offset,
                self.slave_timeout,
                self.acked_offset,
            )
            return False

    # --- acks -----------------------------------------------------------------------------------

    def on_ack(self, offset: int) -> None:
        """A validated ack from a slave: release every send it covers."""
        if offset <= self.acked_offset:
            return
        self.acked_offset = offset
        waiting = self._waiting
        while waiting and waiting[0][0] <= offset:
            _end, _seq, future = heapq.heappop(waiting)
            if not future.done():
                future.set_result(True)
        for listener in self.ack_listeners:
            listener(offset)

    @property
    def waiting(self) -> int:
        return sum(1 for _e, _s, f in self._waiting if not f.done())

    def fail_all(self) -> None:
        """At stop: every waiting send gets its answer now (not acknowledged)."""
        for _end, _seq, future in self._waiting:
            if not future.done():
                future.set_result(False)
        self._waiting.clear()

    def _explain(self, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_reason_logged >= REASON_LOG_INTERVAL:
            self._last_reason_logged = now
            log.warning("SYNC_MASTER: SLAVE_NOT_AVAILABLE because %s", reason)


class MemberView(SlaveView, Protocol):
    """A connected slave as controller mode knows it: its brokerId and its last ack."""

    @property
    def broker_id(self) -> int | None: ...

    @property
    def slave_ack_offset(self) -> int: ...


class AllInSyncTransfer(GroupTransferService):
    """allAckInSyncStateSet (controller mode): a SYNC send is acknowledged once every slave of
    the SyncStateSet has it, not the first slave to ack.

    `require(ids)` names those slaves (the master keeps it to the set, and to the union of the
    old and the new set while the set changes in etcd, so that no send is answered on the
    strength of a set that is not yet, or no longer, the one an election would read). With no
    slave required (the set is the master alone) a send is acknowledged at once; a required
    slave that is not connected holds sends until slaveTimeout (FLUSH_SLAVE_TIMEOUT), until the
    set drops it after haMaxTimeSlaveNotCatchup.
    """

    def __init__(
        self,
        slaves: Callable[[], Iterable[MemberView]],
        *,
        slave_timeout_ms: int,
        fallbehind_max: int,
    ) -> None:
        super().__init__(slaves, slave_timeout_ms=slave_timeout_ms, fallbehind_max=fallbehind_max)
        self._members = slaves
        self.required: frozenset[int] = frozenset()

    def require(self, broker_ids: frozenset[int]) -> None:
        self.required = broker_ids
        self._release()

    def is_slave_ok(self, master_put_where: int) -> bool:
        del master_put_where  # who must ack is the set's business, decided at the ack
        return True

    def slave_problem(self, master_put_where: int) -> str | None:
        del master_put_where  # the SyncStateSet's size says it (minInSyncReplicas)
        return None

    async def wait_for_slave(self, next_offset: int) -> bool:
        if not self.required:
            return True
        return await super().wait_for_slave(next_offset)

    def on_ack(self, offset: int) -> None:
        del offset  # the slowest required slave decides
        self._release()

    def _release(self) -> None:
        if not self.required:
            for _end, _seq, future in self._waiting:
                if not future.done():
                    future.set_result(True)
            self._waiting.clear()
            for listener in self.ack_listeners:  # InSyncCap: all that is stored is confirmed
                listener(self.acked_offset)
            return
        acks = {
            m.broker_id: m.slave_ack_offset
            for m in self._members()
            if m.broker_id is not None and m.broker_id in self.required
        }
        if len(acks) == len(self.required):
            super().on_ack(min(acks.values()))


class InSyncCap:
    """Controller mode's dispatch cap (RocketMQ 5's confirmOffset): a master makes readable only
    what every slave of the SyncStateSet has acknowledged, what it could have acknowledged to a
    producer; with the set the master alone, all it stored. Without it, a consumer could read a
    deposed master's unreplicated tail (stored, never acknowledged, cut to .diverged files when
    it rejoins), take those queue offsets as consumed, and so never get the acknowledged
    messages the new master puts at the same offsets."""

    def __init__(self, transfer: AllInSyncTransfer, stored_end: Callable[[], int]) -> None:
        self.transfer = transfer
        self.stored_end = stored_end

    @property
    def acked_offset(self) -> int:
        if not self.transfer.required:
            return self.stored_end()
        return self.transfer.acked_offset

    @property
    def ack_listeners(self) -> list[Callable[[int], None]]:
        return self.transfer.ack_listeners
