"""The import graph of tidemq's packages, read from the source (ast, nothing is imported).

The layering of ../shared/design/architecture.md, under the installed names:

    tidemq.common  imports nothing of ours (the bottom: errors, lifecycle, schema, settings,
                   safe files, the twin selector, the accept loop; the folder store/common)
    tidemq.store   imports tidemq.common
    tidemq.ha      imports tidemq.common, tidemq.store
    tidemq.client  imports tidemq.common, tidemq.store
    tidemq.broker  imports tidemq.common, tidemq.store, tidemq.ha, tidemq.client
    tidemq         (the package itself) imports tidemq.client

Two more rules on where things are: no module of client/ is imported only by broker/ (such a
module is the broker's and belongs in broker/: `client_modules_only_the_broker_imports`), and
the CommitLog record's layout (its magic codes, field offsets, flag bits, sizes and struct
formats) is defined in one module, tidemq.store.layout, that every reader, Python and Cython,
imports (`layout_copies`).

Every import counts, `if TYPE_CHECKING:` ones and those inside functions included: a circle that
only type checking closes is still a circle a reader has to untangle. The old top-level names
(`store`, `ha`, `client`, `broker`) must not be imported at all: inside the repository they would
load a second copy of every module.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO_ROOT = Path(__file__).resolve().parents[2]

# Installed name -> folder in the repository (pyproject.toml's [tool.setuptools] package-dir).
PACKAGE_DIRS: Mapping[str, str] = {
    "tidemq": "client/_tidemq",
    "tidemq.common": "store/common",
    "tidemq.store": "store",
    "tidemq.ha": "ha",
    "tidemq.client": "client",
    "tidemq.broker": "broker",
}
# Which layers each layer may import (itself always).
ALLOWED: Mapping[str, frozenset[str]] = {
    "tidemq.common": frozenset(),
    "tidemq.store": frozenset({"tidemq.common"}),
    "tidemq.ha": frozenset({"tidemq.common", "tidemq.store"}),
    "tidemq.client": frozenset({"tidemq.common", "tidemq.store"}),
    "tidemq.broker": frozenset({"tidemq.common", "tidemq.store", "tidemq.ha", "tidemq.client"}),
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
        # Folders inside this one that are mapped under names of their own (store/common).
        inner = [
            root / other
            for other in package_dirs.values()
            if other != folder and (root / other).is_relative_to(base)
        ]
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if any(path.is_relative_to(other) for other in inner):
                continue  # `tidemq` itself, or another mapped package: its own entry
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


def client_modules_only_the_broker_imports(edges: Mapping[str, set[str]]) -> list[str]:
    """Modules of tidemq.client whose every importer is in tidemq.broker: the broker's code,
    kept in client/ (as the remoting server once was). Tests do not count; a module nobody
    imports (an entry point) is not the broker's."""
    importers: dict[str, set[str]] = {}
    for importer, imported in edges.items():
        for name in imported:
            importers.setdefault(name, set()).add(importer)
    found = []
    for name in sorted(importers):
        if layer_of(name) != "tidemq.client":
            continue
        users = importers[name]
        if all(layer_of(user) == "tidemq.broker" for user in users):
            found.append(f"{name} is imported only by the broker: {', '.join(sorted(users))}")
    return found


# The CommitLog record's layout is defined once, in this module (store/layout.py).
LAYOUT_MODULE = "tidemq.store.layout"
# Its magic codes, in any spelling a copy would use (a Java int, or the unsigned hex).
LAYOUT_LITERALS: Final = ("-626843481", "0xDAA320A7", "-875286124", "0xCBD43194")


def _top_names(text: str, suffix: str = ".py") -> dict[str, str]:
    """Names assigned at a module's top level, without a leading underscore, and the text of
    the value each is given: Python by its AST, Cython (`.pyx`, and the `.pxi` files they
    include) by its `NAME = ...` and `cdef type NAME = ...` lines."""
    if suffix in (".pyx", ".pxi"):
        pattern = re.compile(r"^(?:cdef\s+[\w ]+?\s+)?(\w+)\s*(?::[^=\n]+)?=([^=][^\n]*)", re.M)
        return {m.group(1).lstrip("_"): m.group(2) for m in pattern.finditer(text)}
    names = {}
    for node in ast.parse(text).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        value = ast.unparse(node.value) if isinstance(node, (ast.Assign, ast.AnnAssign)) else ""
        for target in targets:
            if isinstance(target, ast.Name):
                names[target.id.lstrip("_")] = value or ""
    return names


