"""Support for the store fault tests: writer processes, their acknowledgements, and the checker.

`check_store` opens a store directory the way a restarting broker does (`load()`, which runs
abnormal recovery when the abort file is there) and judges it against what the writers did,
which `History` keeps as one history of tests/support/history.py (each put a send, acknowledged
at its queue position or left with no answer when its writer died; each check a reader's poll
and a final read). The history checker judges what it judges everywhere:

- lost: every acknowledged message is where its acknowledgement put it (queue and queue offset,
  the body unchanged);
- position: no queue position acknowledged for two messages (an offset given again);
- duplicate: no message stored more often than it was put, none stored that no put explains
  (never put, or put, acknowledged and then destroyed by the test: `History.drop`);
- order: what an earlier check read (acknowledged or not: the put in flight at a crash) is still
  where it was.

What only the files can tell is checked here:

- the CommitLog, walked record by record from its minimum to its maximum offset, holds only
  whole, CRC-valid records, each exactly a message some writer built (`message_spec`), each at
  the physical offset its header names;
- per queue, queue offsets in CommitLog order are 0, 1, 2, ... with no gap or repeat, and the
  ConsumeQueue's max offset equals that count; `get_message` over the whole queue returns the same
  records (offsets, bodies, tagsCodes);
- every acknowledged message is found by `look_message_by_offset` at the physical offset it was
  acknowledged with, and by `query_message` by its key;
- nothing lies past the end: the rest of the last CommitLog file is zeros.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.fault.store_writer import MessageSpec, message_spec, parse_identity, store_config
from tests.support.conditions import eventually_sync
from tests.support.history import Event, Position, Recorder, Report, check
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.javahash import java_string_hash
from tidemq.store.layout import BLANK_MAGIC, TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE
from tidemq.store.message_store import MessageStore
from tidemq.store.record import StoredMessage, decode_record, host_length, read_total_size_and_magic
from tidemq.store.segment import name_to_offset

WRITER = Path(__file__).with_name("store_writer.py")
REPO = Path(__file__).resolve().parents[2]

Ident = tuple[int, int, int]  # (round, task, seq)
BROKER_NAME: Final = "store"  # the history's broker name for the store under test


# --- writer processes ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ack:
    round: int
    task: int
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    phy: int
    size: int
    sha: str

    @property
    def ident(self) -> Ident:
        return (self.round, self.task, self.seq)


@dataclass
class WriterRun:
    """One writer process; its stdout and stderr go to files so it never blocks on a pipe."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def lines(self) -> list[str]:
        """Complete lines written so far (a line cut by a kill has no newline and is ignored)."""
        text = self.out.read_text()
        complete, _sep, _partial = text.rpartition("\n")
        return complete.splitlines() if complete else []

    def acks(self) -> list[Ack]:
        acks = []
        for line in self.lines():
            if line.startswith("ACK "):
                r, t, s, topic, qid, qoff, phy, size, sha = line.split(" ")[1:]
                acks.append(
                    Ack(
                        int(r), int(t), int(s), topic, int(qid), int(qoff), int(phy), int(size), sha
                    )
                )
        return acks

    def wait_acks(self, count: int, timeout: float = 30.0) -> None:
        """Until the writer acknowledged `count` messages; fails at once if it exits first."""

        def enough() -> bool:
            if len(self.acks()) >= count:
                return True
            assert self.proc.poll() is None, f"writer exited early: {self.stderr()}"
            return False

        eventually_sync(enough, f"{count} acknowledgements", timeout, interval=0.01)

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_ready(self, timeout: float = 20.0) -> int:
        """Until the writer says READY; its pid. Fails at once if it exits first."""

        def ready() -> list[str]:
            lines = [line for line in self.lines() if line.startswith("READY ")]
            if not lines and self.proc.poll() is not None:
                raise AssertionError(
                    f"writer exited with {self.proc.returncode} before READY: {self.stderr()}"
                )
            return lines

        eventually_sync(ready, f"the writer to be ready ({self.err})", timeout, interval=0.005)
        return int(ready()[0].split()[1])

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=30)


