"""Small message stores on a test's tmp dir.

`StoreFactory(**defaults)` holds the StoreConfig fields one test module wants (small files, so
that they roll); `config(root, **overrides)` builds and validates a StoreConfig under `root`,
`open(root, **overrides)` a loaded (not started) MessageStore on it. A module names them as it
likes, e.g. `make_config = STORES.config`, `open_store = STORES.open`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore

SMALL: dict[str, Any] = {
    "mapped_file_size_commit_log": 4096,
    "max_message_size": 1024,
    "mapped_file_size_consume_queue": 20 * 64,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
}


class StoreFactory:
    def __init__(self, **defaults: Any) -> None:
        self.defaults = {**SMALL, **defaults}

    def config(self, root: Path, **overrides: Any) -> StoreConfig:
        values = {**self.defaults, "store_path_root_dir": str(root), **overrides}
        config = StoreConfig(**values)
        config.validate()
        return config

    def open(
        self, root: Path, *, disk_usage: Callable[[Path], float] | None = None, **overrides: Any
    ) -> MessageStore:
        config = self.config(root, **overrides)
        if disk_usage is None:
            store = MessageStore(config)
        else:
            store = MessageStore(config, disk_usage=disk_usage)
        store.load()
        return store
