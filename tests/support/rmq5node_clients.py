"""The official RocketMQ 5 Node.js client (`rocketmq-client-nodejs`, installed by `make install`
into tests/support/rmq5node/node_modules) as the integration tests drive it: one `node` process
per client, running tests/support/rmq5node/client.js, commands and answers one JSON line each
(that script says them)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

__all__ = ["NODE_CLIENT_DIR", "NodeClient"]

NODE_CLIENT_DIR = Path(__file__).resolve().parent / "rmq5node"
SCRIPT = NODE_CLIENT_DIR / "client.js"
ANSWER_SECONDS = 60.0


def node_command() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: `make install` installs Debian's nodejs")
    if not (NODE_CLIENT_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.fail(f"rocketmq-client-nodejs is missing in {NODE_CLIENT_DIR}: `make install`")
    return node


class NodeClient:
    """One official Node.js client process (producer, simple or push consumer); its log
    (stderr) goes to `log`."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log
        self.checks: list[dict[str, Any]] = []  # the broker's transaction checks it answered

    @classmethod
    async def start(cls, endpoint: str, log: Path, **request: Any) -> NodeClient:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as stderr:
            process = await asyncio.create_subprocess_exec(
                node_command(),
                str(SCRIPT),
                endpoint,
                json.dumps(request),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=NODE_CLIENT_DIR,
                # parts of the client log to $HOME/logs/rocketmq whatever logger it is given
                env={**os.environ, "HOME": str(log.parent)},
            )
        client = cls(process, log)
        try:
            started = await client.answer()
            assert started.get("started"), f"the Node.js client did not start: {started}"
        except BaseException:
            await client.close()
            raise
        return client

    async def answer(self, timeout: float = ANSWER_SECONDS) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the Node.js client did not answer in {timeout} s (log {self.log})"
            line = await asyncio.wait_for(self.process.stdout.readline(), left)
            assert line, f"the Node.js client ended (exit {self.process.returncode}, {self.log})"
            if line.startswith(b"{"):
                answer: dict[str, Any] = json.loads(line)
                return answer

    async def call(self, **command: Any) -> dict[str, Any]:
        """The answer to `command`, skipping the lines printed meanwhile on the client's own
        (transaction checks: kept in `self.checks`)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await self.process.stdin.drain()
        while True:
            answer = await self.answer()
            if "checked" in answer:
                self.checks.append(answer)
                continue
            return answer

    async def send(self, **message: Any) -> dict[str, Any]:
        return await self.call(op="send", message=message)

    async def receive(self, max_num: int = 32, invisible_ms: int = 30_000) -> list[dict[str, Any]]:
        answer = await self.call(op="receive", max=max_num, invisible_ms=invisible_ms)
        assert "error" not in answer, answer
        messages: list[dict[str, Any]] = answer["messages"]
        return messages

    async def receive_until(
        self, count: int, invisible_ms: int = 30_000, timeout: float = 40
    ) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} messages: {got}"
            got += await self.receive(invisible_ms=invisible_ms)
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
