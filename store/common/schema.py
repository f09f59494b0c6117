"""One declarative schema: a dataclass read from and written to camelCase string keys.

Three kinds of document in tidemq are maps of strings whose keys are Java field names: a
request's `extFields` (`client.protocol.headers`), a name-server request's `extFields`
(`client.protocol.namesrv`) and a properties file (`common.settings`). Each declares a dataclass;
`Schema(cls, dialect)` resolves once per class what each field reads and writes, and compiles
its decode into straight-line code (headers are read on every request):

- key: the attribute in camelCase (`queue_id` -> `queueId`), or `metadata["key"]`. A `keys`
  renaming (attribute -> key) given to the schema wins over both: SEND_MESSAGE_V2 sends `a`..`m`.
  Error messages name the field by its Java name, never by a renamed key.
- type: `str`, `int`, `bool`, `float` or an `Enum` (by member name); `X | None` is an `X` that
  may be absent. An int must fit Java's type: 64 bits, or `metadata["bits"]` (32: an Integer).
  `metadata["min"]` and `metadata["max"]` bound a number.
- required: no default and not `X | None`, or `metadata["required"]` (Java's @CFNotNull).
  An absent optional field keeps its default (it must have one); keys the class does not
  declare are ignored.

Encoding leaves out None and writes booleans as `true`/`false`, enums by name, numbers with
`str()`, text as it is. `decode(encode(x)) == x` for every value that fits its type.

A `Dialect` says how text reads and how a problem is reported:

    =============  =========================================  ===============================
                   lenient (RocketMQ's decodeCommandCustom-   strict (configuration)
                   Header: extFields)
    =============  =========================================  ===============================
    text           as it is                                   stripped
    bool           "true" in any case is True, else False     "true" or "false", else error
                   (Java's Boolean.parseBoolean)
    empty number   absent                                     error
    =============  =========================================  ===============================

A problem is the dialect's exception with a message from its templates, which may use
`{owner}` (the class name), `{key}`, `{raw}`, `{expected}`, `{bits}`, `{bound}`, `{value}`.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def camel_case(name: str) -> str:
    """`queue_id` -> `queueId`: a Python attribute as the Java field it stands for."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True, slots=True, eq=False)  # a dialect is itself: hashed by identity
class Dialect:
    """How a kind of document spells its values and reports a missing or malformed one."""

    error: Callable[[str], Exception]
    strict: bool
    missing: str = "{owner}: lacks {key}"
    malformed: str = "{key}: expected {expected}, got {raw!r}"
    too_wide: str = "{key}: {raw!r} does not fit {bits} bits"
    out_of_range: str = "{key}: must be {bound}, got {value}"


class _Problem:
    """Builds a dialect's exception for one field (only ever on the error path)."""

    __slots__ = ("dialect", "key", "owner")

    def __init__(self, dialect: Dialect, owner: str, key: str) -> None:
        self.dialect = dialect
        self.owner = owner
        self.key = key

    def __call__(self, template: str, **values: object) -> Exception:
        return self.dialect.error(template.format(owner=self.owner, key=self.key, **values))


Reader = Callable[[str], Any]
Writer = Callable[[Any], str]


def _int_range(bits: int, low: Any, high: Any) -> tuple[int, int]:
    """The values an int field takes: its Java type's (Integer or Long) within its bounds."""
    least, most = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return (least if low is None else max(least, low), most if high is None else min(most, high))


def _int_reader(problem: _Problem, bits: int, low: Any, high: Any) -> Reader:
    wide_low, wide_high = _int_range(bits, None, None)
    # One comparison on the way through; which limit was crossed is sorted out only on failure.
    least, most = _int_range(bits, low, high)
    templates = problem.dialect

    def read(raw: str) -> int:
        try:
            value = int(raw)  # int() ignores surrounding blanks itself
        except ValueError:
            raise problem(templates.malformed, raw=raw, expected="an integer") from None
        if least <= value <= most:
            return value
        if not wide_low <= value <= wide_high:
            raise problem(templates.too_wide, raw=raw, bits=bits)
        raise _out_of_range(problem, value, low, high)

    return read


def _out_of_range(problem: _Problem, value: float, low: Any, high: Any) -> Exception:
    bound = f"at least {low}" if low is not None and value < low else f"at most {high}"
    return problem(problem.dialect.out_of_range, bound=bound, value=value)


