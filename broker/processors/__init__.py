"""The broker's request processors, one module per family (RocketMQ's NettyRequestProcessor):
each gets the managers and services it uses, never the Broker, and declares the request codes it
serves in `SERVES` (code -> the name of its method for that code). The broker registers
`handlers(processor)` of each: its wiring names processors, not codes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar, Protocol

from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection

Handler = Callable[
    [RemotingConnection, RemotingCommand],
    Awaitable[RemotingCommand | None] | RemotingCommand | None,
]


class Serving(Protocol):
    SERVES: ClassVar[Mapping[int, str]]


def handlers(processor: Serving) -> dict[int, Handler]:
    """Request code -> the processor's bound method for it, as its class declares."""
    return {code: getattr(processor, name) for code, name in processor.SERVES.items()}
