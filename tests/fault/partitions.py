"""Partitions during failover (issue 32 item 3): `python -m tests.fault.partitions [--rounds N]
[--seed S]`; `make partitions` runs PARTITION_ROUNDS (100), `make test` a seeded short run
(tests/fault/test_failover_partitions.py).

Hosts, each a network namespace (tests/support/netns.py): a name server, a three-member etcd
cluster (etcd1..3), a three-member broker group in controller mode (b1..3, brokers 1..3 of
broker-a, SYNC_MASTER with allAckInSyncStateSet) and the client process, which runs the recorded
workload (tests/support/recorded_load.py: four producers sending without pause, a pull consumer
committing each second, an orderly push consumer, its deliveries recorded and, once the load
stops, given the time to get every acknowledged message: the checker's delivery rule) for the
whole run, every operation in one history.

Each round waits for a stable group (one master, the SyncStateSet {1, 2, 3}, acknowledging),
applies one fault while the load goes on, waits until the fault has had its effect, heals, and
waits for a stable group again. The faults (`SCENARIOS`), each cycle of rounds taking every one
in a seeded order:

- master-etcd: the master cut from all of etcd (both ways); it can still reach its slaves and the
  client: another broker must be elected, and the old one must have stopped acknowledging first;
- master-etcd-out / master-etcd-in: one-way: the master's packets to etcd dropped (its lease
  expires: an election), or etcd's answers to it dropped (it cannot renew, so it fences itself;
  etcd may keep its lease alive, since the keep-alives arrive, or elect another);
- master-slaves: the master cut from both slaves (both ways), still reaching etcd: the slaves
  leave the SyncStateSet and the master goes on alone, no election;
- master-slaves-out / master-slaves-in: one-way: the master's data to the slaves dropped, or the
  slaves' acknowledgements to it;
- slave-etcd: one slave cut from etcd: its lease expires; nothing else may change;
- pause-master: the master SIGSTOPped until another is elected and acknowledges, then resumed;
- etcd-member: one etcd member cut from the other two (the raft leader a third of the time).

At the end the load stops, the master's whole topic is read as the final read, the epochs are
taken from the brokers' logs ("elected master of epoch N" lines) and the history checker
(tests/support/history.py) judges the history: no acknowledged message lost, no queue position
acknowledged twice, duplicates only where retries explain them, consumption in order and
matching the log, committed offsets never backwards, and no acknowledgement from a broker
outside its epoch (fencing).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from tests.support.conditions import eventually
from tests.support.history import Event, Recorder, Report, check, load
from tests.support.netns import Network
from tests.support.netns_cluster import AgentError, ClientAgent, NetnsCluster, NetnsDaemon

TOPIC: Final = "Partitions"
QUEUES: Final = 4
ETCD_HOSTS: Final = ("etcd1", "etcd2", "etcd3")
BROKER_IDS: Final = {"b1": 1, "b2": 2, "b3": 3}
HOSTS: Final = ("namesrv", *ETCD_HOSTS, *BROKER_IDS, "client")
SYNC_STATE_SET: Final = sorted(BROKER_IDS.values())
ACKS: Final = 20  # acknowledgements a broker must give to count as serving
ELECTION_TIMEOUT: Final = 60.0
STABLE_TIMEOUT: Final = 120.0
# A slave cut off leaves the SyncStateSet after 3 s without catching up (RocketMQ: 15 s).
BROKER_OVERRIDES: Final = ("haMaxTimeSlaveNotCatchup=3000",)
SEND_INTERVAL: Final = 0.02  # each of the 4 senders: at most 50 sends a second, sends always
# in flight, and a history of 100 rounds that the checker reads in memory
ETCD_CAMPAIGN: Final = "is starting a new election"
ELECTED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) .*elected master of epoch (\d+)", re.MULTILINE
)


@dataclass
class PartitionReport:
    rounds: int = 0
    scenarios: Counter[str] = field(default_factory=Counter)
    elections: int = 0
    fencing_margin: float | None = None  # seconds: the least gap between an old master's last
    # stored acknowledgement and the next epoch's start
    history: Report | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.history is not None and self.history.ok

    def line(self) -> str:
        c = self.history.counts if self.history is not None else Counter[str]()
        margin = "-" if self.fencing_margin is None else f"{self.fencing_margin * 1000:.0f} ms"
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.scenarios.items()))
        text = (
            f"{self.rounds} rounds ({kinds}) "
            f"in {self.seconds:.0f} s: {self.elections} elections; {c['acknowledged']} "
            f"acknowledged, {c['lost']} lost, {c['duplicates']} duplicates; least fencing "
            f"margin {margin}"
        )
        if self.history is not None:
            text += "\n" + self.history.summary()
        return text


class Run:
    """The cluster of one run and the waits its rounds share."""

    def __init__(self, cluster: NetnsCluster, agent: ClientAgent, log: Callable[[str], None]):
        self.cluster = cluster
        self.agent = agent
        self.log = log
        self.net: Network = cluster.network
        self.paused: set[str] = set()

    def address(self, host: str) -> str:
        return self.cluster.broker_addr(host)

    def daemon(self, host: str) -> NetnsDaemon:
        return next(d for d in self.cluster.daemons if d.name == host)

    async def controller(self, host: str) -> dict[str, Any] | None:
        if host in self.paused:
            return None
        try:
            info = await self.agent.call("controller", address=self.address(host), timeout=15)
        except AgentError:
            return None
        return info if isinstance(info, dict) else None

    async def masters(self) -> dict[str, dict[str, Any]]:
        found = {}
        for host in BROKER_IDS:
            info = await self.controller(host)
            if info is not None and info.get("isMaster"):
                found[host] = info
        return found

    async def acknowledged(self, host: str) -> int:
        stats = await self.agent.call("load_stats")
        return int(stats["acknowledged"].get(self.address(host), 0))

    async def total_acknowledged(self) -> int:
        stats = await self.agent.call("load_stats")
        return sum(int(n) for n in stats["acknowledged"].values())

    async def not_acknowledged(self) -> int:
        stats = await self.agent.call("load_stats")
        return sum(int(n) for n in stats["outcomes"].values())

    async def serving(self, host: str, more: int = ACKS, timeout: float = ELECTION_TIMEOUT) -> None:
        base = await self.acknowledged(host)

        async def acknowledging() -> bool:
            return await self.acknowledged(host) >= base + more

        await eventually(
            acknowledging, f"{more} sends acknowledged by {host}", timeout, interval=0.2
        )

    async def stable(self) -> str:
        """Wait for one master with the whole SyncStateSet, followed by the others, serving,
        and still so (the same epoch) once it served."""
        chosen: list[tuple[str, int]] = []

        async def one_master() -> bool:
            masters = await self.masters()
            if len(masters) != 1:
                return False
            [(host, info)] = masters.items()
            if info.get("syncStateSet") != SYNC_STATE_SET:
                return False
            for other in BROKER_IDS:
                if other != host:
                    seen = await self.controller(other)
                    if seen is None or seen.get("masterBrokerId") != BROKER_IDS[host]:
                        return False
            chosen.append((host, int(info["epoch"])))
            return True

        deadline = time.monotonic() + STABLE_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            await eventually(one_master, "one master with the SyncStateSet [1, 2, 3]", left,
                             interval=0.3)  # fmt: skip
            host, _epoch = chosen[-1]
            try:
                # A master fenced or deposed meanwhile (its lease expired after the heal, and
                # perhaps it was elected again, alone in a new SyncStateSet) is not stable.
                await self.serving(host, timeout=min(15.0, max(1.0, left)))
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                continue
            if await one_master() and chosen[-1] == chosen[-2]:
                return host

    async def new_master(self, old: str, old_epoch: int) -> str:
        """Wait for a broker other than `old` to be master of a later epoch, and serving."""
        found: list[str] = []

        async def elected() -> bool:
            for host in BROKER_IDS:
                if host == old:
                    continue
                info = await self.controller(host)
                if info and info.get("isMaster") and int(info.get("epoch", 0)) > old_epoch:
                    found[:] = [host]
                    return True
            return False

        await eventually(elected, f"a master elected in place of {old}", ELECTION_TIMEOUT,
                         interval=0.2)  # fmt: skip
        await self.serving(found[0])
        return found[0]

    def pause(self, host: str) -> None:
        pid = self.daemon(host).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(host)

    def resume_all(self) -> None:
        for host in list(self.paused):
            pid = self.daemon(host).pid
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(host)


Scenario = Callable[[Run, str, int, random.Random], Awaitable[str]]


async def master_etcd(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    for host in ETCD_HOSTS:
        run.net.cut(master, host)
    return f"{await run.new_master(master, epoch)} elected"


async def master_etcd_out(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    for host in ETCD_HOSTS:
        run.net.cut(master, host, both=False)
    return f"{await run.new_master(master, epoch)} elected"


async def master_etcd_in(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    """etcd's answers lost: either the master fences itself and sends fail, or an election."""
    for host in ETCD_HOSTS:
        run.net.cut(host, master, both=False)
    failed = await run.not_acknowledged()
    outcome: list[str] = []

    async def fenced_or_replaced() -> bool:
        masters = await run.masters()
        others = [h for h, info in masters.items() if h != master and info["epoch"] > epoch]
        if others:
            outcome[:] = [f"{others[0]} elected"]
            return True
        if await run.not_acknowledged() >= failed + ACKS:
            outcome[:] = [f"{master} fenced"]
            return True
        return False

    await eventually(fenced_or_replaced, f"{master} fenced or replaced", ELECTION_TIMEOUT,
                     interval=0.2)  # fmt: skip
    return outcome[0]


