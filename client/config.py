"""Client settings (RocketMQ's ClientConfig) and the client id.

The client id is `ip@instanceName` (`@unitName` when set). An instance name left at "DEFAULT"
becomes `<pid>#<random>`, so two processes on one host, or two containers sharing an IP and a
pid, never present the same id to a broker (identical ids split queues wrongly: RocketMQ #667,
#2760).
"""

from __future__ import annotations

import os
import random
import socket
from dataclasses import dataclass, field, replace

from client.remoting.codes import SerializeType

DEFAULT_INSTANCE = "DEFAULT"


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


def parse_namesrv_addr(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """'h1:9876;h2:9876' (RocketMQ's form), a list, or NAMESRV_ADDR from the environment."""
    if value is None:
        value = os.environ.get("NAMESRV_ADDR", "")
    items = value.split(";") if isinstance(value, str) else list(value)
    return [a.strip() for a in items if a.strip()]


@dataclass(frozen=True, slots=True)
class ClientConfig:
    namesrv_addr: tuple[str, ...] = ()
    client_ip: str = field(default_factory=local_ip)
    instance_name: str = DEFAULT_INSTANCE
    unit_name: str = ""
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    persist_consumer_offset_interval: float = 5.0
    mq_client_api_timeout: float = 3.0
    serialize_type: SerializeType = SerializeType.MSGPACK

    @classmethod
    def create(
        cls, namesrv_addr: str | list[str] | tuple[str, ...] | None = None, **kwargs: object
    ) -> ClientConfig:
        config = cls(namesrv_addr=tuple(parse_namesrv_addr(namesrv_addr)), **kwargs)  # type: ignore[arg-type]
        if config.instance_name == DEFAULT_INSTANCE:
            config = replace(config, instance_name=f"{os.getpid()}#{random.getrandbits(40):x}")
        return config

    @property
    def client_id(self) -> str:
        ident = f"{self.client_ip}@{self.instance_name}"
        return f"{ident}@{self.unit_name}" if self.unit_name else ident
