"""Power cuts of brokers whose stores live on lossy file systems (issue 32 item 2).

    python -m tests.fault.powercut [--scenario sync-flush|async-flush|ha|ha-async-flush]
        [--rounds N] [--seed S]

Each broker's `storePathRootDir` (its config files included) is on its own lossy FUSE mount
(tests/support/lazyfs.py): what no fsync, fdatasync or msync made durable is dropped by a cut.
A round sends numbered messages (16 in flight, 4 queues; each body is a pure function of its
number, so any byte served wrong is seen), and once a random number of them have been answered,
with sends still in flight, it cuts: every process using the store's mount is SIGKILLed (the
broker and its index worker), the mount is aborted, the unsynced state dropped (`all`, or
`torn` with a seeded random half of the unsynced pages kept), and the next boot starts: a fresh
mount, and the store's abort file, if the cut left it holding this machine's boot id, given
another one (the machine "restarted"; recovery must not trust the page cache). Each restart
picks the store's appendMode at random: pwrite, or copies into the shared map (on FUSE a shared
writable map works: the mount is not direct_io, and msync reaches the daemon as an fsync), so
the proof covers both. Every send, and every read after a restart, goes into one history
(tests/support/history.py, `history.jsonl` in the run's folder): a send acknowledged with its
queue, queue offset and physical offset, or refused, or unknown. A message's id in the history
is its number when its body is exactly the one sent under that number, otherwise a `bad:` id no
send has (`body_number`). After the restart the round reads back everything the broker serves
and `history.check` judges the whole history:

- what a consumer reads: each queue's offsets without a hole (`order`); nothing served that was
  never sent or is not exactly its body (nothing half-written, nothing from elsewhere:
  `duplicate`, never sent), no body at more positions than its send explains (`duplicate`); no
  two bodies acknowledged at one position (`position`); every acknowledged message at its queue
  and offset (`lost`);

and, what a history cannot express, the files:

- the store: an offline walk (`cq_check`) finds every ConsumeQueue unit pointing at its record
  of the CommitLog and every record in its queue; each acknowledged message of the round is
  found by its key through the index (QUERY_MESSAGE); the checkpoint's store times are not
  newer than the newest record kept (a checkpoint claiming data the cut took would let a later
  recovery skip its check);
- committed consumer offsets: before each cut the round commits every queue's end for a group
  (and waits until the broker has persisted them); after it no committed offset is past its
  queue's new end.

Scenarios and what each promises (violations are counted per property; `lost` is acknowledged
messages not read back):

- `sync-flush` (ASYNC_MASTER, SYNC_FLUSH): an acknowledgement follows the fsync that covered the
  message, so nothing acknowledged is lost: lost must be 0.
- `async-flush` (ASYNC_MASTER, ASYNC_FLUSH, flushed every 200 ms: `ASYNC_FLUSH`): acknowledged
  before any fsync, so the tail may be lost; what is lost is at most what the cut found unsynced:
  an acknowledged message whose record lay wholly before the first unsynced page of the CommitLog
  must be there (`beyond_unsynced`).
- `ha` (SYNC_MASTER and its SLAVE, both SYNC_FLUSH, each on its own lossy mount): each round cuts
  the master, the slave, or both. An acknowledgement means the master flushed the message and the
  slave received it. Master alone or both: the master keeps every acknowledged message (its own
  fsync). Slave alone: the master is untouched; the slave comes back, reconnects and catches up.
  Before any cut (and after the kill of the brokers to be cut), the slave's CommitLog files hold
  every acknowledged message (tests/support/store_history.py, the soak's check). In every case,
  once the slave has caught up, what it serves is judged as the master's is, and its CommitLog is
  byte-identical to the master's.
  What is not promised: the master replicates a send while its own fsync runs, so a cut of the
  master can take bytes its slave already has (of sends not yet acknowledged). The slave is then
  ahead: it says DIVERGED and, without haSlaveAutoTruncate, stops following (SYNC_MASTER sends
  fail until an operator acts). The slave here has haSlaveAutoTruncate: it sets the extra tail
  aside (`*.diverged`) and resynchronises; the report counts those rounds.
- `ha-async-flush` (SYNC_MASTER and its SLAVE, both ASYNC_FLUSH, each on its own lossy mount; the
  flush service syncs every 200 ms): the rounds cut the master, the slave, and both, in turn.
  SEND_OK means what RocketMQ's sync double write means: the message is in the page cache of
  the master and of its slave (a slave reports what it appended, not what it synced), so the
  loss of power of one machine loses nothing acknowledged, of both at once what neither had
  synced. Exactly:
  - at every cut, the slave's files (its page cache) hold every acknowledged message;
  - slave alone: the master is untouched and serves every acknowledged message; the slave
    comes back with its synced prefix, catches up and is byte-identical to the master;
  - master alone: the rebooted master serves its synced prefix; an acknowledged message it
    lacks lay past its first unsynced CommitLog page (`beyond-unsynced`). Its slave then holds
    more than it: the slave says DIVERGED and, without haSlaveAutoTruncate (the default, kept
    here: the tail holds acknowledged messages), keeps its log and serves every acknowledged
    message (judged with `lost`). The group takes no acknowledged send meanwhile (a
    SYNC_MASTER without a slave in sync answers SLAVE_NOT_AVAILABLE, and stores the message
    where the slave's tail lies, so the operator acts before producers come back). The
    operator's act: both brokers stopped, the slave's whole records past the master's end
    copied into the master's CommitLog and synced (`restore_commitlog`), both started: the
    master dispatches them, the slave (whose restart cuts a half record it may hold) follows,
    and the group serves every acknowledged message (`lost` must be 0);
  - both at once: the rebooted members keep their synced prefixes of the one stream; the longer
    one is the group's (the master restored from the slave as above when the slave's is), and
    an acknowledged message the group no longer serves lay past the first unsynced page of
    both CommitLogs (`beyond-unsynced (both cut)`).
  Every other rule of the checker holds in full on every read (the rebooted master's, the
  diverged slave's, the group's after it is whole, the slave's once caught up); the master's
  store files, index, checkpoint and committed offsets are checked as for async-flush once the
  group is whole, its store files also as the cut left them.

`make powercut` runs POWERCUT_ROUNDS (100) rounds of POWERCUT_SCENARIO (sync-flush) with
POWERCUT_SEED; tests/fault/test_power_cut.py runs three seeded rounds of each in `make test`
(ha-async-flush's three cut the master, the slave and both, in a drawn order).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.fault.cq_check import CommitLogFiles, check_consume_queues, walk_commitlog
from tests.support.conditions import eventually
from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import (
    commitlog_range,
    wait_caught_up,
    wait_state,
    wait_transfer,
)
from tests.support.history import (
    RULES,
    Event,
    Operation,
    Recorder,
    check,
    operations,
    record_read,
    record_send,
)
from tests.support.history import Report as History
from tests.support.lazy_mounts import LazyMount
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.store_history import files_hold_acked
from tests.support.wire import pull_header, send_header
from tidemq.broker.managers.table_store import TABLES_FILE, TableStore
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import ConnectError
from tidemq.client.transport.connection import ConnectionClosedError
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.record import RecordFormatError, decode_record, scan_record
from tidemq.store.recovery import read_boot_id

TOPIC: Final = "PowerCut"
BROKER_NAME: Final = "broker-a"  # the brokers' name (tests/support/processes.py)
QUEUES: Final = 4
GROUP: Final = "PowerCutCG"
IN_FLIGHT: Final = 16
PER_ROUND: Final = 5000  # sends a round may make; the cut comes well before they are done
CUT_AFTER: Final = 600  # the cut comes once 1 to this many sends were answered
# A record of these tests (a body under 1 KiB, a key, a few properties) is under this size.
RECORD_BOUND: Final = 2048
SCENARIOS: Final = ("sync-flush", "async-flush", "ha", "ha-async-flush")
VICTIMS: Final = (["master"], ["slave"], ["master", "slave"])
HA_TIMING: Final = ("haHousekeepingInterval=500", "haSendHeartbeatInterval=200")
# async-flush and ha-async-flush: acknowledged before any fsync; the flush service syncs every
# 200 ms what is written (at least one page: RocketMQ's 4 pages would leave most of a round's log
# unsynced), so a cut finds part of the log synced and the bound says something. With RocketMQ's
# 500 ms, a round on an idle machine (its sends take tens of milliseconds) was cut before any
# flush: everything it sent was lost, as allowed, and recovery met no torn record to judge.
ASYNC_FLUSH: Final = (
    "flushDiskType=ASYNC_FLUSH",
    "flushIntervalCommitLog=200",
    "flushCommitLogLeastPages=1",
)
# ha-async-flush's slave keeps a tail its master lacks (haSlaveAutoTruncate off, the default:
# the tail holds acknowledged messages), checks again twice a second and reconnects soon.
SLAVE_KEEPS: Final = ("haDivergedRetryInterval=500", "haReconnectInterval=500")
# A master's cut can leave its slave ahead of it (module docstring): it must set the tail aside.
SLAVE_TRUNCATES: Final = ("haSlaveAutoTruncate=true", "haDivergedRetryInterval=500")
COMMON: Final = (
    "flushConsumerOffsetInterval=100",
    # a stalled flush must fail the send, not hang the round
    "syncFlushTimeout=5000",
)


def body_of(number: int) -> bytes:
    """Message `number`'s body: a header naming it, then bytes derived from it (100-999 long)."""
    head = f"m{number:09d}|".encode()
    size = 100 + number * 7919 % 900
    filler = hashlib.sha256(head).digest() * (size // 32 + 1)
    return head + filler[: size - len(head)]


def number_of(body: bytes) -> int | None:
    if len(body) < 11 or body[:1] != b"m" or body[10:11] != b"|" or not body[1:10].isdigit():
        return None
    return int(body[1:10])


def body_number(body: bytes) -> int | str:
    """A body's id in the history: its number when it is exactly the body sent under it, else
    an id no send has (its first bytes, size and hash), which the checker reports as never
    sent."""
    number = number_of(body)
    if number is not None and body == body_of(number):
        return number
    return f"bad:{body[:16]!r}:{len(body)}:{hashlib.sha256(body).hexdigest()[:12]}"


def key_of(number: int) -> str:
    return f"pc{number}"


@dataclass
class Report:
    scenario: str
    rounds: int = 0
    cuts: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    lost: int = 0
    in_flight_at_cut: int = 0
    offsets_past_end: int = 0  # committed offsets the cut left past their queue's new end
    slave_diverged: int = 0  # ha: rounds after which the slave set a diverged tail aside
    # ha-async-flush: rounds whose slave held more than its rebooted master, which was restored
    # from it; the acknowledged messages the rebooted master lacked before that
    repairs: int = 0
    lacked_before_repair: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def line(self) -> str:
        cuts = ", ".join(f"{n} {what}" for what, n in sorted(self.cuts.items()))
        violations = ", ".join(f"{n} {what}" for what, n in sorted(self.violations.items()))
        return (
            f"{self.scenario}: {self.rounds} rounds ({cuts}) in {self.seconds:.0f} s: "
            f"{self.acknowledged} acknowledged, {self.lost} lost, "
            f"{self.in_flight_at_cut} sends in flight at the cuts, "
            f"{self.offsets_past_end} committed offsets left past a queue's end (corrected), "
            + (f"slave diverged {self.slave_diverged} times, " if self.scenario == "ha" else "")
            + (
                f"master restored from the slave {self.repairs} times ({self.lacked_before_repair}"
                " acknowledged messages the rebooted master lacked until then, all served by "
                "the slave meanwhile), "
                if self.scenario == "ha-async-flush"
                else ""
            )
            + f"violations: {violations or 'none'}"
        )


# --- nodes: a broker and its lossy mount ----------------------------------------------------


def processes_using(path: Path) -> set[int]:
    """Pids with a file, a map, a cwd or a root under `path` (read from /proc)."""
    prefix = str(path) + "/"
    found: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            links = [os.readlink(proc / "cwd")]
            links += [os.readlink(fd) for fd in (proc / "fd").iterdir()]
            maps = (proc / "maps").read_text()
        except OSError:
            continue  # gone, or not ours to read
        if any(link == str(path) or link.startswith(prefix) for link in links) or prefix in maps:
            found.add(int(proc.name))
    return found


def kill_and_wait(pids: set[int], timeout: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.01)


def power_cut(mount: LazyMount, mode: str, seed: int, store: str = "store") -> dict[str, object]:
    """Kill every process using `mount`, cut it, and make the next boot another boot: a store
    abort file the cut left holding this machine's boot id is given another one."""
    kill_and_wait(processes_using(mount.path))
    summary = mount.cut(mode, seed)
    abort = mount.backing / store / "abort"
    if abort.exists() and abort.read_text(errors="replace").strip() == read_boot_id():
        abort.write_text(f"before-power-cut-{mount.boots}")
    return summary


@dataclass
class Node:
    """One broker whose store is on its own lossy mount; `boot()` (re)starts both."""

    processes: ProcessGroup
    namesrv: Daemon
    mount: LazyMount
    overrides: tuple[str, ...]
    port: int = field(default_factory=free_port)
    ha_port: int = field(default_factory=free_port)
    broker: Daemon | None = None

    @property
    def store(self) -> Path:
        return self.mount.path / "store"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def boot(self, append_mode: str = "pwrite") -> Daemon:
        if not self.mount.mounted:
            self.mount.start()
        self.broker = self.processes.brokerd(
            self.namesrv.address,
            self.store,
            f"haListenPort={self.ha_port}",
            f"appendMode={append_mode}",
            *self.overrides,
            port=self.port,
            name=f"{self.mount.name}-{self.mount.boots}",
        )
        return self.broker

    def power_cut(self, mode: str, seed: int) -> dict[str, object]:
        """Kill every process of the store, drop what was not synced, and 'reboot' the disk."""
        if self.broker is not None:
            self.broker.kill()
        return power_cut(self.mount, mode, seed)


# --- sends and reads ------------------------------------------------------------------------


class Sender:
    """Sends numbered messages, IN_FLIGHT at a time, each recorded in the history."""

    def __init__(self, api: BrokerAPI, address: str, recorder: Recorder) -> None:
        self.api = api
        self.address = address
        self.recorder = recorder
        self.answered = 0
        self.in_flight = 0

    async def run(self, first: int, count: int) -> None:
        numbers = iter(range(first, first + count))

        async def worker() -> None:
            for number in numbers:
                await self.one(number)

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))

    async def one(self, number: int) -> None:
        header = send_header(TOPIC, number % QUEUES, KEYS=key_of(number))
        self.in_flight += 1
        try:
            await record_send(
                self.recorder, self.api, self.address, header, body_of(number),
                broker_name=BROKER_NAME, timeout=10, body_id=body_number,
            )  # fmt: skip
        except Exception:  # the broker died or refused: recorded as unknown
            return
        finally:
            self.in_flight -= 1
            self.answered += 1


