"""The README's quick start runs as written, against what `make run` starts.

`make run` is started as the README says (on free ports instead of 9876/10911: the test passes
them through RUN_ARGS, and writes the name server's address into each snippet where the README
says 127.0.0.1:9876, and the master's gRPC port where it says 127.0.0.1:8081). Each Python
block of the "Quick start" section then runs as its own program, as a reader would paste it:
the official RocketMQ 5 client's in `.venv-rmq5` (made by `make install`, as the README's
`rmq5` virtual environment).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launcher import LaunchedCluster
from tests.support.processes import REPO_ROOT

README = REPO_ROOT / "README.md"
README_NAMESRV = "127.0.0.1:9876"
README_GRPC = "127.0.0.1:8081"
RMQ5_FIRST_LINE = "from rocketmq import ClientConfiguration"
RMQ5_PYTHON = REPO_ROOT / ".venv-rmq5" / "bin" / "python"
# where `make install` put the Node.js client: `node -e` resolves require() from its cwd
NODE_CLIENT_DIR = REPO_ROOT / "tests" / "support" / "rmq5node"


def quick_start_blocks() -> list[str]:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def quick_start_node_blocks() -> list[str]:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```js\n(.*?)```", section, re.S)


def test_the_quick_start_has_the_three_programs() -> None:
    blocks = quick_start_blocks()
    assert [b.splitlines()[0] for b in blocks] == [
        "from rocketmq.client import Producer, Message",
        "import threading",
        "import asyncio",
        RMQ5_FIRST_LINE + ", Credentials, FilterExpression, Message, Producer, SimpleConsumer",
    ]
    assert all(README_NAMESRV in block for block in blocks[:3])
    assert README_GRPC in blocks[3]


@pytest.mark.slow
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    cluster = LaunchedCluster.start("local", tmp_path / "local", via_make=True)
    try:
        outputs = []
        grpc = f"127.0.0.1:{cluster.ports['broker-a'].grpc}"
        for block in quick_start_blocks():
            program = block.replace(README_NAMESRV, cluster.namesrv_addr)
            program = program.replace(README_GRPC, grpc)
            python = RMQ5_PYTHON if block.startswith(RMQ5_FIRST_LINE) else Path(sys.executable)
            run = subprocess.run(
                [str(python), "-c", program],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            assert run.returncode == 0, f"{block}\n--- stderr:\n{run.stderr}"
            outputs.append(run.stdout)
        [node_block] = quick_start_node_blocks()
        node = subprocess.run(
            ["node", "-e", node_block.replace(README_GRPC, grpc)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=NODE_CLIENT_DIR,
            env={**os.environ, "HOME": str(tmp_path)},  # its log: $HOME/logs/rocketmq
        )
        assert node.returncode == 0 and "received" in node.stdout, node.stderr
    finally:
        cluster.stop()
    cpp, blocking, polled, rmq5 = outputs
    assert cpp.splitlines()[0] in ("0", "SendStatus.OK"), cpp
    assert blocking.splitlines()[0].startswith("SendStatus.SEND_OK "), blocking
    # The blocking consumer waits for its message before it exits (its group is new: it reads
    # the young queues from 0, so the C++ client's message or its own comes first).
    consumed = blocking.splitlines()[1:]
    assert consumed and consumed[0].startswith("TopicTest TagA "), blocking
    assert "b'hello'" in consumed[0], blocking
    # The asyncio pull consumer polls what the programs sent (one poll: a first batch).
    assert any(line.endswith(" b'hello'") for line in polled.splitlines()), polled
    # The 5.x producer's message, received by the 5.x SimpleConsumer (POP) and acknowledged.
    sent = rmq5.splitlines()[0].removeprefix("sent ")
    assert f"received {sent}" in rmq5.splitlines(), rmq5
    # The same with the Node.js client.
    node_sent = node.stdout.splitlines()[0].removeprefix("sent ")
    assert f"received {node_sent}" in node.stdout.splitlines(), node.stdout
