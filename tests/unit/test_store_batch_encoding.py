"""`encode_batch` and `put_message_batch`: the same bytes as the messages one by one.

A SEND_BATCH_MESSAGE is encoded straight from its request body; `encode_record` of each of
`batch.as_messages()` is the reference. Both must give identical records, or the same error, for
any batch (malformed bodies included); and a CommitLog filled by batches (what
`MessageStore.put_message_batch` does: `encode_message_batch`, then `append_batch`) must equal one
filled by `put` of each message, file for file, with the same append results, given that a batch
never straddles two files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.store.batch_body import (
    BatchDecodeError,
    decode_batch_body,
    encode_batch_body,
    read_batch_message,
)
from tidemq.store.commitlog import AppendResult, CommitLog, PutStatus
from tidemq.store.config import StoreConfig
from tidemq.store.layout import END_OF_FILE_MIN_BLANK, FLAG_BORNHOST_V6
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    MessageBatch,
    RecordTooLargeError,
    decode_record,
    encode_batch,
    encode_blank,
    encode_properties,
    encode_record,
    pack_host,
    record_length,
)
from tidemq.store.segment_queue import SegmentQueue

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
        body=encode_batch_body(messages),
        properties=draw(
            st.sampled_from(["", "CLUSTER\x01DefaultCluster\x02", "WAIT\x01false\x02"])
        ),
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
    except BatchDecodeError as exc:
        return ("BatchDecodeError", str(exc))


@given(batches())
def test_encode_batch_is_encode_record_of_each_message(batch: MessageBatch) -> None:
    expected = _outcome(lambda: [encode_record(m, MAX_BODY) for m in batch.as_messages()])
    assert _outcome(lambda: encode_batch(batch, MAX_BODY).records()) == expected


@settings(max_examples=300)
@given(batches(), st.data())
def test_a_damaged_body_fails_as_decoding_it_does(batch: MessageBatch, data: st.DataObject) -> None:
    """A malformed body fails with decoding's error; any other is copied byte for byte (property
    bytes that are not UTF-8 included, as RocketMQ copies them)."""
    body = bytearray(batch.body)
    if body:
        for _ in range(data.draw(st.integers(1, 3))):
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    batch.body = bytes(body[: data.draw(st.integers(0, len(body)))])
    try:
        messages = decode_batch_body(batch.body)
    except BatchDecodeError as exc:
        with pytest.raises(BatchDecodeError) as raised:
            encode_batch(batch, MAX_BODY)
        assert str(raised.value) == str(exc)
        return
    try:
        records = encode_batch(batch, MAX_BODY).records()
    except RecordTooLargeError:
        return  # the limits: test_encode_batch_is_encode_record_of_each_message
    view, pos, shared = memoryview(batch.body), 0, batch.properties.encode()
    assert len(records) == len(messages)
    for record, (flag, msg_body, _props) in zip(records, messages, strict=True):
        _body_at, props_at, end, _flag = read_batch_message(view, pos)
        own = bytes(view[props_at:end])
        props = own + (b"\x02" if own and shared and not own.endswith(b"\x02") else b"") + shared
        stored = decode_record(bytes(record.data), check_crc=True)
        assert (stored.flag, stored.body) == (flag, msg_body)
        assert bytes(record.data).endswith(len(props).to_bytes(2, "big") + props)
        pos = end


def test_properties_over_the_limit_are_reported_as_such() -> None:
    own = "a\x01" + "v" * 32760 + "\x02"  # 32763 bytes: fits a batch message
    batch = MessageBatch("T", 0, encode_batch_body([(0, b"", own)]), "CLUSTER\x01C\x02")
    assert _outcome(lambda: encode_batch(batch, MAX_BODY).records()) == (
        "RecordTooLargeError",
        "properties of 32773 bytes exceed 32767",
        True,
    )


def test_a_batch_decodes_to_its_messages() -> None:
    host = pack_host("::1", 1)
    body = encode_batch_body([(7, b"abc", "TAGS\x01A\x02"), (8, b"", ""), (9, b"x", "K\x01v")])
    batch = MessageBatch("T", 3, body, "CLUSTER\x01C\x02", born_host=host)
    records = encode_batch(batch, MAX_BODY).records()
    decoded = [decode_record(bytes(r.data)) for r in records]
    assert [(m.flag, m.body, m.properties, m.queue_id, m.topic) for m in decoded] == [
        (7, b"abc", {"TAGS": "A", "CLUSTER": "C"}, 3, "T"),
        (8, b"", {"CLUSTER": "C"}, 3, "T"),
        (9, b"x", {"K": "v", "CLUSTER": "C"}, 3, "T"),
    ]
    assert all(m.sys_flag & FLAG_BORNHOST_V6 for m in decoded)


def test_properties_are_the_messages_bytes_then_the_batchs_as_rocketmq_writes_them() -> None:
    """MessageExtBatchEncoder: own bytes as sent, a separator if missing, then the batch's."""
    body = encode_batch_body([(0, b"", "A\x011\x02A\x012\x02"), (0, b"", "B\x011")])
    batch = MessageBatch("T", 0, body, "A\x01batch\x02")
    records = [bytes(r.data) for r in encode_batch(batch, MAX_BODY).records()]
    props = [r[record_length(decode_record(r).sys_flag, 0, 1, 0) :].decode() for r in records]
    assert props == ["A\x011\x02A\x012\x02A\x01batch\x02", "B\x011\x02A\x01batch\x02"]


