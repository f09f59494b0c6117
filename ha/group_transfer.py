"""SYNC_MASTER acknowledgement (RocketMQ's GroupTransferService and isSlaveOK).

A SYNC_MASTER send that waits for its store (property WAIT not "false") first asks
`is_slave_ok(end)`: no usable slave means SLAVE_NOT_AVAILABLE at once (the message is already on
the master). A slave is usable when it is connected and its known offset is within
haSlaveFallbehindMax of the end of the send. Otherwise the send waits until some slave's ack
covers its end offset, or slaveTimeout passes (FLUSH_SLAVE_TIMEOUT). Waits are deadline based
(RocketMQ <= 4.6 counted wake-ups, #1244), and one ack releases every waiting send it covers.

What a waiting send costs is one future, in a queue kept in end-offset order (sends wait in the
order they were appended, so it is appended to, and an ack pops from its front): no timer, no
task and no wrapper future per send. Deadlines are kept by one timer for the whole queue, armed
for the oldest waiter and re-armed when it fires (every send waits slaveTimeout, so the oldest
waiter's deadline comes first); a send released meanwhile costs the timer nothing.

`acked_offset` (RocketMQ's push2SlaveMaxOffset) only grows and only takes acks: a connection's
first report is where the slave stands, not an acknowledgement (#3015), so it counts for
"usable" but releases nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
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
        # (end offset, deadline, future) of the waiting sends, in end-offset order.
        self._waiting: deque[tuple[int, float, asyncio.Future[bool]]] = deque()
        self._expiry: asyncio.TimerHandle | None = None
        self._last_reason_logged = 0.0
        self.ack_listeners: list[Callable[[int], None]] = []

    # --- ReplicationHook ------------------------------------------------------------------------

    def is_slave_ok(self, master_put_where: int) -> bool:
        if master_put_where - self.acked_offset < self.fallbehind_max and any(
            True for _slave in self._slaves()
        ):
            return True  # what slave_problem would find, without looking at every slave
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
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        deadline = loop.time() + self.slave_timeout
        waiting = self._waiting
        if not waiting or waiting[-1][0] <= next_offset:
            waiting.append((next_offset, deadline, future))
        else:  # appended before a send that started waiting first (e.g. after its flush)
            waiting.insert(
                bisect.bisect_right(waiting, next_offset, key=_end), (next_offset, deadline, future)
            )
        if self._expiry is None:
            self._expiry = loop.call_at(deadline, self._expire)
        return await future

    def _expire(self) -> None:
        """The timer: answer the sends whose deadline passed (FLUSH_SLAVE_TIMEOUT), then arm
        it for the next deadline."""
        self._expiry = None
        waiting = self._waiting
        if not waiting:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired = [entry for entry in waiting if entry[1] <= now]
        if expired:
            self._waiting = waiting = deque(entry for entry in waiting if entry[1] > now)
            for _end, _deadline, future in expired:
                if not future.done():
                    future.set_result(False)
            log.warning(
                "SYNC_MASTER: %d send(s) ending at up to %d not acknowledged by a slave within "
                "%.1f s (acknowledged up to %d): FLUSH_SLAVE_TIMEOUT",
                len(expired),
                max(entry[0] for entry in expired),
                self.slave_timeout,
                self.acked_offset,
            )
        if waiting:
            self._expiry = loop.call_at(min(entry[1] for entry in waiting), self._expire)

    # --- acks -----------------------------------------------------------------------------------

    def on_ack(self, offset: int) -> None:
        """A validated ack from a slave: release every send it covers."""
        if offset <= self.acked_offset:
            return
        self.acked_offset = offset
        waiting = self._waiting
        while waiting and waiting[0][0] <= offset:
            future = waiting.popleft()[2]
            if not future.done():
                future.set_result(True)
        for listener in self.ack_listeners:
            listener(offset)

    @property
    def waiting(self) -> int:
        return sum(1 for _e, _d, f in self._waiting if not f.done())

    def fail_all(self) -> None:
        """At stop: every waiting send gets its answer now (not acknowledged)."""
        for _end, _deadline, future in self._waiting:
            if not future.done():
                future.set_result(False)
        self._waiting.clear()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _explain(self, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_reason_logged >= REASON_LOG_INTERVAL:
            self._last_reason_logged = now
            log.warning("SYNC_MASTER: SLAVE_NOT_AVAILABLE because %s", reason)


def _end(entry: tuple[int, float, asyncio.Future[bool]]) -> int:
    return entry[0]


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
            for _end, _deadline, future in self._waiting:
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
