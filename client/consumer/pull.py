"""Lite pull consumers (Kafka-like): `AsyncPullConsumer` (asyncio) and `PullConsumer` (blocking).

`subscribe(topic, expression)` lets the group share the queues (rebalanced like a push consumer);
`assign(queues)` takes queues by hand. `poll()` returns what background fetchers have pulled
(`async for` works too); `seek()` moves a queue's position; `commit()` stores the positions of
what `poll()` returned (sync), `commit_async()` does it in the background, and with
`auto_commit` it happens every `auto_commit_interval` seconds and at shutdown. A position is the
offset of the next message to return, as in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tidemq.client.api import PullStatus
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from tidemq.client.consumer.offset_store import (
    OffsetStore,
    ReadOffsetType,
)
from tidemq.client.consumer.pulling import (
    allocate_queues,
    client_tag_filter,
    compute_pull_from,
    open_offset_store,
    pull_queue,
)
from tidemq.client.errors import ClientError, TideMQError
from tidemq.client.instance import ClientInstance, get_instance
from tidemq.client.message import MessageSelector, ReceivedMessage, selector_of
from tidemq.client.protocol.heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    ExpressionType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from tidemq.client.sync import AsyncLifecycle, BlockingTwin, call
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.client.validators import check_group, subscription_topic
from tidemq.common.lifecycle import cancel_and_wait

log = logging.getLogger(__name__)

FETCH_SUSPEND_MS = 5_000
FETCH_ERROR_BACKOFF = 1.0


@dataclass(eq=False)
class _QueueState:
    queue: MessageQueue
    subscription: SubscriptionData
    fetch_offset: int
    position: int
    buffer: deque[ReceivedMessage] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    generation: int = 0


class AsyncPullConsumer(AsyncLifecycle):
    """An asyncio lite pull consumer (RocketMQ's DefaultLitePullConsumer, Kafka-like; module
    docstring): `subscribe()` or `assign()`, `start()`, then `poll()` or `async for`.

    `group`, `namesrv_addr`/`config`, `message_model`, `consume_from_where`,
    `consume_timestamp`, `allocate_strategy`, `offset_store_dir`, `access_key`/`secret_key` and
    `tls` are as for `AsyncPushConsumer`. `auto_commit` commits what `poll()` returned every
    `auto_commit_interval` seconds and at stop; each queue's fetcher pulls `pull_batch_size`
    messages at a time and keeps at most `buffer_per_queue` of them ahead of `poll()`.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        config: ClientConfig | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_strategy: AllocateStrategy | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        pull_batch_size: int = 32,
        buffer_per_queue: int = 1000,
        offset_store_dir: str | Path | None = None,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
    ) -> None:
        check_group(group, consumer=True)
        self.group = group
        self.config = ClientConfig.for_client(
            config, namesrv_addr, access_key=access_key, secret_key=secret_key, tls=tls
        )
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp or int((time.time() - 1800) * 1000)
        self.allocate_strategy = allocate_strategy or AllocateMessageQueueAveragely()
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.pull_batch_size = pull_batch_size
        self.buffer_per_queue = buffer_per_queue
        self.offset_store_dir = Path(offset_store_dir or Path.home() / ".tidemq_offsets")
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._assigned: list[MessageQueue] | None = None
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._pull_from: dict[MessageQueue, int] = {}
        self._data = asyncio.Event()
        self._instance: ClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._rebalance_lock = asyncio.Lock()
        self._next_queue = 0
        self._running = False

    # --- what to read -------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read `topic` messages matching `expression` (see `AsyncPushConsumer.subscribe`)."""
        if self._assigned is not None:
            raise ClientError("subscribe() and assign() cannot be mixed")
        subscription_topic(topic)
        selector = selector_of(expression)
        self._subscriptions[topic] = SubscriptionData.from_expression(
            topic, selector.expression, selector.expression_type
        )

    async def assign(self, queues: list[MessageQueue]) -> None:
        """Read exactly these queues (no group rebalance)."""
        if self._subscriptions and self._assigned is None:
            raise ClientError("subscribe() and assign() cannot be mixed")
        self._assigned = list(queues)
        if self._running:
            if self.group not in self.instance.consumers:
                await self.instance.register_consumer(self)
            await self.do_rebalance()

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer reads now (assigned, or its share of the group's)."""
        return set(self._queues)

    def consumer_data(self) -> ConsumerData:
        """What heartbeats tell brokers of this consumer: group, model, subscriptions."""
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscriptions=list(self._subscriptions.values()),
        )

    # --- life cycle ---------------------------------------------------------------------------

    @property
    def instance(self) -> ClientInstance:
        """The client instance (connections, routes) this consumer shares once started."""
        if self._instance is None:
            raise ClientError(f"consumer {self.group} is not started")
        return self._instance

    async def start(self) -> None:
        """Join the shared client instance, take the queues and start fetching."""
        if self._running:
            return
        instance = get_instance(self.config)
        await instance.start()
        try:
            filtered = [
                s
                for s in self._subscriptions.values()
                if s.expression_type is not ExpressionType.TAG
            ]
            if filtered:  # SQL92: ask the brokers first, as RocketMQ's checkClientInBroker
                await instance.check_subscriptions(self.group, filtered)
        except TideMQError:
            await instance.release()
            raise
        self._instance = instance
        self.offset_store = await open_offset_store(
            instance, self.group, self.message_model, self.offset_store_dir
        )
        self._running = True
        if self.auto_commit:
            self._auto_commit_task = asyncio.get_running_loop().create_task(
                self._auto_commit_loop()
            )
        if self._assigned is not None or self._subscriptions:
            # Registered in both modes (as RocketMQ's lite pull consumer is): heartbeats, and
            # the rebalance rounds that retry assigned queues whose offset could not be read.
            await instance.register_consumer(self)
            await self.do_rebalance()

    async def stop(self) -> None:
        """Stop fetching, commit (with auto_commit), leave the client instance."""
        if not self._running:
            return
        self._running = False
        task, self._auto_commit_task = self._auto_commit_task, None
        await cancel_and_wait(task)
        for state in list(self._queues.values()):
            await self._stop_fetch(state)
        if self.auto_commit:
            await self.commit()
        instance = self.instance
        if self.group in instance.consumers:
            await instance.unregister_consumer(self.group)
        await instance.release()
        self._queues.clear()
        self._instance = None

    # --- rebalance ----------------------------------------------------------------------------

    async def do_rebalance(self) -> None:
        """Take the assigned queues, or this consumer's share of the subscribed topics'."""
        if not self._running:
            return
        async with self._rebalance_lock:
            if self._assigned is not None:
                # Queues skipped last time (start offset not readable) are tried again.
                await self._apply_assignment(set(self._assigned))
                return
            wanted: set[MessageQueue] = set()
            for topic in list(self._subscriptions):
                current = {mq for mq in self._queues if mq.topic == topic}
                wanted |= await allocate_queues(
                    self.instance,
                    self.group,
                    topic,
                    self.message_model,
                    self.allocate_strategy,
                    current,
                )
            await self._apply_assignment(wanted)

    async def _apply_assignment(self, wanted: set[MessageQueue]) -> None:
        assert self.offset_store is not None
        for mq, state in list(self._queues.items()):
            if mq not in wanted:
                await self._commit_queue(state)
                await self.offset_store.persist(mq)
                await self._stop_fetch(state)
                del self._queues[mq]
        added = sorted(wanted - set(self._queues))
        for topic in sorted({mq.topic for mq in added}):
            # Assigned topics are in no subscription: fetch their routes (and broker addresses).
            try:
                await self.instance.subscribe_queue_set(topic)
            except TideMQError as exc:
                log.info("route of %s: %s", topic, exc)
        for mq in added:
            offset = await compute_pull_from(
                self.instance,
                self.offset_store,
                mq,
                self.consume_from_where,
                self.consume_timestamp,
            )
            if offset < 0:
                continue
            sub = self._subscriptions.get(mq.topic) or SubscriptionData.from_expression(
                mq.topic, "*"
            )
            state = _QueueState(mq, sub, offset, offset)
            self._queues[mq] = state
            self._start_fetch(state)

    # --- fetching -----------------------------------------------------------------------------

    def _start_fetch(self, state: _QueueState) -> None:
        state.generation += 1
        state.task = asyncio.get_running_loop().create_task(
            self._fetch_loop(state, state.generation), name=f"fetch {state.queue}"
        )

    async def _stop_fetch(self, state: _QueueState) -> None:
        task, state.task = state.task, None
        await cancel_and_wait(task)

    async def _fetch_loop(self, state: _QueueState, generation: int) -> None:
        assert self.offset_store is not None
        tags = client_tag_filter(state.subscription)
        mq = state.queue
        while self._running and generation == state.generation:
            if len(state.buffer) >= self.buffer_per_queue:
                await asyncio.sleep(0.05)
                continue
            try:
                result = await pull_queue(
                    self.instance,
                    self.group,
                    mq,
                    state.fetch_offset,
                    state.subscription,
                    self._pull_from,
                    self.offset_store,
                    self.pull_batch_size,
                    FETCH_SUSPEND_MS,
                )
            except TideMQError as exc:
                log.info("fetch %s at %d failed: %s", mq, state.fetch_offset, exc)
                await asyncio.sleep(FETCH_ERROR_BACKOFF)
                continue
            if generation != state.generation:
                return  # a seek happened while the pull was in flight
            if result.status is PullStatus.FOUND:
                try:
                    received = result.received(mq.broker_name)
                except TideMQError as exc:  # a damaged answer: fetched again, as a failed pull
                    log.info("fetch %s at %d: %s", mq, state.fetch_offset, exc)
                    await asyncio.sleep(FETCH_ERROR_BACKOFF)
                    continue
                if tags.matches_all:
                    state.buffer.extend(received)
                else:
                    state.buffer.extend(m for m in received if tags.match_tags(m.tags))
                self._data.set()
            elif result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "%s: offset %d illegal, moving to %d",
                    mq,
                    state.fetch_offset,
                    result.next_begin_offset,
                )
                if not state.buffer:
                    state.position = result.next_begin_offset
            state.fetch_offset = result.next_begin_offset
            if (
                not state.buffer
                and state.position < state.fetch_offset
                and result.status is not PullStatus.FOUND
            ):
                # Nothing to return below the fetch point (filtered or empty): move the position.
                state.position = state.fetch_offset

    # --- reading ------------------------------------------------------------------------------

    async def poll(
        self, timeout: float = 1.0, max_records: int | None = None
    ) -> list[ReceivedMessage]:
        """Messages ready now, waiting up to `timeout` seconds for the first one."""
        if not self._running:
            raise ClientError("poll() on a consumer that is not started")
        limit = max_records or self.pull_batch_size
        deadline = time.monotonic() + timeout
        while True:
            out = self._take(limit)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data.wait(), remaining)

    def _take(self, limit: int) -> list[ReceivedMessage]:
        states = list(self._queues.values())
        out: list[ReceivedMessage] = []
        for i in range(len(states)):
            state = states[(self._next_queue + i) % len(states)]
            while state.buffer and len(out) < limit:
                msg = state.buffer.popleft()
                out.append(msg)
                state.position = msg.queue_offset + 1
            if len(out) >= limit:
                self._next_queue = (self._next_queue + i + 1) % len(states)
                break
        return out

    def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ReceivedMessage]:
        while self._running:
            for msg in await self.poll(timeout=1.0):
                yield msg

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read `mq` from `offset` on (buffered messages of the queue are discarded)."""
        state = self._queues.get(mq)
        if state is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        await self._stop_fetch(state)
        state.buffer.clear()
        state.fetch_offset = state.position = offset
        self._start_fetch(state)

    async def seek_to_beginning(self, mq: MessageQueue) -> None:
        """Read `mq` from its first message still stored."""
        address = await self.instance.find_offset_broker(mq.broker_name)
        if address is None:
            raise ClientError(f"no broker for {mq}")
        await self.seek(mq, await self.instance.api.get_min_offset(address, mq.topic, mq.queue_id))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Read `mq` from the next message sent to it."""
        address = await self.instance.find_offset_broker(mq.broker_name)
        if address is None:
            raise ClientError(f"no broker for {mq}")
        await self.seek(mq, await self.instance.api.get_max_offset(address, mq.topic, mq.queue_id))

    def position(self, mq: MessageQueue) -> int:
        """The offset of the next message `poll()` returns from `mq`."""
        state = self._queues.get(mq)
        if state is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        return state.position

    # --- committing ---------------------------------------------------------------------------

    async def _commit_queue(self, state: _QueueState) -> None:
        assert self.offset_store is not None
        await self.offset_store.update_offset(state.queue, state.position, increase_only=False)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Store positions (the given ones, or what poll() returned) on the broker now."""
        assert self.offset_store is not None
        if offsets is None:
            for state in self._queues.values():
                await self._commit_queue(state)
            queues = set(self._queues)
        else:
            for mq, offset in offsets.items():
                await self.offset_store.update_offset(mq, offset, increase_only=False)
            # persist_all keeps in memory only the queues it is given: give it every one.
            queues = set(self._queues) | set(offsets)
        await self.offset_store.persist_all(queues)

    def commit_async(self, offsets: dict[MessageQueue, int] | None = None) -> asyncio.Task[None]:
        """`commit()` in the background: a task of it."""
        return asyncio.get_running_loop().create_task(self.commit(offsets))

    async def committed(self, mq: MessageQueue) -> int:
        """The offset stored for `mq` (on the broker, or the local file; -1 for none)."""
        assert self.offset_store is not None
        return await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)

    async def persist_offsets(self) -> None:
        """Commit now, with auto_commit (the client instance's periodic persist)."""
        if self.auto_commit:
            await self.commit()

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval)
            try:
                await self.commit()
            except TideMQError as exc:
                log.info("auto commit of %s failed: %s", self.group, exc)


