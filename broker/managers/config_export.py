"""Export of `config/tables.db` as RocketMQ's JSON config files, for operators and RocketMQ's
tools: `tidemq-cluster export-config <storePathRootDir> [--out DIR]`.

It reads the database read-only, in one transaction per table, so it runs beside a live
broker (SQLite's WAL lets a reader see the last committed state while the broker writes) and
writes each file crash-safely (`config_file.persist`: `.tmp`, `.bak`, rename). The files are
exactly what the broker exports at a clean stop: the file of a table is
`{"<map>": {key: entry}, "dataVersion": ...}`, the entries being the rows' JSON as stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidemq.broker.managers.config_file import (
    CONSUMER_OFFSET_FILE,
    DELAY_OFFSET_FILE,
    SUBSCRIPTION_GROUP_FILE,
    TOPICS_FILE,
    config_dir,
    persist,
    pretty_json,
)
from tidemq.broker.managers.table_store import TABLES_FILE, TableStore

__all__ = ["ExportedFile", "export_config"]


@dataclass(frozen=True, slots=True)
class _FileShape:
    file: str
    map_name: str
    versioned: bool


_SHAPES: Final = (
    _FileShape(TOPICS_FILE, "topicConfigTable", True),
    _FileShape(SUBSCRIPTION_GROUP_FILE, "subscriptionGroupTable", True),
    _FileShape(CONSUMER_OFFSET_FILE, "offsetTable", False),
    _FileShape(DELAY_OFFSET_FILE, "offsetTable", False),
)


@dataclass(frozen=True, slots=True)
class ExportedFile:
    path: Path
    entries: int


def export_config(store_root: Path, out_dir: Path | None = None) -> list[ExportedFile]:
    """Write the JSON file of every table `tables.db` holds into `out_dir` (default: the
    store's config folder). Raises `FileNotFoundError` when there is no `tables.db`, `OSError`
    when a file cannot be written."""
    source = config_dir(store_root) / TABLES_FILE
    if not source.is_file():
        raise FileNotFoundError(f"no {TABLES_FILE} under {config_dir(store_root)}")
    target = out_dir if out_dir is not None else config_dir(store_root)
    target.mkdir(parents=True, exist_ok=True)
    store = TableStore(source, readonly=True)
    try:
        held = set(store.tables())
        exported = []
        for shape in _SHAPES:
            table = Path(shape.file).stem
            if table not in held:
                continue
            rows, version = store.read(table)
            content: dict[str, Any] = {shape.map_name: {k: json.loads(v) for k, v in rows.items()}}
            if shape.versioned and version is not None:
                content["dataVersion"] = json.loads(version)
            path = target / shape.file
            persist(path, pretty_json(content))
            exported.append(ExportedFile(path, len(rows)))
        return exported
    finally:
        store.close()