async def wait_topic(api: BrokerAPI, address: str) -> None:
    async def topic_known() -> bool:
        try:
            return TOPIC in (await api.all_topic_config(address)).topic_config_table
        except (ConnectError, ConnectionClosedError):
            return False  # the first request may go out on the connection to the killed broker

    await eventually(topic_known, f"topic {TOPIC} on {address}", 20)


# --- the checks -----------------------------------------------------------------------------


@dataclass
class Check:
    """What one round's check found; `violations` names each broken property."""

    lost: list[Operation] = field(default_factory=list)
    violations: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def violate(self, what: str, note: str) -> None:
        self.violations[what] += 1
        if len(self.notes) < 20:
            self.notes.append(f"{what}: {note}")


def check_store_files(store: Path, check: Check) -> None:
    queues = check_consume_queues(store)
    for problem in queues.problems[:5]:
        check.violate("consume-queue", problem)


def torn_records(store: Path) -> list[tuple[int, str]]:
    """(physical offset, what is wrong) of each record of TOPIC in `store`'s CommitLog whose
    body is exactly one sent but whose properties are not the ones sent with it (its KEYS).

    The history names a message by its body alone; a cut that tears a record after its body
    (the CRC covers the body only) leaves it served with the body intact and its properties,
    KEYS among them, zeros: not found by its key, and not what was sent."""
    found: list[tuple[int, str]] = []
    with ExitStack() as stack:
        files = CommitLogFiles(store / "commitlog", stack)
        for topic, _queue, _offset, phy in walk_commitlog(files):
            if topic != TOPIC:
                continue
            held = files.at(phy)
            assert held is not None
            base, mapped = held
            try:
                record = decode_record(mapped, phy - base)
            except RecordFormatError as e:
                found.append((phy, f"undecodable: {e}"))
                continue
            number = number_of(bytes(record.body))
            if number is None or bytes(record.body) != body_of(number):
                continue  # not a body sent: the history's checker judges it
            if record.keys != key_of(number):
                found.append((phy, f"body {number} with KEYS {record.keys!r}"))
    return found


