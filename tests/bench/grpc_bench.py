"""gRPC benchmark: RocketMQ 5's MessagingService beside the remoting protocol, against the same
namesrvd and brokerd processes in the same run.

Four phases per round, each on a topic of its own (8 queues, 1 KiB messages), from this process:

- remoting sends: tidemq's `AsyncProducer.send`, 64 in flight;
- gRPC sends: SendMessage (one message each, NORMAL), 64 in flight, over one grpc.aio channel,
  the request built as the 5.x clients build it (message id, type, body);
- remoting pulls: PULL_MESSAGE of 32 from every queue over the remoting topic's backlog
  (broker_bench's raw pull loop);
- gRPC receives: ReceiveMessage of 32 (POP, every queue: queue -1) by 8 receivers of one new
  group, each batch acknowledged with one AckMessage (what a SimpleConsumer does), over the gRPC
  topic's backlog.

Headline: the medians over the rounds of gRPC send / remoting send and gRPC receive+ack /
remoting pull (ratios measured in the same round, so the machine's load at that moment cancels
out), and of the broker's CPU per message in each phase (user + system of brokerd from /proc:
what the broker would sustain alone on a core). No target: issue 33 asks for the figures. The
client is Python in this process: grpc.aio's own call cost is part of every gRPC figure, as the
remoting client's is of the remoting ones.

Timer delivery lateness at 1,000 timers per second is the `timer` section (p50 / p99).

Knobs: TIDEMQ_BENCH_GRPC_MESSAGES (per phase, default 10,000), TIDEMQ_BENCH_GRPC_ROUNDS
(default 3).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass
from statistics import median
from typing import Any

from grpc import aio

from tests.bench import Result, env_int, one_broker, run_on_uvloop
from tests.bench.broker_bench import _pulls
from tests.bench.client_bench import QUEUES, _config, _create_topics, _single_sends
from tests.bench.cpu import BrokerCpu
from tests.support.processes import free_port
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Code,
    FilterExpression,
    FilterType,
    MessageQueue,
    MessageType,
    Resource,
)
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Message as GrpcMessage,
)
from tidemq.client.api import BrokerAPI
from tidemq.client.producer import AsyncProducer

SERVICE = "/apache.rocketmq.v2.MessagingService/"
BODY = os.urandom(1024)
IN_FLIGHT = 64
RECEIVERS = 8
BATCH = 32
METADATA = (("x-mq-client-id", "bench-grpc"), ("x-mq-language", "PYTHON"))
_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class _Round:
    remoting_send: float
    grpc_send: float
    remoting_pull: float
    grpc_receive: float
    cpu: dict[str, float]  # broker CPU us per message, by phase


class _Grpc:
    """The three RPCs a 5.x client calls most, on one channel."""

    def __init__(self, channel: aio.Channel) -> None:
        self.send = channel.unary_unary(
            SERVICE + "SendMessage",
            request_serializer=pb.SendMessageRequest.SerializeToString,
            response_deserializer=pb.SendMessageResponse.FromString,
        )
        self.receive = channel.unary_stream(
            SERVICE + "ReceiveMessage",
            request_serializer=pb.ReceiveMessageRequest.SerializeToString,
            response_deserializer=pb.ReceiveMessageResponse.FromString,
        )
        self.ack = channel.unary_unary(
            SERVICE + "AckMessage",
            request_serializer=pb.AckMessageRequest.SerializeToString,
            response_deserializer=pb.AckMessageResponse.FromString,
        )


async def _grpc_sends(rpc: _Grpc, topic: str, messages: int) -> float:
    remaining = messages

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            message = GrpcMessage(topic=Resource(name=topic), body=BODY)
            message.system_properties.message_id = f"bench-{os.getpid()}-{next(_ids)}"
            message.system_properties.message_type = MessageType.NORMAL
            answer = await rpc.send(
                pb.SendMessageRequest(messages=[message]), metadata=METADATA, timeout=30
            )
            assert answer.status.code == Code.OK, answer.status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return messages / (time.perf_counter() - started)


async def _grpc_receives(rpc: _Grpc, topic: str, group: str, messages: int) -> float:
    received = 0

    async def worker() -> None:
        nonlocal received
        request = pb.ReceiveMessageRequest(
            group=Resource(name=group),
            message_queue=MessageQueue(topic=Resource(name=topic), id=-1),
            filter_expression=FilterExpression(type=FilterType.TAG, expression="*"),
            batch_size=BATCH,
        )
        request.invisible_duration.seconds = 60
        request.long_polling_timeout.seconds = 1
        while received < messages:
            entries = [
                pb.AckMessageEntry(
                    message_id=answer.message.system_properties.message_id,
                    receipt_handle=answer.message.system_properties.receipt_handle,
                )
                async for answer in rpc.receive(request, metadata=METADATA, timeout=30)
                if answer.WhichOneof("content") == "message"
            ]
            if not entries:
                continue
            received += len(entries)
            acked = await rpc.ack(
                pb.AckMessageRequest(
                    group=Resource(name=group), topic=Resource(name=topic), entries=entries
                ),
                metadata=METADATA,
                timeout=30,
            )
            assert acked.status.code == Code.OK, acked.status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(RECEIVERS)))
    return received / (time.perf_counter() - started)


async def _measured(pid: int, messages: int, phase: Any) -> tuple[float, float]:
    """(rate, broker CPU us per message) of one phase."""
    before = BrokerCpu.now(pid)
    rate: float = await phase
    cpu = BrokerCpu.now(pid).per_message(before, messages)
    return rate, cpu["broker_user"] + cpu["broker_system"]


async def _round(
    namesrv: str, broker: str, pid: int, endpoint: str, messages: int, n: int
) -> _Round:
    plain, viagrpc = f"BenchRemoting{n}", f"BenchGrpc{n}"
    await _create_topics(namesrv, broker, plain, viagrpc)
    producer = AsyncProducer("BenchGrpcPG", config=_config(namesrv))
    await producer.start()
    api = BrokerAPI()
    try:
        async with aio.insecure_channel(endpoint) as channel:
            rpc = _Grpc(channel)
            r_send, r_send_cpu = await _measured(
                pid, messages, _single_sends(producer, plain, messages, IN_FLIGHT)
            )
            g_send, g_send_cpu = await _measured(pid, messages, _grpc_sends(rpc, viagrpc, messages))
            per_queue = min([await api.get_max_offset(broker, plain, q) for q in range(QUEUES)])
            r_pull, r_pull_cpu = await _measured(
                pid, per_queue * QUEUES, _pulls(api, broker, per_queue, plain)
            )
            g_recv, g_recv_cpu = await _measured(
                pid, messages, _grpc_receives(rpc, viagrpc, f"BenchGrpcCG{n}", messages)
            )
    finally:
        await api.close()
        await producer.shutdown()
    print(
        f"round {n + 1}: sends remoting {r_send:,.0f} msg/s ({r_send_cpu:.0f} us broker CPU), "
        f"gRPC {g_send:,.0f} ({g_send_cpu:.0f} us): {g_send / r_send:.2f}; "
        f"remoting pulls {r_pull:,.0f} ({r_pull_cpu:.0f} us), gRPC receive+ack {g_recv:,.0f} "
        f"({g_recv_cpu:.0f} us): {g_recv / r_pull:.2f}",
        flush=True,
    )
    cpu = {
        "remoting send": r_send_cpu,
        "gRPC send": g_send_cpu,
        "remoting pull": r_pull_cpu,
        "gRPC receive+ack": g_recv_cpu,
    }
    return _Round(r_send, g_send, r_pull, g_recv, cpu)


async def _run(namesrv: str, broker: str, pid: int, endpoint: str) -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_GRPC_MESSAGES", 10_000)
    rounds = [
        await _round(namesrv, broker, pid, endpoint, messages, n)
        for n in range(env_int("TIDEMQ_BENCH_GRPC_ROUNDS", 3))
    ]
    note = f"median of {len(rounds)} rounds, same broker, same round"
    results = [
        Result(
            "gRPC SendMessage / remoting send (1 KiB, 64 in flight)",
            median(r.grpc_send / r.remoting_send for r in rounds),
            "ratio",
            note=note,
        ),
        Result(
            "gRPC ReceiveMessage+Ack / remoting pull (batches of 32)",
            median(r.grpc_receive / r.remoting_pull for r in rounds),
            "ratio",
            note=note,
        ),
        Result("remoting send", median(r.remoting_send for r in rounds), "msg/s"),
        Result("gRPC SendMessage", median(r.grpc_send for r in rounds), "msg/s"),
        Result("remoting pull", median(r.remoting_pull for r in rounds), "msg/s"),
        Result("gRPC ReceiveMessage+Ack", median(r.grpc_receive for r in rounds), "msg/s"),
    ]
    for phase in rounds[0].cpu:
        value = median(r.cpu[phase] for r in rounds)
        results.append(Result(f"broker CPU per message, {phase}", value, "us"))
    return results


def run() -> list[Result]:
    port = free_port()
    with one_broker("grpc", f"grpcServerPort={port}") as (namesrv, broker):
        assert broker.pid is not None
        return run_on_uvloop(_run(namesrv.address, broker.address, broker.pid, f"127.0.0.1:{port}"))
