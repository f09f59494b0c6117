"""The name server service: a remoting server, the request handlers and the expiry scan.

`NameServer(namesrv_config, remoting_config)` listens on `bindAddress:listenPort`, answers the
codes of `broker.namesrv.processor`, forgets a broker as soon as its connection closes, and every
`scanNotActiveBrokerInterval` ms drops (and disconnects) brokers that have not registered for
`brokerChannelExpiredTime` ms. Routes are soft state: nothing is written to disk, brokers
rebuild them by registering every 30 s. UPDATE_NAMESRV_CONFIG changes `RUNTIME_KEYS` in
memory. With `metricsPort` set (-1 = off) it also serves Prometheus metrics
(`broker.metrics.NamesrvCollector`).

Log lines (logger `broker.namesrv`): one per broker registered, one per broker address removed
with its reason (connection closed, unregistered, expired).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from tidemq.broker.config import NamesrvConfig, RemotingConfig
from tidemq.broker.metrics import MetricsServer, NamesrvCollector, registry_for
from tidemq.broker.name_gate import NameGate
from tidemq.broker.namesrv.kv_config import KvConfigStore
from tidemq.broker.namesrv.processor import NamesrvProcessor, log_broker_removed
from tidemq.broker.namesrv.route_info import RouteInfoManager
from tidemq.broker.remoting.server import RemotingServer
from tidemq.client.transport.connection import RemotingConnection
from tidemq.common.errors import ConfigError
from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.common.settings import closest_key, from_properties, known_keys, to_properties

__all__ = ["NameServer", "effective_properties"]

log = logging.getLogger("tidemq.broker.namesrv")

# NamesrvConfig keys whose new value is used at once (the scan reads its interval each round).
RUNTIME_KEYS: Final = frozenset(
    {"orderMessageEnable", "scanNotActiveBrokerInterval", "brokerChannelExpiredTime"}
)


def effective_properties(namesrv: NamesrvConfig, remoting: RemotingConfig) -> dict[str, str]:
    """Every configuration key with its effective value, name-server keys first."""
    return {**to_properties(namesrv), **to_properties(remoting)}


class NameServer(Service):
    """Children, in start order: the remoting server, the metrics server, the expiry scan."""

    def __init__(self, config: NamesrvConfig, remoting: RemotingConfig) -> None:
        super().__init__()
        self.config = config
        self.remoting_config = remoting
        self.routes = RouteInfoManager(
            broker_channel_expired_time=config.broker_channel_expired_time
        )
        self.kv_config = KvConfigStore()
        self.processor = NamesrvProcessor(
            self.routes,
            self.kv_config,
            order_message_enable=config.order_message_enable,
            config_text=self.config_text,
            update_config=self.update_config,
        )
        self.server = RemotingServer(
            remoting.bind_address,
            config.listen_port,
            max_frame_size=remoting.max_frame_size,
            idle_timeout=float(remoting.server_channel_max_idle_time_seconds),
            name="namesrv",
            tls=remoting.server_tls(),
            limits=remoting.receive_limits(),
        )
        for code, processor in self.processor.processors().items():
            self.server.register(code, processor)
        self.server.gate = NameGate.for_namesrv()
        self.server.on_connection_closed.append(self._connection_closed)
        self._stopping = False
        self.add_child(self.server)
        self.metrics: MetricsServer | None = None
        if config.metrics_port >= 0:
            self.metrics = self.add_child(
                MetricsServer(
                    registry_for(NamesrvCollector(self.routes)),
                    remoting.bind_address,
                    config.metrics_port,
                )
            )
        self.add_child(BackgroundTask(self._scan_periodically, "namesrv-scan"))
        # Stops first: the tables die with the process, "removed" lines would only be noise.
        self.add_child(Step(stop=self._set_stopping))

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        """The port listened on (the one the OS chose when listenPort is 0)."""
        return self.server.port

    def config_text(self) -> str:
        """The effective configuration as properties text (GET_NAMESRV_CONFIG)."""
        props = effective_properties(self.config, self.remoting_config)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def update_config(self, changes: dict[str, str]) -> str | None:
        """UPDATE_NAMESRV_CONFIG: apply `changes`; None, or the reason nothing changed. Only
        `RUNTIME_KEYS` can change while the server runs; changes live in memory (put them in
        the properties file to keep them). A key that is no configuration key at all is
        refused as unknown (with the key it is likely a mistyping of)."""
        known = known_keys((NamesrvConfig, RemotingConfig))
        for key in sorted(set(changes) - known):
            near = closest_key(key, known)
            hint = f"did you mean {near}?" if near else "no name server configuration has it"
            return f"unknown key {key}: {hint}"
        refused = sorted(set(changes) - RUNTIME_KEYS)
        if refused:
            return (
                f"cannot change {', '.join(refused)} while the name server runs (changeable: "
                f"{', '.join(sorted(RUNTIME_KEYS))}); set it in the properties file and restart"
            )
        try:
            new = from_properties(NamesrvConfig, {**to_properties(self.config), **changes})
        except ConfigError as exc:
            return str(exc)
        self.config = new
        self.routes.broker_channel_expired_time = new.broker_channel_expired_time
        self.processor.order_message_enable = new.order_message_enable
        return None

    def _set_stopping(self) -> None:
        self._stopping = True

    def _connection_closed(self, connection: RemotingConnection) -> None:
        if self._stopping:
            return
        for removed in self.routes.on_connection_destroyed(connection):
            log_broker_removed(removed)

    async def _scan_periodically(self) -> None:
        while True:
            # read each round: updateNamesrvConfig may have changed it
            await asyncio.sleep(self.config.scan_not_active_broker_interval / 1000)
            try:
                self.scan_not_active_brokers()
            except Exception:
                # A bug here must not end expiry for the rest of the process's life.
                log.exception("scan for inactive brokers failed")

    def scan_not_active_brokers(self) -> int:
        """Drop expired brokers and close their connections; returns how many were dropped."""
        removed = self.routes.scan_not_active_brokers()
        for item in removed:
            log_broker_removed(item)
            if isinstance(item.connection, RemotingConnection):
                item.connection.close()
        return len(removed)