class Writers:
    """Starts writer processes and makes sure none outlives the test (see the `writers` fixture)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.runs: list[WriterRun] = []

    def start(
        self,
        store: Path,
        *,
        seed: int,
        round_no: int,
        tasks: int = 3,
        count: int | None = None,
        overrides: dict[str, str] | None = None,
        kill_at_ftruncate: str = "",
    ) -> WriterRun:
        n = len(self.runs)
        out = self.workdir / f"writer-{n}.out"
        err = self.workdir / f"writer-{n}.err"
        args = [sys.executable, str(WRITER), str(store), "--seed", str(seed)]
        args += ["--round", str(round_no), "--tasks", str(tasks)]
        if count is not None:
            args += ["--count", str(count)]
        if kill_at_ftruncate:
            args += ["--kill-at-ftruncate", kill_at_ftruncate]
        for key, value in (overrides or {}).items():
            args += ["--set", f"{key}={value}"]
        with out.open("wb") as out_f, err.open("wb") as err_f:
            proc = subprocess.Popen(args, stdout=out_f, stderr=err_f, cwd=REPO)
        run = WriterRun(proc, out, err)
        self.runs.append(run)
        return run

    def run_to_end(
        self,
        store: Path,
        *,
        seed: int,
        round_no: int,
        tasks: int,
        count: int,
        timeout: float = 60.0,
    ) -> WriterRun:
        """A writer that stores `count` messages per task and stops the store cleanly."""
        run = self.start(store, seed=seed, round_no=round_no, tasks=tasks, count=count)
        try:
            rc = run.proc.wait(timeout=timeout)
        finally:
            run.kill()
        assert rc == 0, f"writer exited with {rc}: {run.stderr()}"
        assert run.lines()[-1] == "DONE", run.lines()[-3:]
        return run

    def kill_all(self) -> None:
        for run in self.runs:
            with contextlib.suppress(Exception):
                run.kill()


# --- what the writers did: one history ------------------------------------------------------


def body_id(ident: Ident) -> str:
    """A message's id in the history: its writer's round, task and sequence number."""
    return "/".join(map(str, ident))


def place(topic: str, queue_id: int, queue_offset: int, phy: int, prepared: bool) -> Position:
    """A record's position in the history: its queue and queue offset, or, for a prepared
    (transaction half) message, which is in no queue, its physical offset under `topic#half`."""
    if prepared:
        return (f"{topic}#half", BROKER_NAME, queue_id, phy)
    return (topic, BROKER_NAME, queue_id, queue_offset)


@dataclass
class History:
    """What the writers did and what each check read, as one history judged by
    tests/support/history.py: every put a send (acknowledged at its position, or, for the put
    each task had in flight when its writer stopped, invoked with no answer), and every check of
    the recovered store a poll of one reader reading everything from the start (what a check
    read must stay where it was) and a final read (what the store holds now)."""

    seed: int
    recorder: Recorder = field(default_factory=lambda: Recorder(None, "writers"))
    reader: int = field(default=0)  # the checks' reading session
    # Acknowledged, then destroyed on purpose by a test (a flipped byte): its send is taken out
    # of the history, so a copy coming back is a body no send explains.
    dropped: set[str] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)  # every topic acknowledged or read
    read_to: dict[tuple[str, int], int] = field(default_factory=dict)  # the reader's positions
    # where each acknowledged message was written (for the lookups by offset and key; whether
    # it is still there is the history's to judge)
    written: dict[Ident, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reader = self.recorder.session()

    def add_run(self, round_no: int, tasks: int, acks: list[Ack]) -> None:
        last: dict[int, int] = {}
        for ack in acks:
            assert ack.round == round_no, ack
            op = self.recorder.invoke("send", topic=ack.topic, body=body_id(ack.ident), attempts=1)
            prepared = message_spec(self.seed, *ack.ident).prepared
            topic, broker_name, queue, offset = place(
                ack.topic, ack.queue_id, ack.queue_offset, ack.phy, prepared
            )
            self.topics.add(topic)
            self.written[ack.ident] = ack.phy
            self.recorder.complete(
                op, "ok", "send", body=body_id(ack.ident), topic=topic,
                broker_name=broker_name, queue=queue, offset=offset, phy=ack.phy, broker="store",
            )  # fmt: skip
            last[ack.task] = max(last.get(ack.task, -1), ack.seq)
        for task in range(tasks):  # each task's next put may have been in flight
            ident = (round_no, task, last.get(task, -1) + 1)
            self.recorder.invoke("send", topic="?", body=body_id(ident), attempts=1)

    def drop(self, ident: Ident) -> None:
        self.dropped.add(body_id(ident))
        self.written.pop(ident, None)

    def events(self) -> list[Event]:
        return (
            [e for e in self.recorder.events if e.get("body") not in self.dropped]
            if (self.dropped)
            else self.recorder.events
        )

    def record_check(self, records: list[list[Any]]) -> Report:
        """Record what a check read (`[broker name, queue, offset, body, host, ms]` per record,
        the topic first) as a poll and a final read, and judge the whole history."""
        # The reader goes on from where it was in each queue, as a consumer does (what it read
        # before is judged against every later final read); it never sees a prepared message.
        polled = []
        for topic, broker_name, queue, offset, body, _host, _ms in records:
            if not topic.endswith("#half") and offset > self.read_to.get((topic, queue), -1):
                polled.append([topic, broker_name, queue, offset, body])
                self.read_to[(topic, queue)] = offset
        op = self.recorder.invoke("poll", session=self.reader, group="checker")
        self.recorder.complete(op, "ok", "poll", messages=polled)
        by_topic: dict[str, list[list[Any]]] = {}
        for topic, *rest in records:
            by_topic.setdefault(topic, []).append(rest)
        self.topics |= by_topic.keys()
        for topic in sorted(self.topics):
            op = self.recorder.invoke("read", topic=topic, final=True)
            self.recorder.complete(op, "ok", "read", messages=by_topic.get(topic, []))
        return check(self.events())


# --- the checker -----------------------------------------------------------------------------


@dataclass
class Found:
    ident: Ident
    spec: MessageSpec
    msg: StoredMessage
    raw: bytes  # the whole record as the CommitLog holds it


@dataclass
class CheckReport:
    queue_counts: dict[tuple[str, int], int]
    max_phy: int
    records: int
    history: Report


def expected_place(spec: MessageSpec) -> tuple[str, int]:
    """Topic and queue a message is stored under (delayed ones go to SCHEDULE_TOPIC_XXXX)."""
    if spec.delay_level and not spec.prepared:
        return SCHEDULE_TOPIC, spec.delay_level - 1
    return spec.topic, spec.queue_id


def walk_commitlog(store: MessageStore) -> Iterator[tuple[int, StoredMessage, bytes]]:
    """Every record from the CommitLog's min to max offset; raises on anything that is not one."""
    commitlog = store.commitlog
    offset, end = commitlog.min_offset, commitlog.max_offset
    while offset < end:
        got = commitlog.get_data(offset)
        assert got is not None, f"no readable data at physical offset {offset} (end {end})"
        start, view = got
        assert start == offset
        pos = 0
        next_offset = -1
        while offset + pos < end:
            assert pos + 8 <= len(view), f"CommitLog ends inside a header at {offset + pos}"
            _total, magic = read_total_size_and_magic(view, pos)
            if magic == BLANK_MAGIC:
                next_offset = commitlog.next_segment_offset(offset)
                break
            msg = decode_record(view, pos, check_crc=True)
            yield offset + pos, msg, bytes(view[pos : pos + msg.total_size])
            pos += msg.total_size
        del view
        offset = next_offset if next_offset >= 0 else offset + pos


