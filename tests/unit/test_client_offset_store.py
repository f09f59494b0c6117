"""Offset stores (client/consumer/offset_store.py): broker-backed for CLUSTERING, file for
BROADCASTING."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tidemq.client.consumer.offset_store import (
    OFFSET_NOT_FOUND,
    OFFSET_READ_ERROR,
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
    decode_offset_table,
    encode_offset_table,
)
from tidemq.client.errors import (
    BrokerResponseError,
    ClientError,
    QueryNotFoundError,
    RequestTimeoutError,
)
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.remoting.codes import ResponseCode

MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-a", 1)
MQ_B = MessageQueue("T", "broker-b", 0)
MQ_U = MessageQueue("U", "broker-a", 0)


class FakeAPI:
    """BrokerAPI's offset calls over a dict {(address, group, topic, queue_id): offset}."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, str, str, int], int] = {}
        self.commits: list[tuple[str, str, str, int, int]] = []
        self.fail: Exception | None = None
        self.not_found_raises = False

    async def query_consumer_offset(self, address: str, group: str, topic: str, qid: int) -> int:
        if self.fail is not None:
            raise self.fail
        key = (address, group, topic, qid)
        if key not in self.offsets:
            if self.not_found_raises:
                raise QueryNotFoundError(ResponseCode.QUERY_NOT_FOUND, "not found")
            return -1  # what BrokerAPI answers for QUERY_NOT_FOUND
        return self.offsets[key]

    async def update_consumer_offset(
        self, address: str, group: str, topic: str, qid: int, offset: int
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.commits.append((address, group, topic, qid, offset))
        self.offsets[(address, group, topic, qid)] = offset


class Addresses:
    """find_address: broker name -> address, None for an unknown broker."""

    def __init__(self, table: dict[str, str]) -> None:
        self.table = table

    async def __call__(self, broker_name: str) -> str | None:
        return self.table.get(broker_name)


def remote(api: FakeAPI, table: dict[str, str] | None = None) -> RemoteBrokerOffsetStore:
    return RemoteBrokerOffsetStore("cg", api, Addresses(table or {"broker-a": "a:0"}))


# --- shared memory behaviour ------------------------------------------------------------------


@pytest.fixture(params=["remote", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> OffsetStore:
    if request.param == "remote":
        return remote(FakeAPI())
    return LocalFileOffsetStore("cg", "10.0.0.1@1#2", tmp_path)


async def test_update_offset_increase_only(store: OffsetStore) -> None:
    await store.update_offset(MQ0, 10, increase_only=True)  # absent: set whatever
    await store.update_offset(MQ0, 5, increase_only=True)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 10
    await store.update_offset(MQ0, 12, increase_only=True)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 12
    await store.update_offset(MQ0, 3, increase_only=False)
    assert await store.read_offset(MQ0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 3


async def test_memory_read_of_an_unknown_queue(store: OffsetStore) -> None:
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == OFFSET_NOT_FOUND


async def test_remove_and_clone(store: OffsetStore) -> None:
    await store.update_offset(MQ0, 1, increase_only=False)
    await store.update_offset(MQ_U, 2, increase_only=False)
    assert await store.clone_offset_table("T") == {MQ0: 1}
    assert await store.clone_offset_table() == {MQ0: 1, MQ_U: 2}
    assert await store.clone_offset_table("") == {MQ0: 1, MQ_U: 2}
    await store.remove_offset(MQ0)
    await store.remove_offset(MQ0)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == OFFSET_NOT_FOUND


# --- remote -----------------------------------------------------------------------------------


async def test_remote_read_from_store_replaces_memory() -> None:
    api = FakeAPI()
    api.offsets[("a:0", "cg", "T", 0)] = 42
    store = remote(api)
    await store.update_offset(MQ0, 50, increase_only=False)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 42
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 42


async def test_remote_memory_first_then_store() -> None:
    api = FakeAPI()
    api.offsets[("a:0", "cg", "T", 1)] = 7
    store = remote(api)
    await store.update_offset(MQ0, 3, increase_only=False)
    assert await store.read_offset(MQ0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 3
    assert await store.read_offset(MQ1, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 7


@pytest.mark.parametrize("raises", [False, True])
async def test_remote_query_not_found_is_minus_one(raises: bool) -> None:
    api = FakeAPI()
    api.not_found_raises = raises
    store = remote(api)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == OFFSET_NOT_FOUND
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == OFFSET_NOT_FOUND


@pytest.mark.parametrize(
    "error",
    [
        RequestTimeoutError("timed out"),
        BrokerResponseError.for_code(ResponseCode.SYSTEM_ERROR, "boom"),
        ConnectionResetError("reset"),
    ],
)
async def test_remote_other_errors_are_minus_two(error: Exception) -> None:
    api = FakeAPI()
    api.fail = error
    store = remote(api)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == OFFSET_READ_ERROR


async def test_remote_unknown_broker_is_minus_two() -> None:
    store = remote(FakeAPI())
    assert await store.read_offset(MQ_B, ReadOffsetType.READ_FROM_STORE) == OFFSET_READ_ERROR


async def test_remote_persist_all_commits_ours_and_drops_the_rest() -> None:
    api = FakeAPI()
    store = remote(api, {"broker-a": "a:0", "broker-b": "b:1"})
    await store.update_offset(MQ0, 10, increase_only=False)
    await store.update_offset(MQ1, 11, increase_only=False)
    await store.update_offset(MQ_B, 20, increase_only=False)
    await store.persist_all([MQ0, MQ_B])
    assert sorted(api.commits) == [("a:0", "cg", "T", 0, 10), ("b:1", "cg", "T", 0, 20)]
    assert await store.clone_offset_table() == {MQ0: 10, MQ_B: 20}

    api.commits.clear()
    await store.persist_all([])  # nothing: neither commits nor drops
    assert api.commits == []
    assert await store.clone_offset_table() == {MQ0: 10, MQ_B: 20}


async def test_remote_persist_goes_where_find_address_says() -> None:
    # The caller's find_address gives the slave when the master is down: commit goes there.
    api = FakeAPI()
    store = remote(api, {"broker-a": "a:1"})
    await store.update_offset(MQ0, 9, increase_only=False)
    await store.persist(MQ0)
    await store.persist(MQ1)  # no offset: nothing to send
    assert api.commits == [("a:1", "cg", "T", 0, 9)]


async def test_remote_commit_failures_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeAPI()
    api.fail = RequestTimeoutError("timed out")
    store = remote(api)
    await store.update_offset(MQ0, 9, increase_only=False)
    await store.update_offset(MQ_B, 4, increase_only=False)  # broker-b: no address
    await store.persist_all([MQ0, MQ_B])
    await store.persist(MQ0)
    assert "timed out" in caplog.text
    assert "broker not found" in caplog.text
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 9


# --- local file -------------------------------------------------------------------------------


def local(tmp_path: Path) -> LocalFileOffsetStore:
    return LocalFileOffsetStore("cg", "10.0.0.1@1#2", tmp_path)


async def test_local_offsets_survive_a_reload(tmp_path: Path) -> None:
    store = local(tmp_path)
    await store.load()
    room_mq = MessageQueue("T", "hz@broker-a", 3)  # a broker name with '@' round-trips
    for mq, offset in ((MQ0, 10), (MQ1, 11), (room_mq, 12)):
        await store.update_offset(mq, offset, increase_only=False)
    await store.persist_all([MQ0, MQ1, room_mq])

    path = tmp_path / "10.0.0.1@1#2" / "cg" / "offsets.json"
    assert store.path == path
    assert json.loads(path.read_text()) == {
        "offsetTable": {"T@broker-a@0": 10, "T@broker-a@1": 11, "T@hz@broker-a@3": 12}
    }
    assert sorted(p.name for p in path.parent.iterdir()) == ["offsets.json"]

    again = local(tmp_path)
    await again.load()
    assert await again.clone_offset_table() == {MQ0: 10, MQ1: 11, room_mq: 12}


async def test_local_persist_all_writes_only_the_given_queues(tmp_path: Path) -> None:
    store = local(tmp_path)
    await store.update_offset(MQ0, 10, increase_only=False)
    await store.update_offset(MQ1, 11, increase_only=False)
    await store.persist_all([MQ1])
    assert decode_offset_table(store.path.read_text()) == {MQ1: 11}
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 10


async def test_local_persist_one_queue_keeps_the_others(tmp_path: Path) -> None:
    store = local(tmp_path)
    await store.update_offset(MQ0, 10, increase_only=False)
    await store.update_offset(MQ1, 11, increase_only=False)
    await store.persist_all([MQ0, MQ1])
    await store.update_offset(MQ0, 15, increase_only=True)
    await store.update_offset(MQ1, 16, increase_only=True)
    await store.persist(MQ0)
    assert decode_offset_table(store.path.read_text()) == {MQ0: 15, MQ1: 11}


async def test_local_read_from_store_reads_the_file(tmp_path: Path) -> None:
    store = local(tmp_path)
    await store.update_offset(MQ0, 10, increase_only=False)
    await store.persist_all([MQ0])
    await store.update_offset(MQ0, 99, increase_only=False)
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 10
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 10
    assert await store.read_offset(MQ1, ReadOffsetType.READ_FROM_STORE) == OFFSET_NOT_FOUND
    assert await store.read_offset(MQ1, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == OFFSET_NOT_FOUND


async def test_local_bak_holds_the_previous_table(tmp_path: Path) -> None:
    store = local(tmp_path)
    await store.update_offset(MQ0, 1, increase_only=False)
    await store.persist_all([MQ0])
    await store.update_offset(MQ0, 2, increase_only=False)
    await store.persist_all([MQ0])
    backup = store.path.with_name("offsets.json.bak")
    assert decode_offset_table(backup.read_text()) == {MQ0: 1}
    assert decode_offset_table(store.path.read_text()) == {MQ0: 2}


@pytest.mark.parametrize(
    "damage", ["", "{not json", '{"offsetTable": 3}', '{"offsetTable": {"x": 1}}']
)
async def test_local_damaged_file_falls_back_to_bak(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = local(tmp_path)
    await store.update_offset(MQ0, 1, increase_only=False)
    await store.persist_all([MQ0])
    await store.update_offset(MQ0, 2, increase_only=False)
    await store.persist_all([MQ0])
    store.path.write_text(damage)

    again = local(tmp_path)
    with caplog.at_level(logging.WARNING):
        await again.load()
    assert await again.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 1
    assert "offsets.json.bak" in caplog.text


async def test_local_damaged_without_bak_refuses_to_start(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text('{"offsetTable": {"T@broker-a@0": "ten"}}')
    with pytest.raises(ClientError, match=r"offsets\.json"):
        await store.load()
    # Reading from the store then answers "nothing stored", as RocketMQ does.
    assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == OFFSET_NOT_FOUND


async def test_local_both_files_damaged_refuses_to_start(tmp_path: Path) -> None:
    store = local(tmp_path)
    store.path.parent.mkdir(parents=True)
    store.path.write_text("garbage")
    store.path.with_name("offsets.json.bak").write_text("garbage too")
    with pytest.raises(ClientError, match=r"offsets\.json\.bak"):
        await store.load()


async def test_local_missing_file_is_an_empty_table(tmp_path: Path) -> None:
    store = local(tmp_path)
    await store.load()
    assert await store.clone_offset_table() == {}
    await store.persist_all([])  # nothing to write, nothing written
    assert not store.path.exists()


def test_offset_table_text_round_trip() -> None:
    table = {MQ_B: 5, MQ0: 7, MessageQueue("%RETRY%cg", "r@b@c", 12): 0}
    text = encode_offset_table(table)
    assert decode_offset_table(text) == table
    # Written in MessageQueue order: ("%RETRY%cg", ...) < ("T", "broker-a", 0) < ...
    assert list(json.loads(text)["offsetTable"]) == [
        "%RETRY%cg@r@b@c@12",
        "T@broker-a@0",
        "T@broker-b@0",
    ]
    with pytest.raises(ValueError):
        decode_offset_table('{"offsetTable": {"T@b@0": true}}')
    with pytest.raises(ValueError):
        decode_offset_table("[]")
