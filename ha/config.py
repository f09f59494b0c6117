"""HA configuration: RocketMQ's replication keys (MessageStoreConfig) plus tidemq's own.

`haListenPort` defaults to the broker's listenPort + 1 (RocketMQ's BrokerStartup rule); the
broker resolves it, so here -1 means "derive".
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemq.store.settings import setting


@dataclass(frozen=True, slots=True)
class HAConfig:
    ha_listen_port: int = setting(-1, min_value=-1, max_value=65535, doc="-1: listenPort + 1")
    ha_send_heartbeat_interval: int = setting(5000, min_value=10)
    ha_housekeeping_interval: int = setting(20_000, min_value=100)
    ha_transfer_batch_size: int = setting(32 * 1024, min_value=1024, max_value=4 * 1024 * 1024)
    ha_slave_fallbehind_max: int = setting(256 * 1024 * 1024, min_value=0)
    ha_master_address: str = setting("", doc="a slave's fixed master HA address (host:port)")
    slave_timeout: int = setting(3000, min_value=1, doc="SYNC_MASTER wait for a slave's ack")
    ha_reconnect_interval: int = setting(
        5000, min_value=10, doc="tidemq: a slave's pause before reconnecting to its master"
    )
    ha_diverged_retry_interval: int = setting(
        30_000, min_value=100, doc="tidemq: pause before a diverged slave checks again"
    )
    ha_slave_auto_truncate: bool = setting(
        False, doc="tidemq: a slave ahead of its master moves its extra tail aside and resyncs"
    )
    ha_slave_auto_resync: bool = setting(
        False, doc="tidemq: a slave behind the master's retention restarts from its oldest file"
    )
    ha_read_replicated_only: bool = setting(
        False, doc="tidemq: a SYNC_MASTER dispatches only what a slave has acknowledged"
    )
    ha_lag_warn_bytes: int = setting(
        64 * 1024 * 1024, min_value=0, doc="tidemq: log when a slave lags more than this"
    )
    slave_synchronize_interval: int = setting(
        10_000, min_value=100, doc="tidemq: SlaveSynchronize period (RocketMQ: 10 s)"
    )
