"""gRPC request fuzzing of a live brokerd: every MessagingService RPC with hostile field values.

A run starts namesrvd and one brokerd (its store in a sandbox laid out as the remoting
fuzzer's, tests/fuzz/request_cluster.py), then for its time budget sends seeded calls
(tests/fuzz/grpc_steps.py) over a real gRPC channel: every RPC, the Telemetry stream with
several commands, hostile names, numbers, durations, receipt handles, bodies, bad UTF-8 and
damaged bytes.

Invariants, and where they are checked:

- after every call: it ended with gRPC status OK (RESOURCE_EXHAUSTED only for a request past
  the frame limit or headers past gRPC's soft limit, refused by gRPC before any handler),
  within `ANSWER_TIMEOUT`; each answer decodes as the RPC's response and carries a `Status`
  whose code is one of RocketMQ 5's and not INTERNAL_SERVER_ERROR (the server's answer to an
  exception it did not expect); a Telemetry stream still answers a good settings command
  after the hostile ones; brokerd is alive; nothing appeared or vanished
  outside the store (the sandbox, the daemons' working directory, and entries carrying the
  fuzzer's mark in the home folder, /tmp and /);
- every `EPISODE` calls: brokerd holds at most `RSS_LIMIT`, no traceback in its log, its
  topic and group tables hold only names RocketMQ allows, and a good send, receive and ack
  over gRPC work (a group of the checks' own, never fuzzed);
- at the end: brokerd stops on SIGTERM with status 0, its ConsumeQueues agree with the
  CommitLog (tests/fault/cq_check.py), it starts again and serves a good send and receive,
  and every message acknowledged on the good topic (the checks' own and the fuzz calls') is
  pullable at its offset.

A finding keeps the calls that led to it (the episode so far; the whole run for a daemon that
died or hung) as `grpc-<kind>-<n>.json`; `replay(path)` sends them to a fresh broker and checks
the same invariants.

With `lanes` > 1, that many clients call at once, each on its own channel with its own seeded
calls, sharing the receipt and recall handles they are answered (one client's handle is another's
hostile input); they meet at each episode's checks. A finding's saved calls replay one after
another.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from tests.fault.cq_check import check_consume_queues
from tests.fuzz.grpc_steps import GOOD_CLIENT, GOOD_GROUP, GOOD_TOPIC, GrpcStep, GrpcSteps, sign
from tests.fuzz.request_cluster import FileWatch
from tests.support.processes import BROKER_BOOTED, Daemon, ProcessGroup, brokerd_command, free_port
from tests.support.wire import pull_header
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Code,
    FilterExpression,
    FilterType,
    Message,
    MessageQueue,
    MessageType,
    Resource,
    Settings,
)
from tidemq.broker.proxy.server import FRAME_HEADROOM, RPCS, SERVICE_NAME
from tidemq.client.api import BrokerAPI, PullStatus
from tidemq.client.errors import BrokerResponseError, ConnectError, RequestTimeoutError
from tidemq.client.protocol.models import SubscriptionGroupConfig, TopicConfig
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.signing import SessionCredentials

__all__ = ["REGRESSIONS", "GrpcReport", "replay", "run"]

EPISODE: Final = 25
ANSWER_TIMEOUT: Final = 20.0  # seconds for one call (long polls end within 1 s here)
MAX_BODY: Final = 1 << 20  # maxMessageSize of the test stores (tests/support/processes.py)
FRAME_LIMIT: Final = 4 * 1024 * 1024 + FRAME_HEADROOM  # the server's receive limit
# gRPC refuses some calls whose headers pass its soft limit of 8 KiB (grpc.max_metadata_size),
# all past twice that; the path, authority and content type take a few hundred bytes of it
METADATA_SOFT: Final = 7 * 1024
QUEUES: Final = 2
RSS_LIMIT: Final = 1 << 30
VERIFY_GROUP: Final = "fzg-verify"  # the checks' own group, never fuzzed
VERIFY_CLIENT: Final = (("x-mq-client-id", "fzg-verify"), ("x-mq-language", "PYTHON"))
REGRESSIONS: Final = Path(__file__).resolve().parent / "regressions" / "grpc"
_TRACEBACK: Final = "Traceback (most recent call last):"
_LEGAL_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
_CODES: Final = frozenset(Code.values())
_NUMBERS: Final = re.compile(r"\d+")
_STATEFUL: Final = frozenset({"no-answer", "died", "sanity"})
# With acl: the checks sign as the admin; the fuzz calls as it or as a user limited to the good
# topic (so FORBIDDEN is met too)
ADMIN: Final = ("fzg-admin-key", "fzg-admin-secret")
USER: Final = ("fzg-user-key", "fzg-user-secret")
ACL_FILE: Final = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [{GOOD_TOPIC}=PUB|SUB]
"""
_OVERRIDES: Final = (
    "autoCreateTopicEnable=false",
    "grpcClientConsumerMaxLongPollingTimeoutMillis=1000",
    "minInvisibleTimeMillsForRecv=100",
)


