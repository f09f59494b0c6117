"""Long polling (RocketMQ's PullRequestHoldService): pulls that found nothing wait for data.

A pull with the suspend flag that finds no new message is held, keyed by `topic@queueId`, until
a message arrives in that queue (the store's dispatch calls `notify_arrival`) or its suspend
time runs out; the puller then reads again and answers whatever it finds. Arrivals wake a held
pull at once; a periodic check (every 5 s, or shortPollingTimeMills without long polling) is only
the safety net for lost wake-ups, e.g. on a slave whose bytes arrive by replication.

Each held pull ends for one cause, counted in `ended_by` (the metric
`tidemq_held_pulls_total{cause}`): `arrival` (a dispatched message woke it), `check` (the
periodic check found data the wake-up missed: a steady count here means lost wake-ups),
`release` (another part asked the queue to look again: a POP FIFO acknowledgement), `timeout`
(its suspend time ran out) and `stop` (the broker stopped).

At most `max_held` pulls are held at once (`full` says when no more may be): each costs a task
and its request until it is answered, and consumers that never stop asking could otherwise hold
any amount of memory. The pull processor answers one more with SYSTEM_BUSY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.store.tags import TagFilter

log = logging.getLogger(__name__)


CAUSES: Final = ("arrival", "check", "release", "timeout", "stop")


@dataclass(eq=False, slots=True)
class Waiter:
    """One held request (a POP of several queues holds one waiter in each) and why it ended."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    cause: str = ""

    def wake(self, cause: str) -> None:
        if not self.event.is_set():
            self.cause = cause
            self.event.set()


@dataclass(eq=False, slots=True)
class HeldPull:
    pull_from_offset: int
    tag_filter: TagFilter
    waiter: Waiter


class PullRequestHoldService(Service):
    """Children: at stop, after the check loop, every held pull is answered."""

    def __init__(
        self,
        max_offset_of: Callable[[str, int], int],
        check_interval: float = 5.0,
        *,
        max_held: int = 100_000,
    ) -> None:
        super().__init__()
        self._max_offset_of = max_offset_of
        self.check_interval = check_interval
        self.max_held = max_held
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._held_count = 0
        self.ended_by = dict.fromkeys(CAUSES, 0)
        self.add_child(Step(stop=self._release_all))
        self.add_child(BackgroundTask(self._check_loop, "pull-hold"))

    def _release_all(self) -> None:
        for pulls in self._held.values():
            for pull in pulls:
                pull.waiter.wake("stop")
        self._held.clear()

    @property
    def held_count(self) -> int:
        return self._held_count

    @property
    def full(self) -> bool:
        """`max_held` pulls are held: hold no more."""
        return self._held_count >= self.max_held

    async def hold(
        self,
        topic: str,
        queue_id: int,
        pull_from_offset: int,
        tag_filter: TagFilter,
        timeout: float,
    ) -> None:
        """Wait until a matching message may have arrived in the queue, or `timeout` passes."""
        await self.hold_any([(topic, queue_id, pull_from_offset)], tag_filter, timeout)

    async def hold_any(
        self, queues: list[tuple[str, int, int]], tag_filter: TagFilter, timeout: float
    ) -> None:
        """Wait until a matching message may have arrived in any of `queues` (topic, queue id,
        offset waited past), or `timeout` passes: a POP of all the queues of a topic."""
        waiter = Waiter()
        pulls = [
            ((topic, queue_id), HeldPull(offset, tag_filter, waiter))
            for topic, queue_id, offset in queues
        ]
        for key, pull in pulls:
            self._held.setdefault(key, []).append(pull)
        self._held_count += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.event.wait(), timeout)
        finally:
            self._held_count -= 1
            self.ended_by[waiter.cause or "timeout"] += 1
            for key, pull in pulls:
                held = self._held.get(key)
                if held is not None:
                    if pull in held:
                        held.remove(pull)
                    if not held:
                        del self._held[key]

    def notify_arrival(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int, store_timestamp: int
    ) -> None:
        """The dispatch listener: wake pulls waiting below `max_offset` whose filter matches."""
        del store_timestamp
        pulls = self._held.get((topic, queue_id))
        if not pulls:
            return
        for pull in pulls:
            if max_offset > pull.pull_from_offset and pull.tag_filter.match_code(tags_code):
                pull.waiter.wake("arrival")

    def wake_queue(
        self, topic: str, queue_id: int, max_offset: int, cause: str = "release"
    ) -> None:
        for pull in self._held.get((topic, queue_id), ()):
            if max_offset > pull.pull_from_offset:
                pull.waiter.wake(cause)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            for (topic, queue_id), pulls in list(self._held.items()):
                if pulls:
                    self.wake_queue(topic, queue_id, self._max_offset_of(topic, queue_id), "check")
