"""Typed, validated configuration objects read from RocketMQ's camelCase keys.

Each concern (store, HA, broker, name server) declares a frozen dataclass whose fields are made
with `setting()`. The fields are a `common.schema` schema in the strict dialect: a field's
properties key is its name in camelCase unless `key=` says otherwise, so
`mapped_file_size_commit_log` reads `mappedFileSizeCommitLog`; `from_properties()` converts each
value to the field's type (int, float, bool, str or an Enum) and checks its bounds; any problem is
a `ConfigError` that names the key. Unknown keys are ignored here, because one file configures
several concerns; `unknown_keys()` lists those no concern claims, and `refuse_mistyped_keys()`
stops at one of them that is a known key mistyped (at most `TYPO_DISTANCE` edits from it, or
differing in case only): `brokerRoll=SYNC_MASTER` ignored would run a master without the
replication asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from tidemq.common.errors import ConfigError
from tidemq.common.schema import Dialect, schema_for

T = TypeVar("T")

# Blanks around a value are dropped, a boolean is true or false, an empty number is an error.
PROPERTIES = Dialect(error=ConfigError, strict=True, missing="{owner}: properties lack {key}")


def setting(
    default: Any,
    *,
    key: str | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    doc: str = "",
) -> Any:
    """Declare a configuration field with its properties key, bounds and meaning."""
    meta = {"key": key, "min": min_value, "max": max_value, "doc": doc}
    return dataclasses.field(default=default, metadata=meta)


def from_properties(cls: type[T], props: Mapping[str, str], **fixed: Any) -> T:
    """Build a config dataclass from properties; `fixed` values bypass the file (derived ones)."""
    schema = schema_for(cls, PROPERTIES)
    if fixed:
        given = {f.wire for f in schema.fields if f.name in fixed}
        props = {key: value for key, value in props.items() if key not in given}
    config = schema.decode(props)
    if fixed:
        config = dataclasses.replace(config, **fixed)  # type: ignore[type-var]
    validate = getattr(config, "validate", None)
    if validate is not None:
        validate()
    return config


def to_properties(config: Any) -> dict[str, str]:
    """The effective configuration as properties (what `brokerd -p` prints)."""
    return schema_for(type(config), PROPERTIES).encode(config)


def known_keys(classes: Iterable[type[Any]]) -> set[str]:
    return {key for cls in classes for key in schema_for(cls, PROPERTIES).wire_keys()}


def unknown_keys(props: Mapping[str, str], classes: Iterable[type[Any]]) -> list[str]:
    known = known_keys(classes)
    return sorted(k for k in props if k not in known)


# Levenshtein edits (insert, delete, substitute; a swap of two letters is two).
TYPO_DISTANCE = 2


def edit_distance(a: str, b: str, limit: int = TYPO_DISTANCE) -> int:
    """Levenshtein distance of `a` and `b`, or `limit + 1` as soon as it is over `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        if min(current) > limit:
            return limit + 1
        previous = current
    return min(previous[-1], limit + 1)


def closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` is most likely a mistyping of: one differing in case only, else
    the nearest within TYPO_DISTANCE edits (ties: the first in sorted order); None if none."""
    lowered = key.lower()
    best: tuple[int, str] | None = None
    for candidate in sorted(known):
        if candidate.lower() == lowered:
            return candidate
        distance = edit_distance(key, candidate)
        if distance <= TYPO_DISTANCE and (best is None or distance < best[0]):
            best = (distance, candidate)
    return None if best is None else best[1]


def refuse_mistyped_keys(
    unknown: Iterable[str], classes: Iterable[type[Any]], foreign: frozenset[str] = frozenset()
) -> None:
    """Raise `ConfigError` "unknown key K: did you mean C?" for the first of `unknown` that
    is close to a known key; `foreign` are keys of other programs (RocketMQ's that this one
    does not use) that are unknown here without being mistakes."""
    known = known_keys(classes)
    for key in sorted(unknown):
        if key in foreign:
            continue
        near = closest_key(key, known)
        if near is not None:
            raise ConfigError(f"unknown key {key}: did you mean {near}?")
