"""POP receipt handles (broker/pop/receipt.py): RocketMQ 5's text form, round trips, and a
clear refusal of anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.pop.receipt import InvalidReceiptHandle, ReceiptHandle, TopicType
from tidemq.client.protocol.headers import (
    AckMessageRequestHeader,
    HeaderFieldError,
    PopMessageRequestHeader,
    decode,
)

# As a RocketMQ 5 broker writes one: start offset 7, popped at 1700000000000 for 30 s, revive
# queue 3, the topic itself, broker-a queue 1 offset 9 at physical offset 4096.
ROCKETMQ = "7 1700000000000 30000 3 0 broker-a 1 9 4096"


def test_a_rocketmq_handle_reads_and_writes_back_the_same() -> None:
    handle = ReceiptHandle.decode(ROCKETMQ)
    assert handle == ReceiptHandle(
        7, 1_700_000_000_000, 30_000, 3, TopicType.NORMAL, "broker-a", 1, 9, 4096
    )
    assert handle.encode() == ROCKETMQ
    assert handle.next_visible_time == 1_700_000_030_000
    assert not handle.expired(1_700_000_029_999) and handle.expired(1_700_000_030_000)


def test_an_eight_field_handle_has_no_physical_offset() -> None:
    assert ReceiptHandle.decode("7 1 2 3 1 b 0 9").commit_log_offset == -1


def test_retry_topic_types_name_the_topic_popped_from() -> None:
    assert TopicType.NORMAL.real_topic("T", "G") == "T"
    assert TopicType.RETRY.real_topic("T", "G") == "%RETRY%G"
    assert TopicType.RETRY_V2.real_topic("T", "G") == "%RETRY%G+T"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "1 fields"),
        ("7 1 2 3 0 b 0", "7 fields"),
        ("7 1 2 3 9 b 0 9", "topic type"),
        ("7 1 2 3 0  0 9", "broker name"),
        ("x 1 2 3 0 b 0 9", "startOffset"),
        ("7 1 2 3 0 b 4294967296 9", "queueId"),
        ("-1 1 2 3 0 b 0 9", "startOffset"),
        ("7 1 2 3 0 b 0 +9", "offset"),
        ("7 1 2 3 0 b 0 9 -2", "commitLogOffset"),
        ("7 1 2 " + "9" * 2000, "longer"),
    ],
)
def test_anything_else_is_refused_naming_the_field(text: str, why: str) -> None:
    with pytest.raises(InvalidReceiptHandle, match=why):
        ReceiptHandle.decode(text)


@given(
    st.builds(
        ReceiptHandle,
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**62),
        st.integers(0, 2**31 - 1),
        st.sampled_from(TopicType),
        st.from_regex(r"[a-zA-Z0-9_.:%|-]{1,40}", fullmatch=True),
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(-1, 2**63 - 1),
    )
)
def test_every_handle_round_trips(handle: ReceiptHandle) -> None:
    assert ReceiptHandle.decode(handle.encode()) == handle


def test_pop_and_ack_headers_read_rocketmqs_ext_fields() -> None:
    pop = decode(
        PopMessageRequestHeader,
        {"consumerGroup": "G", "topic": "T", "queueId": "-1", "maxMsgNums": "32",
         "invisibleTime": "30000", "pollTime": "20000", "bornTime": "1700000000000",
         "initMode": "0", "expType": "TAG", "exp": "*", "order": "false"},
    )  # fmt: skip
    assert (pop.queue_id, pop.invisible_time, pop.order) == (-1, 30_000, False)
    ack = decode(
        AckMessageRequestHeader,
        {"consumerGroup": "G", "topic": "T", "queueId": "1", "extraInfo": ROCKETMQ, "offset": "9"},
    )
    assert ReceiptHandle.decode(ack.extra_info).offset == ack.offset
    with pytest.raises(HeaderFieldError, match="extraInfo"):
        decode(
            AckMessageRequestHeader,
            {"consumerGroup": "G", "topic": "T", "queueId": "1", "offset": "9"},
        )
