"""The soak under load (issue 20 item 6, issue 32 item 5):
`python -m tests.fault.soak [--rounds N] [--seed S]`.

A name server, a SYNC_MASTER and its SLAVE, both SYNC_FLUSH, each with its store on its own
lossy FUSE mount (tests/support/lazy_mounts.py), run through the whole soak. Each round sends
numbered messages to the master (1, 4, 16, 32 or 64 in flight, drawn per round; 4 queues;
every send recorded in one history, tests/support/history.py; rounds alternate, four at a time,
between raw SEND_MESSAGE requests with no retry and the public AsyncProducer, routed by the name
server, with its 2 retries, which may store a message twice) and, once a random number of them
were answered and while sends are in flight, strikes. Beside them, every round, the RocketMQ
C++ client (PyPI rocketmq==0.4.4, librocketmq) sends too: one `cpp_peer.py` stream process for
the whole soak (`CppStream`), routed by the name server, one message at a time with no retry,
each to a queue it chooses (message n to queue n % 4), every send recorded in the same history
with the peer's own times (process `cpp`), judged with the rest; it stops starting sends at
the strike and its last send is answered before anything restarts. The rounds rotate four
kinds:

- `master-kill`: the master is SIGKILLed and restarted on its store and ports;
- `slave-kill`: the same for the slave;
- `power-cut`: the master's or the slave's store loses power (every process using its mount
  SIGKILLed, everything not synced dropped, `all` or `torn`, tests/fault/powercut.py's
  power_cut), and the broker boots again on a fresh mount;
- `pause`: the master or the slave is stopped (SIGSTOP) for 0.5-6 s, then continued
  (longer than syncFlushTimeout, 5 s, now and then: a paused slave fails sends by timeout).

The round records how many sends were in flight at the strike. When the sends ran out before it
(none in flight) the draw does not count: the round sends again and draws again. After the
strike no new send starts; those in flight finish (acknowledged, refused or failed).

Checks, all by the history checker (`history.check`: lost, position, duplicate, order, ...):

- before anything restarts, the slave's CommitLog as its files hold it is a final read: every
  message acknowledged so far must be there at its queue and offset. An acknowledgement of
  SYNC_MASTER means the slave wrote it to its CommitLog (it reports what it appended, as
  RocketMQ's slave does; its own flush follows), not that it synced it: a slave's power cut is
  judged on its files between the broker's SIGKILL and the cut (page cache kept), and may lose
  acknowledged messages from the slave's disk, which it then copies again from the master. A
  slave that reported an offset before writing fails here;
- after the restart, once the slave caught up: everything the master serves, then everything
  the slave serves, each as a final read judged in turn (acknowledged at its queue and offset,
  no body at more positions than its send's attempts explain, nothing
  never sent);
- and, as before, both stores' files offline (`cq_check`) and the slave's CommitLog
  byte-identical to the master's.

`make soak` runs SOAK_ROUNDS (100) rounds; `make test` a seeded short run
(tests/fault/test_soak.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.fault.cq_check import check_consume_queues
from tests.fault.powercut import SLAVE_TRUNCATES, power_cut
from tests.support.conditions import eventually
from tests.support.cpp_peers import SEND_OK, Peer
from tests.support.ha_brokers import HA_TIMING
from tests.support.ha_processes import (
    assert_identical,
    body_of,
    wait_caught_up,
    wait_transfer,
)
from tests.support.history import Recorder, RecordingProducer, Report, check, record_read
from tests.support.lazy_mounts import LazyMount
from tests.support.processes import Daemon, ProcessGroup, free_port
from tests.support.store_history import files_hold_acked
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.config import ClientConfig
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer

TOPIC: Final = "Soak"
QUEUES: Final = 4
BROKER_NAME: Final = "broker-a"  # the brokers' name (tests/support/processes.py)
CPP_FIRST: Final = 90_000_000  # the C++ client's message numbers (the others' stay far below)
CONCURRENCY: Final = (1, 4, 16, 32, 64)  # sends in flight at once: one drawn per round
PER_DRAW: Final = 3000  # sends a draw may make; the strike comes well before they are done
STRIKE_AFTER: Final = 600  # the strike comes once 1 to this many sends were answered
KINDS: Final = ("master-kill", "slave-kill", "power-cut", "pause")
SYNC_FLUSH: Final = "flushDiskType=SYNC_FLUSH"
COMMON: Final = (SYNC_FLUSH, *HA_TIMING, "syncFlushTimeout=5000")


@dataclass
class Node:
    """One broker whose store is on its own lossy mount."""

    processes: ProcessGroup
    namesrv: Daemon
    mount: LazyMount
    overrides: tuple[str, ...]
    port: int = field(default_factory=free_port)
    ha_port: int = field(default_factory=free_port)
    broker: Daemon | None = None
    starts: int = 0

    @property
    def store(self) -> Path:
        return self.mount.path / "store"

    @property
    def files(self) -> Path:
        """Where the store's files are now: the mount, or its backing folder while it is down."""
        return self.store if self.mount.mounted else self.mount.backing / "store"

    @property
    def daemon(self) -> Daemon:
        assert self.broker is not None
        return self.broker

    @property
    def pid(self) -> int:
        pid = self.daemon.pid
        assert pid is not None
        return pid

    def boot(self) -> Daemon:
        if not self.mount.mounted:
            self.mount.start()
        self.starts += 1
        self.broker = self.processes.brokerd(
            self.namesrv.address,
            self.store,
            f"haListenPort={self.ha_port}",
            *self.overrides,
            port=self.port,
            name=f"{self.mount.name}-{self.starts}",
        )
        return self.broker


