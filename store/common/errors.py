"""The bottom of tidemq's exception tree: the root, and the branches every layer raises.

`TideMQError` is the root of every tidemq error; it lives here, in the common layer under every
package, so that store, ha, client and broker errors all derive from it (`client.errors`
re-exports it and draws the whole tree). `DecodeError` is the base of every "these bytes or this
text do not follow their format" error, whichever layer's format it is (records, batches,
frames, headers, HA streams).

`StoreError` roots the errors a daemon turns into a start-up message: a configuration mistake
(`ConfigError`, raised by the common settings), a name that would leave its folder
(`StorePathError`, raised by the common safe files), and the store's own leaves
(`store/errors.py`: on-disk corruption, a store another process holds).
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
    """Root of every error raised by the store, its configuration and its files."""


class ConfigError(StoreError):
    """A configuration value is missing, malformed or out of range; the message names the key."""


class StorePathError(StoreError, ValueError):
    """A name would make a path outside the store's folder for it (a topic of `../x`)."""
