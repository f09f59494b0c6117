"""`tidemq-dashboard --namesrv HOST:PORT [--port N] [--bind ADDR] [--ak AK --sk SK]
[--read-only] [--interval S] [--tls] [--tls-trust CA] [--tls-cert C --tls-key K]`.

With --ak/--sk it may change the cluster and signs every request as that account (brokers with
aclEnable check it; it should be an admin account there), unless --read-only keeps it to
reading. Without them it may change the cluster only when it listens on loopback and no broker
checks ACL (what `make run` starts: RocketMQ Dashboard's default), else it is read-only
(server.WriteMode); the ready line says which, and why. With --tls (or any --tls-* option) it
reaches the name servers and brokers in TLS, verifying them against --tls-trust (else the
system's CAs) and presenting --tls-cert/--tls-key to a port that asks for a client certificate.

Checks that the name server answers, then serves the dashboard until SIGINT or SIGTERM and
prints one line when it is ready: `tidemq-dashboard: serving http://ADDR:PORT/ ...`. Operator
mistakes (a name server that does not answer, a port that is taken or not allowed) print one
line to stderr and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import signal
import sys
from typing import Final, NoReturn

import click
from aiohttp import web

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import ACCESS_KEY_ENV, SECRET_KEY_ENV
from tidemq.client.dashboard.sampler import DEFAULT_INTERVAL
from tidemq.client.dashboard.server import WriteMode, make_app
from tidemq.client.errors import ClientError, TideMQError
from tidemq.client.transport.tls import TlsClientSettings

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 8082
DEFAULT_BIND: Final = "127.0.0.1"
NAMESRV_CHECK_TIMEOUT: Final = 5.0
# The line printed (and flushed) on stdout once the dashboard serves: the address follows.
READY_PREFIX: Final = "tidemq-dashboard: serving "


def command_line(
    namesrv: str, port: int = DEFAULT_PORT, bind: str = DEFAULT_BIND, *options: str
) -> list[str]:
    """The argv that runs a dashboard as a process of its own (what a launcher starts; it is
    serving once READY_PREFIX + "http://BIND:PORT/ ..." is on its stdout)."""
    return [
        sys.executable,
        "-m",
        "tidemq.client.dashboard",
        "--namesrv",
        namesrv,
        "--port",
        str(port),
        "--bind",
        bind,
        *options,
    ]


class StartError(ClientError):
    """Why the dashboard cannot start, in one line."""


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-n",
    "--namesrv",
    envvar="NAMESRV_ADDR",
    required=True,
    help="Name servers 'host:port;host:port' [env NAMESRV_ADDR].",
)
@click.option(
    "--port",
    "port_text",
    default=str(DEFAULT_PORT),
    show_default=True,
    help="HTTP port (0: any free one).",
)
@click.option("--bind", default=DEFAULT_BIND, show_default=True, help="Address to listen on.")
@click.option(
    "--ak",
    "--accessKey",
    "access_key",
    envvar=ACCESS_KEY_ENV,
    default="",
    help="Admin account's access key: allows changes, and signs requests for ACL brokers.",
)
@click.option(
    "--sk",
    "--secretKey",
    "secret_key",
    envvar=SECRET_KEY_ENV,
    default="",
    help="Secret key of --ak.",
)
@click.option(
    "--read-only",
    "read_only",
    is_flag=True,
    help="Refuse changes even with --ak/--sk (which then only sign reads for ACL brokers).",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.2, 3600),
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="Seconds between the live charts' samples.",
)
@click.option("--tls", "use_tls", is_flag=True, help="Reach name servers and brokers in TLS.")
@click.option("--tls-trust", default="", help="PEM CAs to verify the servers against (TLS).")
@click.option("--tls-cert", default="", help="PEM client certificate to present (TLS).")
@click.option("--tls-key", default="", help="The client certificate's PEM private key.")
def command(
    namesrv: str,
    port_text: str,
    bind: str,
    access_key: str,
    secret_key: str,
    read_only: bool,
    interval: float,
    use_tls: bool,
    tls_trust: str,
    tls_cert: str,
    tls_key: str,
) -> None:
    """Serve tidemq's web console: cluster, topics, consumer groups, messages, live charts."""
    port = _port(port_text)
    if bool(access_key) != bool(secret_key):
        _fail("give both --ak and --sk (or neither: a read-only dashboard)")
    tls = None
    if use_tls or tls_trust or tls_cert or tls_key:
        tls = TlsClientSettings(trust_cert_path=tls_trust, cert_path=tls_cert, key_path=tls_key)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    try:
        mode = write_mode(bool(access_key), read_only, bind)
        asyncio.run(_serve(namesrv, port, bind, access_key, secret_key, mode, interval, tls))
    except StartError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        pass


