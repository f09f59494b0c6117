"""The broker's config tables on disk: `<storePathRootDir>/config/tables.db`, one SQLite file.

RocketMQ rewrites a whole JSON file (topics.json, ...) for every change, so one more topic costs
O(number of topics): 0.7 s at 100,000 topics. Here each table is a set of rows, and one change
writes the rows it touched in one transaction: O(1) bytes per change, whatever the table's size.

Schema (every value is the JSON text of one entry, as it appears inside the RocketMQ file)::

    CREATE TABLE config_rows (tbl TEXT, key TEXT, value TEXT, PRIMARY KEY (tbl, key))
    CREATE TABLE config_tables (tbl TEXT PRIMARY KEY, version TEXT, source TEXT)
    CREATE TABLE config_checked (tbl TEXT PRIMARY KEY, rule TEXT)

`tbl` is the RocketMQ file's stem (`topics`, `subscriptionGroup`, `consumerOffset`,
`delayOffset`); `key` the entry's key in that file (topic name, group name, `topic@group`, delay
level); `version` the table's DataVersion as JSON (NULL for tables without one); `source` says
where the table came from (`imported <file>` or `new`). A row in `config_tables` means the table
lives here: its JSON file is then never read again, only written (`export`).

A row in `config_checked` says that every row of `tbl` satisfies the SQL expression `rule` (over
`key` and `value`; `read_split`'s): written when a read found them all so, and deleted by a
trigger (`checked_<tbl>_<crc of rule>_insert`/`_update`) by any write of a row that does not, by
whatever program makes it (the broker, an older version, the sqlite3 shell), so a read need not
evaluate the rule over a million rows again while it holds.

Why SQLite rather than an append-only change log compacted in the background: both write one
change in about 0.2-0.3 ms (one fsync) at 10,000 and at 100,000 entries (measured on this machine;
a full rewrite takes 68 and 725 ms), but SQLite's transactions make a batch of changes atomic
and its readers (the export command) consistent while the broker writes, with no compaction or
log-recovery code of ours to get wrong. It is in the standard library.

Crash safety: WAL journal with `synchronous=FULL`, so a transaction that `write` returned from is
on disk, and a crash in the middle of one leaves the previous state (SQLite rolls back the
incomplete WAL frames at the next open). That is the guarantee of the JSON files' safe writes,
per change instead of per file.

A connection is used from the event loop and from worker threads (the periodic offset flush),
one at a time under a lock.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tidemq.store.errors import CorruptStoreError

__all__ = ["TABLES_FILE", "TableChanges", "TableStore", "TableStoreCorruptError"]

TABLES_FILE: Final = "tables.db"

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS config_rows ("
    "tbl TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (tbl, key)"
    ") WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS config_tables (tbl TEXT PRIMARY KEY, version TEXT, source TEXT)",
    "CREATE TABLE IF NOT EXISTS config_checked (tbl TEXT PRIMARY KEY, rule TEXT NOT NULL)",
)
# A writer waits this long for another connection's transaction (the export command's read).
_BUSY_TIMEOUT_MS: Final = 10_000


def _identifier(table: str) -> str:
    """`table` as a part of a trigger's name (its letters, digits and underscores)."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else "_" for ch in table)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class TableStoreCorruptError(CorruptStoreError):
    """tables.db exists but is not a database SQLite can read; the message names the file."""


@dataclass(slots=True)
class TableChanges:
    """Rows to write (`puts`, key -> value JSON) and keys to delete, with the table's version."""

    puts: dict[str, str] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)
    version: str | None = None

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes or self.version is not None)


