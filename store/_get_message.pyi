"""Types of the compiled twin in store/_get_message.pyx (mypy cannot read Cython)."""

from typing import Any

def scan_units(
    result: Any,
    units: memoryview,
    offset: int,
    max_msg_nums: int,
    tag_filter: Any,
    commitlog: Any,
    limits: Any,
    record_filter: Any,
) -> None: ...
