"""What the Spark source asks of name servers and brokers: queues, their offsets, and pulls.

`BrokerClient` is asyncio and short-lived by design: a driver-side process keeps one on its own
event loop (`DriverClient`), an executor task makes one per queue range and closes it when the
range is read. Nothing here is shared across processes or pickled.

Which member of a broker group answers:
- offset look-ups (max, min, search by time) go to the master while the route lists it, else to
  the member with the lowest id (a slave serves its replicated queues);
- a member that refuses the connection or times out is tried last for DOWN_FOR seconds (a hung
  master costs one timeout, not one per request), and a request that no member answers refreshes
  the route from the name servers (a dead master disappears from it), so a query keeps going on
  the slave while the master is down.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from tidemq.client.api import BrokerAPI
from tidemq.client.config import session_credentials
from tidemq.client.errors import BrokerResponseError, RemotingError, TideMQError
from tidemq.client.protocol.models import MASTER_ID
from tidemq.client.routing import topic_route_to_subscribe_queues
from tidemq.client.spark.options import QueueKey, SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

ROUTE_TTL = 10.0
"""Seconds a route is trusted before it is fetched again (RocketMQ polls every 30 s)."""
REQUEST_TIMEOUT = 5.0
ATTEMPTS = 4
DOWN_FOR = 30.0
RETRY_INTERVAL = 0.25


class SourceError(TideMQError):
    """The source cannot go on (no route, brokers unreachable, data lost, bad records)."""


class DataLossError(SourceError):
    """Offsets the query must read are gone from the broker (retention, truncation)."""


class BrokerClient:
    """Routes of the source's topics and per-queue look-ups, with member fail-over."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.api = BrokerAPI(
            timeout=REQUEST_TIMEOUT,
            credentials=session_credentials(options.access_key, options.secret_key),
        )
        # brokerName -> {brokerId: address}, from the latest routes.
        self.addrs: dict[str, dict[int, str]] = {}
        self.queue_keys: list[QueueKey] = []
        # address -> when it last failed: tried last while that is recent.
        self.down: dict[str, float] = {}
        self._routes_at = -ROUTE_TTL

    async def close(self) -> None:
        await self.api.close()

    # --- routes -------------------------------------------------------------------------------

    async def queues(self, *, fresh: bool = False) -> list[QueueKey]:
        """Every readable queue of the topics, sorted; a topic without a route has none."""
        if fresh or time.monotonic() - self._routes_at >= ROUTE_TTL:
            await self.refresh_routes()
        return self.queue_keys

    async def refresh_routes(self) -> None:
        addrs: dict[str, dict[int, str]] = {}
        keys: set[QueueKey] = set()
        for topic in self.options.topics:
            route = await self._route(topic)
            if route is None:
                continue
            for broker in route.broker_datas:
                addrs.setdefault(broker.broker_name, {}).update(broker.broker_addrs)
            for mq in topic_route_to_subscribe_queues(topic, route):
                keys.add((mq.topic, mq.broker_name, mq.queue_id))
        self.addrs = addrs
        self.queue_keys = sorted(keys)
        self._routes_at = time.monotonic()

    async def _route(self, topic: str) -> Any:
        servers = list(self.options.namesrv_addr)
        random.shuffle(servers)
        last: TideMQError | None = None
        for server in servers:
            try:
                return await self.api.get_route(server, topic)
            except TideMQError as exc:
                last = exc
        raise SourceError(f"no name server answered for topic {topic}: {last}")

    def members(self, broker_name: str, prefer: int = MASTER_ID) -> list[tuple[int, str]]:
        """The group's (id, address), `prefer` first, then by id; unreachable ones last."""
        now = time.monotonic()

        def is_down(address: str) -> bool:
            failed = self.down.get(address)
            return failed is not None and now - failed < DOWN_FOR

        members = sorted(self.addrs.get(broker_name, {}).items())
        members.sort(key=lambda m: (is_down(m[1]), m[0] != prefer))
        return members

    # --- offsets ------------------------------------------------------------------------------

    async def on_member(
        self,
        broker_name: str,
        call: Callable[[str], Awaitable[T]],
        *,
        prefer: int = MASTER_ID,
        what: str = "request",
    ) -> T:
        """`call(address)` on the preferred member, failing over to the others and re-routing."""
        last: Exception | None = None
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(RETRY_INTERVAL * attempt)
                await self.refresh_routes()
            for _broker_id, address in self.members(broker_name, prefer):
                try:
                    return await call(address)
                except RemotingError as exc:
                    self.down[address] = time.monotonic()
                    last = exc
                except BrokerResponseError as exc:
                    # e.g. a slave that has not synchronised the topic yet: ask another member.
                    last = exc
        raise SourceError(f"{what} on broker group {broker_name} failed: {last}")

    async def offsets(self, keys: Iterable[QueueKey], which: str) -> dict[QueueKey, int]:
        """`max`, `min` or `earliest_time` of every queue, asked concurrently."""

        async def one(key: QueueKey) -> int:
            topic, broker, queue = key
            api = self.api
            lookup: Callable[[str], Awaitable[int]]
            if which == "max":

                async def lookup(address: str) -> int:
                    return await api.get_max_offset(address, topic, queue)

            elif which == "min":

                async def lookup(address: str) -> int:
                    return await api.get_min_offset(address, topic, queue)

            else:
                raise ValueError(which)
            return await self.on_member(broker, lookup, what=f"{which} offset of {key}")

        keys = list(keys)
        values = await asyncio.gather(*(one(k) for k in keys))
        return dict(zip(keys, values, strict=True))

    async def search(self, keys: Iterable[QueueKey], timestamp: int) -> dict[QueueKey, int]:
        """Per queue, the first offset stored at or after `timestamp` (max offset if none)."""

        async def one(key: QueueKey) -> int:
            topic, broker, queue = key

            async def lookup(address: str) -> int:
                return await self.api.search_offset(address, topic, queue, timestamp)

            return await self.on_member(broker, lookup, what=f"offset at {timestamp} of {key}")

        keys = list(keys)
        values = await asyncio.gather(*(one(k) for k in keys))
        return dict(zip(keys, values, strict=True))


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's when installed (a dependency of tidemq): its transports cost less per byte."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class DriverClient:
    """A `BrokerClient` on a private event loop, for the synchronous driver-side calls.

    Spark calls the stream reader's methods from one thread of one long-lived process (the
    streaming source runner); connections stay open between calls, and nothing of this object
    is pickled (the reader drops it in `__getstate__`).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.loop = new_event_loop()
        self.client = BrokerClient(options)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def queues(self, *, fresh: bool = False) -> list[QueueKey]:
        return self.run(self.client.queues(fresh=fresh))

    def offsets(self, keys: Iterable[QueueKey], which: str) -> dict[QueueKey, int]:
        return self.run(self.client.offsets(keys, which))

    def search(self, keys: Iterable[QueueKey], timestamp: int) -> dict[QueueKey, int]:
        return self.run(self.client.search(keys, timestamp))

    def addresses(self) -> dict[str, dict[int, str]]:
        return {name: dict(addrs) for name, addrs in self.client.addrs.items()}

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.run(self.client.close())
        finally:
            self.loop.close()
