"""The store's own errors: the leaves of `StoreError` (common/errors.py) only the store raises.

Configuration mistakes, on-disk corruption found at load time and a store that another process
holds are separate leaves, so that a daemon can turn each into a clear start-up message.
"""

from __future__ import annotations

from tidemq.common.errors import StoreError


class StoreLockedError(StoreError):
    """Another process holds the store's lock file."""


class CorruptStoreError(StoreError):
    """The files on disk cannot be loaded as they are (for example a segment of the wrong size)."""


class OffsetMismatchError(StoreError):
    """A raw append named a physical offset that is not the end of the CommitLog."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"raw append at offset {got}, but the CommitLog ends at {expected}")
        self.expected = expected
        self.got = got
