"""C++ client benchmark: what users of the RocketMQ C++ client (rocketmq==0.4.4) see.

Load: `TIDEMQ_BENCH_CPP_PROCESSES` (4) processes of `cpp_sender.py`, each one C++ producer doing
`send_sync` of 1 KiB messages in a loop for `TIDEMQ_BENCH_CPP_SECONDS` (8 s) after a warm-up.
`send_sync` blocks, so each process keeps one send in flight on its own connection. Why 4: a
sender spends about 200 us of CPU per send (the binding and the native client, which signs
every request), more than the broker's 120-150, so the senders and the broker share the 2
cores of the development machine. On it, 1/2/3/4/6/8 processes gave 2.1k/3.4k/4.1k/4.0k/4.7k/
4.1k msg/s with p50 0.3/0.5/0.7/0.8/1.1/1.6 ms: the rate levels off from 3, 4 keep it while
another load takes a share of the machine, and more only queue at the broker (latency) and
take CPU the broker then lacks.

Cases, in this order, each printed with msg/s, the broker's CPU per message (user + system, as
in the broker section; "client" is the senders' own: the C++ processes', or this process's for
BrokerAPI), the send latency p50/p99 as the client sees it and, for the SYNC case, the slave's
CPU per message:

- C++ `send_sync` to an ASYNC_MASTER (namesrvd + brokerd processes);
- our Python client against the same broker: `BrokerAPI.send` with msgpack headers
  (SEND_MESSAGE_V2), the same body, properties and load shape (as many connections as C++
  processes, one send in flight on each), first as fast as it goes, then paced at the rate the
  C++ client reached, alternating with the same senders writing the C++ client's own frame
  (`cpp_shaped_request`: SEND_MESSAGE (10) with a JSON header of about 480 bytes, 16 extFields
  under their full names, booleans as "0", and AccessKey/OnsChannel/Signature even without
  credentials; msgpack's is about 190). The broker's CPU per message falls as its load rises
  (more requests per wake-up), so paced runs are the ones whose CPU per send compares, and
  only the header differs between the two paced runs: their ratio is the Result with a target
  (issue 15: JSON must be as cheap as msgpack).

  The C++ processes' own runs cost the broker more than either (printed as a ratio without a
  target), with the same requests: `perf stat` of the broker under both gave 1.05 reads and
  1.03 writes per send, 0.8 epoll waits and 0.82 context switches per send under the C++
  processes against 0.65 and 0.62-0.65 under our senders. The C++ senders spend about 200 us
  of CPU per send, four times our client, on the same 2 cores: the broker shares them with
  four busy processes, and CPU burners beside paced msgpack runs raise its figure likewise;
- C++ `send_sync` to a SYNC_MASTER with its SLAVE (brokerd processes), on fresh processes.

The native client logs under $HOME/logs/rocketmq-cpp: the senders' HOME is a temporary folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench import Result, env_int, one_broker, run_on_uvloop, temp_dir
from tests.bench.cpu import BrokerCpu, describe, user_system
from tests.bench.replicas import master_with_slave, wait_slave
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.message import SendStatus
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.store.record import encode_properties

SENDER = Path(__file__).with_name("cpp_sender.py")
# Text: the binding hands the body to the C library as a C string.
BODY = ("tidemq-cpp-bench-" * 61)[:1024]
TAGS = "bench"
QUEUES = 4  # what the C++ producer asks the broker to create a topic with
WARMUP = 50  # sends per process before the measured run: route, connection, topic creation
READY_TIMEOUT = 60.0
# The disk guard reads the space left to unprivileged users: on a shared development machine
# with a large root reserve it refuses writes above 90% while gigabytes are free. The bench
# measures sends, not the guard (which is checked every few seconds, off the send path).
BROKER_OVERRIDES = ("diskSpaceWarningLevelRatio=0.99",)
DONE_GRACE = 60.0  # beyond the run's own length
# Paced msgpack and JSON runs alternate this many times: the figure compared is a few percent,
# and the machine's speed drifts between runs.
PACED_ROUNDS = 2
REPORT_LIMIT = 1 << 27  # bytes of one report line: 7 per latency, millions of sends
# rocketmq-client-cpp 2.x: its `version` field, and a signature as long as the one it computes
# with an empty secret key (the broker reads it only with ACL on).
CPP_VERSION = 63
_OK = SendStatus.SEND_OK.name
CPP_SIGNATURE = "m1VMXCKcMInjSjQtS7/3NaOubdg="


@dataclass(frozen=True, slots=True)
class SenderReport:
    """What one `cpp_sender.py` process reported after its measured run."""

    sent: int
    failed: dict[str, int]
    started: float
    ended: float
    cpu: float
    latencies_us: list[int]

    @classmethod
    def of(cls, event: dict[str, Any]) -> SenderReport:
        return cls(
            sent=int(event["sent"]),
            failed={str(k): int(v) for k, v in event["failed"].items()},
            started=float(event["started"]),
            ended=float(event["ended"]),
            cpu=float(event["cpu"]),
            latencies_us=[int(v) for v in event["latencies_us"]],
        )


class CppSenders:
    """`cpp_sender.py` processes started together, released together, read together."""

    def __init__(self, specs: Sequence[dict[str, Any]], home: Path) -> None:
        self.specs = list(specs)
        self.home = home
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        """Start every sender and wait until each finished its warm-up."""
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(self.home)}
        for number, spec in enumerate(self.specs):
            with (self.home / f"sender-{number}.stderr").open("wb") as stderr:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(SENDER),
                    json.dumps(spec),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    env=env,
                    limit=REPORT_LIMIT,
                )
            self.processes.append(process)
        for number in range(len(self.processes)):
            await self._event(number, "ready", READY_TIMEOUT)

    def go(self) -> None:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(b"go\n")

    async def reports(self, timeout: float) -> list[SenderReport]:
        """Every sender's report; each process must then exit with status 0."""
        reports = []
        for number, process in enumerate(self.processes):
            reports.append(SenderReport.of(await self._event(number, "done", timeout)))
            code = await asyncio.wait_for(process.wait(), timeout)
            if code != 0:
                raise RuntimeError(
                    f"C++ sender {number} exited with {code}: {self._stderr(number)}"
                )
        return reports

    async def close(self) -> None:
        """Kill whatever still runs (a failed or interrupted run) and reap it."""
        for process in self.processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await process.wait()

    async def _event(self, number: int, kind: str, timeout: float) -> dict[str, Any]:
        stdout = self.processes[number].stdout
        assert stdout is not None
        try:
            line = await asyncio.wait_for(stdout.readline(), timeout)
        except TimeoutError:
            raise RuntimeError(
                f"C++ sender {number}: no {kind!r} within {timeout:.0f} s: {self._stderr(number)}"
            ) from None
        event: dict[str, Any] = json.loads(line) if line else {"event": "exited"}
        if event["event"] != kind:
            raise RuntimeError(f"C++ sender {number}: {event} instead of {kind!r}")
        return event

    def _stderr(self, number: int) -> str:
        path = self.home / f"sender-{number}.stderr"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


