"""What both daemons share: logging, the event loop, configuration loading, signal handling."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import click

from tidemq.broker.daemons.port_owner import describe_holders, holders, port_is_free
from tidemq.broker.properties import load_properties, parse_overrides
from tidemq.client.memory import retain_freed_memory

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s [{tag}] %(name)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def configure_logging(tag: str, level: int = logging.INFO) -> None:
    """One line per event on stderr, tagged (e.g. with broker name and role)."""
    fmt = LOG_FORMAT.replace("{tag}", tag.replace("%", "%%"))
    logging.basicConfig(
        stream=sys.stderr, level=level, format=fmt, datefmt=LOG_DATE_FORMAT, force=True
    )


def read_properties(config_file: Path | None, overrides: Iterable[str]) -> dict[str, str]:
    """The file's properties with command-line `key=value` overrides applied (ConfigError)."""
    props = load_properties(config_file) if config_file is not None else {}
    props.update(parse_overrides(overrides))
    return props


def busy_port(host: str, ports: Iterable[tuple[str, int]]) -> str | None:
    """One line naming the first of `ports` ((key, port); 0 and -1 skipped) that another process
    holds, with who holds it; None when all are free. Checked before a daemon touches its store
    or connects anywhere, so a daemon that cannot listen stops before it has done anything."""
    for key, port in ports:
        if port > 0 and not port_is_free(host, port):
            return f"{key} {port} on {host} is in use by {describe_holders(holders(port))}"
    return None


# Descriptors beside the mapped ConsumeQueue files: connections, CommitLog and index files,
# the config tables, logs.
OTHER_DESCRIPTORS = 512


def queue_files_that_fit(max_mapped_queue_files: int, explicit: bool) -> tuple[int, str | None]:
    """Raise this process's soft limit of open files to its hard limit (the JVM does so for
    RocketMQ: MaxFDLimit), then (the bound of mapped ConsumeQueue files to use, a problem line
    naming the key or None). The files take two descriptors each beside OTHER_DESCRIPTORS: a
    default bound that does not fit is lowered to what fits; one the operator set is refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_mapped_queue_files, None
    fits = (soft - OTHER_DESCRIPTORS) // 2
    if max_mapped_queue_files <= fits:
        return max_mapped_queue_files, None
    if explicit or fits < 1:
        needed = 2 * max_mapped_queue_files + OTHER_DESCRIPTORS
        return max_mapped_queue_files, (
            f"maxMappedConsumeQueueFiles {max_mapped_queue_files} needs about {needed} open "
            f"files (two per ConsumeQueue file, {OTHER_DESCRIPTORS} for the rest); this process "
            f"may open {soft} (ulimit -n): lower the key or raise the limit"
        )
    return fits, None


STORE_FOLDERS = ("config", "consumequeue", "index")


def unwritable_store(root: Path, commit_log_dir: Path) -> str | None:
    """One line naming the first store folder this process cannot write, or None.

    The root (or, when it does not exist yet, the nearest folder above it, where it will be
    made) and those of its folders that exist already: a store left by another user would
    otherwise start and then fail at every flush and persist."""
    candidates = [root, commit_log_dir, *(root / name for name in STORE_FOLDERS)]
    for path in candidates:
        folder = path
        while not folder.exists() and folder != folder.parent:
            if path is not root and path is not commit_log_dir:
                break  # a folder the store makes under a root already checked
            folder = folder.parent
        if not folder.exists():
            continue
        if not folder.is_dir():
            return f"store folder {folder} is not a folder"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"store folder {folder} is not writable by this user (uid {os.getuid()})"
    return None


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


STOP_TIMEOUT = 60.0


def _force_exit(sig: signal.Signals) -> None:
    """A second signal while stopping: the operator wants out now."""
    log.error("%s received again while stopping: exiting at once", sig.name)
    logging.shutdown()
    os._exit(130)


def run_until_signal(
    start: Callable[[], Awaitable[Any]],
    stop: Callable[[], Awaitable[Any]],
    banner: Callable[[], str],
) -> int:
    """Start a service, print its banner, run until SIGTERM/SIGINT, stop it; the exit status.

    The signals are taken from before the start: one that comes while the service starts (a
    broker registering a million topics takes seconds) stops it cleanly once the start is
    done, instead of killing it with its store marked aborted. A second one exits at once."""
    signals = (signal.SIGTERM, signal.SIGINT)

    async def serve() -> int:
        if retain_freed_memory():
            log.info("malloc keeps freed memory for reuse (client/memory.py)")
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        received: list[str] = []

        def on_signal(sig: signal.Signals) -> None:
            received.append(sig.name)
            done.set()
            for again in signals:
                loop.add_signal_handler(again, _force_exit, again)

        for sig in signals:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            try:
                await start()
            except OSError as exc:
                log.error("cannot start: %s", exc)
                await stop()
                return 1
            if received:
                log.info("%s received while starting, stopping", received[0])
            else:
                click.echo(banner())
                await done.wait()
                log.info("%s received, stopping", received[0])
            try:
                await asyncio.wait_for(stop(), STOP_TIMEOUT)
            except TimeoutError:
                log.error("shutdown did not finish within %.0f s: exiting anyway", STOP_TIMEOUT)
                return 1
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
        return 0

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(serve())
