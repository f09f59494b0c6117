"""Types of the compiled twins in broker/transaction/_records.pyx (mypy cannot read Cython)."""

def transaction_properties(
    raw: bytes | memoryview,
) -> tuple[str, str | None, bytes | None, str | None, int]: ...
