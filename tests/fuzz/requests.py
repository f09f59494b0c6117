"""Request-level fuzzing of live daemons: well-formed requests with hostile field values.

A run starts a name server, a SYNC_MASTER and its SLAVE (tests/fuzz/request_cluster.py, stores
in a sandbox), then for its time budget sends seeded scenarios (tests/fuzz/request_steps.py):
single requests of every code the daemons serve (tests/fuzz/request_catalog.py) with hostile
values in each field (tests/fuzz/request_values.py) and bodies (request_bodies.py), and
sequences of create topic, send, pull, consumer send-back, offsets, delete topic, reset offset,
heartbeat, lock and group config mixing good and hostile values, in the JSON, msgpack and
ROCKETMQ header serialisations.

Invariants, and where they are checked:

- after every request: it got an answer (a well-formed frame is never met with a closed
  connection or silence; a held pull may outlive its wait), no daemon died, nothing appeared or
  vanished outside the stores' roots (the sandbox, the daemons' working directory, and
  entries carrying the fuzzer's mark in the home folder, /tmp and /);
- every `EPISODE` requests: no daemon holds more than `RSS_LIMIT` of memory, no traceback in
  a daemon's log (a processor that raised on a value it should have refused), dispatch caught
  up on master and slave (dispatchBehindBytes 0);
- at the end: dispatch caught up; every acknowledged good message pullable from master and
  slave at its queue offset; both brokers stop on SIGTERM with status 0, start again, serve a
  send and a pull, and still hold every acknowledged message.

With `lanes` > 1, that many clients fuzz at once, each on its own connections with its own
seeded scenarios (the first lane sends every code of the catalog first); they meet at each
episode's checks. Their requests interleave as the daemons answer them, so a run is not
repeatable step by step, and a finding's saved requests replay one after another.

- every `EPISODE` requests too: the brokers' topic and group tables hold only names RocketMQ
  allows (`^[%|a-zA-Z0-9_-]+$`, 127 characters for a topic, 255 for a group).

A finding keeps the requests that led to it (the episode so far; for a daemon that died or
hung, a stopped dispatch or a lost message, the whole run) as a JSON file `<kind>-<n>.json` in
the output folder (tests/fuzz/request_report.py); `replay(path)` sends them to a fresh cluster
and checks the same invariants. Saved ones live in tests/fuzz/regressions/requests
(tests/fuzz/request_regressions.py writes them). A cluster that broke makes way for a fresh one
while the time budget lasts. `names=False` (`--legal-names`) keeps every name legal, to look
for the other bugs while the name ones are known.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Final

from tests.fuzz.request_cluster import FuzzCluster
from tests.fuzz.request_report import Finding, Report, save
from tests.fuzz.request_steps import GOOD_GROUPS, GOOD_TOPICS, QUEUES, Scenarios, Step
from tests.fuzz.request_wire import Answer, FuzzConnection, typed_frame
from tests.support.conditions import eventually
from tests.support.ha_processes import wait_transfer
from tests.support.processes import Daemon
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.errors import BrokerResponseError, ConnectError, RequestTimeoutError
from tidemq.client.message import SendStatus
from tidemq.client.protocol.headers import PULL_FLAG_SUSPEND
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import EncodeError
from tidemq.client.remoting.frame import encode_command

__all__ = ["Finding", "Report", "replay", "run"]

EPISODE: Final = 40  # requests between the log and dispatch checks
ANSWER_TIMEOUT: Final = 20.0  # seconds a daemon has to answer one request (2 busy cores)
HELD_PULL_WAIT: Final = 2.0  # a suspended pull is not waited for longer than this
RSS_LIMIT: Final = 1 << 30  # a daemon's resident memory (test stores: 4 MiB CommitLog files)
VERIFY_GROUP: Final = "fz-verify"  # the checks' own consumer group, never fuzzed
REGRESSIONS: Final = Path(__file__).resolve().parent / "regressions" / "requests"
_TRACEBACK: Final = "Traceback (most recent call last):"
# RocketMQ's TopicValidator: the characters of a topic or group name, and their longest
_LEGAL_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 255
# findings after which the daemons' state is suspect: the rest of the run would only echo them
_STATEFUL: Final = frozenset({"no-answer", "died", "dispatch", "closed"})


def _shape(name: str) -> str:
    """A name's kind, for a finding's signature: what is illegal in it."""
    if len(name) > TOPIC_MAX_LENGTH:
        return "too long"
    bad = sorted({c for c in name if not _LEGAL_NAME.fullmatch(c)})
    return "characters " + "".join(bad)[:20] if bad else "empty"


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def _answer_name(answer: Answer) -> str:
    if answer.response is None:
        return "closed" if answer.closed else "timeout"
    try:
        return ResponseCode(answer.response.code).name
    except ValueError:
        return str(answer.response.code)


def _frame(step: Step, opaque: int) -> bytes:
    serialize = SerializeType(step.serialize)
    if step.typed:
        return typed_frame(step.code, opaque, step.ext, step.body, serialize)
    command = RemotingCommand.request(
        step.code, {str(k): str(v) for k, v in step.ext.items()}, step.body,
        opaque=opaque, serialize_type=serialize,
    )  # fmt: skip
    return encode_command(command)


def _held_pull(step: Step) -> bool:
    """A pull the broker may hold (long polling) for as long as it asks."""
    if step.code != RequestCode.PULL_MESSAGE:
        return False
    try:
        return bool(int(str(step.ext.get("sysFlag", "0"))) & PULL_FLAG_SUSPEND)
    except ValueError:
        return False


class Lane:
    """One fuzzing client's connections, one per daemon."""

    def __init__(self) -> None:
        self.connections: dict[str, FuzzConnection] = {}

    async def close(self) -> None:
        for connection in self.connections.values():
            await connection.close()
        self.connections.clear()


