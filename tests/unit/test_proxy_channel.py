"""A 5.x client's channel (broker/proxy/channel.py) and a stored message as a 5.x Message
(broker/proxy/messages.py `from_store`): sans-IO."""

from __future__ import annotations

import asyncio

from tidemq.broker.proxy.channel import OUTBOX_LIMIT, GrpcChannel, Outbox
from tidemq.broker.proxy.messages import from_store
from tidemq.broker.proxy.protocol.definition_pb2 import Encoding, MessageType
from tidemq.broker.proxy.protocol.service_pb2 import TelemetryCommand
from tidemq.store.record import StoredMessage

HALF = StoredMessage(
    total_size=0, body_crc=0, queue_id=0, flag=0, queue_offset=7, physical_offset=4096,
    sys_flag=0, born_timestamp=1_700_000_000_123, born_host=("10.0.0.9", 5555),
    store_timestamp=1_700_000_000_456, store_host=("10.0.0.1", 10911), reconsume_times=0,
    prepared_transaction_offset=0, body=b"payload", topic="RMQ_SYS_TRANS_HALF_TOPIC",
    properties={
        "REAL_TOPIC": "Orders", "REAL_QID": "2", "UNIQ_KEY": "uniq-1", "TAGS": "TagA",
        "KEYS": "k1 k2", "TRAN_MSG": "true", "PGROUP": "Orders", "CLUSTER": "C", "color": "blue",
    },
)  # fmt: skip


def test_a_half_message_reads_as_the_5x_message_that_was_sent() -> None:
    message = from_store(HALF)
    assert message.topic.name == "Orders" and message.body == b"payload"
    system = message.system_properties
    assert (system.message_id, system.tag, list(system.keys)) == ("uniq-1", "TagA", ["k1", "k2"])
    assert system.message_type == MessageType.TRANSACTION
    assert system.body_encoding == Encoding.IDENTITY  # the Python client refuses anything else
    assert system.born_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert system.delivery_attempt == 1
    assert dict(message.user_properties) == {"color": "blue"}  # system keys stay out


async def test_commands_go_to_the_open_stream_only() -> None:
    channel = GrpcChannel("client-1", "127.0.0.1:5000")
    command = TelemetryCommand()
    assert not channel.tell(command)  # no stream: the caller is told
    old: Outbox = asyncio.Queue()
    new: Outbox = asyncio.Queue()
    channel.attach(old)
    channel.attach(new)  # a newer stream replaces the older
    channel.detach(old)  # the older one ending leaves the newer attached
    assert channel.tell(command) and new.qsize() == 1 and old.qsize() == 0
    for _ in range(OUTBOX_LIMIT - 1):
        assert channel.tell(command)
    assert not channel.tell(command)  # a client that reads nothing holds at most the limit
    channel.detach(new)
    assert not channel.streaming
    assert channel == GrpcChannel("client-1", "elsewhere:1") and len({channel, channel}) == 1