def test_wait_comes_from_the_first_message() -> None:
    def wait(messages: list[tuple[int, bytes, str]], shared: str = "") -> bool:
        return encode_batch(
            MessageBatch("T", 0, encode_batch_body(messages), shared), 64
        ).wait_store

    assert wait([(0, b"", "WAIT\x01false\x02"), (0, b"", "")]) is False
    assert wait([(0, b"", ""), (0, b"", "WAIT\x01false\x02")]) is True
    assert wait([(0, b"", "TAGS\x01a")], "WAIT\x01false\x02") is False
    assert wait([(0, b"", "")]) is True


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


def _append_batch(log: CommitLog, batch: MessageBatch) -> AppendResult:
    encoded = log.encode_message_batch(batch)
    if isinstance(encoded, AppendResult):
        return encoded
    return log.append_batch(encoded, batch.store_host)


def _put_one_by_one(log: CommitLog, batch: MessageBatch) -> AppendResult:
    """The reference: `put` of each of `batch.as_messages()`, in a file that holds them all."""
    messages = batch.as_messages()
    if not messages:
        return AppendResult(PutStatus.MESSAGE_ILLEGAL, remark="empty batch")
    try:
        total = sum(len(encode_record(m, MAX_BODY).data) for m in messages)
    except RecordTooLargeError as exc:
        status = PutStatus.PROPERTIES_SIZE_EXCEEDED if exc.properties else PutStatus.MESSAGE_ILLEGAL
        return AppendResult(status, remark=str(exc))
    if total + END_OF_FILE_MIN_BLANK > log.file_size:
        return AppendResult(
            PutStatus.MESSAGE_ILLEGAL,
            remark=f"{total} bytes do not fit in a CommitLog file of {log.file_size}",
        )
    segment = log.segments.last_for_append(0)
    if total + END_OF_FILE_MIN_BLANK > segment.free:  # RocketMQ's rule, for the whole batch
        segment.append(encode_blank(segment.free))
        segment.fill_to_end()
    results = [log.put(m) for m in messages]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    ids = [r.msg_id for r in results]
    first = results[0]
    return AppendResult(
        PutStatus.PUT_OK,
        wrote_offset=first.wrote_offset,
        wrote_bytes=sum(r.wrote_bytes for r in results),
        msg_id=",".join(ids),
        queue_offset=first.queue_offset,
        store_timestamp=first.store_timestamp,
        msg_num=len(results),
        msg_ids=ids,
    )


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
                got = _append_batch(by_batch, batch)
                want = _put_one_by_one(by_message, batch)
                assert got == want
            assert _files(by_batch) == _files(by_message)
            assert by_batch.topic_queue_table == by_message.topic_queue_table
        finally:
            by_batch.segments.close()
            by_message.segments.close()


async def test_message_store_put_message_batch(tmp_path: Path) -> None:
    store = MessageStore(
        StoreConfig(
            store_path_root_dir=str(tmp_path),
            mapped_file_size_commit_log=1 << 20,
            message_index_enable=False,
        )
    )
    store.load()
    try:
        body = encode_batch_body([(0, b"a", "WAIT\x01false\x02"), (0, b"b", "")])
        batch = MessageBatch("T", 1, body)
        result = await store.put_message_batch(batch)
        assert result.ok and result.append is not None
        assert (result.append.queue_offset, result.append.msg_num) == (0, 2)
        store.reput.dispatch_available(1 << 62)
        assert store.max_offset_in_queue("T", 1) == 2
        empty = await store.put_message_batch(MessageBatch("T", 1, b""))
        assert (empty.status, empty.remark) == (PutStatus.MESSAGE_ILLEGAL, "empty batch")
    finally:
        await store.stop()


def test_an_unstamped_batch_is_stamped_where_it_lands(tmp_path: Path) -> None:
    """`encode_batch` without a stamp leaves the append-time fields 0; the append fills them,
    the store time from the clock also in a log that holds nothing yet."""
    log = _commitlog(tmp_path)
    try:
        body = encode_batch_body([(0, b"a", ""), (0, b"bb", "TAGS\x01x")])
        encoded = encode_batch(MessageBatch("T", 0, body), MAX_BODY)
        assert encoded.stamp is None
        result = log.append_batch(encoded, pack_host("127.0.0.1", 10911))
        assert result.status is PutStatus.PUT_OK and result.store_timestamp > 0
        segment = log.segments.last
        assert segment is not None
        at = result.wrote_offset - segment.start_offset
        records = [decode_record(segment.view, at + offset) for offset in encoded.offsets]
        assert [(r.queue_offset, r.physical_offset, r.store_timestamp) for r in records] == [
            (0, 0, result.store_timestamp),
            (1, encoded.offsets[1], result.store_timestamp),
        ]
    finally:
        log.segments.close()
