"""A broker in this process with its RocketMQ 5 gRPC endpoint (broker/proxy), and a unary call
on it in the raw protocol (no client library): what tests/integration/test_grpc_endpoint.py and
test_pop.py share. Every port is chosen by the OS (0), on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from grpc import aio

from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig, RemotingConfig
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.ha.config import HAConfig
from tidemq.store.config import StoreConfig

SERVICE: Final = "/apache.rocketmq.v2.MessagingService/"


def grpc_broker(tmp_path: Path, broker_name: str, proxy: ProxyConfig) -> Broker:
    """A master with small files under `tmp_path`, delay levels of 1 s, 5 s and 10 s, and the
    gRPC endpoint `proxy` describes (not started)."""
    return Broker(
        BrokerConfig(broker_name=broker_name, listen_port=0, broker_ip1="127.0.0.1"),
        StoreConfig(
            store_path_root_dir=str(tmp_path),
            mapped_file_size_commit_log=4 * 1024 * 1024,
            mapped_file_size_consume_queue=6000,
            max_hash_slot_num=5000,
            max_index_num=20000,
            message_delay_level="1s 5s 10s",
        ),
        RemotingConfig(bind_address="127.0.0.1"),
        HAConfig(ha_listen_port=0),
        proxy_config=proxy,
    )


async def unary_call(
    channel: aio.Channel,
    method: str,
    request: Any,
    response: type[Any],
    *,
    metadata: tuple[tuple[str, str], ...],
    timeout: float,
) -> Any:
    """The answer of MessagingService's `method` to `request` (a message, or raw bytes)."""
    call = channel.unary_unary(
        SERVICE + method,
        request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
        response_deserializer=response.FromString,
    )
    return await call(request, metadata=metadata, timeout=timeout)
