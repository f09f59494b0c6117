"""A burst with the consumer stopped (issue 20 item 4): drivers and a broker memory sampler.

`burst(...)` sends `messages` 1 KiB messages as SEND_BATCH_MESSAGE of 32, `in_flight` batches at
a time over the queues of a topic, as fast as the broker answers (a SYSTEM_BUSY answer is waited
out and the batch sent again, as our producer's retry would). `hold_pulls(...)` parks long-polling
pulls on empty queues; `idle_connections(...)` opens connections that send nothing. `drain(...)`
pulls every queue from 0 to its end and counts the records. `RssSampler` reads a process's
resident memory (VmRSS, and RssAnon: the heap, without the mapped store files' page cache)
every 50 ms while it runs and keeps the peaks.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from dataclasses import dataclass, field

from tests.support.processes import LOOPBACK
from tests.support.wire import pull_header
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.errors import SystemBusyError
from tidemq.client.protocol.headers import SendMessageRequestHeader, encode
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.store.batch_body import encode_batch_body

BODY = os.urandom(1024)
BATCH = 32
_TOTAL = struct.Struct(">i")


def _send_header(topic: str, queue_id: int, queues: int) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="BurstPG",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        default_topic_queue_nums=queues,
        batch=True,
    )


@dataclass
class BurstResult:
    sent: int = 0
    busy: int = 0  # SYSTEM_BUSY answers, waited out and sent again
    seconds: float = 0.0


async def burst(
    api: BrokerAPI, address: str, topic: str, messages: int, *, queues: int = 8, in_flight: int = 8
) -> BurstResult:
    body = encode_batch_body([(0, BODY, "") for _ in range(BATCH)])
    batches = messages // BATCH
    result = BurstResult()
    next_batch = 0

    async def producer() -> None:
        nonlocal next_batch
        while next_batch < batches:
            queue_id = next_batch % queues
            next_batch += 1
            while True:
                try:
                    sent = await api.send(
                        address, _send_header(topic, queue_id, queues), body, batch=True, timeout=60
                    )
                except SystemBusyError as exc:
                    assert exc.retriable
                    result.busy += 1
                    await asyncio.sleep(0.01)
                    continue
                assert sent.status is SendStatus.SEND_OK
                result.sent += BATCH
                break

    started = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(in_flight)))
    result.seconds = time.perf_counter() - started
    return result


async def drain(api: BrokerAPI, address: str, topic: str, queues: int) -> int:
    """Pull every queue of `topic` from 0 to its max offset; the records received."""
    received = 0

    async def consumer(queue_id: int) -> None:
        nonlocal received
        end = await api.get_max_offset(address, topic, queue_id)
        offset = 0
        while offset < end:
            request = api.request(
                RequestCode.PULL_MESSAGE, encode(pull_header(topic, queue_id, offset))
            )
            response = await api.invoke(address, request, 60)
            assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
            body = bytes(response.body)
            pos = 0
            while pos < len(body):
                pos += _TOTAL.unpack_from(body, pos)[0]
                received += 1
            offset = int(response.ext_fields["nextBeginOffset"])

    await asyncio.gather(*(consumer(q) for q in range(queues)))
    return received


async def hold_pulls(
    api: BrokerAPI, address: str, topic: str, count: int, *, queues: int, suspend_ms: int
) -> list[asyncio.Task[int]]:
    """`count` long-polling pulls at the end of `topic`'s queues; each task gives its code."""

    async def pull(queue_id: int) -> int:
        end = await api.get_max_offset(address, topic, queue_id)
        request = api.request(
            RequestCode.PULL_MESSAGE,
            encode(pull_header(topic, queue_id, end, suspend_ms=suspend_ms)),
        )
        response = await api.invoke(address, request, suspend_ms / 1000 + 30)
        return response.code

    return [asyncio.create_task(pull(i % queues)) for i in range(count)]


def idle_connections(address: str, count: int) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    assert host == LOOPBACK
    return [socket.create_connection((host, int(port))) for _ in range(count)]


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) of `pid` in MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["RssAnon"]


@dataclass
class RssSampler:
    pid: int
    peak_rss: float = 0.0
    peak_anon: float = 0.0
    samples: list[tuple[float, float]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.05)

    def sample(self) -> tuple[float, float]:
        rss, anon = memory_mib(self.pid)
        self.samples.append((rss, anon))
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_anon = max(self.peak_anon, anon)
        return rss, anon

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.sample()
