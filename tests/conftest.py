"""Fixtures shared by every test folder (helpers that are not fixtures live in tests/support).

- `processes`: a `ProcessGroup` whose daemons log under the test's tmp dir and are all stopped
  when the test ends, passed or failed.
- `namesrv`: a running name server (a `Daemon`; `.address` is "127.0.0.1:port").
- `remoting_client`: a `RemotingClient`, closed when the test ends.
- `api`: a `BrokerAPI` with its default timeout, closed when the test ends.
- `memory_network`: an in-memory network for HA services (tests/support/memory_streams.py);
  the connections it made are closed when the test ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from client.api import BrokerAPI
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


@pytest.fixture
async def api() -> AsyncIterator[BrokerAPI]:
    client = BrokerAPI()
    try:
        yield client
    finally:
        await client.close()