def differing_ranges(master: Path, slave: Path, end: int) -> list[tuple[int, int]]:
    """The ranges [start, end) where the two stores' CommitLogs differ below `end`."""
    ours, theirs = commitlog_range(master, 0, end), commitlog_range(slave, 0, end)
    ranges: list[tuple[int, int]] = []
    step = 4096
    for at in range(0, end, step):
        if ours[at : at + step] == theirs[at : at + step]:
            continue
        for i in range(at, min(at + step, end)):
            if ours[i] == theirs[i]:
                continue
            if ranges and ranges[-1][1] == i:
                ranges[-1] = (ranges[-1][0], i + 1)
            else:
                ranges.append((i, i + 1))
    return ranges


async def check_index(
    api: BrokerAPI, address: str, numbers: list[int], rng: random.Random, check: Check
) -> None:
    """Acknowledged messages (a sample of at most 100) are found by key through the index.

    A query waits at most 1 s for the index worker, which runs below the broker's priority and
    rebuilds after a restart: a key not found yet is asked again until INDEX_WAIT has passed."""
    missing = rng.sample(numbers, min(len(numbers), 100))
    deadline = time.monotonic() + INDEX_WAIT
    while missing:
        found = []
        for number in missing:
            messages = await api.query_message(address, TOPIC, key_of(number), 8, 0, 2**62)
            if any(bytes(m.body) == body_of(number) for m in messages):
                found.append(number)
        missing = [n for n in missing if n not in found]
        if time.monotonic() >= deadline:
            break
        if missing:
            await asyncio.sleep(0.2)
    for number in missing:
        check.violate("index", f"message {number} not found by its key")


