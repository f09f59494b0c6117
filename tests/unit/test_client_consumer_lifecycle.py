"""Consumer life cycle against a fake client instance (no sockets).

- a push consumer shut down while a rebalance is under way leaves no pull loop running;
- a lite pull consumer's assigned queues: the route of an assigned topic is fetched before the
  start offset is read, and a queue whose offset could not be read is tried again at the next
  rebalance round.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tidemq.client.config import ClientConfig
from tidemq.client.consumer import pull as pull_consumer_module
from tidemq.client.consumer import push as consumer_module
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.consumer.push import AsyncPushConsumer
from tidemq.client.errors import RequestTimeoutError
from tidemq.client.protocol.heartbeat import ConsumeFromWhere, MessageQueue
from tidemq.client.routing import FindBrokerResult

MQ = MessageQueue("T", "broker-a", 0)


class FakeAPI:
    def __init__(self) -> None:
        self.query_failures = 0

    async def query_consumer_offset(self, address: str, group: str, topic: str, qid: int) -> int:
        if self.query_failures:
            self.query_failures -= 1
            raise RequestTimeoutError("broker busy")
        return 5

    async def update_consumer_offset(self, *args: Any) -> None:
        pass

    async def pull(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()  # a long poll that never answers


class FakeInstance:
    client_id = "127.0.0.1@test"

    def __init__(self) -> None:
        self.api = FakeAPI()
        self.consumers: dict[str, Any] = {}
        self.routed: set[str] = set()
        self.unregistered = asyncio.Event()
        self.unregister_gate: asyncio.Event | None = None
        self.unregistering = asyncio.Event()

    async def start(self) -> None:
        pass

    async def release(self) -> None:
        pass

    async def register_consumer(self, consumer: Any) -> None:
        self.consumers[consumer.group] = consumer

    async def unregister_consumer(self, group: str) -> None:
        self.unregistering.set()
        if self.unregister_gate is not None:
            await self.unregister_gate.wait()
        self.consumers.pop(group, None)
        self.unregistered.set()

    async def subscribe_queue_set(self, topic: str) -> set[MessageQueue]:
        self.routed.add(topic)
        return {MQ}

    async def find_offset_broker(self, broker_name: str) -> str | None:
        # Only known once the topic's route was fetched (an assigned topic is in no route yet).
        return "a:0" if MQ.topic in self.routed else None

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> FindBrokerResult | None:
        return FindBrokerResult("a:0", False)

    async def update_route(self, topic: str) -> None:
        self.routed.add(topic)


def pull_tasks() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if t.get_name().startswith(("pull ", "fetch ")) and not t.done()
    ]


async def test_push_consumer_shutdown_during_a_rebalance_leaves_no_pull_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeInstance()
    fake.routed.add(MQ.topic)
    monkeypatch.setattr(consumer_module, "get_instance", lambda config: fake)
    allocating = asyncio.Event()
    allocation_gate = asyncio.Event()

    async def slow_allocate(*args: Any) -> set[MessageQueue]:
        allocating.set()
        await allocation_gate.wait()
        return {MQ}

    monkeypatch.setattr(consumer_module, "allocate_queues", slow_allocate)
    consumer = AsyncPushConsumer(
        "G",
        config=ClientConfig.create("ns:9876"),
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("T", "*", lambda msg: None)
    await consumer.start()
    rebalance = asyncio.get_running_loop().create_task(consumer.do_rebalance())
    await asyncio.wait_for(allocating.wait(), 1)
    # Shutdown starts while the rebalance (a NOTIFY_CONSUMER_IDS_CHANGED, say) is still
    # allocating, and is itself slow to unregister; the rebalance then adds its queue.
    fake.unregister_gate = asyncio.Event()
    shutdown = asyncio.get_running_loop().create_task(consumer.shutdown())
    await asyncio.sleep(0.05)  # nothing to observe: shutdown waits for the rebalance's lock
    allocation_gate.set()
    await asyncio.wait_for(fake.unregistering.wait(), 2)  # the rebalance is over, so is its lock
    fake.unregister_gate.set()
    await asyncio.wait_for(shutdown, 2)
    await asyncio.wait_for(rebalance, 2)
    await asyncio.sleep(0.05)
    assert not pull_tasks(), "a pull loop outlived the consumer's shutdown"
    assert not consumer.process_queues


async def test_pull_consumer_assign_reads_the_route_first_and_retries_skipped_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeInstance()
    monkeypatch.setattr(pull_consumer_module, "get_instance", lambda config: fake)
    consumer = AsyncPullConsumer("G", config=ClientConfig.create("ns:9876"), auto_commit=False)
    await consumer.assign([MQ])
    await consumer.start()
    try:
        # The assigned topic's route was fetched, so its offset could be read.
        assert consumer.assignment() == {MQ}
        assert consumer.position(MQ) == 5
        assert "G" in fake.consumers, "an assign-mode consumer is registered (heartbeats)"

        # A queue whose offset cannot be read now is skipped, then taken at the next round.
        other = MessageQueue("T", "broker-a", 1)
        fake.api.query_failures = 1
        await consumer.assign([MQ, other])
        assert consumer.assignment() == {MQ}
        await consumer.do_rebalance()
        assert consumer.assignment() == {MQ, other}
    finally:
        await consumer.shutdown()
    await asyncio.sleep(0)
    assert not pull_tasks()
