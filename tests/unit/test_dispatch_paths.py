"""Dispatch's fast path (batched units and index entries) against its general path.

The same CommitLog is dispatched twice, once with `ReputService.fast_path` off, and the
ConsumeQueue and index files must come out byte for byte the same. The messages mix everything
that leaves the fast path (IPv6 hosts, PREPARED/ROLLBACK/COMMIT transaction bits, delayed
messages) with what it must handle itself: non-ASCII topics, tags and keys, several keys, a
property name that appears inside another name, segment roll-overs.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from store.config import StoreConfig
from store.dispatch import ReputService
from store.message_store import MessageStore
from store.record import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageToStore,
    encode_properties,
    pack_host,
)

TOPICS = ["Orders", "主题", "T"]
TAGS = [None, "TagA", "TagB", "标签", ""]
KEYS = [None, "k1", "k1 k2", "键 k3", "  spaced  key ", ""]


def config(root: Path) -> StoreConfig:
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=8192,
        max_message_size=2048,
        mapped_file_size_consume_queue=20 * 16,
        max_hash_slot_num=32,
        max_index_num=64,
    )
    cfg.validate()
    return cfg


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
    source = MessageStore(config(tmp_path / "source"))
    source.load()  # loaded, not started: the appends are not dispatched here
    for i in range(400):
        msg = random_message(rng, i)
        if rng.random() < 0.3:
            batch = [msg, *(random_message(rng, i * 1000 + j) for j in range(rng.randint(1, 5)))]
            for m in batch:
                m.topic, m.queue_id, m.sys_flag = msg.topic, msg.queue_id, 0
                m.born_host = m.store_host = pack_host("10.0.0.3", 1)
                m.properties = m.properties.replace("DELAY", "NODELAY")
            result = await source.put_messages(batch)
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
        store = MessageStore(config(root))
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
