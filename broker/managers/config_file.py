"""The broker's config tables: kept in `config/tables.db`, imported from and exported to
RocketMQ's JSON config files.

RocketMQ's `ConfigManager` keeps each table in one JSON file under `<storePathRootDir>/config/`
(`topics.json`, `subscriptionGroup.json`, `consumerOffset.json`, `delayOffset.json`) and rewrites
the whole file for every change. tidemq keeps the tables as rows in `config/tables.db`
(`table_store.py`: one change writes the rows it touched, durably, whatever the table's size) and
keeps RocketMQ's files as the exchange format:

- import: at start, a table that `tables.db` does not hold yet is read from its JSON file (the
  file of a RocketMQ broker, or of an older tidemq) and written to `tables.db` in one
  transaction; from then on the file is never read again. A store with neither starts with the
  defaults, which are written to `tables.db` at once.
- export: each table's JSON file is written, crash-safely, at every clean broker stop, and on
  demand with `tidemq-cluster export-config <storePathRootDir>` (which reads `tables.db`, also
  while the broker runs), so the directory still moves to a RocketMQ broker and RocketMQ's tools
  read current files.

JSON files are written so that a crash at any moment leaves a loadable one: `<file>.tmp`
fsynced, the current file kept as `<file>.bak`, `<file>.tmp` renamed over `<file>`, the
directory fsynced (`common.files.write_file_safely`, which states the exact order). Importing
takes the main file; when it is missing or empty, or does not decode, it takes `.bak` and logs
which one it used and why. RocketMQ then starts with an empty table if the backup is also
unreadable, silently losing every topic or offset; tidemq raises `ConfigFileCorruptError`
instead, so the operator decides (only a store with neither file starts empty).

Text is pretty-printed JSON (tab indents, as fastjson's prettyFormat) with every key quoted.
Files that Java wrote hold bare numeric keys (`{0:12}`); decoders read them with
`client.remoting.json_body.loads_fastjson`, without the 16 MiB limit of a request body.
"""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from tidemq.broker.managers.table_store import TABLES_FILE, TableChanges, TableStore
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import DEFAULT_MAX_BODY_SIZE, loads_fastjson
from tidemq.common.files import sibling, write_file_safely
from tidemq.store.errors import CorruptStoreError

