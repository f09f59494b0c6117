"""Test modules share helpers through tests/support and conftest.py, never through each other.

Read with ast, no test is imported: a test module (`test_*.py`) that imports another one would
run that module's fixtures and module-level setup in its own namespace and tie the two files'
helpers together.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def imported_test_modules(path: Path, root: Path = TESTS) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [
            f"{path.relative_to(root)}:{node.lineno} imports {name}"
            for name in names
            if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")
        ]
    return found


def test_no_test_module_imports_another() -> None:
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 50  # the walk found the suite
    assert [line for path in modules for line in imported_test_modules(path)] == []


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import tests.unit.test_crc\n"
        "from tests.support.conditions import eventually\n"
        "def f() -> None:\n"
        "    from tests.integration.test_ha import start_pair\n",
        encoding="utf-8",
    )
    assert imported_test_modules(probe, tmp_path) == [
        "test_probe.py:1 imports tests.unit.test_crc",
        "test_probe.py:4 imports tests.integration.test_ha",
    ]
