"""END_TRANSACTION's records built from bytes against the decode / re-encode they replace.

`read_half` reads a record where it lies: it refuses exactly what `decode_record` refuses and
reads the same fields. `commit_record` builds the committed message's record from the half
record's bytes: the same bytes (and the same refusals) as `encode_record(committed_message(
decode_record(half)))`, the path END took before. `op_record` is `encode_record(op_message)`.
Then the store side: `MessageStore.put_encoded` appends a commit and its op message together, and
an END stores them so; a commit whose properties ask for a delay still goes through the store's
parking (`put_message`).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.half_records import (
    HOST4,
    HOST6,
    MAX_MESSAGE_SIZE,
    PROPERTY_TEXT,
    damaged,
    half_records,
)
from tests.support.stores import StoreFactory
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.processors.end_transaction import EndTransactionProcessor
from tidemq.broker.transaction.messages import (
    HALF_TOPIC,
    OP_TOPIC,
    check_times,
    commit_record,
    committed_message,
    is_prepared_send,
    op_message,
    op_record,
    origin_of,
    park_half,
    read_half,
)
from tidemq.broker.transaction.service import EndOutcome, TransactionalMessageService
from tidemq.client.protocol.headers import EndTransactionRequestHeader, encode
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.record import (
    EncodedRecord,
    MessageToStore,
    RecordFormatError,
    decode_properties,
    decode_record,
    encode_properties,
    encode_record,
    stamp_record,
)


def outcome(make: Any, *args: Any) -> Any:
    try:
        return make(*args)
    except struct.error as exc:
        return ("struct.error", type(exc))  # the message names the format, not the value
    except (ValueError, OverflowError) as exc:
        return (type(exc), str(exc))


def old_commit(record: bytes) -> Any:
    """What END stored before: the half decoded, the commit made and encoded again."""
    msg = committed_message(decode_record(record, check_crc=False))
    if msg is None:
        return None
    return encode_record(msg, MAX_MESSAGE_SIZE)


def new_commit(record: bytes) -> EncodedRecord | None:
    half = read_half(memoryview(record))
    assert half is not None
    return commit_record(half, MAX_MESSAGE_SIZE)


@given(half_records(), st.data())
def test_a_half_record_is_read_as_decode_record_reads_it(
    record: bytes, data: st.DataObject
) -> None:
    record = damaged(record, data)
    half = read_half(memoryview(record))
    try:
        decoded = decode_record(record, check_crc=False)
    except RecordFormatError:
        assert half is None
        return
    assert half is not None
    assert (half.queue_offset, half.physical_offset, half.sys_flag) == (
        decoded.queue_offset,
        decoded.physical_offset,
        decoded.sys_flag,
    )
    assert half.topic.decode("utf-8", "replace") == decoded.topic
    props = decoded.properties
    assert half.group == props.get("PGROUP", "")
    assert half.prepared_queue_offset == props.get("TRAN_PREPARED_QUEUE_OFFSET")
    assert origin_of(half) == origin_of(decoded)
    committed = committed_message(decoded)
    if committed is None:
        assert (half.commit_properties, half.real_topic, half.real_queue_id) == (None, None, -1)
    else:
        assert half.commit_properties == committed.properties.encode()
        assert (half.real_topic, half.real_queue_id) == (committed.topic, committed.queue_id)
    assert bytes(half.view[half.body_at : half.body_end]) == decoded.body


@given(half_records())
def test_a_commit_built_from_the_half_records_bytes_is_the_one_re_encoded(record: bytes) -> None:
    new = outcome(new_commit, record)
    old = outcome(old_commit, record)
    if new is None and old is not None and not isinstance(old, tuple):
        # Left to the store's parking: a delay or a timer in the commit's properties.
        text = old.data.decode("utf-8", "replace")
        assert "DELAY\x01" in text or "TIMER_DEL" in text
        return
    for made in (new, old):
        if isinstance(made, EncodedRecord):  # the append-time fields, as an append fills them
            stamp_record(made.data, 0, made.store_ts_at, 5, 1234, 1_700_000_000_999)
    assert new == old


@given(st.integers(0, 2**62), st.sampled_from([HOST4, HOST6]), st.integers(0, 2**45))
def test_an_op_record_is_the_op_message_encoded(offset: int, host: bytes, now: int) -> None:
    expected = encode_record(op_message(offset, host, now), 1 << 20)
    assert op_record(offset, host, now) == expected


# --- the store side -------------------------------------------------------------------------

STORES = StoreFactory(message_index_enable=False, physical_memory_bytes=1 << 50)


def service_on(tmp_path: Path) -> TransactionalMessageService:
    store = STORES.open(tmp_path / "store")
    offsets = ConsumerOffsetManager(tmp_path / "config")
    return TransactionalMessageService(store, offsets, lambda: HOST4)


async def prepare(service: TransactionalMessageService, props: dict[str, str]) -> tuple[int, int]:
    """(physical offset, queue offset) of a new half message with `props`."""
    msg = MessageToStore(
        "T",
        2,
        b"body",
        encode_properties({"TRAN_MSG": "true", "PGROUP": "PG", **props}),
        sys_flag=TRANSACTION_PREPARED_TYPE,
        born_host=HOST4,
        store_host=HOST4,
    )
    park_half(msg)
    result = await service.store.put_message(msg, service.on_prepared)
    assert result.append is not None
    return result.append.wrote_offset, result.append.queue_offset


def units(service: TransactionalMessageService, topic: str, queue_id: int) -> list[Any]:
    store = service.store
    store.reput.dispatch_available(1 << 62)
    queue = store.find_consume_queue(topic, queue_id)
    if queue is None:
        return []
    return queue.units(queue.min_offset, 100) or []


async def test_records_put_together_are_one_append_each_in_its_queue(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    store = service.store
    before = store.max_phy_offset
    first = op_record(7, HOST4)
    second = op_record(8, HOST4)
    result = await store.put_encoded([first, second], HOST4)
    assert result.ok and result.append is not None
    append = result.append
    assert append.wrote_offset == before
    assert append.wrote_bytes == len(first.data) + len(second.data)
    assert append.queue_offsets == [0, 1]
    found = [u.physical_offset for u in units(service, OP_TOPIC, 0)]
    assert found == [before, before + len(first.data)]
    # RocketMQ's offsetMsgId of each: the store host's bytes and the offset, in hex
    assert append.msg_ids == [(HOST4 + phy.to_bytes(8, "big")).hex().upper() for phy in found]
    assert append.msg_id == ",".join(append.msg_ids)
    ops = [store.look_message_by_offset(phy) for phy in found]
    assert [op.body if op else None for op in ops] == [b"7", b"8"]
    assert all(op is not None and op.store_timestamp == append.store_timestamp for op in ops)


async def test_a_refused_put_stores_none_of_the_records(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    store = service.store
    before = store.max_phy_offset
    store.in_sync_replicas, store.min_in_sync_replicas = 1, 2  # refuses every write
    result = await store.put_encoded([op_record(1, HOST4), op_record(2, HOST4)], HOST4)
    assert not result.ok
    assert store.max_phy_offset == before


async def test_a_commit_and_its_op_message_are_stored_back_to_back(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    phy, queue_offset = await prepare(service, {"KEYS": "k"})
    store_end = service.store.max_phy_offset
    header = EndTransactionRequestHeader("PG", queue_offset, phy, TRANSACTION_COMMIT_TYPE, "x")
    outcome = await service.end(header)
    assert outcome.code == ResponseCode.SUCCESS
    (commit_unit,) = units(service, "T", 2)
    (op_unit,) = units(service, OP_TOPIC, 0)
    assert commit_unit.physical_offset == store_end
    assert op_unit.physical_offset == store_end + commit_unit.size
    commit = service.store.look_message_by_offset(commit_unit.physical_offset)
    assert commit is not None
    assert commit.sys_flag & 0xC == TRANSACTION_COMMIT_TYPE
    assert commit.prepared_transaction_offset == phy
    assert commit.properties == {"PGROUP": "PG", "KEYS": "k", "WAIT": "false"}
    assert service.committed == 1


async def test_a_commit_with_a_delay_level_is_parked_by_the_store(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    # A half message with a delay level as it lies in the half queue (put_message would have
    # parked the half message itself in the schedule topic, as RocketMQ's putMessage does).
    msg = MessageToStore(
        "T",
        2,
        b"body",
        encode_properties({"TRAN_MSG": "true", "PGROUP": "PG", "DELAY": "2"}),
        born_host=HOST4,
        store_host=HOST4,
    )
    park_half(msg)
    put = await service.store.put_encoded([encode_record(msg, 1024)], HOST4)
    assert put.append is not None
    service.on_prepared(put.append)
    phy, queue_offset = put.append.wrote_offset, put.append.queue_offset
    header = EndTransactionRequestHeader("PG", queue_offset, phy, TRANSACTION_COMMIT_TYPE, "x")
    outcome = await service.end(header)
    assert outcome.code == ResponseCode.SUCCESS
    assert units(service, "T", 2) == []  # not yet: it waits in the schedule topic
    assert len(units(service, SCHEDULE_TOPIC, 1)) == 1  # delay level 2: queue 1
    (op_unit,) = units(service, OP_TOPIC, 0)
    op = service.store.look_message_by_offset(op_unit.physical_offset)
    assert op is not None and op.body == str(queue_offset).encode()


async def test_a_rollback_stores_the_op_message_alone(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    phy, queue_offset = await prepare(service, {})
    header = EndTransactionRequestHeader("PG", queue_offset, phy, TRANSACTION_ROLLBACK_TYPE, "x")
    assert (await service.end(header)).code == ResponseCode.SUCCESS
    assert units(service, "T", 2) == []
    assert len(units(service, OP_TOPIC, 0)) == 1
    assert (service.committed, service.rolled_back) == (0, 1)
    assert units(service, HALF_TOPIC, 0)[0].physical_offset == phy


@given(PROPERTY_TEXT, st.sampled_from(["T", "Tö", "%RETRY%g"]), st.integers(0, 2**31 - 1))
def test_a_half_message_has_the_properties_of_a_decode_and_re_encode(
    text: str, topic: str, queue_id: int
) -> None:
    msg = MessageToStore(topic, queue_id, b"", text, sys_flag=TRANSACTION_PREPARED_TYPE)
    park_half(msg)
    expected = decode_properties(text)
    expected["REAL_TOPIC"] = topic
    expected["REAL_QID"] = str(queue_id)
    assert msg.properties == encode_properties(expected)
    assert (msg.topic, msg.queue_id, msg.sys_flag) == (HALF_TOPIC, 0, 0)


async def test_a_record_is_read_where_it_starts_and_nowhere_else(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    commitlog = service.store.commitlog
    phy, _queue_offset = await prepare(service, {})
    end = service.store.max_phy_offset
    view = commitlog.record_at(phy, 1 << 20)
    assert view is not None and len(view) == end - phy
    decoded = decode_record(view)
    assert decoded.topic == HALF_TOPIC and decoded.physical_offset == phy
    assert commitlog.record_at(phy, len(view) - 1) is None  # bigger than asked for
    assert phy == 0
    assert commitlog.record_at(-1, 1 << 20) is None  # before the log
    assert commitlog.record_at(end, 1 << 20) is None  # nothing readable there yet
    assert commitlog.record_at(phy + 4, 1 << 20) is None  # the magic is no size


@given(st.sampled_from(["", "TRAN_MSG\x01true\x02", "TRAN_MSG\x01"]), PROPERTY_TEXT)
def test_a_half_message_is_told_as_decoding_its_properties_tells_it(start: str, rest: str) -> None:
    # The test without the dict (TRAN_MSG=true first, named nowhere else) against the decode.
    text = start + rest
    value = decode_properties(text).get("TRAN_MSG", "")
    assert is_prepared_send(text) == (value.strip().lower() == "true")


async def test_properties_with_other_digits_end_and_check_without_an_error(tmp_path: Path) -> None:
    # str.isdigit takes "²" and int() refuses it: a client's own TRAN_PREPARED_QUEUE_OFFSET or
    # TRANSACTION_CHECK_TIMES of such digits made END and the check raise ValueError.
    service = service_on(tmp_path)
    props = {"TRAN_PREPARED_QUEUE_OFFSET": "\u00b2", "TRANSACTION_CHECK_TIMES": "\u00b2"}
    phy, queue_offset = await prepare(service, props)
    stored = service.store.look_message_by_offset(phy)
    assert stored is not None
    assert origin_of(stored) == queue_offset
    assert check_times(stored) == 0
    header = EndTransactionRequestHeader("PG", queue_offset, phy, TRANSACTION_COMMIT_TYPE, "x")
    outcome = await service.end(header)
    assert outcome.code == ResponseCode.SUCCESS, outcome.remark
    assert len(units(service, "T", 2)) == 1


async def test_an_end_waits_only_for_a_new_consume_queue_file(tmp_path: Path) -> None:
    # end_now answers at once when its put waits for nothing; the commit that starts its
    # queue's first file waits for its dispatch (as put_encoded does), through an awaitable.
    service = service_on(tmp_path)
    first = await prepare(service, {})
    second = await prepare(service, {})
    ending = service.end_now(
        EndTransactionRequestHeader("PG", first[1], first[0], TRANSACTION_COMMIT_TYPE, "x")
    )
    assert not isinstance(ending, EndOutcome)  # T-2's first unit: a new file
    service.store.reput.dispatch_available(1 << 62)
    assert (await ending).code == ResponseCode.SUCCESS
    service.store.reput.dispatch_available(1 << 62)
    outcome = service.end_now(
        EndTransactionRequestHeader("PG", second[1], second[0], TRANSACTION_COMMIT_TYPE, "x")
    )
    assert isinstance(outcome, EndOutcome) and outcome.code == ResponseCode.SUCCESS
    assert len(units(service, "T", 2)) == 2
    assert len(units(service, OP_TOPIC, 0)) == 2


async def test_the_end_processor_answers_at_once_when_nothing_waits(tmp_path: Path) -> None:
    # process_now (the server's dispatch_now calls it): a oneway END with nothing to wait for
    # is done when it returns, None and no coroutine; a two-way one gets its answer, a refusal
    # included; one that waits for a new ConsumeQueue file gives an awaitable of its answer
    service = service_on(tmp_path)
    processor = EndTransactionProcessor(service.store, service)
    connection = RemotingConnection()
    connection.peer = "10.0.0.1:5"
    halves = [await prepare(service, {}) for _ in range(3)]

    def end(half: tuple[int, int], oneway: bool) -> RemotingCommand:
        header = EndTransactionRequestHeader("PG", half[1], half[0], TRANSACTION_COMMIT_TYPE, "x")
        return RemotingCommand.request(
            RequestCode.END_TRANSACTION, encode(header), opaque=9, oneway=oneway
        )

    waiting = processor.process_now(connection, end(halves[0], oneway=True))
    assert waiting is not None and not isinstance(waiting, RemotingCommand)  # T-2's first file
    service.store.reput.dispatch_available(1 << 62)
    assert await waiting is None
    assert processor.process_now(connection, end(halves[1], oneway=True)) is None
    answer = processor.process_now(connection, end(halves[2], oneway=False))
    assert isinstance(answer, RemotingCommand)
    assert (answer.code, answer.opaque) == (ResponseCode.SUCCESS, 9)
    again = processor.process_now(connection, end(halves[2], oneway=False))
    assert isinstance(again, RemotingCommand) and again.code == ResponseCode.TRANSACTION_FAILED
    assert len(units(service, "T", 2)) == 3
    assert len(units(service, OP_TOPIC, 0)) == 3
