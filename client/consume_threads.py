"""The threads a push consumer runs plain (blocking) listeners on.

A job is one pulled batch: the listener called on each of its messages in turn, in one thread
(`AsyncPushConsumer._call_each`). What a job costs beyond the listener is the handoff: waking a
thread, and waking the event loop with the outcome. `loop.run_in_executor` pays a loop wake-up
(a self-pipe write and an epoll return) and two future objects per job; here a finished job is
put on a list, and only the job that finds the list empty wakes the loop, which then resolves
every job on it. While the loop is busy pulling and decoding, the jobs that finish meanwhile
share one wake-up. Threads start as jobs find none idle, up to `max_threads` (RocketMQ's
consumeThreadMax), like `ThreadPoolExecutor`'s.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_Job = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_Done = tuple["asyncio.Future[Any]", Any, BaseException | None]


class ConsumeThreads:
    """Runs jobs on up to `max_threads` threads; `submit` returns a future of the loop's."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_threads: int, name: str) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self._loop = loop
        self._max_threads = max_threads
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._finished: list[_Done] = []
        self._finished_lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """`fn(*args)` on a thread; its result (or exception) in the returned future."""
        if self._closed:
            raise RuntimeError(f"{self._name}: consume threads are shut down")
        future = self._loop.create_future()
        self._jobs.put((future, fn, args))
        if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_threads:
            thread = threading.Thread(
                target=self._work, name=f"{self._name}-{len(self._threads) + 1}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            try:
                done: _Done = (future, fn(*args), None)
            except BaseException as exc:  # noqa: BLE001 - the awaiting coroutine gets it, as from run_in_executor
                done = (future, None, exc)
            # Idle before the outcome can reach the loop: a job submitted on seeing it finds
            # this thread rather than starting another.
            self._idle.release()
            with self._finished_lock:
                wake = not self._finished
                self._finished.append(done)
            del job, future, done  # a finished job holds nothing while the thread waits
            if wake:
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody awaits these any more
                    log.debug("%s: a job finished after its event loop closed", self._name)

    def _deliver(self) -> None:
        with self._finished_lock:
            finished, self._finished = self._finished, []
        for future, result, exc in finished:
            if future.cancelled():
                continue
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Let every thread end after its current job; jobs not started are never run (their
        futures are cancelled). Called on the loop's thread."""
        self._closed = True
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _thread in self._threads:
            self._jobs.put(None)