def check_store(store_dir: Path, history: History, context: str = "") -> CheckReport:
    """Load the store at `store_dir` (recovering it), check its files and judge `history` with
    what it holds."""
    where = f"[seed {history.seed}] {context}: "
    store = MessageStore(store_config(str(store_dir)))
    store.load()
    try:
        return _check_loaded(store, history, where)
    finally:
        asyncio.run(store.stop())


def _check_loaded(store: MessageStore, history: History, where: str) -> CheckReport:
    # What the history judges (lost, positions, copies no send explains, what an earlier check
    # read gone or moved) is left to it; here: what only the files can tell.
    seed = history.seed
    counts: dict[tuple[str, int], int] = {}
    by_queue: dict[tuple[str, int, int], Found] = {}
    by_ident: dict[Ident, Found] = {}
    records: list[list[Any]] = []
    for phy, msg, raw in walk_commitlog(store):
        assert msg.physical_offset == phy, f"{where}record at {phy} says {msg.physical_offset}"
        ident = parse_identity(msg.body)
        assert ident is not None, f"{where}record at {phy} is not a writer's message"
        spec = message_spec(seed, *ident)
        assert msg.body == spec.body, f"{where}record {ident} at {phy}: body differs"
        topic, queue_id = expected_place(spec)
        assert (msg.topic, msg.queue_id) == (topic, queue_id), f"{where}{ident} at {phy}"
        assert msg.tags == spec.tags and msg.keys == spec.keys, f"{where}{ident} properties"
        prepared = msg.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED_TYPE
        assert prepared == spec.prepared, f"{where}{ident} sys flag {msg.sys_flag}"
        if prepared:
            assert msg.queue_offset == 0, f"{where}prepared {ident} has a queue offset"
        else:
            queue = (msg.topic, msg.queue_id)
            count = counts.get(queue, 0)
            assert msg.queue_offset == count, (
                f"{where}{ident} at {phy}: queue {queue} offset {msg.queue_offset}, "
                f"expected {count} (a gap or a reused offset)"
            )
            counts[queue] = count + 1
        found = Found(ident, spec, msg, raw)
        by_ident.setdefault(ident, found)  # a second copy: the history's duplicate rule
        if not prepared:
            by_queue[(msg.topic, msg.queue_id, msg.queue_offset)] = found
        at = place(msg.topic, msg.queue_id, msg.queue_offset, phy, prepared)
        records.append([*at, body_id(ident), "store", msg.store_timestamp])

    judged = history.record_check(records)
    assert judged.ok, f"{where}the history check failed:\n{judged.summary()}"
    end = store.max_phy_offset
    _check_nothing_past(store, end, where)
    _check_queues(store, counts, by_queue, where)
    _check_lookups(store, history, by_ident, where)
    return CheckReport(counts, end, len(records), judged)


