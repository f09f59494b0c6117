"""Producers: `AsyncProducer` (asyncio) and `Producer` (blocking), with the same methods.

Routing and retries follow RocketMQ's DefaultMQProducer (reference Part A §8):

- the topic's publish queues come from its route (masters only); a topic without a route is sent
  through the default topic TBW102's queues so that brokers with autoCreateTopicEnable create it;
- a queue is picked round robin; a retry avoids the broker that just failed; with
  `latency_fault_enabled` brokers that were slow or failing are avoided for a while;
- a sync send is tried 1 + `retry_times` times while the total stays within `timeout`: errors
  that RocketMQ retries (network errors, TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR,
  NO_PERMISSION, ...) go to another queue; other errors raise at once;
- SEND_OK and the "stored, but" statuses (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
  SLAVE_NOT_AVAILABLE) are results; a stored-but status is retried only when
  `retry_another_broker_when_not_store_ok` (it would store a duplicate);
- the default timeout (10 s) is longer than a broker's slaveTimeout plus syncFlushTimeout, so a
  slow SYNC_MASTER answers with its status instead of the client timing out (RocketMQ #5657).

Bodies over `compress_over` bytes are zlib-compressed (sysFlag bit 0), as RocketMQ's are.

Every send checks its message first (`client.validators`): a body that is not bytes, a topic,
tag, key or property the wire cannot carry, a delay level or queue of the wrong type raise
`InvalidMessageError` naming the field, at once, before anything reaches a connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from tidemq.client.config import ClientConfig
from tidemq.client.errors import BrokerResponseError, ClientError, RemotingError, TideMQError
from tidemq.client.instance import ClientInstance, get_instance
from tidemq.client.latency import MQFaultStrategy
from tidemq.client.message import Message, SendResult, SendStatus, UniqueIdGenerator
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.send_frame import SendFrameTemplate, send_frame_template
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.routing import TopicPublishInfo
from tidemq.client.sync import AsyncLifecycle, BlockingTwin, call, submit
from tidemq.client.trace import (
    TRACE_TOPIC,
    MessageType,
    TraceDispatcher,
    TraceRecord,
    TraceType,
    now_ms,
)
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.client.validators import check_group, check_message, check_queue
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.layout import FLAG_COMPRESSED
from tidemq.store.record import pack_host

log = logging.getLogger(__name__)

DEFAULT_SEND_TIMEOUT = 10.0
AUTO_CREATE_TOPIC = "TBW102"
# Topics whose send templates a producer keeps at most (all are dropped when it is reached).
_MAX_TEMPLATES = 4096

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]
SendCallback = Callable[[SendResult | None, BaseException | None], None]


def hash_selector(queues: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """Orderly sends: the same sharding key always maps to the same queue."""
    del msg
    digest = hashlib.md5(str(arg).encode(), usedforsecurity=False).digest()
    return queues[int.from_bytes(digest[:4], "big") % len(queues)]


def _compress(body: bytes, threshold: int) -> tuple[bytes, int]:
    """The body to send and its sysFlag: compressed only when that makes it smaller, so an
    incompressible body reaches the broker at the size the user sent (and is judged by it)."""
    if threshold > 0 and len(body) > threshold:
        compressed = zlib.compress(body, 5)
        if len(compressed) < len(body):
            return compressed, FLAG_COMPRESSED
    return body, 0


class AsyncProducer(AsyncLifecycle):
    """An asyncio producer (RocketMQ's DefaultMQProducer);
    `async with AsyncProducer("group", "127.0.0.1:9876") as p: await p.send(msg)`.

    `group` is the producer group; `namesrv_addr` the name servers ("host:port;host:port" or a
    list; default $NAMESRV_ADDR), or `config` a whole `ClientConfig`. A send takes `timeout`
    seconds at most in all and is tried 1 + `retry_times` times (module docstring);
    `retry_another_broker_when_not_store_ok` retries a stored-but status too. Bodies over
    `compress_over` bytes are compressed; a body over `max_message_size` is refused. A topic
    brokers create on first send gets `default_topic_queue_nums` queues.
    `latency_fault_enabled` avoids slow brokers for a while. `access_key` and `secret_key` sign
    requests for brokers with aclEnable; `tls` connects with TLS. `enable_trace` writes a Pub
    trace record of every send to `trace_topic` (default RMQ_SYS_TRACE_TOPIC).
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        config: ClientConfig | None = None,
        timeout: float = DEFAULT_SEND_TIMEOUT,
        retry_times: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_over: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        latency_fault_enabled: bool = False,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        check_group(group, consumer=False)
        self.group = group
        self.config = ClientConfig.for_client(
            config, namesrv_addr, access_key=access_key, secret_key=secret_key, tls=tls
        )
        self.timeout = timeout
        self.retry_times = retry_times
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.fault = MQFaultStrategy(enabled=latency_fault_enabled)
        self._ids = UniqueIdGenerator(pack_host(self.config.client_ip, 0)[:-4])
        self._instance: ClientInstance | None = None
        # The frame parts shared by the sends (and the batches) to each topic (_template).
        self._templates: dict[str, SendFrameTemplate] = {}
        self._batch_templates: dict[str, SendFrameTemplate] = {}
        # Pub records of every send (client/trace.py), with enable_trace.
        self.trace = TraceDispatcher(trace_topic or TRACE_TOPIC) if enable_trace else None

    # --- life cycle -------------------------------------------------------------------------

    @property
    def instance(self) -> ClientInstance:
        """The client instance (connections, routes) this producer shares once started."""
        if self._instance is None:
            raise ClientError(f"producer {self.group} is not started")
        return self._instance

    async def start(self) -> None:
        """Join the shared client instance and announce the group to the brokers it knows."""
        if self._instance is not None:
            return
        instance = get_instance(self.config)
        await instance.start()
        instance.register_producer(self.group)
        self._instance = instance
        # RocketMQ's start(): sendHeartbeatToAllBrokerWithLock, so that the brokers this client
        # already knows list the group at once (not only after the next periodic heartbeat).
        await instance.heartbeat_all()
        if self.trace is not None:
            await self.trace.start(AsyncProducer(self.trace.producer_group, config=self.config))

    async def stop(self) -> None:
        """Send the queued trace records, leave the client instance (closed when unused)."""
        if self.trace is not None:
            await self.trace.stop()
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.unregister_producer(self.group)
            await instance.release()

    # --- sending ----------------------------------------------------------------------------

    def _check(self, msg: Message) -> None:
        check_message(msg, self.max_message_size)

    async def _route(self, topic: str) -> tuple[TopicPublishInfo, bool]:
        """Publish queues of the topic, or of TBW102 (auto-creation) when it has no route yet."""
        info = await self.instance.publish_info(topic)
        if info is not None and info.ok:
            return info, False
        fallback = await self.instance.publish_info(AUTO_CREATE_TOPIC)
        if fallback is not None and fallback.ok:
            return fallback.for_topic(topic, self.default_topic_queue_nums), True
        raise BrokerResponseError.for_code(
            ResponseCode.TOPIC_NOT_EXIST, f"No route info of this topic: {topic}"
        )

    def _header(
        self, msg: Message, queue: MessageQueue, properties: str, sys_flag: int
    ) -> SendMessageRequestHeader:
        # positional, in field order: keywords make type() build a dict per send
        return SendMessageRequestHeader(
            self.group,
            msg.topic,
            AUTO_CREATE_TOPIC,
            self.default_topic_queue_nums,
            queue.queue_id,
            sys_flag,
            int(time.time() * 1000),
            msg.flag,
            properties,
            0,
        )

    def _template(self, topic: str, batch: bool) -> SendFrameTemplate:
        """A new template of this producer's sends to `topic`, kept for the next ones (a send
        takes the kept one itself while the group and the default queue count are its own)."""
        templates = self._batch_templates if batch else self._templates
        if len(templates) >= _MAX_TEMPLATES:
            templates.clear()
        template = templates[topic] = send_frame_template(
            self.group, topic, AUTO_CREATE_TOPIC, self.default_topic_queue_nums, batch
        )
        return template

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer; retries per the module docstring.

        To a queue of the route picked round robin, or `queue`, or the one `selector(queues,
        msg, arg)` returns; within `timeout` seconds (default: the producer's)."""
        check_message(msg, self.max_message_size)  # _check, one call deep
        if queue is not None:
            check_queue(queue, msg.topic)
        if selector is not None and not callable(selector):
            raise ClientError(f"a queue selector must be callable, not {type(selector).__name__}")
        uniq = self._ids.next_id()
        body = msg.body
        threshold = self.compress_over
        if threshold > 0 and len(body) > threshold:  # _compress's first test, inline
            body, sys_flag = _compress(body, threshold)
        else:
            sys_flag = 0
        properties = msg.encoded_properties(uniq)
        if self.trace is None:
            return await self._send_with_retries(
                msg, body, properties, sys_flag, uniq, queue, selector, arg, timeout, batch=False
            )
        kind = MessageType.DELAY if msg.delay_level > 0 else MessageType.NORMAL
        if selector is not None:
            kind = MessageType.ORDER
        started = time.monotonic()
        try:
            result = await self._send_with_retries(
                msg, body, properties, sys_flag, uniq, queue, selector, arg, timeout, batch=False
            )
        except TideMQError:
            self.trace_pub(msg, uniq, None, started, kind)
            raise
        self.trace_pub(msg, uniq, result, started, kind)
        return result

    def trace_pub(
        self,
        msg: Message,
        uniq: str,
        result: SendResult | None,
        started: float,
        kind: MessageType,
    ) -> None:
        """A Pub record of a send (`result` None: it failed)."""
        if self.trace is None:
            return
        address = ""
        if result is not None and self._instance is not None:
            name = result.message_queue.broker_name
            address = self._instance.find_broker_address_in_publish(name) or ""
        self.trace.add(
            [
                TraceRecord(
                    TraceType.PUB,
                    uniq,
                    now_ms(),
                    self.group,
                    msg.topic,
                    msg.tags or "",
                    " ".join(msg.key_list),
                    address,
                    len(msg.body),
                    int((time.monotonic() - started) * 1000),
                    kind,
                    result.offset_msg_id if result is not None else "",
                    result is not None and result.ok,
                )
            ]
        )

    async def send_batch(
        self, msgs: Sequence[Message], *, timeout: float | None = None
    ) -> SendResult:
        """One SEND_BATCH_MESSAGE: messages of one topic, stored contiguously in one queue."""
        if not isinstance(msgs, Sequence):
            raise ClientError(f"a batch must be a sequence of messages, not {type(msgs).__name__}")
        if not msgs:
            raise ClientError("an empty batch")
        # Each message first: the batch rules below compare fields of checked types.
        for msg in msgs:
            self._check(msg)
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise ClientError("a batch must hold messages of one topic")
        if any(m.delay_level > 0 for m in msgs):
            raise ClientError("delayed messages cannot be sent in a batch")
        ids = [self._ids.next_id() for _ in msgs]
        body = encode_batch_body(
            [(m.flag, m.body, m.encoded_properties(i)) for m, i in zip(msgs, ids, strict=True)]
        )
        carrier = Message(topic, body)
        return await self._send_with_retries(
            carrier, body, "", 0, ",".join(ids), None, None, None, timeout, batch=True
        )

    async def send_orderly(
        self, msg: Message, sharding_key: object, *, timeout: float | None = None
    ) -> SendResult:
        """Messages with one sharding key go to one queue, in order (no retry on another queue)."""
        return await self.send(msg, selector=hash_selector, arg=sharding_key, timeout=timeout)

    def send_async(
        self, msg: Message, callback: SendCallback | None = None, *, timeout: float | None = None
    ) -> asyncio.Task[SendResult]:
        """Start a send; the task's result is the SendResult, and `callback(result, error)` runs."""
        task = asyncio.get_running_loop().create_task(self.send(msg, timeout=timeout))
        if callback is not None:

            def done(t: asyncio.Task[SendResult]) -> None:
                if t.cancelled():
                    callback(None, asyncio.CancelledError())
                elif t.exception() is not None:
                    callback(None, t.exception())
                else:
                    callback(t.result(), None)

            task.add_done_callback(done)
        return task

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer: no result, no retry."""
        self._check(msg)
        info, _auto = await self._route(msg.topic)
        queue = self.fault.select_one_message_queue(info, None)
        address = self.instance.find_broker_address_in_publish(queue.broker_name)
        if address is None:
            raise ClientError(f"broker {queue.broker_name} has no master address")
        body, sys_flag = _compress(msg.body, self.compress_over)
        header = self._header(msg, queue, msg.encoded_properties(self._ids.next_id()), sys_flag)
        await self.instance.api.send_oneway(address, header, body)

    async def _send_with_retries(
        self,
        msg: Message,
        body: bytes,
        properties: str,
        sys_flag: int,
        uniq: str,
        fixed_queue: MessageQueue | None,
        selector: QueueSelector | None,
        arg: Any,
        timeout: float | None,
        *,
        batch: bool,
    ) -> SendResult:
        budget = timeout if timeout is not None else self.timeout
        started = time.monotonic()
        attempts = 1 if fixed_queue is not None or selector is not None else 1 + self.retry_times
        last_broker: str | None = None
        last_error: TideMQError | None = None
        instance = self._instance
        if instance is None:
            instance = self.instance  # raises: not started
        fault = self.fault
        topic = msg.topic
        template = (self._batch_templates if batch else self._templates).get(topic)
        if (
            template is None
            or template.producer_group is not self.group
            or template.default_topic_queue_nums != self.default_topic_queue_nums
        ):
            template = self._template(topic, batch)
        for attempt in range(attempts):
            # the first try has the whole budget (asking the clock again would only take off
            # the few microseconds since `started`)
            remaining = budget - (time.monotonic() - started) if attempt else budget
            if remaining <= 0:
                break
            # A known, usable route (TopicPublishInfo.ok, inline) without the two awaits of
            # _route (most sends)
            info = instance.publish_infos.get(topic)
            if info is None or not info.queues:
                info, _auto = await self._route(topic)
            if fixed_queue is not None:
                queue = fixed_queue
            elif selector is not None:
                queue = check_queue(selector(list(info.queues), msg, arg), None, "selector")
            elif fault.enabled:
                queue = fault.select_one_message_queue(info, last_broker)
            else:  # what the strategy does when disabled, one call deep
                queue = info.select_one_message_queue(last_broker)
            address = instance.find_broker_address_in_publish(queue.broker_name)
            if address is None:
                await instance.update_route(topic)
                address = instance.find_broker_address_in_publish(queue.broker_name)
            if address is None:
                last_error = ClientError(f"broker {queue.broker_name} has no master address")
                last_broker = queue.broker_name
                continue
            sent_at = time.monotonic() if fault.enabled else 0.0
            try:
                result = await instance.api.send_templated(
                    address,
                    template,
                    queue,
                    uniq,
                    sys_flag,
                    int(time.time() * 1000),
                    msg.flag,
                    properties,
                    body,
                    timeout=remaining,
                )
            except (RemotingError, BrokerResponseError) as exc:
                fault.update_fault_item(queue.broker_name, 30_000, isolation=True)
                # What the error tree marks retriable (client/errors.py): RocketMQ's
                # retryResponseCodes, SYSTEM_BUSY and FLOW_CONTROL, and any remoting failure.
                retriable = exc.retriable
                log.info("send to %s (attempt %d) failed: %s", queue.broker_name, attempt + 1, exc)
                last_error, last_broker = exc, queue.broker_name
                # The group may have a new master (failover): ask the name servers now rather
                # than at the next 30 s refresh, so the retry and the sends after it go there.
                await instance.refresh_route_after_failure(topic)
                if not retriable:
                    raise
                continue
            if fault.enabled:
                fault.update_fault_item(
                    queue.broker_name, (time.monotonic() - sent_at) * 1000, isolation=False
                )
            if (
                result.status is SendStatus.SEND_OK
                or not self.retry_another_broker_when_not_store_ok
            ):
                return result
            await instance.refresh_route_after_failure(topic)
            last_broker = queue.broker_name
        if last_error is not None:
            raise last_error
        raise RemotingError(f"send of a message to {msg.topic} timed out after {budget:.1f} s")


class Producer(BlockingTwin[AsyncProducer]):
    """The blocking twin of `AsyncProducer`: the same parameters (see its docstring), the same
    methods, each waiting for its result; `with Producer(...) as p: p.send(msg)`."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        config: ClientConfig | None = None,
        timeout: float = DEFAULT_SEND_TIMEOUT,
        retry_times: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_over: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        latency_fault_enabled: bool = False,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        self._async = AsyncProducer(
            group,
            namesrv_addr,
            config=config,
            timeout=timeout,
            retry_times=retry_times,
            retry_another_broker_when_not_store_ok=retry_another_broker_when_not_store_ok,
            compress_over=compress_over,
            max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums,
            latency_fault_enabled=latency_fault_enabled,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
            enable_trace=enable_trace,
            trace_topic=trace_topic,
        )
        self.group = group

    def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer (`AsyncProducer.send`)."""
        return call(self._async.send(msg, queue=queue, selector=selector, arg=arg, timeout=timeout))

    def send_batch(self, msgs: Sequence[Message], *, timeout: float | None = None) -> SendResult:
        """One SEND_BATCH_MESSAGE: messages of one topic, stored contiguously in one queue."""
        return call(self._async.send_batch(msgs, timeout=timeout))

    def send_orderly(
        self, msg: Message, sharding_key: object, *, timeout: float | None = None
    ) -> SendResult:
        """Messages with one sharding key go to one queue, in order (no retry on another queue)."""
        return call(self._async.send_orderly(msg, sharding_key, timeout=timeout))

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer: no result, no retry."""
        call(self._async.send_oneway(msg))

    def send_async(
        self, msg: Message, callback: SendCallback | None = None, *, timeout: float | None = None
    ) -> concurrent.futures.Future[SendResult]:
        """A thread-safe future of the SendResult; `callback(result, error)` runs on completion."""
        future = submit(self._async.send(msg, timeout=timeout))
        if callback is not None:

            def done(f: concurrent.futures.Future[SendResult]) -> None:
                error = f.exception()
                callback(None if error else f.result(), error)

            future.add_done_callback(done)
        return future
