"""The gRPC endpoint's keys (RocketMQ 5 ProxyConfig's names and defaults where it has them)."""

from __future__ import annotations

from dataclasses import dataclass

from tidemq.common.settings import setting

DEFAULT_GRPC_SERVER_PORT = 8081


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    grpc_server_port: int = setting(
        DEFAULT_GRPC_SERVER_PORT,
        min_value=-1,
        max_value=65535,
        doc="RocketMQ 5 gRPC MessagingService port (-1: not served, 0: any free port)",
    )
    grpc_client_producer_max_attempts: int = setting(
        3, min_value=1, doc="send attempts the 5.x producers are told to make"
    )
    grpc_client_producer_backoff_initial_millis: int = setting(10, min_value=0)
    grpc_client_producer_backoff_max_millis: int = setting(1000, min_value=0)
    grpc_client_producer_backoff_multiplier: float = setting(2.0, min_value=1.0)
    grpc_client_consumer_long_polling_batch_size: int = setting(32, min_value=1)
    grpc_client_consumer_max_long_polling_timeout_millis: int = setting(20_000, min_value=1000)
    # ProxyConfig's: an auto-renewed receive (push consumers) and one without a duration.
    default_invisible_time_mills: int = setting(60_000, min_value=1000)
    min_invisible_time_mills_for_recv: int = setting(
        10_000, min_value=1, doc="shortest invisible duration a ReceiveMessage may ask"
    )
    max_invisible_time_mills: int = setting(12 * 3600 * 1000, min_value=1000)
    # ProxyConfig's renewal of push consumers' messages (broker/proxy/renewal.py).
    renew_schedule_period_millis: int = setting(
        5000, min_value=10, doc="how often messages of auto-renewed receives are looked at"
    )
    renew_ahead_time_millis: int = setting(
        10_000, min_value=0, doc="a message this close to becoming visible is renewed"
    )
    renew_max_time_millis: int = setting(
        3 * 3600 * 1000, min_value=1000, doc="no renewal this long after the receive"
    )
    max_renew_retry_times: int = setting(3, min_value=1)
    invisible_time_millis_when_clear: int = setting(
        1000, min_value=1, doc="a gone push consumer's messages are visible again this soon"
    )
    # Bounds of tidemq's (RocketMQ's proxy sets none): what a flood of made-up client ids or of
    # calls can make the broker hold.
    grpc_server_max_clients: int = setting(
        10_000, min_value=1, doc="tidemq: 5.x clients known at once; a new one past this is refused"
    )
    grpc_server_max_concurrent_rpcs: int = setting(
        20_000,  # each client holds a Telemetry stream: twice the clients
        min_value=1,
        doc="tidemq: calls and streams in progress at once; more are refused",
    )

    @property
    def enabled(self) -> bool:
        return self.grpc_server_port >= 0