class PullConsumer(BlockingTwin[AsyncPullConsumer]):
    """The blocking twin of `AsyncPullConsumer`: the same parameters (see its docstring);
    iterate it or call `poll()`."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        config: ClientConfig | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_strategy: AllocateStrategy | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        pull_batch_size: int = 32,
        buffer_per_queue: int = 1000,
        offset_store_dir: str | Path | None = None,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
    ) -> None:
        self._async = AsyncPullConsumer(
            group,
            namesrv_addr,
            config=config,
            message_model=message_model,
            consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp,
            allocate_strategy=allocate_strategy,
            auto_commit=auto_commit,
            auto_commit_interval=auto_commit_interval,
            pull_batch_size=pull_batch_size,
            buffer_per_queue=buffer_per_queue,
            offset_store_dir=offset_store_dir,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
        )
        self.group = group

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read `topic` messages matching `expression` (see `AsyncPushConsumer.subscribe`)."""
        self._async.subscribe(topic, expression)

    def assign(self, queues: list[MessageQueue]) -> None:
        """Read exactly these queues (no group rebalance)."""
        call(self._async.assign(queues))

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer reads now (assigned, or its share of the group's)."""
        return self._async.assignment()

    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ReceivedMessage]:
        """Messages ready now, waiting up to `timeout` seconds for the first one."""
        return call(self._async.poll(timeout, max_records))

    def __iter__(self) -> Iterator[ReceivedMessage]:
        while self._async._running:
            yield from self.poll(timeout=1.0)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read `mq` from `offset` on (buffered messages of the queue are discarded)."""
        call(self._async.seek(mq, offset))

    def seek_to_beginning(self, mq: MessageQueue) -> None:
        """Read `mq` from its first message still stored."""
        call(self._async.seek_to_beginning(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        """Read `mq` from the next message sent to it."""
        call(self._async.seek_to_end(mq))

    def position(self, mq: MessageQueue) -> int:
        """The offset of the next message `poll()` returns from `mq`."""
        return self._async.position(mq)

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Store positions (the given ones, or what poll() returned) on the broker now."""
        call(self._async.commit(offsets))

    def committed(self, mq: MessageQueue) -> int:
        """The offset stored for `mq` (on the broker, or the local file; -1 for none)."""
        return call(self._async.committed(mq))
