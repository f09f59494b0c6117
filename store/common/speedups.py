"""Which twin runs: a compiled function (Cython) or its pure-Python twin.

Every compiled function keeps a pure-Python twin of the same name, the reference: same
arguments, same results, same exceptions and messages (the twin tests check both with
hypothesis). A module defines the pure function and then rebinds its name once, at import,
naming the compiled module of its subsystem:

    java_string_hash = speedups.select(java_string_hash, "tidemq.store._hashing")

`select` gives the compiled function of that name from the compiled module when it imports, and
the pure one otherwise: a source checkout without a compiler, a platform without a wheel, or
TIDEMQ_PURE_PYTHON set to anything but "" or "0" (read at import; it forces every twin pure, for
comparisons and debugging). `PURE_TWINS` keeps every pure twin for the tests, whichever was
picked.

The compiled modules are one per subsystem, beside the pure modules they twin (store/_hashing.pyx,
store/_fast_scan.pyx, store/_record.pyx, store/_index.pyx, store/_get_message.pyx,
client/remoting/_codec.pyx, client/protocol/_headers.pyx, client/consumer/_received.pyx,
client/spark/_records.pyx, broker/transaction/_records.pyx), each a line in pyproject.toml's
ext-modules. C helpers they share (big-endian fields, the record layout's constants, Java's
string hash) are `.pxi` files they include.
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

# "module.name" of every pure twin -> the twin, whether or not the compiled one was picked.
PURE_TWINS: Final[dict[str, Any]] = {}

F = TypeVar("F", bound=Callable[..., Any] | type)


def pure_python_forced() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """The compiled module `name`, or None when it is not built or the pure path is forced."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:
        # Not built (no compiler at install time), or built for another interpreter.
        log.debug("%s not importable (%s): pure-Python twins run", name, e)
        return None


def select(pure: F, module: str) -> F:
    """The compiled twin of `pure` (same name, in `module`) when available, else `pure`."""
    PURE_TWINS[f"{pure.__module__}.{pure.__qualname__}"] = pure
    compiled = compiled_module(module)
    if compiled is None:
        return pure
    return cast(F, getattr(compiled, pure.__name__))
