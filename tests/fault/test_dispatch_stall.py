"""A record that cannot be dispatched is visible and holds nothing back (issue 30 item 3).

Real brokerd processes, a SYNC_MASTER and its slave, each with a plain file where the
ConsumeQueue folder of topic POISON goes (as found from outside: its first record's dispatch
fails, "Not a directory"). The poisoned record is stored and replicated (SEND_OK), and then:

- within seconds, GET /health on both metrics ports answers 503 naming the stuck record, and the
  log has the ERROR line with the cause;
- after QUARANTINE_AFTER attempts its queue is quarantined on both: the messages of another
  topic sent before and after it are pulled from master and slave, /health is 200 again (with a
  note), the metrics, the runtime info (`mqadmin brokerStatus`) and the dashboard's cluster
  page show what was skipped;
- both restart (the master after a kill -9, so its recovery re-dispatches) and serve, the
  quarantine kept (the next poisoned message is skipped at once, at the next queue offset).

On c82965c the test fails at the first check (/health answers 404), and past it the later
messages would never be pulled: dispatch retried the poisoned record every second for good.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.ha_processes import (
    read_all,
    send_many,
    start_master,
    start_slave,
    wait_caught_up,
    wait_transfer,
)
from tests.support.metrics import scrape_async, value_of
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.wire import send_header
from tidemq.client.admin.api import AdminClient
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.dashboard.views import cluster_view
from tidemq.store.dispatch_faults import QUARANTINE_AFTER

pytestmark = pytest.mark.asyncio

POISON = "Poison"
GOOD = "Good"


def poison(store: Path) -> None:
    """A plain file where POISON's ConsumeQueue folder goes."""
    (store / "consumequeue").mkdir(parents=True)
    (store / "consumequeue" / POISON).write_text("not a folder")


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_a_poisoned_record_is_visible_and_holds_nothing_back(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    stores = {"master": tmp_path / "master", "slave": tmp_path / "slave"}
    for store in stores.values():
        poison(store)
    ports = {"master": free_port(), "slave": free_port()}
    master, ha_port = start_master(
        processes, namesrv, stores["master"], f"metricsPort={ports['master']}"
    )
    slave = start_slave(processes, namesrv, stores["slave"], f"metricsPort={ports['slave']}")
    await wait_transfer(api, master)

    async def serving(port: int) -> bool:
        return (await http_get(port, "/health"))[0] == 200

    for port in ports.values():  # the SYNC_MASTER once its slave is in sync
        await eventually(lambda port=port: serving(port), "health 200", 15)
    placed = await send_many(api, master, GOOD, 40)

    # Both report it while they retry (one attempt a second, QUARANTINE_AFTER of them): watched
    # from before the send, as the window is a few seconds.
    async def stuck(port: int) -> bytes | None:
        status, body = await http_get(port, "/health")
        return body if status == 503 else None

    watches = [
        asyncio.create_task(first_value(lambda port=port: stuck(port), f"503 from the {name}"))
        for name, port in ports.items()
    ]
    try:
        result = await api.send(master.address, send_header(POISON, 0), b"poisoned", timeout=15)
        assert result.status is SendStatus.SEND_OK  # stored and replicated; dispatch fails
        placed |= await send_many(api, master, GOOD, 40, start=40)
        answers = await asyncio.gather(*watches)
    finally:
        for watch in watches:
            watch.cancel()
    for body in answers:
        answer = json.loads(body)
        assert answer["status"] == "failing", answer
        assert any("dispatch stuck" in p and POISON in p for p in answer["problems"]), answer

    # Then the queue is quarantined and the rest flows, on both.
    for port in ports.values():
        await eventually(lambda port=port: serving(port), "health 200 again", QUARANTINE_AFTER + 10)
    await wait_caught_up(api, master, slave)
    for broker in (master, slave):
        assert await read_all(api, broker, GOOD) == placed
        log = broker.log_text()
        assert "ERROR" in log and "dispatch stuck at physical offset" in log, broker.name
        assert "Not a directory" in log and f"quarantined queue '{POISON}'-0" in log, broker.name
    for port in ports.values():
        status, body = await http_get(port, "/health")
        assert status == 200 and body.startswith(b"serving\n") and b"quarantined 1 queues" in body
        samples = await scrape_async(port)
        assert value_of(samples, "tidemq_dispatch_quarantined_records_total") == 1
        assert value_of(samples, "tidemq_dispatch_errors_total") == QUARANTINE_AFTER
        assert value_of(samples, "tidemq_dispatch_quarantined_queues") == 1
        assert value_of(samples, "tidemq_dispatch_stuck") == 0
        assert value_of(samples, "tidemq_broker_serving") == 1
    async with AdminClient(namesrv.address) as admin:
        for broker in (master, slave):
            info = await admin.runtime_info(broker.address)
            assert info["dispatchState"] == "ok" and info["brokerHealth"] == "serving", info
            assert info["dispatchQuarantinedRecords"] == "1", info
            assert f"'{POISON}'-0 from physical offset" in info["dispatchQuarantine"], info
            assert info["dispatchBehindBytes"] == "0", info
        # The dashboard's cluster page (what it reads through the admin API): the marker.
        rows = (await cluster_view(admin))["brokers"]
        assert [r["health"] for r in rows] == ["serving", "serving"], rows
        assert all("quarantined 1 queues" in r["healthNotes"] for r in rows), rows

    # Both restart and serve: the master after a kill (its recovery re-dispatches).
    master.kill()
    slave.stop()
    master, _ = start_master(
        processes,
        namesrv,
        stores["master"],
        f"metricsPort={ports['master']}",
        port=master.port,
        ha_port=ha_port,
        name="master-2",
    )
    slave = start_slave(
        processes,
        namesrv,
        stores["slave"],
        f"metricsPort={ports['slave']}",
        port=slave.port,
        name="slave-2",
    )
    await wait_transfer(api, master)
    for port in ports.values():
        await eventually(lambda port=port: serving(port), "health 200 after the restart", 15)
    # The quarantine survived (dispatchQuarantine.json): the next poisoned message gets the
    # next queue offset, not 0 again, and is skipped at once.
    result = await api.send(master.address, send_header(POISON, 0), b"poisoned", timeout=15)
    assert result.status is SendStatus.SEND_OK and result.queue_offset == 1
    more = await send_many(api, master, GOOD, 40, start=80)
    await wait_caught_up(api, master, slave)
    for broker in (master, slave):
        assert await read_all(api, broker, GOOD) == placed | more
    async with AdminClient(namesrv.address) as admin:
        for broker in (master, slave):
            info = await admin.runtime_info(broker.address)
            assert info["dispatchQuarantinedRecords"] == "2", info
            assert info["dispatchErrorsTotal"] == "0", info


async def first_value(predicate: Callable[[], Awaitable[bytes | None]], what: str) -> bytes:
    """The first value of `predicate` that is not None, polled every 20 ms."""
    found: list[bytes] = []

    async def check() -> bool:
        value = await predicate()
        if value is not None:
            found.append(value)
        return bool(value)

    await eventually(check, what, QUARANTINE_AFTER + 15, interval=0.02)
    return found[0]
