"""Fixtures shared by every test folder (helpers that are not fixtures live in tests/support).

- `processes`: a `ProcessGroup` whose daemons log under the test's tmp dir and are all stopped
  when the test ends, passed or failed.
- `namesrv`: a running name server (a `Daemon`; `.address` is "127.0.0.1:port").
- `remoting_client`: a `RemotingClient`, closed when the test ends.
- `api`: a `BrokerAPI` with its default timeout, closed when the test ends.
- `etcd`: a single-member etcd (tests/support/etcd.py), stopped when the test ends.
- `ha`: a `Harness` (tests/support/ha_harness.py) whose HA services, clients and relays talk
  over an in-memory network: no sockets. It stops what it made when the test ends and fails the
  test if asyncio logged an error meanwhile.

`make test` runs the tests in pytest-xdist workers with `--dist loadscope`: a module's tests run
in one worker, so a module-scoped fixture (a cluster, a browser, a built release) is made once.
Modules are handed out in the order `pytest_collection_modifyitems` leaves them (`make test`
passes --no-loadscope-reorder): the long ones first (`LONG_FIRST`), the unit tests, hundreds of
short modules, last, where they fill the workers evenly up to the end. xdist's own order (most
tests first) hands out the longest modules, which have few tests, last, where one of them can
keep a worker busy long after the others ran out of work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.etcd import EtcdCluster
from tests.support.ha_harness import Harness, harness
from tests.support.history import Recorder
from tests.support.memory_streams import MemoryNetwork
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.transport.client import RemotingClient

# Hypothesis' per-example deadline is a timing assertion: on a loaded 2-core machine a slow
# example fails a test that is right. Speed is measured by `make bench`, not here.
settings.register_profile("tidemq", deadline=None)
settings.load_profile("tidemq")


# Where the long modules are (a JVM or two, a package build, fault runs, seeded fuzzing): the
# earlier prefix runs first; a module under none of them runs after all of these.
LONG_FIRST = (
    "tests/spark/",
    "tests/integration/test_install.py",
    "tests/integration/test_release.py",
    "tests/fault/",
    "tests/fuzz/",
    "tests/integration/",
)


def _start_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next(
        (rank for rank, prefix in enumerate(LONG_FIRST) if path.startswith(prefix)),
        len(LONG_FIRST),
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_start_rank)  # stable: each module's tests keep their order


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    with EtcdCluster(1, tmp_path / "etcd", tmp_path / "logs") as cluster:
        yield cluster


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    """A history (tests/support/history.py) kept in memory and in tmp_path/history.jsonl."""
    history = Recorder(tmp_path / "history.jsonl", "test")
    try:
        yield history
    finally:
        history.close()


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


@pytest.fixture
async def ha(tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness(tmp_path, MemoryNetwork()) as made:
        yield made
