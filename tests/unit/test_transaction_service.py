"""The broker's transactional messages on a store in a tmp dir: half messages, the end of a
transaction, op messages, the pending table rebuilt from the queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.stores import StoreFactory
from tidemq.broker.config import BrokerConfig
from tidemq.broker.managers.clients import ProducerManager
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.state import BrokerState
from tidemq.broker.transaction.check import TransactionCheckService
from tidemq.broker.transaction.messages import (
    HALF_TOPIC,
    OP_TOPIC,
    checked_copy,
    immunity_ms,
    is_prepared_send,
    origin_of,
    park_half,
)
from tidemq.broker.transaction.service import TransactionalMessageService
from tidemq.client.protocol.headers import EndTransactionRequestHeader
from tidemq.client.remoting.codes import ResponseCode
from tidemq.store.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, StoredMessage, encode_properties

STORES = StoreFactory(message_index_enable=False, physical_memory_bytes=1 << 50)
HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x10"


def prepared(body: bytes, group: str = "PG") -> MessageToStore:
    props = {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": body.hex()}
    return MessageToStore(
        "T", 2, body, encode_properties(props), sys_flag=TRANSACTION_PREPARED_TYPE
    )


async def prepare(service: TransactionalMessageService, body: bytes) -> StoredMessage:
    msg = prepared(body)
    park_half(msg)
    result = await service.store.put_message(msg, service.on_prepared)
    assert result.append is not None
    half = service.store.look_message_by_offset(result.append.wrote_offset)
    assert half is not None
    return half


def end_header(half: StoredMessage, state: int, group: str = "PG") -> EndTransactionRequestHeader:
    return EndTransactionRequestHeader(group, half.queue_offset, half.physical_offset, state, "x")


def queue_messages(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    store.reput.dispatch_available(1 << 62)
    queue = store.find_consume_queue(topic, queue_id)
    if queue is None:
        return []
    units = queue.units(queue.min_offset, 100) or []
    found = [store.look_message_by_offset(u.physical_offset, u.size) for u in units]
    return [m for m in found if m is not None]


def service_on(tmp_path: Path) -> TransactionalMessageService:
    store = STORES.open(tmp_path / "store")
    offsets = ConsumerOffsetManager(tmp_path / "config")
    return TransactionalMessageService(store, offsets, lambda: HOST)


async def test_commit_stores_the_message_once_and_an_op_message(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    half = await prepare(service, b"a")
    assert (half.topic, half.queue_id) == (HALF_TOPIC, 0)
    assert half.sys_flag & TRANSACTION_MASK == 0  # dispatched to the half queue
    assert (half.properties["REAL_TOPIC"], half.properties["REAL_QID"]) == ("T", "2")
    assert queue_messages(service.store, "T", 2) == []

    outcome = await service.end(end_header(half, TRANSACTION_COMMIT_TYPE))
    assert outcome.code == ResponseCode.SUCCESS
    [real] = queue_messages(service.store, "T", 2)
    assert real.body == b"a" and real.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
    assert real.prepared_transaction_offset == half.physical_offset
    assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(real.properties)
    assert real.properties["PGROUP"] == "PG"
    [op] = queue_messages(service.store, OP_TOPIC, 0)
    assert (op.body, op.tags) == (b"0", "d")

    again = await service.end(end_header(half, 12))
    assert again.code == ResponseCode.TRANSACTION_FAILED and "already ended" in str(again.remark)
    assert len(queue_messages(service.store, "T", 2)) == 1


@pytest.mark.asyncio
async def test_refusals_name_the_problem(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    half = await prepare(service, b"b")
    header = end_header(half, 8)
    header.commit_log_offset += 3  # not where a record starts
    assert (await service.end(header)).code == ResponseCode.SYSTEM_ERROR
    header = end_header(half, 8)
    header.commit_log_offset = 1 << 40  # beyond the CommitLog
    assert "no half message" in str((await service.end(header)).remark)
    assert "group wrong" in str((await service.end(end_header(half, 8, "other"))).remark)
    unknown = await service.end(end_header(half, 0))
    assert unknown.code == ResponseCode.SUCCESS and "UNKNOWN" in str(unknown.remark)
    assert (await service.end(end_header(half, 3))).code == ResponseCode.ILLEGAL_OPERATION
    assert service.pending.as_dict() == {half.queue_offset: half.queue_offset}  # still open
    assert queue_messages(service.store, "T", 2) == []


@pytest.mark.asyncio
async def test_the_pending_table_is_rebuilt_from_the_half_and_op_queues(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    ended = await prepare(service, b"c")
    open_one = await prepare(service, b"d")
    # A check's copy of the open one stands for it; ending the copy ends the transaction.
    copied = await prepare(service, b"e")
    copy_msg = checked_copy(copied, count_check=True)
    result = await service.store.put_message(copy_msg)
    assert result.append is not None
    service.pending.put(copied.queue_offset, result.append.queue_offset)
    copy = service.store.look_message_by_offset(result.append.wrote_offset)
    assert copy is not None and origin_of(copy) == copied.queue_offset
    assert copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert (await service.end(end_header(ended, 12))).code == ResponseCode.SUCCESS
    assert (await service.end(end_header(copy, 8))).code == ResponseCode.SUCCESS
    # The first copy of an ended transaction is refused too.
    assert (await service.end(end_header(copied, 8))).code == ResponseCode.TRANSACTION_FAILED

    service.store.reput.dispatch_available(1 << 62)
    rebuilt = TransactionalMessageService(service.store, service.offsets, lambda: HOST)
    rebuilt.load()
    assert rebuilt.pending.as_dict() == {open_one.queue_offset: open_one.queue_offset}


def test_prepared_sends_and_immunity() -> None:
    assert is_prepared_send(encode_properties({"TRAN_MSG": "TRUE"}))
    assert not is_prepared_send(encode_properties({"TRAN_MSG": "false"}))
    assert not is_prepared_send(encode_properties({"TAGS": "TRAN_MSG"}))

    def half(props: dict[str, str]) -> StoredMessage:
        return StoredMessage(
            0, 0, 0, 0, 7, 0, 0, 0, ("127.0.0.1", 1), 0, ("127.0.0.1", 1), 0, 0, b"", "t", props
        )

    assert immunity_ms(half({}), 6000) == 6000
    assert immunity_ms(half({"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}), 6000) == 60_000
    assert immunity_ms(half({"CHECK_IMMUNITY_TIME_IN_SECONDS": "1"}), 6000) == 6000
    assert immunity_ms(half({"CHECK_IMMUNITY_TIME_IN_SECONDS": "x"}), 6000) == 6000
    assert origin_of(half({})) == 7
    assert origin_of(half({"TRAN_PREPARED_QUEUE_OFFSET": "3"})) == 3


def checker_on(service: TransactionalMessageService, **config: int) -> TransactionCheckService:
    state = BrokerState(
        BrokerConfig(broker_name="b", transaction_time_out=0, **config), "127.0.0.1:1", HOST
    )
    return TransactionCheckService(state, service, ProducerManager(), lambda topic: None)


def put_with_end_first(
    service: TransactionalMessageService, topic: str, header: EndTransactionRequestHeader
) -> list[int]:
    """Make the next put to `topic` let an END run first (as one arriving while the check's
    put waits for its flush or slave); the END's response codes are collected."""
    codes: list[int] = []
    put = service.store.put_message

    async def racing(msg: MessageToStore) -> Any:
        if msg.topic == topic and not codes:
            codes.append((await service.end(header)).code)
        return await put(msg)

    service.store.put_message = racing  # type: ignore[method-assign]
    return codes


