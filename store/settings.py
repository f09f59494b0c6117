"""Typed, validated configuration objects read from RocketMQ's camelCase keys.

Each concern (store, HA, broker, name server) declares a frozen dataclass whose fields are made
with `setting()`. A field's properties key is its name in camelCase unless `key=` says otherwise,
so `mapped_file_size_commit_log` reads `mappedFileSizeCommitLog`. `from_properties()` converts
each value to the field's type (int, float, bool, str or an Enum) and checks its bounds; any
problem is a `ConfigError` that names the key. Unknown keys are ignored here, because one file
configures several concerns; `unknown_keys()` lists those no concern claims.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from store.errors import ConfigError

T = TypeVar("T")


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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def property_key(field: dataclasses.Field[Any]) -> str:
    return field.metadata.get("key") or _camel(field.name)


def _convert(key: str, raw: str, kind: Any) -> Any:
    text = raw.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ConfigError(f"{key}: expected true or false, got {raw!r}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {raw!r}") from None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind[text]
        except KeyError:
            names = ", ".join(m.name for m in kind)
            raise ConfigError(f"{key}: expected one of {names}, got {raw!r}") from None
    return text


def _check_bounds(key: str, value: Any, field: dataclasses.Field[Any]) -> None:
    low, high = field.metadata.get("min"), field.metadata.get("max")
    if low is not None and value < low:
        raise ConfigError(f"{key}: must be at least {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{key}: must be at most {high}, got {value}")


def from_properties(cls: type[T], props: Mapping[str, str], **fixed: Any) -> T:
    """Build a config dataclass from properties; `fixed` values bypass the file (derived ones)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = dict(fixed)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = property_key(field)
        if field.name in fixed or key not in props:
            continue
        value = _convert(key, props[key], hints[field.name])
        _check_bounds(key, value, field)
        values[field.name] = value
    config = cls(**values)
    validate = getattr(config, "validate", None)
    if validate is not None:
        validate()
    return config


def to_properties(config: Any) -> dict[str, str]:
    """The effective configuration as properties (what `brokerd -p` prints)."""
    out: dict[str, str] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, enum.Enum):
            text = value.name
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        out[property_key(field)] = text
    return out


def known_keys(classes: Iterable[type[Any]]) -> set[str]:
    return {property_key(f) for cls in classes for f in dataclasses.fields(cls)}


def unknown_keys(props: Mapping[str, str], classes: Iterable[type[Any]]) -> list[str]:
    known = known_keys(classes)
    return sorted(k for k in props if k not in known)
