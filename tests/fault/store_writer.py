"""A store writer process for the fault tests: appends messages and acknowledges each PUT_OK.

    python tests/fault/store_writer.py STORE_DIR --seed S --round R [--tasks N] [--count M]
        [--set key=value ...]

Opens a MessageStore in STORE_DIR with `BASE_PROPS` (SYNC_FLUSH, 256 KiB CommitLog files, 20-unit
ConsumeQueue files, a small index), loads it (recovering it if the last run crashed), starts it
and prints `READY <maxPhyOffset>`. Then N tasks put messages concurrently; after each put that
returns PUT_OK the task prints, flushed at once,

    ACK <round> <task> <seq> <topic> <queueId> <queueOffset> <physOffset> <size> <sha256(body)>

Each task has at most one put in flight, so a crash leaves at most one stored but unacknowledged
message per task. With --count the writer stops the store cleanly after M messages per task and
prints `DONE`; without it, it runs until it is killed. A store that cannot be opened prints the
error on stderr and exits with status 2.

Messages are a pure function of (seed, round, task, seq) (`message_spec`), so a checker can tell
whether any record it reads back is exactly a message a writer meant to store.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import signal
import sys
from dataclasses import dataclass

from tidemq.common.errors import StoreError
from tidemq.common.settings import from_properties
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import StoreConfig
from tidemq.store.layout import TRANSACTION_PREPARED_TYPE
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageToStore,
    encode_properties,
)

BASE_PROPS: dict[str, str] = {
    "flushDiskType": "SYNC_FLUSH",
    "mappedFileSizeCommitLog": str(256 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 20),
    "maxMessageSize": str(128 * 1024),
    "messageIndexEnable": "true",
    "maxHashSlotNum": "512",
    "maxIndexNum": "2048",
    # Never let retention delete anything while the tests run, whatever the disk or the hour.
    "diskMaxUsedSpaceRatio": "95",
    "cleanFileForciblyEnable": "false",
    "cleanResourceInterval": "3600000",
}

TOPICS = ("FaultA", "fault_topic_b", "%RETRY%fault-group")
QUEUES = 4
TAGS = ("TagA", "TagB", "tag-c")
BODY_MAGIC = b"tidemq-fault"


def store_config(store_dir: str, overrides: dict[str, str] | None = None) -> StoreConfig:
    props = {**BASE_PROPS, **(overrides or {}), "storePathRootDir": store_dir}
    return from_properties(StoreConfig, props)


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One message as the writer builds it; `topic`/`queue_id` are the ones it asks for."""

    round: int
    task: int
    seq: int
    topic: str
    queue_id: int
    tags: str | None
    keys: str
    uniq_key: str
    delay_level: int
    prepared: bool
    body: bytes

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    def properties(self) -> str:
        props = {PROPERTY_KEYS: self.keys, PROPERTY_UNIQ_KEY: self.uniq_key}
        if self.tags is not None:
            props[PROPERTY_TAGS] = self.tags
        if self.delay_level:
            props[PROPERTY_DELAY] = str(self.delay_level)
        return encode_properties(props)

    def to_store(self) -> MessageToStore:
        return MessageToStore(
            topic=self.topic,
            queue_id=self.queue_id,
            body=self.body,
            properties=self.properties(),
            sys_flag=TRANSACTION_PREPARED_TYPE if self.prepared else 0,
            born_timestamp=1_700_000_000_000 + self.seq,
        )


def body_size(rng: random.Random) -> int:
    """Mostly small bodies, some large ones, a few that fill half a CommitLog file."""
    pick = rng.random()
    if pick < 0.70:
        return rng.randint(0, 300)
    if pick < 0.92:
        return rng.randint(300, 8000)
    if pick < 0.99:
        return rng.randint(8000, 40_000)
    return rng.randint(60_000, 120_000)


