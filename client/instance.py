"""The client instance (RocketMQ's MQClientInstance): what producers and consumers share.

One instance per client id and event loop holds the connections, the topic routes (refreshed
from the name servers every pollNameServerInterval), the broker address table, the heartbeats to
every broker (every heartbeatBrokerInterval, and at once when a producer or consumer joins), the
rebalance service (every 20 s, and at once on NOTIFY_CONSUMER_IDS_CHANGED), and the periodic
persistence of consumer offsets. Brokers that vanish from every route are forgotten
(cleanOfflineBroker).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.errors import TideMQError
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.admin import MapForm, ResetOffsetBody, ResetOffsetRequestHeader
from tidemq.client.protocol.headers import (
    CheckTransactionStateRequestHeader,
    HeaderFieldError,
    decode,
)
from tidemq.client.protocol.heartbeat import (
    CheckClientRequestBody,
    ConsumerData,
    ExpressionType,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    SubscriptionData,
)
from tidemq.client.protocol.models import MASTER_ID, TopicRouteData
from tidemq.client.remoting.codes import LanguageCode, RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.routing import (
    FindBrokerResult,
    TopicPublishInfo,
    find_broker_address_in_subscribe,
    topic_route_to_subscribe_queues,
)
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.connection import RemotingConnection
from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.store.record import PROPERTY_PRODUCER_GROUP, decode_record

log = logging.getLogger(__name__)

REBALANCE_INTERVAL = 20.0
# Seconds between the route requests that failures make for one topic (a failover shows in the
# route within a fraction of a second of the election; a busy broker is not a reason to ask the
# name servers at every refusal).
ROUTE_REFRESH_MIN_INTERVAL = 0.2


class ConsumerHandle(Protocol):
    """What the instance needs of a consumer."""

    group: str

    def consumer_data(self) -> ConsumerData: ...

    async def do_rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...


# A producer's answer to CHECK_TRANSACTION_STATE: (connection, the half message, its
# tranStateTableOffset, its commitLogOffset).
TransactionCheckHandler = Callable[
    [RemotingConnection, ReceivedMessage, int, int], Coroutine[Any, Any, None]
]


class ClientInstance(Service):
    """Children: the periodic route refresh, heartbeat, offset persistence and rebalance; at
    stop, after them, the connections close and the instance leaves the registry."""

    def __init__(self, config: ClientConfig) -> None:
        super().__init__()
        self.config = config
        self.client_id = config.client_id
        self.remoting = RemotingClient(
            self._serve,
            connect_timeout=config.mq_client_api_timeout,
            tls=config.tls.context() if config.tls is not None else None,
        )
        self.api = BrokerAPI(
            self.remoting,
            serialize_type=config.serialize_type,
            timeout=config.mq_client_api_timeout,
            credentials=config.credentials,
        )
        self.routes: dict[str, TopicRouteData] = {}
        self.publish_infos: dict[str, TopicPublishInfo] = {}
        self.subscribe_queues: dict[str, set[MessageQueue]] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, ConsumerHandle] = {}
        self.transaction_checkers: dict[str, TransactionCheckHandler] = {}
        self._users = 0
        self._rebalance_now = asyncio.Event()
        self._route_lock = asyncio.Lock()
        self._refreshed_after_failure: dict[str, float] = {}  # topic -> when it was asked
        self._resets: set[asyncio.Task[None]] = set()
        self.add_child(Step(stop=self._close))
        config = self.config
        for interval, work, name in (
            (config.poll_name_server_interval, self.refresh_routes, "routes"),
            (config.heartbeat_broker_interval, self._heartbeat_and_clean, "heartbeat"),
            (config.persist_consumer_offset_interval, self.persist_offsets, "offsets"),
        ):
            self.add_child(BackgroundTask(functools.partial(self._every, interval, work), name))
        self.add_child(BackgroundTask(self._rebalance_loop, "rebalance"))

    # --- life cycle -------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.running

    async def start(self) -> None:
        """Start on the first user's start; later users only count themselves in."""
        self._users += 1
        if self.running:
            return
        if not self.config.namesrv_addr:
            raise TideMQError("no name server address: set namesrv_addr or NAMESRV_ADDR")
        await super().start()

    async def release(self) -> None:
        """A user is done with the instance: stop once the last user has released it."""
        self._users -= 1
        if self._users > 0:
            return
        await self.stop()

    async def _close(self) -> None:
        await self.api.close()
        _forget(self)

    async def _every(self, interval: float, work: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await work()
            except TideMQError as exc:
                log.warning("%s failed: %s", getattr(work, "__name__", "task"), exc)
            except Exception:
                log.exception("%s failed", getattr(work, "__name__", "task"))

    # --- routes -----------------------------------------------------------------------------

    async def refresh_route_after_failure(self, topic: str) -> None:
        """A send or pull failed on a broker: ask for `topic`'s route now rather than at the
        next periodic refresh (a failover: a new master, a dead one gone from the route), at most
        once per ROUTE_REFRESH_MIN_INTERVAL so that a burst of failures asks once."""
        now = time.monotonic()
        last = self._refreshed_after_failure.get(topic, -math.inf)
        if now - last < ROUTE_REFRESH_MIN_INTERVAL:
            return
        self._refreshed_after_failure[topic] = now
        try:
            await self.update_route(topic)
        except TideMQError as exc:  # the name servers down too: the route stays as it was
            log.info("route refresh of %s after a failure failed: %s", topic, exc)

    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Ask the name servers (random start, each in turn) for `topic`'s route."""
        servers = list(self.config.namesrv_addr)
        start = random.randrange(len(servers))
        last_error: TideMQError | None = None
        for i in range(len(servers)):
            address = servers[(start + i) % len(servers)]
            try:
                route = await self.api.get_route(address, topic)
            except TideMQError as exc:
                last_error = exc
                continue
            if route is not None:
                self._store_route(topic, route)
            return route
        if last_error is not None:
            raise last_error
        return None

    def _store_route(self, topic: str, route: TopicRouteData) -> None:
        self.routes[topic] = route
        for broker in route.broker_datas:
            self.broker_addrs[broker.broker_name] = dict(broker.broker_addrs)
        self.publish_infos[topic] = TopicPublishInfo.from_route(topic, route)
        queues = topic_route_to_subscribe_queues(topic, route)
        previous = self.subscribe_queues.get(topic)
        self.subscribe_queues[topic] = queues
        if previous != queues and self._subscribed(topic):
            # New or vanished queues (a retry topic just created, a broker back): rebalance
            # now rather than at the next 20 s round.
            self.rebalance_immediately()

    def _subscribed(self, topic: str) -> bool:
        return any(
            s.topic == topic
            for consumer in self.consumers.values()
            for s in consumer.consumer_data().subscriptions
        )

    async def refresh_routes(self) -> None:
        topics = set(self.routes) | set(self.publish_infos)
        for consumer in list(self.consumers.values()):
            topics |= {s.topic for s in consumer.consumer_data().subscriptions}
        for topic in sorted(topics):
            try:
                await self.update_route(topic)
            except TideMQError as exc:
                log.debug("route of %s not refreshed: %s", topic, exc)

    async def publish_info(self, topic: str) -> TopicPublishInfo | None:
        info = self.publish_infos.get(topic)
        if info is None or not info.ok:
            async with self._route_lock:
                info = self.publish_infos.get(topic)
                if info is None or not info.ok:
                    await self.update_route(topic)
                    info = self.publish_infos.get(topic)
        return info

    async def subscribe_queue_set(self, topic: str) -> set[MessageQueue]:
        if topic not in self.subscribe_queues:
            await self.update_route(topic)
        return self.subscribe_queues.get(topic, set())

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        addresses = self.broker_addrs.get(broker_name)  # no empty dict made per send
        return None if addresses is None else addresses.get(MASTER_ID)

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> FindBrokerResult | None:
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        return find_broker_address_in_subscribe(addrs, broker_id, only_this_broker)

    async def find_offset_broker(self, broker_name: str) -> str | None:
        """Where a group's offsets of a queue go: the master, else (master gone) a slave."""
        found = self.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        if found is None:
            await self.refresh_routes()
            found = self.find_broker_address_in_subscribe(broker_name, MASTER_ID, False)
        return found.address if found else None

    def any_broker_of_topic(self, topic: str) -> str | None:
        route = self.routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        broker = random.choice(route.broker_datas)
        return broker.select_broker_addr()

    # --- heartbeats ---------------------------------------------------------------------------

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            self.client_id,
            [ProducerData(g) for g in sorted(self.producer_groups)],
            [c.consumer_data() for c in self.consumers.values()],
        )

    async def heartbeat_all(self) -> None:
        data = self.heartbeat_data()
        if not data.producers and not data.consumers:
            return
        tasks = []
        for addrs in list(self.broker_addrs.values()):
            for broker_id, address in addrs.items():
                if broker_id != MASTER_ID and not data.consumers:
                    continue  # producer-only clients skip slaves, as RocketMQ's do
                tasks.append(self._heartbeat(address, data))
        await asyncio.gather(*tasks)

    async def _heartbeat(self, address: str, data: HeartbeatData) -> None:
        try:
            await self.api.heartbeat(address, data)
        except TideMQError as exc:
            log.debug("heartbeat to %s failed: %s", address, exc)

    async def _heartbeat_and_clean(self) -> None:
        self.clean_offline_brokers()
        await self.heartbeat_all()

    def clean_offline_brokers(self) -> None:
        """Forget broker addresses that no cached route mentions any more."""
        live: dict[str, set[str]] = {}
        for route in self.routes.values():
            for broker in route.broker_datas:
                live.setdefault(broker.broker_name, set()).update(broker.broker_addrs.values())
        for name, addrs in list(self.broker_addrs.items()):
            kept = {i: a for i, a in addrs.items() if a in live.get(name, set())}
            if kept:
                self.broker_addrs[name] = kept
            else:
                del self.broker_addrs[name]

    # --- producers and consumers ------------------------------------------------------------

    def register_producer(self, group: str) -> None:
        self.producer_groups.add(group)

    def unregister_producer(self, group: str) -> None:
        self.producer_groups.discard(group)

    def register_transaction_checker(self, group: str, handler: TransactionCheckHandler) -> None:
        self.transaction_checkers[group] = handler

    def unregister_transaction_checker(self, group: str) -> None:
        self.transaction_checkers.pop(group, None)

    async def register_consumer(self, consumer: ConsumerHandle) -> None:
        if consumer.group in self.consumers:
            raise TideMQError(
                f"consumer group {consumer.group} is already registered in this client"
            )
        self.consumers[consumer.group] = consumer
        for subscription in consumer.consumer_data().subscriptions:
            with contextlib.suppress(TideMQError):
                await self.update_route(subscription.topic)
        await self.heartbeat_all()
        self.rebalance_immediately()

    async def check_subscriptions(
        self, group: str, subscriptions: Iterable[SubscriptionData]
    ) -> None:
        """RocketMQ's checkClientInBroker: each master serving a topic with an SQL92
        subscription must take it (enablePropertyFilter, an expression that compiles); its
        refusal is raised. Topics without a route yet are left to the pulls."""
        for subscription in subscriptions:
            if subscription.expression_type is ExpressionType.TAG:
                continue
            route = await self.update_route(subscription.topic)
            if route is None:
                continue
            body = CheckClientRequestBody(self.client_id, group, subscription)
            for broker in route.broker_datas:
                address = broker.broker_addrs.get(MASTER_ID)
                if address is not None:
                    await self.api.check_client_config(address, body)

    async def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)
        for addrs in list(self.broker_addrs.values()):
            for address in addrs.values():
                with contextlib.suppress(TideMQError):
                    await self.api.unregister_client(address, self.client_id, None, group)

    def rebalance_immediately(self) -> None:
        self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_now.wait(), REBALANCE_INTERVAL)
            self._rebalance_now.clear()
            await self.rebalance_all()

    async def rebalance_all(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.do_rebalance()
            except TideMQError as exc:
                log.warning("rebalance of %s failed: %s", consumer.group, exc)
            except Exception:
                log.exception("rebalance of %s failed", consumer.group)

    async def persist_offsets(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.persist_offsets()

    # --- requests from brokers ----------------------------------------------------------

    async def _serve(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.info(
                "consumer ids of group %s changed (told by %s): rebalance now",
                request.ext_fields.get("consumerGroup"),
                connection.peer,
            )
            self.rebalance_immediately()
            return None
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._reset_offset(connection, request)
            return None
        if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return await self._running_info(request)
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction(connection, request)
            return None
        return RemotingCommand.response_to(
            request,
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"request code {request.code} not supported by the tidemq client",
        )

    async def _running_info(self, request: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (an admin's consumerStatus, through the broker): the
        group's consumer here describes itself, as RocketMQ's ClientRemotingProcessor."""
        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        describe = getattr(consumer, "running_info", None)
        if describe is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{group}> not exist in this consumer",
            )
        info = await describe()
        form = MapForm.FASTJSON if request.language == LanguageCode.JAVA else MapForm.PAIRS
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=info.encode(form))

    def _reset_offset(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (an admin's resetOffsetByTime): hand the new offsets
        to the group's consumer if it can take them (a `reset_offset(topic, offsets)` method);
        the broker has committed them already, so a consumer without one picks them up when
        it next reads its offsets from the broker (a restart)."""
        try:
            header = decode(ResetOffsetRequestHeader, request.ext_fields)
            offsets = ResetOffsetBody.decode(request.body).offset_table
        except (HeaderFieldError, BodyDecodeError) as exc:
            log.warning("bad offset reset from %s: %s", connection.peer, exc)
            return
        consumer = self.consumers.get(header.group)
        reset = getattr(consumer, "reset_offset", None)
        if reset is None:
            log.info(
                "offset reset of group %s from %s: no consumer here takes it",
                header.group,
                connection.peer,
            )
            return
        log.info(
            "offset reset of group %s topic %s from %s: %d queues",
            header.group,
            header.topic,
            connection.peer,
            len(offsets),
        )
        task = asyncio.get_running_loop().create_task(reset(header.topic, offsets))
        self._resets.add(task)
        task.add_done_callback(self._resets.discard)

    def _check_transaction(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE: the half message goes to its group's producer here (PGROUP);
        its answer is sent on the same connection (the producer's `_on_check`)."""
        try:
            header = decode(CheckTransactionStateRequestHeader, request.ext_fields)
            stored = decode_record(memoryview(request.body), check_crc=False)
        except (HeaderFieldError, ValueError) as exc:
            log.warning("bad transaction check from %s: %s", connection.peer, exc)
            return
        msg = ReceivedMessage.from_stored(stored, "")
        group = stored.properties.get(PROPERTY_PRODUCER_GROUP, "")
        handler = self.transaction_checkers.get(group)
        if handler is None:
            log.info(
                "transaction check from %s for group %r: no such producer here",
                connection.peer,
                group,
            )
            return
        task = asyncio.get_running_loop().create_task(
            handler(connection, msg, header.tran_state_table_offset, header.commit_log_offset)
        )
        self._resets.add(task)
        task.add_done_callback(self._resets.discard)


_instances: dict[tuple[str, int], ClientInstance] = {}


def get_instance(config: ClientConfig) -> ClientInstance:
    """The instance for this client id on the running loop, created on first use."""
    key = (config.client_id, id(asyncio.get_running_loop()))
    instance = _instances.get(key)
    if instance is None:
        instance = ClientInstance(config)
        _instances[key] = instance
    return instance


def _forget(instance: ClientInstance) -> None:
    for key, value in list(_instances.items()):
        if value is instance:
            del _instances[key]