@contextlib.asynccontextmanager
async def cpp_senders(specs: Sequence[dict[str, Any]], home: Path) -> AsyncIterator[CppSenders]:
    """Started and warmed-up senders, killed on the way out whatever happened."""
    senders = CppSenders(specs, home)
    try:
        await senders.start()
        yield senders
    finally:
        await senders.close()


def sender_specs(
    namesrv: str, topic: str, processes: int, seconds: float, messages: int | None = None
) -> list[dict[str, Any]]:
    """Specs of `processes` senders of one producer group (see cpp_sender.py)."""
    return [
        {
            "namesrv": namesrv,
            "group": f"CppBenchPG-{topic}",
            "topic": topic,
            "body": BODY,
            "tags": TAGS,
            "warmup": WARMUP,
            "messages": messages,
            "seconds": seconds,
        }
        for _ in range(processes)
    ]


@dataclass(frozen=True, slots=True)
class Case:
    """One measured run: sends that succeeded, their rate, CPU per message, latency."""

    sent: int
    failed: dict[str, int]
    rate: float
    cpu: dict[str, float]  # BrokerCpu.per_message, with "client" the senders' own CPU
    p50_ms: float
    p99_ms: float

    @property
    def broker_us(self) -> float:
        return self.cpu["broker_user"] + self.cpu["broker_system"]

    def line(self, label: str) -> str:
        failed = f", failed {self.failed}" if self.failed else ""
        return (
            f"{label:<34} {self.rate:>8,.0f} msg/s  p50 {self.p50_ms:.2f} ms, "
            f"p99 {self.p99_ms:.2f} ms{failed}\n{'':<36}{describe(self.cpu)}"
        )