def _check_nothing_past(store: MessageStore, end: int, where: str) -> None:
    assert store.look_message_by_offset(end) is None, f"{where}a record is readable at the end"
    segments = store.commitlog.segments.segments
    if not segments:
        return
    last = segments[-1]
    assert last.start_offset <= end <= last.end_offset, f"{where}end {end} outside {last}"
    names = sorted(p.name for p in store.config.commit_log_dir.iterdir() if p.suffix != ".torn")
    assert names == [s.path.name for s in segments], f"{where}stray CommitLog files {names}"
    with last.path.open("rb") as f:
        f.seek(end - last.start_offset)
        rest = f.read()
    assert rest.count(0) == len(rest), (
        f"{where}non-zero bytes past the CommitLog end {end} in {last.path.name}"
    )


def _check_queues(
    store: MessageStore,
    counts: dict[tuple[str, int], int],
    by_queue: dict[tuple[str, int, int], Found],
    where: str,
) -> None:
    for topic, queue_id in store.queues():
        if (topic, queue_id) not in counts:
            got = store.max_offset_in_queue(topic, queue_id)
            assert got == 0, f"{where}queue {topic}-{queue_id} has {got} units, no records"
    for (topic, queue_id), count in counts.items():
        name = f"{topic}-{queue_id}"
        assert store.max_offset_in_queue(topic, queue_id) == count, (
            f"{where}ConsumeQueue {name}: max offset {store.max_offset_in_queue(topic, queue_id)}"
            f", the CommitLog has {count} records"
        )
        assert store.min_offset_in_queue(topic, queue_id) == 0, f"{where}{name} min offset"
        consume_queue = store.find_consume_queue(topic, queue_id)
        assert consume_queue is not None
        offset = 0
        while offset < count:
            result = store.get_message("fault-checker", topic, queue_id, offset, 32)
            assert result.status is GetMessageStatus.FOUND, (
                f"{where}{name} offset {offset}: {result.status.name}"
            )
            assert result.queue_offsets[0] == offset, f"{where}{name} skipped from {offset}"
            for queue_offset, view in zip(result.queue_offsets, result.messages, strict=True):
                # The same bytes as the CommitLog walk found for this queue offset (the record
                # holds its queue and physical offsets, so they agree too).
                found = by_queue[(topic, queue_id, queue_offset)]
                assert view == found.raw, (
                    f"{where}{name} offset {queue_offset}: get_message returns another record"
                )
                unit = consume_queue.unit(queue_offset)
                assert unit is not None and unit.size == len(found.raw)
                if topic != SCHEDULE_TOPIC:
                    tags = found.spec.tags
                    assert unit.tags_code == (java_string_hash(tags) if tags else 0), (
                        f"{where}{name} offset {queue_offset}: tagsCode {unit.tags_code}"
                    )
            result.messages.clear()
            assert result.next_begin_offset > offset
            offset = result.next_begin_offset
        assert offset == count, f"{where}{name} read to {offset}, expected {count}"
        last = store.get_message("fault-checker", topic, queue_id, count, 32)
        assert last.status is GetMessageStatus.OFFSET_OVERFLOW_ONE, f"{where}{name} past the end"


