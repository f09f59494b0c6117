"""The compiled tier: which twin runs, and the hashing twins giving the same values.

Every function of the compiled modules (store/_hashing.pyx and its siblings, one per subsystem)
is compared with its pure-Python twin (the reference, kept in speedups.PURE_TWINS) here or in the
other test_speedups*.py; the compiled modules must be built (`make install` builds them), so a
broken build fails these tests rather than skipping them.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.speedups_twins import COMPILED_MODULES, SELECTING_MODULES, selected
from tidemq.common import speedups
from tidemq.store import _hashing, index, javahash, tags

for _module in SELECTING_MODULES:
    importlib.import_module(_module)


def pure(module: Any, name: str) -> Any:
    return speedups.PURE_TWINS[f"{module.__name__}.{name}"]


def compiled_functions() -> dict[str, Any]:
    """The public functions and classes of every compiled module, by name (no name twice)."""
    found: dict[str, Any] = {}
    for module_name in COMPILED_MODULES:
        module = importlib.import_module(module_name)
        for name in dir(module):
            if not name.startswith("_"):
                assert name not in found, f"{name} is compiled twice"
                found[name] = getattr(module, name)
    return found


# Any code point, lone surrogates included (a Java string may hold one).
any_text = st.text(alphabet=st.characters(min_codepoint=0, exclude_categories=()))


def test_every_compiled_function_has_a_pure_twin_and_is_selected() -> None:
    compiled = compiled_functions()
    # _command_from_mapping, a private step of the header decoders, is compared in
    # test_speedups_remoting.py
    twins = {
        key.rsplit(".", 1)[1]: key
        for key in speedups.PURE_TWINS
        if not key.rsplit(".", 1)[1].startswith("_")
    }
    assert set(twins) == set(compiled)
    for name, key in twins.items():
        assert selected(key) is compiled[name], key
        assert speedups.PURE_TWINS[key] is not compiled[name]


PROBE = (
    "import importlib, sys\n"
    "from tests.support.speedups_twins import SELECTING_MODULES, selected\n"
    "for module in SELECTING_MODULES:\n"
    "    importlib.import_module(module)\n"
    "from tidemq.common import speedups\n"
    "from tidemq.store import index\n"
    f"assert len(speedups.PURE_TWINS) == {len(speedups.PURE_TWINS)}, speedups.PURE_TWINS\n"
    "for key, twin in speedups.PURE_TWINS.items():\n"
    "    assert selected(key) is twin, key\n"
    "assert index.prefixed_key_hash(topic := index.topic_prefix_hash('T'), b'k') == "
    "index.index_key_hash('T#k')\n"
    f"compiled = {COMPILED_MODULES!r}\n"
    "print('pure', any(sys.modules.get(name) is not None for name in compiled))\n"
)


def run_probe(code: str, **env: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    ).stdout.strip()


def test_the_environment_variable_forces_the_pure_twins() -> None:
    assert run_probe(PROBE, TIDEMQ_PURE_PYTHON="1") == "pure False"


def test_the_pure_twins_run_when_the_compiled_module_is_absent() -> None:
    # None in sys.modules makes the import fail as for a module that was never built.
    absent = (
        "import sys\n"
        + "".join(f"sys.modules[{name!r}] = None\n" for name in COMPILED_MODULES)
        + PROBE
    )
    assert run_probe(absent, TIDEMQ_PURE_PYTHON="0") == "pure False"


@pytest.mark.parametrize("value", ["", "0"])
def test_the_compiled_twins_run_unless_forced(value: str) -> None:
    code = (
        "from tidemq.store import _hashing, index\n"
        "print(index.prefixed_key_hash is _hashing.prefixed_key_hash)\n"
    )
    assert run_probe(code, TIDEMQ_PURE_PYTHON=value) == "True"


# --- hashing ----------------------------------------------------------------------------------


@given(any_text)
def test_java_string_hash_twins(text: str) -> None:
    assert _hashing.java_string_hash(text) == pure(javahash, "java_string_hash")(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 97), ("hello", 99162322), ("\U0001f600", 1772899), ("TagA", 2598919)],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    # Values from Java's String.hashCode.
    assert _hashing.java_string_hash(text) == expected
    assert pure(javahash, "java_string_hash")(text) == expected


@given(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.binary(max_size=300) | any_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
)
def test_prefixed_key_hash_twins(prefix: int, key: bytes) -> None:
    assert _hashing.prefixed_key_hash(prefix, key) == pure(index, "prefixed_key_hash")(prefix, key)


@given(
    st.text(min_size=1, max_size=20),
    st.binary(max_size=64) | any_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
)
def test_prefixed_key_hash_is_the_index_key_hash(topic: str, key: bytes) -> None:
    prefix = index.topic_prefix_hash(topic)
    expected = index.index_key_hash(topic + "#" + key.decode("utf-8", "replace"))
    assert _hashing.prefixed_key_hash(prefix, key) == expected


def test_prefixed_key_hash_of_integer_min_value_is_zero() -> None:
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE: prefix "" and that key.
    key = b"polygenelubricants"
    assert javahash.java_string_hash(key.decode()) == -(2**31)
    assert _hashing.prefixed_key_hash(0, key) == 0 == pure(index, "prefixed_key_hash")(0, key)


@given(st.none() | st.binary(max_size=64) | any_text.map(lambda t: t.encode("utf-8", "replace")))
def test_tags_code_for_twins(raw: bytes | None) -> None:
    assert _hashing.tags_code_for(raw) == pure(tags, "tags_code_for")(raw)
