"""Broker benchmark: namesrvd and brokerd as separate processes, load from this process.

- batched sends: 1 KiB messages, SEND_BATCH_MESSAGE of 32, 8 batches in flight;
- single sends: 1 KiB messages, SEND_MESSAGE_V2, 64 in flight;
- pulls: 32 messages per PULL_MESSAGE from 8 queues, 8 pulls in flight. Records are counted by
  walking their size fields (the broker's work is the same; a Python consumer that decodes every
  field spends more on its own side).

Beside them, in the same run, the work floor of a Python broker (tests/bench/baseline.py): a
minimal uvloop + msgpack server that appends each message to a log with RocketMQ's 20-field
header and its CRC, driven by a minimal client, single sends with 64 in flight and batches of 32
with 8 in flight, as above.

Targets (issue 15): single sends >= 0.5 of the baseline's, broker CPU per single send <= 25 us,
client CPU per single send <= 15 us; batched sends >= 0.8 of the baseline's batches and >=
200,000 msg/s; pulls >= 300,000 msg/s. The client side is one Python process on uvloop; on a
2-core machine it shares the CPU with the broker.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from tests.bench import Result, env_int, one_broker, run_on_uvloop, temp_dir
from tests.bench.baseline import load as baseline_load
from tests.bench.cpu import BrokerCpu, describe
from tests.support.processes import ProcessGroup, free_port
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.message import UniqueIdGenerator
from tidemq.client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import encode_properties

BODY = os.urandom(1024)
TOPIC = "BenchTopic"
QUEUES = 8
_TOTAL = struct.Struct(">i")


# A UNIQ_KEY per message, made as our producer makes it (tidemq.client.message).
_IDS = UniqueIdGenerator(b"\x7f\x00\x00\x01")


def _props() -> str:
    return encode_properties({"UNIQ_KEY": _IDS.next_id(), "WAIT": "true", "TAGS": "bench"})


def _header(queue_id: int, *, batch: bool = False) -> SendMessageRequestHeader:
    # as our producer makes it (tidemq.client.producer): positional, in field order
    return SendMessageRequestHeader(
        "BenchPG",
        TOPIC,
        "TBW102",
        QUEUES,
        queue_id,
        0,
        int(time.time() * 1000),
        0,
        None if batch else _props(),
        None,
        False,
        batch,
    )


async def _batched_sends(api: BrokerAPI, address: str, messages: int) -> float:
    batches = messages // 32
    body = encode_batch_body([(0, BODY, _props()) for _ in range(32)])
    next_batch = 0

    async def worker() -> None:
        nonlocal next_batch
        while next_batch < batches:
            queue_id = next_batch % QUEUES
            next_batch += 1
            result = await api.send(
                address, _header(queue_id, batch=True), body, batch=True, timeout=30
            )
            assert result.status is SendStatus.SEND_OK

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(8)))
    return batches * 32 / (time.perf_counter() - started)


async def _single_sends(api: BrokerAPI, address: str, messages: int) -> float:
    remaining = messages

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            result = await api.send(address, _header(remaining % QUEUES), BODY, timeout=30)
            assert result.status is SendStatus.SEND_OK

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(64)))
    return messages / (time.perf_counter() - started)


def _count_records(body: bytes) -> int:
    count = pos = 0
    while pos < len(body):
        pos += _TOTAL.unpack_from(body, pos)[0]
        count += 1
    return count


async def _pulls(api: BrokerAPI, address: str, per_queue: int, topic: str = TOPIC) -> float:
    pulled = 0

    async def worker(queue_id: int) -> None:
        nonlocal pulled
        offset = 0
        while offset < per_queue:
            header = PullMessageRequestHeader(
                consumer_group="BenchCG",
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_millis=0,
                sub_version=0,
                subscription="*",
            )
            response = await api.invoke(
                address, api.request(RequestCode.PULL_MESSAGE, encode(header)), 30
            )
            assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
            count = _count_records(bytes(response.body))
            pulled += count
            offset = int(response.ext_fields["nextBeginOffset"])

    started = time.perf_counter()
    await asyncio.gather(*(worker(q) for q in range(QUEUES)))
    return pulled / (time.perf_counter() - started)


async def _measured(
    label: str, broker_pid: int, messages: int, phase: Coroutine[Any, Any, float]
) -> tuple[float, float, float]:
    """Run a phase; print its rate and the CPU time per message of each process.

    The broker's CPU figure is what it would sustain alone on a core (1e6 / us per message): on
    a 2-core machine shared with the load generator, the wall-clock rate also measures the
    client. Its system part is the kernel's: socket copies and the page cache (on a VM, a page
    touched for the first time can cost 10 us or more, which moves between runs); its user part
    is tidemq's own Python. "workers" is the broker's child processes (the index worker).
    """
    before = BrokerCpu.now(broker_pid)
    rate = await phase
    cpu = BrokerCpu.now(broker_pid).per_message(before, messages)
    broker = cpu["broker_user"] + cpu["broker_system"]
    print(f"{label:<42} {rate:>10,.0f} msg/s   {describe(cpu)}", flush=True)
    return rate, broker, cpu["client"]


@dataclass(frozen=True)
class _Baseline:
    single: float
    single_cpu: float
    batched: float
    batched_cpu: float


async def _baseline(port: int, pid: int, messages: int) -> _Baseline:
    await baseline_load(port, 3200, 8, 32, BODY)  # warm up
    batched, batched_cpu, _client = await _measured(
        "baseline server, batches (32 x 1 KiB):",
        pid,
        messages // 32 * 32,
        baseline_load(port, messages, 8, 32, BODY),
    )
    single, single_cpu, _client = await _measured(
        "baseline server, single sends (64 in flight):",
        pid,
        messages // 4,
        baseline_load(port, messages // 4, 64, 1, BODY),
    )
    return _Baseline(single, single_cpu, batched, batched_cpu)


def _run_baseline(messages: int) -> _Baseline:
    with temp_dir("baseline") as folder:
        group = ProcessGroup(folder / "logs")
        try:
            port = free_port()
            server = group.start(
                [sys.executable, "-m", "tests.bench.baseline", str(port), str(folder / "log")],
                port=port,
                name="baseline",
                ready_text="ready",
            )
            assert server.pid is not None
            return run_on_uvloop(_baseline(port, server.pid, messages))
        finally:
            group.stop_all()


async def _run(address: str, broker_pid: int, messages: int, base: _Baseline) -> list[Result]:
    api = BrokerAPI()
    try:
        await _batched_sends(api, address, 3200)  # warm up: topic creation, connections
        batched, batched_cpu, _client = await _measured(
            "batched sends (32 x 1 KiB, 8 in flight):",
            broker_pid,
            messages // 32 * 32,
            _batched_sends(api, address, messages),
        )
        single, single_cpu, single_client = await _measured(
            "single sends (1 KiB, 64 in flight):",
            broker_pid,
            messages // 4,
            _single_sends(api, address, messages // 4),
        )
        per_queue = min([await api.get_max_offset(address, TOPIC, q) for q in range(QUEUES)])
        pulls, pulls_cpu, _client = await _measured(
            "pulls (32 per request, 8 queues):",
            broker_pid,
            per_queue * QUEUES,
            _pulls(api, address, per_queue),
        )
    finally:
        await api.close()
    return [
        Result("batched sends, 1 KiB x 32", batched, "msg/s", 200_000),
        Result(
            "batched sends / baseline server's batches",
            batched / base.batched,
            "x",
            0.8,
            note=f"baseline {base.batched:,.0f} msg/s, server CPU {base.batched_cpu:.1f} us/msg",
        ),
        Result("batched sends: broker CPU per message", batched_cpu, "us"),
        Result("single sends, 1 KiB, 64 in flight", single, "msg/s"),
        Result(
            "single sends / baseline server's single sends",
            single / base.single,
            "x",
            0.5,
            note=f"baseline {base.single:,.0f} msg/s, server CPU {base.single_cpu:.1f} us/msg",
        ),
        Result(
            "single sends: broker CPU per message", single_cpu, "us", 25, higher_is_better=False
        ),
        Result(
            "single sends: client CPU per message", single_client, "us", 15, higher_is_better=False
        ),
        Result("pulls, 32 per request", pulls, "msg/s", 300_000),
        Result("pulls: broker CPU per message", pulls_cpu, "us"),
    ]


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_BROKER_MESSAGES", 200_000)
    base = _run_baseline(messages)
    with one_broker("broker") as (_namesrv, broker):
        assert broker.pid is not None
        return run_on_uvloop(_run(broker.address, broker.pid, messages, base))