@dataclass
class GrpcFinding:
    kind: str
    detail: str
    steps: list[GrpcStep] = field(default_factory=list)

    @property
    def signature(self) -> str:
        return f"{self.kind}: {_NUMBERS.sub('N', self.detail)[:160]}"


@dataclass
class GrpcReport:
    seed: int | None
    seconds: float = 0.0
    calls: int = 0
    per_method: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    findings: list[GrpcFinding] = field(default_factory=list)
    saved: list[Path] = field(default_factory=list)
    tracked: int = 0
    sanity_checks: int = 0

    def summary(self) -> str:
        rate = self.calls / self.seconds if self.seconds else 0.0
        lines = [
            f"gRPC seed {self.seed}: {self.calls} calls in {self.seconds:.1f} s ({rate:.0f}/s), "
            f"{self.sanity_checks} good send+receive checks, {self.tracked} acknowledged "
            f"messages checked, {len(self.findings)} findings",
            "  calls: " + ", ".join(f"{k} {v}" for k, v in sorted(self.per_method.items())),
            "  answers: " + ", ".join(f"{k} {v}" for k, v in self.answers.most_common()),
        ]
        seen: set[str] = set()
        for finding in self.findings:
            if finding.signature not in seen:
                seen.add(finding.signature)
                lines.append(f"  FINDING {finding.signature}")
        lines += [f"  saved: {path}" for path in self.saved]
        return "\n".join(lines)

    def save(self, out: Path) -> None:
        """One `grpc-<kind>-<n>.json` per distinct finding, with its calls."""
        out.mkdir(parents=True, exist_ok=True)
        seen: set[str] = set()
        for finding in self.findings:
            if finding.signature in seen:
                continue
            seen.add(finding.signature)
            path = out / f"grpc-{finding.kind}-{len(self.saved)}.json"
            body = {
                "seed": self.seed,
                "kind": finding.kind,
                "detail": finding.detail,
                "steps": [s.to_json() for s in finding.steps],
            }
            path.write_text(json.dumps(body, indent=1, ensure_ascii=True))
            self.saved.append(path)


