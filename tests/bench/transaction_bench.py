"""Transaction benchmark: transactional sends against plain sends, against namesrvd and brokerd
processes, with the asyncio client.

- plain sends: 1 KiB messages, `AsyncProducer.send`, 64 in flight;
- transactional sends: the same messages through `AsyncTransactionProducer.
  send_message_in_transaction`, 64 in flight, the local transaction committing at once: a half
  message, END_TRANSACTION (oneway, as RocketMQ's producer sends it), and the broker's commit (the
  message stored again in its topic, and an op message). Rate = committed messages / time, the
  time running until the last commit is stored in the topic; every one is checked to be COMMIT.

Plain and transactional sends take turns, ROUNDS rounds of a third of the messages each;
reported are medians: the ratio transactional / plain (target, issue 36: >= 0.4; a
transactional send is two round trips and three stores where a plain one is one and one), and
the broker's and the client's CPU per message of each. Knob: TIDEMQ_BENCH_TXN_MESSAGES (default
20,000 of each).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from statistics import median

from tests.bench import Result, env_int, one_broker, run_on_uvloop
from tests.bench.client_bench import _config, _create_topics
from tests.bench.cpu import BrokerCpu
from tidemq.client.message import Message, ReceivedMessage, SendStatus
from tidemq.client.producer import AsyncProducer
from tidemq.client.transaction import AsyncTransactionProducer, LocalTransactionState

BODY = os.urandom(1024)
IN_FLIGHT = 64
ROUNDS = 3


def _commit(msg: Message, arg: object) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


def _unexpected_check(msg: ReceivedMessage) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


async def _rate(
    send: Callable[[], Awaitable[None]],
    messages: int,
    stored: Callable[[], Awaitable[int]] | None = None,
) -> float:
    """Messages per second; with `stored` (messages in the topic) the time runs until every
    message sent is stored: END_TRANSACTION goes oneway, the last commits follow the sends."""
    remaining = messages
    before = await stored() if stored is not None else 0

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await send()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    if stored is not None:
        deadline = time.monotonic() + 60
        while await stored() - before < messages:
            if time.monotonic() > deadline:
                raise AssertionError(f"{messages} commits not all stored within 60 s")
            await asyncio.sleep(0.005)
    return messages / (time.perf_counter() - started)


async def _run(namesrv: str, broker: str, pid: int, messages: int) -> list[Result]:
    await _create_topics(namesrv, broker, "BenchPlain", "BenchTxn")
    plain = AsyncProducer("BenchPlainPG", config=_config(namesrv))
    txn = AsyncTransactionProducer(
        "BenchTxnPG", config=_config(namesrv), execute=_commit, check=_unexpected_check
    )
    await plain.start()
    await txn.start()
    try:

        async def plain_send() -> None:
            result = await plain.send(Message("BenchPlain", BODY))
            assert result.status is SendStatus.SEND_OK

        async def txn_send() -> None:
            result = await txn.send_message_in_transaction(Message("BenchTxn", BODY))
            assert result.local_transaction_state is LocalTransactionState.COMMIT

        async def committed() -> int:
            info = await txn.instance.publish_info("BenchTxn")
            assert info is not None
            total = 0
            for queue in info.queues:
                address = txn.instance.find_broker_address_in_publish(queue.broker_name)
                assert address is not None
                total += await txn.instance.api.get_max_offset(address, "BenchTxn", queue.queue_id)
            return total

        await _rate(plain_send, 2000)  # warm up: routes, connections
        await _rate(txn_send, 2000, committed)
        rounds = []
        per_round = max(1000, messages // ROUNDS)
        for n in range(ROUNDS):  # plain and transactional take turns
            plain_rate, plain_cpu = await _measured(plain_send, per_round, pid)
            txn_rate, txn_cpu = await _measured(txn_send, per_round, pid, committed)
            print(
                f"round {n + 1}: plain {plain_rate:,.0f} msg/s (broker CPU "
                f"{plain_cpu['broker']:.1f}, client {plain_cpu['client']:.1f} us/msg); "
                f"transactional {txn_rate:,.0f} msg/s ({txn_rate / plain_rate:.2f} of plain; "
                f"broker CPU {txn_cpu['broker']:.1f}, client {txn_cpu['client']:.1f} us/msg)",
                flush=True,
            )
            rounds.append((plain_rate, txn_rate, plain_cpu, txn_cpu))
    finally:
        await txn.shutdown()
        await plain.shutdown()
    plain_rate = median(r[0] for r in rounds)
    txn_rate = median(r[1] for r in rounds)
    return [
        Result("plain sends, 1 KiB, 64 in flight", plain_rate, "msg/s"),
        Result("transactional sends (prepare + commit), 1 KiB, 64 in flight", txn_rate, "msg/s"),
        Result("transactional / plain sends", median(r[1] / r[0] for r in rounds), "ratio", 0.4),
        Result("plain sends: broker CPU per message", median(r[2]["broker"] for r in rounds), "us"),
        Result(
            "transactional sends: broker CPU per message",
            median(r[3]["broker"] for r in rounds),
            "us",
        ),
        Result("plain sends: client CPU per message", median(r[2]["client"] for r in rounds), "us"),
        Result(
            "transactional sends: client CPU per message",
            median(r[3]["client"] for r in rounds),
            "us",
        ),
    ]


async def _measured(
    send: Callable[[], Awaitable[None]],
    messages: int,
    pid: int,
    stored: Callable[[], Awaitable[int]] | None = None,
) -> tuple[float, dict[str, float]]:
    """`_rate` and the CPU per message of the broker (user + system) and of this process."""
    before = BrokerCpu.now(pid)
    rate = await _rate(send, messages, stored)
    cpu = BrokerCpu.now(pid).per_message(before, messages)
    return rate, {"broker": cpu["broker_user"] + cpu["broker_system"], "client": cpu["client"]}


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_TXN_MESSAGES", 20_000)
    with one_broker("transaction") as (namesrv, broker):
        assert broker.pid is not None
        return run_on_uvloop(_run(namesrv.address, broker.address, broker.pid, messages))
