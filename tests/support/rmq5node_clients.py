"""The official RocketMQ 5 Node.js client (`rocketmq-client-nodejs`, installed by `make install`
into tests/support/rmq5node/node_modules) as the integration tests drive it: one `node` process
per client, running tests/support/rmq5node/client.js, commands and answers one JSON line each
(that script says them)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.line_driver import LineDriver

__all__ = ["NODE_CLIENT_DIR", "NodeClient"]

NODE_CLIENT_DIR = Path(__file__).resolve().parent / "rmq5node"
SCRIPT = NODE_CLIENT_DIR / "client.js"


def node_command() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: `make install` installs Debian's nodejs")
    if not (NODE_CLIENT_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.fail(f"rocketmq-client-nodejs is missing in {NODE_CLIENT_DIR}: `make install`")
    return node


class NodeClient(LineDriver):
    """One official Node.js client process (producer, simple or push consumer); its log
    (stderr) goes to `log`."""

    what = "the Node.js client"

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        super().__init__(process)
        self.log = log
        self.checks: list[dict[str, Any]] = []  # the broker's transaction checks it answered

    def context(self) -> str:
        return f" (log {self.log})"

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
        await client.expect_started()
        return client

    async def call(self, **command: Any) -> dict[str, Any]:
        """The answer to `command`, skipping the lines printed meanwhile on the client's own
        (transaction checks: kept in `self.checks`)."""
        await self.command(**command)
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
        return await self.collect(count, lambda: self.receive(invisible_ms=invisible_ms), timeout)
