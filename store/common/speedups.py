"""Which twin runs: a compiled function (Cython, store/_speedups.pyx) or its pure-Python twin.

Every compiled function keeps a pure-Python twin of the same name, the reference: same
arguments, same results, same exceptions and messages (the twin tests check both with
hypothesis). A module defines the pure function and then rebinds its name once, at import:

    java_string_hash = speedups.select(java_string_hash)

`select` gives the compiled function of that name from the compiled module when it imports, and
the pure one otherwise: a source checkout without a compiler, a platform without a wheel, or
TIDEMQ_PURE_PYTHON set to anything but "" or "0" (read at import; it forces every twin pure, for
comparisons and debugging). `PURE_TWINS` keeps every pure twin for the tests, whichever was
picked. Another package compiles its loops the same way: its own `_speedups.pyx`, a line in
pyproject.toml's ext-modules, and `select(pure, "tidemq.<package>._speedups")`.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, TypeVar, cast

__all__ = ["PURE_PYTHON_ENV", "PURE_TWINS", "compiled_module", "pure_python_forced", "select"]

log = logging.getLogger(__name__)

PURE_PYTHON_ENV: Final = "TIDEMQ_PURE_PYTHON"
STORE_COMPILED: Final = "tidemq.store._speedups"

# "module.name" of every pure twin -> the twin, whether or not the compiled one was picked.
PURE_TWINS: Final[dict[str, Any]] = {}

F = TypeVar("F", bound=Callable[..., Any] | type)


def pure_python_forced() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def compiled_module(name: str = STORE_COMPILED) -> ModuleType | None:
    """The compiled module `name`, or None when it is not built or the pure path is forced."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:
        # Not built (no compiler at install time), or built for another interpreter.
        log.debug("%s not importable (%s): pure-Python twins run", name, e)
        return None


def select(pure: F, module: str = STORE_COMPILED) -> F:
    """The compiled twin of `pure` (same name, in `module`) when available, else `pure`."""
    PURE_TWINS[f"{pure.__module__}.{pure.__qualname__}"] = pure
    compiled = compiled_module(module)
    if compiled is None:
        return pure
    return cast(F, getattr(compiled, pure.__name__))
