"""What every mqadmin subcommand shares: the click group, `-n`/NAMESRV_ADDR and `--json`, the
admin client's life cycle, tables, and turning failures into one line and exit status 1.

Each subcommand is an `async` function of an `AdminClient` returning an `Output`: the table or
lines a person reads, and the data `--json` prints. `make_admin` builds the client; tests replace
it with a fake.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.errors import BrokerResponseError, ClientError, TideMQError
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.client.version import version_option

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

DEFAULT_NAMESRV: Final = "127.0.0.1:9876"
TIMESTAMP_FORMAT: Final = "%Y-%m-%d#%H:%M:%S:%f"


ACCESS_KEY_ENV: Final = "TIDEMQ_ACCESS_KEY"
SECRET_KEY_ENV: Final = "TIDEMQ_SECRET_KEY"


def make_admin(namesrv_addr: str) -> AdminClient:
    meta = _command_meta()
    return AdminClient(
        namesrv_addr,
        access_key=meta.get("access_key") or "",
        secret_key=meta.get("secret_key") or "",
        tls=_tls_settings(meta),
    )


def _tls_settings(meta: dict[str, Any]) -> TlsClientSettings | None:
    """TLS when --tls or any other TLS option is given; the server is verified unless
    --tls-insecure."""
    names = ("tls", "tls_trust", "tls_cert", "tls_key", "tls_insecure")
    if not any(meta.get(name) for name in names):
        return None
    return TlsClientSettings(
        trust_cert_path=meta.get("tls_trust") or "",
        verify=not meta.get("tls_insecure"),
        cert_path=meta.get("tls_cert") or "",
        key_path=meta.get("tls_key") or "",
    )


def _command_meta() -> dict[str, Any]:
    """What the connection options of the running command left in its context (`common`)."""
    context = click.get_current_context(silent=True)
    return context.meta if context is not None else {}


def _keep(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(context: click.Context, _param: click.Parameter, value: Any) -> None:
        context.meta[name] = value

    return store


@dataclass(slots=True)
class Table:
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)

    def render(self) -> list[str]:
        cells = [[str(c) for c in row] for row in self.rows]
        widths = [len(c) for c in self.columns]
        for row in cells:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))

        def line(values: Sequence[str]) -> str:
            return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

        return [line(self.columns), *(line(row) for row in cells)]


@dataclass(slots=True)
class Output:
    """What a command shows: `lines` around `tables` for people, `data` for `--json`, and
    `notices` (what was left out, e.g. rows past a limit) on stderr either way."""

    data: Any
    lines_before: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    lines_after: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def text(self) -> str:
        out = list(self.lines_before)
        for table in self.tables:
            out.extend(table.render())
        out.extend(self.lines_after)
        return "\n".join(out)


def camel_data(value: Any) -> Any:
    """A dataclass (or dicts and lists of them) as JSON data with camelCase keys: the one key
    style of every command's --json."""
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, dict):
        return {_camel(str(k)): camel_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [camel_data(v) for v in value]
    return value


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class CommandError(ClientError):
    """A failure worth one line (bad arguments found late, nothing to show)."""


JSON_META: Final = "as_json"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option("mqadmin")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    expose_value=False,
    callback=_keep(JSON_META),
    help="Print JSON for scripts (also accepted after the subcommand).",
)
def main() -> None:
    """mqadmin: RocketMQ's admin commands for a tidemq cluster.

    Every command takes -n host:port[;host:port] (default: $NAMESRV_ADDR, else 127.0.0.1:9876),
    --json (machine-readable output, camelCase keys; before or after the command),
    --ak/--sk (credentials for a broker with aclEnable, default
    $TIDEMQ_ACCESS_KEY/$TIDEMQ_SECRET_KEY) and --tls (with --tls-trust CA file,
    --tls-cert/--tls-key). On failure it prints one line to stderr and exits 1.
    `mqadmin help COMMAND` prints a command's options.
    """


@main.command("help")
@click.argument("command", required=False)
@click.pass_context
def help_command(context: click.Context, command: str | None) -> None:
    """Print the options of COMMAND (or the list of commands)."""
    parent = context.parent
    assert parent is not None
    if command is None:
        click.echo(main.get_help(parent))
        return
    found = main.get_command(parent, command)
    if found is None:
        names = [n for n in main.list_commands(parent) if n.lower() == command.lower()]
        hint = f" (did you mean {names[0]}?)" if names else ""
        click.echo(f"mqadmin help: no command {command}{hint}", err=True)
        sys.exit(1)
    with click.Context(found, info_name=command, parent=parent) as sub:
        click.echo(found.get_help(sub))


