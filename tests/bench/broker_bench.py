"""Broker benchmark: namesrvd and brokerd as separate processes, load from this process.

- batched sends: 1 KiB messages, SEND_BATCH_MESSAGE of 32, 8 batches in flight;
- single sends: 1 KiB messages, SEND_MESSAGE_V2, 64 in flight;
- pulls: 32 messages per PULL_MESSAGE from 8 queues, 8 pulls in flight. Records are counted by
  walking their size fields (the broker's work is the same; a Python consumer that decodes every
  field spends more on its own side).

Targets (issue 3): batched sends >= 100,000 msg/s, pulls >= 150,000 msg/s. The client side is one
Python process on uvloop; on a 2-core machine it shares the CPU with the broker.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
import uuid

from client.api import BrokerAPI, SendStatus
from client.protocol.batch import encode_batch_body
from client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode,
)
from client.remoting.codes import RequestCode, ResponseCode
from store.record import encode_properties
from tests.bench import Result, env_int, temp_dir
from tests.support.processes import ProcessGroup

BODY = os.urandom(1024)
TOPIC = "BenchTopic"
QUEUES = 8
_TOTAL = struct.Struct(">i")


def _props() -> str:
    return encode_properties(
        {"UNIQ_KEY": uuid.uuid4().hex.upper(), "WAIT": "true", "TAGS": "bench"}
    )


def _header(queue_id: int, *, batch: bool = False) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="BenchPG",
        topic=TOPIC,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=None if batch else _props(),
        default_topic_queue_nums=QUEUES,
        batch=batch,
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


async def _pulls(api: BrokerAPI, address: str, per_queue: int) -> float:
    pulled = 0

    async def worker(queue_id: int) -> None:
        nonlocal pulled
        offset = 0
        while offset < per_queue:
            header = PullMessageRequestHeader(
                consumer_group="BenchCG",
                topic=TOPIC,
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


async def _run(address: str, messages: int) -> list[Result]:
    api = BrokerAPI()
    try:
        await _batched_sends(api, address, 3200)  # warm up: topic creation, connections
        batched = await _batched_sends(api, address, messages)
        print(f"batched sends (32 x 1 KiB, 8 in flight): {batched:,.0f} msg/s", flush=True)
        single = await _single_sends(api, address, messages // 4)
        print(f"single sends (1 KiB, 64 in flight):      {single:,.0f} msg/s", flush=True)
        per_queue = min([await api.get_max_offset(address, TOPIC, q) for q in range(QUEUES)])
        pulls = await _pulls(api, address, per_queue)
        print(f"pulls (32 per request, 8 queues):       {pulls:,.0f} msg/s", flush=True)
    finally:
        await api.close()
    return [
        Result("batched sends, 1 KiB x 32", batched, "msg/s", 100_000),
        Result("single sends, 1 KiB, 64 in flight", single, "msg/s"),
        Result("pulls, 32 per request", pulls, "msg/s", 150_000),
    ]


def _event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_BROKER_MESSAGES", 200_000)
    with temp_dir("broker") as folder:
        group = ProcessGroup(folder / "logs")
        try:
            namesrv = group.namesrvd(name="namesrvd")
            broker = group.brokerd(
                namesrv.address,
                folder / "store",
                "mappedFileSizeCommitLog=1073741824",
                "mappedFileSizeConsumeQueue=6000000",
                "maxHashSlotNum=5000000",
                "maxIndexNum=20000000",
                "maxMessageSize=4194304",
                name="brokerd",
            )
            loop = _event_loop()
            try:
                return loop.run_until_complete(_run(broker.address, messages))
            finally:
                loop.close()
        finally:
            group.stop_all()
