"""The store's lock file, `<storePathRootDir>/lock`: one process at a time opens a store.

The file is flock'ed (exclusive, non-blocking) for as long as the store is loaded, and holds the
holder's pid followed by a newline, so that a refused process can say who holds it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tidemq.store.errors import StoreLockedError


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "lock"
        self._fd: int | None = None

    def take(self) -> None:
        """Lock the store, or raise StoreLockedError naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise StoreLockedError(
                f"store {self.root} is in use by another process{who}: "
                f"lock file {self.path} is held"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
