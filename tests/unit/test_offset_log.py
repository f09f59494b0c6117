"""Consumer offset commits carried in the CommitLog (broker/offset_log.py) on a store in a tmp
dir: a commit is answered once its record is applied, commits arriving meanwhile share the next
record, the table is what the log says in log order (a restart's replay, a slave's), and what
cannot be applied is said, not trusted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from pathlib import Path

import pytest

from tests.support.stores import StoreFactory
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.offset_log import (
    APPLIER_GROUP,
    OFFSET_LOG_TOPIC,
    OffsetLog,
    Removals,
    decode_commits,
    decode_removals,
    encode_commits,
)
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore

STORES = StoreFactory(message_index_enable=False, physical_memory_bytes=1 << 50)
HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x10"


def offset_log_on(store: MessageStore, config: Path) -> OffsetLog:
    offset_log = OffsetLog(store, ConsumerOffsetManager(config), lambda: HOST)
    store.add_arrival_listener(offset_log.on_arrival)
    return offset_log


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_record_body_is_a_consumer_offset_json_document() -> None:
    table = {"T@G": {0: 12, 3: 4}, "%RETRY%G@G": {0: 0}}
    body = encode_commits(table)
    assert body == b'{"offsetTable":{"T@G":{"0":12,"3":4},"%RETRY%G@G":{"0":0}}}'
    assert decode_commits(body) == table


def test_removals_ride_in_the_document_only_when_there_are_some() -> None:
    removals = Removals(topics={"Gone"}, groups={"G2", "G1"})
    body = encode_commits({"T@G": {0: 1}}, removals)
    assert body == (
        b'{"offsetTable":{"T@G":{"0":1}},"removedTopics":["Gone"],"removedGroups":["G1","G2"]}'
    )
    assert decode_commits(body) == {"T@G": {0: 1}}
    assert decode_removals(body) == removals
    assert decode_removals(encode_commits({"T@G": {0: 1}}, Removals())) == Removals()
    assert b"removed" not in encode_commits({}, Removals())
    with pytest.raises(BodyDecodeError, match="removedGroups is not a list of names"):
        decode_removals(b'{"offsetTable":{},"removedGroups":"G"}')


async def test_a_reset_and_removals_go_through_the_log_in_the_order_asked(tmp_path: Path) -> None:
    """A reset is one record of every queue's offset; a removal drops what it removes also from
    the commits still waiting for a record, and a commit asked after it survives it; a broker
    replaying the log from nothing gets the same table."""
    store = STORES.open(tmp_path / "store")
    offset_log = offset_log_on(store, tmp_path / "config")

    async def applied(change: Awaitable[str | None]) -> None:
        task = asyncio.ensure_future(change)
        await settle()
        store.reput.dispatch_available(1 << 62)
        assert await asyncio.wait_for(task, 5) is None

    await applied(offset_log.commit_table({"T@G": {0: 5, 1: 6}, "T@H": {0: 1}, "U@G": {0: 2}}))
    assert offset_log.offsets.query_all("G", "T") == {0: 5, 1: 6}
    await applied(offset_log.commit_table({"T@G": {0: 1, 1: 1}}))  # a reset back
    assert offset_log.offsets.query_all("G", "T") == {0: 1, 1: 1}
    # Asked while a record is being written, so that they share the next: a commit of H, H
    # removed, G committed, T removed, a commit of T by K. The end state is theirs in order.
    first = asyncio.ensure_future(offset_log.commit("G", "W", 0, 1))
    await settle()
    offset_log.commit_later("H", "V", 0, 9)
    asked = [
        asyncio.ensure_future(offset_log.remove(group="H")),
        asyncio.ensure_future(offset_log.commit("G", "U", 0, 3)),
        asyncio.ensure_future(offset_log.remove(topic="T")),
        asyncio.ensure_future(offset_log.commit("K", "T", 0, 4)),
    ]
    await settle()
    written = offset_log.records_written
    store.reput.dispatch_available(1 << 62)
    assert await asyncio.wait_for(first, 5) is None
    await settle()
    assert offset_log.records_written == written + 1
    store.reput.dispatch_available(1 << 62)
    assert await asyncio.wait_for(asyncio.gather(*asked), 5) == [None] * 4
    table = offset_log.offsets.snapshot()
    table.pop(f"{OFFSET_LOG_TOPIC}@{APPLIER_GROUP}")
    assert table == {"U@G": {0: 3}, "T@K": {0: 4}, "W@G": {0: 1}}
    replayed = OffsetLog(store, ConsumerOffsetManager(tmp_path / "other"), lambda: HOST)
    replayed.apply_available()
    assert replayed.offsets.snapshot() == offset_log.offsets.snapshot()


async def test_a_commit_is_answered_once_its_record_is_applied(tmp_path: Path) -> None:
    store = STORES.open(tmp_path / "store")
    offset_log = offset_log_on(store, tmp_path / "config")
    answered = asyncio.create_task(offset_log.commit("G", "T", 0, 5))
    await settle()
    assert offset_log.records_written == 1
    assert not answered.done()  # stored, not dispatched: not readable, not applied
    assert offset_log.offsets.query("G", "T", 0) == -1
    store.reput.dispatch_available(1 << 62)
    assert await asyncio.wait_for(answered, 5) is None
    assert offset_log.offsets.query("G", "T", 0) == 5
    assert offset_log.applied_position() == 1
    assert offset_log.offsets.query(APPLIER_GROUP, OFFSET_LOG_TOPIC, 0) == 1


async def test_commits_arriving_together_share_one_record(tmp_path: Path) -> None:
    store = STORES.open(tmp_path / "store")
    offset_log = offset_log_on(store, tmp_path / "config")
    commits = [
        asyncio.create_task(offset_log.commit("G", "T", queue, 10 + queue)) for queue in range(3)
    ]
    offset_log.commit_later("H", "T", 0, 7)  # a pull's piggybacked commit rides along
    await settle()
    store.reput.dispatch_available(1 << 62)
    assert await asyncio.wait_for(asyncio.gather(*commits), 5) == [None, None, None]
    assert offset_log.records_written == 1
    assert offset_log.offsets.query_all("G", "T") == {0: 10, 1: 11, 2: 12}
    assert offset_log.offsets.query("H", "T", 0) == 7


async def test_the_table_follows_the_log_in_its_order_also_when_replayed(tmp_path: Path) -> None:
    """A rewind is a commit like any other; a broker that lost its table (a restart before the
    table was persisted, a slave) applies the log from its applied position and gets the same."""
    store = STORES.open(tmp_path / "store")
    offset_log = offset_log_on(store, tmp_path / "config")
    for offset in (5, 9, 3):
        answered = asyncio.create_task(offset_log.commit("G", "T", 0, offset))
        await settle()
        store.reput.dispatch_available(1 << 62)
        assert await asyncio.wait_for(answered, 5) is None
    assert offset_log.offsets.query("G", "T", 0) == 3
    replayed = OffsetLog(store, ConsumerOffsetManager(tmp_path / "other"), lambda: HOST)
    assert replayed.apply_available() is False
    assert replayed.offsets.query("G", "T", 0) == 3
    assert replayed.applied_position() == 3
    # Applied again from a persisted position: only what comes after it.
    replayed.offsets.commit("", "G", "T", 0, 42)
    replayed.apply_available()
    assert replayed.offsets.query("G", "T", 0) == 42


async def test_a_put_refused_is_an_answer_saying_why(tmp_path: Path) -> None:
    store = STORES.open(tmp_path / "store")
    store.take_role(BrokerRole.SLAVE)
    offset_log = offset_log_on(store, tmp_path / "config")
    error = await asyncio.wait_for(offset_log.commit("G", "T", 0, 5), 5)
    assert error is not None and error.startswith("offset commit not replicated"), error
    assert offset_log.offsets.query("G", "T", 0) == -1


async def test_a_record_that_is_not_a_commit_is_skipped_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = STORES.open(tmp_path / "store")
    offset_log = offset_log_on(store, tmp_path / "config")
    result = await store.put_message(MessageToStore(OFFSET_LOG_TOPIC, 0, b"not json"))
    assert result.ok
    answered = asyncio.create_task(offset_log.commit("G", "T", 0, 5))
    await settle()
    with caplog.at_level(logging.ERROR):
        store.reput.dispatch_available(1 << 62)
        assert await asyncio.wait_for(answered, 5) is None
    assert "is not a commit, skipped" in caplog.text
    assert offset_log.offsets.query("G", "T", 0) == 5
    assert offset_log.applied_position() == 2


def test_a_log_cut_below_the_applied_position_is_applied_on_from_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = STORES.open(tmp_path / "store")
    offset_log = offset_log_on(store, tmp_path / "config")
    offset_log.offsets.commit("", APPLIER_GROUP, OFFSET_LOG_TOPIC, 0, 7)
    with caplog.at_level(logging.WARNING):
        store.find_or_create_consume_queue(OFFSET_LOG_TOPIC, 0)
        offset_log.apply_available()
    assert "offset log cut below its applied position 7" in caplog.text
    assert offset_log.applied_position() == 0


def test_a_slave_never_takes_its_masters_applied_position(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path / "config")
    offsets.commit("", APPLIER_GROUP, OFFSET_LOG_TOPIC, 0, 2)
    offsets.merge_from_master({f"{OFFSET_LOG_TOPIC}@{APPLIER_GROUP}": {0: 9}, "T@G": {0: 4}})
    assert offsets.query(APPLIER_GROUP, OFFSET_LOG_TOPIC, 0) == 2
    assert offsets.query("G", "T", 0) == 4
