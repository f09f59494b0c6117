"""pyproject.toml maps the top-level folders into the one import name `tidemq`."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _setuptools() -> dict[str, object]:
    with (REPO_ROOT / "pyproject.toml").open("rb") as file:
        table = tomllib.load(file)["tool"]["setuptools"]
    assert isinstance(table, dict)
    return table


def test_every_folder_with_an_init_is_a_listed_package() -> None:
    table = _setuptools()
    package_dir = table["package-dir"]
    assert isinstance(package_dir, dict)
    expected = {"tidemq"}
    mapped = {REPO_ROOT / folder for folder in package_dir.values()}
    for name, folder in package_dir.items():
        if name == "tidemq":
            continue
        for init in (REPO_ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO_ROOT / folder).parts
            if relative[:1] == ("_tidemq",):
                continue
            # A folder mapped under a name of its own (store/common is tidemq.common).
            base = REPO_ROOT / folder
            if any(p in mapped and p != base and p.is_relative_to(base) for p in init.parents):
                continue
            expected.add(".".join([name, *relative]))
    assert set(table["packages"]) == expected  # type: ignore[arg-type]


def test_only_tidemq_is_mapped() -> None:
    package_dir = _setuptools()["package-dir"]
    assert isinstance(package_dir, dict)
    assert all(name == "tidemq" or name.startswith("tidemq.") for name in package_dir)
    assert package_dir["tidemq"] == "client/_tidemq"
    assert (REPO_ROOT / "client/_tidemq/__init__.py").is_file()
