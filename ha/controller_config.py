"""Controller mode's keys: RocketMQ 5's names where they exist, tidemq's for the etcd lease.

With `enableControllerMode=true` a group's master is elected through etcd (`controllerAddr`, its
client endpoints written as RocketMQ writes controller addresses, `host:port;host:port`); every
broker of the group starts as a slave, and `brokerRole` says the role it takes when elected
(SYNC_MASTER or ASYNC_MASTER). `brokerId` is then the broker's own identity in the group (above
0, unique); the elected master registers with the name servers as brokerId 0, as RocketMQ 5 does.

The lease: the master holds an etcd lease of `masterLeaseTtlSeconds` (etcd counts leases in whole
seconds), renewed every `masterLeaseKeepAliveInterval` ms. It acknowledges a write only before
`masterLeaseSafetyMargin` ms ahead of the moment its lease can expire in etcd, counted from the
sending of the last keep-alive that etcd answered; so once it can no longer renew, it stops
acknowledging while the lease still stands and no other broker can have been elected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tidemq.common.errors import ConfigError
from tidemq.common.settings import setting
from tidemq.ha.etcd import parse_endpoints

LOWEST_PRIORITY = 2**31 - 1  # RocketMQ's Integer.MAX_VALUE: the smaller, the more preferred


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    enable_controller_mode: bool = setting(False, doc="elect the group's master through etcd")
    controller_addr: str = setting("", doc="etcd client endpoints, 'host:port;host:port'")
    ha_max_time_slave_not_catchup: int = setting(
        15_000, min_value=100, doc="ms a slave may lag before it leaves the SyncStateSet"
    )
    min_in_sync_replicas: int = setting(
        1, min_value=1, doc="fewer SyncStateSet members: sends answer IN_SYNC_REPLICAS_NOT_ENOUGH"
    )
    all_ack_in_sync_state_set: bool = setting(
        True, doc="a SYNC write is acknowledged when every member of the SyncStateSet has it"
    )
    enable_elect_unclean_master: bool = setting(
        False, doc="a broker outside the SyncStateSet may be elected (may lose messages)"
    )
    broker_election_priority: int = setting(
        LOWEST_PRIORITY, min_value=0, doc="among equal candidates the smaller value wins"
    )
    store_path_epoch_file: str = setting(
        "", doc="the epoch file; empty = <storePathRootDir>/epochFileCheckpoint"
    )
    master_lease_ttl_seconds: int = setting(
        3, min_value=2, max_value=300, doc="tidemq: the master's etcd lease (whole seconds)"
    )
    master_lease_keep_alive_interval: int = setting(
        500, min_value=50, doc="tidemq: ms between the master's lease keep-alives"
    )
    master_lease_safety_margin: int = setting(
        1000, min_value=0, doc="tidemq: ms before the lease can expire that writes stop"
    )
    controller_request_timeout: int = setting(
        1000, min_value=50, doc="tidemq: ms an etcd request may take per endpoint"
    )

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return parse_endpoints(self.controller_addr)

    def epoch_file(self, store_root: Path) -> Path:
        if self.store_path_epoch_file:
            return Path(self.store_path_epoch_file).expanduser()
        return store_root / "epochFileCheckpoint"

    @property
    def trusted_ms(self) -> int:
        """How long after a keep-alive was sent the master may still acknowledge writes."""
        return self.master_lease_ttl_seconds * 1000 - self.master_lease_safety_margin

    def validate(self) -> None:
        try:
            endpoints = self.endpoints
        except ValueError as exc:
            raise ConfigError(f"controllerAddr: {exc}") from None
        if not self.enable_controller_mode:
            return
        if not endpoints:
            raise ConfigError("controllerAddr: required with enableControllerMode=true")
        if self.trusted_ms <= 0:
            raise ConfigError(
                "masterLeaseSafetyMargin: must be below masterLeaseTtlSeconds "
                f"({self.master_lease_ttl_seconds} s)"
            )
        if self.master_lease_keep_alive_interval * 2 > self.trusted_ms:
            # Two keep-alives must fit in the trusted window: one lost one is not a fence.
            raise ConfigError(
                "masterLeaseKeepAliveInterval: at most half of masterLeaseTtlSeconds minus "
                f"masterLeaseSafetyMargin ({self.trusted_ms // 2} ms)"
            )