@pytest.mark.asyncio
async def test_an_end_while_the_check_renews_a_half_message_is_not_undone(
    tmp_path: Path,
) -> None:
    service = service_on(tmp_path)
    half = await prepare(service, b"f")
    service.store.reput.dispatch_available(1 << 62)
    codes = put_with_end_first(service, HALF_TOPIC, end_header(half, TRANSACTION_COMMIT_TYPE))
    await checker_on(service).check_once()
    assert codes == [ResponseCode.SUCCESS]
    assert service.pending.as_dict() == {}  # the copy did not bring the transaction back
    assert len(queue_messages(service.store, "T", 2)) == 1


@pytest.mark.asyncio
async def test_an_end_while_the_check_discards_is_refused(tmp_path: Path) -> None:
    service = service_on(tmp_path)
    half = await prepare(service, b"g")
    service.store.reput.dispatch_available(1 << 62)
    codes = put_with_end_first(
        service, "TRANS_CHECK_MAX_TIME_TOPIC", end_header(half, TRANSACTION_COMMIT_TYPE)
    )
    await checker_on(service, transaction_check_max=0).check_once()
    assert codes == [ResponseCode.TRANSACTION_FAILED]
    assert queue_messages(service.store, "T", 2) == []  # discarded, not also committed
    assert [m.body for m in queue_messages(service.store, "TRANS_CHECK_MAX_TIME_TOPIC", 0)] == [
        b"g"
    ]


@pytest.mark.asyncio
async def test_a_half_message_whose_put_still_waits_is_not_passed_by_the_check(
    tmp_path: Path,
) -> None:
    """The check may run while a prepared send's put waits for its flush or slave (the
    half message dispatched already): the transaction must be open by then, else the check
    passes it for good."""
    service = service_on(tmp_path)
    checker = checker_on(service)
    store = service.store
    after_append = store._after_append

    async def waiting(append: Any, wait_store: bool) -> Any:
        store._after_append = after_append  # type: ignore[method-assign]
        store.reput.dispatch_available(1 << 62)
        await checker.check_once()  # runs while the put waits
        return await after_append(append, wait_store)

    store._after_append = waiting  # type: ignore[method-assign]
    half = await prepare(service, b"h")
    latest = service.pending.get(half.queue_offset)
    assert latest is not None and latest >= service.check_offset  # still open, still ahead
