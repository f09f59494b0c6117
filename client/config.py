"""Client settings (RocketMQ's ClientConfig) and the client id.

The client id is `ip@instanceName` (`@unitName` when set). An instance name left at "DEFAULT"
becomes `<pid>#<random>`, so two processes on one host, or two containers sharing an IP and a
pid, never present the same id to a broker (identical ids split queues wrongly: RocketMQ #667,
#2760).
"""

from __future__ import annotations

import os
import random
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tidemq.client.errors import ClientError
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.signing import SessionCredentials
from tidemq.client.transport.tls import TlsClientSettings

DEFAULT_INSTANCE = "DEFAULT"
_SEPARATORS = re.compile(r"[;,]")


def local_ip() -> str:
    """This host's first non-loopback IPv4 (RocketMQ's RemotingUtil choice), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: connect() on UDP sends nothing
            address = probe.getsockname()[0]
            if isinstance(address, str) and not address.startswith("127."):
                return address
    except OSError:
        pass
    return "127.0.0.1"


def parse_namesrv_addr(value: str | Iterable[str] | None) -> list[str]:
    """Name-server addresses from RocketMQ's `"h1:9876;h2:9876"`, a list, or NAMESRV_ADDR.

    None reads the NAMESRV_ADDR environment variable. Entries are separated by `;` (`,` is taken
    too); blanks around an entry and empty entries are ignored. An entry that is not `host:port`
    (port 1..65535, an IPv6 host in brackets) is a `ClientError` naming it. The list may be empty:
    whoever needs a name server says so.
    """
    if value is None:
        value = os.environ.get("NAMESRV_ADDR", "")
    entries = _SEPARATORS.split(value) if isinstance(value, str) else list(value)
    addrs = [entry.strip() for entry in entries if entry.strip()]
    for addr in addrs:
        if not _is_host_port(addr):
            raise ClientError(f"name server address {addr!r} is not host:port")
    return addrs


def _is_host_port(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 literal
    elif ":" in host:
        return False  # an IPv6 literal without brackets, or two entries run together
    return bool(sep and host and not any(c.isspace() for c in host)) and _is_port(port)


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """What producers and consumers of one process share (RocketMQ's ClientConfig): the name
    servers, the client id (`client_ip@instance_name`), how often routes are polled, brokers
    sent heartbeats and offsets committed (seconds), the timeout of admin-like calls, the
    header serialisation, credentials and TLS. Made with `create()`; clients with equal
    configs share one client instance (connections, routes)."""

    namesrv_addr: tuple[str, ...] = ()
    client_ip: str = field(default_factory=local_ip)
    instance_name: str = DEFAULT_INSTANCE
    unit_name: str = ""
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    persist_consumer_offset_interval: float = 5.0
    mq_client_api_timeout: float = 3.0
    serialize_type: SerializeType = SerializeType.MSGPACK
    # Every request is signed with these when set (the broker's plain ACL, aclEnable=true).
    credentials: SessionCredentials | None = None
    # Connections to name servers and brokers are TLS when set (their tls.server.mode).
    tls: TlsClientSettings | None = None

    @classmethod
    def create(
        cls,
        namesrv_addr: str | Iterable[str] | None = None,
        *,
        client_ip: str | None = None,
        instance_name: str = DEFAULT_INSTANCE,
        unit_name: str = "",
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        persist_consumer_offset_interval: float = 5.0,
        mq_client_api_timeout: float = 3.0,
        serialize_type: SerializeType = SerializeType.MSGPACK,
        credentials: SessionCredentials | None = None,
        tls: TlsClientSettings | None = None,
    ) -> ClientConfig:
        """A config for `namesrv_addr` ("host:port;host:port", a list, or None for
        $NAMESRV_ADDR); `client_ip` defaults to this host's address, and the default
        instance name becomes one of this process's own."""
        if instance_name == DEFAULT_INSTANCE:
            instance_name = f"{os.getpid()}#{random.getrandbits(40):x}"
        return cls(
            tuple(parse_namesrv_addr(namesrv_addr)),
            local_ip() if client_ip is None else client_ip,
            instance_name,
            unit_name,
            poll_name_server_interval,
            heartbeat_broker_interval,
            persist_consumer_offset_interval,
            mq_client_api_timeout,
            serialize_type,
            credentials,
            tls,
        )

    @classmethod
    def for_client(
        cls,
        config: ClientConfig | None,
        namesrv_addr: str | Iterable[str] | None,
        *,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
    ) -> ClientConfig:
        """A producer's or consumer's config: `config`, or one made from `namesrv_addr`, signing
        with `access_key`/`secret_key` and connecting with `tls` when they are given."""
        config = config or cls.create(namesrv_addr)
        credentials = session_credentials(access_key, secret_key)
        if credentials is not None:
            config = replace(config, credentials=credentials)
        return replace(config, tls=tls) if tls is not None else config

    @property
    def client_id(self) -> str:
        """`client_ip@instance_name` (and `@unit_name` when set), as RocketMQ's buildMQClientId."""
        ident = f"{self.client_ip}@{self.instance_name}"
        return f"{ident}@{self.unit_name}" if self.unit_name else ident


def session_credentials(access_key: str, secret_key: str) -> SessionCredentials | None:
    """Credentials when both keys are given, None when neither is; one alone is an error."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ClientError("an access key needs its secret key, and a secret key its access key")
    return SessionCredentials(access_key, secret_key)
