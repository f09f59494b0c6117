"""The RocketMQ C++ client as a test peer: one `tests/integration/cpp_peer.py` process per step.

`run_peer(tmp_path, spec)` runs one step to its end and returns the JSON events it printed
(the process must succeed); `peer(tmp_path, spec)` yields a running `Peer` to read events from
as they come, and kills it on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

PEER = Path(__file__).parents[1] / "integration" / "cpp_peer.py"
SEND_OK = 0  # rocketmq.client.SendStatus.OK
PEER_TIMEOUT = 45.0  # one peer process, start to exit
CONSUME_TIMEOUT = 25.0  # a consumer waiting for the messages it expects
LINGER = 2.0  # a consumer stays up this long after the last expected message


# --- the C++ peer ---------------------------------------------------------------------------


class Peer:
    """One `cpp_peer.py` process: its JSON events as they come, stderr in a file."""

    _numbers = itertools.count()

    def __init__(self, tmp_path: Path, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.number = next(self._numbers)
        self.home = tmp_path / "cpp-home"
        self.stderr_path = tmp_path / "logs" / f"cpp-peer-{self.number}-{spec['op']}.stderr"
        self.events: list[dict[str, Any]] = []
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.home.mkdir(exist_ok=True)
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        # The native client logs to ~/logs/rocketmq-cpp: keep that inside the test's tmp dir.
        env = {**os.environ, "HOME": str(self.home)}
        with self.stderr_path.open("wb") as stderr:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(PEER),
                json.dumps(self.spec),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
            )

    async def next_event(self) -> dict[str, Any] | None:
        assert self.process is not None and self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            return None
        try:
            event: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            event = {"event": "garbage", "line": line.decode("utf-8", "replace")}
        self.events.append(event)
        return event

    async def wait_event(self, kind: str, timeout: float = PEER_TIMEOUT) -> dict[str, Any]:
        async def scan() -> dict[str, Any]:
            while (event := await self.next_event()) is not None:
                if event["event"] == kind:
                    return event
            raise AssertionError(f"C++ peer ended without {kind!r}: {self.describe()}")

        try:
            return await asyncio.wait_for(scan(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {kind!r} within {timeout} s: {self.describe()}") from None

    async def finish(
        self, timeout: float = PEER_TIMEOUT, *, must_succeed: bool = True
    ) -> list[dict[str, Any]]:
        """Read to the end and wait for the exit; the process must succeed unless told."""
        assert self.process is not None

        async def drain() -> None:
            while await self.next_event() is not None:
                pass
            assert self.process is not None
            await self.process.wait()

        try:
            await asyncio.wait_for(drain(), timeout)
        except TimeoutError:
            await self.kill()
            raise AssertionError(
                f"C++ peer still running after {timeout} s: {self.describe()}"
            ) from None
        if must_succeed and (self.process.returncode != 0 or self.of("error")):
            raise AssertionError(f"C++ peer failed: {self.describe()}")
        return self.events

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    def describe(self) -> str:
        code = None if self.process is None else self.process.returncode
        try:
            stderr = self.stderr_path.read_text(errors="replace")[-2000:]
        except FileNotFoundError:
            stderr = ""
        events = "\n".join(json.dumps(e) for e in self.events[-30:])
        return (
            f"op={self.spec['op']} exit={code}\nlast events:\n{events}\n"
            f"stderr ({self.stderr_path}):\n{stderr}"
        )


@contextlib.asynccontextmanager
async def peer(tmp_path: Path, spec: dict[str, Any]) -> AsyncIterator[Peer]:
    """A running peer, killed on the way out whatever happened."""
    p = Peer(tmp_path, spec)
    await p.start()
    try:
        yield p
    finally:
        await p.kill()


async def run_peer(
    tmp_path: Path, spec: dict[str, Any], *, must_succeed: bool = True
) -> list[dict[str, Any]]:
    async with peer(tmp_path, spec) as p:
        return await p.finish(must_succeed=must_succeed)
