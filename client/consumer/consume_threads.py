"""The threads a push consumer runs plain (blocking) listeners on.

A job is one pulled batch: the listener called on each of its messages in turn, in one thread
(`AsyncPushConsumer._call_each`). What a job costs beyond the listener is the handoff: waking a
thread, the GIL passing between it and the event loop's thread, and waking the loop with the
outcome. Under the GIL, threads that run Python at the same time only take turns, and each turn
is such a handoff; so jobs wait on one queue that the threads drain, and a thread is woken only
when none is awake, or when every awake thread has spent `STALL_SECONDS` in its current job (a
listener that blocks: on I/O, a lock, a sleep). Up to `max_threads` threads (RocketMQ's
consumeThreadMax) then run blocking listeners side by side, as a thread pool would, while fast
listeners cost one thread's handoffs rather than a convoy's.

- The jobs submitted in one turn of the loop are released together, at the end of the turn: one
  wake-up for a burst of pulled batches.
- A finished job is put on a list, and only the job that finds the list empty wakes the loop,
  which then resolves every job on it: jobs that finish while the loop is busy share one wake-up.
- While jobs wait, a loop timer checks every `STALL_SECONDS` whether the awake threads are all
  stalled, and wakes (or starts) one more if so.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

log = logging.getLogger(__name__)

# How long every awake thread must have been in its current job before another one is woken:
# longer than a batch of fast listener calls (32 messages, tens of microseconds), short enough
# that a blocking listener holds up the jobs behind it for no longer than this.
STALL_SECONDS: Final = 0.005

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
        self._jobs: collections.deque[_Job] = collections.deque()
        self._wake = threading.Condition(threading.Lock())
        # Under `_wake`: threads not waiting on it (running jobs, or woken and about to; a
        # thread counts as awake from its wake-up on), and wake-ups not yet taken by a waiter.
        self._awake = 0
        self._signalled = 0
        self._threads: list[threading.Thread] = []
        # Each awake thread's current job's start (monotonic), by thread ident.
        self._job_started: dict[int, float] = {}
        self._finished: list[_Done] = []
        self._finished_lock = threading.Lock()
        self._release_scheduled = False
        self._stall_timer: asyncio.TimerHandle | None = None
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """`fn(*args)` on a thread; its result (or exception) in the returned future."""
        if self._closed:
            raise RuntimeError(f"{self._name}: consume threads are shut down")
        future = self._loop.create_future()
        self._jobs.append((future, fn, args))
        if not self._release_scheduled:
            self._release_scheduled = True
            self._loop.call_soon(self._release)
        return future

    def _release(self) -> None:
        self._release_scheduled = False
        if self._closed or not self._jobs:
            return
        with self._wake:
            nobody_awake = self._awake == 0
        if nobody_awake or self._all_stalled():
            self._wake_one()
        if self._stall_timer is None:
            self._stall_timer = self._loop.call_later(STALL_SECONDS, self._check_stalled)

    def _check_stalled(self) -> None:
        self._stall_timer = None
        if self._closed or not self._jobs:
            return
        if self._all_stalled():
            self._wake_one()
        self._stall_timer = self._loop.call_later(STALL_SECONDS, self._check_stalled)

    def _all_stalled(self) -> bool:
        """Every awake thread is in a job it started `STALL_SECONDS` ago or more (none awake:
        True). A woken thread that has not taken a job yet is not stalled."""
        with self._wake:
            awake = self._awake
        started = list(self._job_started.values())
        if len(started) < awake:
            return False
        now = time.monotonic()
        return all(now - at >= STALL_SECONDS for at in started)

    def _wake_one(self) -> None:
        with self._wake:
            if self._awake < len(self._threads):  # one is waiting: wake it
                self._signalled += 1
                self._awake += 1
                self._wake.notify()
                return
            if len(self._threads) >= self._max_threads:
                return
            self._awake += 1
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{len(self._threads) + 1}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        me = threading.get_ident()
        jobs = self._jobs
        while True:
            while not self._closed:
                try:
                    future, fn, args = jobs.popleft()
                except IndexError:
                    break
                self._job_started[me] = time.monotonic()
                try:
                    done: _Done = (future, fn(*args), None)
                except BaseException as exc:  # noqa: BLE001 - the awaiting coroutine gets it, as from run_in_executor
                    done = (future, None, exc)
                with self._finished_lock:
                    wake_loop = not self._finished
                    self._finished.append(done)
                del future, fn, args, done  # a finished job holds nothing while the thread waits
                if wake_loop:
                    try:
                        self._loop.call_soon_threadsafe(self._deliver)
                    except RuntimeError:  # the loop is closed: nobody awaits these any more
                        log.debug("%s: a job finished after its event loop closed", self._name)
            self._job_started.pop(me, None)
            with self._wake:
                if self._closed:
                    self._awake -= 1
                    return
                if jobs:
                    continue  # submitted after the last look: this thread is still awake
                self._awake -= 1
                if not self._wait_for_wake_up():
                    return

    def _wait_for_wake_up(self) -> bool:
        """Holding `_wake`: wait until `_wake_one` wakes this thread (it counted the thread awake
        again), or until shutdown (False)."""
        while not self._signalled:
            if self._closed:
                return False
            self._wake.wait()
        self._signalled -= 1
        return True

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
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        while True:
            try:
                job = self._jobs.popleft()
            except IndexError:
                break
            job[0].cancel()
        with self._wake:
            self._wake.notify_all()
