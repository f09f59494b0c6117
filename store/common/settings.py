"""Typed, validated configuration objects read from RocketMQ's camelCase keys.

Each concern (store, HA, broker, name server) declares a frozen dataclass whose fields are made
with `setting()`. The fields are a `common.schema` schema in the strict dialect: a field's
properties key is its name in camelCase unless `key=` says otherwise, so
`mapped_file_size_commit_log` reads `mappedFileSizeCommitLog`; `from_properties()` converts each
value to the field's type (int, float, bool, str or an Enum) and checks its bounds; any problem is
a `ConfigError` that names the key. Unknown keys are ignored here, because one file configures
several concerns; `unknown_keys()` lists those no concern claims.
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
