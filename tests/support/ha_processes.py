"""Master and slave brokers as real processes, the sends and reads the HA fault tests and the
kill-9 soak make, and the checks of their stores on disk (moved from tests/fault/test_ha_faults.py).

`start_master`/`start_slave` run brokerd with fast HA timing (`HA_TIMING`); `send_many` sends
numbered messages (`body_of`/`id_of`) and returns where each acknowledged one was placed;
`read_all` reads a topic back checking each queue runs from 0 without a hole; `assert_identical`
compares the CommitLog files of two stores byte for byte.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path

from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING, ha_status
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.errors import ConnectError

FILE_SIZE = 4 * 1024 * 1024  # mappedFileSizeCommitLog of the test stores (processes.py)


# --- brokers ------------------------------------------------------------------------------


def start_master(
    processes: ProcessGroup,
    namesrv: Daemon,
    store: Path,
    *extra: str,
    role: str = "SYNC_MASTER",
    port: int | None = None,
    ha_port: int | None = None,
    name: str = "master",
) -> tuple[Daemon, int]:
    """A master; returns it and its HA port (fixed here, so a restart can reuse it)."""
    ha_port = ha_port or free_port()
    master = processes.brokerd(
        namesrv.address,
        store,
        f"brokerRole={role}",
        f"haListenPort={ha_port}",
        *HA_TIMING,
        *extra,
        port=port,
        name=name,
    )
    return master, ha_port


def start_slave(
    processes: ProcessGroup,
    namesrv: Daemon,
    store: Path,
    *extra: str,
    port: int | None = None,
    name: str = "slave",
) -> Daemon:
    return processes.brokerd(
        namesrv.address,
        store,
        "brokerRole=SLAVE",
        "brokerId=1",
        *HA_TIMING,
        *extra,
        port=port,
        name=name,
    )


async def status(api: BrokerAPI, broker: Daemon) -> dict[str, object]:
    return await ha_status(api, broker.address)


def as_int(value: object) -> int:
    assert isinstance(value, int), value
    return value


async def master_max(api: BrokerAPI, master: Daemon) -> int:
    return as_int((await status(api, master))["masterCommitLogMaxOffset"])


async def slave_max(api: BrokerAPI, slave: Daemon) -> int:
    return as_int((await status(api, slave))["maxOffset"])


async def connections(api: BrokerAPI, master: Daemon) -> list[dict[str, object]]:
    conns = (await status(api, master))["haConnectionInfo"]
    assert isinstance(conns, list)
    return conns


async def wait_transfer(api: BrokerAPI, master: Daemon, timeout: float = 15.0) -> None:
    async def connected() -> bool:
        try:
            conns = await connections(api, master)
        except ConnectError:
            # a master just restarted on its port: the first request may go out on the
            # connection to the killed one before its close is seen
            return False
        return any(c["state"] == "TRANSFER" for c in conns)

    await eventually(connected, "a slave in TRANSFER on the master", timeout)


async def wait_slave_at(api: BrokerAPI, slave: Daemon, target: int, timeout: float = 30.0) -> None:
    async def there() -> bool:
        return await slave_max(api, slave) >= target

    await eventually(there, f"the slave to reach offset {target}", timeout)


async def wait_caught_up(api: BrokerAPI, master: Daemon, slave: Daemon) -> int:
    target = await master_max(api, master)
    await wait_slave_at(api, slave, target)
    return target


async def wait_state(api: BrokerAPI, slave: Daemon, state: str, timeout: float = 15.0) -> None:
    async def reached() -> bool:
        return (await status(api, slave))["state"] == state

    await eventually(reached, f"the slave's HA state {state}", timeout)


# --- sends ----------------------------------------------------------------------------------


def body_of(i: int, size: int) -> bytes:
    return f"m{i:08d}|".encode() + os.urandom(max(size - 10, 0))


def id_of(body: bytes) -> int:
    return int(body[1:9])


async def send_many(
    api: BrokerAPI,
    master: Daemon,
    topic: str,
    count: int,
    *,
    start: int = 0,
    size: Callable[[int], int] = lambda i: 100 + i % 900,
    queues: int = 4,
    concurrency: int = 32,
    expect: SendStatus | None = SendStatus.SEND_OK,
    placed: dict[tuple[int, int], int] | None = None,
) -> dict[tuple[int, int], int]:
    """Send messages start..start+count-1, all answered `expect`; returns {(queue id, queue
    offset): message number} of those answered `expect` (SEND_OK when `expect` is None), in
    `placed` when given (a caller can watch it fill)."""
    sem = asyncio.Semaphore(concurrency)
    placed = {} if placed is None else placed
    statuses: list[SendStatus] = []

    async def one(i: int) -> None:
        async with sem:
            result = await api.send(
                master.address, send_header(topic, i % queues), body_of(i, size(i)), timeout=15
            )
            statuses.append(result.status)
            if result.status is (expect or SendStatus.SEND_OK):
                placed[(result.queue_id, result.queue_offset)] = i

    # Without an expected status (a broker killed meanwhile) failures are expected too.
    await asyncio.gather(
        *(one(i) for i in range(start, start + count)), return_exceptions=not expect
    )
    if expect is not None:
        assert statuses.count(expect) == count, {s: statuses.count(s) for s in set(statuses)}
    return placed


# --- on-disk checks -------------------------------------------------------------------------


def commitlog_range(store: Path, start: int, end: int) -> bytes:
    """The CommitLog bytes [start, end) read from the segment files (which must hold them)."""
    out = bytearray()
    for path in sorted((store / "commitlog").iterdir()):
        if not path.name.isdigit():
            continue
        base = int(path.name)
        lo, hi = max(start, base), min(end, base + FILE_SIZE)
        if lo >= hi:
            continue
        assert lo == start + len(out), f"no segment holds offset {start + len(out)}"
        with path.open("rb") as f:
            f.seek(lo - base)
            out += f.read(hi - lo)
    assert len(out) == end - start, f"the segments hold {len(out)} of {end - start} bytes"
    return bytes(out)


def first_segment(store: Path) -> int:
    return min(int(p.name) for p in (store / "commitlog").iterdir() if p.name.isdigit())


def assert_identical(master_store: Path, slave_store: Path, start: int, end: int) -> None:
    master = commitlog_range(master_store, start, end)
    slave = commitlog_range(slave_store, start, end)
    if master != slave:
        first = next(i for i in range(len(master)) if master[i] != slave[i])
        raise AssertionError(f"the CommitLogs differ first at physical offset {start + first}")


async def read_all(
    api: BrokerAPI, broker: Daemon, topic: str, queues: int = 4
) -> dict[tuple[int, int], int]:
    """{(queue id, queue offset): message number} of every message `broker` serves, checking
    that each queue's offsets run from 0 without a hole or a repeat."""

    async def topic_known() -> bool:
        return topic in (await api.all_topic_config(broker.address)).topic_config_table

    await eventually(topic_known, f"topic {topic} on {broker.name}", 15)
    found: dict[tuple[int, int], int] = {}
    for queue_id in range(queues):
        got: list[tuple[int, int]] = []
        offset = 0
        while True:
            pulled = await api.pull(broker.address, pull_header(topic, queue_id, offset))
            if pulled.status is not PullStatus.FOUND:
                break
            got += [(m.queue_offset, id_of(m.body)) for m in pulled.messages]
            offset = pulled.next_begin_offset
        assert [off for off, _ in got] == list(range(len(got))), f"queue {queue_id}: a hole"
        found.update(((queue_id, off), i) for off, i in got)
    return found


async def assert_read_once(
    api: BrokerAPI, broker: Daemon, topic: str, placed: dict[tuple[int, int], int]
) -> None:
    """Every message of `placed` is read from `broker` once, at its queue offset, and no other."""
    found = await read_all(api, broker, topic)
    missing = placed.keys() - found.keys()
    extra = found.keys() - placed.keys()
    assert not missing and not extra, f"{len(missing)} missing, {len(extra)} unexpected"
    assert found == placed


def connect_lines(log: str) -> list[int]:
    """The offsets the master's log says each slave connection reported first."""
    return [int(m) for m in re.findall(r"connected, its CommitLog ends at (\d+)", log)]
