"""Broker and name-server configuration: RocketMQ's BrokerConfig / NamesrvConfig / Netty keys.

Both daemons read a RocketMQ properties file plus `key=value` overrides. The store's keys live in
`store.config.StoreConfig` and the HA keys in `ha.config.HAConfig`; one file configures all of
them, and a key that none of them knows is reported at start-up.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from tidemq.broker.remoting.limits import ReceiveLimits
from tidemq.broker.remoting.tls import ClientAuth, TlsMode, TlsServerSettings
from tidemq.client.config import local_ip
from tidemq.client.protocol.names import NameKind, name_problem, topic_problem
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.common.errors import ConfigError
from tidemq.common.settings import setting

DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORT = 10911


@dataclass(frozen=True, slots=True)
class RemotingConfig:
    """Netty server settings shared by both daemons."""

    bind_address: str = setting("0.0.0.0", doc="address the remoting port listens on")
    server_channel_max_idle_time_seconds: int = setting(
        120, min_value=1, doc="close client connections idle this long"
    )
    max_frame_size: int = setting(
        16 * 1024 * 1024, min_value=1024, doc="largest remoting frame accepted (tidemq)"
    )
    # What connections may hold (tidemq's; RocketMQ's Netty server has no such bounds):
    # broker/remoting/limits.py says how the bytes of partly received frames are counted.
    server_max_connections: int = setting(
        10_000, min_value=1, doc="tidemq: connections past this are closed as they are accepted"
    )
    server_max_partial_frame_bytes: int = setting(
        16 * 1024 * 1024,
        min_value=1024,
        doc="tidemq: bytes one connection may hold of a frame not yet complete",
    )
    server_partial_frame_budget_bytes: int = setting(
        256 * 1024 * 1024,
        min_value=1024,
        doc="tidemq: bytes all connections together may hold of frames not yet complete",
    )
    server_frame_receive_timeout_seconds: int = setting(
        30, min_value=1, doc="tidemq: seconds a frame may take to arrive once it has begun"
    )
    # RocketMQ's TlsSystemConfig keys (broker/remoting/tls.py says what the modes do).
    tls_server_mode: TlsMode = setting(
        TlsMode.disabled, key="tls.server.mode", doc="disabled, permissive or enforcing"
    )
    tls_server_cert_path: str = setting("", key="tls.server.certPath", doc="PEM certificate")
    tls_server_key_path: str = setting("", key="tls.server.keyPath", doc="PEM private key")
    tls_server_key_password: str = setting("", key="tls.server.keyPassword")
    tls_server_trust_cert_path: str = setting(
        "", key="tls.server.trustCertPath", doc="PEM CAs that client certificates must chain to"
    )
    tls_server_need_client_auth: ClientAuth = setting(
        ClientAuth.none, key="tls.server.need.client.auth", doc="none, optional or require"
    )
    tls_enable: bool = setting(
        False, key="tls.enable", doc="this daemon's own connections (name servers, master) use TLS"
    )
    tls_client_trust_cert_path: str = setting("", key="tls.client.trustCertPath")
    tls_client_auth_server: bool = setting(
        True, key="tls.client.authServer", doc="verify the server (RocketMQ's default: false)"
    )
    tls_client_cert_path: str = setting("", key="tls.client.certPath")
    tls_client_key_path: str = setting("", key="tls.client.keyPath")
    tls_client_key_password: str = setting("", key="tls.client.keyPassword")

    def server_tls(self) -> TlsServerSettings:
        return TlsServerSettings(
            self.tls_server_mode,
            self.tls_server_cert_path,
            self.tls_server_key_path,
            self.tls_server_key_password,
            self.tls_server_trust_cert_path,
            self.tls_server_need_client_auth,
        )

    def receive_limits(self) -> ReceiveLimits:
        return ReceiveLimits(
            self.server_max_connections,
            self.server_max_partial_frame_bytes,
            self.server_partial_frame_budget_bytes,
            float(self.server_frame_receive_timeout_seconds),
        )

    def client_tls(self) -> TlsClientSettings | None:
        """How this daemon connects to others; None: plaintext."""
        if not self.tls_enable:
            return None
        return TlsClientSettings(
            self.tls_client_trust_cert_path,
            self.tls_client_auth_server,
            self.tls_client_cert_path,
            self.tls_client_key_path,
            self.tls_client_key_password,
        )

    def validate(self) -> None:
        if self.server_max_partial_frame_bytes > self.server_partial_frame_budget_bytes:
            raise ConfigError(
                "serverMaxPartialFrameBytes: above serverPartialFrameBudgetBytes "
                f"({self.server_max_partial_frame_bytes} > "
                f"{self.server_partial_frame_budget_bytes}), a frame that size could never arrive"
            )
        if self.tls_server_mode is not TlsMode.disabled:
            for key, path in (
                ("tls.server.certPath", self.tls_server_cert_path),
                ("tls.server.keyPath", self.tls_server_key_path),
            ):
                if not path:
                    raise ConfigError(f"{key}: required when tls.server.mode is not disabled")
        needs_trust = self.tls_server_need_client_auth is not ClientAuth.none
        if needs_trust and not self.tls_server_trust_cert_path:
            raise ConfigError("tls.server.trustCertPath: required to authenticate clients")


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    listen_port: int = setting(DEFAULT_NAMESRV_PORT, min_value=0, max_value=65535)
    order_message_enable: bool = setting(False)
    scan_not_active_broker_interval: int = setting(
        10_000, min_value=100, doc="ms between scans for brokers that stopped registering"
    )
    broker_channel_expired_time: int = setting(
        120_000, min_value=1000, doc="tidemq: ms without registration before a broker is dropped"
    )
    metrics_port: int = setting(-1, min_value=-1, max_value=65535, doc="tidemq: Prometheus port")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_cluster_name: str = setting("DefaultCluster")
    broker_name: str = setting(socket.gethostname() or "broker")
    broker_id: int = setting(0, min_value=0, doc="0 is the master; a slave's id is above 0")
    namesrv_addr: str = setting(
        os.environ.get("NAMESRV_ADDR", ""), doc="name servers, 'host:port;host:port'"
    )
    listen_port: int = setting(DEFAULT_BROKER_PORT, min_value=0, max_value=65535)
    broker_ip1: str = setting("", key="brokerIP1", doc="address advertised to clients")
    broker_ip2: str = setting("", key="brokerIP2", doc="address advertised for HA")
    broker_permission: int = setting(6, min_value=0, max_value=7)
    auto_create_topic_enable: bool = setting(True)
    auto_create_subscription_group: bool = setting(True)
    default_topic_queue_nums: int = setting(8, min_value=1, max_value=1024)
    cluster_topic_enable: bool = setting(True)
    broker_topic_enable: bool = setting(True)
    slave_read_enable: bool = setting(False)
    long_polling_enable: bool = setting(True)
    short_polling_time_mills: int = setting(1000, min_value=1)
    revive_queue_num: int = setting(
        8, min_value=1, max_value=1024, doc="queues of the POP revive topic (rmq_sys_REVIVE_LOG_)"
    )
    # RocketMQ's pull queue bound, here the pulls held by long polling at once: one more is
    # answered SYSTEM_BUSY "[TOO_MANY_REQUESTS]" (a consumer retries it later).
    pull_thread_pool_queue_capacity: int = setting(100_000, min_value=1)
    notify_consumer_ids_changed_enable: bool = setting(True)
    register_broker_timeout_mills: int = setting(6000, min_value=100)
    register_name_server_period: int = setting(30_000, min_value=1000)
    force_register: bool = setting(True)
    compressed_register: bool = setting(False, doc="deflate full registrations (RocketMQ's)")
    enable_split_registration: bool = setting(
        True, doc="send a full registration of many topics in parts (RocketMQ 5's; on here)"
    )
    split_registration_size: int = setting(
        800, min_value=1, doc="topics per part of a split registration (RocketMQ 5's)"
    )
    flush_consumer_offset_interval: int = setting(5000, min_value=100)
    export_config_json_on_shutdown: bool = setting(
        True,
        doc="tidemq: write topics.json and the other RocketMQ config files at every clean stop "
        "(the tables live in config/tables.db)",
    )
    wait_time_mills_in_send_queue: int = setting(200, min_value=1)
    max_msgs_num_batch: int = setting(64, min_value=1)
    channel_expired_timeout: int = setting(
        120_000, min_value=1000, doc="ms without heartbeat before a client is dropped"
    )
    metrics_port: int = setting(-1, min_value=-1, max_value=65535, doc="tidemq: Prometheus port")
    transaction_time_out: int = setting(
        6000, min_value=0, doc="ms after its birth before a half message is first checked"
    )
    transaction_check_max: int = setting(
        15, min_value=1, doc="checks of a half message before it goes to TRANS_CHECK_MAX_TIME_TOPIC"
    )
    transaction_check_interval: int = setting(
        60_000, min_value=100, doc="ms between two rounds of transaction checks"
    )
    trace_topic_enable: bool = setting(
        False, doc="create the message trace topic (msgTraceTopicName) on this broker"
    )
    msg_trace_topic_name: str = setting(
        "RMQ_SYS_TRACE_TOPIC", doc="the trace topic traceTopicEnable creates"
    )
    enable_property_filter: bool = setting(
        False, doc="accept SQL92 subscriptions, filtered against message properties on pull"
    )
    acl_enable: bool = setting(False, doc="check every request against the plain ACL files")
    acl_file: str = setting(
        "", doc="tidemq: the plain ACL file (default $ROCKETMQ_HOME/conf/plain_acl.yml)"
    )

    @property
    def advertised_ip(self) -> str:
        return self.broker_ip1 or local_ip()

    @property
    def ha_ip(self) -> str:
        return self.broker_ip2 or self.advertised_ip

    @property
    def name_servers(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def validate(self) -> None:
        for address in self.name_servers:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"namesrvAddr: {address!r} is not host:port")
        for key, name in (
            ("brokerName", self.broker_name),
            ("brokerClusterName", self.broker_cluster_name),
        ):
            problem = name_problem(NameKind.BROKER, name)
            if problem is not None:  # the name servers would refuse every registration
                raise ConfigError(f"{key}: {name!r}: {problem}")
        problem = topic_problem(self.msg_trace_topic_name)
        if self.trace_topic_enable and problem is not None:
            raise ConfigError(f"msgTraceTopicName: {self.msg_trace_topic_name!r}: {problem}")
        if self.acl_enable and not self.acl_file and not os.environ.get("ROCKETMQ_HOME"):
            raise ConfigError("aclEnable: set aclFile, or ROCKETMQ_HOME for conf/plain_acl.yml")
