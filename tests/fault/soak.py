"""The kill-9 soak (issue 20 item 6): `python -m tests.fault.soak [--rounds N] [--seed S]`.

A name server, a SYNC_MASTER and its SLAVE, both SYNC_FLUSH, run as processes on stores that
live through the whole soak. Each round our client sends numbered messages (32 in flight, 4
queues), and so does the RocketMQ C++ client (`send_sync`, one at a time, in a cpp_peer.py
process; left out, with a line saying so, where it cannot be imported), while at a random moment
the master or the slave is SIGKILLed; it is restarted on the same store and ports, and the round
ends with the checker:

- every message answered SEND_OK (the slave acknowledged it, the disk flushed it), in this
  round and every earlier one, is read back from the master at the queue offset it was given,
  with its body's number (the C++ client's, which is not told its queue, anywhere in the
  topic); messages stored more than once (a send whose answer was lost and
  that a client retried) are counted, never a loss;
- each queue's offsets run from 0 without a hole, as the master serves them;
- an offline walk of both stores' files (`cq_check.py`) finds every ConsumeQueue unit pointing
  at a record of its topic and queue with the unit's size and tagsCode, at its queue offset,
  the queue offsets contiguous, and every record indexed (the slave's last ones may still be
  on their way to its ConsumeQueues);
- once the slave has caught up, its CommitLog is byte-identical to the master's: the slave is a
  byte prefix of the master at every moment it is behind.

`make soak` runs SOAK_ROUNDS (100) rounds; `make test` runs three (tests/fault/test_soak.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fault.cq_check import check_consume_queues
from tests.support.cpp_peers import SEND_OK, Peer
from tests.support.ha_processes import (
    assert_identical,
    read_all,
    send_many,
    start_master,
    start_slave,
    wait_caught_up,
    wait_transfer,
)
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI

TOPIC = "Soak"
SYNC_FLUSH = "flushDiskType=SYNC_FLUSH"
PER_ROUND = 3000  # sends a round may make; the kill comes well before they are done
CPP_PER_ROUND = 300
CPP_NUMBERS = 50_000_000  # the C++ client's message numbers start here


def cpp_client_available() -> bool:
    try:
        return importlib.util.find_spec("rocketmq.client") is not None
    except ImportError:
        return False


async def start_cpp_producer(folder: Path, namesrv: Daemon, round_number: int) -> Peer:
    first = CPP_NUMBERS + round_number * CPP_PER_ROUND
    spec = {
        "op": "produce",
        "namesrv": namesrv.address,
        "group": "SoakCppPG",
        "topic": TOPIC,
        "send_timeout_ms": 3000,
        "messages": [{"body": f"c{n:08d}|cpp"} for n in range(first, first + CPP_PER_ROUND)],
    }
    producer = Peer(folder, spec)
    await producer.start()
    return producer


async def cpp_acknowledged(producer: Peer, timeout: float = 30.0) -> set[int]:
    """The numbers of the messages the C++ client got SEND_OK for; the peer is ended."""
    try:
        async with asyncio.timeout(timeout):
            while await producer.next_event() is not None:
                pass
    except TimeoutError:
        pass
    await producer.kill()
    bodies = [m["body"] for m in producer.spec["messages"]]
    return {int(bodies[e["index"]][1:9]) for e in producer.of("sent") if e["status"] == SEND_OK}


@dataclass
class SoakReport:
    rounds: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    lost: int = 0
    stored_twice: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"{self.rounds} rounds ({self.kills['master']} master and {self.kills['slave']} "
            f"slave kills) in {self.seconds:.0f} s: {self.acknowledged} messages acknowledged, "
            f"{self.lost} lost, {self.stored_twice} stored twice"
        )


async def soak(
    rounds: int, folder: Path, seed: int, log: Callable[[str], None] = print
) -> SoakReport:
    rng = random.Random(seed)
    report = SoakReport()
    started = time.monotonic()
    processes = ProcessGroup(folder / "logs")
    api = BrokerAPI()
    acknowledged: dict[tuple[int, int], int] = {}
    cpp_acked: set[int] = set()
    try:
        namesrv = processes.namesrvd(name="namesrvd")
        master, ha_port = start_master(processes, namesrv, folder / "master", SYNC_FLUSH)
        slave = start_slave(processes, namesrv, folder / "slave", SYNC_FLUSH)
        await wait_transfer(api, master)
        cpp = cpp_client_available()
        if not cpp:
            log("the RocketMQ C++ client cannot be imported: our client's sends only")
        for round_number in range(rounds):
            victim = rng.choice(["master", "slave"])
            producer = None
            if cpp:
                producer = await start_cpp_producer(folder, namesrv, round_number)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(15):  # started: its first send answered
                        await producer.next_event()
            sender = asyncio.create_task(
                send_many(
                    api,
                    master,
                    TOPIC,
                    PER_ROUND,
                    start=round_number * PER_ROUND,
                    concurrency=32,
                    expect=None,
                )
            )
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            if victim == "master":
                master.kill()
            else:
                slave.kill()
            placed = await sender
            acknowledged.update(placed)
            report.kills[victim] += 1
            if victim == "master":
                master, _ = start_master(
                    processes,
                    namesrv,
                    folder / "master",
                    SYNC_FLUSH,
                    port=master.port,
                    ha_port=ha_port,
                    name=f"master-{round_number + 1}",
                )
            else:
                slave = start_slave(
                    processes,
                    namesrv,
                    folder / "slave",
                    SYNC_FLUSH,
                    port=slave.port,
                    name=f"slave-{round_number + 1}",
                )
            await wait_transfer(api, master, timeout=30)
            if producer is not None:
                cpp_acked |= await cpp_acknowledged(producer)
            lost, twice = await check(api, master, slave, folder, acknowledged, cpp_acked)
            report.rounds += 1
            report.acknowledged = len(acknowledged) + len(cpp_acked)
            report.lost = lost
            report.stored_twice = twice
            log(
                f"round {round_number + 1}: {victim} killed, {len(placed)} acknowledged "
                f"({report.acknowledged} in all, {len(cpp_acked)} from the C++ client), "
                f"{lost} lost, {twice} stored twice"
            )
            if lost:
                break
    finally:
        await api.close()
        processes.stop_all()
        report.seconds = time.monotonic() - started
    return report


async def check(
    api: BrokerAPI,
    master: Daemon,
    slave: Daemon,
    folder: Path,
    acknowledged: dict[tuple[int, int], int],
    cpp_acked: set[int],
) -> tuple[int, int]:
    """(acknowledged messages not read back, messages stored more than once); raises when the
    slave is not a byte copy of the master once caught up, or a queue has a hole."""
    found = await read_all(api, master, TOPIC)  # asserts each queue runs from 0 without a hole
    lost = sum(1 for place, number in acknowledged.items() if found.get(place) != number)
    lost += len(cpp_acked - set(found.values()))
    twice = sum(count - 1 for count in Counter(found.values()).values() if count > 1)
    end = await wait_caught_up(api, master, slave)
    assert_identical(folder / "master", folder / "slave", 0, end)
    for store in ("master", "slave"):
        queues = check_consume_queues(folder / store)
        assert not queues.problems, f"the {store}'s ConsumeQueues: {queues.problems}"
    return lost, twice


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
        print(f"the soak failed: stores and logs kept in {folder}")
        raise
    print(report.line())
    if report.lost == 0 and report.rounds == args.rounds:
        shutil.rmtree(folder)
    else:
        print(f"stores and logs kept in {folder}")
    return 0 if report.lost == 0 and report.rounds == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
