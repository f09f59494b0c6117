"""The client process of the network tests: `python -m tests.support.netns_agent`, run inside
the client's namespace, doing what the test asks through its stdin and stdout.

The test (in the machine's own namespace, which cannot reach the hosts' addresses) writes one
JSON request a line, `{"id": n, "op": name, "args": {...}}`; the agent runs each as a task (so
a long send does not hold up a status query) and answers `{"id": n, "result": ...}` or
`{"id": n, "error": "Type: text"}`, one line each, in the order they finish. The ops (`OPS`):

- `send` address topic start count [queues size concurrency timeout]: numbered messages
  (`ha_processes.body_of`) straight to a broker; per message `[number, status, queue id, queue
  offset, physical offset, seconds]`, the status a SendStatus name or "error: ..." (then -1s);
- `produce` group topic start count [timeout]: the same through a producer (route from the name
  server, retries, latency fault avoidance on), one at a time; per message `[number, status,
  broker name, queue id, queue offset]`;
- `ha_status` address, `route` namesrv topic (`{broker name: {id: address}}`, or null),
  `committed` address group topic queue_id (a group's committed offset there, -1 if none),
  `create_topic` address topic queues, `read_all` address topic queues (`[queue, offset,
  number]` of every message, checking each queue runs from 0 without a hole);
- `consumer_start` group topic brokers queues, `consumer_poll` [count timeout],
  `consumer_stop`: one pull consumer assigned the queues of those brokers, from offset 0;
  a poll returns `[broker name, queue id, queue offset, number]` per message;
- `load_start` path namesrv topic broker_name queues [senders interval], `load_stats`,
  `load_stop`: the recorded workload of `recorded_load.py` (its history in the file `path`),
  and `final_read` address topic broker_name queues: everything a broker serves, a final read
  in that history;
- `controller` address: the broker's controller status (GET_BROKER_HA_STATUS's "controller").

Every client polls the name server each second (not 30), so route changes show quickly.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import body_of, id_of, read_all
from tests.support.history import record_read
from tests.support.recorded_load import RecordedLoad
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere, MessageQueue
from tidemq.client.protocol.models import TopicConfig
from tidemq.store.record import decode_message_id

POLL_NAME_SERVER = 1.0


@dataclass
class _Host:
    """What `read_all` needs of a broker."""

    address: str
    name: str


def _error(exc: BaseException) -> str:
    return f"error: {type(exc).__name__}: {exc}"


@dataclass
class Agent:
    api: BrokerAPI = field(default_factory=lambda: BrokerAPI(timeout=5))
    producers: dict[str, AsyncProducer] = field(default_factory=dict)
    consumer: AsyncPullConsumer | None = None
    load: RecordedLoad | None = None

    async def send(
        self,
        address: str,
        topic: str,
        start: int,
        count: int,
        queues: int = 4,
        size: int = 200,
        concurrency: int = 4,
        timeout: float = 15,
    ) -> list[list[Any]]:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> list[Any]:
            async with sem:
                began = time.monotonic()
                try:
                    result = await self.api.send(
                        address, send_header(topic, i % queues), body_of(i, size), timeout=timeout
                    )
                except Exception as exc:  # every failure is an outcome to report
                    return [i, _error(exc), -1, -1, -1, time.monotonic() - began]
                physical = decode_message_id(result.msg_id)[1]
                return [
                    i,
                    result.status.name,
                    result.queue_id,
                    result.queue_offset,
                    physical,
                    time.monotonic() - began,
                ]

        return list(await asyncio.gather(*(one(i) for i in range(start, start + count))))

    async def produce(
        self, namesrv: str, group: str, topic: str, start: int, count: int, timeout: float = 3
    ) -> list[list[Any]]:
        producer = self.producers.get(group)
        if producer is None:
            config = ClientConfig.create(namesrv, poll_name_server_interval=POLL_NAME_SERVER)
            producer = AsyncProducer(group, config=config, latency_fault_enabled=True)
            await producer.start()
            self.producers[group] = producer
        out: list[list[Any]] = []
        for i in range(start, start + count):
            try:
                result = await producer.send(Message(topic, body_of(i, 200)), timeout=timeout)
            except Exception as exc:  # every failure is an outcome to report
                out.append([i, _error(exc), "", -1, -1])
                continue
            mq = result.message_queue
            out.append([i, result.status.name, mq.broker_name, mq.queue_id, result.queue_offset])
        return out

    async def ha_status(self, address: str) -> dict[str, object]:
        return await ha_status(self.api, address)

    async def route(self, namesrv: str, topic: str) -> dict[str, dict[int, str]] | None:
        data = await self.api.get_route(namesrv, topic)
        if data is None:
            return None
        return {b.broker_name: dict(b.broker_addrs) for b in data.broker_datas}

    async def committed(self, address: str, group: str, topic: str, queue_id: int) -> int:
        return await self.api.query_consumer_offset(address, group, topic, queue_id)

    async def create_topic(self, address: str, topic: str, queues: int) -> None:
        await self.api.create_topic(address, TopicConfig(topic, queues, queues))

    async def read_all(self, address: str, topic: str, queues: int = 4) -> list[list[int]]:
        found = await read_all(self.api, _Host(address, address), topic, queues)  # type: ignore[arg-type]
        return [[q, off, n] for (q, off), n in sorted(found.items())]

    async def consumer_start(
        self, namesrv: str, group: str, topic: str, brokers: list[str], queues: int
    ) -> None:
        config = ClientConfig.create(namesrv, poll_name_server_interval=POLL_NAME_SERVER)
        consumer = AsyncPullConsumer(
            group,
            config=config,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            auto_commit_interval=1.0,
        )
        await consumer.start()
        await consumer.assign(
            [MessageQueue(topic, broker, q) for broker in brokers for q in range(queues)]
        )
        self.consumer = consumer

    async def consumer_poll(self, count: int = 1000, timeout: float = 1.0) -> list[list[Any]]:
        assert self.consumer is not None, "consumer_start first"
        got = await self.consumer.poll(timeout=timeout, max_records=count)
        return [[m.broker_name, m.queue_id, m.queue_offset, id_of(m.body)] for m in got]

    async def consumer_stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.shutdown()
            self.consumer = None

    async def load_start(
        self,
        path: str,
        namesrv: str,
        topic: str,
        broker_name: str,
        queues: int,
        senders: int = 4,
        interval: float = 0.0,
    ) -> None:
        assert self.load is None, "one recorded load at a time"
        self.load = await RecordedLoad.start(
            Path(path), namesrv, topic, broker_name, queues, senders=senders, interval=interval
        )

    async def load_stats(self) -> dict[str, Any]:
        assert self.load is not None, "load_start first"
        return self.load.stats()

    async def load_stop(self) -> dict[str, Any]:
        assert self.load is not None, "load_start first"
        return await self.load.stop()

    async def final_read(self, address: str, topic: str, broker_name: str, queues: int) -> int:
        assert self.load is not None, "the final read goes into the load's history"
        return await record_read(self.load.recorder, self.api, address, topic, broker_name, queues)

    async def controller(self, address: str) -> object:
        return (await ha_status(self.api, address))["controller"]

    async def close(self) -> None:
        if self.load is not None:
            if not self.load.stopping.is_set():
                await self.load.stop()
            self.load.recorder.close()
        await self.consumer_stop()
        for producer in self.producers.values():
            await producer.shutdown()
        await self.api.close()


OPS = (
    "send",
    "produce",
    "ha_status",
    "route",
    "committed",
    "create_topic",
    "read_all",
    "consumer_start",
    "consumer_poll",
    "consumer_stop",
    "load_start",
    "load_stats",
    "load_stop",
    "final_read",
    "controller",
)


async def serve() -> None:
    agent = Agent()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()

    def answer(reply: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()

    async def handle(request: dict[str, Any]) -> None:
        op = request["op"]
        try:
            if op not in OPS:
                raise ValueError(f"unknown op {op!r}")
            result = await getattr(agent, op)(**request.get("args", {}))
        except Exception as exc:  # reported to the test, which decides
            answer({"id": request["id"], "error": f"{type(exc).__name__}: {exc}"})
        else:
            answer({"id": request["id"], "result": result})

    answer({"id": 0, "result": "ready"})
    try:
        while line := await reader.readline():
            task = asyncio.create_task(handle(json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        for task in tasks:
            task.cancel()
        await agent.close()


if __name__ == "__main__":
    asyncio.run(serve())
