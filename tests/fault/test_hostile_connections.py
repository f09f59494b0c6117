"""Hostile connections against a real brokerd (issue 30 item 4; `make bench`'s burst section has
the 2000-connection version: tests/bench/burst_bench.py).

Hundreds of connections each announce a 15 MiB frame and trickle 1 MiB of it: the broker, with
small limits, closes them (over its budget for partial frames, or past the frame timeout), its
heap (RssAnon) stays within a bound, the close lines are rate-limited, and a producer's sends go
on succeeding all along. On c82965c nothing closed them and the heap took every byte sent.
Past serverMaxConnections, a new connection is closed at once while those open are served; the
name server's port has the same limits.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from pathlib import Path

import pytest

from tests.support.burst import RssSampler
from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tests.support.trickle import raise_fd_limit, trickle
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI, SendStatus

CONNECTIONS = 300
MiB = 1024 * 1024
BUDGET = 16 * MiB
# Growth of the broker's heap allowed while 300 MiB are thrown at it: the budget, the
# connections' own objects, and the allocator's slack.
HEAP_BOUND_MIB = 80


@pytest.fixture
def broker(tmp_path: Path, processes: ProcessGroup, namesrv: Daemon) -> Daemon:
    raise_fd_limit(CONNECTIONS + 512)
    return processes.brokerd(
        namesrv.address,
        tmp_path / "store",
        f"serverPartialFrameBudgetBytes={BUDGET}",
        f"serverMaxPartialFrameBytes={8 * MiB}",
        "serverFrameReceiveTimeoutSeconds=3",
        "serverMaxConnections=1000",
    )


async def keep_sending(api: BrokerAPI, address: str, stop: asyncio.Event) -> int:
    """Single sends one after the other until `stop`; each must succeed. Returns the count."""
    sent = 0
    while not stop.is_set():
        result = await api.send(address, send_header("Legit", 0), b"legit", timeout=5)
        assert result.status is SendStatus.SEND_OK
        sent += 1
    return sent


async def test_trickling_connections_are_closed_and_the_heap_stays_bounded(
    broker: Daemon, api: BrokerAPI
) -> None:
    assert broker.pid is not None
    await api.send(broker.address, send_header("Legit", 0), b"first")  # topic and connection
    sampler = RssSampler(broker.pid)
    _rss, start_anon = sampler.sample()
    log_mark = len(broker.log_text())
    stop = asyncio.Event()
    sender = asyncio.create_task(keep_sending(api, broker.address, stop))
    sampler.start()
    try:
        result = await trickle(
            broker.address, CONNECTIONS, send=MiB, chunk=64 * 1024, interval=0.05, hold=8.0
        )
    finally:
        await sampler.stop()
        stop.set()
        sent = await sender

    print(
        f"heap {start_anon:.0f} -> peak {sampler.peak_anon:.0f} MiB; {sent} sends; "
        f"{result.opened} opened, {result.closed_by_peer} closed by the broker"
    )
    assert result.opened == CONNECTIONS
    assert result.closed_by_peer == CONNECTIONS, result  # every one, none left holding bytes
    assert sampler.peak_anon - start_anon < HEAP_BOUND_MIB, (start_anon, sampler.peak_anon)
    assert sent > 100

    written = broker.log_text()[log_mark:]
    close_lines = written.count("closing connection 127.0.0.1:")
    assert "partial frames over the budget" in written
    assert "frame receive timeout" in written  # those within the budget, once they stalled
    assert re.search(r"\d+ more connections closed in the last", written), written[-3000:]
    # rate-limited: a handful of lines a second, not one per close
    assert close_lines < CONNECTIONS / 3, close_lines


def closed(sock: socket.socket) -> bool:
    """Whether the peer closed `sock` (a non-blocking socket)."""
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def raw_sockets(address: str, count: int) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


async def test_connections_past_the_maximum_are_closed_at_once(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, api: BrokerAPI
) -> None:
    broker = processes.brokerd(
        namesrv.address, tmp_path / "store", "serverMaxConnections=20", name="small-broker"
    )
    await api.send(broker.address, send_header("Legit", 0), b"first")
    # the producer's connection is one of the 20 (the broker connects out to its name server)
    sockets = raw_sockets(broker.address, 30)
    try:
        await eventually(lambda: sum(map(closed, sockets)) >= 11, "11 connections closed")
        assert sum(map(closed, sockets)) == 11
        result = await api.send(broker.address, send_header("Legit", 0), b"still served")
        assert result.status is SendStatus.SEND_OK
        assert "too many connections: serverMaxConnections=20 open" in broker.log_text()
    finally:
        for sock in sockets:
            sock.close()


async def test_the_name_server_port_has_the_same_limits(processes: ProcessGroup) -> None:
    namesrv = processes.namesrvd(
        "serverMaxConnections=5", "serverFrameReceiveTimeoutSeconds=1", name="small-namesrv"
    )
    sockets = raw_sockets(namesrv.address, 8)
    try:
        await eventually(lambda: sum(map(closed, sockets)) >= 3, "3 connections closed")
        served = [sock for sock in sockets if not closed(sock)]
        assert len(served) == 5
        served[0].send(struct.pack(">iI", 1_000_000, 0) + bytes(1000))  # then nothing more
        await eventually(lambda: closed(served[0]), "the stalled frame's connection closed")
        assert not any(map(closed, served[1:]))
        log = namesrv.log_text()
        assert "namesrv: closing connection 127.0.0.1:" in log
        assert "too many connections: serverMaxConnections=5 open" in log
        assert "frame receive timeout: 1008 bytes of a frame in" in log
    finally:
        for sock in sockets:
            sock.close()
