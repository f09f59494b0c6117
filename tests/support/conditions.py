"""Waiting on a condition instead of sleeping a fixed time.

`eventually(predicate, what, timeout)` calls `predicate` until it returns something true (an
awaitable result is awaited first, so a predicate may ask a broker), every `interval` seconds,
and returns the seconds it waited; after `timeout` it fails with an AssertionError naming `what`.
`eventually_sync` is the same for tests without an event loop (it sleeps the thread).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

DEFAULT_TIMEOUT = 5.0


async def eventually(
    predicate: Callable[[], object],
    what: str = "the condition",
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.005,
) -> float:
    started = time.monotonic()
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def eventually_sync(
    predicate: Callable[[], object],
    what: str = "the condition",
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.05,
) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - started
