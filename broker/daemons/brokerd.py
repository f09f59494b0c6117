"""The `brokerd` command: `brokerd -c FILE [-n NAMESRV] [-p] [key=value ...]`.

Reads a RocketMQ broker properties file: BrokerConfig keys (brokerName, brokerId,
brokerClusterName, namesrvAddr, listenPort, brokerIP1, ...), MessageStoreConfig keys
(brokerRole, flushDiskType, storePathRootDir, mappedFileSizeCommitLog, ...), remoting keys
(bindAddress, maxFrameSize), HA keys (haListenPort) and controller-mode keys
(enableControllerMode, controllerAddr, ...: ha/controller_config.py). Trailing `key=value`
arguments override the file, `-n` overrides namesrvAddr (like mqbroker), `-p` prints the
effective configuration and exits. A bad file or value stops start-up with one line naming the
key and exit status 1, and so does a key no configuration knows that is close to one it does
(`brokerRoll`: "did you mean brokerRole?"); other unknown keys are warned about and ignored.
A SLAVE whose brokerId is not above 0 is refused, as RocketMQ's BrokerStartup does. SIGTERM
and SIGINT stop the broker cleanly (exit 0).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import sys
from pathlib import Path

import click

from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig, RemotingConfig
from tidemq.broker.daemons.daemon import (
    busy_port,
    configure_logging,
    queue_files_that_fit,
    read_properties,
    run_until_signal,
    unwritable_store,
)
from tidemq.broker.failover import MemberConflict
from tidemq.broker.open_doors import broker_doors
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.client.version import version_option
from tidemq.common.errors import ConfigError, StoreError
from tidemq.common.settings import (
    from_properties,
    refuse_mistyped_keys,
    to_properties,
    unknown_keys,
)
from tidemq.ha.config import HAConfig
from tidemq.ha.controller_config import ControllerConfig
from tidemq.ha.etcd import EtcdUnavailable
from tidemq.store.config import BrokerRole, StoreConfig

log = logging.getLogger("broker")

# CPython's gen-0 threshold for the broker process (its default is 700): see `main`.
GC_GEN0_THRESHOLD = 10_000

CONFIG_CLASSES: tuple[type, ...] = (
    BrokerConfig,
    StoreConfig,
    RemotingConfig,
    HAConfig,
    ControllerConfig,
    ProxyConfig,
)
# RocketMQ broker keys tidemq does not use that are within a typo of one it does: unknown
# here, warned about, but not taken for a mistyping (putThreadPoolQueueCapacity is RocketMQ's
# send queue's capacity, pullThreadPoolQueueCapacity a key tidemq reads).
ROCKETMQ_KEYS_NEAR_OURS = frozenset({"putThreadPoolQueueCapacity"})


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerSettings:
    broker: BrokerConfig
    store: StoreConfig
    remoting: RemotingConfig
    ha: HAConfig
    controller: ControllerConfig
    unknown: list[str]
    proxy: ProxyConfig = dataclasses.field(default_factory=ProxyConfig)

    def fixed_ports(self) -> list[tuple[str, int]]:
        """(key, port) of the ports this broker will listen on (a slave has no HA port)."""
        ports = [("listenPort", self.broker.listen_port)]
        if self.store.broker_role is not BrokerRole.SLAVE and self.broker.listen_port > 0:
            ha = self.ha.ha_listen_port
            ports.append(("haListenPort", ha if ha >= 0 else self.broker.listen_port + 1))
        ports.append(("metricsPort", self.broker.metrics_port))
        ports.append(("grpcServerPort", self.proxy.grpc_server_port))
        return ports

    def open_doors(self) -> list[str]:
        """The start-up warnings (broker/open_doors.py): HA counts on a broker that is or may
        become a master (controller mode)."""
        ha_port = self.ha.ha_listen_port
        may_lead = (
            self.store.broker_role is not BrokerRole.SLAVE or self.controller.enable_controller_mode
        )
        return broker_doors(
            self.remoting,
            self.broker.listen_port,
            self.broker.acl_enable,
            self.ha if may_lead else None,
            ha_port if ha_port >= 0 else self.broker.listen_port + 1,
        )

    def effective(self) -> dict[str, str]:
        props: dict[str, str] = {}
        for config in (
            self.broker,
            self.store,
            self.remoting,
            self.ha,
            self.controller,
            self.proxy,
        ):
            props.update(to_properties(config))
        if self.ha.ha_listen_port < 0:
            props["haListenPort"] = str(self.broker.listen_port + 1)
        return dict(sorted(props.items()))


def load_settings(props: dict[str, str]) -> BrokerSettings:
    unknown = unknown_keys(props, CONFIG_CLASSES)
    refuse_mistyped_keys(unknown, CONFIG_CLASSES, ROCKETMQ_KEYS_NEAR_OURS)
    broker = from_properties(BrokerConfig, props)
    store = from_properties(StoreConfig, props)
    remoting = from_properties(RemotingConfig, props)
    ha = from_properties(HAConfig, props)
    controller = from_properties(ControllerConfig, props)
    proxy = from_properties(ProxyConfig, props)
    if controller.enable_controller_mode:
        # Every broker of the group starts as a slave; the elected one registers as id 0.
        if store.broker_role is BrokerRole.SLAVE:
            raise ConfigError(
                "brokerRole: with enableControllerMode the role taken when elected "
                "(SYNC_MASTER or ASYNC_MASTER)"
            )
        if broker.broker_id <= 0:
            raise ConfigError("brokerId: with enableControllerMode each broker's own id, above 0")
        return BrokerSettings(broker, store, remoting, ha, controller, unknown, proxy)
    if store.broker_role is BrokerRole.SLAVE and broker.broker_id <= 0:
        raise ConfigError("brokerId: a SLAVE's brokerId must be > 0")
    if store.broker_role is not BrokerRole.SLAVE and broker.broker_id != 0:
        # RocketMQ forces a master's id to 0 (MASTER_ID).
        broker = dataclasses.replace(broker, broker_id=0)
    return BrokerSettings(broker, store, remoting, ha, controller, unknown, proxy)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option("brokerd")
@click.option(
    "-c",
    "--config-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="RocketMQ broker properties file.",
)
@click.option("-n", "--namesrv-addr", default=None, help="Name servers, 'host:port;host:port'.")
@click.option(
    "-p", "--print-config", is_flag=True, help="Print the effective configuration and exit."
)
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def main(
    config_file: Path | None,
    namesrv_addr: str | None,
    print_config: bool,
    overrides: tuple[str, ...],
) -> None:
    """Run a tidemq broker (RocketMQ 4.x compatible)."""
    try:
        props = read_properties(config_file, overrides)
        if namesrv_addr is not None:
            props["namesrvAddr"] = namesrv_addr
        settings = load_settings(props)
    except ConfigError as exc:
        click.echo(f"brokerd: {exc}", err=True)
        sys.exit(1)
    if print_config:
        for key in settings.unknown:  # as start-up would log it, on stderr
            click.echo(f"brokerd: unknown configuration key {key} ignored", err=True)
        for key, value in settings.effective().items():
            click.echo(f"{key}={value}")
        return
    role = settings.store.broker_role.value
    configure_logging(f"{settings.broker.broker_name}/{role}")
    for key in settings.unknown:
        log.warning("unknown configuration key %s ignored", key)
    problem = busy_port(settings.remoting.bind_address, settings.fixed_ports())
    # Before the store is created or anything connects: one line, nothing touched.
    problem = problem or unwritable_store(settings.store.root, settings.store.commit_log_dir)
    if problem is None:
        asked = settings.store.max_mapped_consume_queue_files
        explicit = "maxMappedConsumeQueueFiles" in props
        bound, problem = queue_files_that_fit(asked, explicit)
        if bound != asked:
            log.warning(
                "maxMappedConsumeQueueFiles %d lowered to %d: the limit of open files (ulimit -n) "
                "holds no more",
                asked,
                bound,
            )
            store = dataclasses.replace(settings.store, max_mapped_consume_queue_files=bound)
            settings = dataclasses.replace(settings, store=store)
    if problem is not None:
        click.echo(f"brokerd: cannot start: {problem}", err=True)
        sys.exit(1)
    for door in settings.open_doors():  # once it is clear that the ports will open
        log.warning("%s", door)
    try:  # certificates and keys are loaded here
        broker = Broker(
            settings.broker,
            settings.store,
            settings.remoting,
            settings.ha,
            settings.controller,
            settings.proxy,
        )
    except ConfigError as exc:
        click.echo(f"brokerd: {exc}", err=True)
        sys.exit(1)

    async def start() -> None:
        try:
            await broker.start()
        except StoreError as exc:
            click.echo(f"brokerd: {exc}", err=True)
            raise SystemExit(1) from None
        except EtcdUnavailable as exc:
            # Controller mode never starts a broker without its group's coordination.
            click.echo(f"brokerd: controllerAddr: {exc}; not starting", err=True)
            raise SystemExit(1) from None
        except MemberConflict as exc:
            click.echo(f"brokerd: {exc}; not starting", err=True)
            raise SystemExit(1) from None

    def banner() -> str:
        return (
            f"brokerd {settings.broker.broker_name} ({role}, id {settings.broker.broker_id}) "
            f"listening on {settings.remoting.bind_address}:{broker.listen_port}, "
            f"store {settings.store.root}"
        )

    # A burst of requests that wait (SYNC_MASTER sends on their slave's ack, long polls) keeps
    # a dozen young container objects each alive: 64 in flight passed CPython's default
    # gen-0 threshold (700) on every burst, and each collection walked them all (callgrind:
    # about 7,400 instructions per SYNC_MASTER send in gc_collect_main, none on an
    # ASYNC_MASTER). Cyclic garbage is still collected, a few thousand allocations later.
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
    sys.exit(run_until_signal(start, broker.stop, banner))
