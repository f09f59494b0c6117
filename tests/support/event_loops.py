"""The event loops the code runs on, for tests that run one coroutine on each: asyncio's own
and uvloop (which brokerd and the clients' threads use)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

EVENT_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def run_on(loop_name: str, main: Coroutine[Any, Any, None]) -> None:
    """Run `main` to its end on a fresh loop of `EVENT_LOOPS[loop_name]`."""
    with asyncio.Runner(loop_factory=EVENT_LOOPS[loop_name]) as runner:
        runner.run(main)