def percentiles_ms(latencies_us: list[int]) -> tuple[float, float]:
    """p50 and p99 of `latencies_us`, in milliseconds (nan when empty)."""
    if not latencies_us:
        return float("nan"), float("nan")
    ordered = sorted(latencies_us)
    return ordered[len(ordered) // 2] / 1000, ordered[int(len(ordered) * 0.99)] / 1000


def cpp_case(reports: list[SenderReport], before: BrokerCpu, after: BrokerCpu) -> Case:
    """The figures of one C++ run from the senders' reports and the broker's CPU around it."""
    sent = sum(r.sent for r in reports)
    failed: dict[str, int] = {}
    for report in reports:
        for status, count in report.failed.items():
            failed[status] = failed.get(status, 0) + count
    latencies = [v for r in reports for v in r.latencies_us]
    elapsed = max(r.ended for r in reports) - min(r.started for r in reports)
    cpu = after.per_message(before, max(sent, 1))
    cpu["client"] = sum(r.cpu for r in reports) / max(sent, 1) * 1e6
    p50, p99 = percentiles_ms(latencies)
    return Case(sent, failed, sent / max(elapsed, 1e-9), cpu, p50, p99)


async def run_cpp(
    namesrv: str, broker_pid: int, topic: str, processes: int, seconds: float, home: Path
) -> Case:
    async with cpp_senders(sender_specs(namesrv, topic, processes, seconds), home) as senders:
        before = BrokerCpu.now(broker_pid)
        senders.go()
        reports = await senders.reports(seconds + DONE_GRACE)
        after = BrokerCpu.now(broker_pid)
    return cpp_case(reports, before, after)


def _properties() -> str:
    return encode_properties(
        {"TAGS": TAGS, "WAIT": "true", "UNIQ_KEY": os.urandom(16).hex().upper()}
    )


def _python_header(topic: str, queue_id: int) -> SendMessageRequestHeader:
    # What the C++ producer puts in its header, in msgpack instead of JSON.
    return SendMessageRequestHeader(
        producer_group=f"PyBenchPG-{topic}",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=_properties(),
        default_topic_queue_nums=QUEUES,
    )


def cpp_shaped_ext(topic: str, queue_id: int) -> dict[str, str]:
    """SEND_MESSAGE's extFields as rocketmq-client-cpp 2.x writes them: the long keys, booleans
    as "0", and the ACL fields it adds without credentials."""
    return {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": CPP_SIGNATURE,
        "batch": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": str(QUEUES),
        "flag": "0",
        "producerGroup": f"PyBenchPG-{topic}",
        "properties": _properties(),
        "queueId": str(queue_id),
        "reconsumeTimes": "0",
        "sysFlag": "0",
        "topic": topic,
        "unitMode": "0",
    }


def cpp_shaped_request(ext: dict[str, str], body: bytes) -> RemotingCommand:
    """The request the C++ client writes: a JSON header with `ext`, its language and version."""
    # plain ints, as RemotingCommand.request makes them: the compiled encoder takes only those
    return RemotingCommand(
        int(RequestCode.SEND_MESSAGE),
        int(LanguageCode.CPP),
        CPP_VERSION,
        0,
        0,
        "",
        ext,
        body,
        SerializeType.JSON,
    )


Send = Callable[[BrokerAPI, str, int, bytes], Awaitable[str]]


def send_function(topic: str, cpp_json: bool) -> Send:
    """One send of the bench's Python senders; the status name. Each queue's header is built
    once (as its C++ counterpart's fields would be), so that the senders' own CPU, which
    shares the cores with the broker, is the same for both header forms."""
    if cpp_json:
        exts = [cpp_shaped_ext(topic, queue_id) for queue_id in range(QUEUES)]

        async def send_json(api: BrokerAPI, address: str, queue_id: int, body: bytes) -> str:
            request = cpp_shaped_request(exts[queue_id], body)
            response = await api.remoting.invoke(address, request, 30)
            return _OK if response.code == ResponseCode.SUCCESS else str(response.code)

        return send_json
    headers = [_python_header(topic, queue_id) for queue_id in range(QUEUES)]

    async def send_msgpack(api: BrokerAPI, address: str, queue_id: int, body: bytes) -> str:
        return (await api.send(address, headers[queue_id], body, timeout=30)).status.name

    return send_msgpack


async def run_python(
    address: str,
    broker_pid: int,
    topic: str,
    connections: int,
    seconds: float,
    rate: float | None = None,
    *,
    cpp_json: bool = False,
) -> Case:
    """Our client: `connections` BrokerAPI instances, one send in flight on each.

    With `rate`, each connection starts its sends on a fixed schedule that adds up to `rate`
    msg/s (a send that is late starts at once), as fast as it can otherwise. With `cpp_json`,
    each request is the one the C++ client writes (`cpp_shaped_request`) instead of
    SEND_MESSAGE_V2 with a msgpack header: the same load generator, only the header differs.
    """
    body = BODY.encode()
    apis = [BrokerAPI(timeout=30) for _ in range(connections)]
    send = send_function(topic, cpp_json)
    latencies: list[int] = []
    failed: dict[str, int] = {}
    sent = 0

    async def sender(api: BrokerAPI, number: int, deadline: float) -> None:
        nonlocal sent
        queue_id = number
        interval = connections / rate if rate else 0.0
        next_at = time.perf_counter() + interval * number / connections
        while True:
            queue_id = (queue_id + 1) % QUEUES
            if interval:
                if (wait := next_at - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                next_at += interval
            before = time.perf_counter()
            status = await send(api, address, queue_id, body)
            after = time.perf_counter()
            latencies.append(int((after - before) * 1e6))
            if status == _OK:
                sent += 1
            else:
                failed[status] = failed.get(status, 0) + 1
            if after >= deadline:
                return

    try:
        for number, api in enumerate(apis):
            for _ in range(WARMUP):
                await send(api, address, number % QUEUES, body)
        before = BrokerCpu.now(broker_pid)
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(*(sender(api, n, deadline) for n, api in enumerate(apis)))
        elapsed = time.perf_counter() - started
        cpu = BrokerCpu.now(broker_pid).per_message(before, max(sent, 1))
    finally:
        for api in apis:
            await api.close()
    p50, p99 = percentiles_ms(latencies)
    return Case(sent, failed, sent / elapsed, cpu, p50, p99)


@dataclass(frozen=True, slots=True)
class AsyncMasterCases:
    cpp: Case
    python: Case  # msgpack, as fast as it goes
    paced_msgpack: list[Case]  # at the C++ rate, alternating with paced_json
    paced_json: list[Case]


def broker_us_per_send(cases: Sequence[Case], part: str | None = None) -> float:
    """The broker's CPU per send over several runs (weighted by their sends)."""
    total = sum(c.sent for c in cases)
    if part is None:
        return sum(c.broker_us * c.sent for c in cases) / max(total, 1)
    return sum(c.cpu[part] * c.sent for c in cases) / max(total, 1)


async def _async_master(
    namesrv: Daemon, broker: Daemon, processes: int, seconds: float, home: Path
) -> AsyncMasterCases:
    assert broker.pid is not None
    cpp = await run_cpp(namesrv.address, broker.pid, "CppBenchAsync", processes, seconds, home)
    print(cpp.line(f"C++ send_sync, {processes} processes:"), flush=True)
    python = await run_python(broker.address, broker.pid, "PyBenchAsync", processes, seconds)
    print(python.line(f"BrokerAPI.send, {processes} connections:"), flush=True)
    paced_msgpack: list[Case] = []
    paced_json: list[Case] = []
    for _ in range(PACED_ROUNDS):
        paced_msgpack.append(
            await run_python(
                broker.address, broker.pid, "PyBenchAsync", processes, seconds, cpp.rate
            )
        )
        print(paced_msgpack[-1].line("  the same, paced at the C++ rate:"), flush=True)
        paced_json.append(
            await run_python(
                broker.address,
                broker.pid,
                "PyBenchAsync",
                processes,
                seconds,
                cpp.rate,
                cpp_json=True,
            )
        )
        print(paced_json[-1].line("  paced, the C++ client's JSON frame:"), flush=True)
    return AsyncMasterCases(cpp, python, paced_msgpack, paced_json)


async def _sync_master(
    namesrv: Daemon, master: Daemon, slave: Daemon, processes: int, seconds: float, home: Path
) -> Case:
    assert master.pid is not None and slave.pid is not None
    await wait_slave(master.address)
    slave_before = user_system(slave.pid)
    cpp = await run_cpp(namesrv.address, master.pid, "CppBenchSync", processes, seconds, home)
    slave_ticks = sum(user_system(slave.pid)) - sum(slave_before)
    print(cpp.line(f"C++ send_sync, {processes} processes:"), flush=True)
    slave_us = slave_ticks / os.sysconf("SC_CLK_TCK") / max(cpp.sent, 1) * 1e6
    print(f"{'':<36}slave CPU {slave_us:.1f} us/msg", flush=True)
    return cpp


def run() -> list[Result]:
    processes = env_int("TIDEMQ_BENCH_CPP_PROCESSES", 4)
    seconds = env_int("TIDEMQ_BENCH_CPP_SECONDS", 8)
    with temp_dir("cpp-home") as home:
        print("ASYNC_MASTER (namesrvd + brokerd), 1 KiB bodies:", flush=True)
        with one_broker("cpp-async", *BROKER_OVERRIDES) as (namesrv, broker):
            cases = run_on_uvloop(_async_master(namesrv, broker, processes, seconds, home))
        print("SYNC_MASTER + SLAVE (namesrvd + 2 brokerd), 1 KiB bodies:", flush=True)
        with temp_dir("cpp-sync") as folder:
            group = ProcessGroup(folder / "logs")
            try:
                namesrv = group.namesrvd(name="namesrvd")
                master, slave = master_with_slave(
                    group, namesrv, folder, "SYNC_MASTER", "cpp", *BROKER_OVERRIDES
                )
                cpp_sync = run_on_uvloop(
                    _sync_master(namesrv, master, slave, processes, seconds, home)
                )
            finally:
                group.stop_all()
    cpp_async = cases.cpp
    msgpack_us = broker_us_per_send(cases.paced_msgpack)
    json_us = broker_us_per_send(cases.paced_json)
    header_ratio = json_us / msgpack_us
    header_user_ratio = broker_us_per_send(cases.paced_json, "broker_user") / broker_us_per_send(
        cases.paced_msgpack, "broker_user"
    )
    cpp_ratio = cpp_async.broker_us / msgpack_us
    print(
        f"broker CPU per send at the C++ rate, the C++ client's JSON frame / msgpack, same "
        f"senders: {header_ratio:.2f} (user CPU alone: {header_user_ratio:.2f}); the C++ "
        f"processes' own sends / msgpack: {cpp_ratio:.2f}"
    )
    return [
        Result("C++ send_sync, ASYNC_MASTER", cpp_async.rate, "msg/s"),
        Result("C++ send_sync, ASYNC_MASTER: broker CPU per message", cpp_async.broker_us, "us"),
        Result("C++ send_sync, ASYNC_MASTER: p50", cpp_async.p50_ms, "ms"),
        Result("C++ send_sync, ASYNC_MASTER: p99", cpp_async.p99_ms, "ms"),
        Result("C++ send_sync, SYNC_MASTER", cpp_sync.rate, "msg/s"),
        Result("C++ send_sync, SYNC_MASTER: broker CPU per message", cpp_sync.broker_us, "us"),
        Result("C++ send_sync, SYNC_MASTER: p50", cpp_sync.p50_ms, "ms"),
        Result("C++ send_sync, SYNC_MASTER: p99", cpp_sync.p99_ms, "ms"),
        Result("BrokerAPI.send, same shape", cases.python.rate, "msg/s"),
        Result("BrokerAPI.send, same shape: broker CPU per message", cases.python.broker_us, "us"),
        Result("BrokerAPI.send at the C++ rate: broker CPU", msgpack_us, "us"),
        Result("the C++ client's JSON frame at the C++ rate: broker CPU", json_us, "us"),
        Result(
            "broker CPU per send, C++ JSON frame / msgpack, same senders and rate",
            header_ratio,
            "ratio",
            1.0,
            higher_is_better=False,
            note="issue 15: JSON as cheap as msgpack",
        ),
        Result("broker user CPU per send, C++ JSON frame / msgpack", header_user_ratio, "ratio"),
        Result("broker CPU per send, C++ processes / msgpack, same rate", cpp_ratio, "ratio"),
    ]
