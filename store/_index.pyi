"""Types of the compiled twin in store/_index.pyx (mypy cannot read Cython)."""

from typing import Any

def put_many(index_file: Any, entries: list[tuple[int, int, int]], start: int) -> int: ...
