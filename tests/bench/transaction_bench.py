"""Transaction benchmark: transactional sends against plain sends, against namesrvd and brokerd
processes, with the asyncio client.

- plain sends: 1 KiB messages, `AsyncProducer.send`, 64 in flight;
- transactional sends: the same messages through `AsyncTransactionProducer.
  send_message_in_transaction`, 64 in flight, the local transaction committing at once: a half
  message, END_TRANSACTION, and the broker's commit (the message stored again in its topic, and
  an op message). Rate = committed messages / time; every one is checked to be COMMIT.

The ratio transactional / plain is the figure to watch (no target: a transactional send is two
round trips and three stores where a plain one is one and one). Knob:
TIDEMQ_BENCH_TXN_MESSAGES (default 20,000 of each).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

from tests.bench import Result, env_int, one_broker, run_on_uvloop
from tests.bench.client_bench import _config, _create_topics
from tidemq.client.message import Message, ReceivedMessage, SendStatus
from tidemq.client.producer import AsyncProducer
from tidemq.client.transaction import AsyncTransactionProducer, LocalTransactionState

BODY = os.urandom(1024)
IN_FLIGHT = 64


def _commit(msg: Message, arg: object) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


def _unexpected_check(msg: ReceivedMessage) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


async def _rate(send: Callable[[], Awaitable[None]], messages: int) -> float:
    remaining = messages

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await send()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return messages / (time.perf_counter() - started)


async def _run(namesrv: str, broker: str, messages: int) -> list[Result]:
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

        await _rate(plain_send, 2000)  # warm up: routes, connections
        await _rate(txn_send, 2000)
        plain_rate = await _rate(plain_send, messages)
        print(f"plain sends (1 KiB, {IN_FLIGHT} in flight):         {plain_rate:,.0f} msg/s")
        txn_rate = await _rate(txn_send, messages)
        print(
            f"transactional sends (1 KiB, {IN_FLIGHT} in flight): {txn_rate:,.0f} msg/s "
            f"({txn_rate / plain_rate:.2f} of plain)",
            flush=True,
        )
    finally:
        await txn.shutdown()
        await plain.shutdown()
    return [
        Result("plain sends, 1 KiB, 64 in flight", plain_rate, "msg/s"),
        Result("transactional sends (prepare + commit), 1 KiB, 64 in flight", txn_rate, "msg/s"),
        Result("transactional / plain sends", txn_rate / plain_rate, "ratio"),
    ]


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_TXN_MESSAGES", 20_000)
    with one_broker("transaction") as (namesrv, broker):
        return run_on_uvloop(_run(namesrv.address, broker.address, messages))
