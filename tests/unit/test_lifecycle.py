"""tidemq.common.lifecycle: start order, reverse stop, failed starts, idempotent stop,
`async with`, and `cancel_and_wait` absorbing only the cancellation it caused."""

from __future__ import annotations

import asyncio

import pytest

from tidemq.common import lifecycle
from tidemq.common.lifecycle import BackgroundTask, Service, Step, cancel_and_wait


class Recorded:
    """A child that writes "start name" / "stop name" to a shared journal."""

    def __init__(self, name: str, journal: list[str], *, fail_start: bool = False) -> None:
        self.name = name
        self.journal = journal
        self.fail_start = fail_start

    async def start(self) -> None:
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")
        self.journal.append(f"start {self.name}")

    async def stop(self) -> None:
        self.journal.append(f"stop {self.name}")


def service_of(*children: Recorded) -> Service:
    service = Service()
    for child in children:
        service.add_child(child)
    return service


async def test_children_start_in_order_and_stop_in_reverse() -> None:
    journal: list[str] = []
    service = service_of(*(Recorded(n, journal) for n in "abc"))
    await service.start()
    assert service.running
    await service.stop()
    assert not service.running
    assert journal == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


async def test_children_started_in_on_start_stop_before_the_declared_ones() -> None:
    journal: list[str] = []

    class Late(Service):
        async def on_start(self) -> None:
            await self.start_child(Recorded("late", journal))

    service = Late()
    service.add_child(Recorded("early", journal))
    await service.start()
    await service.stop()
    assert journal == ["start early", "start late", "stop late", "stop early"]


async def test_a_child_that_fails_to_start_stops_the_started_ones_in_reverse() -> None:
    journal: list[str] = []
    service = service_of(
        Recorded("a", journal),
        Recorded("b", journal),
        Recorded("broken", journal, fail_start=True),
        Recorded("never", journal),
    )
    with pytest.raises(RuntimeError, match="broken cannot start"):
        await service.start()
    assert journal == ["start a", "start b", "stop b", "stop a"]
    assert not service.running
    await service.stop()  # nothing left to stop
    assert journal == ["start a", "start b", "stop b", "stop a"]


async def test_stop_is_idempotent_and_a_stopped_service_starts_again() -> None:
    journal: list[str] = []
    service = service_of(Recorded("a", journal))
    await service.stop()  # never started
    await service.start()
    await service.start()  # already running
    await service.stop()
    await service.stop()
    assert journal == ["start a", "stop a"]
    await service.start()
    await service.stop()
    assert journal == ["start a", "stop a", "start a", "stop a"]


async def test_a_failing_stop_does_not_keep_the_others_running() -> None:
    journal: list[str] = []

    def broken() -> None:
        raise OSError("disk gone")

    service = service_of(Recorded("a", journal))
    service.add_child(Step(stop=broken))
    service.add_child(Recorded("c", journal))
    await service.start()
    with pytest.raises(OSError, match="disk gone"):
        await service.stop()
    assert journal == ["start a", "start c", "stop c", "stop a"]


async def test_async_with_starts_and_stops_also_on_error() -> None:
    journal: list[str] = []
    service = service_of(Recorded("a", journal))
    with pytest.raises(KeyError):
        async with service as entered:
            assert entered is service
            assert journal == ["start a"]
            raise KeyError("boom")
    assert journal == ["start a", "stop a"]


async def test_step_runs_sync_and_async_callables_at_its_place() -> None:
    journal: list[str] = []

    async def opened() -> None:
        journal.append("open")

    service = Service()
    service.add_child(Step(start=opened, stop=lambda: journal.append("close")))
    service.add_child(Recorded("a", journal))
    async with service:
        pass
    assert journal == ["open", "start a", "stop a", "close"]


async def test_background_task_runs_until_stop() -> None:
    ticks = asyncio.Event()
    ended: list[str] = []

    async def loop() -> None:
        try:
            while True:
                ticks.set()
                await asyncio.sleep(3600)
        finally:
            ended.append("ended")

    child = BackgroundTask(loop, "ticker")
    await child.start()
    await asyncio.wait_for(ticks.wait(), 5)
    task = child.task
    assert task is not None and task.get_name() == "ticker"
    await child.stop()
    assert task.cancelled() and ended == ["ended"] and child.task is None
    await child.stop()  # again: nothing to cancel


async def forever() -> None:
    await asyncio.sleep(3600)


async def test_cancel_and_wait_ends_every_task_and_skips_none() -> None:
    tasks = [asyncio.create_task(forever()) for _ in range(3)]
    await cancel_and_wait(tasks[0], None, *tasks[1:])
    assert all(t.cancelled() for t in tasks)
    await cancel_and_wait()
    await cancel_and_wait(None)


async def test_cancel_and_wait_reraises_a_task_that_failed_on_its_own() -> None:
    async def fails() -> None:
        raise ValueError("bad")

    task = asyncio.create_task(fails())
    await asyncio.wait([task])
    with pytest.raises(ValueError, match="bad"):
        await cancel_and_wait(task)


async def test_cancel_and_wait_does_not_swallow_the_callers_cancellation() -> None:
    stubborn_cancelled = asyncio.Event()
    release = asyncio.Event()

    async def stubborn() -> None:
        # Takes its time to end after being cancelled, so the caller is still waiting on it.
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stubborn_cancelled.set()
            await release.wait()
            raise

    inner = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    after_wait: list[str] = []

    async def stopper() -> None:
        await cancel_and_wait(inner)
        after_wait.append("went on as if not cancelled")

    outer = asyncio.create_task(stopper())
    await asyncio.wait_for(stubborn_cancelled.wait(), 5)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert outer.cancelled() and after_wait == []
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await inner


async def test_cancel_and_wait_ends_a_task_that_swallowed_a_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As 3.11's wait_for does when a cancellation meets its inner future's result: the loop
    # around it runs on as if nothing had happened.
    monkeypatch.setattr(lifecycle, "CANCEL_AGAIN_AFTER", 0.05)
    swallowed = 0

    async def loop_that_swallows_once() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1

    task = asyncio.create_task(loop_that_swallows_once())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 5)
    assert task.cancelled() and swallowed == 1