INDEX_WAIT: Final = 60.0


def check_checkpoint(store: Path, newest_store_time: int | None, check: Check) -> None:
    """The checkpoint claims no store time newer than the newest record the CommitLog kept."""
    path = store / "checkpoint"
    if not path.exists() or newest_store_time is None:
        return
    point = StoreCheckpoint(path)
    # what recovery trusts (RocketMQ's getMinTimestamp, before its 3 s of slack)
    claimed = min(point.physic_msg_timestamp, point.logics_msg_timestamp)
    if claimed > newest_store_time:
        check.violate("checkpoint", f"claims {claimed}, the CommitLog ends at {newest_store_time}")


async def newest_store_time(api: BrokerAPI, address: str) -> int | None:
    """The store time of the record with the highest physical offset still served."""
    best: int | None = None
    for queue in range(QUEUES):
        end = await api.get_max_offset(address, TOPIC, queue)
        if end == 0:
            continue
        pulled = await api.pull(address, pull_header(TOPIC, queue, end - 1))
        for message in pulled.messages:
            best = max(best or 0, message.store_timestamp)
    return best


async def commit_offsets(api: BrokerAPI, address: str) -> dict[int, int]:
    """Commit every queue's end for GROUP; returns them."""
    ends = {q: await api.get_max_offset(address, TOPIC, q) for q in range(QUEUES)}
    for queue, end in ends.items():
        await api.update_consumer_offset(address, GROUP, TOPIC, queue, end)
    return ends


