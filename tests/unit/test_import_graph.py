"""The import graph of tidemq's packages, read from the source (ast, nothing is imported).

The layering of ../shared/design/architecture.md, under the installed names:

    tidemq.store   imports nothing of ours
    tidemq.ha      imports tidemq.store
    tidemq.client  imports tidemq.store
    tidemq.broker  imports tidemq.store, tidemq.ha, tidemq.client
    tidemq         (the package itself) imports tidemq.client

Every import counts, `if TYPE_CHECKING:` ones and those inside functions included: a circle that
only type checking closes is still a circle a reader has to untangle. The old top-level names
(`store`, `ha`, `client`, `broker`) must not be imported at all: inside the repository they would
load a second copy of every module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Installed name -> folder in the repository (pyproject.toml's [tool.setuptools] package-dir).
PACKAGE_DIRS: Mapping[str, str] = {
    "tidemq": "client/_tidemq",
    "tidemq.store": "store",
    "tidemq.ha": "ha",
    "tidemq.client": "client",
    "tidemq.broker": "broker",
}
# Which layers each layer may import (itself always).
ALLOWED: Mapping[str, frozenset[str]] = {
    "tidemq.store": frozenset(),
    "tidemq.ha": frozenset({"tidemq.store"}),
    "tidemq.client": frozenset({"tidemq.store"}),
    "tidemq.broker": frozenset({"tidemq.store", "tidemq.ha", "tidemq.client"}),
    "tidemq": frozenset({"tidemq.client"}),
}
OLD_NAMES = frozenset({"store", "ha", "client", "broker"})


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def modules(root: Path, package_dirs: Mapping[str, str]) -> dict[str, Path]:
    """Every module under the packages: installed dotted name -> file."""
    found: dict[str, Path] = {}
    for package, folder in package_dirs.items():
        base = root / folder
        if package == "tidemq":
            found[package] = base / "__init__.py"  # the folder holds only the package itself
            continue
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[0] == "_tidemq":
                continue  # `tidemq` itself, mapped above
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                module = _resolve_relative(name, is_package, node.level, node.module)
            else:
                module = node.module or ""
            for alias in node.names:
                # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
                child = f"{module}.{alias.name}"
                yield Import(name, child if child in known else module, node.lineno)


def layer_of(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def layering_violations(graph: Iterator[Import]) -> list[str]:
    found = []
    for edge in graph:
        top = edge.imported.split(".")[0]
        if top in OLD_NAMES:
            found.append(f"{edge.importer}:{edge.line} imports {edge.imported} (old name)")
            continue
        target = layer_of(edge.imported)
        source = layer_of(edge.importer)
        if target is None or source is None or target == source:
            continue
        if target not in ALLOWED[source]:
            found.append(
                f"{edge.importer}:{edge.line} imports {edge.imported} ({source} -> {target})"
            )
    return found


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def check(root: Path, package_dirs: Mapping[str, str] = PACKAGE_DIRS) -> list[str]:
    """Every layering violation and every import circle under `root`, one line each."""
    known = modules(root, package_dirs)
    graph = [edge for name, path in known.items() for edge in imports_of(name, path, known)]
    problems = layering_violations(iter(graph))
    edges: dict[str, set[str]] = {name: set() for name in known}
    for edge in graph:
        if edge.imported in known and edge.imported != edge.importer:
            edges[edge.importer].add(edge.imported)
    problems += [" -> ".join(component) + " (import circle)" for component in circles(edges)]
    return problems


def test_the_packages_follow_the_layering_and_have_no_import_circle() -> None:
    assert check(REPO_ROOT) == []


def test_the_tests_import_the_packages_by_their_installed_names() -> None:
    # pytest puts the repository root on sys.path (for tests.support), where `import store`
    # would load a second copy of every module beside tidemq.store's.
    found = []
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        found += layering_violations(imports_of(name, path, {}))
    assert found == []


def test_the_graph_covers_every_package() -> None:
    known = modules(REPO_ROOT, PACKAGE_DIRS)
    assert {"tidemq", "tidemq.store.commitlog", "tidemq.broker.processors.send"} <= set(known)
    assert len(known) > 100


# --- the checker itself finds what it must ---------------------------------------------------


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _clean_tree(root: Path) -> dict[str, str]:
    return {
        "client/_tidemq/__init__.py": "from tidemq.client.api import Api\n",
        "client/__init__.py": "",
        "client/api.py": "from tidemq.store.log import Log\nclass Api: ...\n",
        "store/__init__.py": "",
        "store/log.py": "class Log: ...\n",
        "store/index.py": "from .log import Log\n",
        "ha/__init__.py": "",
        "ha/master.py": "from tidemq.store import log\n",
        "broker/__init__.py": "",
        "broker/main.py": "from tidemq.ha.master import x\nfrom tidemq.client import api\n",
    }


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert check(_tree(tmp_path, _clean_tree(tmp_path))) == []


def test_an_import_against_the_layering_is_found(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["store/log.py"] = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tidemq.ha.master\n"
    )
    files["ha/master.py"] += "def late():\n    from tidemq.client.api import Api\n"
    files["client/api.py"] += "from tidemq.broker import main\n"
    assert sorted(check(_tree(tmp_path, files))) == [
        "tidemq.broker.main -> tidemq.client.api -> tidemq.ha.master -> tidemq.store.log"
        " (import circle)",
        "tidemq.client.api:3 imports tidemq.broker.main (tidemq.client -> tidemq.broker)",
        "tidemq.ha.master:3 imports tidemq.client.api (tidemq.ha -> tidemq.client)",
        "tidemq.store.log:3 imports tidemq.ha.master (tidemq.store -> tidemq.ha)",
    ]


def test_an_old_top_level_name_is_found(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["broker/main.py"] += "import store.log\n"
    assert check(_tree(tmp_path, files)) == ["tidemq.broker.main:3 imports store.log (old name)"]


def test_an_import_circle_is_found_also_through_type_checking_and_relative_imports(
    tmp_path: Path,
) -> None:
    files = _clean_tree(tmp_path)
    files["store/log.py"] = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .index import Index\n"
    )
    assert check(_tree(tmp_path, files)) == [
        "tidemq.store.index -> tidemq.store.log (import circle)"
    ]
