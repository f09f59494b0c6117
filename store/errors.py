"""The bottom of tidemq's exception tree, and the store's branch of it.

`TideMQError` is the root of every tidemq error; it lives here, in the lowest layer, so that
store, ha and client errors can all derive from it (`client.errors` re-exports it and draws the
whole tree). `DecodeError` is the base of every "these bytes or this text do not follow their
format" error, whichever layer's format it is (records, batches, frames, headers, HA streams).

`StoreError` roots the store's own errors. Configuration mistakes, on-disk corruption found at
load time and a store that another process holds are separate leaves, so that a daemon can turn
each into a clear start-up message.
"""

from __future__ import annotations

from typing import ClassVar


class TideMQError(Exception):
    """Root of every tidemq error.

    `retriable` says whether the same call may succeed if repeated (or sent to another broker):
    RocketMQ's producer retries after such an error, and so may a caller.
    """

    retriable: ClassVar[bool] = False


class DecodeError(TideMQError):
    """Input does not follow its format; the message names the part (field, offset) at fault."""


class StoreError(TideMQError):
    """Root of every error raised by the store."""


class ConfigError(StoreError):
    """A configuration value is missing, malformed or out of range; the message names the key."""


class StorePathError(StoreError, ValueError):
    """A name would make a path outside the store's folder for it (a topic of `../x`)."""


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
