"""GET /health on the metrics port, and what it reads (broker/health.py; issue 30 item 3).

On c82965c these fail: there is no health check, and the metrics port answers /health 404.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from tests.support.conditions import eventually
from tests.support.stores import StoreFactory
from tidemq.broker.health import Health, check_health
from tidemq.broker.metrics import MetricsServer
from tidemq.client.admin.api import BrokerAddress
from tidemq.client.dashboard.views import _broker_row
from tidemq.store.config import BrokerRole
from tidemq.store.dispatch_faults import QUARANTINE_AFTER, DispatchFailure
from tidemq.store.index_worker import EXIT_LOOP
from tidemq.store.message_store import MessageStore

STORES = StoreFactory()


class NoSlave:
    def slave_problem(self, master_put_where: int) -> str | None:
        del master_put_where
        return "no slave is connected to the HA port"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    opened = STORES.open(tmp_path)
    try:
        yield opened
    finally:
        await opened.stop()


def fail(store: MessageStore, exc: Exception, times: int = 1) -> None:
    for attempt in range(times):
        failure = DispatchFailure("T", 0, 4096)
        failure.__cause__ = exc
        store.reput.faults.failed(failure, float(attempt))


def test_a_healthy_store_is_serving(store: MessageStore) -> None:
    health = check_health(store)
    assert health.serving and health.summary() == "serving"
    assert health.http() == (b"200 OK", b"text/plain; charset=utf-8", b"serving\n")


def test_stuck_dispatch_is_a_problem_and_a_quarantine_a_note(store: MessageStore) -> None:
    fail(store, FileExistsError(errno.EEXIST, "File exists"))
    health = check_health(store)
    status, kind, body = health.http()
    assert status == b"503 Service Unavailable" and kind == b"application/json"
    answer = json.loads(body)
    assert answer["status"] == "failing"
    assert "dispatch stuck at physical offset 4096" in answer["problems"][0]
    assert "FileExistsError" in health.summary()
    fail(store, FileExistsError(errno.EEXIST, "File exists"), QUARANTINE_AFTER - 1)
    health = check_health(store, undeliverable=2)
    assert health.serving
    status, _kind, body = health.http()
    assert status == b"200 OK" and body.startswith(b"serving\n")
    assert b"quarantined 1 queues" in body and b"2 delayed messages skipped" in body


def test_the_disk_and_a_sync_master_without_slave_are_problems(store: MessageStore) -> None:
    store.disk.full, store.disk.used_ratio = True, 0.95
    assert any("disk refused" in p for p in check_health(store).problems)
    store.disk.full = False
    store.commitlog.disk_refused_at = 100.0
    assert any("write was refused 30 s ago" in p for p in check_health(store, now=130.0).problems)
    assert check_health(store, now=200.0).serving
    fail(store, OSError(errno.ENOSPC, "No space left on device"), 3 * QUARANTINE_AFTER)
    problems = check_health(store, now=200.0).problems
    assert any("disk refused: dispatch" in p for p in problems), problems
    store.reput.faults.succeeded()
    store.role = BrokerRole.SYNC_MASTER
    problems = check_health(store, sync_master=NoSlave(), now=200.0).problems
    assert problems == ["SYNC_MASTER without a slave in sync: no slave is connected to the HA port"]


async def get(port: int, path: str) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


async def test_the_metrics_port_answers_health() -> None:
    current = Health()
    server = MetricsServer(CollectorRegistry(), "127.0.0.1", 0, health=lambda: current.http())
    await server.start()
    try:
        assert await get(server.port, "/health") == (b"HTTP/1.0 200 OK", b"serving\n")
        current = Health(problems=["dispatch stuck"])
        status, body = await get(server.port, "/health?verbose")
        assert status == b"HTTP/1.0 503 Service Unavailable"
        assert json.loads(body)["problems"] == ["dispatch stuck"]
        assert (await get(server.port, "/nothing"))[0] == b"HTTP/1.0 404 Not Found"
    finally:
        await server.stop()
    plain = MetricsServer(CollectorRegistry(), "127.0.0.1", 0)  # a name server's
    await plain.start()
    try:
        assert await get(plain.port, "/health") == (b"HTTP/1.0 200 OK", b"serving\n")
    finally:
        await plain.stop()


def test_the_dashboard_cluster_row_carries_the_brokers_verdict(store: MessageStore) -> None:
    # What the dashboard's cluster page marks (client/dashboard/static/app.js `health`): the
    # runtime info of a broker whose dispatch is stuck, as its OpsProcessor reports it.
    fail(store, FileExistsError(errno.EEXIST, "File exists"))
    info = {"brokerRole": "SYNC_MASTER", "dispatchBehindBytes": "120"}
    info["brokerHealth"] = check_health(store).summary()
    row = _broker_row(BrokerAddress("c", "broker-a", 0, "127.0.0.1:1"), info, None)
    assert row["health"].startswith("failing: dispatch stuck at physical offset 4096")
    assert row["dispatchBehindBytes"] == 120
    # A broker from before (no such key): no marker rather than a wrong one.
    assert _broker_row(BrokerAddress("c", "b", 0, "a"), {}, None)["health"] == ""


async def test_an_index_worker_dying_in_a_loop_is_a_note_logged_at_a_bounded_rate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A child that dies on a record dies again on it at every restart (one a second): killed
    # here as such a record would kill it, before it indexed anything.
    opened = STORES.open(tmp_path / "worker", message_index_worker_enable=True)
    await opened.start()
    try:
        worker = opened.index_worker
        assert worker is not None
        with caplog.at_level(logging.ERROR):
            for _ in range(EXIT_LOOP):
                process = worker._process
                assert process is not None
                os.kill(process.pid, signal.SIGKILL)
                await eventually(
                    lambda process=process: worker.running and worker._process is not process,
                    "the next index worker",
                    10,
                )
        assert worker.exits_in_a_row == EXIT_LOOP
        notes = check_health(opened).notes
        assert any(f"exited {EXIT_LOOP} times in a row at offset 0" in n for n in notes), notes
        assert check_health(opened).serving
        exits = [r for r in caplog.records if "index worker pid" in r.getMessage()]
        assert len(exits) == 1, [r.getMessage() for r in exits]  # one per 30 s, not per exit
    finally:
        await opened.stop()
