"""The broker's JSON config files: how they are written, read back, and recovered.

RocketMQ's `ConfigManager` keeps each table in one JSON file under `<storePathRootDir>/config/`
(`topics.json`, `subscriptionGroup.json`, `consumerOffset.json`, `delayOffset.json`) next to the
previous version, `<file>.bak`. tidemq keeps the same names and layout so a store directory moves
between the two, and writes each file so that a crash at any moment leaves a loadable one:

`<file>.tmp` fsynced, the current file kept as `<file>.bak`, `<file>.tmp` renamed over `<file>`,
the directory fsynced (`common.files.write_file_safely`, which states the exact order).

The main file is therefore never missing or half written once it exists. Reading (`load`) takes
the main file; when it is missing or empty, or does not decode, it takes `.bak` and logs which
one it used and why. RocketMQ then starts with an empty table if the backup is also unreadable,
silently losing every topic or offset; tidemq raises `ConfigFileCorruptError` instead, so the
operator decides (only a store with neither file starts empty).

Text is pretty-printed JSON (tab indents, as fastjson's prettyFormat) with every key quoted.
Files that Java wrote hold bare numeric keys (`{0:12}`); decoders read them with
`client.remoting.json_body.loads_fastjson`.
"""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.common.files import sibling, write_file_safely
from tidemq.store.errors import CorruptStoreError

__all__ = [
    "CONSUMER_OFFSET_FILE",
    "DELAY_OFFSET_FILE",
    "SUBSCRIPTION_GROUP_FILE",
    "TOPICS_FILE",
    "ConfigFileCorruptError",
    "ConfigManager",
    "config_dir",
    "decode_json_object",
    "load",
    "persist",
    "pretty_json",
]

log = logging.getLogger(__name__)

TOPICS_FILE: Final = "topics.json"
SUBSCRIPTION_GROUP_FILE: Final = "subscriptionGroup.json"
CONSUMER_OFFSET_FILE: Final = "consumerOffset.json"
DELAY_OFFSET_FILE: Final = "delayOffset.json"

# What a decoder raises for content it cannot use (JSONDecodeError, UnicodeDecodeError and
# BodyDecodeError are ValueErrors; a wrong JSON shape surfaces as one of the others).
DECODE_ERRORS: Final = (ValueError, TypeError, KeyError, AttributeError)

T = TypeVar("T")


class ConfigFileCorruptError(CorruptStoreError):
    """Neither a config file nor its `.bak` could be decoded; the message names both."""


def config_dir(store_root: Path) -> Path:
    """`<storePathRootDir>/config`, where RocketMQ's BrokerPathConfigHelper puts these files."""
    return store_root / "config"


def pretty_json(obj: Any) -> str:
    """`obj` as indented JSON, non-ASCII kept as is (the file is written as UTF-8)."""
    return json.dumps(obj, indent="\t", ensure_ascii=False)


def decode_json_object(text: str | bytes, what: str, build: Callable[[dict[str, Any]], T]) -> T:
    """`build(obj)` for the JSON object in `text` (fastjson's bare keys allowed).

    Any failure, including a wrong shape deep inside, is a `BodyDecodeError` naming `what`, so
    that callers handling a peer's body (SlaveSynchronize) have one exception to catch.
    """
    try:
        obj = loads_fastjson(text)
        if not isinstance(obj, dict):
            raise BodyDecodeError(f"{what}: not a JSON object")
        return build(obj)
    except BodyDecodeError:
        raise
    except DECODE_ERRORS as exc:
        raise BodyDecodeError(f"{what}: {type(exc).__name__}: {exc}") from exc


def persist(path: Path, text: str) -> None:
    """Replace `path` with `text` crash-safely, keeping the previous version as `<path>.bak`.

    Blocks on two fsyncs: call it off the event loop when the file is large or written often.
    Raises `OSError` when the file cannot be written; the previous file is then left in place.
    """
    write_file_safely(path, text.encode("utf-8"))


def _read_text(path: Path) -> str | None:
    """The file's text, or None when it does not exist or is empty (RocketMQ treats both alike)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.strip():
        return None
    return data.decode("utf-8")


def _try_decode(path: Path, decode: Callable[[str], T]) -> tuple[T | None, str | None]:
    """(value, None) on success, (None, None) when absent, (None, reason) when unusable."""
    try:
        text = _read_text(path)
        if text is None:
            return None, None
        return decode(text), None
    except DECODE_ERRORS as exc:
        return None, f"{type(exc).__name__}: {exc}"
    except OSError as exc:
        return None, f"cannot read: {exc}"


def load(path: Path, decode: Callable[[str], T]) -> T | None:
    """Decode `path`, falling back to `<path>.bak`; None when neither exists (a fresh store).

    `decode` must raise one of `DECODE_ERRORS` for content it cannot use. Raises
    `ConfigFileCorruptError` when a file exists but neither it nor its backup decodes.
    """
    value, problem = _try_decode(path, decode)
    if value is not None:
        return value
    bak = sibling(path, ".bak")
    why = f"is unreadable ({problem})" if problem else "is missing or empty"
    backup, bak_problem = _try_decode(bak, decode)
    if backup is not None:
        log.warning("config file %s %s; loaded the backup %s instead", path, why, bak)
        return backup
    if problem is None and bak_problem is None:
        return None
    raise ConfigFileCorruptError(
        f"config file {path} {why} and its backup {bak} "
        f"{'is unreadable (' + bak_problem + ')' if bak_problem else 'does not exist'}; "
        "restore one of them, or move both aside to start with an empty table"
    )


class ConfigManager(abc.ABC, Generic[T]):
    """A table kept in one config file: subclasses say how to encode, parse and adopt it.

    Parsing and adopting are separate steps so that a file that fails half-way through parsing
    never leaves half of its content in the table before the backup is tried.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @abc.abstractmethod
    def encode(self) -> str:
        """The table as the file's JSON text."""

    @abc.abstractmethod
    def parse(self, text: str) -> T:
        """The file's content, parsed; raises one of `DECODE_ERRORS` when it is unusable."""

    @abc.abstractmethod
    def adopt(self, state: T) -> None:
        """Take a parsed file's content as the table."""

    def load(self) -> bool:
        """Read the file (or its backup) into the table; False when there was neither."""
        state = load(self.path, self.parse)
        if state is None:
            log.info("config file %s does not exist yet; starting with defaults", self.path)
            return False
        self.adopt(state)
        log.info("loaded %s", self.path)
        return True

    def persist(self) -> None:
        """Write the table to its file now; raises `OSError` on failure."""
        persist(self.path, self.encode())

    def persist_quietly(self) -> bool:
        """Persist, logging instead of raising: a failed write must not fail the request that
        changed the table (RocketMQ logs and goes on); the next successful persist catches up."""
        try:
            self.persist()
        except OSError as exc:  # the OS error says it all (permission, disk full): no traceback
            log.error("cannot persist %s: %s", self.path, exc)
            return False
        return True
