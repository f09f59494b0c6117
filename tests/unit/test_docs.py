"""The READMEs name files that exist and install only what can be installed.

Backquoted paths in README.md under the repository's own folders, and in deploy/README.md
relative to deploy/ or the repository (globs allowed), must match a file; tidemq is not on a
package registry, so no `pip install` may name it as a registry requirement.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
OWN_FOLDERS = ("deploy/", "store/", "ha/", "client/", "broker/", "tests/")
BACKQUOTED = re.compile(r"`([^`\s]+)`")


def backquoted(path: Path) -> list[str]:
    return BACKQUOTED.findall(path.read_text(encoding="utf-8"))


def exists(base: Path, name: str) -> bool:
    return any(base.glob(name)) if "*" in name else (base / name).exists()


def test_readme_paths_under_the_repository_exist() -> None:
    named = [
        t for t in backquoted(REPO_ROOT / "README.md") if t.startswith(OWN_FOLDERS) and "<" not in t
    ]
    assert "deploy/README.md" in named
    missing = [name for name in named if not exists(REPO_ROOT, name.split(":")[0])]
    assert not missing, f"README.md names files that do not exist: {missing}"


def test_deploy_readme_files_exist() -> None:
    named = [
        t
        for t in backquoted(DEPLOY / "README.md")
        if re.fullmatch(r"[\w.*@-]+/([\w.*@-]+)?", t) or t.endswith((".properties", ".service"))
    ]
    named = [t for t in named if not t.startswith(("/", "http"))]
    assert "2m-2s-sync/" in named
    # A bare file name (`broker-a.properties`) is one of a topology's files.
    missing = [
        name
        for name in named
        if not (
            exists(DEPLOY, name)
            or exists(REPO_ROOT, name)  # a source file (`broker/metrics.py`)
            or ("/" not in name and exists(DEPLOY, f"*/{name}"))
        )
    ]
    assert not missing, f"deploy/README.md names files that do not exist: {missing}"


@pytest.mark.parametrize("readme", ["README.md", "deploy/README.md", "client/spark/README.md"])
def test_no_install_of_tidemq_from_a_registry(readme: str) -> None:
    text = (REPO_ROOT / readme).read_text(encoding="utf-8")
    registry = re.findall(r"pip install\s+['\"]?tidemq\b", text)
    assert not registry, f"{readme}: tidemq is not on a registry: {registry}"
