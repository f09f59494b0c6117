"""ConsumeThreads: results and errors reach the loop's futures, jobs that finish while the loop is
busy share one wake-up, fast jobs keep to one thread, jobs behind a blocking one get another
thread (up to the maximum), and shutdown ends them."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.conditions import eventually
from tidemq.client.consumer.consume_threads import ConsumeThreads


async def test_results_and_errors_reach_their_futures() -> None:
    threads = ConsumeThreads(asyncio.get_running_loop(), 4, "t")
    try:
        assert await threads.submit(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            await threads.submit(lambda: 1 / 0)
        assert await asyncio.gather(*(threads.submit(pow, i, 2) for i in range(50))) == [
            i * i for i in range(50)
        ]
    finally:
        threads.shutdown()


async def test_jobs_finished_while_the_loop_is_busy_share_one_wake_up() -> None:
    loop = asyncio.get_running_loop()
    threads = ConsumeThreads(loop, 2, "t")
    wake_ups = 0
    deliver = threads._deliver

    def counting_deliver() -> None:
        nonlocal wake_ups
        wake_ups += 1
        deliver()

    threads._deliver = counting_deliver  # type: ignore[method-assign]
    try:
        futures = [threads.submit(int, i) for i in range(20)]
        await asyncio.sleep(0)  # one turn: the jobs are released to the threads
        # The loop's thread is busy (here: blocked) while every job finishes.
        deadline = time.monotonic() + 30
        while len(threads._finished) < 20 and time.monotonic() < deadline:
            time.sleep(0.001)  # noqa: ASYNC251 - the loop must not run meanwhile
        assert await asyncio.gather(*futures) == list(range(20))
        assert wake_ups == 1
    finally:
        threads.shutdown()


async def test_fast_jobs_keep_to_one_thread() -> None:
    threads = ConsumeThreads(asyncio.get_running_loop(), 4, "t")
    try:
        for _ in range(20):
            assert await asyncio.gather(*(threads.submit(int, str(i)) for i in range(32))) == list(
                range(32)
            )
        assert len(threads._threads) == 1
    finally:
        threads.shutdown()


async def test_jobs_behind_a_blocking_one_get_another_thread_up_to_the_maximum() -> None:
    threads = ConsumeThreads(asyncio.get_running_loop(), 2, "t")
    release = threading.Event()
    running = 0
    most = 0
    lock = threading.Lock()

    def blocking_job() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(30)
        with lock:
            running -= 1

    try:
        blocked = threads.submit(blocking_job)
        await eventually(lambda: running == 1, "the blocking job running")
        # A fast job behind it is run by a second thread once the first has stalled.
        assert await asyncio.wait_for(threads.submit(int, "8"), 30) == 8
        assert len(threads._threads) == 2
        futures = [threads.submit(blocking_job) for _ in range(4)]
        await eventually(lambda: most == 2, "both threads holding a job")
        release.set()
        await asyncio.gather(blocked, *futures)
        assert most == 2
        assert len(threads._threads) == 2
    finally:
        threads.shutdown()


async def test_shutdown_cancels_waiting_jobs_and_ends_the_threads() -> None:
    threads = ConsumeThreads(asyncio.get_running_loop(), 1, "t")
    started = threading.Event()
    release = threading.Event()

    def first() -> str:
        started.set()
        release.wait(30)
        return "done"

    running = threads.submit(first)
    waiting = threads.submit(str, 1)
    assert await asyncio.to_thread(started.wait, 30)
    threads.shutdown()
    assert waiting.cancelled()
    with pytest.raises(RuntimeError, match="shut down"):
        threads.submit(str, 2)
    release.set()
    assert await running == "done"  # the job under way finishes
    for thread in threads._threads:
        await asyncio.to_thread(thread.join, 30)
        assert not thread.is_alive()