class GrpcFuzzBroker:
    """namesrvd and one brokerd with its gRPC endpoint, over a sandboxed `base`."""

    def __init__(self, base: Path, *, acl: bool = False) -> None:
        """`acl`: aclEnable with `ACL_FILE` (the calls signed by its accounts, or not)."""
        self.base = base
        self.acl = acl
        run = base / "run"
        self.store = run / "sandbox" / "store"
        self.logs = run / "logs"
        for victim in (base / "victim", run / "victim"):
            (victim / "0").mkdir(parents=True, exist_ok=True)
            (victim / "keep").write_text("must survive the run\n")
        self.store.mkdir(parents=True, exist_ok=True)
        self.acl_file = run / "plain_acl.yml"
        if acl:
            self.acl_file.write_text(ACL_FILE)
        self.watch = FileWatch(base, frozenset({self.store, self.logs}))
        self.processes = ProcessGroup(self.logs)
        self.namesrv: Daemon | None = None
        self.broker: Daemon | None = None
        self.port = free_port()
        self.grpc_port = free_port()
        self._starts = 0

    @property
    def victims(self) -> list[str]:
        return [str(self.base / "victim"), str(self.base / "run" / "victim")]

    def start(self) -> None:
        self.namesrv = self.processes.namesrvd(name="namesrvd")
        self.start_broker()
        self.watch.reset()

    def start_broker(self) -> None:
        assert self.namesrv is not None
        self._starts += 1
        args = brokerd_command(
            self.port,
            self.namesrv.address,
            self.store,
            f"grpcServerPort={self.grpc_port}",
            *_OVERRIDES,
            *(("aclEnable=true", f"aclFile={self.acl_file}") if self.acl else ()),
        )
        self.broker = self.processes.start(
            args, port=self.port, name=f"brokerd-{self._starts}", ready_text=BROKER_BOOTED
        )

    def stop_broker(self) -> int | None:
        return self.broker.stop(timeout=20) if self.broker is not None else None

    def stop(self) -> None:
        self.processes.stop_all()


@dataclass
class Answered:
    """What a call got: its gRPC status, the raw answers, and the seconds it took."""

    code: grpc.StatusCode
    details: str
    answers: list[bytes]
    seconds: float


def _identity(data: bytes) -> bytes:
    return data


