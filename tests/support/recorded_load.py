"""A recorded workload for fault tests: producers sending numbered messages all along and a pull
consumer reading and committing, every operation in one history (tests/support/history.py).

`RecordedLoad.start(path, namesrv, topic, broker_name, queues)` starts `senders` tasks, each
sending (`interval` seconds apart, when given) the next number (`ha_processes.body_of`) through
one AsyncProducer (route from the name server polled each second, latency fault avoidance on,
3 s timeout, 2 retries) and a consumer task: an AsyncPullConsumer assigned the group's queues
from the first offset, polling, and once a second committing what it polled and reading the
committed offsets back; and an orderly AsyncPushConsumer of its own group, from the first
offset, whose deliveries are recorded (`history.recording_listener`). `stats()` says what
happened so far (acknowledgements per broker, other outcomes, messages consumed and pushed): a
test waits on it. `stop()` lets each send in flight finish, gives the push consumer up to
DRAIN_TIMEOUT seconds to be delivered every acknowledged message, marks its group drained in
the history (the checker's delivery rule then judges it: delivered at least once, in queue
order) and stops the clients; the history stays open for a final read
(`history.record_read`) until `recorder.close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.conditions import eventually
from tests.support.failover import stored_by
from tests.support.ha_processes import body_of, id_of
from tests.support.history import (
    Recorder,
    RecordingProducer,
    RecordingPullConsumer,
    recording_listener,
)
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.consumer.push import AsyncPushConsumer
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere, MessageQueue
from tidemq.common.lifecycle import cancel_and_wait

log = logging.getLogger(__name__)

SEND_TIMEOUT = 3.0
COMMIT_INTERVAL = 1.0
BODY_SIZE = 200
DRAIN_TIMEOUT = 90.0  # after the sends stop, for the push consumer to get every acknowledged one


@dataclass
class RecordedLoad:
    recorder: Recorder
    producer: AsyncProducer
    consumer: AsyncPullConsumer
    queues: list[MessageQueue]
    push: AsyncPushConsumer
    topic: str
    acknowledged: Counter[str] = field(default_factory=Counter)  # per broker address
    acked_bodies: set[int] = field(default_factory=set)
    pushed_bodies: set[int] = field(default_factory=set)
    pushed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # statuses and error types
    consumed: int = 0
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count())
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def start(
        cls,
        path: Path,
        namesrv: str,
        topic: str,
        broker_name: str,
        queues: int,
        *,
        senders: int = 4,
        interval: float = 0.0,
        group: str = "Recorded",
    ) -> RecordedLoad:
        config = ClientConfig.create(namesrv, poll_name_server_interval=1.0)
        producer = AsyncProducer(
            f"{group}PG", config=config, timeout=SEND_TIMEOUT, latency_fault_enabled=True
        )
        consumer = AsyncPullConsumer(
            f"{group}CG",
            config=config,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            auto_commit=False,
            offset_store_dir=path.parent / "offsets",
        )
        push = AsyncPushConsumer(
            f"{group}Orderly",
            config=config,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            offset_store_dir=path.parent / "offsets-orderly",
            orderly=True,
        )
        load = cls(
            Recorder(path, process="agent", keep=False),
            producer,
            consumer,
            [MessageQueue(topic, broker_name, q) for q in range(queues)],
            push,
            topic,
        )
        push.subscribe(topic, "*", recording_listener(load.recorder, push, load._pushed))
        await producer.start()
        await consumer.start()
        await consumer.assign(load.queues)
        await push.start()
        load.tasks = [asyncio.create_task(load._send(topic, interval)) for _ in range(senders)]
        load.tasks.append(asyncio.create_task(load._consume()))
        return load

    async def _send(self, topic: str, interval: float) -> None:
        sending = RecordingProducer(self.recorder, self.producer)
        while not self.stopping.is_set():
            if interval:
                await asyncio.sleep(interval)
            number = next(self.numbers)
            try:
                result = await sending.send(Message(topic, body_of(number, BODY_SIZE)))
            except TideMQError as exc:
                self.outcomes[type(exc).__name__] += 1
                await asyncio.sleep(0.05)  # no master to send to yet: do not spin
                continue
            if result.ok:
                self.acknowledged[stored_by(result)] += 1
                self.acked_bodies.add(number)
            else:
                self.outcomes[result.status.name] += 1

    async def _consume(self) -> None:
        reading = RecordingPullConsumer(self.recorder, self.consumer)
        committed_at = time.monotonic()
        while not self.stopping.is_set():
            try:
                self.consumed += len(await reading.poll(timeout=0.3))
                if time.monotonic() - committed_at >= COMMIT_INTERVAL:
                    committed_at = time.monotonic()
                    await reading.commit()
                    for mq in self.queues:
                        await reading.committed(mq)
            except TideMQError as exc:
                log.info("consumer: %s", exc)
                await asyncio.sleep(0.2)

    async def _pushed(self, message: ReceivedMessage) -> None:
        self.pushed += 1
        self.pushed_bodies.add(id_of(message.body))

    def stats(self) -> dict[str, Any]:
        return {
            "acknowledged": dict(self.acknowledged),
            "outcomes": dict(self.outcomes),
            "consumed": self.consumed,
            "pushed": self.pushed,
            "not_pushed": len(self.acked_bodies - self.pushed_bodies),
        }

    async def stop(self) -> dict[str, Any]:
        self.stopping.set()
        done, pending = await asyncio.wait(self.tasks, timeout=4 * SEND_TIMEOUT)
        for task in pending:
            await cancel_and_wait(task)
        for task in done:
            with contextlib.suppress(Exception):
                task.result()
        # Not delivered in time is the checker's to judge (delivery: undelivered), not an error.
        with contextlib.suppress(AssertionError):
            await eventually(
                lambda: self.acked_bodies <= self.pushed_bodies,
                "every acknowledged message pushed",
                DRAIN_TIMEOUT,
                interval=0.1,
            )
        self.recorder.drained(self.push.group, self.topic)
        await self.push.stop()
        await self.consumer.stop()
        await self.producer.stop()
        return self.stats()
