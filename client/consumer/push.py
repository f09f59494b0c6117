"""Push consumers: `AsyncPushConsumer` (asyncio) and `PushConsumer` (blocking), same methods.

RocketMQ's DefaultMQPushConsumer (reference Part A §8):

- rebalance every 20 s and at once on NOTIFY_CONSUMER_IDS_CHANGED: the group's queues of each
  subscribed topic are allocated among the group's client ids (CLUSTERING) or all taken
  (BROADCASTING); queues lost are dropped (their offsets persisted first), queues gained start
  where the offset store says, or per ConsumeFromWhere (LAST, FIRST, TIMESTAMP);
- one pull loop per queue (long polling, 15 s suspend), following the broker's
  suggestWhichBrokerId, so a cold consumer reads from the slave and a consumer whose master is
  gone reads from any broker of the group; flow control by pullThresholdForQueue,
  pullThresholdSizeForQueue and consumeConcurrentlyMaxSpan;
- pipelined: a queue's next pull is sent as soon as an answer with messages arrives (unless the
  queue is flow controlled), before that answer is decoded and consumed (so a queue may hold
  one batch more than its thresholds); the pull loop sends it itself, stepping the pull's
  coroutine up to its wait for the answer (client/transport/eager.py), with no task per pull;
- concurrently: each pulled batch is consumed by one task, its messages in turn, and batches
  run side by side, at most `max_concurrency` at once (so at most that many listener calls);
  the committed offset of a queue is its lowest message still in flight (so a crash
  re-delivers, never skips), committed after each batch; a failed message (RECONSUME_LATER or an
  exception) is sent back to the broker for a later retry, or consumed again locally 5 s later
  if the send-back fails;
- orderly: one message at a time per queue, in queue order, with the queue locked on its broker
  (LOCK_BATCH_MQ, renewed every 20 s); a failure suspends the queue for a second and retries the
  same message.

Messages reach listeners decoded lazily (`ReceivedMessage`: properties, hosts and ids are read
from the record when first used). A plain function listener gets a batch (or an orderly run) as
one job of the consume threads (client/consumer/consume_threads.py: one thread drains the jobs while
listeners are fast, another joins whenever every running one has spent 5 ms in a job, up to
`max_concurrency` threads, as RocketMQ's consumeThreadMax; jobs that finish together wake the
loop once), not one job per message; an `executor` given to the consumer runs the jobs instead.

A listener is a function or an async function taking a `ReceivedMessage` and returning
`ConsumeResult.SUCCESS` (or None) or `ConsumeResult.RECONSUME_LATER`; raising counts as
RECONSUME_LATER. Plain functions run in a thread pool so they may block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import inspect
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from tidemq.client.api import PullResult, PullStatus
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from tidemq.client.consumer.consume_stats import ConsumeStatsRecorder
from tidemq.client.consumer.consume_threads import ConsumeThreads
from tidemq.client.consumer.offset_store import OffsetStore
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.consumer.pulling import (
    RETRY_PREFIX,
    allocate_queues,
    client_tag_filter,
    compute_pull_from,
    open_offset_store,
    pull_queue,
)
from tidemq.client.errors import ClientError, RemotingError, TideMQError
from tidemq.client.instance import ClientInstance, get_instance
from tidemq.client.message import MessageSelector, ReceivedMessage, selector_of
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.group_admin import ConsumerRunningInfo, ProcessQueueInfo
from tidemq.client.protocol.headers import ConsumerSendMsgBackRequestHeader
from tidemq.client.protocol.heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    ExpressionType,
    LockBatchRequestBody,
    MessageModel,
    MessageQueue,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from tidemq.client.sync import AsyncLifecycle, BlockingTwin
from tidemq.client.trace import (
    TRACE_TOPIC,
    ContextCode,
    TraceDispatcher,
    TraceRecord,
    TraceType,
    now_ms,
)
from tidemq.client.transport import eager
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.client.validators import check_group, subscription_topic
from tidemq.client.version import TIDEMQ_VERSION
from tidemq.common.lifecycle import cancel_and_wait
from tidemq.store.tags import TagFilter

log = logging.getLogger(__name__)

PULL_SUSPEND_MS = 15_000
FLOW_CONTROL_BACKOFF = 0.05
PULL_ERROR_BACKOFF = 3.0
# After a pull that could not reach its broker, with the route asked for again meanwhile: the
# next pull goes where the new route says (a slave of a dead master, a new master) within a
# second instead of after RocketMQ's 3 s pause and 30 s route refresh.
PULL_ERROR_BACKOFF_UNREACHABLE = 0.5
LOCAL_RETRY_DELAY = 5.0
ORDERLY_SUSPEND = 1.0
LOCK_RENEW_INTERVAL = 20.0


class ConsumeResult(enum.Enum):
    """What a listener returns: SUCCESS (None counts as SUCCESS), or RECONSUME_LATER to have
    the message delivered again later (RocketMQ's ConsumeConcurrentlyStatus)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener: TypeAlias = Callable[
    [ReceivedMessage], "ConsumeResult | Awaitable[ConsumeResult | None] | None"
]