def layout_copies(
    root: Path, package_dirs: Mapping[str, str], known: Mapping[str, Path]
) -> list[str]:
    """Every second definition of the record layout: a module other than LAYOUT_MODULE (Python
    or Cython) that writes a magic code as a literal, or gives a name the layout module defines
    (with or without a leading underscore) a value of its own at its top level; a value read
    from the layout module (`cdef int32_t _MAGIC_V1 = _record_layout.MAGIC_V1`) is no copy."""
    layout = known.get(LAYOUT_MODULE)
    if layout is None:
        return [f"{LAYOUT_MODULE} is missing: the record layout has no home"]
    names = {name for name in _top_names(layout.read_text()) if name.isupper()}
    # A value that names the layout module, or one of its constants, is read from it.
    reads = re.compile(r"\blayout\b|\b(?:" + "|".join(sorted(names)) + r")\b")
    sources = {path for path in known.values()}
    for folder in {root / f for f in package_dirs.values()}:
        sources |= set(folder.rglob("*.pyx")) | set(folder.rglob("*.pxi"))
    found = []
    for path in sorted(sources):
        if path == layout:
            continue
        text = path.read_text()
        where = path.relative_to(root)
        literals = [lit for lit in LAYOUT_LITERALS if lit.lower() in text.lower()]
        if literals:
            found.append(f"{where} writes the record's magic code {literals[0]} (a layout copy)")
        again = sorted(
            name
            for name, value in _top_names(text, path.suffix).items()
            if name in names and not reads.search(value)
        )
        if again:
            found.append(f"{where} defines {', '.join(again)} again (a layout copy)")
    return found


def _has_source(module: str, root: Path, package_dirs: Mapping[str, str]) -> bool:
    """Whether `module` (under tidemq) has a source an installed package would hold: a `.py`
    or compiled `.pyx` file, or a package folder, under the folder its package maps to."""
    package = max((p for p in package_dirs if module == p or module.startswith(p + ".")), key=len)
    base = root / package_dirs[package]
    rest = module[len(package) :].lstrip(".").split(".") if module != package else []
    path = base.joinpath(*rest) if rest else base
    for other in package_dirs.values():
        inner = root / other
        if inner != base and inner.is_relative_to(base) and path.is_relative_to(inner):
            return False  # a folder mapped under a name of its own (store/common)
    return (
        path.with_suffix(".py").is_file()
        or path.with_suffix(".pyx").is_file()
        or (path / "__init__.py").is_file()
    )


def missing_modules(
    graph: Iterator[Import], root: Path, package_dirs: Mapping[str, str]
) -> list[str]:
    """Imports of a tidemq module the installed package does not have (a name that works only
    from the checkout, such as `tidemq.store.common` for `tidemq.common`)."""
    found = []
    for edge in graph:
        name = edge.imported
        if name.startswith("tidemq.") and not _has_source(name, root, package_dirs):
            found.append(f"{edge.importer}:{edge.line} imports {name}, which is no module")
    return found


def check(root: Path, package_dirs: Mapping[str, str] = PACKAGE_DIRS) -> list[str]:
    """Every layering violation, every import circle, every client module only the broker
    imports, every import of a module the package does not have and every copy of the record
    layout under `root`, one line each."""
    known = modules(root, package_dirs)
    graph = [edge for name, path in known.items() for edge in imports_of(name, path, known)]
    problems = layering_violations(iter(graph))
    problems += missing_modules(iter(graph), root, package_dirs)
    edges: dict[str, set[str]] = {name: set() for name in known}
    for edge in graph:
        if edge.imported in known and edge.imported != edge.importer:
            edges[edge.importer].add(edge.imported)
    problems += [" -> ".join(component) + " (import circle)" for component in circles(edges)]
    problems += client_modules_only_the_broker_imports(edges)
    problems += layout_copies(root, package_dirs, known)
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
        "store/common/__init__.py": "",
        "store/common/errors.py": "class TideMQError(Exception): ...\n",
        "store/layout.py": "MAGIC_V1 = -626843481  # 0xDAA320A7\nOFFSET_MAGIC = 4\n",
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


