"""What operators see of the RocketMQ 5 side of this broker (bodies in
client/protocol/operators5.py):

- GET_GRPC_CLIENT_LIST (tidemq's own): the 5.x clients connected over gRPC, with the language
  and version they name in their settings (user agent), else in their headers;
- GET_POP_PROGRESS (tidemq's own): per group, topic and queue, where the group pops next, what
  it holds in flight (still invisible or waiting for revival) and the acknowledgements read;
- GET_TIMER_METRICS (61, RocketMQ 5's): timer messages waiting per real topic.

Read-only views of the gRPC endpoint's client registry, the POP revive ledgers and the timer
metrics; nothing here changes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import ClassVar

from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.pop.service import PopService
from tidemq.broker.proxy.clients import GrpcClient, GrpcClients
from tidemq.broker.proxy.protocol.definition_pb2 import ClientType, Language
from tidemq.broker.timer_metrics import TimerMetrics
from tidemq.client.protocol.operators5 import GrpcClientInfo, PopQueueProgress
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.json_body import dumps
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.message_store import MessageStore


def client_info(client: GrpcClient, now: float, mono_now: float) -> GrpcClientInfo:
    """One registry entry as operators read it (`now`: wall clock, `mono_now`: the registry's
    clock, both in seconds)."""
    settings = client.settings
    language, version = client.language, client.version
    topics: list[str] = []
    if settings is not None:
        agent = settings.user_agent
        if agent.language != Language.LANGUAGE_UNSPECIFIED:
            language = Language.Name(agent.language)
        version = agent.version or version
        if settings.HasField("publishing"):
            topics = [t.name for t in settings.publishing.topics]
        elif settings.HasField("subscription"):
            topics = [e.topic.name for e in settings.subscription.subscriptions]
    heartbeat_ms = int((now - (mono_now - client.last_heartbeat)) * 1000)
    return GrpcClientInfo(
        client_id=client.client_id,
        client_addr=client.peer,
        language=language,
        version=version,
        client_type=ClientType.Name(client.client_type).removeprefix("CLIENT_TYPE_"),
        group=client.group,
        topics=tuple(sorted(set(topics))),
        last_heartbeat_timestamp=heartbeat_ms,
    )


def pop_progress(
    pop: PopService,
    store: MessageStore,
    offsets: ConsumerOffsetManager,
    now_ms: int,
    group: str = "",
    topic: str = "",
) -> list[PopQueueProgress]:
    """Every (group, topic, queue) the revive ledgers know, optionally of one group / topic."""
    flying: dict[tuple[str, str, int], tuple[int, int]] = {}
    acked: dict[tuple[str, str, int], int] = {}
    for ledger in pop.ledgers.values():
        for key, (in_flight, invisible) in ledger.queue_progress(now_ms).items():
            was = flying.get(key, (0, 0))
            flying[key] = (was[0] + in_flight, was[1] + invisible)
        for key, count in ledger.acked.items():
            acked[key] = acked.get(key, 0) + count
    rows = []
    for key in sorted(set(flying) | set(acked)):
        q_topic, q_group, queue_id = key
        if (group and q_group != group) or (topic and q_topic != topic):
            continue
        in_flight, invisible = flying.get(key, (0, 0))
        rows.append(
            PopQueueProgress(
                group=q_group,
                topic=q_topic,
                queue_id=queue_id,
                broker_offset=store.max_offset_in_queue(q_topic, queue_id),
                pop_offset=max(0, offsets.query(q_group, q_topic, queue_id)),
                in_flight=in_flight,
                invisible=invisible,
                acked=acked.get(key, 0),
            )
        )
    return rows


class Operators5Processor:
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.GET_GRPC_CLIENT_LIST: "grpc_clients",
        RequestCode.GET_POP_PROGRESS: "pop_progress",
        RequestCode.GET_TIMER_METRICS: "timer_metrics",
    }

    def __init__(
        self,
        broker_name: Callable[[], str],
        clients: Callable[[], GrpcClients | None],
        pop: PopService,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        timer_metrics: TimerMetrics,
    ) -> None:
        self.broker_name = broker_name
        self.clients = clients
        self.pop = pop
        self.store = store
        self.offsets = offsets
        self.timer_counts = timer_metrics

    async def grpc_clients(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        registry = self.clients()
        now, mono_now = time.time(), time.monotonic()
        known = registry.all() if registry is not None else []
        rows = [client_info(c, now, mono_now).to_dict() for c in known]
        rows.sort(key=lambda r: (r["group"], r["clientId"]))
        body = {"brokerName": self.broker_name(), "clients": rows}
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=dumps(body))

    async def pop_progress(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        fields = request.ext_fields
        rows = pop_progress(
            self.pop,
            self.store,
            self.offsets,
            int(time.time() * 1000),
            group=fields.get("consumerGroup", ""),
            topic=fields.get("topic", ""),
        )
        body = {"brokerName": self.broker_name(), "queues": [r.to_dict() for r in rows]}
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=dumps(body))

    async def timer_metrics(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        body = self.timer_counts.body()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=dumps(body))
