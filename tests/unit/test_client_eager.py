"""Coroutines started in place (client/transport/eager.py): the first step runs in the caller, the
rest in whichever task awaits, with results, exceptions and cancellations going where a task's
would."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from tidemq.client.transport import eager


async def test_a_coroutine_that_never_waits_is_done_at_start() -> None:
    steps: list[str] = []

    async def quick() -> int:
        steps.append("ran")
        return 7

    started = eager.start(quick())
    assert steps == ["ran"]  # before anything was awaited
    assert isinstance(started, eager.Finished)
    assert await started == 7


async def test_an_error_of_the_first_step_is_raised_where_it_is_awaited() -> None:
    async def failing() -> None:
        raise ValueError("first step")

    started = eager.start(failing())
    with pytest.raises(ValueError, match="first step"):
        await started


async def test_the_first_step_runs_now_and_the_rest_in_the_awaiting_task() -> None:
    loop = asyncio.get_running_loop()
    answer = loop.create_future()
    steps: list[str] = []

    async def request() -> str:
        steps.append("sent")
        value = await answer
        steps.append("answered")
        await asyncio.sleep(0)  # a bare yield, driven by the awaiting task too
        return f"got {value}"

    started = eager.start(request())
    assert steps == ["sent"]
    assert isinstance(started, eager.Continuation)
    loop.call_soon(answer.set_result, "it")
    assert await started == "got it"
    assert steps == ["sent", "answered"]


async def test_an_exception_of_a_later_step_reaches_the_awaiting_task() -> None:
    loop = asyncio.get_running_loop()
    answer = loop.create_future()

    async def request() -> str:
        return str(await answer)

    started = eager.start(request())
    loop.call_soon(answer.set_exception, ConnectionError("gone"))
    with pytest.raises(ConnectionError, match="gone"):
        await started


async def test_cancelling_the_awaiting_task_cancels_the_coroutine() -> None:
    loop = asyncio.get_running_loop()
    answer = loop.create_future()
    cleaned_up: list[bool] = []

    async def request() -> None:
        try:
            await answer
        finally:
            cleaned_up.append(True)

    started = eager.start(request())

    async def waiter() -> None:
        await started

    task = loop.create_task(waiter())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned_up == [True]
    assert answer.cancelled()


async def test_closing_an_unawaited_continuation_runs_its_cleanup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    cleaned_up: list[str] = []

    async def request(answer: asyncio.Future[str], name: str) -> str:
        try:
            return await answer
        finally:
            cleaned_up.append(name)

    pending: asyncio.Future[str] = loop.create_future()
    failed: asyncio.Future[str] = loop.create_future()
    waiting = eager.start(request(pending, "pending"))
    answered_badly = eager.start(request(failed, "failed"))
    failed.set_exception(TimeoutError())  # answered, never read
    waiting.close()
    answered_badly.close()
    assert cleaned_up == ["pending", "failed"]
    assert pending.cancelled()
    del failed, answered_badly
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
    assert "never retrieved" not in caplog.text