# --- the rules of the house (issue 31), each on a synthetic violation -------------------------


def test_the_common_layer_imports_nothing_of_ours(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["store/index.py"] += "from tidemq.common.errors import TideMQError\n"  # allowed
    files["store/common/errors.py"] = "from tidemq.store.log import Log\n"
    assert check(_tree(tmp_path, files)) == [
        "tidemq.common.errors:1 imports tidemq.store.log (tidemq.common -> tidemq.store)"
    ]


def test_the_common_layer_is_its_own_package_not_a_store_module(tmp_path: Path) -> None:
    known = modules(_tree(tmp_path, _clean_tree(tmp_path)), PACKAGE_DIRS)
    assert "tidemq.common.errors" in known and "tidemq.store.common.errors" not in known


def test_an_import_of_the_common_layer_by_its_folder_name_is_found(tmp_path: Path) -> None:
    """Found by the release test: `tidemq.store.common.files` imports in a checkout (the
    folder is there) and fails in the wheel, where the package is `tidemq.common`."""
    files = _clean_tree(tmp_path)
    files["store/index.py"] += "from tidemq.store.common.errors import TideMQError\n"
    assert check(_tree(tmp_path, files)) == [
        "tidemq.store.index:2 imports tidemq.store.common.errors, which is no module"
    ]


def test_a_client_module_only_the_broker_imports_is_found(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["client/server.py"] = "class Server: ...\n"
    files["broker/main.py"] += "from tidemq.client.server import Server\n"
    files["broker/namesrv.py"] = "from tidemq.client import server\n"
    assert check(_tree(tmp_path, files)) == [
        "tidemq.client.server is imported only by the broker: tidemq.broker.main,"
        " tidemq.broker.namesrv"
    ]
    # Once the client uses it too, it is the client's.
    files["client/api.py"] += "from tidemq.client.server import Server\n"
    assert check(_tree(tmp_path, files)) == []


def test_a_second_definition_of_the_record_layout_is_found(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["client/received.py"] = "from typing import Final\n_OFFSET_MAGIC: Final = 4\n"
    files["store/scan.py"] = "def f(m):\n    return m != -626843481\n"
    files["client/_codec.pyx"] = "cdef long long _MAGIC_V1 = 0xdaa320a7\n"
    assert check(_tree(tmp_path, files)) == [
        "client/_codec.pyx writes the record's magic code 0xDAA320A7 (a layout copy)",
        "client/_codec.pyx defines MAGIC_V1 again (a layout copy)",
        "client/received.py defines OFFSET_MAGIC again (a layout copy)",
        "store/scan.py writes the record's magic code -626843481 (a layout copy)",
    ]


def test_a_layout_copy_in_an_included_file_is_found(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["store/_fields.pxi"] = "cdef Py_ssize_t _OFFSET_MAGIC = 4\n"
    assert check(_tree(tmp_path, files)) == [
        "store/_fields.pxi defines OFFSET_MAGIC again (a layout copy)"
    ]


def test_constants_read_from_the_layout_module_are_no_copy(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    files["client/received.py"] = (
        "from tidemq.store.layout import OFFSET_MAGIC\n_OFFSET_MAGIC = OFFSET_MAGIC\n"
    )
    files["client/_codec.pyx"] = (
        "from tidemq.store import layout as _record_layout\n"
        "cdef long long _MAGIC_V1 = _record_layout.MAGIC_V1\n"
    )
    assert check(_tree(tmp_path, files)) == []


def test_a_tree_without_the_layout_module_is_found(tmp_path: Path) -> None:
    files = _clean_tree(tmp_path)
    del files["store/layout.py"]
    assert check(_tree(tmp_path, files)) == [
        "tidemq.store.layout is missing: the record layout has no home"
    ]
