"""Filter benchmark: pulls with an SQL92 filter against pulls with a tag filter, against
namesrvd and brokerd (enablePropertyFilter=true) processes.

One topic of 8 queues holds 1 KiB messages with a tag (A or B, alternating) and the properties
`a` (0..9) and `region` (eu, us, ap). Two filters that both pass one message in two are pulled
over the whole backlog, 32 per request, the 8 queues in parallel:

- tag filter `A`: the broker compares ConsumeQueue tags codes, it never reads the records it
  skips;
- SQL92 `a BETWEEN 0 AND 4 AND region IN ('eu','us','ap')`: the broker reads each record's
  properties and evaluates the expression (broker/sql92.py; in C, where the record lies, in the
  compiled scan: store/property_predicate.py).

Rates are in messages scanned per second (every message of the backlog is looked at once in
either case). The tag and SQL92 passes take turns, PASSES rounds (five: one pass is a few tenths
of a second, and a shared machine's stall can halve one); reported are the medians of
the rounds' ratios SQL92 / tag (target, issue 36: >= 0.6) and of the broker's CPU per message
scanned in each (user + system of the broker process: the figure a busy machine moves least).
Knob: TIDEMQ_BENCH_FILTER_MESSAGES (default 80,000).
"""

from __future__ import annotations

import asyncio
import os
import time
from statistics import median

from tests.bench import Result, env_int, one_broker, run_on_uvloop
from tests.bench.client_bench import QUEUES, _config, _create_topics
from tests.bench.cpu import BrokerCpu
from tests.support.wire import pull_header
from tidemq.client.api import BrokerAPI
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.headers import encode
from tidemq.client.remoting.codes import RequestCode, ResponseCode

BODY = os.urandom(1024)
TOPIC = "BenchFilter"
SQL = "a BETWEEN 0 AND 4 AND region IN ('eu','us','ap')"
PASSES = 5


async def _fill(namesrv: str, messages: int) -> None:
    producer = AsyncProducer("BenchFilterPG", config=_config(namesrv))
    await producer.start()
    try:
        batch = []
        for i in range(messages):
            props = {"a": str(i % 10), "region": ("eu", "us", "ap")[i % 3]}
            batch.append(Message(TOPIC, BODY, tags="AB"[i % 2], properties=props))
            if len(batch) == 32:
                await producer.send_batch(batch)
                batch = []
        if batch:
            await producer.send_batch(batch)
    finally:
        await producer.shutdown()


async def _scan(
    api: BrokerAPI, broker: str, expression: str, expression_type: str
) -> tuple[float, int]:
    """(messages scanned per second, messages that passed) over every queue."""
    ends = [await api.get_max_offset(broker, TOPIC, q) for q in range(QUEUES)]
    passed = 0

    async def worker(queue_id: int) -> None:
        nonlocal passed
        offset = 0
        while offset < ends[queue_id]:
            header = pull_header(
                TOPIC,
                queue_id,
                offset,
                group="BenchFilterCG",
                subscription=expression,
                expression_type=expression_type,
            )
            response = await api.invoke(
                broker, api.request(RequestCode.PULL_MESSAGE, encode(header)), 30
            )
            assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), (
                response.code,
                response.remark,
            )
            if response.code == ResponseCode.SUCCESS:
                passed += _count(bytes(response.body))
            offset = int(response.ext_fields["nextBeginOffset"])

    started = time.perf_counter()
    await asyncio.gather(*(worker(q) for q in range(QUEUES)))
    return sum(ends) / (time.perf_counter() - started), passed


def _count(body: bytes) -> int:
    count = pos = 0
    while pos < len(body):
        pos += int.from_bytes(body[pos : pos + 4], "big")
        count += 1
    return count


async def _measured(
    api: BrokerAPI, broker: str, pid: int, expression: str, kind: str
) -> tuple[float, int, float]:
    """`_scan` with the broker's CPU (user + system) per message scanned, in us."""
    before = BrokerCpu.now(pid)
    rate, passed = await _scan(api, broker, expression, kind)
    ends = sum([await api.get_max_offset(broker, TOPIC, q) for q in range(QUEUES)])
    cpu = BrokerCpu.now(pid).per_message(before, ends)
    return rate, passed, cpu["broker_user"] + cpu["broker_system"]


async def _run(namesrv: str, broker: str, pid: int, messages: int) -> list[Result]:
    await _create_topics(namesrv, broker, TOPIC)
    await _fill(namesrv, messages)
    api = BrokerAPI()
    ratios, cpu_ratios, tag_rates, sql_rates, tag_cpus, sql_cpus = [], [], [], [], [], []
    try:
        await _scan(api, broker, "*", "TAG")  # warm up: page cache, connections
        # Tag and SQL92 passes take turns: a round's ratio compares passes a second apart.
        for n in range(PASSES):
            tag_rate, tag_passed, tag_cpu = await _measured(api, broker, pid, "A", "TAG")
            sql_rate, sql_passed, sql_cpu = await _measured(api, broker, pid, SQL, "SQL92")
            assert tag_passed == messages // 2 and sql_passed == messages // 2, (
                tag_passed,
                sql_passed,
            )
            print(
                f"round {n + 1}: tag filter 'A' {tag_rate:,.0f} msg/s scanned (broker CPU "
                f"{tag_cpu:.2f} us/msg); SQL92 {sql_rate:,.0f} msg/s ({sql_rate / tag_rate:.2f} "
                f"of the tag filter; broker CPU {sql_cpu:.2f} us/msg); half passed in both",
                flush=True,
            )
            ratios.append(sql_rate / tag_rate)
            cpu_ratios.append(tag_cpu / sql_cpu if sql_cpu else float("nan"))
            tag_rates.append(tag_rate)
            sql_rates.append(sql_rate)
            tag_cpus.append(tag_cpu)
            sql_cpus.append(sql_cpu)
    finally:
        await api.close()
    return [
        Result("pulls with a tag filter, half passing, 1 KiB", median(tag_rates), "msg/s"),
        Result("pulls with an SQL92 filter, half passing, 1 KiB", median(sql_rates), "msg/s"),
        Result("SQL92 / tag filter pulls", median(ratios), "ratio", 0.6),
        Result("tag filter pulls: broker CPU per message scanned", median(tag_cpus), "us"),
        Result("SQL92 filter pulls: broker CPU per message scanned", median(sql_cpus), "us"),
        Result("SQL92 / tag filter, by broker CPU per message", median(cpu_ratios), "ratio"),
    ]


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_FILTER_MESSAGES", 80_000)
    with one_broker("filter", "enablePropertyFilter=true") as (namesrv, broker):
        assert broker.pid is not None
        return run_on_uvloop(_run(namesrv.address, broker.address, broker.pid, messages))