def _check_lookups(
    store: MessageStore, history: History, by_ident: dict[Ident, Found], where: str
) -> None:
    """Acknowledged messages (the history's lost rule found each at its position) by their
    physical offset and, through the index, by their key."""
    for ident, phy in history.written.items():
        body = body_id(ident)
        found = by_ident[ident]
        msg = store.look_message_by_offset(phy)
        assert msg is not None, f"{where}{body}: look_message_by_offset({phy}) is None"
        assert msg.body == found.spec.body, f"{where}{body} body at {phy}"
        assert msg.physical_offset == phy, f"{where}{body}: at {msg.physical_offset}"
        key = found.spec.keys.split(" ")[0]
        topic = found.msg.topic
        got = store.query_message(topic, key, 32, 0, 2**62)
        phys = [m.physical_offset for m in got.messages]
        assert phys == [phy], f"{where}{body}: query by key {key} found {phys}"


# --- damaging files --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordAt:
    path: Path  # the CommitLog file holding it
    position: int  # within the file
    phy: int
    raw: bytes
    msg: StoredMessage

    @property
    def body_position(self) -> int:
        """Where the body starts within the file (after the fixed fields and the hosts)."""
        sys_flag = self.msg.sys_flag
        at = 48 + host_length(sys_flag, store=False) + 8 + host_length(sys_flag, store=True) + 12
        assert int.from_bytes(self.raw[at : at + 4], "big") == len(self.msg.body)
        return self.position + at + 4


def last_record(store_dir: Path, segment_size: int) -> RecordAt:
    """The last whole record of the CommitLog, read from the files (no store opened)."""
    # Segments only: a writer killed while creating a segment leaves its `.tmp` (never data).
    files = sorted(
        p for p in (store_dir / "commitlog").iterdir() if name_to_offset(p.name) is not None
    )
    last: RecordAt | None = None
    for path in files:
        data = path.read_bytes()
        assert len(data) == segment_size
        start = int(path.name)
        pos = 0
        while pos + 8 <= len(data):
            _total, magic = read_total_size_and_magic(data, pos)
            if magic == BLANK_MAGIC:
                break
            try:
                msg = decode_record(data, pos, check_crc=True)
            except ValueError:
                break
            last = RecordAt(path, pos, start + pos, data[pos : pos + msg.total_size], msg)
            pos += msg.total_size
    assert last is not None, f"no record in {store_dir}"
    return last


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` except the lock file: to prove a load changed nothing."""
    digest = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            if name == "lock" and path.parent == root:
                continue
            digest[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest
