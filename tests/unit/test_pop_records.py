"""POP's revive topic records (broker/pop/records.py): tags and JSON bodies, round trips, and
a clear refusal of a damaged record."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.pop.ledger import Ack, Checkpoint, ReviveLedger
from tidemq.broker.pop.records import (
    PopRecordError,
    decode,
    encode_ack,
    encode_batch_ack,
    encode_checkpoint,
    encode_close,
    revive_topic,
)

CK = Checkpoint("T", "G", 1, 100, 1_700_000_000_000, 30_000, (100, 101, 105))
names = st.from_regex(r"[a-zA-Z0-9_%|-]{1,20}", fullmatch=True)
numbers = st.integers(0, 2**62)


def test_a_checkpoint_body_uses_rocketmqs_short_names() -> None:
    tag, body = encode_checkpoint(CK)
    assert tag == "ck"
    assert json.loads(body) == {
        "so": 100, "pt": 1_700_000_000_000, "it": 30_000, "q": 1, "t": "T", "c": "G",
        "d": [0, 1, 5],
    }  # fmt: skip
    assert decode(tag, body) == CK
    assert revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"


@given(names, names, st.integers(0, 2**31 - 1), numbers, numbers, numbers,
       st.lists(st.integers(0, 10_000), min_size=1, max_size=32, unique=True))  # fmt: skip
def test_checkpoints_round_trip(
    topic: str, group: str, queue: int, start: int, pop: int, invisible: int, diffs: list[int]
) -> None:
    checkpoint = Checkpoint(
        topic, group, queue, start, pop, invisible, tuple(start + d for d in diffs)
    )
    assert decode(*encode_checkpoint(checkpoint)) == checkpoint


@given(names, names, st.integers(0, 2**31 - 1), numbers, numbers, numbers, st.booleans())
def test_acks_and_closes_round_trip(
    topic: str, group: str, queue: int, start: int, pop: int, offset: int, any_ck: bool
) -> None:
    ack = Ack(topic, group, queue, start, pop, offset, any_ck)
    assert decode(*encode_ack(ack)) == ack
    assert decode(*encode_close(ack.key)) == ack.key


@given(names, names, st.integers(0, 2**31 - 1), numbers, numbers, st.booleans(),
       st.lists(numbers, min_size=1, max_size=64))  # fmt: skip
def test_batch_acks_round_trip(
    topic: str, group: str, queue: int, start: int, pop: int, any_ck: bool, offsets: list[int]
) -> None:
    acks = [Ack(topic, group, queue, start, pop, offset, any_ck) for offset in offsets]
    tag, body = encode_batch_ack(acks)
    assert tag == "back" and decode(tag, body) == acks


def test_a_batch_ack_holds_acks_of_one_checkpoint_only() -> None:
    one = Ack("T", "G", 1, 100, 5, 101, True)
    with pytest.raises(ValueError, match="one checkpoint"):
        encode_batch_ack([one, Ack("T", "G", 1, 100, 6, 102, True)])
    with pytest.raises(ValueError, match="one checkpoint"):
        encode_batch_ack([])


@pytest.mark.parametrize(
    ("tag", "body", "why"),
    [
        ("back", b'{"so":1,"pt":1,"q":0,"t":"T","c":"G"}', "'aol'"),
        ("back", b'{"so":1,"pt":1,"q":0,"t":"T","c":"G","aol":[]}', "'aol'"),
        ("back", b'{"so":1,"pt":1,"q":0,"t":"T","c":"G","aol":[-1]}', "'aol'"),
        ("back", b'{"so":1,"pt":1,"q":0,"t":"T","c":"G","aol":[1],"any":"y"}', "'any'"),
        ("bAck", b"{}", "tag"),
        ("ck", b"\xff", "not JSON"),
        ("ck", b"[1]", "not a JSON object"),
        ("ck", b'{"so":1,"pt":1,"it":1,"q":0,"t":"T","c":"G","d":[]}', "'d'"),
        ("ck", b'{"so":1,"pt":1,"it":1,"q":0,"t":"T","c":"G","d":[-1]}', "'d'"),
        ("ack", b'{"so":1,"pt":1,"q":0,"t":"T","c":"G"}', "'ao'"),
        ("ack", b'{"so":1,"pt":1,"q":0,"t":"T","c":"G","ao":1,"any":1}', "'any'"),
        ("close", b'{"so":1,"pt":1,"q":4294967296,"t":"T","c":"G"}', "'q'"),
        ("close", b'{"so":1,"pt":true,"q":0,"t":"T","c":"G"}', "'pt'"),
        ("close", b'{"so":1,"pt":1,"q":0,"t":"","c":"G"}', "'t'"),
    ],
)
def test_a_damaged_record_is_refused_naming_what_is_wrong(tag: str, body: bytes, why: str) -> None:
    with pytest.raises(PopRecordError, match=why):
        decode(tag, body)


def test_records_read_back_drive_the_ledger() -> None:
    written = [
        encode_checkpoint(CK),
        encode_ack(Ack("T", "G", 1, 100, CK.pop_time, 101)),
        encode_batch_ack([Ack("X", "G", 0, 0, 0, 0), Ack("X", "G", 0, 0, 0, 1)]),  # past it
    ]
    ledger = ReviveLedger()
    for position, (tag, body) in enumerate(written):
        record = decode(tag, body)
        store_time = CK.pop_time if position < 2 else CK.deadline + 1
        if isinstance(record, Checkpoint):
            ledger.checkpoint(record, position, store_time)
        elif isinstance(record, Ack):
            ledger.ack(record, position, store_time)
        elif isinstance(record, list):
            for ack in record:
                ledger.ack(ack, position, store_time)
    [revival] = ledger.due(CK.deadline + 1)
    assert revival.offsets == (100, 105)
    acked = decode(*encode_batch_ack([Ack("T", "G", 1, 100, CK.pop_time, o) for o in (100, 105)]))
    assert isinstance(acked, list)
    ledger = ReviveLedger()
    ledger.checkpoint(CK, 0, CK.pop_time)
    for ack in acked:
        ledger.ack(ack, 1, CK.pop_time)
    ledger.ack(Ack("T", "G", 1, 100, CK.pop_time, 101), 2, CK.deadline + 1)
    assert ledger.due(CK.deadline + 1) == []  # one batch record ended two offsets
