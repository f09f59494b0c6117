"""Fixtures for tests against real daemons on 127.0.0.1.

- `processes`: a `ProcessGroup` whose daemons log under the test's tmp dir and are all stopped
  when the test ends, passed or failed.
- `namesrv`: a running name server (a `Daemon`; `.address` is "127.0.0.1:port").
- `remoting_client`: a `RemotingClient`, closed when the test ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from client.remoting.client import RemotingClient
from tests.support.processes import Daemon, ProcessGroup


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def namesrv(processes: ProcessGroup) -> Daemon:
    return processes.namesrvd(name="namesrvd")


@pytest.fixture
async def remoting_client() -> AsyncIterator[RemotingClient]:
    client = RemotingClient()
    try:
        yield client
    finally:
        await client.close()
