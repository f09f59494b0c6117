"""The official RocketMQ 5 Python client (`.venv-rmq5`) as the integration tests drive it: the
producer script (tests/support/rmq5/send.py), a consumer process driven line by line
(`Rmq5Consumer`, tests/support/rmq5/consume.py) and a brokerd with a gRPC port and a topic."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.line_driver import LineDriver
from tests.support.processes import Daemon, ProcessGroup, free_port
from tidemq.client.admin.api import AdminClient
from tidemq.client.protocol.models import TopicConfig

__all__ = [
    "LEVELS",
    "RMQ5_PYTHON",
    "SEND_SCRIPT",
    "Rmq5Consumer",
    "rmq5_send",
    "start_broker",
]

ROOT = Path(__file__).resolve().parents[2]
RMQ5_PYTHON = ROOT / ".venv-rmq5" / "bin" / "python"
SEND_SCRIPT = ROOT / "tests" / "support" / "rmq5" / "send.py"
LEVELS = "messageDelayLevel=1s 2s 3s 4s 5s"


def rmq5_send(
    endpoint: str,
    topic: str,
    messages: list[dict[str, Any]],
    env: dict[str, str] | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """Send `messages` with the official Producer; the receipts (or errors), one per message,
    then what the checker saw (tests/support/rmq5/send.py says the options). `env`: more
    environment for the client process (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: the CAs its TLS
    option trusts)."""
    if not RMQ5_PYTHON.exists():
        pytest.fail(f"{RMQ5_PYTHON} is missing: `make install` makes it")
    request = json.dumps({"topic": topic, "messages": messages, **options})
    done = subprocess.run(
        [str(RMQ5_PYTHON), str(SEND_SCRIPT), endpoint, request],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=SEND_SCRIPT.parent,
        env={**os.environ, **(env or {})},
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(lines) >= len(messages), (done.stdout, done.stderr[-3000:])
    return lines


async def start_broker(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, topic: str, *overrides: str
) -> tuple[Daemon, str]:
    grpc_port = free_port()
    broker = processes.brokerd(
        namesrv.address, tmp_path / "store", f"grpcServerPort={grpc_port}", LEVELS, *overrides
    )
    admin = AdminClient(namesrv.address)
    try:
        await admin.create_topic(broker.address, TopicConfig(topic, 4, 4))

        async def routed() -> bool:
            return bool(await admin.api.get_route(namesrv.address, topic))

        await eventually(routed, f"the route of {topic}", 15)
    finally:
        await admin.close()
    return broker, f"127.0.0.1:{grpc_port}"


CONSUME_SCRIPT = ROOT / "tests" / "support" / "rmq5" / "consume.py"


class Rmq5Consumer(LineDriver):
    """One official consumer process; `call` sends a command and returns its answer line."""

    what = "the official client"

    @classmethod
    async def start(
        cls, endpoint: str, env: dict[str, str] | None = None, **request: Any
    ) -> Rmq5Consumer:
        """`env`: more environment for the client process (its TLS option's CAs)."""
        if not RMQ5_PYTHON.exists():
            pytest.fail(f"{RMQ5_PYTHON} is missing: `make install` makes it")
        process = await asyncio.create_subprocess_exec(
            str(RMQ5_PYTHON),
            str(CONSUME_SCRIPT),
            endpoint,
            json.dumps(request),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=CONSUME_SCRIPT.parent,
            env={**os.environ, **(env or {})},
        )
        consumer = cls(process)
        await consumer.expect_started()
        return consumer

    async def call(self, **command: Any) -> dict[str, Any]:
        await self.command(**command)
        answer = await self.answer()
        assert "error" not in answer, answer
        return answer

    async def receive(self, max_num: int = 32, invisible: int = 30) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = (
            await self.call(op="receive", max=max_num, invisible=invisible)
        )["messages"]
        return messages

    async def receive_until(
        self, count: int, invisible: int = 30, timeout: float = 40
    ) -> list[dict[str, Any]]:
        return await self.collect(count, lambda: self.receive(invisible=invisible), timeout)


@dataclass
class GrpcCluster:
    """A namesrvd and a brokerd with its gRPC port, for a module of 5.x client tests."""

    processes: ProcessGroup
    namesrv: Daemon
    broker: Daemon
    endpoint: str  # host:port of the gRPC port
    root: Path


@contextmanager
def grpc_cluster(root: Path, *overrides: str) -> Iterator[GrpcCluster]:
    """Start one under `root` (logs in root/logs) with brokerd keys `overrides`; stopped
    at the end, also when the block fails."""
    processes = ProcessGroup(root / "logs")
    try:
        namesrv = processes.namesrvd(name="namesrvd")
        grpc_port = free_port()
        broker = processes.brokerd(
            namesrv.address,
            root / "store",
            f"grpcServerPort={grpc_port}",
            *overrides,
            name="brokerd",
        )
        yield GrpcCluster(processes, namesrv, broker, f"127.0.0.1:{grpc_port}", root)
    finally:
        processes.stop_all()
