"""No import circle between the broker's modules, read from the source (ast, nothing imported).

Every import counts, those under `if TYPE_CHECKING:` and inside functions included: a circle
there still ties the modules together for a reader and for mypy. `from pkg import name` counts
as an import of `pkg.name` when that is a module, else of `pkg`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(package: str) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def imports_of(source: str, known: Iterable[str]) -> set[str]:
    """The modules of `known` that `source` imports (absolute imports; the code uses no other)."""
    modules = set(known)
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                if child in modules:
                    found.add(child)
                elif node.module in modules:
                    found.add(node.module)
    return found


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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


def test_the_broker_has_no_import_circle() -> None:
    files = module_files("broker")
    graph = {
        module: imports_of(path.read_text(encoding="utf-8"), files) - {module}
        for module, path in files.items()
    }
    assert graph.get("broker.broker"), "the walk found no imports"
    assert circles(graph) == []


def test_a_type_checking_import_back_is_a_circle() -> None:
    # what the broker's processors did before the request pipeline: the check must see it
    known = {"broker.broker", "broker.processors.send", "broker.state"}
    processor = (
        "from typing import TYPE_CHECKING\n"
        "from broker.state import BrokerState\n"
        "if TYPE_CHECKING:\n"
        "    from broker.broker import Broker\n"
    )
    graph = {
        "broker.broker": imports_of("from broker.processors.send import SendProcessor", known),
        "broker.processors.send": imports_of(processor, known),
        "broker.state": set(),
    }
    assert graph["broker.processors.send"] == {"broker.state", "broker.broker"}
    assert circles(graph) == [["broker.broker", "broker.processors.send"]]
