"""Half messages' records for the transaction tests: what the broker stores for a prepared send
(`park_half`, then the store's encoding) with properties as a client could send them, and the
same records damaged (cut short, one byte changed).
"""

from __future__ import annotations

from hypothesis import strategies as st

from tidemq.broker.transaction.messages import park_half
from tidemq.store.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from tidemq.store.record import MessageToStore, check_record, pack_record

HOST4 = b"\x7f\x00\x00\x01\x00\x00\x27\x10"
HOST6 = bytes(range(16)) + b"\x00\x00\x27\x11"
MAX_MESSAGE_SIZE = 512

# Property names that matter to END and to the commit, and others.
NAMES = st.sampled_from(
    [
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "PGROUP",
        "WAIT",
        "DELAY",
        "TIMER_DELIVER_MS",
        "UNIQ_KEY",
        "KEYS",
        "TAGS",
    ]
) | st.text(max_size=6)
VALUES = st.sampled_from(
    ["T", "", "3", "-1", "²", "99999999999", "true", "false", "x" * 140]
) | st.text(max_size=8)
# Property text as a client could send it: pairs, items without or with two separators, names
# given twice.
PROPERTY_TEXT = st.lists(
    st.tuples(NAMES, VALUES).map(lambda pair: f"{pair[0]}\x01{pair[1]}\x02")
    | st.text(alphabet="ab\x01\x02", max_size=5),
    max_size=8,
).map("".join)


@st.composite
def half_records(draw: st.DrawFn) -> bytes:
    """The bytes of a half message's record as the broker stores it (park_half, then the
    store's encoding), some properties as a client sent them."""
    born_host = draw(st.sampled_from([HOST4, HOST6]))
    store_host = draw(st.sampled_from([HOST4, HOST6]))
    msg = MessageToStore(
        draw(st.sampled_from(["T", "Tö", "t" * 127])),
        draw(st.integers(0, 7)),
        draw(st.binary(max_size=MAX_MESSAGE_SIZE + 8)),
        draw(PROPERTY_TEXT),
        draw(st.integers(-(2**31), 2**31 - 1)),
        draw(st.sampled_from([0, 1, 2, 3]))
        | draw(st.sampled_from([0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE])),
        draw(st.integers(0, 2**45)),
        born_host,
        store_host,
        draw(st.integers(0, 16)),
    )
    if draw(st.booleans()):
        park_half(msg)  # REAL_TOPIC and REAL_QID as the broker writes them
    shape = check_record(msg, 1 << 20)
    return pack_record(
        msg, shape, draw(st.integers(0, 2**40)), draw(st.integers(0, 2**50)), 1_700_000_000_000
    )


def damaged(record: bytes, data: st.DataObject) -> bytes:
    """The record, or a copy cut short or with one byte changed."""
    how = data.draw(st.sampled_from(["whole", "cut", "byte"]))
    if how == "cut":
        return record[: data.draw(st.integers(0, len(record)))]
    if how == "byte" and record:
        at = data.draw(st.integers(0, len(record) - 1))
        return record[:at] + bytes((data.draw(st.integers(0, 255)),)) + record[at + 1 :]
    return record
