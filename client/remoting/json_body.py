"""JSON bodies as RocketMQ writes them (fastjson) and as tidemq writes them (standard JSON).

Java's fastjson writes the keys of a `Map<Long, ...>` or `Map<Integer, ...>` without quotes, for
example a TopicRouteData body::

    {"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},...}],...}

which is not JSON. `loads_fastjson` parses standard JSON with the C parser first; only when that
fails does it quote bare keys (a number such as `0`, `-1` or `1.5`, or an identifier such as
`abc`, written right after `{` or `,` and followed by `:`) and parse again. The rewrite walks
the text as a sequence of string literals and everything between them, so text inside a string
(`"{0:x}"`) is never touched. Quoted keys stay strings: `{0:"a"}` reads as `{"0": "a"}`.
fastjson's object-valued keys (a `Map<MessageQueue, ...>` written as `{{"topic":...}:...}`) are
not supported and raise `BodyDecodeError`.

`dumps` writes compact standard JSON with every key quoted, non-ASCII as UTF-8; fastjson and the
C++ client read quoted numeric keys back into numeric maps.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from tidemq.client.remoting.errors import BodyDecodeError, EncodeError

__all__ = ["DEFAULT_MAX_BODY_SIZE", "dumps", "loads_fastjson", "quote_bare_keys"]

# A body cannot be larger than a frame.
DEFAULT_MAX_BODY_SIZE: Final = 16 * 1024 * 1024

# Either a string literal (closed or running to the end of the text, so that an unterminated one
# still swallows everything after its opening quote), or a bare key after `{` or `,`.
_TOKEN: Final = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"?'
    r"|([{,]\s*)(-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|[A-Za-z_$][A-Za-z0-9_$]*)(?=\s*:)",
    re.DOTALL,
)

_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _quote_bare_key(match: re.Match[str]) -> str:
    key = match.group(2)
    if key is None:
        return match.group(0)  # a string literal, returned unchanged
    return f'{match.group(1)}"{key}"'


def quote_bare_keys(text: str) -> str:
    """`text` with fastjson's unquoted object keys quoted; string contents are left alone."""
    return _TOKEN.sub(_quote_bare_key, text)


def loads_fastjson(
    data: bytes | bytearray | memoryview | str, *, max_size: int = DEFAULT_MAX_BODY_SIZE
) -> Any:
    """Parse a JSON body that fastjson may have written with bare object keys.

    Raises `BodyDecodeError` when `data` is larger than `max_size` bytes (characters for a
    str), is not UTF-8, or is not JSON even with its bare keys quoted.
    """
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_size:
        raise BodyDecodeError(f"JSON body of {size} bytes exceeds the limit of {max_size}")
    text = _as_text(data)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as first:
        fixed = quote_bare_keys(text)
        if fixed == text:
            raise BodyDecodeError(f"body is not JSON: {first}") from first
        try:
            return json.loads(fixed)
        except (ValueError, RecursionError) as exc:
            raise BodyDecodeError(f"body is not JSON, even with bare keys quoted: {exc}") from exc


def _as_text(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise BodyDecodeError(f"JSON body is not valid UTF-8: {exc}") from exc


def dumps(obj: Any) -> bytes:
    """Compact standard JSON of `obj`, keys quoted (int keys become "0"), encoded as UTF-8."""
    try:
        return _ENCODER.encode(obj).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"JSON body is not encodable as UTF-8: {exc}") from exc