class GrpcSession:
    def __init__(self, broker: GrpcFuzzBroker, report: GrpcReport) -> None:
        self.broker = broker
        self.report = report
        self.channel = self._channel()
        self.episode: list[GrpcStep] = []
        self.all_steps: list[GrpcStep] = []
        self.steps_handles: list[str] = []  # live receipt handles, for the next calls
        self.steps_recall_handles: list[str] = []  # live recall handles (timer sends)
        self.tracked: dict[tuple[int, bytes], str] = {}  # (queue offset, body): message id
        self.log_seen = 0
        self.names_seen: set[str] = set()
        credentials = SessionCredentials(*ADMIN) if broker.acl else None
        self.api = BrokerAPI(timeout=ANSWER_TIMEOUT, credentials=credentials)
        self.verify_client = VERIFY_CLIENT + (
            sign(*ADMIN, "20261129T120000Z") if broker.acl else ()
        )
        self.broken = False

    def _channel(self) -> aio.Channel:
        options = [
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
        ]
        return aio.insecure_channel(f"127.0.0.1:{self.broker.grpc_port}", options=options)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def find(self, kind: str, detail: str, steps: list[GrpcStep] | None = None) -> None:
        if steps is None:
            steps = self.all_steps if kind in _STATEFUL else list(self.episode)
        detail = detail.replace(str(self.broker.base), "<base>")
        self.report.findings.append(GrpcFinding(kind, detail, steps))
        if kind in _STATEFUL:
            self.broken = True

    # --- calls -----------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        payloads: tuple[bytes, ...],
        metadata: tuple[tuple[str, str], ...],
        channel: aio.Channel | None = None,
    ) -> Answered:
        path = f"/{SERVICE_NAME}/{method}"
        kind = RPCS[method].streaming
        started = time.monotonic()
        answers: list[bytes] = []
        channel = channel or self.channel
        try:
            if kind == "unary":
                stub = channel.unary_unary(path, _identity, _identity)
                answers.append(await stub(payloads[0], metadata=metadata, timeout=ANSWER_TIMEOUT))
            elif kind == "server":
                streamed = channel.unary_stream(path, _identity, _identity)
                call = streamed(payloads[0], metadata=metadata, timeout=ANSWER_TIMEOUT)
                answers += [answer async for answer in call]
            else:
                both = channel.stream_stream(path, _identity, _identity)
                stream = both(metadata=metadata, timeout=ANSWER_TIMEOUT)
                for payload in payloads:
                    await stream.write(payload)
                await stream.done_writing()
                answers += [answer async for answer in stream]
        except aio.AioRpcError as error:
            return Answered(
                error.code(), error.details() or "", answers, time.monotonic() - started
            )
        return Answered(grpc.StatusCode.OK, "", answers, time.monotonic() - started)

    async def send(self, step: GrpcStep, channel: aio.Channel | None = None) -> Answered | None:
        payloads = step.payloads
        telemetry = step.method == "Telemetry"
        if telemetry:  # the stream must still answer a good command after the hostile ones
            payloads = (*payloads, _good_settings().SerializeToString())
        self.episode.append(step)
        self.all_steps.append(step)
        try:
            answered = await self.call(step.method, payloads, step.metadata, channel)
        except ValueError:
            return None  # metadata the gRPC client refuses to send: nothing went out
        report = self.report
        report.calls += 1
        report.per_method[step.method] += 1
        good_client = dict(step.metadata).get("x-mq-client-id") == GOOD_CLIENT
        good_client = good_client and "auth" not in step.note.split(", ")
        self.check_answer(step, answered, telemetry and good_client)
        self.check_after_call(step)
        return answered

    def check_answer(self, step: GrpcStep, answered: Answered, good_settings: bool) -> None:
        where = f"{step.method} ({step.note or 'good values'})"
        if answered.code is not grpc.StatusCode.OK:
            self.report.answers[f"grpc {answered.code.name}"] += 1
            if max(len(p) for p in step.payloads) > FRAME_LIMIT:
                # gRPC's own refusal of a message past the frame limit, before any handler
                # (RESOURCE_EXHAUSTED; on a stream the client may see the cancel as INTERNAL)
                return
            headers = sum(len(k) + len(v) + 32 for k, v in step.metadata)  # HTTP/2's count
            if answered.code is grpc.StatusCode.RESOURCE_EXHAUSTED and headers > METADATA_SOFT:
                return  # gRPC's own refusal of headers past its soft limit (8 KiB), likewise
            if answered.code is grpc.StatusCode.DEADLINE_EXCEEDED:
                self.find("no-answer", f"{where}: no answer in {ANSWER_TIMEOUT} s")
                return
            self.find("grpc-status", f"{where}: gRPC {answered.code.name} {answered.details[:200]}")
            return
        response_type = RPCS[step.method].response
        if not answered.answers:
            self.find("dead-stream", f"{where}: the call ended with no answer")
            return
        statuses = []
        for data in answered.answers:
            try:
                response = response_type.FromString(data)
            except DecodeError as exc:
                self.find("bad-answer", f"{where}: an answer does not decode: {exc}")
                return
            if response.HasField("status"):
                statuses.append(response.status)
            if step.method == "ReceiveMessage" and response.WhichOneof("content") == "message":
                handle = response.message.system_properties.receipt_handle
                if handle:
                    self.steps_handles.append(handle)
        if not statuses:
            self.find("dead-stream", f"{where}: no status in {len(answered.answers)} answers")
            return
        for status in statuses:
            name = Code.Name(status.code) if status.code in _CODES else str(status.code)
            self.report.answers[name] += 1
            if status.code not in _CODES or status.code == Code.CODE_UNSPECIFIED:
                self.find("bad-status", f"{where}: status code {status.code}")
            elif status.code == Code.INTERNAL_SERVER_ERROR:
                self.find("internal", f"{where}: {status.message[:200]}")
        if good_settings:
            last = pb.TelemetryCommand.FromString(answered.answers[-1])
            if last.WhichOneof("command") != "settings" or last.status.code != Code.OK:
                self.find(
                    "dead-stream",
                    f"{where}: a good settings command after them got {last.status.code} "
                    f"{last.status.message[:120]}",
                )

    def check_after_call(self, step: GrpcStep) -> None:
        appeared, vanished = self.broker.watch.changes()
        if appeared or vanished:
            self.find(
                "outside-store",
                f"{step.method}: appeared {appeared[:5]} vanished {vanished[:5]}",
            )
            self.broker.watch.reset()
        for daemon in (self.broker.namesrv, self.broker.broker):
            if daemon is not None and not daemon.running:
                self.find("died", f"after {step.method}: {daemon.name} exited {daemon.returncode}")

    # --- periodic checks -------------------------------------------------------------------

    def scan_log(self) -> None:
        daemon = self.broker.broker
        if daemon is None:
            return
        text = daemon.log_text()
        lines = text[self.log_seen :].splitlines()
        self.log_seen = len(text)
        for i, line in enumerate(lines):
            if line.strip() != _TRACEBACK:
                continue
            cause = lines[i - 1].split(": ", 1)[-1] if i else ""
            error = next(
                (x for x in lines[i + 1 :] if x and not x.startswith((" ", "Traceback"))), "?"
            )
            self.find("traceback", f"{cause[:120]} -> {error[:160]}")

    async def check_names(self) -> None:
        tables = (
            (RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable", "topic"),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable", "group"),
        )
        for code, table, what in tables:
            try:
                response = await self.api.call(self.addr, self.api.request(code))
                names = json.loads(bytes(response.body)).get(table, {})
            except (BrokerResponseError, ConnectError, RequestTimeoutError, ValueError):
                continue
            for name in names:
                if name in self.names_seen:
                    continue
                self.names_seen.add(name)
                if not _LEGAL_NAME.fullmatch(name):
                    self.find("illegal-name", f"the {what} table holds {name[:200]!r}")

    async def sanity(self, body: bytes) -> None:
        """A good send, then a receive and ack of it by the checks' own group."""
        self.report.sanity_checks += 1
        message = Message(topic=Resource(name=GOOD_TOPIC), body=body)
        message.system_properties.message_id = f"fzg-{time.time_ns()}"
        message.system_properties.message_type = MessageType.NORMAL
        message.system_properties.tag = "verify"
        request = pb.SendMessageRequest(messages=[message])
        sent = await self.call("SendMessage", (request.SerializeToString(),), self.verify_client)
        if sent.code is not grpc.StatusCode.OK:
            self.find("sanity", f"a good send: gRPC {sent.code.name} {sent.details[:200]}")
            return
        answer = pb.SendMessageResponse.FromString(sent.answers[0])
        if answer.status.code != Code.OK:
            self.find("sanity", f"a good send: {answer.status.code} {answer.status.message}")
            return
        self.tracked[(answer.entries[0].offset, body)] = message.system_properties.message_id
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            receive = pb.ReceiveMessageRequest(
                group=Resource(name=VERIFY_GROUP),
                message_queue=MessageQueue(topic=Resource(name=GOOD_TOPIC), id=-1),
                filter_expression=FilterExpression(type=FilterType.TAG, expression="verify"),
                batch_size=32,
                auto_renew=False,
            )
            receive.invisible_duration.FromMilliseconds(60_000)
            receive.long_polling_timeout.FromMilliseconds(1000)
            got = await self.call(
                "ReceiveMessage", (receive.SerializeToString(),), self.verify_client
            )
            if got.code is not grpc.StatusCode.OK:
                self.find("sanity", f"a good receive: gRPC {got.code.name} {got.details[:200]}")
                return
            messages = [
                r.message
                for r in map(pb.ReceiveMessageResponse.FromString, got.answers)
                if r.WhichOneof("content") == "message"
            ]
            if messages:
                entries = [
                    pb.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                    for m in messages
                ]
                ack = pb.AckMessageRequest(
                    group=Resource(name=VERIFY_GROUP),
                    topic=Resource(name=GOOD_TOPIC),
                    entries=entries,
                )
                acked = await self.call(
                    "AckMessage", (ack.SerializeToString(),), self.verify_client
                )
                status = pb.AckMessageResponse.FromString(acked.answers[0]).status
                if status.code != Code.OK:
                    self.find("sanity", f"a good ack: {status.code} {status.message}")
                if any(m.body == body for m in messages):
                    return
        self.find("sanity", "a good message sent was not received in 30 s")

    def check_memory(self) -> None:
        """brokerd holds no more than `RSS_LIMIT`: hostile sizes and counts buy no memory."""
        daemon = self.broker.broker
        if daemon is None or daemon.pid is None or not daemon.running:
            return
        try:
            status = Path(f"/proc/{daemon.pid}/status").read_text()
        except OSError:
            return
        found = re.search(r"VmRSS:\s+(\d+) kB", status)
        rss = int(found.group(1)) * 1024 if found else 0
        if rss > RSS_LIMIT:
            self.find("memory", f"brokerd holds {rss >> 20} MiB")

    async def end_episode(self) -> None:
        self.check_memory()
        self.scan_log()
        await self.check_names()
        if not self.broken:
            await self.sanity(f"episode-{self.report.calls}".encode())
        self.episode = []

    # --- set-up and the end ----------------------------------------------------------------

    async def setup(self) -> None:
        await self.api.create_topic(self.addr, TopicConfig(GOOD_TOPIC, QUEUES, QUEUES))
        for group in (GOOD_GROUP, VERIFY_GROUP):
            await self.api.update_subscription_group(self.addr, SubscriptionGroupConfig(group))
        await self.end_episode()

    def track(self, step: GrpcStep, answered: Answered | None) -> None:
        """A fuzz send the broker acknowledged on the good topic: remembered by offset."""
        if step.method != "SendMessage" or answered is None or not answered.answers:
            return
        if answered.code is not grpc.StatusCode.OK or len(step.payloads) != 1:
            return
        try:
            request = pb.SendMessageRequest.FromString(step.payloads[0])
            response = pb.SendMessageResponse.FromString(answered.answers[0])
        except DecodeError:
            return
        for message, entry in zip(request.messages, response.entries, strict=False):
            if entry.recall_handle:
                self.steps_recall_handles.append(entry.recall_handle)
            good = message.topic.name == GOOD_TOPIC and not message.topic.resource_namespace
            system = message.system_properties
            # a half or timer message is stored elsewhere until it is ended or due
            plain = system.message_type in (MessageType.NORMAL, MessageType.FIFO)
            plain = plain and not system.HasField("delivery_timestamp")
            if good and plain and entry.status.code == Code.OK:
                self.tracked[(entry.offset, message.body)] = entry.message_id

    async def check_tracked(self) -> None:
        """Every acknowledged fuzz send on the good topic is in some queue at its offset."""
        self.report.tracked = len(self.tracked)
        if not self.tracked:
            return
        stored: set[tuple[int, bytes]] = set()
        for queue in range(QUEUES):
            stored |= set((await self._pull_all(queue)).items())
        lost = [mid for key, mid in self.tracked.items() if key not in stored]
        if lost:
            self.find("lost", f"{len(lost)} acknowledged sends not in the store ({lost[:3]})", [])

    async def _pull_all(self, queue: int) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        offset = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            header = pull_header(GOOD_TOPIC, queue, offset, group=VERIFY_GROUP)
            try:
                pulled = await self.api.pull(self.addr, header)
            except (BrokerResponseError, ConnectError, RequestTimeoutError):
                await asyncio.sleep(0.2)
                continue
            if pulled.status is not PullStatus.FOUND:
                break
            for message in pulled.messages:
                found[message.queue_offset] = bytes(message.body)
            offset = pulled.next_begin_offset
        return found

    async def finish(self) -> None:
        await self.end_episode()
        if self.broken:
            return
        await self.check_tracked()
        await self.channel.close()
        code = self.broker.stop_broker()
        if code != 0:
            self.find("restart", f"brokerd exited with status {code} on SIGTERM", [])
        check = check_consume_queues(self.broker.store)
        if check.problems:
            self.find("corrupt", f"the store after the run: {check.problems[:3]}", self.all_steps)
        try:
            self.broker.start_broker()
        except Exception as exc:
            self.find("restart", f"brokerd did not start again: {str(exc)[:300]}", [])
            self.broken = True
            return
        self.channel = self._channel()
        self.log_seen = 0
        await self.sanity(b"after-restart")
        await self.check_tracked()
        self.scan_log()

    async def close(self) -> None:
        await self.channel.close()
        await self.api.close()


