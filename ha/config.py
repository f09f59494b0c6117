"""HA configuration: RocketMQ's replication keys (MessageStoreConfig) plus tidemq's own.

`haListenPort` defaults to the broker's listenPort + 1 (RocketMQ's BrokerStartup rule); the
broker resolves it, so here -1 means "derive".
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from tidemq.common.errors import ConfigError
from tidemq.common.settings import setting

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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
    # The HA port's guards (tidemq's own; ha/transport.py says what they do).
    ha_allowed_slave_addresses: str = setting(
        "",
        doc="tidemq: addresses or CIDR networks, ',' or ';' separated; empty: the group's "
        "slaves as the name servers (and etcd) know them; 0.0.0.0/0,::/0: anyone",
    )
    ha_admission_timeout: int = setting(
        10_000,
        min_value=0,
        doc="tidemq: how long a connection from an address not known as a slave's is held "
        "while the master asks the name servers again",
    )
    ha_tls_enable: bool = setting(
        False, doc="tidemq: the HA stream in TLS; both sides present certificates"
    )
    ha_tls_cert_path: str = setting("", doc="tidemq: this broker's PEM certificate for HA")
    ha_tls_key_path: str = setting("", doc="tidemq: its PEM private key")
    ha_tls_trust_cert_path: str = setting(
        "", doc="tidemq: PEM CAs the other side's certificate must chain to"
    )

    @property
    def allowed_slave_networks(self) -> tuple[Network, ...]:
        """The allow-list (empty: the group's brokers may connect, broker/ha_members.py)."""
        return parse_networks(self.ha_allowed_slave_addresses)

    def validate(self) -> None:
        parse_networks(self.ha_allowed_slave_addresses)
        if self.ha_tls_enable:
            for key, value in (
                ("haTlsCertPath", self.ha_tls_cert_path),
                ("haTlsKeyPath", self.ha_tls_key_path),
                ("haTlsTrustCertPath", self.ha_tls_trust_cert_path),
            ):
                if not value:
                    raise ConfigError(f"{key}: required with haTlsEnable=true")


def parse_networks(text: str) -> tuple[Network, ...]:
    """`haAllowedSlaveAddresses`' networks (ConfigError naming the entry that is not one)."""
    networks = []
    for entry in filter(None, (e.strip() for e in text.replace(";", ",").split(","))):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConfigError(
                f"haAllowedSlaveAddresses: {entry!r} is not an address or a CIDR network"
            ) from None
    return tuple(networks)


def address_allowed(networks: tuple[Network, ...], ip: str) -> bool:
    """Whether a peer's IP text falls in one of `networks` (an IPv4-mapped IPv6 address counts
    as its IPv4 address)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)