class Sender:
    """Sends numbered messages, `concurrency` at a time, each recorded; `stop()` starts no more."""

    def __init__(
        self,
        api: BrokerAPI,
        address: str,
        recorder: Recorder,
        concurrency: int,
        producer: RecordingProducer | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.producer = producer
        self.api = api
        self.address = address
        self.recorder = recorder
        self.answered = 0
        self.in_flight = 0
        self.stopped = False

    async def run(self, first: int, count: int) -> None:
        numbers = iter(range(first, first + count))

        async def worker() -> None:
            for number in numbers:
                if self.stopped:
                    return
                await self.one(number)

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))

    def stop(self) -> None:
        self.stopped = True

    async def one(self, number: int) -> None:
        if self.producer is not None:
            await self.through_producer(number)
            return
        rec = self.recorder
        op = rec.invoke("send", topic=TOPIC, body=number, attempts=1)
        self.in_flight += 1
        try:
            result = await self.api.send(
                self.address,
                send_header(TOPIC, number % QUEUES),
                body_of(number, 100 + number % 900),
                timeout=15,
            )
        except Exception as exc:  # the broker died, or the answer was lost: unknown
            rec.complete(op, "info", "send", status="error", error=f"{type(exc).__name__}: {exc}")
            return
        finally:
            self.in_flight -= 1
            self.answered += 1
        rec.complete(
            op,
            "ok" if result.status is SendStatus.SEND_OK else "info",
            "send",
            status=result.status.name,
            broker_name=BROKER_NAME,
            queue=result.queue_id,
            offset=result.queue_offset,
            broker=self.address,
        )

    async def through_producer(self, number: int) -> None:
        """The public producer's send (RecordingProducer records it, retries included)."""
        assert self.producer is not None
        self.in_flight += 1
        try:
            await self.producer.send(Message(TOPIC, body_of(number, 100 + number % 900)))
        except Exception:  # recorded (unknown); the round goes on
            pass
        finally:
            self.in_flight -= 1
            self.answered += 1


