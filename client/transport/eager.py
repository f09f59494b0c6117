"""Coroutines stepped by hand up to their first wait, as Python 3.12's eager tasks do.

A task costs more than a short coroutine's whole run (its creation, its registration in
asyncio's set of all tasks, and a turn of the event loop before its first step: 3-5 us here),
and most of our short coroutines either never wait (a request a processor answers at once) or
only start something (a pull request sent, then its answer awaited). `start` runs a coroutine
at once, in the caller, until it first waits; what is left is a `Continuation`, an awaitable
that the task awaiting it drives exactly as if it had started the coroutine itself: what the
coroutine yields goes to that task as is, and the task's resumption (a value, or an exception
such as a cancellation) goes back to the coroutine.

Only for coroutines of our own: while one is stepped by hand, `asyncio.current_task()` is the
caller's task, so a coroutine that binds something to its task in its first step (such as
`asyncio.timeout`) would bind it to the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Continuation(Generic[T]):
    """The rest of a started `coroutine`, which waits on `waiting_on`; `close()` it unawaited."""

    __slots__ = ("_coroutine", "_waiting_on")

    def __init__(self, coroutine: Coroutine[Any, Any, T], waiting_on: Any) -> None:
        self._coroutine = coroutine
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine, waiting_on = self._coroutine, self._waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # noqa: BLE001 (a cancellation or whatever the task throws goes on to the coroutine)
                try:
                    waiting_on = coroutine.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    waiting_on = coroutine.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]

    def close(self) -> None:
        """Never to be awaited: the coroutine is closed where it waits (its `finally` runs), and
        the future it waits on is cancelled, or its exception marked as seen (no one will)."""
        waiting_on = self._waiting_on
        if isinstance(waiting_on, asyncio.Future):
            if not waiting_on.done():
                waiting_on.cancel()
            elif not waiting_on.cancelled():
                waiting_on.exception()
        self._coroutine.close()


class Finished(Generic[T]):
    """A coroutine that ended in its first step: its result or exception, for whoever awaits."""

    __slots__ = ("_error", "_result")

    def __init__(self, result: T | None, error: BaseException | None) -> None:
        self._result = result
        self._error = error

    def __await__(self) -> Generator[Any, Any, T]:
        yield from ()  # a generator that never waits
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def close(self) -> None:
        """Nothing runs any more; an exception no one will await is dropped."""


def start(coroutine: Coroutine[Any, Any, T]) -> Continuation[T] | Finished[T]:
    """Run `coroutine` now up to its first wait; await what this returns for its result."""
    try:
        waiting_on = coroutine.send(None)
    except StopIteration as stop:
        return Finished(stop.value, None)
    except Exception as exc:  # noqa: BLE001 (raised again where the result is awaited, as a task would)
        return Finished(None, exc)
    return Continuation(coroutine, waiting_on)