def _good_settings() -> pb.TelemetryCommand:
    settings = Settings(client_type=1)  # PRODUCER
    settings.publishing.topics.append(Resource(name=GOOD_TOPIC))
    return pb.TelemetryCommand(settings=settings)


async def _lane(
    session: GrpcSession,
    channel: aio.Channel | None,
    feed: Callable[[], GrpcStep | None],
    calls: int,
    until: float,
) -> bool:
    """Up to `calls` calls from `feed` on `channel` (None: the session's) until `until`;
    False once the feed is used up."""
    for _ in range(calls):
        if session.broken or time.monotonic() >= until:
            return True
        step = feed()
        if step is None:
            return False
        answered = await session.send(step, channel)
        session.track(step, answered)
        for handles in (session.steps_handles, session.steps_recall_handles):
            if len(handles) > 200:
                del handles[:100]
    return True


async def _session(
    broker: GrpcFuzzBroker,
    report: GrpcReport,
    feeds: list[Callable[[], GrpcStep | None]],
    seconds: float,
    lanes: Sequence[GrpcSteps] = (),
) -> None:
    """Set up, send the calls of `feeds` (one per lane: a lane's generator, or a saved list)
    for `seconds` (counted once the broker is set up), each lane on its own channel, then
    finish. The generators of `lanes` share one pool of live handles, the session's."""
    session = GrpcSession(broker, report)
    for n, lane in enumerate(lanes):
        if n == 0:
            session.steps_handles, session.steps_recall_handles = lane.handles, lane.recall_handles
        else:
            lane.handles, lane.recall_handles = session.steps_handles, session.steps_recall_handles
    channels = [None if n == 0 else session._channel() for n in range(len(feeds))]
    try:
        await session.setup()
        until = time.monotonic() + seconds
        share = max(1, EPISODE // len(feeds))
        going = True
        while going and not session.broken and time.monotonic() < until:
            lanes = zip(channels, feeds, strict=True)
            going = all(
                await asyncio.gather(*(_lane(session, c, f, share, until) for c, f in lanes))
            )
            await session.end_episode()
        await session.finish()
    finally:
        for channel in channels:
            if channel is not None:
                await channel.close()
        await session.close()


def run(
    seed: int,
    seconds: float,
    base: Path,
    out: Path | None = None,
    *,
    acl: bool = False,
    lanes: int = 1,
) -> GrpcReport:
    """Fuzz a fresh brokerd's gRPC endpoint for `seconds` from `seed` under `base`; findings
    saved under `out`. `acl`: the broker checks signatures (`ACL_FILE`), the calls are signed
    by its accounts or carry hostile headers. `lanes` clients call at once."""
    os.environ["PYTHONFAULTHANDLER"] = "1"
    report = GrpcReport(seed)
    started = time.monotonic()
    broker = GrpcFuzzBroker(base, acl=acl)
    try:
        broker.start()
        accounts = (ADMIN, USER) if acl else ()
        # The first lane's seed is the single client's: a one-lane run is as before.
        steps = [
            GrpcSteps(
                random.Random(seed if n == 0 else f"{seed}/{n}"),
                broker.victims,
                MAX_BODY,
                FRAME_LIMIT,
                accounts,
            )
            for n in range(lanes)
        ]
        feeds = [lane.next for lane in steps]
        asyncio.run(_session(broker, report, list(feeds), seconds, steps))
    finally:
        broker.stop()
        report.seconds = time.monotonic() - started
    if out is not None and report.findings:
        report.save(out)
    return report


def load_steps(path: Path) -> list[GrpcStep]:
    return [GrpcStep.from_json(s) for s in json.loads(path.read_text())["steps"]]


def replay(path: Path, base: Path) -> GrpcReport:
    """Send a saved finding's calls to a fresh brokerd under `base` (with ACL when the calls
    were signed); check the invariants."""
    report = GrpcReport(None)
    started = time.monotonic()
    steps = load_steps(path)
    acl = any(key == "authorization" for step in steps for key, _ in step.metadata)
    broker = GrpcFuzzBroker(base, acl=acl)
    try:
        broker.start()
        saved = iter(steps)
        asyncio.run(_session(broker, report, [lambda: next(saved, None)], float("inf")))
    finally:
        broker.stop()
        report.seconds = time.monotonic() - started
    return report
