"""Client processes driven by JSON lines: the official 5.x clients' test drivers.

A driver (tests/support/rmq5/consume.py, tests/support/rmq5node/client.js) takes its endpoint
and a JSON request as arguments, prints `{"started": true}` once its client runs, then reads one
JSON command per stdin line and prints one JSON answer per stdout line. Other stdout lines (the
clients' own logging) are skipped: answers are the lines starting with `{`. Closing stdin asks
the driver to shut its client down and exit.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

ANSWER_SECONDS = 60.0


class LineDriver:
    """One driver process; `what` names it in failures, `context()` adds where to look."""

    what = "the client"

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    def context(self) -> str:
        return ""

    async def expect_started(self) -> None:
        """The first answer must say the client started; else the process is stopped."""
        try:
            started = await self.answer()
            assert started.get("started"), f"{self.what} did not start: {started}{self.context()}"
        except BaseException:
            await self.close()
            raise

    async def answer(self, timeout: float = ANSWER_SECONDS) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"{self.what} did not answer in {timeout} s{self.context()}"
            line = await asyncio.wait_for(self.process.stdout.readline(), left)
            assert line, f"{self.what} ended (exit {self.process.returncode}){self.context()}"
            if line.startswith(b"{"):
                answer: dict[str, Any] = json.loads(line)
                return answer

    async def command(self, **command: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await self.process.stdin.drain()

    @staticmethod
    async def collect(
        count: int, receive: Callable[[], Awaitable[list[dict[str, Any]]]], timeout: float
    ) -> list[dict[str, Any]]:
        """Calls `receive` until `count` messages came (more may come), at most `timeout` s."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} messages: {got}"
            got += await receive()
        return got

    async def close(self) -> None:
        process = self.process
        if process.returncode is None:
            try:
                assert process.stdin is not None
                process.stdin.close()
                await asyncio.wait_for(process.wait(), 15)
            except (TimeoutError, BrokenPipeError, ConnectionResetError, AssertionError):
                process.kill()
                await process.wait()