def slaves_of(master: str) -> list[str]:
    return [host for host in BROKER_IDS if host != master]


async def alone(run: Run, master: str) -> None:
    async def shrunk() -> bool:
        info = await run.controller(master)
        return info is not None and info.get("syncStateSet") == [BROKER_IDS[master]]

    await eventually(shrunk, f"{master} alone in the SyncStateSet", ELECTION_TIMEOUT, interval=0.2)


async def master_slaves(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    for slave in slaves_of(master):
        run.net.cut(master, slave)
    await alone(run, master)
    await run.serving(master)
    return f"{master} alone"


async def master_slaves_out(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    for slave in slaves_of(master):
        run.net.cut(master, slave, both=False)
    await alone(run, master)
    await run.serving(master)
    return f"{master} alone"


async def master_slaves_in(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    for slave in slaves_of(master):
        run.net.cut(slave, master, both=False)
    await alone(run, master)
    await run.serving(master)
    return f"{master} alone"


async def slave_etcd(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    slave = rng.choice(slaves_of(master))
    daemon = run.daemon(slave)
    before = daemon.log_text().count("etcd unreachable")
    for host in ETCD_HOSTS:
        run.net.cut(slave, host)

    def cut_off() -> bool:
        return daemon.log_text().count("etcd unreachable") > before

    await eventually(cut_off, f"{slave} cut off from etcd", ELECTION_TIMEOUT, interval=0.2)
    await run.serving(master)
    masters = await run.masters()
    assert list(masters) == [master], f"a slave cut from etcd changed the master: {masters}"
    return f"{slave} cut off, {master} still master"


async def etcd_member(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    """One etcd member (the raft leader a third of the time) cut from the other two, until it
    has noticed (it campaigns, having heard from no leader) and the group served on: brokers
    whose client used it move to another endpoint; whatever follows, the checker judges."""
    lone = rng.choice(ETCD_HOSTS)
    member = run.daemon(f"etcd-{lone}")
    campaigns = member.log_text().count(ETCD_CAMPAIGN)
    for other in ETCD_HOSTS:
        if other != lone:
            run.net.cut(lone, other)

    def noticed() -> bool:
        return member.log_text().count(ETCD_CAMPAIGN) > campaigns

    await eventually(noticed, f"{lone} campaigning alone", ELECTION_TIMEOUT, interval=0.2)
    before = await run.total_acknowledged()

    async def served() -> bool:
        return await run.total_acknowledged() >= before + 3 * ACKS

    await eventually(served, f"{3 * ACKS} sends acknowledged with {lone} cut off", ELECTION_TIMEOUT,
                     interval=0.2)  # fmt: skip
    masters = await run.masters()
    return f"{lone} cut off from etcd's quorum, {'/'.join(masters) or 'no broker'} master"


async def pause_master(run: Run, master: str, epoch: int, rng: random.Random) -> str:
    run.pause(master)
    try:
        new = await run.new_master(master, epoch)
    finally:
        run.resume_all()
    return f"{new} elected while {master} paused"


SCENARIOS: Final[dict[str, Scenario]] = {
    "master-etcd": master_etcd,
    "master-etcd-out": master_etcd_out,
    "master-etcd-in": master_etcd_in,
    "master-slaves": master_slaves,
    "master-slaves-out": master_slaves_out,
    "master-slaves-in": master_slaves_in,
    "slave-etcd": slave_etcd,
    "pause-master": pause_master,
    "etcd-member": etcd_member,
}


def schedule(rounds: int, rng: random.Random) -> list[str]:
    """Every scenario once per cycle, each cycle in a seeded order."""
    out: list[str] = []
    while len(out) < rounds:
        cycle = list(SCENARIOS)
        rng.shuffle(cycle)
        out += cycle
    return out[:rounds]


def epoch_events(cluster: NetnsCluster) -> list[Event]:
    """An epoch event per "elected master of epoch N" line of the brokers' logs (their local
    time stamps, to the millisecond)."""
    recorder = Recorder(process="logs")
    for host in BROKER_IDS:
        daemon = next(d for d in cluster.daemons if d.name == host)
        for stamp, ms, epoch in ELECTED.findall(daemon.log_text()):
            wall = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(ms) / 1000
            recorder.epoch(cluster.broker_addr(host), int(epoch), wall)
    return recorder.events


def fencing_margin(events: list[Event]) -> float | None:
    """The least time between a master's last stored acknowledgement of an epoch and the start
    of the next epoch (from the final read's store timestamps)."""
    epochs = sorted((float(e["wall"]), str(e["broker"])) for e in events if e["type"] == "epoch")
    final = [e for e in events if e.get("f") == "read" and e["type"] == "ok"]
    if len(epochs) < 2 or not final:
        return None
    stored = {(m[1], m[2]): (m[3], m[4], m[5] / 1000) for m in final[-1]["messages"]}
    acked = [e for e in events if e.get("f") == "send" and e["type"] == "ok"]
    margins = []
    for (start, master), (end, _next) in itertools.pairwise(epochs):
        last = [
            stored[(e["queue"], e["offset"])][2]
            for e in acked
            if e["broker"] == master and (e["queue"], e["offset"]) in stored
            and start <= stored[(e["queue"], e["offset"])][2] < end
        ]  # fmt: skip
        if last:
            margins.append(end - max(last))
    return min(margins) if margins else None


async def partitions(
    rounds: int,
    folder: Path,
    seed: int,
    log: Callable[[str], None] = print,
) -> PartitionReport:
    rng = random.Random(seed)
    report = PartitionReport()
    started = time.monotonic()
    cluster = NetnsCluster(Network(HOSTS, folder / "logs").build(), folder)
    history = folder / "history.jsonl"
    try:
        cluster.namesrvd()
        endpoints = cluster.etcd(ETCD_HOSTS)
        for host, broker_id in BROKER_IDS.items():
            cluster.controller_broker(host, broker_id, endpoints, *BROKER_OVERRIDES)
        agent = await cluster.client()
        run = Run(cluster, agent, log)
        first = await wait_first_master(run)
        await agent.call("create_topic", address=cluster.broker_addr(first), topic=TOPIC,
                         queues=QUEUES)  # fmt: skip
        await agent.call("load_start", path=str(history), namesrv=cluster.namesrv_addr,
                         topic=TOPIC, broker_name="broker-a", queues=QUEUES,
                         interval=SEND_INTERVAL)  # fmt: skip
        master = await run.stable()
        for number, name in enumerate(schedule(rounds, rng), 1):
            began = time.monotonic()
            info = await run.controller(master)
            assert info is not None
            try:
                what = await SCENARIOS[name](run, master, int(info["epoch"]), rng)
            finally:
                run.resume_all()
                run.net.heal()
            master = await run.stable()
            report.rounds += 1
            report.scenarios[name] += 1
            stats = await agent.call("load_stats")
            log(f"round {number} {name}: {what}; healed, {master} master "
                f"({time.monotonic() - began:.1f} s; {sum(stats['acknowledged'].values())} "
                f"acknowledged so far)")  # fmt: skip
        stats = await agent.call("load_stop")
        await agent.call("final_read", address=cluster.broker_addr(master), topic=TOPIC,
                         broker_name="broker-a", queues=QUEUES)  # fmt: skip
        await agent.close()
        events = load(history) + epoch_events(cluster)
        report.elections = sum(1 for e in events if e["type"] == "epoch") - 1
        report.fencing_margin = fencing_margin(events)
        report.history = check(events)
        log(f"load: {stats}")
    except BaseException:
        log(cluster.logs())
        raise
    finally:
        await cluster.close()
        report.seconds = time.monotonic() - started
    return report


async def wait_first_master(run: Run) -> str:
    found: list[str] = []

    async def elected() -> bool:
        masters = await run.masters()
        found[:] = list(masters)
        return len(masters) == 1

    await eventually(elected, "the group's first master", STABLE_TIMEOUT, interval=0.3)
    return found[0]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.partitions", description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"partitions seed {seed} (rerun with --seed {seed})", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="tidemq-partitions-"))
    try:
        report = asyncio.run(
            partitions(args.rounds, folder, seed, lambda line: print(line, flush=True))
        )
    except BaseException:
        print(f"the run failed: stores, logs and history kept in {folder}")
        raise
    print(report.line())
    passed = report.ok and report.rounds == args.rounds
    if passed:
        shutil.rmtree(folder)
    else:
        print(f"stores, logs and history kept in {folder}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