async def wait_offsets_persisted(store: Path, ends: dict[int, int]) -> None:
    """Until the broker's table in config/tables.db (broker/managers/table_store.py) holds at
    least `ends` for GROUP."""
    path = store / "config" / TABLES_FILE

    def persisted() -> bool:
        if not path.exists():
            return False
        tables = TableStore(path, readonly=True)
        try:
            rows, _version = tables.read("consumerOffset")
            table = json.loads(rows[f"{TOPIC}@{GROUP}"])
        except (sqlite3.Error, ValueError, KeyError):
            return False
        finally:
            tables.close()
        return all(int(table.get(str(q), -1)) >= end for q, end in ends.items())

    await eventually(persisted, "consumer offsets persisted", 10)


async def check_offsets(api: BrokerAPI, address: str, check: Check) -> dict[int, int]:
    """No committed offset is past its queue's end; returns the queues' ends."""
    ends = {}
    for queue in range(QUEUES):
        end = ends[queue] = await api.get_max_offset(address, TOPIC, queue)
        committed = await api.query_consumer_offset(address, GROUP, TOPIC, queue)
        if committed > end:
            check.violate("consumer-offset", f"queue {queue}: committed {committed}, ends at {end}")
    return ends


def restore_commitlog(source: Path, target: Path, start: int) -> int:
    """The operator's act after a master's power cut left its slave ahead (ha-async-flush):
    copy the whole records of `source`'s CommitLog from `start` (where the target's ends) into
    the same places of `target`'s, and fsync them. Both brokers are stopped. Returns where the
    copy ends: before the first byte that is not a whole record (a slave may hold half a
    record, which its own restart cuts). Both logs are prefixes of one stream, so the records
    from `start` on follow the target's last."""
    with ExitStack() as stack:
        files = CommitLogFiles(source / "commitlog", stack)
        end = start
        while (held := files.at(end)) is not None:
            base, mapped = held
            info = scan_record(mapped, end - base, check_crc=True)
            if info.size == 0:  # the end-of-file blank: the next file goes on
                end = base + len(mapped)
            elif info.size < 0:
                break
            else:
                end += info.size
        folder = target / "commitlog"
        for base, mapped in files.maps:
            low, high = max(start, base), min(end, base + len(mapped))
            if low >= high:
                continue
            path = folder / f"{base:020d}"
            with path.open("r+b" if path.exists() else "w+b") as out:
                if os.fstat(out.fileno()).st_size < len(mapped):
                    out.truncate(len(mapped))  # a segment the cut took: its full size again
                out.seek(low - base)
                out.write(mapped[low - base : high - base])
                out.flush()
                os.fsync(out.fileno())
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return end


def diverged_tails(store: Path) -> int:
    return len(list((store / "commitlog").glob("*.diverged")))


def durable_end(summary: dict[str, object]) -> int | None:
    """Where the CommitLog's first unsynced page was at the cut (None: none was unsynced)."""
    unsynced = summary.get("first_unsynced", {})
    assert isinstance(unsynced, dict)
    ends = [
        int(Path(name).name) + int(at)
        for name, at in unsynced.items()
        if Path(name).parent.name == "commitlog" and Path(name).name.isdigit()
    ]
    return min(ends) if ends else None


# --- rounds ---------------------------------------------------------------------------------