__all__ = [
    "CONSUMER_OFFSET_FILE",
    "DELAY_OFFSET_FILE",
    "SUBSCRIPTION_GROUP_FILE",
    "TOPICS_FILE",
    "ConfigFileCorruptError",
    "ConfigManager",
    "compact_json",
    "config_dir",
    "decode_json_object",
    "decode_rows",
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
# A JSON config file being imported may be far larger than a request body (1,000,000 topics
# make a topics.json of about 160 MB).
CONFIG_FILE_MAX_SIZE: Final = 4 * 1024 * 1024 * 1024

T = TypeVar("T")


class ConfigFileCorruptError(CorruptStoreError):
    """Neither a config file nor its `.bak` could be decoded; the message names both."""


def config_dir(store_root: Path) -> Path:
    """`<storePathRootDir>/config`, where RocketMQ's BrokerPathConfigHelper puts these files."""
    return store_root / "config"


def pretty_json(obj: Any) -> str:
    """`obj` as indented JSON, non-ASCII kept as is (the file is written as UTF-8)."""
    return json.dumps(obj, indent="\t", ensure_ascii=False)


def compact_json(obj: Any) -> str:
    """One table row's text in tables.db: JSON without spaces."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def decode_rows(rows: dict[str, str], name_key: str) -> list[tuple[str, dict[str, Any]]]:
    """(key, entry) of each row, the entry's `name_key` field being its key.

    All rows are parsed in one `json.loads` of their concatenation (twice as fast as one call a
    row at a million rows). A row that is not one JSON object would shift the entries: the
    count and each entry's name are checked, and any doubt parses row by row, which raises on
    the bad row.
    """
    keys = list(rows)
    try:
        entries = json.loads("[" + ",".join(rows.values()) + "]")
    except ValueError:
        entries = None
    if (
        not isinstance(entries, list)
        or len(entries) != len(keys)
        or not all(
            isinstance(entry, dict) and entry.get(name_key) == key
            for key, entry in zip(keys, entries, strict=True)
        )
    ):
        entries = [json.loads(rows[key]) for key in keys]
    return list(zip(keys, entries, strict=True))


def with_valid_names(
    table: dict[str, T],
    problem: Callable[[str], str | None],
    what: str,
    source: str,
    *,
    name_of: Callable[[T], str],
    renamed: Callable[[T, str], T],
) -> dict[str, T]:
    """`table` without the entries whose names `problem` refuses (written before the name gate
    refused them, or by hand: a name is checked before it reaches a path or a table), with one
    warning naming the first few.

    An entry whose own name (`name_of`) differs from its key is renamed to its key, with one
    warning: requests find an entry by its key, and the name inside is what the broker
    registers and shows, so the two must agree (RocketMQ keeps both as read).
    """
    invalid = {name for name in table if problem(name) is not None}
    if invalid:
        log.warning(
            "ignoring %d %s with invalid names from %s: %s",
            len(invalid),
            what,
            source,
            ", ".join(repr(name[:80]) for name in sorted(invalid)[:10]),
        )
    valid = {name: entry for name, entry in table.items() if name not in invalid}
    mismatched = sorted(name for name, entry in valid.items() if name_of(entry) != name)
    if mismatched:
        log.warning(
            "%d %s from %s named differently inside than by their keys, renamed to their keys: %s",
            len(mismatched),
            what,
            source,
            ", ".join(
                f"{name_of(valid[name])[:80]!r} -> {name[:80]!r}" for name in mismatched[:10]
            ),
        )
        for name in mismatched:
            valid[name] = renamed(valid[name], name)
    return valid


def decode_json_object(
    text: str | bytes,
    what: str,
    build: Callable[[dict[str, Any]], T],
    *,
    max_size: int = DEFAULT_MAX_BODY_SIZE,
) -> T:
    """`build(obj)` for the JSON object in `text` (fastjson's bare keys allowed).

    Any failure, including a wrong shape deep inside, is a `BodyDecodeError` naming `what`, so
    that callers handling a peer's body (SlaveSynchronize) have one exception to catch.
    """
    try:
        obj = loads_fastjson(text, max_size=max_size)
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
    """A table kept as rows in `tables.db`, with its RocketMQ JSON file for import and export.

    Subclasses say how the whole table is encoded, parsed and adopted as JSON (the file), and
    how one entry is encoded and all rows adopted (the database). A change calls `changed(key)`
    and then `persist()` (or lets the owner persist later, as offsets are): only the keys that
    changed since the last persist are written. Parsing and adopting are separate steps so that
    a file that fails half-way through parsing never leaves half of its content in the table.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table_name = path.stem
        self._store: TableStore | None = None
        self._changed_keys: set[str] = set()
        # key -> its `encode_row` text, for the changed keys whose caller had it at hand
        self._changed_texts: dict[str, str] = {}
        self._version_changed = False

    # --- what subclasses define -------------------------------------------------------------

    @abc.abstractmethod
    def encode(self) -> str:
        """The table as the file's JSON text."""

    @abc.abstractmethod
    def parse(self, text: str) -> T:
        """The file's content, parsed; raises one of `DECODE_ERRORS` when it is unusable."""

    @abc.abstractmethod
    def adopt(self, state: T) -> None:
        """Take a parsed file's content as the table."""

    @abc.abstractmethod
    def row_keys(self) -> Iterable[str]:
        """Every key of the table (the keys of its JSON file's map)."""

    @abc.abstractmethod
    def encode_row(self, key: str) -> str | None:
        """The JSON text of one entry; None when the table no longer holds `key`."""

    @abc.abstractmethod
    def adopt_rows(self, rows: dict[str, str], version: str | None) -> None:
        """Take the database's rows (key -> `encode_row` text) and version as the table;
        raises one of `DECODE_ERRORS` when a row is unusable."""

    def encode_version(self) -> str | None:
        """The table's DataVersion as JSON; None for tables without one."""
        return None

    def stored_whole(self) -> None:
        """Called once the whole table was written to `tables.db` (an import, the defaults)."""

    def read_rows(self) -> tuple[dict[str, str], str | None]:
        """The rows and version `load` gives `adopt_rows` (a subclass may keep some back)."""
        return self.store.read(self.table_name)

    def row_count(self) -> int:
        return sum(1 for _ in self.row_keys())

    # --- the database -----------------------------------------------------------------------

    @property
    def store(self) -> TableStore:
        """The connection to `tables.db`, opened on first use."""
        if self._store is None:
            self._store = TableStore(self.path.parent / TABLES_FILE)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def changed(self, key: str) -> None:
        """Note that `key`'s entry was put, replaced or removed; the next persist writes it."""
        self._changed_keys.add(key)
        if self._changed_texts:
            self._changed_texts.pop(key, None)

    def changed_to(self, key: str, text: str | None) -> None:
        """`changed`, with the entry's new `encode_row` text when the caller has it at hand
        (None: encoded at the persist): the persist then does not look the key up again in a
        large table."""
        if text is None:
            self.changed(key)
        else:
            self._changed_keys.add(key)
            self._changed_texts[key] = text

    def version_changed(self) -> None:
        self._version_changed = True

    def changed_all(self) -> None:
        """Every key changed (a table replaced wholesale): the next persist writes them all."""
        self._changed_keys.update(self.row_keys())
        self._changed_texts = {}
        self._version_changed = True

    def take_changes(self) -> TableChanges:
        """The rows changed since the last call, encoded now (on the event loop: a consistent
        view), for `store.write` (which may run in a worker thread)."""
        changes = TableChanges(version=self.encode_version() if self._version_changed else None)
        texts = self._changed_texts
        for key in self._changed_keys:
            value = texts.get(key)
            if value is None:
                value = self.encode_row(key)
            if value is None:
                changes.deletes.add(key)
            else:
                changes.puts[key] = value
        self._changed_keys = set()
        self._changed_texts = {}
        self._version_changed = False
        return changes

    def restore_changes(self, changes: TableChanges) -> None:
        """A write of `changes` failed: they are written again by the next persist."""
        self._changed_keys.update(changes.puts)
        self._changed_keys.update(changes.deletes)
        if changes.version is not None:
            self._version_changed = True

    def load(self) -> bool:
        """Read the table from `tables.db`, or import it from its JSON file (or that file's
        backup) the first time; False when there was neither (the defaults are then stored)."""
        store = self.store
        if store.has(self.table_name):
            rows, version = self.read_rows()
            try:
                self.adopt_rows(rows, version)
            except DECODE_ERRORS as exc:
                raise ConfigFileCorruptError(
                    f"table {self.table_name} in {store.path} is unreadable "
                    f"({type(exc).__name__}: {exc}); restore the file from a backup"
                ) from exc
            log.info("loaded %d %s entries from %s", self.row_count(), self.table_name, store.path)
            return True
        state = load(self.path, self.parse)
        if state is not None:
            self.adopt(state)
        rows = {key: value for key in self.row_keys() if (value := self.encode_row(key))}
        source = f"imported {self.path.name}" if state is not None else "new"
        store.replace(self.table_name, rows, self.encode_version(), source)
        self.stored_whole()
        self._changed_keys = set()
        self._changed_texts = {}
        self._version_changed = False
        if state is None:
            log.info("config file %s does not exist; starting with defaults", self.path)
            return False
        log.info("imported %s into %s: %d entries", self.path, store.path, len(rows))
        return True

    def persist(self) -> None:
        """Write the changed rows now; raises `OSError` on failure (they are kept to retry)."""
        changes = self.take_changes()
        if not changes:
            return
        try:
            self.store.write(self.table_name, changes)
        except OSError:
            self.restore_changes(changes)
            raise

    def persist_quietly(self) -> bool:
        """Persist, logging instead of raising: a failed write must not fail the request that
        changed the table (RocketMQ logs and goes on); the next successful persist catches up."""
        try:
            self.persist()
        except OSError as exc:  # the OS error says it all (permission, disk full): no traceback
            log.error("cannot persist %s: %s", self.table_name, exc)
            return False
        return True

    # --- the JSON file ----------------------------------------------------------------------

    def export(self) -> None:
        """Write the table's RocketMQ JSON file now, crash-safely; raises `OSError`."""
        persist(self.path, self.encode())

    def export_quietly(self) -> bool:
        try:
            self.export()
        except OSError as exc:
            log.error("cannot export %s: %s", self.path, exc)
            return False
        return True
