"""The official RocketMQ 5 Python client (`.venv-rmq5`) as the integration tests drive it: the
producer script (tests/support/rmq5/send.py) and a brokerd with a gRPC port and a topic."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup, free_port
from tidemq.client.admin.api import AdminClient
from tidemq.client.protocol.models import TopicConfig

__all__ = ["LEVELS", "RMQ5_PYTHON", "SEND_SCRIPT", "rmq5_send", "start_broker"]

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