class CppStream:
    """The RocketMQ C++ client (rocketmq==0.4.4) as part of the load: one `cpp_peer.py` stream
    process for the whole soak (tests/integration/cpp_peer.py), sending one message at a time,
    routed by the name server, while its run file exists; every send recorded in the history as
    it happened (the peer's own wall and monotonic times), as the C++ client's process `cpp`."""

    def __init__(self, folder: Path, namesrv: str, recorder: Recorder, master: str) -> None:
        self.recorder = recorder
        self.master = master  # only the master takes sends: an acknowledgement came from it
        self.run_file = folder / "cpp.run"
        self.stop_file = folder / "cpp.stop"
        spec = {
            "op": "stream",
            "namesrv": namesrv,
            "group": "SoakCppPG",
            "topic": TOPIC,
            "first": CPP_FIRST,
            "run_file": str(self.run_file),
            "stop_file": str(self.stop_file),
            # a send to a killed master fails by this timeout: the round waits for it
            "send_timeout_ms": 1500,
        }
        self.peer = Peer(folder, spec)
        self.reader: asyncio.Task[None] | None = None
        self.in_flight: set[int] = set()
        self.invoked = self.acknowledged = self.idles = 0
        self.ended = False

    async def start(self) -> None:
        await self.peer.start()
        self.reader = asyncio.create_task(self.read())

    async def read(self) -> None:
        while (event := await self.peer.next_event()) is not None:
            self.record(event)
        self.ended = True

    def record(self, event: dict[str, object]) -> None:
        kind = event["event"]
        if kind == "idle":
            self.idles += 1
            return
        if kind not in ("invoke", "sent", "send_failed"):
            return
        number = event["number"]
        assert isinstance(number, int)
        at = {"process": "cpp", "f": "send", "op": number, "wall": event["wall"]}
        at["mono"] = event["mono"]
        if kind == "invoke":
            self.invoked += 1
            self.in_flight.add(number)
            self.recorder.emit(
                {"type": "invoke", **at, "topic": TOPIC, "body": number, "attempts": 1}
            )
            return
        self.in_flight.discard(number)
        if kind == "send_failed":
            self.recorder.emit({"type": "info", **at, "status": "error", "error": event["error"]})
            return
        ok = event["status"] == SEND_OK
        self.acknowledged += ok
        self.recorder.emit(
            {
                "type": "ok" if ok else "info",
                **at,
                "status": "SEND_OK" if ok else f"status {event['status']}",
                "broker_name": BROKER_NAME,
                "queue": event["queue"],
                "offset": event["offset"],
                "broker": self.master,
            }
        )

    def alive(self) -> None:
        if self.ended:
            raise AssertionError(f"the C++ peer ended: {self.peer.describe()}")

    async def run(self) -> None:
        """Start sending; returns once the peer's first send of this run was invoked."""
        invoked = self.invoked
        self.run_file.touch()

        def sending() -> bool:
            self.alive()
            return self.invoked > invoked

        await eventually(sending, "the C++ client sending", 60)

    def stop_sending(self) -> None:
        """No new send starts (the peer sees its run file gone within 10 ms)."""
        self.run_file.unlink(missing_ok=True)

    async def idle(self, since: int) -> None:
        """Until the peer said it stopped sending (after `since` idles), its last send
        answered."""

        def stopped() -> bool:
            self.alive()
            return self.idles > since

        await eventually(stopped, "the C++ client's last send answered", 60)

    async def close(self) -> None:
        self.stop_file.touch()
        self.run_file.unlink(missing_ok=True)
        if self.reader is not None:  # to the end of its output (its last send answered)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.reader), 30)
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        await self.peer.kill()


@dataclass
class SoakReport:
    rounds: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    victims: Counter[str] = field(default_factory=Counter)  # 'slave pause': 3, ...
    in_flight: list[int] = field(default_factory=list)  # at each counted strike
    cpp_in_flight: list[int] = field(default_factory=list)  # the C++ client's, the same
    cpp_sends: int = 0
    cpp_acknowledged: int = 0
    cpp_lost: int = 0  # in the last check of the whole history
    redraws: int = 0  # draws that found no send in flight (not counted)
    history: Report | None = None  # the last check of the whole history (the master's log)
    violations: Counter[str] = field(default_factory=Counter)  # every check of every round
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def line(self) -> str:
        kinds = ", ".join(f"{n} {what}" for what, n in sorted(self.victims.items()))
        flight = (
            f"{min(self.in_flight)}-{max(self.in_flight)} (mean "
            f"{sum(self.in_flight) / len(self.in_flight):.1f})"
            if self.in_flight
            else "none"
        )
        c = self.history.counts if self.history is not None else Counter[str]()
        violations = ", ".join(f"{n} {what}" for what, n in sorted(self.violations.items()))
        return (
            f"{self.rounds} rounds ({kinds}) in {self.seconds:.0f} s; sends in flight at the "
            f"strikes {flight}, {self.redraws} draws redone with none in flight; "
            f"{c['sends']} sends, {c['acknowledged']} acknowledged, {c['lost']} lost, "
            f"{c['duplicates']} duplicates, {c['unknown']} unknown ({c['unknown_stored']} "
            f"stored); the C++ client: {self.cpp_sends} sends, {self.cpp_acknowledged} "
            f"acknowledged, {self.cpp_lost} lost, in flight at "
            f"{sum(1 for n in self.cpp_in_flight if n)} of the strikes; violations: "
            f"{violations or 'none'}"
        )


