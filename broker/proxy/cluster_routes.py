"""A topic's queues across the cluster, each at the gRPC endpoint of the broker that has it.

RocketMQ 5's local-mode proxy asks the name servers for the topic's route and gives every
broker its own host with the proxy's gRPC port, which assumes one broker per host. tidemq's
topologies run several brokers on one host, each with a gRPC port of its own, so the port of
another broker is asked of it: its `grpcServerPort` as GET_BROKER_CONFIG reports it (the bound
port), remembered for `ttl` seconds. A broker that does not serve gRPC (-1, or an older one
that reports no such key) or cannot be reached is left out of the answer; this broker answers
for itself without a call.

Only each group's master (brokerId 0) is listed: a 5.x producer sends to masters only, and POP
consumption reads the master. Without name servers, or when none answers, the answer is this
broker's own queues (as before the cluster is known); a topic unknown to the name servers is
looked up here too (it may not be registered yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from tidemq.broker.proxy import routes
from tidemq.broker.proxy.protocol.definition_pb2 import Broker, Endpoints, MessageQueue, Resource
from tidemq.client.api import BrokerAPI
from tidemq.client.protocol.admin import decode_properties_text
from tidemq.client.protocol.models import MASTER_ID, TopicConfig, TopicRouteData
from tidemq.client.remoting.codes import RequestCode
from tidemq.common.errors import TideMQError

log = logging.getLogger(__name__)

PORT_TTL_SECONDS: Final = 30.0
UNKNOWN_PORT_TTL_SECONDS: Final = 5.0  # a broker not reached is asked again soon
# Calls made while a client waits for QueryRoute (its request timeout is 3 s by default): a
# name server or broker that does not answer within this is passed over.
CALL_TIMEOUT_SECONDS: Final = 1.0


class ClusterRoutes:
    def __init__(
        self,
        api: BrokerAPI,
        name_servers: Callable[[], list[str]],
        own_broker: Callable[[], Broker],
        *,
        ttl: float = PORT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.name_servers = name_servers
        self.own_broker = own_broker
        self.ttl = ttl
        self.clock = clock
        self._ports: dict[str, tuple[float, int]] = {}  # broker address -> (expiry, port)

    async def queues(self, topic: Resource, name: str) -> list[MessageQueue] | None:
        """The topic's queues on every master that serves gRPC; None when the name servers
        cannot say (none configured or reachable, or the topic unknown to them)."""
        route = await self._route(name)
        if route is None:
            return None
        own = self.own_broker()
        masters = {b.broker_name: b.broker_addrs.get(MASTER_ID) for b in route.broker_datas}
        queues: list[MessageQueue] = []
        for data in sorted(route.queue_datas, key=lambda d: d.broker_name):
            address = masters.get(data.broker_name)
            if address is None:
                continue
            if data.broker_name == own.name and own.id == MASTER_ID:
                broker = own
            else:
                endpoints = await self._endpoints(address)
                if endpoints is None:
                    continue
                broker = Broker(name=data.broker_name, id=MASTER_ID, endpoints=endpoints)
            config = TopicConfig(name, data.read_queue_nums, data.write_queue_nums, data.perm)
            queues += routes.message_queues(topic, config, data.perm, broker)
        return queues

    async def _route(self, topic: str) -> TopicRouteData | None:
        for namesrv in self.name_servers():
            try:
                return await self.api.get_route(namesrv, topic)
            except (TideMQError, OSError, TimeoutError) as exc:
                log.debug("route of %s from %s: %s", topic, namesrv, exc)
        return None

    async def _endpoints(self, address: str) -> Endpoints | None:
        host = address.rpartition(":")[0]
        port = await self.grpc_port(address)
        return routes.endpoints(host, port) if port > 0 else None

    async def grpc_port(self, address: str) -> int:
        """The gRPC port of the broker at `address` (remoting), -1 when it serves none."""
        now = self.clock()
        known = self._ports.get(address)
        if known is not None and known[0] > now:
            return known[1]
        port, ttl = -1, UNKNOWN_PORT_TTL_SECONDS
        try:
            request = self.api.request(RequestCode.GET_BROKER_CONFIG)
            response = await self.api.call(address, request, timeout=CALL_TIMEOUT_SECONDS)
            text = decode_properties_text(response.body).get("grpcServerPort", "-1").strip()
            port = int(text) if text.lstrip("-").isdigit() else -1
            ttl = self.ttl
        except (TideMQError, OSError, TimeoutError) as exc:
            log.info("gRPC port of broker %s unknown: %s", address, exc)
        self._ports[address] = (now + ttl, port)
        return port