class Session:
    """One cluster under fuzz: sends steps, checks invariants, collects findings."""

    def __init__(self, cluster: FuzzCluster, report: Report) -> None:
        self.cluster = cluster
        self.report = report
        self.lane = Lane()  # the single client's, and the setup's and checks'
        self.lanes: list[Lane] = [self.lane]
        self.opaque = 0
        self.episode: list[Step] = []
        self.all_steps: list[Step] = []
        self.tracked: dict[tuple[str, int, int], bytes] = {}
        self.log_seen: dict[str, int] = {}
        self.malformed: dict[str, int] = {}  # "malformed frame" lines explained per daemon
        self.illegal: set[tuple[str, str, str]] = set()  # names checked in the brokers' tables
        self.seen: set[str] = set()
        self.api = BrokerAPI(timeout=ANSWER_TIMEOUT)
        self.broken = False  # a daemon died or dispatch stopped: the rest would only echo it

    def address(self, target: str) -> tuple[str, int]:
        daemon = getattr(self.cluster, target)
        assert daemon is not None
        return daemon.host, daemon.port

    def _connection(self, lane: Lane, target: str) -> FuzzConnection:
        host, port = self.address(target)
        connection = lane.connections.get(target)
        if connection is None or connection.port != port:
            connection = lane.connections[target] = FuzzConnection(host, port)
        return connection

    def find(self, kind: str, detail: str, steps: list[Step] | None = None, key: str = "") -> None:
        """Record a finding with the requests that led to it: the episode's, or for a broken
        daemon (its state may come from any earlier request) the whole run's."""
        if steps is None:
            steps = self.all_steps if kind in _STATEFUL else self.episode
        detail = detail.replace(str(self.cluster.base), "<base>")
        self.report.findings.append(Finding(kind, detail, list(steps), key))
        if kind in _STATEFUL:
            self.broken = True

    def hung(self, step: Step) -> str:
        """The stack of a daemon that did not answer: SIGABRT makes faulthandler print it."""
        daemon = getattr(self.cluster, step.target)
        if daemon is None or not daemon.running:
            return ""
        daemon.signal(signal.SIGABRT, timeout=10)
        text = daemon.log_text()
        at = text.rfind("Fatal Python error")
        frames = [x.strip() for x in text[at:].splitlines() if x.strip().startswith("File ")]
        # the idle worker threads' frames first: the event loop's are what hangs
        ours = [f for f in frames if "/concurrent/" not in f and "/threading.py" not in f]
        return " | ".join(ours[:6])

    # --- sending --------------------------------------------------------------------------

    async def send(self, step: Step, lane: Lane | None = None) -> Answer:
        self.opaque += 1
        opaque = self.opaque
        try:
            frame = _frame(step, opaque)
        except EncodeError:
            return Answer(None)  # the client codec refuses it: nothing went out
        self.episode.append(step)
        self.all_steps.append(step)
        held = _held_pull(step)
        connection = self._connection(lane or self.lane, step.target)
        answer = await connection.exchange(
            frame, opaque, HELD_PULL_WAIT if held else ANSWER_TIMEOUT
        )
        self.report.requests += 1
        self.report.per_code[_code_name(step.code)] += 1
        per = self.report.seconds_per_code
        per[_code_name(step.code)] = per.get(_code_name(step.code), 0.0) + answer.seconds
        self.report.answers[_answer_name(answer)] += 1
        if answer.timeout and held:
            await connection.close()  # the held pull is answered later, to nobody
        elif answer.timeout:
            where = self.hung(step)
            self.find("no-answer", f"{_code_name(step.code)} to {step.target}: no answer; {where}")
        elif answer.closed and not await self._malformed_logged(step):
            self.find("closed", f"{_code_name(step.code)} to {step.target}: connection closed")
        self._record(step, answer)
        self.check_after_request(step)
        return answer

    async def _malformed_logged(self, step: Step) -> bool:
        """Whether the daemon logged a malformed frame that no other close explained: the one
        reason to close a connection (its log line may come a moment after the close). Each
        close takes one line, so closes of lanes fuzzing at once are each explained once."""
        daemon: Daemon | None = getattr(self.cluster, step.target)
        if daemon is None:
            return False

        def logged() -> bool:
            explained = self.malformed.get(daemon.name, 0)
            return daemon.log_text().count("malformed frame") > explained

        try:
            await eventually(logged, "a malformed-frame line", 2.0, interval=0.05)
        except AssertionError:
            return False
        self.malformed[daemon.name] = self.malformed.get(daemon.name, 0) + 1
        return True

    def _record(self, step: Step, answer: Answer) -> None:
        response = answer.response
        if not step.track or response is None or response.code != ResponseCode.SUCCESS:
            return
        ext = response.ext_fields
        key = (str(step.ext["b"]), int(ext["queueId"]), int(ext["queueOffset"]))
        self.tracked[key] = step.body

    def check_after_request(self, step: Step) -> None:
        appeared, vanished = self.cluster.watch.changes()
        if appeared or vanished:
            detail = f"{_code_name(step.code)}: appeared {appeared[:5]} vanished {vanished[:5]}"
            self.find("outside-store", detail)
            self.cluster.watch.reset()  # report each change once
        for dead in self.cluster.dead():
            self.find("died", f"after {_code_name(step.code)}: {dead}")

    # --- periodic checks ------------------------------------------------------------------

    def scan_logs(self) -> None:
        for name, text in self.cluster.logs_text().items():
            start = self.log_seen.get(name, 0)
            self.log_seen[name] = len(text)
            lines = text[start:].splitlines()
            for i, line in enumerate(lines):
                if line.strip() != _TRACEBACK:
                    continue
                cause = lines[i - 1] if i else ""
                cause = cause.split(": ", 1)[-1] if ": " in cause else cause
                error = next(
                    (x for x in lines[i + 1 :] if x and not x.startswith((" ", "Traceback"))),
                    "?",
                )
                self.find("traceback", f"{name.rsplit('-', 1)[0]}: {cause[:120]} -> {error[:160]}")

    async def dispatch_behind(self, target: str) -> int | None:
        host, port = self.address(target)
        try:
            response = await self.api.call(
                f"{host}:{port}", self.api.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            )
        except (BrokerResponseError, ConnectError, RequestTimeoutError):
            return None
        table = json.loads(bytes(response.body)).get("table", {})
        return int(table.get("dispatchBehindBytes", "-1"))

    async def check_dispatch(self, timeout: float = 20.0) -> None:
        for target in ("master", "slave"):
            behind: int | None = None

            async def caught_up(target: str = target) -> bool:
                nonlocal behind
                behind = await self.dispatch_behind(target)
                return behind == 0

            try:
                await eventually(caught_up, f"dispatch on {target}", timeout, interval=0.1)
            except AssertionError:
                self.find("dispatch", f"dispatch stopped on {target}: {behind} bytes behind")

    async def check_names(self) -> None:
        """The brokers' topic and group tables hold only names RocketMQ allows: whatever a
        request carried, no path, control character or over-long name got in (a name is a
        folder and a file name in the store)."""
        tables = (
            (RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable", "topic", TOPIC_MAX_LENGTH),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable", "group",
             GROUP_MAX_LENGTH),
        )  # fmt: skip
        for target in ("master", "slave"):
            for code, table, what, longest in tables:
                try:
                    response = await self.api.call(self.addr(target), self.api.request(code))
                    names = json.loads(bytes(response.body)).get(table, {})
                except (BrokerResponseError, ConnectError, RequestTimeoutError, ValueError):
                    continue  # a daemon that does not answer is another finding
                for name in names:
                    if (target, what, name) in self.illegal:
                        continue
                    self.illegal.add((target, what, name))
                    if not _LEGAL_NAME.fullmatch(name) or len(name) > longest:
                        self.find(
                            "illegal-name",
                            f"{target}'s {what} table holds {name[:200]!r} ({len(name)} chars)",
                            key=f"{target} {what} {_shape(name)}",
                        )

    def check_memory(self) -> None:
        """No daemon grew past `RSS_LIMIT`: hostile sizes must not buy memory."""
        for daemon in (self.cluster.namesrv, self.cluster.master, self.cluster.slave):
            if daemon is None or daemon.pid is None or not daemon.running:
                continue
            try:
                status = Path(f"/proc/{daemon.pid}/status").read_text()
            except OSError:
                continue
            found = re.search(r"VmRSS:\s+(\d+) kB", status)
            rss = int(found.group(1)) * 1024 if found else 0
            if rss > RSS_LIMIT:
                self.find("memory", f"{daemon.name} holds {rss >> 20} MiB", key=daemon.name)

    async def end_episode(self) -> None:
        self.check_memory()
        self.scan_logs()
        await self.check_dispatch()
        await self.check_names()
        self.episode = []

    # --- the end of a run -------------------------------------------------------------------

    async def setup(self) -> None:
        """The good topics and groups the scenarios use (recorded: a replay makes them too)."""
        for topic in GOOD_TOPICS:
            await self.send(_create_topic(topic))
        for group in (*GOOD_GROUPS, VERIFY_GROUP):
            body = json.dumps({"groupName": group, "retryQueueNums": 1}).encode()
            await self.send(Step("master", RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                 SerializeType.JSON, {}, body, op="setup"))  # fmt: skip
        await self.end_episode()

    async def restore_topics(self) -> None:
        """Give the good topics back their configs: a hostile perm or queue count is an
        admin's right, and would hide the messages the checks look for."""
        for topic in GOOD_TOPICS:
            config = TopicConfig(topic, QUEUES, QUEUES)
            await self.api.create_topic(self.addr("master"), config)

    def addr(self, target: str) -> str:
        host, port = self.address(target)
        return f"{host}:{port}"

    async def check_tracked(self, target: str) -> None:
        """Every acknowledged good message can be pulled from `target` at its offset."""
        by_queue: dict[tuple[str, int], dict[int, bytes]] = {}
        for (topic, queue, offset), body in self.tracked.items():
            by_queue.setdefault((topic, queue), {})[offset] = body
        for (topic, queue), expected in sorted(by_queue.items()):
            found = await self._pull_all(target, topic, queue, max(expected) + 1)
            lost = sorted(o for o, body in expected.items() if found.get(o) != body)
            if lost:
                self.find(
                    "lost",
                    f"{len(lost)} acknowledged messages of {topic}/{queue} not pullable from "
                    f"{target} (offsets {lost[:5]})",
                    self.all_steps,
                )

    async def _pull_all(self, target: str, topic: str, queue: int, end: int) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        offset = 0
        deadline = time.monotonic() + 15
        while offset < end and time.monotonic() < deadline:
            header = pull_header(topic, queue, offset, group=VERIFY_GROUP)
            try:
                pulled = await self.api.pull(self.addr(target), header)
            except (BrokerResponseError, ConnectError, RequestTimeoutError):
                await asyncio.sleep(0.2)  # a slave that does not know the topic yet
                continue
            if pulled.status is not PullStatus.FOUND:
                await asyncio.sleep(0.05)  # replication on its way: pull again
                offset = max(offset, pulled.next_begin_offset)
                continue
            for message in pulled.messages:
                found[message.queue_offset] = bytes(message.body)
            offset = pulled.next_begin_offset
        return found

    async def check_restart(self) -> None:
        codes = self.cluster.stop_brokers()
        for name, code in codes.items():
            if code != 0:
                self.find("restart", f"{name} exited with status {code} on SIGTERM", [])
        try:
            self.cluster.start_brokers()
        except Exception as exc:
            self.find("restart", f"a broker did not start again: {str(exc)[:300]}", [])
            self.broken = True
            return
        for lane in self.lanes:
            await lane.close()
        master, slave = self.cluster.master, self.cluster.slave
        assert master is not None and slave is not None
        try:
            await wait_transfer(self.api, master, 20)
            topic = "fz-restart"
            await self.api.create_topic(self.addr("master"), TopicConfig(topic, 1, 1))
            sent = await self.api.send(self.addr("master"), send_header(topic, 0), b"after")
            if sent.status is not SendStatus.SEND_OK:
                self.find("restart", f"a send after the restart: {sent.status.name}", [])
            for target in ("master", "slave"):
                got = await self._pull_all(target, topic, 0, sent.queue_offset + 1)
                if got.get(sent.queue_offset) != b"after":
                    self.find("restart", f"{target}: a message sent after the restart "
                                         "is not pullable", [])  # fmt: skip
        except (AssertionError, BrokerResponseError, ConnectError, RequestTimeoutError) as exc:
            self.find("restart", f"after the restart: {type(exc).__name__}: {exc}"[:300], [])

    async def finish(self, restart: bool = True) -> None:
        await self.end_episode()
        if self.broken:
            return
        try:
            await self.restore_topics()
        except (BrokerResponseError, ConnectError, RequestTimeoutError) as exc:
            self.find("lost", f"the good topics cannot be restored: {exc}", self.all_steps)
            return
        self.report.tracked = len(self.tracked)
        for target in ("master", "slave"):
            await self.check_tracked(target)
        if restart:
            await self.check_restart()
            if not self.broken:
                await self.check_dispatch(20)
                for target in ("master", "slave"):
                    await self.check_tracked(target)
        self.scan_logs()

    async def close(self) -> None:
        for lane in self.lanes:
            await lane.close()
        await self.api.close()


