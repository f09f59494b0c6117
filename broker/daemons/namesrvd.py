"""The `namesrvd` command: `namesrvd [-c FILE] [-p] [key=value ...]`.

Reads a RocketMQ properties file (`-c`) with NamesrvConfig keys (listenPort,
scanNotActiveBrokerInterval, brokerChannelExpiredTime, orderMessageEnable, ...) and remoting keys
(bindAddress, serverChannelMaxIdleTimeSeconds, maxFrameSize); trailing `key=value` arguments
override the file. `-p` prints the effective configuration as `key=value` lines on stdout and
exits. A file that cannot be read or a bad value stops start-up with one line naming the key on
stderr and exit status 1, and so does a key no configuration knows that is close to one it
does ("unknown key listenPrt: did you mean listenPort?"); other unknown keys are warned about
and ignored.

When running: logs go to stderr, one line per event with a timestamp; "namesrvd listening on
HOST:PORT" is printed on stdout once the port accepts connections; SIGTERM or SIGINT stops the
server (in-flight requests finish, connections close) and the process exits 0. A port that
cannot be bound exits 1. The event loop is uvloop's when uvloop is installed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import click

from tidemq.broker.config import NamesrvConfig, RemotingConfig
from tidemq.broker.daemons.daemon import busy_port
from tidemq.broker.namesrv.gc_tuning import tune_gc
from tidemq.broker.namesrv.server import NameServer, effective_properties
from tidemq.broker.open_doors import namesrv_doors
from tidemq.broker.properties import load_properties, parse_overrides
from tidemq.client.version import version_option
from tidemq.common.errors import ConfigError
from tidemq.common.settings import from_properties, refuse_mistyped_keys, unknown_keys

__all__ = ["load_config", "main", "run"]

log = logging.getLogger("tidemq.broker.namesrv")

_CONFIG_CLASSES = (NamesrvConfig, RemotingConfig)
_LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
_LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=level, format=_LOG_FORMAT, datefmt=_LOG_DATE_FORMAT, force=True
    )


def load_config(
    config_file: Path | None, overrides: Iterable[str]
) -> tuple[NamesrvConfig, RemotingConfig, list[str]]:
    """The configurations from the file and overrides, and the keys neither knows.

    Raises `ConfigError` (naming the file or key) when the file is unreadable, a value bad or
    an unknown key a mistyping of a known one.
    """
    props = load_properties(config_file) if config_file is not None else {}
    props.update(parse_overrides(overrides))
    unknown = unknown_keys(props, _CONFIG_CLASSES)
    refuse_mistyped_keys(unknown, _CONFIG_CLASSES)
    namesrv = from_properties(NamesrvConfig, props)
    remoting = from_properties(RemotingConfig, props)
    return namesrv, remoting, unknown


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(namesrv: NamesrvConfig, remoting: RemotingConfig) -> int:
    """Serve until SIGTERM or SIGINT; returns the exit status."""
    tune_gc()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(_serve(namesrv, remoting))


async def _serve(namesrv: NamesrvConfig, remoting: RemotingConfig) -> int:
    server = NameServer(namesrv, remoting)
    try:
        await server.start()
    except OSError as exc:
        # One line, no traceback: the OS error says all there is (address in use, no such host).
        log.error("cannot listen on %s:%d: %s", remoting.bind_address, namesrv.listen_port, exc)
        return 1
    stop = asyncio.Event()
    received: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        click.echo(f"namesrvd listening on {server.host}:{server.port}")
        await stop.wait()
        log.info("%s received, stopping", received[0])
        await server.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("stopped")
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@version_option("namesrvd")
@click.option(
    "-c",
    "--config-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="RocketMQ properties file with NamesrvConfig and remoting keys.",
)
@click.option(
    "-p",
    "--print-config",
    is_flag=True,
    help="Print the effective configuration as key=value lines and exit.",
)
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def main(config_file: Path | None, print_config: bool, overrides: tuple[str, ...]) -> None:
    """Run the tidemq name server (RocketMQ 4.x compatible)."""
    configure_logging()
    try:
        namesrv, remoting, unknown = load_config(config_file, overrides)
    except ConfigError as exc:
        click.echo(f"namesrvd: {exc}", err=True)
        sys.exit(1)
    for key in unknown:
        log.warning("unknown configuration key %s ignored", key)
    if print_config:
        for key, value in effective_properties(namesrv, remoting).items():
            click.echo(f"{key}={value}")
        return
    ports = [("listenPort", namesrv.listen_port), ("metricsPort", namesrv.metrics_port)]
    busy = busy_port(remoting.bind_address, ports)
    if busy is not None:
        click.echo(f"namesrvd: cannot start: {busy}", err=True)
        sys.exit(1)
    for door in namesrv_doors(remoting, namesrv.listen_port):
        log.warning("%s", door)
    sys.exit(run(namesrv, remoting))
