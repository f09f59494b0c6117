"""Message trace records (client/trace.py): RocketMQ's text format, both ways."""

from __future__ import annotations

import pytest

from tidemq.client.errors import DecodeError
from tidemq.client.trace import TraceRecord, TraceType, decode_records

C, F = "\x01", "\x02"


def test_every_type_round_trips() -> None:
    records = [
        TraceRecord(TraceType.PUB, "ID1", 1700000000000, "PG", "T", "tag", "k1 k2", "h:1", 10,
                    3, 0, "OFF1", True),
        TraceRecord(TraceType.SUB_BEFORE, "ID1", 1700000000001, "CG", keys="k1 k2",
                    request_id="R1", retry_times=2),
        TraceRecord(TraceType.SUB_AFTER, "ID1", 1700000000002, "CG", keys="k1 k2", cost_ms=7,
                    success=False, request_id="R1", context_code=4),
        TraceRecord(TraceType.END_TRANSACTION, "ID1", 1700000000003, "PG", "T", "tag", "k1",
                    "h:1", msg_type=2, transaction_id="ID1", transaction_state="COMMIT_MESSAGE",
                    from_transaction_check=True),
    ]  # fmt: skip
    text = "".join(r.encode() for r in records)
    assert decode_records(text) == records
    assert records[0].index_keys == ["ID1", "k1", "k2"]


def test_java_written_records_are_read() -> None:
    # A Pub from a 4.9 client (clientHost appended), an old SubAfter without time and group.
    pub = C.join(["Pub", "1", "DefaultRegion", "PG", "T", "ID", "null", "K", "h:1", "5", "2",
                  "0", "OFF", "true", "10.0.0.1"]) + F  # fmt: skip
    old_after = C.join(["SubAfter", "R", "ID", "4", "true", "K", "0"]) + F
    recall = C.join(["Recall", "1", "DefaultRegion", "PG", "T", "ID", "true"]) + F
    [p, a] = decode_records(pub + old_after + recall)
    assert (p.type, p.offset_msg_id, p.success, p.cost_ms) == (TraceType.PUB, "OFF", True, 2)
    assert (a.type, a.cost_ms, a.success, a.timestamp, a.group) == (
        TraceType.SUB_AFTER,
        4,
        True,
        0,
        "",
    )


@pytest.mark.parametrize(
    "text",
    [
        C.join(["Pub", "x", "R", "G"]) + F,
        C.join(["SubBefore", "notanumber", "R", "G", "Q", "ID", "0", "K"]) + F,
        C.join(["EndTransaction", "1", "R"]) + F,
    ],
)
def test_records_that_do_not_parse_are_named(text: str) -> None:
    with pytest.raises(DecodeError, match="trace record"):
        decode_records(text)
