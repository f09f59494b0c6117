"""tidemq: a message broker on the design of Apache RocketMQ 4.x, and its Python client.

The repository keeps `store/`, `ha/`, `client/` and `broker/` at its top level; packaging maps
them to `tidemq.store`, `tidemq.ha`, `tidemq.client` and `tidemq.broker` (pyproject.toml,
`[tool.setuptools] package-dir`), and this file, the package itself, lives in `client/_tidemq/`.
The names most programs need are re-exported here::

    from tidemq import Producer, PushConsumer, Message

They are imported at first use (PEP 562): a daemon, the index worker or `mqadmin` imports
`tidemq.broker...` or `tidemq.store...` through this package and needs none of the client's
producers and consumers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidemq.client.config import ClientConfig
    from tidemq.client.consumer.pull import AsyncPullConsumer, PullConsumer
    from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult, PushConsumer
    from tidemq.client.errors import TideMQError
    from tidemq.client.message import Message, MessageSelector, ReceivedMessage, SendResult
    from tidemq.client.producer import AsyncProducer, Producer
    from tidemq.client.protocol.heartbeat import ConsumeFromWhere, MessageModel, MessageQueue
    from tidemq.client.transaction import (
        AsyncTransactionProducer,
        LocalTransactionState,
        TransactionProducer,
        TransactionSendResult,
    )

_HOMES = {
    "AsyncProducer": "tidemq.client.producer",
    "AsyncPullConsumer": "tidemq.client.consumer.pull",
    "AsyncPushConsumer": "tidemq.client.consumer.push",
    "AsyncTransactionProducer": "tidemq.client.transaction",
    "ClientConfig": "tidemq.client.config",
    "ConsumeFromWhere": "tidemq.client.protocol.heartbeat",
    "ConsumeResult": "tidemq.client.consumer.push",
    "LocalTransactionState": "tidemq.client.transaction",
    "Message": "tidemq.client.message",
    "MessageModel": "tidemq.client.protocol.heartbeat",
    "MessageQueue": "tidemq.client.protocol.heartbeat",
    "MessageSelector": "tidemq.client.message",
    "Producer": "tidemq.client.producer",
    "PullConsumer": "tidemq.client.consumer.pull",
    "PushConsumer": "tidemq.client.consumer.push",
    "ReceivedMessage": "tidemq.client.message",
    "SendResult": "tidemq.client.message",
    "TideMQError": "tidemq.client.errors",
    "TransactionProducer": "tidemq.client.transaction",
    "TransactionSendResult": "tidemq.client.transaction",
}

# A literal list: type checkers read the re-exports from it.
__all__ = [
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "ClientConfig",
    "ConsumeFromWhere",
    "ConsumeResult",
    "LocalTransactionState",
    "Message",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "ReceivedMessage",
    "SendResult",
    "TideMQError",
    "TransactionProducer",
    "TransactionSendResult",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tidemq' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
