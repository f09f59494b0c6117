"""store/ imports nothing of ours outside store/, and no two of its modules import each other.

The graph is read from the source with `ast` (no module is run): every `import` and
`from ... import` anywhere in a module counts, those under `if TYPE_CHECKING:` and inside
functions included, since any of them ties the modules together for a reader and for mypy.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("store", "ha", "client", "broker")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, module: str) -> set[tuple[str, str | None]]:
    """(module named, name imported from it or None) for every import in `source`."""
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            found.update((base, alias.name) for alias in node.names)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, for every module of `package`."""
    sources = {module_name(p, root): p.read_text() for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        targets = set()
        for base, name in imports(source, module):
            if base.split(".")[0] not in OURS:
                continue
            # `from store import x` names the module store.x when there is one.
            target = f"{base}.{name}" if f"{base}.{name}" in sources else base
            if target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_store_has_no_import_circle() -> None:
    assert cycles(import_graph(ROOT, "store")) == []


def test_store_imports_nothing_of_ours_outside_store() -> None:
    graph = import_graph(ROOT, "store")
    outside = {
        (m, t) for m, targets in graph.items() for t in targets if t.split(".")[0] != "store"
    }
    assert outside == set()


@pytest.mark.parametrize(
    ("importer", "line"),
    [
        ("dispatch.py", "from store.message_store import MessageStore"),
        ("services.py", "if TYPE_CHECKING:\n    from store.message_store import MessageStore"),
        ("recovery.py", "def f() -> None:\n    from store import message_store"),
    ],
)
def test_an_added_circular_import_is_found(tmp_path: Path, importer: str, line: str) -> None:
    """The checks above fail when a module imports back into one that imports it."""
    copy = tmp_path / "store"
    copy.mkdir()
    for path in (ROOT / "store").glob("*.py"):
        (copy / path.name).write_text(path.read_text())
    target = copy / importer
    target.write_text(target.read_text() + "\n" + line + "\n")
    found = cycles(import_graph(tmp_path, "store"))
    assert any("store.message_store" in c and f"store.{importer[:-3]}" in c for c in found), found


def test_an_import_of_another_package_is_found(tmp_path: Path) -> None:
    copy = tmp_path / "store"
    copy.mkdir()
    (copy / "a.py").write_text("from ha.master import HAService\nfrom store import b\n")
    (copy / "b.py").write_text("import os\n")
    graph = import_graph(tmp_path, "store")
    assert graph == {"store.a": {"ha.master", "store.b"}, "store.b": set()}


def test_cycles_of_a_small_graph() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": ["e"], "e": ["d"], "f": ["a"]}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
