"""The blocking API: the asyncio core driven on one background event loop.

`Producer`, `PushConsumer` and `PullConsumer` (blocking) wrap their asyncio twins. Each call is
run on a single daemon thread's event loop with `run_coroutine_threadsafe`, so there is one
implementation of every behaviour; the blocking classes only forward.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def background_loop() -> asyncio.AbstractEventLoop:
    """The shared loop of the blocking API, started on first use."""
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = _new_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            _thread = threading.Thread(target=run, name="tidemq-client-loop", daemon=True)
            _thread.start()
            ready.wait()
            _loop = loop
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule `coro` on the background loop; the caller gets a thread-safe future."""
    loop = background_loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("blocking client call made from inside a listener on the client's loop")
    return asyncio.run_coroutine_threadsafe(coro, loop)


def call(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run `coro` on the background loop and wait for its result."""
    return submit(coro).result(timeout)


@atexit.register
def _stop_loop() -> None:
    loop = _loop
    if loop is not None and loop.is_running():
        loop.call_soon_threadsafe(loop.stop)


class _Lifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


L = TypeVar("L", bound=_Lifecycle)


class AsyncLifecycle:
    """The asyncio classes' life cycle, in the vocabulary of every service of ours
    (common/lifecycle.py): `start()` and `stop()`, and `async with` (start on entry, stop on
    exit). `shutdown()` is RocketMQ's name for `stop()` at the user API, a thin alias."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        """RocketMQ's name for `stop()`."""
        await self.stop()

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


class BlockingTwin(Generic[L]):
    """The blocking classes' shared part: `start`, `stop` (and its alias `shutdown`) and `with`
    over the async twin."""

    _async: L

    def start(self) -> None:
        """Start (the async twin's `start()`, waited for)."""
        call(self._async.start())

    def stop(self) -> None:
        """Stop (the async twin's `stop()`, waited for)."""
        call(self._async.stop())

    def shutdown(self) -> None:
        """RocketMQ's name for `stop()`."""
        self.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
