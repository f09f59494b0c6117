"""The one start/stop shape of tidemq's long-lived parts (RocketMQ's ServiceThread, mode's
Service.add_dependency, aiohttp's runner setup/cleanup).

A `Service` owns an ordered list of children, anything with `async start()`/`async stop()`.
`start()` starts them in order, then runs the service's own `on_start()`, which may start more
children (`start_child`) for parts that can only be built then, e.g. once a port is bound. A
child that fails to start stops the ones already started, in reverse, and the error propagates.
`stop()` stops every started child in reverse order of starting; it is idempotent, and a child
whose stop fails does not keep the others running (the first such error is raised at the end).
Work a service does at its own stop goes in a `Step` child: added first, it runs last.

`Step` turns two callables (sync or async) into a child, `BackgroundTask` a coroutine run as a
task until stop. `cancel_and_wait` is the one way to end tasks: it absorbs the cancellation it
caused, never one aimed at its caller.

This module lives in store/, the bottom layer, so that store, ha, client and broker share it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

log = logging.getLogger(__name__)


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


ChildT = TypeVar("ChildT", bound=Startable)
CANCEL_AGAIN_AFTER = 1.0  # seconds: longer than any task's own clean-up once cancelled
# Sync or async; a result is awaited when awaitable, else ignored (e.g. persist_quietly's bool).
Action = Callable[[], object]


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel `tasks` (None entries skipped) and wait until every one has ended.

    The tasks' own cancellation is absorbed; a cancellation of the caller while it waits
    propagates (unlike `suppress(CancelledError): await task`, which would swallow it). A task
    that had already failed re-raises its exception here, as awaiting it would.
    """
    live = [task for task in tasks if task is not None]
    if not live:
        return
    pending = set(live)
    while pending:
        for task in pending:
            task.cancel()
        # Python 3.11's wait_for can swallow a cancellation that meets its inner future's
        # result (gh-86296), and a loop around it then runs on: cancel again until it ends.
        _done, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_AFTER)
    failures = [t.exception() for t in live if not t.cancelled()]
    for failure in failures:
        if failure is not None:
            raise failure


async def _run(action: Action | None) -> None:
    if action is not None:
        result = action()
        if inspect.isawaitable(result):
            await result


class Step:
    """A child made of callables: `start` runs at its place in the start order, `stop` at its
    place in the (reverse) stop order."""

    def __init__(self, *, start: Action | None = None, stop: Action | None = None) -> None:
        self._start = start
        self._stop = stop

    async def start(self) -> None:
        await _run(self._start)

    async def stop(self) -> None:
        await _run(self._stop)


class BackgroundTask:
    """A coroutine run as a named task from start until stop."""

    def __init__(self, run: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._run = run
        self.name = name
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self.task = self.task, None
        await cancel_and_wait(task)


class Service:
    """Ordered children, started in order and stopped in reverse; an async context manager."""

    def __init__(self) -> None:
        # Prefixed: subclasses often have a `_running` or `_children` of their own.
        self._service_children: list[Startable] = []
        self._service_started: list[Startable] = []
        self._service_running = False

    @property
    def running(self) -> bool:
        return self._service_running

    def add_child(self, child: ChildT) -> ChildT:
        """Start `child` at every start, after the children added before it."""
        self._service_children.append(child)
        return child

    async def start_child(self, child: ChildT) -> ChildT:
        """Start `child` now (during `on_start`); it stops in reverse order with the others."""
        await child.start()
        self._service_started.append(child)
        return child

    async def on_start(self) -> None:
        """The service's own start work, after its children; may call `start_child`."""

    async def start(self) -> None:
        if self._service_running:
            return
        self._service_running = True
        try:
            for child in self._service_children:
                await self.start_child(child)
            await self.on_start()
        except BaseException:
            self._service_running = False
            failure = await self._stop_started()
            if failure is not None:
                log.error("stopping after a failed start also failed", exc_info=failure)
            raise

    async def stop(self) -> None:
        if not self._service_running:
            return
        self._service_running = False
        failure = await self._stop_started()
        if failure is not None:
            raise failure

    async def _stop_started(self) -> Exception | None:
        first: Exception | None = None
        while self._service_started:
            child = self._service_started.pop()
            try:
                await child.stop()
            except Exception as exc:
                log.exception("stopping %r failed", child)
                first = first or exc
        return first

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