@dataclass(slots=True)
class _Subscription:
    data: SubscriptionData
    listener: Listener | None
    is_async: bool = False  # the listener is an async function (known at start())


class AsyncPushConsumer(AsyncLifecycle):
    """An asyncio push consumer (RocketMQ's DefaultMQPushConsumer); `subscribe()` topics with
    a listener, then `start()`.

    `group` is the consumer group; `namesrv_addr` the name servers (or `config` a whole
    `ClientConfig`). `message_model` CLUSTERING shares the queues among the group,
    BROADCASTING gives each consumer every message; a group with no offset yet starts at
    `consume_from_where` (`consume_timestamp`, ms, for CONSUME_FROM_TIMESTAMP); queues are
    shared by `allocate_strategy` (averagely). `orderly` consumes each queue one message at a
    time in order. Pulls take up to `pull_batch_size` messages and stop while a queue holds
    `pull_threshold_for_queue` messages, `pull_threshold_size_for_queue` bytes or a span of
    `consume_concurrently_max_span` offsets not consumed. At most `max_concurrency` listener
    calls run at once (plain listeners on `executor`, or on threads of their own); a message
    failing `max_reconsume_times` times goes to the dead-letter queue. BROADCASTING offsets
    are kept under `offset_store_dir`. `access_key`/`secret_key` sign requests for brokers with
    aclEnable; `tls` connects with TLS; `enable_trace` writes SubBefore and SubAfter trace
    records of every listener call to `trace_topic`.
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
        orderly: bool = False,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        consume_concurrently_max_span: int = 2000,
        max_concurrency: int = 20,
        max_reconsume_times: int = 16,
        offset_store_dir: str | Path | None = None,
        executor: concurrent.futures.Executor | None = None,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
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
        self.orderly = orderly
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.offset_store_dir = Path(offset_store_dir or Path.home() / ".tidemq_offsets")
        self._executor = executor
        self._max_concurrency = max_concurrency
        self._threads: ConsumeThreads | None = None
        # SubBefore and SubAfter records of every listener call (client/trace.py).
        self.trace = TraceDispatcher(trace_topic or TRACE_TOPIC) if enable_trace else None
        self._slots = asyncio.Semaphore(max_concurrency)
        self._subscriptions: dict[str, _Subscription] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_from: dict[MessageQueue, int] = {}
        self._instance: ClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._lock_task: asyncio.Task[None] | None = None
        self._rebalance_lock = asyncio.Lock()
        self._running = False
        self._started_at_ms = 0
        self.consume_stats = ConsumeStatsRecorder()

    # --- subscriptions ----------------------------------------------------------------------

    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        listener: Listener | None = None,
    ) -> None:
        """Consume `topic` messages matching `expression` (`*` or `TagA || TagB`, or a
        `MessageSelector`: `MessageSelector.by_sql("a > 3")` filters at the broker)."""
        if self._running:
            raise ClientError("subscribe before start()")
        subscription_topic(topic)
        selector = selector_of(expression)
        self._subscriptions[topic] = _Subscription(
            SubscriptionData.from_expression(topic, selector.expression, selector.expression_type),
            listener,
        )

    def register_listener(self, listener: Listener) -> None:
        """The listener for every subscription that has none of its own."""
        for sub in self._subscriptions.values():
            if sub.listener is None:
                sub.listener = listener
        self._default_listener = listener

    def consumer_data(self) -> ConsumerData:
        """What heartbeats tell brokers of this consumer: group, model, subscriptions."""
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscriptions=[s.data for s in self._subscriptions.values()],
        )

    async def running_info(self) -> ConsumerRunningInfo:
        """What GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus) asks a consumer: its
        settings, subscriptions and, per queue it holds, the committed offset and the messages
        pulled and not consumed yet, and per topic its pull and consume rates (statusTable)."""
        props = {
            "consumerGroup": self.group,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "consumeTimestamp": str(self.consume_timestamp),
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "consumeConcurrentlyMaxSpan": str(self.consume_concurrently_max_span),
            "maxReconsumeTimes": str(self.max_reconsume_times),
            "allocateMessageQueueStrategy": type(self.allocate_strategy).__name__,
            "PROP_NAMESERVER_ADDR": ";".join(self.config.namesrv_addr),
            "PROP_THREADPOOL_CORE_SIZE": str(self._max_concurrency),
            "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
            "PROP_CONSUME_TYPE": ConsumeType.CONSUME_PASSIVELY.value,
            "PROP_CLIENT_VERSION": f"tidemq {TIDEMQ_VERSION}",
            "PROP_CONSUMER_START_TIMESTAMP": str(self._started_at_ms),
        }
        committed = (
            {} if self.offset_store is None else await self.offset_store.clone_offset_table()
        )
        wall_minus_mono = time.time() - time.monotonic()
        table = {}
        for mq, pq in list(self.process_queues.items()):
            offsets = list(pq.messages)
            table[mq] = ProcessQueueInfo(
                commit_offset=committed.get(mq, -1),
                cached_msg_min_offset=min(offsets, default=0),
                cached_msg_max_offset=max(offsets, default=0),
                cached_msg_count=len(offsets),
                cached_msg_size_in_mi_b=pq.size_bytes // (1024 * 1024),
                locked=pq.locked,
                droped=pq.dropped,
                last_pull_timestamp=int((pq.last_pull + wall_minus_mono) * 1000),
            )
        return ConsumerRunningInfo(
            props,
            [sub.data for sub in self._subscriptions.values()],
            table,
            self.consume_stats.status(),
        )

    # --- life cycle -------------------------------------------------------------------------

    @property
    def instance(self) -> ClientInstance:
        """The client instance (connections, routes) this consumer shares once started."""
        if self._instance is None:
            raise ClientError(f"consumer {self.group} is not started")
        return self._instance

    async def start(self) -> None:
        """Join the shared client instance, take the group's share of the queues and pull."""
        if self._running:
            return
        if not self._subscriptions:
            raise ClientError("subscribe to at least one topic before start()")
        default = getattr(self, "_default_listener", None)
        for topic, sub in self._subscriptions.items():
            if sub.listener is None:
                sub.listener = default
            if sub.listener is None:
                raise ClientError(f"no listener for topic {topic}")
        if self.message_model is MessageModel.CLUSTERING:
            retry = RETRY_PREFIX + self.group
            first = next(iter(self._subscriptions.values()))
            self._subscriptions.setdefault(
                retry, _Subscription(SubscriptionData.from_expression(retry, "*"), first.listener)
            )
        for sub in self._subscriptions.values():
            sub.is_async = inspect.iscoroutinefunction(sub.listener)
        instance = get_instance(self.config)
        await instance.start()
        try:
            filtered = [
                s.data
                for s in self._subscriptions.values()
                if s.data.expression_type is not ExpressionType.TAG
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
        self._started_at_ms = int(time.time() * 1000)
        if self._executor is None:
            self._threads = ConsumeThreads(
                asyncio.get_running_loop(), self._max_concurrency, f"tidemq-consume-{self.group}"
            )
        if self.trace is not None:
            await self.trace.start(AsyncProducer(self.trace.producer_group, config=self.config))
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            self._lock_task = asyncio.get_running_loop().create_task(self._renew_locks())
        await instance.register_consumer(self)

    async def stop(self) -> None:
        """Stop pulling, let listener calls under way finish, commit the offsets, leave."""
        if not self._running:
            return
        self._running = False
        instance = self.instance
        task, self._lock_task = self._lock_task, None
        await cancel_and_wait(task)
        async with self._rebalance_lock:
            # A rebalance under way (a NOTIFY_CONSUMER_IDS_CHANGED, say) finishes first, so no
            # queue it adds is left pulling after shutdown; later ones see _running False.
            queues = list(self.process_queues.values())
        for pq in queues:
            pq.dropped = True
        await cancel_and_wait(*(pq.task for pq in queues))
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown()
        await self.persist_offsets()
        if self.orderly:
            await self._unlock_all(queues)
        self.process_queues.clear()
        await instance.unregister_consumer(self.group)
        if self.trace is not None:
            await self.trace.stop()
        await instance.release()
        self._instance = None

    # --- rebalance --------------------------------------------------------------------------

    async def do_rebalance(self) -> None:
        """Take this consumer's share of each subscribed topic's queues now (the client
        instance does it every 20 s and when the group changes)."""
        async with self._rebalance_lock:
            if not self._running:
                return  # not started, or shut down while this rebalance waited for the lock
            wanted: set[MessageQueue] = set()
            for topic in list(self._subscriptions):
                wanted |= await self._allocate(topic)
            for mq, pq in list(self.process_queues.items()):
                if mq not in wanted:
                    await self._drop(mq, pq)
            for mq in sorted(wanted - set(self.process_queues)):
                await self._add(mq)

    async def _allocate(self, topic: str) -> set[MessageQueue]:
        current = {mq for mq in self.process_queues if mq.topic == topic}
        return await allocate_queues(
            self.instance, self.group, topic, self.message_model, self.allocate_strategy, current
        )

    async def _drop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        pq.dropped = True
        if pq.task is not None:
            pq.task.cancel()
        assert self.offset_store is not None
        await self.offset_store.persist(mq)
        await self.offset_store.remove_offset(mq)
        if self.orderly:
            await self._unlock_all([pq])
        self.process_queues.pop(mq, None)
        log.info("consumer %s: queue %s released", self.group, mq)

    async def _add(self, mq: MessageQueue) -> None:
        offset = await self._compute_pull_from(mq)
        if offset < 0:
            log.info("consumer %s: no start offset for %s yet, skipped this round", self.group, mq)
            return
        pq = ProcessQueue(mq)
        self.process_queues[mq] = pq
        pq.task = asyncio.get_running_loop().create_task(
            self._pull_loop(pq, offset), name=f"pull {mq}"
        )
        log.info("consumer %s: queue %s assigned, starting at offset %d", self.group, mq, offset)

    async def _compute_pull_from(self, mq: MessageQueue) -> int:
        assert self.offset_store is not None
        return await compute_pull_from(
            self.instance,
            self.offset_store,
            mq,
            self.consume_from_where,
            self.consume_timestamp,
        )

    # --- pulling ------------------------------------------------------------------------------

    async def _pull_loop(self, pq: ProcessQueue, offset: int) -> None:
        mq = pq.queue
        sub = self._subscriptions[mq.topic]
        tag_filter = client_tag_filter(sub.data)
        assert self.offset_store is not None
        await self.offset_store.update_offset(mq, offset, increase_only=False)
        # The next pull, sent before this one's messages are decoded (pipelining), when the
        # queue is not flow controlled and the answer had messages (there are likely more):
        # started in place (`eager.start`: its request goes out at once, with no task made for
        # it), its answer awaited on the next turn of this loop.
        ahead: eager.Continuation[PullResult] | eager.Finished[PullResult] | None = None
        try:
            while not pq.dropped and self._running:
                if ahead is not None:
                    call: Awaitable[PullResult] = ahead
                    ahead = None
                else:
                    if not await self._may_pull(pq):
                        continue
                    call = self._pull_once(pq, offset, sub)
                try:
                    result = await call
                except TideMQError as exc:
                    log.info("pull %s at %d failed: %s", mq, offset, exc)
                    if isinstance(exc, RemotingError):
                        # The broker may be gone (its group failed over, or its slave serves
                        # now): the route of the next pull is asked for at once.
                        await self.instance.refresh_route_after_failure(mq.topic)
                        await asyncio.sleep(PULL_ERROR_BACKOFF_UNREACHABLE)
                    else:
                        await asyncio.sleep(PULL_ERROR_BACKOFF)
                    continue
                pq.last_pull = time.monotonic()
                if (
                    result.status is PullStatus.FOUND
                    and self._running
                    and not pq.dropped
                    and (pq.locked or not self._locks_queues)
                    and not self._flow_controlled(pq)
                ):
                    ahead = eager.start(self._pull_once(pq, result.next_begin_offset, sub))
                try:
                    await self._take(pq, tag_filter, offset, result)
                except TideMQError as exc:  # a damaged answer: pulled again, as a failed pull
                    log.info("pull %s at %d: %s", mq, offset, exc)
                    _discard(ahead)
                    ahead = None
                    await asyncio.sleep(PULL_ERROR_BACKOFF)
                    continue
                offset = result.next_begin_offset
        finally:
            _discard(ahead)

    @property
    def _locks_queues(self) -> bool:
        """Orderly CLUSTERING consumers pull a queue only while they hold its broker lock."""
        return self.orderly and self.message_model is MessageModel.CLUSTERING

    async def _may_pull(self, pq: ProcessQueue) -> bool:
        """Whether to pull now; if not, it has waited a little (lock or flow control)."""
        if self._locks_queues and not pq.locked:
            await self._lock([pq])
            if not pq.locked:
                await asyncio.sleep(ORDERLY_SUSPEND)
                return False
        if self._flow_controlled(pq):
            # RocketMQ waits 50 ms and looks again; a batch consumed meanwhile wakes us sooner
            # (a fast listener empties a full queue in less than that, and would then idle).
            pq.room = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLOW_CONTROL_BACKOFF):
                    await pq.room
            pq.room = None
            return False
        return True

    async def _take(
        self, pq: ProcessQueue, tag_filter: TagFilter, offset: int, result: PullResult
    ) -> None:
        """A pull's answer: its messages to the process queue and the listener, or the offset
        moved (illegal offset; nothing new while nothing is in flight)."""
        mq = pq.queue
        assert self.offset_store is not None
        if result.status is PullStatus.FOUND:
            msgs = result.received(mq.broker_name)
            if not tag_filter.matches_all:
                msgs = [m for m in msgs if tag_filter.match_tags(m.tags)]
            added = pq.put(msgs)
            self.consume_stats.pulled(mq.topic, len(msgs))
            # Units after the last message that the broker filtered out (tags, SQL92) need no
            # consuming: once the messages are, the offset moves past them too.
            pq.max_offset_seen = max(pq.max_offset_seen, result.next_begin_offset - 1)
            if not msgs:
                # Everything filtered out by tag string (hash collisions): nothing to wait on.
                pq.max_offset_seen = max(pq.max_offset_seen, result.next_begin_offset - 1)
                if not pq.messages:
                    await self._commit(mq, result.next_begin_offset)
            self._dispatch(pq, added)
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "consumer %s: offset %d of %s is illegal, moving to %d",
                self.group,
                offset,
                mq,
                result.next_begin_offset,
            )
            await self.offset_store.update_offset(mq, result.next_begin_offset, increase_only=False)
        elif not pq.messages:
            # RocketMQ's correctTagsOffset, on NO_NEW_MSG too: after messages the broker
            # filtered out (tags, SQL92) the offset moves past them, not only to the last
            # message consumed (increase only).
            await self._commit(mq, result.next_begin_offset)

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        if len(pq.messages) > self.pull_threshold_for_queue:
            return True
        if pq.size_bytes > self.pull_threshold_size_for_queue:
            return True
        return not self.orderly and pq.span > self.consume_concurrently_max_span

    async def _pull_once(self, pq: ProcessQueue, offset: int, sub: _Subscription) -> PullResult:
        assert self.offset_store is not None
        started = time.monotonic()
        result = await pull_queue(
            self.instance,
            self.group,
            pq.queue,
            offset,
            sub.data,
            self._pull_from,
            self.offset_store,
            self.pull_batch_size,
            PULL_SUSPEND_MS,
        )
        self.consume_stats.pull_answered(pq.queue.topic, time.monotonic() - started)
        return result

    # --- consuming ----------------------------------------------------------------------------

    def _dispatch(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        if not msgs:
            return
        if self.orderly:
            self._spawn(self._consume_orderly(pq))
            return
        self._spawn(self._consume_batch(pq, msgs))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _consume_batch(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Consume one pull's messages (concurrently with other batches), then commit.

        One task per batch, not per message: the listener is called for each message in turn,
        the batch holding one of the `max_concurrency` slots, so at most that many listener
        calls run at once (a plain function's batch goes to the thread pool as one job).
        Successes and messages sent back are removed from the process queue; a message whose
        send-back failed stays (holding the committed offset below it) and is consumed again
        locally later. The offset is committed once, after the batch.
        """
        results, listened = await self._listen(pq, msgs, stop_at_failure=False)
        handled = len(results)  # fewer than the batch when pq was dropped
        succeeded = results.count(ConsumeResult.SUCCESS)
        self.consume_stats.consumed(pq.queue.topic, listened, succeeded, handled - succeeded)
        if succeeded == handled:
            pq.forget_all(msgs if handled == len(msgs) else msgs[:handled])
        else:
            for msg, result in zip(msgs, results, strict=False):
                if result is ConsumeResult.SUCCESS or await self._send_back(msg):
                    pq.forget(msg)
                elif not pq.dropped:
                    self._spawn(self._consume_later(pq, msg))
        self._made_room(pq)
        if not pq.dropped:
            offset = pq.commit_offset()
            if offset >= 0:
                await self._commit(pq.queue, offset)

    def _made_room(self, pq: ProcessQueue) -> None:
        """Wake the queue's pull loop if it waits for room that consumption has now made."""
        room = pq.room
        if room is not None and not room.done() and not self._flow_controlled(pq):
            room.set_result(None)

    async def _consume_later(self, pq: ProcessQueue, msg: ReceivedMessage) -> None:
        """A message the broker could not take back: consumed again here, later."""
        await asyncio.sleep(LOCAL_RETRY_DELAY)
        if not pq.dropped:
            await self._consume_batch(pq, [msg])

    async def _listen(
        self, pq: ProcessQueue, msgs: list[ReceivedMessage], *, stop_at_failure: bool
    ) -> tuple[list[ConsumeResult], float]:
        """The listener's results for `msgs` in order, holding one slot, and the seconds the
        listener ran (from when it had its slot: the wait for one is not its cost); fewer
        results when the queue was dropped meanwhile, or after the first failure with
        `stop_at_failure`. With enable_trace, a SubBefore record (with the wait for the slot)
        when the listener starts and a SubAfter record (its cost) when it is done."""
        ready = time.monotonic()
        async with self._slots:
            started = time.monotonic()
            trace = self.trace
            if trace is None:
                results = await self._listen_in_slot(pq, msgs, stop_at_failure)
                return results, time.monotonic() - started
            request_id = uuid.uuid4().hex.upper()
            wait_ms = round((started - ready) * 1000)
            trace.add(
                TraceRecord(
                    TraceType.SUB_BEFORE,
                    m.msg_id,
                    now_ms(),
                    self.group,
                    keys=m.keys or "",
                    request_id=request_id,
                    retry_times=m.reconsume_times,
                    slot_wait_ms=wait_ms,
                )
                for m in msgs
            )
            results = await self._listen_in_slot(pq, msgs, stop_at_failure)
            elapsed = time.monotonic() - started
        # RocketMQ's consumeRT / batch size: each message's share of the listener's time.
        cost = round(elapsed * 1000 / max(1, len(msgs)))
        done = now_ms()
        trace.add(
            TraceRecord(
                TraceType.SUB_AFTER,
                m.msg_id,
                done,
                self.group,
                keys=m.keys or "",
                cost_ms=cost,
                success=result is ConsumeResult.SUCCESS,
                request_id=request_id,
                context_code=(
                    ContextCode.SUCCESS if result is ConsumeResult.SUCCESS else ContextCode.FAILED
                ),
            )
            for m, result in zip(msgs, results, strict=False)
        )
        return results, elapsed

    async def _listen_in_slot(
        self, pq: ProcessQueue, msgs: list[ReceivedMessage], stop_at_failure: bool
    ) -> list[ConsumeResult]:
        sub = self._subscriptions[pq.queue.topic]
        if pq.queue.topic.startswith(RETRY_PREFIX):
            # each message to its own topic's listener
            return await self._listen_one_by_one(pq, msgs, stop_at_failure)
        if sub.is_async:
            return await self._listen_async(pq, sub.listener, msgs, stop_at_failure)
        return await self._listen_in_thread(pq, sub.listener, msgs, stop_at_failure)

    async def _listen_async(
        self, pq: ProcessQueue, listener: Any, msgs: list[ReceivedMessage], stop: bool
    ) -> list[ConsumeResult]:
        results = []
        success = ConsumeResult.SUCCESS
        for msg in msgs:
            if pq.dropped:
                break
            try:
                outcome = await listener(msg)
            except Exception:
                log.exception("listener of %s failed on message %s", self.group, msg.msg_id)
                outcome = ConsumeResult.RECONSUME_LATER
            if outcome is None or outcome is success:
                results.append(success)
            else:
                results.append(_consume_result(outcome))
                if stop and results[-1] is not success:
                    break
        return results

    async def _listen_in_thread(
        self, pq: ProcessQueue, listener: Any, msgs: list[ReceivedMessage], stop: bool
    ) -> list[ConsumeResult]:
        if pq.dropped:
            return []
        outcomes, all_succeeded = await self._in_thread(self._call_each, pq, listener, msgs, stop)
        if all_succeeded:
            return [ConsumeResult.SUCCESS] * len(outcomes)
        results = []
        for msg, outcome in zip(msgs, outcomes, strict=False):
            if inspect.isawaitable(outcome):
                try:
                    outcome = await outcome
                except Exception:
                    log.exception("listener of %s failed on message %s", self.group, msg.msg_id)
                    outcome = ConsumeResult.RECONSUME_LATER
            results.append(_consume_result(outcome))
        return results

    def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """`fn(*args)` off the loop: on the user's executor, else on the consume threads."""
        if self._threads is not None:
            return self._threads.submit(fn, *args)
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _call_each(
        self, pq: ProcessQueue, listener: Any, msgs: list[ReceivedMessage], stop: bool
    ) -> tuple[list[Any], bool]:
        """In a pool thread: the listener on each message, until the queue is dropped (or, with
        `stop`, after an outcome other than success: the loop awaits an awaitable one); and
        whether every outcome was a success (the loop then looks at none of them)."""
        outcomes: list[Any] = []
        success = ConsumeResult.SUCCESS
        all_succeeded = True
        for msg in msgs:
            if pq.dropped:
                break
            try:
                outcome = listener(msg)
            except Exception:
                log.exception("listener of %s failed on message %s", self.group, msg.msg_id)
                outcome = ConsumeResult.RECONSUME_LATER
            outcomes.append(outcome)
            if outcome is not None and outcome is not success:
                all_succeeded = False
                if stop:
                    break
        return outcomes, all_succeeded

    async def _listen_one_by_one(
        self, pq: ProcessQueue, msgs: list[ReceivedMessage], stop: bool
    ) -> list[ConsumeResult]:
        results = []
        for msg in msgs:
            if pq.dropped:
                break
            results.append(await self._call_listener(msg))
            if stop and results[-1] is not ConsumeResult.SUCCESS:
                break
        return results

    async def _call_listener(self, msg: ReceivedMessage) -> ConsumeResult:
        listener = self._subscriptions[msg.topic].listener
        if msg.topic.startswith(RETRY_PREFIX):
            real = msg.properties.get("RETRY_TOPIC")
            if real and real in self._subscriptions:
                listener = self._subscriptions[real].listener
                msg = msg.replace(topic=real)
        assert listener is not None
        try:
            if inspect.iscoroutinefunction(listener):
                outcome = await listener(msg)
            else:
                outcome = await self._in_thread(listener, msg)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
        except Exception:
            log.exception("listener of %s failed on message %s", self.group, msg.msg_id)
            return ConsumeResult.RECONSUME_LATER
        return _consume_result(outcome)

    async def _consume_orderly(self, pq: ProcessQueue) -> None:
        """The queue's messages one at a time in offset order, until none is left.

        Runs of up to `pull_batch_size` of the lowest messages go to the listener in order
        (a plain listener's run as one pool job), stopping at the first failure: that message is
        retried after ORDERLY_SUSPEND (or, past max_reconsume_times, sent to the broker's DLQ
        path and passed). The offset is committed after each run, up to the first message not
        consumed.
        """
        async with pq.ordered_lock:
            while pq.messages and not pq.dropped:
                run = list(itertools.islice(pq.messages.values(), self.pull_batch_size))
                results, listened = await self._listen(pq, run, stop_at_failure=True)
                succeeded = results.count(ConsumeResult.SUCCESS)
                self.consume_stats.consumed(
                    pq.queue.topic, listened, succeeded, len(results) - succeeded
                )
                suspend = False
                for msg, result in zip(run, results, strict=False):
                    if result is ConsumeResult.RECONSUME_LATER and not (
                        msg.reconsume_times >= self.max_reconsume_times
                        and await self._send_back(msg)  # to the DLQ via the broker: passed
                    ):
                        times = msg.reconsume_times + 1
                        pq.messages[msg.queue_offset] = msg.replace(reconsume_times=times)
                        suspend = True
                        break
                    pq.forget(msg)
                self._made_room(pq)
                offset = pq.commit_offset()
                if offset >= 0:
                    await self._commit(pq.queue, offset)
                if suspend:
                    await asyncio.sleep(ORDERLY_SUSPEND)

    async def _commit(self, mq: MessageQueue, offset: int) -> None:
        assert self.offset_store is not None
        await self.offset_store.update_offset(mq, offset, increase_only=True)

    async def _send_back(self, msg: ReceivedMessage) -> bool:
        """CONSUMER_SEND_MSG_BACK to the message's broker; False when it could not be done."""
        if self.message_model is MessageModel.BROADCASTING:
            return True  # RocketMQ drops failed broadcast messages (logged)
        instance = self.instance
        address = instance.find_broker_address_in_publish(msg.broker_name)
        if address is None:
            return False
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=self.group,
            delay_level=0,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            max_reconsume_times=self.max_reconsume_times,
        )
        try:
            await instance.api.consumer_send_msg_back(address, header)
        except TideMQError as exc:
            log.info("send back of %s failed (%s): consumed again locally later", msg.msg_id, exc)
            return False
        return True

    async def persist_offsets(self) -> None:
        """Commit the offsets of the queues held (to the brokers, or the local file)."""
        if self.offset_store is not None:
            await self.offset_store.persist_all(set(self.process_queues))

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """An admin reset (RESET_CONSUMER_CLIENT_OFFSET): drop the topic's queues, take the new
        offsets, commit them, and rebalance so the queues start again from there."""
        if not self._running or self.offset_store is None:
            return
        async with self._rebalance_lock:
            for mq, offset in offsets.items():
                if mq.topic != topic:
                    continue
                pq = self.process_queues.pop(mq, None)
                if pq is not None:
                    pq.dropped = True
                    if pq.task is not None:
                        pq.task.cancel()
                await self.offset_store.update_offset(mq, offset, increase_only=False)
                await self.offset_store.persist(mq)
        log.info("consumer %s: offsets of %s reset, rebalancing", self.group, topic)
        self.instance.rebalance_immediately()

    # --- orderly locks --------------------------------------------------------------------

    async def _lock(self, queues: list[ProcessQueue]) -> None:
        by_broker: dict[str, list[ProcessQueue]] = {}
        for pq in queues:
            by_broker.setdefault(pq.queue.broker_name, []).append(pq)
        for broker_name, pqs in by_broker.items():
            address = self.instance.find_broker_address_in_publish(broker_name)
            if address is None:
                continue
            body = LockBatchRequestBody(self.group, self.instance.client_id, [p.queue for p in pqs])
            try:
                granted = set(await self.instance.api.lock_batch(address, body))
            except TideMQError as exc:
                log.info("lock of %s queues failed: %s", broker_name, exc)
                continue
            for pq in pqs:
                pq.locked = pq.queue in granted

    async def _unlock_all(self, queues: list[ProcessQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for pq in queues:
            by_broker.setdefault(pq.queue.broker_name, []).append(pq.queue)
        for broker_name, mqs in by_broker.items():
            address = self.instance.find_broker_address_in_publish(broker_name)
            if address is None:
                continue
            with contextlib.suppress(TideMQError):
                await self.instance.api.unlock_batch(
                    address, UnlockBatchRequestBody(self.group, self.instance.client_id, mqs)
                )

    async def _renew_locks(self) -> None:
        while True:
            await asyncio.sleep(LOCK_RENEW_INTERVAL)
            await self._lock(list(self.process_queues.values()))


def _discard(pull: eager.Continuation[PullResult] | eager.Finished[PullResult] | None) -> None:
    """A pull sent ahead that no one will read: stopped where it waits, its failure dropped."""
    if pull is not None:
        pull.close()


def _consume_result(outcome: object) -> ConsumeResult:
    """What a listener returned, as a ConsumeResult (None is SUCCESS, anything odd a failure)."""
    if outcome is None or outcome is ConsumeResult.SUCCESS:
        return ConsumeResult.SUCCESS
    if isinstance(outcome, ConsumeResult):
        return outcome
    log.warning("listener returned %r: treated as RECONSUME_LATER", outcome)
    return ConsumeResult.RECONSUME_LATER


class PushConsumer(BlockingTwin[AsyncPushConsumer]):
    """The blocking twin of `AsyncPushConsumer`: the same parameters (see its docstring);
    listeners run in a thread pool."""

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
        orderly: bool = False,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        consume_concurrently_max_span: int = 2000,
        max_concurrency: int = 20,
        max_reconsume_times: int = 16,
        offset_store_dir: str | Path | None = None,
        executor: concurrent.futures.Executor | None = None,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        self._async = AsyncPushConsumer(
            group,
            namesrv_addr,
            config=config,
            message_model=message_model,
            consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp,
            allocate_strategy=allocate_strategy,
            orderly=orderly,
            pull_batch_size=pull_batch_size,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            consume_concurrently_max_span=consume_concurrently_max_span,
            max_concurrency=max_concurrency,
            max_reconsume_times=max_reconsume_times,
            offset_store_dir=offset_store_dir,
            executor=executor,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
            enable_trace=enable_trace,
            trace_topic=trace_topic,
        )
        self.group = group

    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        listener: Listener | None = None,
    ) -> None:
        """Consume `topic` messages matching `expression` with `listener`
        (`AsyncPushConsumer.subscribe`)."""
        self._async.subscribe(topic, expression, listener)

    def register_listener(self, listener: Listener) -> None:
        """The listener for every subscription that has none of its own."""
        self._async.register_listener(listener)
