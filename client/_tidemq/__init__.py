"""tidemq: a message broker on the design of Apache RocketMQ 4.x, and its Python client.

The repository keeps `store/`, `ha/`, `client/` and `broker/` at its top level; packaging maps
them to `tidemq.store`, `tidemq.ha`, `tidemq.client` and `tidemq.broker` (pyproject.toml,
`[tool.setuptools] package-dir`), and this file, the package itself, lives in `client/_tidemq/`.
The names most programs need are re-exported here::

    from tidemq import Producer, PushConsumer, Message
"""

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