class PowerCuts:
    def __init__(self, scenario: str, folder: Path, seed: int, log: Callable[[str], None]) -> None:
        self.scenario = scenario
        self.folder = folder
        self.rng = random.Random(seed)
        self.log = log
        self.report = Report(scenario)
        self.processes = ProcessGroup(folder / "logs")
        self.api = BrokerAPI()
        self.recorder = Recorder(folder / "history.jsonl", "powercut")
        # sends acknowledged, then lost by a cut (and counted): no longer expected
        self.given_up: set[tuple[str, int]] = set()
        self.next_number = 0
        self.mounts: list[LazyMount] = []
        self.master: Node
        self.slave: Node | None = None
        # what the store files showed wrong already (counted once: it stays in the files)
        self.known: set[tuple[str, int, int]] = set()
        # ha-async-flush cuts the master, the slave, both, in turn from a drawn start
        self.first_victims = self.rng.randrange(3) if scenario == "ha-async-flush" else 0

    def node(self, name: str, *overrides: str) -> Node:
        mount = LazyMount(self.folder, name)
        self.mounts.append(mount)
        namesrv = self.processes.daemons[0]
        return Node(self.processes, namesrv, mount, (*COMMON, *overrides))

    async def start(self) -> None:
        self.processes.namesrvd(name="namesrvd")
        if self.scenario == "ha":
            sync = "flushDiskType=SYNC_FLUSH"
            self.master = self.node("master", "brokerRole=SYNC_MASTER", sync, *HA_TIMING)
            slave = self.node(
                "slave", "brokerRole=SLAVE", "brokerId=1", sync, *HA_TIMING, *SLAVE_TRUNCATES
            )
            self.master.boot()
            slave.boot()
            self.slave = slave
            await wait_transfer(self.api, self.master_daemon, timeout=30)
        elif self.scenario == "ha-async-flush":
            self.master = self.node("master", "brokerRole=SYNC_MASTER", *ASYNC_FLUSH, *HA_TIMING)
            slave = self.node(
                "slave", "brokerRole=SLAVE", "brokerId=1", *ASYNC_FLUSH, *HA_TIMING, *SLAVE_KEEPS
            )
            self.master.boot()
            slave.boot()
            self.slave = slave
            await wait_transfer(self.api, self.master_daemon, timeout=30)
        else:
            flush = ("flushDiskType=SYNC_FLUSH",) if self.scenario == "sync-flush" else ASYNC_FLUSH
            self.master = self.node("master", "brokerRole=ASYNC_MASTER", *flush)
            self.master.boot()

    @property
    def master_daemon(self) -> Daemon:
        assert self.master.broker is not None
        return self.master.broker

    async def stop(self) -> None:
        await self.api.close()
        self.processes.stop_all()
        for mount in self.mounts:
            mount.stop()
        self.recorder.close()

    def expected(self, events: list[Event]) -> list[Event]:
        """The history without the sends given up (their invokes and completions)."""
        return [e for e in events if (e.get("process"), e.get("op")) not in self.given_up]

    def judge(
        self, what: str, check_: Check, judged: History | None = None, *, lost: bool = True
    ) -> History:
        """The whole history judged (or `judged`, its check) into `check_`: every rule's
        violations, `lost` only when the read judged is promised to lose nothing acknowledged
        (otherwise the caller bounds it); returns the checker's report."""
        if judged is None:
            judged = check(self.expected(self.recorder.events))
        for rule in RULES:
            if rule == "lost" and not lost:
                continue
            for text in judged.violations[rule]:
                check_.violate(f"{rule} ({what})", text)
        return judged

    def check_files(self, node: Node, what: str, check_: Check) -> None:
        """`node`'s store: its ConsumeQueues against its CommitLog, and no record of a sent
        body with other properties (`torn_records`; each counted in the round that found it)."""
        check_store_files(node.store, check_)
        for phy, problem in torn_records(node.store):
            if (what, phy, 0) not in self.known:
                self.known.add((what, phy, 0))
                check_.violate(f"torn-record ({what})", f"at {phy}: {problem}")

    async def round(self, number: int) -> Check:
        rng = self.rng
        victims = ["master"]
        if self.scenario == "ha":
            victims = list(rng.choice(VICTIMS))
        elif self.scenario == "ha-async-flush":
            # in turn, so that any three rounds in a row cut each of them
            victims = list(VICTIMS[(number + self.first_victims) % len(VICTIMS)])
        mode = rng.choice(["all", "torn"])
        cut_seed = rng.randrange(2**31)
        wait_for = rng.randint(1, CUT_AFTER)

        check_ = Check()
        first_op = len(self.recorder.events)
        cut = await self.cut_under_load(victims, mode, cut_seed, wait_for, check_)
        round_acked = [o for o in _sends(self.recorder.events, first_op) if o.outcome == "ok"]
        if self.scenario == "ha-async-flush":
            await self.settle_async_group(cut, round_acked, check_)
        else:
            await self.settle(cut, round_acked, check_)

        self.report.rounds += 1
        self.report.cuts[f"{'+'.join(victims)} {mode}"] += 1
        self.report.acknowledged += len(round_acked)
        self.report.lost += len(check_.lost)
        self.report.in_flight_at_cut += cut.in_flight
        self.report.violations.update(check_.violations)
        # Acknowledged messages lost (and counted) are no longer expected.
        self.given_up |= {(o.process, o.op) for o in check_.lost}
        self.log(
            f"round {number + 1}: cut {'+'.join(victims)} ({mode}), {cut.in_flight} in flight, "
            f"{len(round_acked)} acknowledged, {cut.served} served, {len(check_.lost)} lost"
            + "".join(f"\n  {note}" for note in check_.notes)
        )
        return check_

    async def cut_under_load(
        self, victims: list[str], mode: str, cut_seed: int, wait_for: int, check_: Check
    ) -> Cut:
        """Send until `wait_for` sends were answered (with sends still in flight), kill the
        brokers of the victims' stores at once, check the slave's files, cut the stores."""
        rng = self.rng
        sender = Sender(self.api, self.master.address, self.recorder)
        first = self.next_number
        self.next_number += PER_ROUND
        sending = asyncio.create_task(sender.run(first, PER_ROUND))
        try:
            await eventually(lambda: sender.answered >= wait_for or sending.done(), "answers", 60)
            committed: dict[int, int] = {}
            # every round of async-flush: its cut may leave them past the end, to be corrected
            if self.scenario == "async-flush" or rng.random() < 0.5:
                committed = await commit_offsets(self.api, self.master.address)
                await wait_offsets_persisted(self.master.store, committed)
            in_flight = sender.in_flight
            nodes = [self.master if victim == "master" else self.slave for victim in victims]
            for node in nodes:  # the brokers of the stores cut, at once
                assert node is not None and node.broker is not None
                node.broker.kill()
            if self.slave is not None:
                # The slave's files (its page cache, before any cut) hold every acknowledgement.
                on_slave = files_hold_acked(
                    self.recorder, self.slave.store, TOPIC, BROKER_NAME, body_number,
                    self.expected,
                )  # fmt: skip
                self.judge("slave's files at the cut", check_, on_slave)
            summaries = {}
            for victim, node in zip(victims, nodes, strict=True):
                assert node is not None
                summaries[victim] = power_cut(node.mount, mode, cut_seed)
        finally:
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
        return Cut([n for n in nodes if n is not None], summaries, committed, in_flight, cut_seed)

    async def settle(self, cut: Cut, round_acked: list[Operation], check_: Check) -> None:
        """sync-flush, async-flush, ha: reboot what was cut, read it back, judge."""
        rng = self.rng
        for node in cut.nodes:
            node.boot(rng.choice(["pwrite", "mmap"]))
        address = self.master.address
        await wait_topic(self.api, address)
        cut.served = await record_read(
            self.recorder, self.api, address, TOPIC, BROKER_NAME, QUEUES, body_id=body_number
        )
        judged = self.judge("master", check_, lost=self.scenario != "async-flush")
        check_.lost = judged.lost_sends
        await self.check_master(cut, round_acked, check_)
        if self.scenario == "async-flush":
            end = durable_end(cut.summaries["master"])
            for o in check_.lost:
                phy = int(o.get("phy", -1))
                if phy < 0:
                    check_.violate(
                        "no-physical-offset", f"body {o.get('body')}: its msgId has none"
                    )
                elif end is not None and phy + RECORD_BOUND <= end:
                    check_.violate(
                        "beyond-unsynced", f"body {o.get('body')} at {phy} lay before {end}"
                    )
        if self.slave is not None:
            diverged_before = diverged_tails(self.slave.store)
            await self.check_slave(check_)
            if diverged_tails(self.slave.store) > diverged_before:
                self.report.slave_diverged += 1
                check_.notes.append("the slave was ahead of the master: its tail was set aside")

    async def check_master(self, cut: Cut, round_acked: list[Operation], check_: Check) -> None:
        """The master's store after the round: its files, the index, the checkpoint and the
        committed offsets (`check_.lost` holds what the round may have lost)."""
        address = self.master.address
        lost = {(o.process, o.op) for o in check_.lost}
        self.check_files(self.master, "master", check_)
        kept = [int(o.get("body")) for o in round_acked if (o.process, o.op) not in lost]
        # its own stream: the next rounds' draws must not depend on how many were acknowledged
        await check_index(self.api, address, kept, random.Random(cut.cut_seed), check_)
        newest = await newest_store_time(self.api, address)
        check_checkpoint(self.master.store, newest, check_)
        new_ends = await check_offsets(self.api, address, check_)
        self.report.offsets_past_end += sum(
            1 for queue, offset in cut.committed.items() if offset > new_ends[queue]
        )

    async def check_slave(self, check_: Check) -> None:
        """Once the slave caught up: what it serves judged, its CommitLog the master's."""
        assert self.slave is not None and self.slave.broker is not None
        await wait_transfer(self.api, self.master_daemon, timeout=30)
        end_offset = await wait_caught_up(self.api, self.master_daemon, self.slave.broker)
        await record_read(
            self.recorder, self.api, self.slave.address, TOPIC, BROKER_NAME, QUEUES,
            body_id=body_number,
        )  # fmt: skip
        self.judge("slave", check_)
        for start, end in differing_ranges(self.master.store, self.slave.store, end_offset):
            if ("differs", start, end) not in self.known:
                self.known.add(("differs", start, end))
                check_.violate("slave-differs", f"the CommitLogs differ in [{start}, {end})")
        self.check_files(self.slave, "slave", check_)

    async def settle_async_group(
        self, cut: Cut, round_acked: list[Operation], check_: Check
    ) -> None:
        """ha-async-flush (module docstring): reboot what was cut; judge what the rebooted
        master serves alone and, when the slave holds more, what the slave serves; restore the
        master from the slave if so (the operator's act); then judge the group whole again."""
        rng = self.rng
        master, slave = self.master, self.slave
        assert slave is not None
        victims = [name for name in ("master", "slave") if name in cut.summaries]
        for node in cut.nodes:
            node.boot(rng.choice(["pwrite", "mmap"]))
        await wait_topic(self.api, master.address)
        assert master.broker is not None and slave.broker is not None
        cut.served = await record_read(
            self.recorder, self.api, master.address, TOPIC, BROKER_NAME, QUEUES,
            body_id=body_number,
        )  # fmt: skip
        # The master alone: a cut master loses at most its unsynced tail.
        alone = self.judge("rebooted master", check_, lost="master" not in victims)
        if "master" in victims:
            master_end = durable_end(cut.summaries["master"])
            self.bound_lost(alone.lost_sends, [master_end], "rebooted master", check_)
        self.report.lacked_before_repair += len(alone.lost_sends)
        self.check_files(master, "master", check_)

        async def status_of(node: Node) -> dict[str, object]:
            assert node.broker is not None
            return await ha_status(self.api, node.address)

        master_max = int(str((await status_of(master))["masterCommitLogMaxOffset"]))
        slave_max = int(str((await status_of(slave))["maxOffset"]))
        if slave_max > master_max:
            # The slave holds bytes the master lost: it says DIVERGED, keeps them, and serves
            # them (no haSlaveAutoTruncate); after a cut of the master alone, every
            # acknowledged message.
            await wait_state(self.api, slave.broker, "DIVERGED", timeout=30)
            await record_read(
                self.recorder, self.api, slave.address, TOPIC, BROKER_NAME, QUEUES,
                body_id=body_number,
            )  # fmt: skip
            self.judge("diverged slave", check_, lost=victims == ["master"])
            # The operator's act: both stopped, the slave's whole records past the master's
            # end copied into the master's CommitLog and synced, both started again.
            slave.broker.stop()
            master.broker.stop()
            restored_to = restore_commitlog(slave.store, master.store, master_max)
            self.report.repairs += 1
            check_.notes.append(
                f"the slave held {slave_max - master_max} bytes more: the master restored "
                f"from it, {master_max} to {restored_to}"
            )
            master.boot(rng.choice(["pwrite", "mmap"]))
            slave.boot(rng.choice(["pwrite", "mmap"]))
            await wait_topic(self.api, master.address)
        await wait_transfer(self.api, self.master_daemon, timeout=30)
        assert slave.broker is not None
        await wait_caught_up(self.api, self.master_daemon, slave.broker)
        # The group whole again: a cut of one member lost nothing acknowledged; of both, only
        # what lay past the first unsynced page of each.
        await record_read(
            self.recorder, self.api, master.address, TOPIC, BROKER_NAME, QUEUES,
            body_id=body_number,
        )  # fmt: skip
        both = len(victims) == 2
        whole = self.judge("master", check_, lost=not both)
        if both:
            ends = [durable_end(cut.summaries[victim]) for victim in victims]
            self.bound_lost(whole.lost_sends, ends, "both cut", check_)
        check_.lost = whole.lost_sends
        self.given_up |= {(o.process, o.op) for o in check_.lost}
        await self.check_master(cut, round_acked, check_)
        await self.check_slave(check_)

    def bound_lost(
        self, lost: list[Operation], ends: list[int | None], what: str, check_: Check
    ) -> None:
        """Each of `lost` must lie past every end of `ends` (where a cut store's CommitLog
        first had an unsynced page; None: nothing unsynced, so nothing may be lost)."""
        for o in lost:
            phy = int(o.get("phy", -1))
            if phy < 0:
                check_.violate("no-physical-offset", f"body {o.get('body')}: its msgId has none")
                continue
            kept_by = [end for end in ends if end is None or phy + RECORD_BOUND <= end]
            if kept_by:
                check_.violate(
                    f"beyond-unsynced ({what})",
                    f"body {o.get('body')} at {phy} lost; synced up to {kept_by[0]}",
                )


