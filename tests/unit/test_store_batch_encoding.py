"""`encode_batch` and `put_message_batch`: the same bytes as the messages one by one.

A SEND_BATCH_MESSAGE is encoded straight from its `MessageBatch`; `encode_record` of each of
`batch.as_messages()` is the reference. Both must give identical records, or the same error, for
any batch; and a CommitLog filled through `put_message_batch` must equal one filled through
`put_batch`, file for file, with the same append results.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.commitlog import CommitLog, PutStatus
from store.config import StoreConfig
from store.message_store import MessageStore
from store.record import (
    FLAG_BORNHOST_V6,
    MessageBatch,
    RecordTooLargeError,
    decode_record,
    encode_batch,
    encode_properties,
    encode_record,
    pack_host,
)
from store.segment_queue import SegmentQueue

MAX_BODY = 64
HOSTS = st.sampled_from(
    [pack_host("127.0.0.1", 10911), pack_host("10.0.0.7", 0), pack_host("::1", 9876)]
)
TOPICS = st.sampled_from(["T", "BenchTopic", "t\u00e9", "", "x" * 127, "x" * 128, "\u00e9" * 64])
PROPERTIES = st.one_of(
    st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT"]), st.text(max_size=8)).map(
        encode_properties
    ),
    st.text(max_size=12),
)


@st.composite
def batches(draw: st.DrawFn, max_messages: int = 6) -> MessageBatch:
    messages = draw(
        st.lists(
            st.tuples(
                st.integers(-(2**31), 2**31 - 1),
                st.binary(max_size=MAX_BODY + 2),
                PROPERTIES,
            ),
            max_size=max_messages,
        )
    )
    return MessageBatch(
        topic=draw(TOPICS),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        messages=messages,
        sys_flag=draw(st.integers(0, 2**31 - 1)),
        born_timestamp=draw(st.integers(0, 2**63 - 1)),
        born_host=draw(HOSTS),
        store_host=draw(HOSTS),
        reconsume_times=draw(st.integers(0, 2**31 - 1)),
        prepared_transaction_offset=draw(st.integers(0, 2**63 - 1)),
    )


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except RecordTooLargeError as exc:
        return ("RecordTooLargeError", str(exc), exc.properties)


@given(batches())
def test_encode_batch_is_encode_record_of_each_message(batch: MessageBatch) -> None:
    expected = _outcome(lambda: [encode_record(m, MAX_BODY) for m in batch.as_messages()])
    assert _outcome(lambda: encode_batch(batch, MAX_BODY).records()) == expected


def test_properties_over_the_limit_are_reported_as_such() -> None:
    batch = MessageBatch("T", 0, [(0, b"", "a\x01" + "v" * 40000 + "\x02")])
    assert _outcome(lambda: encode_batch(batch, MAX_BODY).records()) == (
        "RecordTooLargeError",
        "properties of 40003 bytes exceed 32767",
        True,
    )


def test_a_batch_decodes_to_its_messages() -> None:
    host = pack_host("::1", 1)
    batch = MessageBatch("T", 3, [(7, b"abc", "TAGS\x01A\x02"), (8, b"", "")], born_host=host)
    records = encode_batch(batch, MAX_BODY).records()
    decoded = [decode_record(bytes(r.data)) for r in records]
    assert [(m.flag, m.body, m.properties, m.queue_id, m.topic) for m in decoded] == [
        (7, b"abc", {"TAGS": "A"}, 3, "T"),
        (8, b"", {}, 3, "T"),
    ]
    assert all(m.sys_flag & FLAG_BORNHOST_V6 for m in decoded)


def _commitlog(root: Path) -> CommitLog:
    config = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=4096,
        max_message_size=MAX_BODY,
        message_index_enable=False,
    )
    segments = SegmentQueue(config.commit_log_dir, 4096)
    segments.load()
    return CommitLog(config, segments)


def _files(log: CommitLog) -> dict[str, bytes]:
    return {s.path.name: bytes(s.view) for s in log.segments.segments}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches(max_messages=12), min_size=1, max_size=6))
def test_a_commitlog_filled_by_batches_is_the_one_filled_message_by_message(
    batches_: list[MessageBatch],
) -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as other:
        by_batch, by_message = _commitlog(Path(one)), _commitlog(Path(other))
        try:
            for i, batch in enumerate(batches_):
                # Store times never go backwards: one far ahead of the clock is what both use.
                by_batch.last_store_timestamp = by_message.last_store_timestamp = 2**50 + i
                got = by_batch.put_message_batch(batch)
                want = by_message.put_batch(batch.as_messages())
                assert got == want
            assert _files(by_batch) == _files(by_message)
            assert by_batch.topic_queue_table == by_message.topic_queue_table
        finally:
            by_batch.segments.close()
            by_message.segments.close()


async def test_message_store_put_message_batch(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path), message_index_enable=False))
    store.load()
    try:
        batch = MessageBatch("T", 1, [(0, b"a", "WAIT\x01false\x02"), (0, b"b", "")])
        result = await store.put_message_batch(batch)
        assert result.ok and result.append is not None
        assert (result.append.queue_offset, result.append.msg_num) == (0, 2)
        store.reput.dispatch_available(1 << 62)
        assert store.max_offset_in_queue("T", 1) == 2
        empty = await store.put_message_batch(MessageBatch("T", 1, []))
        assert (empty.status, empty.remark) == (PutStatus.MESSAGE_ILLEGAL, "empty batch")
    finally:
        await store.stop()
