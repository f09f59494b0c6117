"""The README's quick start runs as written, against what `make run` starts.

`make run` is started as the README says (on free ports instead of 9876/10911: the test passes
them through RUN_ARGS, and writes the name server's address into each snippet where the README
says 127.0.0.1:9876). Each Python block of the "Quick start" section then runs as its own
program, as a reader would paste it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launcher import LaunchedCluster
from tests.support.processes import REPO_ROOT

README = REPO_ROOT / "README.md"
README_NAMESRV = "127.0.0.1:9876"


def quick_start_blocks() -> list[str]:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_quick_start_has_the_three_programs() -> None:
    blocks = quick_start_blocks()
    assert [b.splitlines()[0] for b in blocks] == [
        "from rocketmq.client import Producer, Message",
        "import threading",
        "import asyncio",
    ]
    assert all(README_NAMESRV in block for block in blocks)


@pytest.mark.slow
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    cluster = LaunchedCluster.start("local", tmp_path / "local", via_make=True)
    try:
        outputs = []
        for block in quick_start_blocks():
            program = block.replace(README_NAMESRV, cluster.namesrv_addr)
            run = subprocess.run(
                [sys.executable, "-c", program],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            assert run.returncode == 0, f"{block}\n--- stderr:\n{run.stderr}"
            outputs.append(run.stdout)
    finally:
        cluster.stop()
    cpp, blocking, polled = outputs
    assert cpp.splitlines()[0] in ("0", "SendStatus.OK"), cpp
    assert blocking.splitlines()[0].startswith("SendStatus.SEND_OK "), blocking
    # The blocking consumer waits for its message before it exits (its group is new: it reads
    # the young queues from 0, so the C++ client's message or its own comes first).
    consumed = blocking.splitlines()[1:]
    assert consumed and consumed[0].startswith("TopicTest TagA "), blocking
    assert "b'hello'" in consumed[0], blocking
    # The asyncio pull consumer polls what the programs sent (one poll: a first batch).
    assert any(line.endswith(" b'hello'") for line in polled.splitlines()), polled