class TableStore:
    """One connection to `tables.db`; every method is one transaction."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        self._lock = threading.Lock()
        try:
            if readonly:
                self._db = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
                )
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            if not readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                for statement in _SCHEMA:
                    self._db.execute(statement)
        except sqlite3.DatabaseError as exc:
            raise TableStoreCorruptError(
                f"config table file {path} cannot be used ({exc}); restore it from a backup, or "
                "move it aside to import the JSON files again at the next start"
            ) from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def tables(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT tbl FROM config_tables")]

    def has(self, table: str) -> bool:
        with self._lock:
            found = self._db.execute("SELECT 1 FROM config_tables WHERE tbl = ?", (table,))
            return found.fetchone() is not None

    def read(self, table: str) -> tuple[dict[str, str], str | None]:
        """Every row of `table` and its version, read in one transaction."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
                rows = dict(
                    self._db.execute("SELECT key, value FROM config_rows WHERE tbl = ?", (table,))
                )
                found = self._db.execute(
                    "SELECT version FROM config_tables WHERE tbl = ?", (table,)
                ).fetchone()
            finally:
                self._db.execute("COMMIT")
        return rows, (found[0] if found is not None else None)

    def read_split(
        self, table: str, kept_as_text: str
    ) -> tuple[dict[str, str], str | None, dict[str, str]]:
        """`read`, with the rows for which the SQL expression `kept_as_text` (over `key` and
        `value`) holds apart: (other rows, version, those rows), in one transaction. SQLite
        evaluates it while it scans: no Python work per row beyond taking it; and not at all
        while `config_checked` says that every row satisfies it (module docstring). A read that
        finds them all so records that (a writable store; in the same transaction, so no write
        comes in between)."""
        db = self._db
        with self._lock:
            try:
                db.execute("BEGIN" if self.readonly else "BEGIN IMMEDIATE")
                if self._all_satisfy(table, kept_as_text):
                    rows: dict[str, str] = {}
                    kept = dict(
                        db.execute("SELECT key, value FROM config_rows WHERE tbl = ?", (table,))
                    )
                else:
                    where = "FROM config_rows WHERE tbl = ? AND"
                    kept = dict(db.execute(f"SELECT key, value {where} ({kept_as_text})", (table,)))
                    (count,) = db.execute(
                        "SELECT count(*) FROM config_rows WHERE tbl = ?", (table,)
                    ).fetchone()
                    rows = (
                        {}  # all kept: the expression is not evaluated a second time
                        if count == len(kept)
                        else dict(
                            db.execute(f"SELECT key, value {where} NOT ({kept_as_text})", (table,))
                        )
                    )
                    if not rows and not self.readonly:
                        self._record_all_satisfy(table, kept_as_text)
                found = db.execute(
                    "SELECT version FROM config_tables WHERE tbl = ?", (table,)
                ).fetchone()
            finally:
                if db.in_transaction:
                    db.execute("COMMIT")
        return rows, (found[0] if found is not None else None), kept

    def record_if_all_satisfy(self, table: str, rule: str) -> bool:
        """Record that every row of `table` satisfies `rule` when they do (one pass of SQLite,
        no row taken into Python): a table just written whole (an import, the defaults) then
        loads at the next start without the pass. True when recorded."""
        db = self._db
        with self._lock:
            try:
                db.execute("BEGIN IMMEDIATE")
                (failing,) = db.execute(
                    f"SELECT count(*) FROM config_rows WHERE tbl = ? AND NOT ({rule})", (table,)
                ).fetchone()
                if failing == 0:
                    self._record_all_satisfy(table, rule)
                recorded = self._all_satisfy(table, rule)
                db.execute("COMMIT")
            except sqlite3.Error:  # not recorded: the next read checks every row
                return False
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
        return recorded

    def _all_satisfy(self, table: str, rule: str) -> bool:
        try:
            found = self._db.execute(
                "SELECT 1 FROM config_checked WHERE tbl = ? AND rule = ?", (table, rule)
            ).fetchone()
        except sqlite3.OperationalError:  # a file of an older version, opened read-only
            return False
        return found is not None

    def _record_all_satisfy(self, table: str, rule: str) -> None:
        """The triggers that forget it at the first row written that does not satisfy `rule`,
        then the record itself (module docstring). Not recorded when it cannot be (a full
        disk): the next read checks every row again."""
        db = self._db
        name = f"checked_{_identifier(table)}_{zlib.crc32(rule.encode()):08x}"
        try:
            for (old,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ? ESCAPE '!'",
                (f"checked!_{_identifier(table).replace('_', '!_')}!_%",),
            ).fetchall():
                if not old.startswith(f"{name}_"):  # a rule of another version
                    db.execute(f'DROP TRIGGER "{old}"')
            for event in ("INSERT", "UPDATE"):
                db.execute(
                    f'CREATE TRIGGER IF NOT EXISTS "{name}_{event.lower()}" '
                    f"AFTER {event} ON config_rows "
                    f"WHEN NEW.tbl = {_literal(table)} AND NOT EXISTS (SELECT 1 FROM config_rows "
                    f"WHERE tbl = NEW.tbl AND key = NEW.key AND ({rule})) "
                    "BEGIN DELETE FROM config_checked WHERE tbl = NEW.tbl; END"
                )
            db.execute("INSERT OR REPLACE INTO config_checked VALUES (?, ?)", (table, rule))
        except sqlite3.Error:
            pass

    def write(self, table: str, changes: TableChanges) -> None:
        """Apply `changes` to `table` atomically and durably; raises `OSError` when it cannot."""
        with self._lock:
            self._transaction(
                table,
                changes.puts.items(),
                changes.deletes,
                changes.version,
                replace=False,
                source=None,
            )

    def replace(
        self, table: str, rows: Mapping[str, str], version: str | None, source: str
    ) -> None:
        """Make `table` exactly `rows` (an import), atomically; raises `OSError` on failure."""
        with self._lock:
            self._transaction(table, rows.items(), (), version, replace=True, source=source)

    def _transaction(
        self,
        table: str,
        puts: Iterable[tuple[str, str]],
        deletes: Iterable[str],
        version: str | None,
        *,
        replace: bool,
        source: str | None,
    ) -> None:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                if replace:
                    db.execute("DELETE FROM config_rows WHERE tbl = ?", (table,))
                db.executemany(
                    "INSERT OR REPLACE INTO config_rows VALUES (?, ?, ?)",
                    ((table, key, value) for key, value in puts),
                )
                db.executemany(
                    "DELETE FROM config_rows WHERE tbl = ? AND key = ?",
                    ((table, key) for key in deletes),
                )
                if replace:
                    db.execute(
                        "INSERT OR REPLACE INTO config_tables VALUES (?, ?, ?)",
                        (table, version, source),
                    )
                else:
                    db.execute(
                        "INSERT OR IGNORE INTO config_tables VALUES (?, ?, 'new')", (table, version)
                    )
                    if version is not None:
                        db.execute(
                            "UPDATE config_tables SET version = ? WHERE tbl = ?", (version, table)
                        )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite rolls back by itself after some errors
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            # Disk full, I/O error, read-only file: the caller keeps its changes to retry.
            raise OSError(f"cannot write {self.path}: {exc}") from exc
