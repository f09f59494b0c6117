"""Types of the compiled twins in broker/transaction/_records.pyx (mypy cannot read Cython)."""

from tidemq.broker.transaction.messages import HalfRecord
from tidemq.store.record import EncodedRecord

def transaction_properties(
    raw: bytes | memoryview,
) -> tuple[str, str | None, bytes | None, str | None, int]: ...
def commit_record(half: HalfRecord, max_message_size: int) -> EncodedRecord | None: ...
def op_record(
    half_queue_offset: int, store_host: bytes, now: int | None = None
) -> EncodedRecord: ...
