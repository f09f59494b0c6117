"""What a running broker's processors read that changes while it runs.

`config` is replaced as a whole when an operator changes a runtime key (UPDATE_BROKER_CONFIG:
`BrokerConfig` is frozen); the address is known once the broker listens (port 0 takes a free
one). Processors, metrics and SlaveSynchronize hold this object and read it at each use, so they
see the change without holding the `Broker`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemq.broker.config import BrokerConfig


@dataclass(slots=True)
class BrokerState:
    config: BrokerConfig
    advertised_address: str  # "ip:port" clients and the name servers know this broker by
    store_host: bytes  # that address packed, stamped on every message this broker stores
