"""The 5.x clients this endpoint knows: soft state kept from their settings and heartbeats.

A client is its `x-mq-client-id`. Telemetry's settings command says what it is (producer, push
or simple consumer, its group and topics, language and version); heartbeats keep it alive;
NotifyClientTermination, or `channelExpiredTimeout` without a heartbeat, forgets it.
Producers are also registered in the broker's ProducerManager under the topics they publish to
(their channel, `broker/proxy/channel.py`, carries the broker's transaction checks). Nothing is
persisted: a restarted broker learns its clients again from their next settings
(the clients send them every 5 minutes and on every new stream) and heartbeats (every 10 s).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from tidemq.broker.proxy.channel import GrpcChannel
from tidemq.broker.proxy.protocol.definition_pb2 import ClientType, Code, Settings
from tidemq.broker.proxy.status import Rejected


@dataclasses.dataclass(slots=True)
class GrpcClient:
    client_id: str
    peer: str
    language: str
    version: str
    client_type: ClientType.ValueType = ClientType.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    settings: Settings | None = None
    last_heartbeat: float = 0.0
    # The producer groups it is registered under in the broker's ProducerManager: the topics
    # it publishes to (the proxy's PGROUP for 5.x producers, which have no group).
    producer_groups: tuple[str, ...] = ()
    channel: GrpcChannel = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.channel = GrpcChannel(self.client_id, self.peer)


class GrpcClients:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, max_clients: int = 10_000
    ) -> None:
        self._clock = clock
        self._clients: dict[str, GrpcClient] = {}
        self.max_clients = max_clients

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> GrpcClient | None:
        return self._clients.get(client_id)

    def all(self) -> list[GrpcClient]:
        return list(self._clients.values())

    def touch(self, client_id: str, peer: str, language: str, version: str) -> GrpcClient:
        """The client of `client_id`, known from now on; its last heartbeat is now.
        TOO_MANY_REQUESTS for a new client when `max_clients` are known."""
        client = self._clients.get(client_id)
        if client is None:
            if len(self._clients) >= self.max_clients:
                raise Rejected(
                    Code.TOO_MANY_REQUESTS,
                    f"the broker knows {self.max_clients} 5.x clients (grpcServerMaxClients)",
                )
            client = self._clients[client_id] = GrpcClient(client_id, peer, language, version)
        client.peer, client.language, client.version = peer, language, version
        client.channel.peer = peer
        client.last_heartbeat = self._clock()
        return client

    def forget(self, client_id: str) -> GrpcClient | None:
        return self._clients.pop(client_id, None)

    def expire(self, idle_seconds: float) -> list[GrpcClient]:
        """Forget the clients silent for `idle_seconds`; they are returned."""
        deadline = self._clock() - idle_seconds
        gone = [c for c in self._clients.values() if c.last_heartbeat < deadline]
        for client in gone:
            del self._clients[client.client_id]
        return gone
