"""A process queue's per-message loops (client/consumer/process_queue.py) and their compiled twins.

`put_messages` adds a pull's messages by offset (a repeated offset keeps the first message) and
`forget_messages` removes consumed ones; both sum body lengths. The compiled twins read a
ReceivedMessage's offset and body from its slots and anything else by name: on random batches,
repeats, stray objects and wrong types, both give the same table, result and error.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.speedups_twins import selected
from tidemq.client.consumer import _received
from tidemq.client.consumer.process_queue import ProcessQueue
from tidemq.client.message import ReceivedMessage
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.common import speedups

PUT_KEY = "tidemq.client.consumer.process_queue.put_messages"
FORGET_KEY = "tidemq.client.consumer.process_queue.forget_messages"
PURE_PUT = speedups.PURE_TWINS[PUT_KEY]
PURE_FORGET = speedups.PURE_TWINS[FORGET_KEY]


def message(offset: int, body: bytes) -> ReceivedMessage:
    return ReceivedMessage(
        topic="T",
        body=body,
        tags=None,
        keys=None,
        properties={},
        msg_id=f"ID{offset}",
        offset_msg_id=f"OFF{offset}",
        queue_id=0,
        queue_offset=offset,
        broker_name="b",
        store_timestamp=0,
        born_timestamp=0,
        reconsume_times=0,
        commit_log_offset=0,
        store_host="127.0.0.1:1",
        born_host="127.0.0.1:2",
        sys_flag=0,
        flag=0,
    )


class Lookalike:
    """Not a ReceivedMessage: its fields are found by name (or missing)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Lookalike({self.__dict__})"


items = st.one_of(
    st.builds(message, st.integers(0, 40), st.binary(max_size=8)),
    st.builds(
        lambda offset, body: Lookalike(queue_offset=offset, body=body),
        st.integers(-(2**70), 2**70),
        st.binary(max_size=8),
    ),
    st.just(Lookalike(queue_offset=3)),  # no body
    st.just(Lookalike(body=b"x")),  # no offset
    st.just(Lookalike(queue_offset=5, body=7)),  # a body without a length
)


def outcome(function: Any, table: dict[Any, Any], *args: Any) -> tuple[Any, ...]:
    """The result or the error, and what the table holds afterwards (by identity)."""
    try:
        result: Any = function(table, *args)
    except Exception as exc:
        result = (type(exc), str(exc))
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[0], list):
        result = ([id(m) for m in result[0]], result[1], result[2])
    held = {k: id(v) for k, v in table.items()} if isinstance(table, dict) else repr(table)
    return result, held


def holding(present: list[Any]) -> dict[Any, Any]:
    """A process queue's table holding `present` (those with an offset, the first of each)."""
    table: dict[Any, Any] = {}
    for msg in present:
        offset = getattr(msg, "queue_offset", None)
        if offset is not None:
            table.setdefault(offset, msg)
    return table


def test_the_compiled_loops_are_selected() -> None:
    assert selected(PUT_KEY) is _received.put_messages
    assert selected(FORGET_KEY) is _received.forget_messages


@settings(max_examples=400, deadline=None)
@given(
    present=st.lists(items, max_size=6),
    pulled=st.lists(items, max_size=12),
    highest=st.integers(-2, 50),
)
def test_the_twins_put_the_same(present: list[Any], pulled: list[Any], highest: int) -> None:
    assert outcome(_received.put_messages, holding(present), pulled, highest) == outcome(
        PURE_PUT, holding(present), pulled, highest
    )


@settings(max_examples=400, deadline=None)
@given(present=st.lists(items, max_size=10), consumed=st.lists(items, max_size=10))
def test_the_twins_forget_the_same(present: list[Any], consumed: list[Any]) -> None:
    assert outcome(_received.forget_messages, holding(present), consumed) == outcome(
        PURE_FORGET, holding(present), consumed
    )


@pytest.mark.parametrize("table", [{}, {1: "taken"}, [], None])
@pytest.mark.parametrize("msgs", [[], (), None, [message(1, b"x")], (message(1, b"x"),)])
def test_the_twins_agree_on_other_types(table: Any, msgs: Any) -> None:
    def fresh() -> Any:
        return None if table is None else table.copy()

    fast = outcome(_received.put_messages, fresh(), msgs, 0)
    assert fast == outcome(PURE_PUT, fresh(), msgs, 0)
    fast = outcome(_received.forget_messages, fresh(), msgs)
    assert fast == outcome(PURE_FORGET, fresh(), msgs)


def test_a_process_queue_counts_messages_and_bytes() -> None:
    pq = ProcessQueue(MessageQueue("T", "b", 0))
    first = [message(offset, b"x" * offset) for offset in range(4)]
    assert pq.put(first) == first
    assert pq.put([message(2, b"again"), message(9, b"nine")])[0].queue_offset == 9
    assert (pq.size_bytes, pq.max_offset_seen, pq.commit_offset()) == (0 + 1 + 2 + 3 + 4, 9, 0)
    assert pq.span == 9
    pq.forget_all(first[:2])
    assert (pq.size_bytes, pq.commit_offset()) == (2 + 3 + 4, 2)
    pq.forget(first[2])
    pq.forget(first[2])  # gone already: nothing changes
    assert (pq.size_bytes, pq.commit_offset(), len(pq.messages)) == (3 + 4, 3, 2)