def common(func: F) -> F:
    """Add `-n/--namesrvAddr`, `--json` and the connection options to a subcommand."""
    for flag, name, help_text in (
        ("--tls", "tls", "Connect with TLS, verifying the servers' certificates [env TIDEMQ_TLS]."),
        ("--tls-insecure", "tls_insecure", "TLS without verifying the servers (tests only)."),
    ):
        func = click.option(
            flag,
            is_flag=True,
            envvar="TIDEMQ_TLS" if name == "tls" else None,
            expose_value=False,
            callback=_keep(name),
            help=help_text,
        )(func)
    for flag, name, help_text in (
        ("--tls-trust", "tls_trust", "PEM CAs to verify servers with [default: the system's]."),
        ("--tls-cert", "tls_cert", "PEM client certificate, for servers that ask for one."),
        ("--tls-key", "tls_key", "PEM key of --tls-cert."),
    ):
        func = click.option(
            flag, metavar="FILE", expose_value=False, callback=_keep(name), help=help_text
        )(func)
    func = click.option(
        "--ak",
        "--accessKey",
        envvar=ACCESS_KEY_ENV,
        expose_value=False,
        callback=_keep("access_key"),
        help=f"Access key of the broker's plain ACL [default: ${ACCESS_KEY_ENV}].",
    )(func)
    func = click.option(
        "--sk",
        "--secretKey",
        envvar=SECRET_KEY_ENV,
        expose_value=False,
        callback=_keep("secret_key"),
        help=f"Secret key that signs the requests [default: ${SECRET_KEY_ENV}].",
    )(func)
    func = click.option(
        "-n",
        "--namesrvAddr",
        "namesrv_addr",
        default=None,
        help="Name servers 'host:port;host:port' [default: $NAMESRV_ADDR or 127.0.0.1:9876].",
    )(func)
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(func)


def run(
    name: str,
    namesrv_addr: str | None,
    as_json: bool,
    work: Callable[[AdminClient], Awaitable[Output]],
) -> None:
    """Run `work` with an admin client and print its output; failures exit 1 with one line."""
    address = namesrv_addr or os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV

    async def go() -> Output:
        admin = make_admin(address)
        try:
            return await work(admin)
        finally:
            await admin.close()

    as_json = as_json or bool(_command_meta().get(JSON_META))
    try:
        output = asyncio.run(go())
    except BrokerResponseError as exc:
        _fail(name, f"{exc.remark or 'error'} (code {exc.code})")
    except (TideMQError, CommandError, OSError, TimeoutError, ValueError) as exc:
        _fail(name, str(exc) or type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - the contract is one line and status 1, not a trace
        _fail(name, f"{type(exc).__name__}: {exc}")
    if as_json:
        click.echo(json.dumps(output.data, indent=2, sort_keys=False, default=str))
    else:
        text = output.text()
        if text:
            click.echo(text)
    for notice in output.notices:
        click.echo(f"mqadmin {name}: {notice}", err=True)


def _fail(name: str, reason: str) -> None:
    click.echo(f"mqadmin {name}: {reason.splitlines()[0] if reason else 'failed'}", err=True)
    sys.exit(1)


def need_one(name: str, **options: object) -> None:
    """RocketMQ's `-c|-b`: exactly one of the options must be given."""
    given = [k for k, v in options.items() if v is not None]
    if len(given) != 1:
        flags = " or ".join(f"-{k}" for k in options)
        raise click.UsageError(f"{name}: give one of {flags}")


def parse_timestamp(text: str) -> int:
    """`now` (-1), milliseconds, or `yyyy-MM-dd#HH:mm:ss:SSS` (local time) as ms."""
    text = text.strip()
    if text == "now":
        return -1
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.strptime(text, TIMESTAMP_FORMAT)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"
        ) from None
    return int(moment.timestamp() * 1000)


def java_map_text(mapping: Mapping[str, object]) -> str:
    """A map as RocketMQ's tools print one (Java's Map.toString): {k1=v1, k2=v2}."""
    return "{" + ", ".join(f"{k}={v}" for k, v in mapping.items()) + "}"


def format_time(ms: int) -> str:
    """Local time with milliseconds; "" for 0 or less, the number itself when it is no time a
    calendar holds (some clients send uninitialised fields)."""
    if ms <= 0:
        return ""
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


# updateTopicList and updateSubGroupList send a file's entries in requests of at most this many
# (a few hundred KB each, far below the frame limit).
LIST_REQUEST_SIZE: Final = 2000


def read_config_list(filename: str, parse: Callable[[dict[str, Any]], T], name_key: str) -> list[T]:
    """The entries of a JSON file holding a list of config objects (RocketMQ's
    `JSON.parseArray(file, TopicConfig.class)`); `CommandError` naming the file and the entry
    when it is not one. Each entry must have `name_key`."""
    try:
        obj = loads_fastjson(Path(filename).read_bytes(), max_size=1 << 31)
    except OSError as exc:
        raise CommandError(f"cannot read {filename}: {exc.strerror or exc}") from None
    except BodyDecodeError as exc:
        raise CommandError(f"{filename}: {exc}") from None
    if not isinstance(obj, list):
        raise CommandError(f"{filename}: not a JSON list of config objects")
    configs = []
    for index, entry in enumerate(obj):
        if not isinstance(entry, dict) or not isinstance(entry.get(name_key), str):
            raise CommandError(f"{filename}: entry {index} is not an object with {name_key}")
        try:
            configs.append(parse(entry))
        except ValueError as exc:
            raise CommandError(f"{filename}: entry {index}: {exc}") from None
    return configs


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise click.BadParameter(f"{text!r}: expected true or false")
    return value == "true"