def _create_topic(topic: str) -> Step:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
           "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
    return Step("master", RequestCode.UPDATE_AND_CREATE_TOPIC, SerializeType.JSON, ext, op="setup")


async def _fuzz_lane(
    session: Session, lane: Lane, scenarios: Scenarios, requests: int, deadline: float
) -> None:
    """Scenarios on `lane` until it sent `requests` (a scenario is finished), or time is up."""
    sent = 0
    while sent < requests and not session.broken:
        if time.monotonic() >= deadline and not scenarios.first_pass:
            return
        scenario = scenarios.next()
        try:
            step = next(scenario)
            while True:
                answer = await session.send(step, lane)
                sent += 1
                step = scenario.send(answer)
        except StopIteration:
            pass


async def _fuzz(session: Session, lanes: list[tuple[Lane, Scenarios]], deadline: float) -> None:
    # Past the deadline only to finish the first pass over the catalog (the first lane's):
    # every code is sent once, however slow the machine.
    first = lanes[0][1]
    share = max(1, EPISODE // len(lanes))
    while (time.monotonic() < deadline or first.first_pass) and not session.broken:
        await asyncio.gather(
            *(_fuzz_lane(session, lane, scenarios, share, deadline) for lane, scenarios in lanes)
        )
        await session.end_episode()


async def _fuzz_cluster(
    cluster: FuzzCluster, report: Report, seed: int, deadline: float, names: bool, lanes: int
) -> bool:
    """Fuzz one started cluster until `deadline`, then check it; True when it broke."""
    session = Session(cluster, report)
    try:
        await session.setup()
        clients = []
        for n in range(lanes):
            lane = session.lane if n == 0 else Lane()
            if n:
                session.lanes.append(lane)
            # The first lane's seed is the single client's: a one-lane run is as before.
            rng = random.Random(f"{seed}/{cluster.base.name}" + (f"/{n}" if n else ""))
            clients.append((lane, Scenarios(rng, cluster.victims, f"fz{seed}", names=names)))
        await _fuzz(session, clients, deadline)
        await session.finish()
    finally:
        await session.close()
    return session.broken


def run(
    seed: int,
    seconds: float,
    base: Path,
    out: Path | None = None,
    *,
    names: bool = True,
    lanes: int = 1,
) -> Report:
    """Fuzz for `seconds` from `seed` on clusters under `base`; findings saved under `out`.
    `names`=False sends no hostile names (topics, groups, keys), to look for other bugs while
    the name ones are known. `lanes` clients fuzz at once.

    A cluster that broke (a daemon died or hung, dispatch stopped) makes way for a fresh one
    while time remains: what it would answer next only echoes the finding."""
    os.environ["PYTHONFAULTHANDLER"] = "1"  # a hung daemon gets SIGABRT: its stack is logged
    report = Report(seed)
    started = time.monotonic()
    for n in itertools.count():
        cluster = FuzzCluster(base / f"cluster-{n}")
        try:
            cluster.start()
            broken = asyncio.run(
                _fuzz_cluster(cluster, report, seed, started + seconds, names, lanes)
            )
        finally:
            cluster.stop()
        if not broken or time.monotonic() - started >= seconds:
            break
    report.seconds = time.monotonic() - started
    if out is not None and report.findings:
        save(report, out)
    return report


def load_steps(path: Path) -> list[Step]:
    return [Step.from_json(s) for s in json.loads(path.read_text())["steps"]]


async def _replay(steps: list[Step], cluster: FuzzCluster, report: Report) -> None:
    session = Session(cluster, report)
    try:
        # The same sends on a fresh store place the same bytes at the same offsets, so a
        # recorded send-back's offset names the same message again.
        for step in steps:
            await session.send(step)
            if session.broken:
                break
        await session.finish()
    finally:
        await session.close()


def replay(path: Path, base: Path) -> Report:
    """Send a saved input's requests to a fresh cluster under `base`; check the invariants."""
    os.environ["PYTHONFAULTHANDLER"] = "1"
    report = Report(None)
    started = time.monotonic()
    cluster = FuzzCluster(base)
    try:
        cluster.start()
        asyncio.run(_replay(load_steps(path), cluster, report))
    finally:
        cluster.stop()
        report.seconds = time.monotonic() - started
    return report