def message_spec(seed: int, round_no: int, task: int, seq: int) -> MessageSpec:
    rng = random.Random(f"tidemq-fault/{seed}/{round_no}/{task}/{seq}")
    header = b"%s r=%d t=%d s=%d;" % (BODY_MAGIC, round_no, task, seq)
    body = header + rng.randbytes(body_size(rng))
    kind = rng.random()
    return MessageSpec(
        round=round_no,
        task=task,
        seq=seq,
        topic=rng.choice(TOPICS),
        queue_id=rng.randrange(QUEUES),
        tags=rng.choice((None, *TAGS)),
        keys=f"k{round_no}-{task}-{seq} grp{seq % 7}",
        uniq_key=f"U{seed:x}R{round_no}T{task}S{seq}",
        delay_level=rng.randint(1, 3) if 0.95 <= kind < 0.98 else 0,
        prepared=kind >= 0.98,
        body=body,
    )


def parse_identity(body: bytes) -> tuple[int, int, int] | None:
    """(round, task, seq) from a body's header, or None if it is not a writer's body."""
    if not body.startswith(BODY_MAGIC + b" "):
        return None
    head, sep, _rest = body.partition(b";")
    if not sep:
        return None
    try:
        fields = dict(part.split(b"=", 1) for part in head.split(b" ")[1:])
        return int(fields[b"r"]), int(fields[b"t"]), int(fields[b"s"])
    except (KeyError, ValueError):
        return None


async def _task(
    store: MessageStore, seed: int, round_no: int, task: int, count: int | None
) -> None:
    seq = 0
    while count is None or seq < count:
        spec = message_spec(seed, round_no, task, seq)
        msg = spec.to_store()
        result = await store.put_message(msg)
        if result.status is not PutStatus.PUT_OK or result.append is None:
            print(f"FAIL {round_no} {task} {seq} {result.status.name} {result.remark}", flush=True)
            raise SystemExit(3)
        append = result.append
        print(
            f"ACK {round_no} {task} {seq} {msg.topic} {msg.queue_id} {append.queue_offset} "
            f"{append.wrote_offset} {append.wrote_bytes} {spec.sha}",
            flush=True,
        )
        seq += 1


async def run(args: argparse.Namespace) -> int:
    overrides = dict(item.split("=", 1) for item in args.set)
    store = MessageStore(store_config(args.store, overrides))
    try:
        store.load()
    except StoreError as exc:
        print(f"store_writer: cannot open the store: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    await store.start()
    print(f"READY {store.max_phy_offset}", flush=True)
    try:
        async with asyncio.TaskGroup() as group:
            for task in range(args.tasks):
                group.create_task(_task(store, args.seed, args.round, task, args.count))
    finally:
        await store.stop()
    print("DONE", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("store", help="store root directory")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--round", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--count", type=int, default=None, help="messages per task, then stop")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--kill-at-ftruncate",
        default="",
        metavar="N[:PATH_PART]",
        help="SIGKILL this process inside its Nth os.ftruncate of a file in a folder named "
        "PATH_PART (the store sizes every file it creates with one)",
    )
    args = parser.parse_args(argv)
    if args.kill_at_ftruncate:
        count, _sep, part = args.kill_at_ftruncate.partition(":")
        _kill_inside_ftruncate(int(count), part)
        if part == "index":
            # Index files are created by the index worker in a started store; the hook lives in
            # this process, so build the index here (the worker's own kills: test_index_worker).
            args.set.append("messageIndexWorkerEnable=false")
    return asyncio.run(run(args))


def _kill_inside_ftruncate(n: int, path_part: str) -> None:
    real = os.ftruncate
    calls = 0

    def ftruncate(fd: int, length: int) -> None:
        nonlocal calls
        if f"/{path_part}/" in os.readlink(f"/proc/self/fd/{fd}"):
            calls += 1
            if calls == n:
                os.kill(os.getpid(), signal.SIGKILL)
        real(fd, length)

    os.ftruncate = ftruncate


if __name__ == "__main__":
    sys.exit(main())
