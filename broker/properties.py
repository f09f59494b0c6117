"""Java `.properties` files, the format RocketMQ's broker and name server read.

Lines are `key=value`, `key: value` or `key value`; `#` and `!` start comments; a line ending in
an odd number of backslashes continues on the next line; `\\t`, `\\n`, `\\uXXXX` and friends are
unescaped. Unlike Java, blanks at the end of a value are dropped unless escaped. Later keys override
earlier ones, and command-line `key=value` overrides override the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tidemq.common.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=: \t\f"


def _logical_lines(text: str) -> Iterable[str]:
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
            except ValueError:
                raise ConfigError(f"bad \\u escape in {text!r}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_pair(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] in _SEPARATORS:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":") and (i == len(line) or line[i] in " \t\f"):
        rest = rest[1:].lstrip(" \t\f")
    elif i < len(line) and line[i] in "=:":
        rest = line[i + 1 :].lstrip(" \t\f")
    return _unescape(key), _unescape(_strip_trailing_blanks(rest))


def _strip_trailing_blanks(text: str) -> str:
    """Drop trailing blanks, but not an escaped one (`\\ `, `\\t`): those belong to the value."""
    end = len(text)
    while end and text[end - 1] in " \t\f":
        head = text[: end - 1]
        if (len(head) - len(head.rstrip("\\"))) % 2 == 1:
            break
        end -= 1
    return text[:end]


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a properties file into a dict (last occurrence of a key wins)."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_pair(line)
        if key:
            result[key] = value
    return result


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file; a missing or unreadable file is a `ConfigError` naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from exc
    return parse_properties(text)


def parse_overrides(args: Iterable[str]) -> dict[str, str]:
    """Turn command-line `key=value` arguments into a dict; anything else is a `ConfigError`."""
    result: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected key=value on the command line, got {arg!r}")
        result[key.strip()] = value.strip()
    return result