class Soak:
    def __init__(self, folder: Path, seed: int, log: Callable[[str], None]) -> None:
        self.folder = folder
        self.rng = random.Random(seed)
        self.log = log
        self.report = SoakReport()
        self.processes = ProcessGroup(folder / "logs")
        self.api = BrokerAPI()
        self.recorder = Recorder(folder / "history.jsonl", "soak")
        self.mounts: list[LazyMount] = []
        self.next_number = 0
        self.producer: AsyncProducer | None = None
        self.cpp: CppStream | None = None
        self.master: Node
        self.slave: Node

    def node(self, name: str, *overrides: str) -> Node:
        mount = LazyMount(self.folder, name)
        self.mounts.append(mount)
        namesrv = self.processes.daemons[0]
        return Node(self.processes, namesrv, mount, (*COMMON, *overrides))

    async def start(self) -> None:
        self.processes.namesrvd(name="namesrvd")
        self.master = self.node("master", "brokerRole=SYNC_MASTER")
        # a master's power cut can leave its slave ahead of it (powercut.py): it sets it aside
        self.slave = self.node("slave", "brokerRole=SLAVE", "brokerId=1", *SLAVE_TRUNCATES)
        self.master.boot()
        self.slave.boot()
        await wait_transfer(self.api, self.master.daemon, timeout=30)
        config = ClientConfig.create(self.processes.daemons[0].address, poll_name_server_interval=1)
        self.producer = AsyncProducer("SoakPG", config=config, timeout=10.0)
        await self.producer.start()
        namesrv = self.processes.daemons[0].address
        self.cpp = CppStream(self.folder, namesrv, self.recorder, self.master.daemon.address)
        await self.cpp.start()

    async def stop(self) -> None:
        if self.cpp is not None:
            await self.cpp.close()
        if self.producer is not None:
            await self.producer.stop()
        await self.api.close()
        self.processes.stop_all()
        for mount in self.mounts:
            mount.stop()
        self.recorder.close()

    def judge(self, what: str, round_number: int, result: Report | None = None) -> Report:
        """Check the whole history (or take `result`, its check), its last final read being
        `what`'s log."""
        result = check(self.recorder.events) if result is None else result
        for rule, texts in result.violations.items():
            if texts:
                self.report.violations[f"{rule} ({what})"] += len(texts)
                self.report.notes += [f"round {round_number}, {what}: {t}" for t in texts[:5]]
        return result

    def check_slave_files(self, round_number: int, files: Path | None = None) -> int:
        """The slave's files before anything restarts (or `files`, a copy of them taken then):
        every acknowledgement must be in them. Judged once every send's events are in the
        history: the C++ client's arrive from its own process, and a message it sent right
        before the strike can be in the files before its invoke was read."""
        store = self.slave.files if files is None else files
        judged = files_hold_acked(self.recorder, store, TOPIC, BROKER_NAME)
        self.judge("slave's files at the strike", round_number, judged)
        return judged.counts["final_read"]

    def copy_slave_commitlog(self, round_number: int) -> Path:
        """The slave's CommitLog as its files hold it now (its process killed, the power not
        yet cut), for `check_slave_files` once the round's sends are all answered."""
        copy = self.folder / f"slave-at-strike-{round_number}"
        shutil.copytree(self.slave.files / "commitlog", copy / "commitlog")
        return copy

    async def draw(
        self, concurrency: int, producer: bool
    ) -> tuple[Sender, asyncio.Task[None], int]:
        """Send until a random number of sends were answered with some still in flight; returns
        the sender (still running), its task and how many were in flight then."""
        while True:
            sender, sending = await self.send_until(
                self.rng.randint(1, STRIKE_AFTER), concurrency, producer
            )
            if not sending.done() and sender.in_flight > 0:
                return sender, sending, sender.in_flight  # the strike follows with no await
            await sending
            self.report.redraws += 1

    async def send_until(
        self, answered: int, concurrency: int, producer: bool
    ) -> tuple[Sender, asyncio.Task[None]]:
        assert self.producer is not None
        recording = RecordingProducer(self.recorder, self.producer) if producer else None
        address = self.master.daemon.address
        sender = Sender(self.api, address, self.recorder, concurrency, recording)
        first = self.next_number
        self.next_number += PER_DRAW
        sending = asyncio.create_task(sender.run(first, PER_DRAW))
        await eventually(
            lambda: sending.done() or (sender.answered >= answered and sender.in_flight > 0),
            "sends answered",
            120,
        )
        return sender, sending

    async def round(self, number: int) -> None:
        kind = KINDS[number % len(KINDS)]
        producer = number // len(KINDS) % 2 == 1
        rng = self.rng
        victim = "master" if kind == "master-kill" else "slave" if kind == "slave-kill" else None
        victim = victim or rng.choice(["master", "slave"])
        node = self.master if victim == "master" else self.slave
        cut_mode = rng.choice(["all", "torn"])
        cut_seed = rng.randrange(2**31)
        pause = rng.uniform(0.5, 6.0)
        assert self.cpp is not None
        cpp_idles = self.cpp.idles
        await self.cpp.run()
        sender, sending, in_flight = await self.draw(rng.choice(CONCURRENCY), producer)
        # the strike: nothing awaited since in_flight was read
        cpp_in_flight = len(self.cpp.in_flight)  # as far as its events were read
        self.cpp.stop_sending()
        slave_at_strike: Path | None = None
        if kind == "power-cut":
            node.daemon.kill()
            if victim == "slave":
                # SYNC_MASTER's acknowledgement means the slave wrote the message, not that it
                # synced it (it reports what it appended, as RocketMQ's does): its files are
                # judged as the kill left them, before the cut drops what was not synced.
                slave_at_strike = self.copy_slave_commitlog(number + 1)
            power_cut(node.mount, cut_mode, cut_seed)
        elif kind == "pause":
            os.kill(node.pid, signal.SIGSTOP)
        else:
            node.daemon.kill()
        sender.stop()
        if kind == "pause":
            await asyncio.sleep(pause)  # the stall itself, not a wait for a condition
            os.kill(node.pid, signal.SIGCONT)
        await sending
        await self.cpp.idle(cpp_idles)
        client = "producer" if producer else "raw sends"
        what = f"{victim} {kind}" + (f" ({cut_mode})" if kind == "power-cut" else "")
        slave_held = self.check_slave_files(number + 1, slave_at_strike)
        if slave_at_strike is not None:
            shutil.rmtree(slave_at_strike)
        if kind != "pause":
            node.boot()
        await wait_transfer(self.api, self.master.daemon, timeout=60)
        await wait_caught_up(self.api, self.master.daemon, self.slave.daemon)
        served = await record_read(
            self.recorder, self.api, self.master.daemon.address, TOPIC, BROKER_NAME, QUEUES
        )
        self.report.history = self.judge("master", number + 1)
        end = await wait_caught_up(self.api, self.master.daemon, self.slave.daemon)
        await record_read(
            self.recorder, self.api, self.slave.daemon.address, TOPIC, BROKER_NAME, QUEUES
        )
        self.judge("slave", number + 1)
        try:
            assert_identical(self.master.store, self.slave.store, 0, end)
        except AssertionError as e:
            self.report.violations["slave-differs"] += 1
            self.report.notes.append(f"round {number + 1}: {e}")
        for name, store in (("master", self.master.store), ("slave", self.slave.store)):
            for problem in check_consume_queues(store).problems[:5]:
                self.report.violations[f"consume-queue ({name})"] += 1
                self.report.notes.append(f"round {number + 1}, {name}: {problem}")
        self.report.rounds += 1
        self.report.kinds[kind] += 1
        self.report.victims[f"{victim} {kind}"] += 1
        self.report.in_flight.append(in_flight)
        self.report.cpp_in_flight.append(cpp_in_flight)
        self.report.cpp_sends = self.cpp.invoked
        self.report.cpp_acknowledged = self.cpp.acknowledged
        self.report.cpp_lost = sum(1 for o in self.report.history.lost_sends if o.process == "cpp")
        h = self.report.history.counts
        self.log(
            f"round {number + 1}: {what}, {client}, {in_flight} in flight; the slave's files held "
            f"{slave_held}, the master serves {served}; {h['acknowledged']} acknowledged in all, "
            f"{h['lost']} lost, {h['duplicates']} duplicates; violations "
            f"{sum(self.report.violations.values())}"
        )


async def soak(
    rounds: int, folder: Path, seed: int, log: Callable[[str], None] = print
) -> SoakReport:
    run = Soak(folder, seed, log)
    started = time.monotonic()
    try:
        await run.start()
        for number in range(rounds):
            await run.round(number)
            if not run.report.ok:
                break
    finally:
        await run.stop()
        run.report.seconds = time.monotonic() - started
    for note in run.report.notes[:20]:
        log(f"  {note}")
    return run.report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.soak", description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"soak seed {seed} (rerun with --seed {seed})", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="tidemq-soak-"))
    try:
        report = asyncio.run(soak(args.rounds, folder, seed, lambda line: print(line, flush=True)))
    except BaseException:
        print(f"the soak failed: stores, logs and history.jsonl kept in {folder}")
        raise
    print(report.line())
    ok = report.ok and report.rounds == args.rounds
    if ok:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"stores, logs and history.jsonl kept in {folder}")
    return 0 if ok else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