def write_mode(account: bool, read_only: bool, bind: str) -> WriteMode:
    """With an account: writable unless --read-only. Without one: read-only off loopback (no
    login guards it), else as the brokers' ACL decides (WriteMode.decide)."""
    if read_only:
        return WriteMode(False, "started with --read-only")
    if account:
        return WriteMode(True, "changes are signed with its --ak account")
    if not _loopback(bind):
        return WriteMode(
            False, f"it listens on {bind} without an account: --bind 127.0.0.1, or --ak/--sk"
        )
    return WriteMode(None, "")


def main(args: list[str] | None = None) -> None:
    """The console script: click's own usage errors are one line too."""
    try:
        command.main(args, prog_name="tidemq-dashboard", standalone_mode=False)
    except click.UsageError as exc:
        _fail(exc.format_message())
    except click.Abort:
        sys.exit(1)


def _port(text: str) -> int:
    """--port as a number 0..65535; anything else is one line and exit 1 (not click's usage
    block)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        _fail(f"--port must be a number from 0 to 65535, not {text!r}")
    return port


def _fail(reason: str) -> NoReturn:
    click.echo(f"tidemq-dashboard: {reason}", err=True)
    sys.exit(1)


async def _serve(
    namesrv: str,
    port: int,
    bind: str,
    access_key: str,
    secret_key: str,
    mode: WriteMode,
    interval: float,
    tls: TlsClientSettings | None = None,
) -> None:
    try:
        admin = AdminClient(
            namesrv,
            timeout=NAMESRV_CHECK_TIMEOUT,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
        )
    except (TideMQError, ValueError) as exc:
        raise StartError(f"bad --namesrv {namesrv!r}: {exc}") from None
    try:
        await admin.cluster_info()
    except (TideMQError, OSError, TimeoutError) as exc:
        await admin.close()
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StartError(f"name server {namesrv} does not answer: {reason}") from None
    writable, why = await mode.decide(admin)
    app = make_app(admin, namesrv, writable=mode, interval=interval, loopback=_loopback(bind))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, bind, port)
        try:
            await site.start()
        except OSError as exc:
            raise StartError(_bind_reason(bind, port, exc)) from None
        bound = _bound_port(runner) or port
        if writable and not _loopback(bind):
            # The console has no login of its own: whoever reaches it acts as --ak's account.
            log.warning(
                "open door: the writable dashboard on %s:%d has no login, so anyone who "
                "reaches it changes the cluster as %s; close it with --read-only or "
                "--bind 127.0.0.1 (behind an authenticating proxy)",
                bind,
                bound,
                access_key,
            )
        state = ("writable" if writable else "read-only") + f": {why}"
        if access_key:
            state += f", signing as {access_key}"
        click.echo(f"{READY_PREFIX}http://{bind}:{bound}/ (name server {namesrv}; {state})")
        await _until_signalled()
    finally:
        await runner.cleanup()


def _loopback(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind == "localhost"


def _bind_reason(bind: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"cannot listen on {bind}:{port}: the port is in use (choose another with --port)"
    if exc.errno == errno.EACCES:
        return f"cannot listen on {bind}:{port}: permission denied (ports below 1024 need root)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {bind}:{port}: {bind} is not an address of this machine"
    return f"cannot listen on {bind}:{port}: {exc.strerror or exc}"


def _bound_port(runner: web.AppRunner) -> int | None:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return None


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