def _float_reader(problem: _Problem, low: Any, high: Any) -> Reader:
    templates = problem.dialect

    def read(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise problem(templates.malformed, raw=raw, expected="a number") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise _out_of_range(problem, value, low, high)
        return value

    return read


def _java_bool(raw: str) -> bool:
    return raw.strip().lower() == "true"


def _strict_bool_reader(problem: _Problem) -> Reader:
    def read(raw: str) -> bool:
        text = raw.strip().lower()
        if text not in ("true", "false"):
            raise problem(problem.dialect.malformed, raw=raw, expected="true or false")
        return text == "true"

    return read


def _enum_reader(problem: _Problem, kind: type[enum.Enum], strict: bool) -> Reader:
    names = ", ".join(m.name for m in kind)

    def read(raw: str) -> enum.Enum:
        try:
            return kind[raw.strip() if strict else raw]
        except KeyError:
            raise problem(problem.dialect.malformed, raw=raw, expected=f"one of {names}") from None

    return read


def _reader(kind: Any, problem: _Problem, meta: Mapping[str, Any]) -> Reader | None:
    """The field's text-to-value converter; None: the text itself."""
    strict = problem.dialect.strict
    low, high = meta.get("min"), meta.get("max")
    if kind is bool:
        return _strict_bool_reader(problem) if strict else _java_bool
    if kind is int:
        return _int_reader(problem, meta.get("bits", 64), low, high)
    if kind is float:
        return _float_reader(problem, low, high)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _enum_reader(problem, kind, strict)
    if kind is str:
        return str.strip if strict else None
    raise TypeError(f"{problem.owner}.{problem.key}: a schema field cannot be {kind!r}")


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _enum_text(value: enum.Enum) -> str:
    return value.name


def _writer(kind: Any) -> Writer | None:
    """The field's value-to-text converter; None: the value is its own text."""
    if kind is bool:
        return _bool_text
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _enum_text
    if kind is str:
        return None
    return str


class SchemaField(NamedTuple):
    """One field as decoding walks it, everything looked up once."""

    name: str  # the attribute
    wire: str  # its key in the document, after the schema's renaming
    key: str  # its Java name, for error messages
    read: Reader | None
    empty_is_absent: bool  # a lenient dialect reads an empty number as no value
    required: bool
    int_range: tuple[int, int] | None  # an int field's values (its reader checks the same)


class Schema(Generic[T]):
    """decode/encode of dataclass `cls` under `dialect` (and a key renaming), built once.

    Headers are read on every request, so the schema resolves up front what a walk over
    `dataclasses.fields` would look up per field (key, converter, bounds, default) and compiles
    `decode` into straight-line code (`_compile_decode`). A field that may be absent needs a
    default.
    """

    __slots__ = ("cls", "decode", "dialect", "encode", "fields", "keys", "writers")

    def __init__(
        self, cls: type[T], dialect: Dialect, keys: Mapping[str, str] | None = None
    ) -> None:
        self.cls = cls
        self.dialect = dialect
        self.keys = dict(keys) if keys else None
        hints = typing.get_type_hints(cls)
        fields: list[SchemaField] = []
        writers: list[tuple[str, str, Writer | None]] = []
        defaults: dict[str, Callable[[], Any] | _Constant] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            kind = hints[f.name]
            optional = type(None) in typing.get_args(kind)
            if optional:
                kind = next(a for a in typing.get_args(kind) if a is not type(None))
            required = f.metadata.get("required", False) or (
                f.default is _MISSING and f.default_factory is _MISSING and not optional
            )
            key = f.metadata.get("key") or camel_case(f.name)
            wire = self.keys.get(f.name, key) if self.keys else key
            read = _reader(kind, _Problem(dialect, cls.__name__, key), f.metadata)
            empty_is_absent = not dialect.strict and kind in (int, float)
            meta = f.metadata
            int_range = (
                _int_range(meta.get("bits", 64), meta.get("min"), meta.get("max"))
                if kind is int
                else None
            )
            fields.append(
                SchemaField(f.name, wire, key, read, empty_is_absent, required, int_range)
            )
            writers.append((f.name, wire, _writer(kind)))
            if not required:
                defaults[f.name] = _default_of(f, cls.__name__)
        self.fields = tuple(fields)
        self.writers = tuple(writers)
        self.decode: Callable[[Mapping[str, str]], T] = _compile_decode(self, defaults)
        self.encode: Callable[[T], dict[str, str]] = _compile_encode(self)

    def wire_keys(self) -> list[str]:
        return [f.wire for f in self.fields]


class _Constant(NamedTuple):
    value: Any


def _default_of(f: dataclasses.Field[Any], owner: str) -> Callable[[], Any] | _Constant:
    if f.default_factory is not _MISSING:
        return f.default_factory
    if f.default is _MISSING:
        raise TypeError(f"{owner}.{f.name}: an optional field needs a default")
    return _Constant(f.default)


def _compile_decode(
    schema: Schema[T], defaults: Mapping[str, Callable[[], Any] | _Constant]
) -> Callable[[Mapping[str, str]], T]:
    """The schema's decode as straight-line code, one block per field.

    A loop over the field table pays, per field, for unpacking its row, for the tests that do
    not apply to it and for a converter call; the generated function has none of that: an int
    is read inline (the field's reader runs only to raise the error that names the field), and
    the class is called with keywords, so no dict is built either. Only names, numbers and
    repr()'d keys go into the source; everything else comes through its namespace.
    """
    namespace: dict[str, Any] = {"cls": schema.cls}
    lines = ["def decode(doc):", "    get = doc.get"]
    arguments = []
    for i, f in enumerate(schema.fields):
        namespace[f"read{i}"] = f.read
        absent = "raw is None or raw == ''" if f.empty_is_absent else "raw is None"
        if f.int_range is not None:
            least, most = f.int_range
            present = [
                "try:",
                f"    v{i} = int(raw)",
                "except ValueError:",
                f"    v{i} = read{i}(raw)",  # raises
                f"if not {least} <= v{i} <= {most}:",
                f"    v{i} = read{i}(raw)",  # raises
            ]
        elif f.read is _java_bool:
            # the two spellings every client sends, without a call; anything else to the reader
            present = [f'v{i} = False if raw == "false" else raw == "true" or read{i}(raw)']
        else:
            present = [f"v{i} = raw" if f.read is None else f"v{i} = read{i}(raw)"]
        if f.required:
            namespace[f"missing{i}"] = _Problem(schema.dialect, schema.cls.__name__, f.key)
            absent_lines = [f"raise missing{i}(template{i})"]
            namespace[f"template{i}"] = schema.dialect.missing
        else:
            default = defaults[f.name]
            if isinstance(default, _Constant):
                namespace[f"default{i}"] = default.value
                absent_lines = [f"v{i} = default{i}"]
            else:
                namespace[f"factory{i}"] = default
                absent_lines = [f"v{i} = factory{i}()"]
        lines.append(f"    raw = get({f.wire!r})")
        lines.append(f"    if {absent}:")
        lines += [f"        {line}" for line in absent_lines]
        lines.append("    else:")
        lines += [f"        {line}" for line in present]
        arguments.append(f"{f.name}=v{i}")
    lines.append(f"    return cls({', '.join(arguments)})")
    exec("\n".join(lines), namespace)  # the source holds only names, numbers and reprs
    decode: Callable[[Mapping[str, str]], T] = namespace["decode"]
    return decode


def _compile_encode(schema: Schema[T]) -> Callable[[T], dict[str, str]]:
    """The schema's encode as straight-line code: a request's header is written per request."""
    namespace: dict[str, Any] = {}
    lines = ["def encode(obj):", "    out = {}"]
    for i, (name, wire, write) in enumerate(schema.writers):
        namespace[f"write{i}"] = write
        lines.append(f"    v = obj.{name}")
        lines.append("    if v is not None:")
        lines.append(f"        out[{wire!r}] = {'v' if write is None else f'write{i}(v)'}")
    lines.append("    return out")
    exec("\n".join(lines), namespace)  # the source holds only attribute names and reprs
    encode: Callable[[T], dict[str, str]] = namespace["encode"]
    return encode


_SCHEMAS: dict[tuple[type[Any], Dialect], Schema[Any]] = {}


def schema_for(cls: type[T], dialect: Dialect) -> Schema[T]:
    """The schema of `cls` under `dialect` without renaming, built on first use."""
    schema = _SCHEMAS.get((cls, dialect))
    if schema is None:
        schema = _SCHEMAS[(cls, dialect)] = Schema(cls, dialect)
    return schema