@dataclass
class Cut:
    """One round's cut: the nodes cut, each store's cut summary by victim, the offsets
    committed before it, the sends in flight at it, and the seed of its draws."""

    nodes: list[Node]
    summaries: dict[str, dict[str, object]]
    committed: dict[int, int]
    in_flight: int
    cut_seed: int
    served: int = 0


def _sends(events: list[Event], since: int) -> list[Operation]:
    """The sends invoked from `events[since]` on."""
    invoked = {(e["process"], e["op"]) for e in events[since:] if e.get("type") == "invoke"}
    return [o for o in operations(events) if o.f == "send" and (o.process, o.op) in invoked]


async def run(
    scenario: str, rounds: int, folder: Path, seed: int, log: Callable[[str], None] = print
) -> Report:
    cuts = PowerCuts(scenario, folder, seed, log)
    started = time.monotonic()
    try:
        await cuts.start()
        for number in range(rounds):
            await cuts.round(number)
    finally:
        await cuts.stop()
        cuts.report.seconds = time.monotonic() - started
    return cuts.report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.powercut", description=__doc__)
    parser.add_argument("--scenario", choices=SCENARIOS, default="sync-flush")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"power-cut seed {seed} (rerun with --seed {seed})", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="tidemq-powercut-"))
    try:
        report = asyncio.run(
            run(args.scenario, args.rounds, folder, seed, lambda line: print(line, flush=True))
        )
    except BaseException:
        print(f"the power-cut run failed: stores and logs kept in {folder}")
        raise
    print(report.line())
    ok = not report.violations and report.rounds == args.rounds
    if ok:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"stores and logs kept in {folder}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
