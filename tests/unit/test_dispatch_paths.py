"""Dispatch's fast path (batched units and index entries) against its general path.

The same CommitLog is dispatched twice, once with `ReputService.fast_path` off, and the
ConsumeQueue and index files must come out byte for byte the same. The messages mix everything
that leaves the fast path (IPv6 hosts, PREPARED/ROLLBACK transaction bits, delayed messages)
with what it must handle itself: COMMIT records (a transaction's commit), non-ASCII topics, tags
and keys, several keys, a property name that appears inside another name, segment roll-overs.
"""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import pytest

from tests.support.stores import StoreFactory
from tidemq.common.speedups import PURE_TWINS
from tidemq.store import dispatch
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.dispatch import ReputService
from tidemq.store.fast_scan import scan_fast
from tidemq.store.layout import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    MessageBatch,
    MessageToStore,
    decode_properties,
    encode_properties,
    encode_record,
    pack_host,
)
from tidemq.store.segment import Segment

TOPICS = ["Orders", "主题", "T"]
TAGS = [None, "TagA", "TagB", "标签", ""]
KEYS = [None, "k1", "k1 k2", "键 k3", "  spaced  key ", ""]


STORES = StoreFactory(
    message_index_enable=True,
    mapped_file_size_commit_log=8192,
    max_message_size=2048,
    mapped_file_size_consume_queue=20 * 16,
    max_hash_slot_num=32,
    max_index_num=64,
)
make_config = STORES.config


def random_message(rng: random.Random, i: int) -> MessageToStore:
    props: dict[str, str] = {}
    tags = rng.choice(TAGS)
    if tags is not None:
        props["TAGS"] = tags
    keys = rng.choice(KEYS)
    if keys is not None:
        props["KEYS"] = keys
    if rng.random() < 0.8:
        props["UNIQ_KEY"] = f"0A000011C2B818B4AAC2{i:012X}"
    if rng.random() < 0.2:
        # The names searched for, inside other names: must not be taken for them.
        props = {"XTAGS": "no", "MYKEYS": "no", "NOT_UNIQ_KEY": "no", **props}
    if rng.random() < 0.1:
        props["DELAY"] = str(rng.randint(1, 3))
    sys_flag = 0
    born_host = pack_host("10.0.0.1", 4000)
    store_host = pack_host("10.0.0.2", 10911)
    if rng.random() < 0.1:
        born_host = pack_host("fe80::1", 4000)
        sys_flag |= FLAG_BORNHOST_V6
    if rng.random() < 0.1:
        store_host = pack_host("fe80::2", 10911)
        sys_flag |= FLAG_STOREHOST_V6
    if rng.random() < 0.1:
        sys_flag |= rng.choice(
            [TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_COMMIT_TYPE]
        )
    return MessageToStore(
        topic=rng.choice(TOPICS),
        queue_id=rng.randint(0, 2),
        body=bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 300))),
        properties=encode_properties(props),
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000 + i,
        born_host=born_host,
        store_host=store_host,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def index_contents(root: Path) -> list[bytes]:
    """Index files in name order; names are creation times, so only contents compare."""
    return [path.read_bytes() for path in sorted((root / "index").iterdir())]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_fast_and_general_paths_build_the_same_files(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    source = MessageStore(make_config(tmp_path / "source"))
    source.load()  # loaded, not started: the appends are not dispatched here
    for i in range(400):
        msg = random_message(rng, i)
        if rng.random() < 0.3:
            batch = [msg, *(random_message(rng, i * 1000 + j) for j in range(rng.randint(1, 5)))]
            host = pack_host("10.0.0.3", 1)
            body = encode_batch_body(
                [(m.flag, m.body, m.properties.replace("DELAY", "NODELAY")) for m in batch]
            )
            result = await source.put_message_batch(
                MessageBatch(
                    msg.topic,
                    msg.queue_id,
                    body,
                    born_timestamp=msg.born_timestamp,
                    born_host=host,
                    store_host=host,
                )
            )
        else:
            result = await source.put_message(msg)
        assert result.append is not None, result.remark
    await source.stop()
    assert len(source.commitlog.segments.segments) > 10  # crossed many files

    built: dict[bool, Path] = {}
    for fast in (True, False):
        root = tmp_path / f"fast-{fast}"
        shutil.copytree(tmp_path / "source" / "commitlog", root / "commitlog")
        monkeypatch.setattr(ReputService, "fast_path", fast)
        store = MessageStore(make_config(root))
        store.load()  # dispatches the whole CommitLog
        assert store.reput.stalled_at < 0
        assert store.reput.behind_bytes == 0
        await store.stop()
        built[fast] = root

    fast_queues = tree(built[True] / "consumequeue")
    assert fast_queues == tree(built[False] / "consumequeue")
    assert len(fast_queues) > 9
    fast_index = index_contents(built[True])
    assert fast_index == index_contents(built[False])
    assert len(fast_index) > 1  # rolled over


def random_batch(rng: random.Random, i: int) -> MessageBatch:
    """A SEND_BATCH_MESSAGE as a producer sends it: own properties per message, shared ones."""
    messages = []
    for j in range(rng.randint(1, 6)):
        props = dict(decode_properties(random_message(rng, i * 100 + j).properties))
        props.pop("DELAY", None)
        own = encode_properties(props)
        if rng.random() < 0.2:
            own += "\x02"  # a body that ends with the separator gets none added
        messages.append((rng.randint(0, 3), rng.randbytes(rng.randint(0, 300)), own))
    shared = rng.choice(["", "CLUSTER\x01c", "TAGS\x01shared\x02CLUSTER\x01c"])
    host = pack_host("10.0.0.3", 1)
    return MessageBatch(
        topic=rng.choice(TOPICS),
        queue_id=rng.randint(0, 2),
        body=encode_batch_body(messages),
        properties=shared,
        born_timestamp=1_700_000_000_000 + i,
        born_host=host,
        store_host=host,
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_appended_batches_dispatch_like_the_scan(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live dispatch from appended batches' layouts builds what a scan of the CommitLog does.

    Dispatch runs at random points, so it meets remembered batches at, ahead of and behind its
    position; a short memory drops some; single sends in between are scanned.
    """
    monkeypatch.setattr(dispatch, "APPENDED_BATCHES_MAX", 8)
    rng = random.Random(seed)
    live = MessageStore(make_config(tmp_path / "live", message_index_enable=False))
    live.load()
    await live.start()
    taken: list[bool] = []
    dispatch_appended = ReputService._dispatch_appended

    def spy(self: ReputService, segment: Segment, batch: dispatch.AppendedBatch) -> bool:
        taken.append(dispatch_appended(self, segment, batch))
        return taken[-1]

    monkeypatch.setattr(ReputService, "_dispatch_appended", spy)
    arrivals: list[tuple[str, int, int, int]] = []
    live.add_arrival_listener(lambda t, q, n, code, ts: arrivals.append((t, q, n, code)))
    try:
        for i in range(300):
            if rng.random() < 0.7:
                result = await live.put_message_batch(random_batch(rng, i))
            else:
                result = await live.put_message(random_message(rng, i))
            assert result.append is not None, result.remark
            if rng.random() < 0.3:
                await live.reput.wait_idle()
        await live.reput.wait_idle()
        assert live.reput.stalled_at < 0
    finally:
        await live.stop()
    assert taken.count(True) > 20  # the layouts were used, not only scanned past

    scanned = tmp_path / "scanned"
    shutil.copytree(tmp_path / "live" / "commitlog", scanned / "commitlog")
    store = MessageStore(make_config(scanned, message_index_enable=False))
    store.load()  # dispatches the whole CommitLog by scanning it
    await store.stop()
    queues = tree(scanned / "consumequeue")
    assert tree(tmp_path / "live" / "consumequeue") == queues
    assert len(queues) > 9

    # Long polling: every unit was announced for its queue and tagsCode, past its offset.
    units: dict[tuple[str, int], bytes] = {}
    for path, data in queues.items():  # files of a queue in offset order
        topic, queue_id, _ = path.split("/")
        units[(topic, int(queue_id))] = units.get((topic, int(queue_id)), b"") + data
    for (topic, queue_id), data in units.items():
        for offset, (_, size, code) in enumerate(struct.iter_unpack(">qiq", data)):
            if size == 0:
                break  # the unwritten end of the last file
            assert any(
                (t, q, c) == (topic, queue_id, code) and n > offset for t, q, n, c in arrivals
            ), (topic, queue_id, offset, code)


@pytest.mark.parametrize(
    ("sys_flag", "fast"),
    [
        (0, True),
        (TRANSACTION_COMMIT_TYPE, True),  # a commit's record: a unit like any message's
        (TRANSACTION_PREPARED_TYPE, False),  # no unit
        (TRANSACTION_ROLLBACK_TYPE, False),  # no unit, not indexed
        (FLAG_BORNHOST_V6, False),
    ],
)
def test_the_fast_path_takes_committed_records_not_prepared_or_rolled_back_ones(
    sys_flag: int, fast: bool
) -> None:
    born = bytes(20) if sys_flag & FLAG_BORNHOST_V6 else bytes(8)
    msg = MessageToStore("T", 1, b"body", "TAGS\x01a\x02", 0, sys_flag, 1, born, bytes(8))
    record = bytes(encode_record(msg, 1024).data)
    for scan in (PURE_TWINS["tidemq.store.fast_scan.scan_fast"], scan_fast):
        assert (scan(record, 0, len(record)) is not None) is fast
