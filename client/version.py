"""tidemq's version, from the installed distribution's metadata, and the `--version` option
every console script takes (`namesrvd --version` prints `namesrvd (tidemq) 0.1.0`)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, TypeVar

import click

__all__ = ["TIDEMQ_VERSION", "version_option"]

F = TypeVar("F", bound=Callable[..., Any])


def _installed_version() -> str:
    try:
        return version("tidemq")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


TIDEMQ_VERSION: Final = _installed_version()


def version_option(prog_name: str) -> Callable[[F], F]:
    """`--version`: print `<prog_name> (tidemq) <version>` and exit 0."""
    return click.version_option(
        TIDEMQ_VERSION, "--version", prog_name=prog_name, message="%(prog)s (tidemq) %(version)s"
    )
