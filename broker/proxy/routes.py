"""QueryRoute's and QueryAssignment's answers from this broker's topic table: sans-IO.

As RocketMQ 5's proxy in local mode: a topic's queues split by permission into read-only,
write-only and read-write ones (ids in that order, as RouteActivity numbers them), each naming
this broker (its brokerName and brokerId) at the endpoint a client dials: the advertised
address (brokerIP1) and the gRPC port. A POP assignment is the whole topic on this broker
(queue id -1); a FIFO group gets each readable queue.

Accepted message types: a 4.x topic has no type, so every type this endpoint can store (NORMAL,
FIFO, DELAY, TRANSACTION). The 5.x clients check a message's type against this list before
they send it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Final

from tidemq.broker.proxy.protocol.definition_pb2 import (
    Address,
    AddressScheme,
    Assignment,
    Broker,
    Endpoints,
    MessageQueue,
    MessageType,
    Permission,
    Resource,
)
from tidemq.client.protocol.models import PERM_READ, PERM_WRITE, TopicConfig

ACCEPTED_TYPES: Final = (
    MessageType.NORMAL,
    MessageType.FIFO,
    MessageType.DELAY,
    MessageType.TRANSACTION,
)


def endpoints(host: str, port: int) -> Endpoints:
    """`host:port` as Endpoints, its scheme from the form of `host`."""
    try:
        version = ipaddress.ip_address(host.strip("[]")).version
        scheme = AddressScheme.IPv4 if version == 4 else AddressScheme.IPv6
    except ValueError:
        scheme = AddressScheme.DOMAIN_NAME
    return Endpoints(scheme=scheme, addresses=[Address(host=host.strip("[]"), port=port)])


def permission(perm: int) -> Permission.ValueType:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return Permission.READ_WRITE
    if readable:
        return Permission.READ
    if writable:
        return Permission.WRITE
    return Permission.NONE


def message_queues(
    topic: Resource, config: TopicConfig, perm: int, broker: Broker
) -> list[MessageQueue]:
    """The queues of `config` as RouteActivity.genMessageQueueFromQueueData lists them;
    `perm` is the topic's permission limited by the broker's."""
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    reads, writes = config.read_queue_nums, config.write_queue_nums
    groups: list[tuple[int, Permission.ValueType]] = []
    if readable and writable:
        both = min(reads, writes)
        groups = [
            (reads - both, Permission.READ),
            (writes - both, Permission.WRITE),
            (both, Permission.READ_WRITE),
        ]
    elif writable:
        groups = [(writes, Permission.WRITE)]
    elif readable:
        groups = [(reads, Permission.READ)]
    else:
        groups = [(max(1, reads, writes), Permission.NONE)]
    queues: list[MessageQueue] = []
    for count, queue_permission in groups:
        for _ in range(count):
            queues.append(
                MessageQueue(
                    topic=topic,
                    id=len(queues),
                    permission=queue_permission,
                    broker=broker,
                    accept_message_types=ACCEPTED_TYPES,
                )
            )
    return queues


def assignments(
    topic: Resource, config: TopicConfig, perm: int, broker: Broker, fifo: bool
) -> Sequence[Assignment]:
    """QueryAssignment's answer: empty when the topic cannot be read here."""
    if not perm & PERM_READ or config.read_queue_nums <= 0:
        return []
    queue_permission = permission(perm)
    ids = range(config.read_queue_nums) if fifo else (-1,)
    return [
        Assignment(
            message_queue=MessageQueue(
                topic=topic, id=queue_id, permission=queue_permission, broker=broker
            )
        )
        for queue_id in ids
    ]
