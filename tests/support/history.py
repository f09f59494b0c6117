"""One history of a fault test's client operations, recorded as they happen, and one checker of it
(issue 32, in the manner of Jepsen's histories).

A history is a file of JSON lines, one event each. Every event has `type`, `process` (the client
that did it), `wall` (time.time(), seconds) and `mono` (time.monotonic(): the machine's one clock,
the same in every process and network namespace of it, so it orders events across processes).

Operations are two events with the same `op` (an id unique within its process) and `f`:

    {"type": "invoke", "f": ..., "op": n, ...}     when the client calls
    {"type": "ok" | "fail" | "info", ...}          when the call returns: ok done, fail surely not
                                                   done, info unknown (an error, a timeout, or a
                                                   status that is not an acknowledgement)

`f` and its fields (on the invoke, or on the completion):

    send       invoke: topic, body (the message's id), attempts (how many times the client may
               put it on the wire: 1 + the producer's retryTimes); completion: status, and with
               ok: broker_name, queue, offset (the queue position its answer gave), broker
               (address of the broker that stored it, from offsetMsgId), phy (its physical
               offset there, from offsetMsgId), epoch (when known)
    poll       invoke: session (one consumer's life), group; ok: messages [[topic, broker_name,
               queue, offset, body], ...] in the order the consumer returned them
    commit     invoke: session, group, offsets [[topic, broker_name, queue, offset], ...]
    committed  invoke: group, topic, broker_name, queue; ok: offset (a group's committed offset
               as a broker answered it)
    read       invoke: topic, final (true: the log after healing), whole (true: each queue read
               from its first offset to its end, so its offsets run without a hole: `record_read`,
               tests/support/store_history.py); ok: messages [[broker_name, queue, offset, body,
               store_host, store_ms], ...]: everything the group serves
    deliver    a push consumer's listener called with one message; invoke: session, group,
               orderly (the consumer's mode), topic, broker_name, queue, offset, body,
               reconsume (its reconsume times), retry (true: it came from the group's retry
               topic, so queue and offset are the retry queue's); ok: result (SUCCESS or
               RECONSUME_LATER); fail: the listener raised (RECONSUME_LATER)

Plain events: {"type": "epoch", "broker": address, "epoch": n, "wall": s}: broker `address`
became the group's master of epoch n at that wall time (an epoch ends where the next begins).
{"type": "drained", "group": g, "topic": t}: consumer group g, which consumes topic t from its
first offset, has had the time to be delivered everything acknowledged before this event.

`check(events)` is sans-IO and returns a `Report`: counts and the violations of each rule:

    lost       an acknowledged send is not at its queue and offset in the last final read
    position   two sends acknowledged at the same queue position with different bodies
    duplicate  a body at more positions than its sends' attempts explain, or at a position no
               send explains; `duplicates` counts every extra copy
    order      a consumer's session skipped a queue's offset (each offset past the highest it
               returned is the one after it), returned an offset again with another body, or a
               message the log after healing does not hold there; offsets returned again with
               the same body are counted (`redelivered`: at least once), not judged; a whole
               read (final or not) served a queue with a hole or an offset twice
    offsets    a committed offset went backwards: a committed read below one that finished
               before it began, or below a commit acknowledged before it began (a `commit` ok
               with `acknowledged`: the broker answered it, `record_commit`; commits of a
               group and queue are taken to go forward, the largest one counts), or a
               consumer session committing less than it committed before. Judged across
               epochs too (controller mode carries commits in the CommitLog:
               broker/offset_log.py); with `check(events, offsets_replicated=False)` reads
               that went back across a new epoch are counted instead
               (`offsets_back_at_failover`, the most by how much in `offsets_back_most`), for
               groups whose offsets a new master has only from its last SlaveSynchronize, as
               in RocketMQ 4.x master/slave (offsets replicated asynchronously)
    epoch      an acknowledgement from a broker that was not the master at its moment: the later
               of its invoke and of its store timestamp falls outside that broker's epochs
    delivery   push consumers: a send acknowledged before a `drained` event of its topic was
               never delivered to that group before it (at least once); a delivery of a body
               the log after healing does not hold at its queue and offset; for an orderly
               consumer, the group skipped an offset of a queue (each offset past the highest
               delivered to any of its sessions is the one after it; at least once: an earlier
               offset again with the same body is counted in `delivered_again`, with another
               body a violation), or one session was given two messages of a queue at once
               (a delivery invoked before the one before it in the queue returned). A
               concurrent consumer has no order: its deliveries are judged for loss and
               position only. Deliveries from the retry topic are judged for loss only.
               `delivered` counts deliveries, `delivered_again` those of a body the group had
               been delivered before (duplicates: at least once allows them; they are counted)

`Recorder` writes the events; `RecordingProducer`, `RecordingBlockingProducer` and
`RecordingPullConsumer` wrap the public client, and `recording_listener` a push consumer's
listener, so that a test gets a history without counters of its own; `record_send` records
one raw SEND_MESSAGE; `record_read` reads a topic back from a broker as a recorded (final) read;
`record_commit` and `record_committed` one raw UPDATE_CONSUMER_OFFSET (ok only when the broker
answered SUCCESS) and QUERY_CONSUMER_OFFSET (-1: the broker has none).
"""

from __future__ import annotations

import inspect
import itertools
import json
import threading
import time
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from tests.support.ha_processes import id_of
from tests.support.wire import pull_header
from tidemq.client.api import BrokerAPI, PullStatus, SendResponse
from tidemq.client.consumer.offset_store import OFFSET_READ_ERROR
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.consumer.push import ConsumeResult, Listener
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from tidemq.client.producer import AsyncProducer, Producer
from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.store.record import decode_message_id

Event = dict[str, Any]
RULES: Final = ("lost", "position", "duplicate", "order", "offsets", "epoch", "delivery")
Position = tuple[str, str, int, int]  # topic, broker name, queue id, queue offset

# --- recording ------------------------------------------------------------------------------


class Recorder:
    """Appends events to `path` (one JSON line each, flushed: a killed test leaves its history)
    and keeps them in `events` (unless `keep` is False: a long run's file only); `path` None
    keeps them in memory only."""

    def __init__(self, path: Path | None = None, process: str = "client", *, keep: bool = True):
        self.path = path
        self.process = process
        self.keep = keep or path is None
        self.events: list[Event] = []
        self._ops = itertools.count(1)
        self._sessions = itertools.count(1)
        self._file: IO[str] | None = None
        self._lock = threading.Lock()  # plain push listeners record from consume threads
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")

    def emit(self, event: Event) -> Event:
        with self._lock:
            event.setdefault("process", self.process)
            event.setdefault("wall", time.time())
            event.setdefault("mono", time.monotonic())
            if self.keep:
                self.events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event) + "\n")
                self._file.flush()
        return event

    def invoke(self, f: str, **fields: Any) -> int:
        with self._lock:
            op = next(self._ops)
        self.emit({"type": "invoke", "f": f, "op": op, **fields})
        return op

    def complete(self, op: int, outcome: str, f: str, **fields: Any) -> None:
        if outcome not in ("ok", "fail", "info"):
            raise ValueError(f"an outcome is ok, fail or info, not {outcome!r}")
        self.emit({"type": outcome, "f": f, "op": op, **fields})

    def epoch(self, broker: str, epoch: int, wall: float) -> None:
        self.emit({"type": "epoch", "broker": broker, "epoch": epoch, "wall": wall})

    def drained(self, group: str, topic: str) -> None:
        self.emit({"type": "drained", "group": group, "topic": topic})

    def session(self) -> int:
        return next(self._sessions)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load(path: Path) -> list[Event]:
    """The events of a history file (a torn last line, from a killed writer, is left out)."""
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _send_fields(result: SendResult) -> dict[str, Any]:
    (ip, port), physical = decode_message_id(result.offset_msg_id)
    mq = result.message_queue
    return {
        "status": result.status.name,
        "broker_name": mq.broker_name,
        "queue": mq.queue_id,
        "offset": result.queue_offset,
        "broker": f"{ip}:{port}",
        "phy": physical,
    }


class _SendRecording:
    def __init__(self, recorder: Recorder, attempts: int, body_id: Callable[[bytes], Any]):
        self.recorder = recorder
        self.attempts = attempts
        self.body_id = body_id

    def invoke(self, msg: Message) -> int:
        body = self.body_id(msg.body)
        return self.recorder.invoke("send", topic=msg.topic, body=body, attempts=self.attempts)

    def result(self, op: int, result: SendResult) -> None:
        self.recorder.complete(op, "ok" if result.ok else "info", "send", **_send_fields(result))

    def error(self, op: int, exc: BaseException) -> None:
        # Whether it was stored is unknown: a timeout, a refusal after the append, a retry that
        # went on after a first attempt was stored.
        self.recorder.complete(op, "info", "send", status="error", error=_error(exc))


class RecordingProducer:
    """An AsyncProducer whose sends are recorded; `send` returns and raises as the producer's."""

    def __init__(
        self,
        recorder: Recorder,
        producer: AsyncProducer,
        body_id: Callable[[bytes], Any] = id_of,
    ) -> None:
        self.producer = producer
        self._rec = _SendRecording(recorder, 1 + producer.retry_times, body_id)

    async def send(self, msg: Message, **kwargs: Any) -> SendResult:
        op = self._rec.invoke(msg)
        try:
            result = await self.producer.send(msg, **kwargs)
        except BaseException as exc:  # cancelled too: the send's outcome is unknown
            self._rec.error(op, exc)
            raise
        self._rec.result(op, result)
        return result


class RecordingBlockingProducer:
    """The blocking Producer's sends, recorded."""

    def __init__(
        self, recorder: Recorder, producer: Producer, body_id: Callable[[bytes], Any] = id_of
    ) -> None:
        self.producer = producer
        retry_times: int = producer._async.retry_times
        self._rec = _SendRecording(recorder, 1 + retry_times, body_id)

    def send(self, msg: Message, **kwargs: Any) -> SendResult:
        op = self._rec.invoke(msg)
        try:
            result = self.producer.send(msg, **kwargs)
        except BaseException as exc:
            self._rec.error(op, exc)
            raise
        self._rec.result(op, result)
        return result


class RecordingPullConsumer:
    """An AsyncPullConsumer (started) whose polls, commits and committed-offset reads are
    recorded; each wrapper is one session."""

    def __init__(
        self,
        recorder: Recorder,
        consumer: AsyncPullConsumer,
        body_id: Callable[[bytes], Any] = id_of,
    ) -> None:
        self.recorder = recorder
        self.consumer = consumer
        self.body_id = body_id
        self.session = recorder.session()

    async def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[Any]:
        group = self.consumer.group
        op = self.recorder.invoke("poll", session=self.session, group=group)
        try:
            got: list[ReceivedMessage] = await self.consumer.poll(timeout, max_records)
        except TideMQError as exc:
            self.recorder.complete(op, "fail", "poll", error=_error(exc))
            raise
        messages = [
            [m.topic, m.broker_name, m.queue_id, m.queue_offset, self.body_id(m.body)] for m in got
        ]
        self.recorder.complete(op, "ok", "poll", messages=messages)
        return got

    async def commit(self) -> None:
        """Commit the positions of what poll() returned (the consumer's own commit)."""
        positions = {mq: self.consumer.position(mq) for mq in self.consumer.assignment()}
        offsets = [[mq.topic, mq.broker_name, mq.queue_id, o] for mq, o in positions.items()]
        op = self.recorder.invoke(
            "commit", session=self.session, group=self.consumer.group, offsets=offsets
        )
        try:
            await self.consumer.commit(positions)
        except TideMQError as exc:
            self.recorder.complete(op, "info", "commit", error=_error(exc))
            raise
        self.recorder.complete(op, "ok", "commit")

    async def committed(self, mq: MessageQueue) -> int:
        op = self.recorder.invoke(
            "committed",
            group=self.consumer.group,
            topic=mq.topic,
            broker_name=mq.broker_name,
            queue=mq.queue_id,
        )
        try:
            offset = await self.consumer.committed(mq)
        except TideMQError as exc:
            self.recorder.complete(op, "fail", "committed", error=_error(exc))
            raise
        if offset == OFFSET_READ_ERROR:
            # The store could not be asked (its broker unreachable): a failed read, not an
            # offset of -2 (read as one, it looked like a committed offset going back).
            self.recorder.complete(op, "fail", "committed", error="OFFSET_READ_ERROR")
            return offset
        self.recorder.complete(op, "ok", "committed", offset=offset)
        return offset


def recording_listener(
    recorder: Recorder,
    consumer: Any,
    listener: Listener,
    body_id: Callable[[bytes], Any] = id_of,
) -> Listener:
    """`listener` of a push consumer (`consumer`: its group and orderly mode) wrapped so that
    every call is a recorded delivery; one session per wrapper. An async listener stays async
    (the consumer awaits it on its loop), a plain one plain (it runs on the consume threads)."""
    session = recorder.session()

    def invoke(msg: ReceivedMessage) -> int:
        return recorder.invoke(
            "deliver", session=session, group=consumer.group, orderly=bool(consumer.orderly),
            topic=msg.topic, broker_name=msg.broker_name, queue=msg.queue_id,
            offset=msg.queue_offset, body=body_id(msg.body), reconsume=msg.reconsume_times,
            retry="RETRY_TOPIC" in msg.properties,
        )  # fmt: skip

    def done(op: int, outcome: object) -> None:
        result = outcome if isinstance(outcome, ConsumeResult) else ConsumeResult.SUCCESS
        recorder.complete(op, "ok", "deliver", result=result.name)

    if inspect.iscoroutinefunction(listener):

        async def recorded_async(msg: ReceivedMessage) -> ConsumeResult | None:
            op = invoke(msg)
            try:
                outcome = await listener(msg)
            except BaseException as exc:
                recorder.complete(op, "fail", "deliver", error=_error(exc))
                raise
            done(op, outcome)
            return outcome  # type: ignore[no-any-return]

        return recorded_async

    def recorded(msg: ReceivedMessage) -> Any:
        op = invoke(msg)
        try:
            outcome = listener(msg)
        except BaseException as exc:
            recorder.complete(op, "fail", "deliver", error=_error(exc))
            raise
        done(op, outcome)
        return outcome

    return recorded


async def record_send(
    recorder: Recorder,
    api: BrokerAPI,
    address: str,
    header: SendMessageRequestHeader,
    body: bytes,
    *,
    broker_name: str,
    timeout: float | None = None,
    body_id: Callable[[bytes], Any] = id_of,
) -> SendResponse:
    """One raw SEND_MESSAGE to `address` (one attempt, no retry), recorded; returns and raises
    as `api.send`."""
    op = recorder.invoke("send", topic=header.topic, body=body_id(body), attempts=1)
    try:
        result = await api.send(address, header, body, timeout=timeout)
    except BaseException as exc:
        recorder.complete(op, "info", "send", status="error", error=_error(exc))
        raise
    (ip, port), physical = decode_message_id(result.msg_id)
    recorder.complete(
        op, "ok" if result.status is SendStatus.SEND_OK else "info", "send",
        status=result.status.name, broker_name=broker_name, queue=result.queue_id,
        offset=result.queue_offset, broker=f"{ip}:{port}", phy=physical,
    )  # fmt: skip
    return result


async def record_read(
    recorder: Recorder,
    api: BrokerAPI,
    address: str,
    topic: str,
    broker_name: str,
    queues: int,
    *,
    final: bool = True,
    body_id: Callable[[bytes], Any] = id_of,
) -> int:
    """Read every message of `topic` that the broker at `address` serves (queues 0..queues-1,
    each from offset 0) as a recorded `read`; returns how many it found."""
    op = recorder.invoke("read", topic=topic, broker_name=broker_name, final=final, whole=True)
    messages: list[list[Any]] = []
    try:
        for queue in range(queues):
            offset = 0
            while True:
                pulled = await api.pull(address, pull_header(topic, queue, offset))
                if pulled.status is not PullStatus.FOUND:
                    break
                for m in pulled.messages:
                    host = f"{m.store_host[0]}:{m.store_host[1]}"
                    messages.append(
                        [broker_name, queue, m.queue_offset, body_id(m.body), host,
                         m.store_timestamp]
                    )  # fmt: skip
                offset = pulled.next_begin_offset
    except TideMQError as exc:
        recorder.complete(op, "fail", "read", error=_error(exc))
        raise
    recorder.complete(op, "ok", "read", messages=messages)
    return len(messages)


async def record_commit(
    recorder: Recorder,
    api: BrokerAPI,
    address: str,
    group: str,
    topic: str,
    broker_name: str,
    queue: int,
    offset: int,
    *,
    session: int = 0,
) -> None:
    """One UPDATE_CONSUMER_OFFSET to `address`, recorded: ok only once the broker answered
    SUCCESS (the client's own commit logs a refusal and goes on); raises as the API does."""
    op = recorder.invoke(
        "commit", session=session, group=group, offsets=[[topic, broker_name, queue, offset]]
    )
    try:
        await api.update_consumer_offset(address, group, topic, queue, offset)
    except BaseException as exc:
        recorder.complete(op, "info", "commit", error=_error(exc))
        raise
    recorder.complete(op, "ok", "commit", acknowledged=True)


async def record_committed(
    recorder: Recorder,
    api: BrokerAPI,
    address: str,
    group: str,
    topic: str,
    broker_name: str,
    queue: int,
) -> int:
    """One QUERY_CONSUMER_OFFSET to `address`, recorded (-1: the broker has none)."""
    op = recorder.invoke(
        "committed", group=group, topic=topic, broker_name=broker_name, queue=queue
    )
    try:
        offset = await api.query_consumer_offset(address, group, topic, queue)
    except BaseException as exc:
        recorder.complete(op, "fail", "committed", error=_error(exc))
        raise
    recorder.complete(op, "ok", "committed", offset=offset)
    return offset


# --- checking -------------------------------------------------------------------------------


@dataclass
class Operation:
    """An invoke and its completion (None while it had none), fields of both merged."""

    process: str
    op: int
    f: str
    invoke: Event
    done: Event | None = None

    @property
    def outcome(self) -> str:
        return "open" if self.done is None else str(self.done["type"])

    def get(self, key: str, default: Any = None) -> Any:
        if self.done is not None and key in self.done:
            return self.done[key]
        return self.invoke.get(key, default)


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    violations: dict[str, list[str]] = field(default_factory=lambda: {rule: [] for rule in RULES})
    lost_sends: list[Operation] = field(default_factory=list)  # the lost rule's, for bounds

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def violated(self, rule: str, text: str) -> None:
        self.violations[rule].append(text)

    def summary(self) -> str:
        c = self.counts
        lines = [
            f"sends {c['sends']}: acknowledged {c['acknowledged']}, not acknowledged "
            f"{c['not_acknowledged']}, unknown {c['unknown']} ({c['unknown_stored']} of them "
            f"stored); lost {c['lost']}, "
            f"duplicates {c['duplicates']}; consumed {c['consumed']} ({c['redelivered']} again), "
            f"pushed {c['delivered']} ({c['delivered_again']} again, {c['undelivered']} never), "
            f"committed reads "
            f"{c['committed_reads']} ({c['offsets_back_at_failover']} back across a failover, "
            f"by {c['offsets_back_most']} at most), epochs {c['epochs']}",
            "violations: " + ", ".join(f"{r} {len(self.violations[r])}" for r in RULES),
        ]
        for rule in RULES:
            lines += [f"  {rule}: {text}" for text in self.violations[rule][:5]]
        return "\n".join(lines)


def operations(events: Iterable[Event]) -> list[Operation]:
    """Pair invokes with completions, in the order of their invokes (monotonic time)."""
    ops: dict[tuple[str, int], Operation] = {}
    for event in events:
        kind = event.get("type")
        if kind == "invoke":
            key = (str(event["process"]), int(event["op"]))
            ops[key] = Operation(key[0], key[1], str(event["f"]), event)
        elif kind in ("ok", "fail", "info"):
            found = ops.get((str(event["process"]), int(event["op"])))
            if found is None:
                raise ValueError(f"a completion without its invoke: {event}")
            found.done = event
    return sorted(ops.values(), key=lambda o: float(o.invoke["mono"]))


def check(events: Iterable[Event], *, offsets_replicated: bool = True) -> Report:
    """Judge a history (module docstring); `offsets_replicated` False: committed reads that
    went back across a new epoch are counted, not judged."""
    events = list(events)
    ops = operations(events)
    report = Report()
    sends = [o for o in ops if o.f == "send"]
    acked = [o for o in sends if o.outcome == "ok"]
    c = report.counts
    c["sends"] = len(sends)
    c["acknowledged"] = len(acked)
    c["not_acknowledged"] = sum(1 for o in sends if o.outcome == "fail")
    c["unknown"] = sum(1 for o in sends if o.outcome in ("info", "open"))
    log, read_at = _final_log(ops)
    if log is not None:
        stored = {body for body, _host, _ms in log.values()}
        unknown = {o.get("body") for o in sends if o.outcome in ("info", "open")}
        unknown -= {o.get("body") for o in acked}
        c["unknown_stored"] = len(unknown & stored)  # sends not acknowledged, yet in the log
        c["final_read"] = len(log)
    _check_lost(acked, log, read_at, report)
    _check_positions(acked, report)
    _check_duplicates(sends, log, report)
    _check_order(ops, log, report)
    _check_holes(ops, report)
    _check_offsets(ops, _epoch_starts(events) if not offsets_replicated else [], report)
    _check_epochs(acked, log, events, report)
    _check_deliveries(ops, acked, log, events, report)
    return report


def _position(o: Operation) -> Position:
    return (
        str(o.get("topic")),
        str(o.get("broker_name")),
        int(o.get("queue")),
        int(o.get("offset")),
    )


# position -> (body, store host, store ms)
Log = dict[Position, tuple[Any, str, int]]


def _final_log(ops: list[Operation]) -> tuple[Log | None, float]:
    """The log after healing: the last final read of each topic (None without any) and the
    monotonic time the earliest of them began (acknowledgements after it are not judged)."""
    finals: dict[str, Operation] = {}
    for o in ops:
        if o.f == "read" and o.invoke.get("final") and o.outcome == "ok":
            finals[str(o.get("topic"))] = o
    if not finals:
        return None, 0.0
    log: Log = {}
    for topic, o in finals.items():
        for broker_name, queue, offset, body, host, ms in o.get("messages"):
            log[(topic, str(broker_name), int(queue), int(offset))] = (body, str(host), int(ms))
    return log, min(float(o.invoke["mono"]) for o in finals.values())


def _check_lost(acked: list[Operation], log: Log | None, read_at: float, report: Report) -> None:
    if log is None:
        report.counts["unverified"] = len(acked)
        return
    for o in acked:
        assert o.done is not None
        if float(o.done["mono"]) > read_at:
            report.counts["unverified"] += 1  # acknowledged after the final read began
            continue
        at = _position(o)
        found = log.get(at)
        if found is None or found[0] != o.get("body"):
            report.counts["lost"] += 1
            report.lost_sends.append(o)
            there = "nothing" if found is None else f"body {found[0]!r}"
            report.violated(
                "lost",
                f"body {o.get('body')!r} acknowledged by {o.get('broker')} at {at}; "
                f"the log after healing has {there} there",
            )


def _check_positions(acked: list[Operation], report: Report) -> None:
    by_position: dict[Position, list[Operation]] = defaultdict(list)
    for o in acked:
        by_position[_position(o)].append(o)
    for at, found in by_position.items():
        bodies = {o.get("body") for o in found}
        if len(bodies) > 1:
            who = ", ".join(
                f"{o.get('body')!r} by {o.get('broker')} (epoch {o.get('epoch', '?')})"
                for o in found
            )
            report.violated("position", f"{at} acknowledged for {len(bodies)} bodies: {who}")


def _check_duplicates(sends: list[Operation], log: Log | None, report: Report) -> None:
    if log is None:
        return
    attempts: Counter[Any] = Counter()
    for o in sends:
        attempts[o.get("body")] += int(o.get("attempts", 1))
    copies: Counter[Any] = Counter(body for body, _host, _ms in log.values())
    for body, n in copies.items():
        report.counts["duplicates"] += n - 1
        if body not in attempts:
            report.violated("duplicate", f"body {body!r} is in the log but was never sent")
        elif n > attempts[body]:
            report.violated(
                "duplicate",
                f"body {body!r} at {n} positions; its sends had {attempts[body]} attempts",
            )


def _check_order(ops: list[Operation], log: Log | None, report: Report) -> None:
    highest: dict[tuple[str, Any, str, str, int], int] = {}
    delivered: dict[tuple[tuple[str, Any, str, str, int], int], Any] = {}
    for o in ops:
        if o.f != "poll" or o.outcome != "ok":
            continue
        for topic, broker_name, queue, offset, body in o.get("messages"):
            report.counts["consumed"] += 1
            key = (o.process, o.get("session"), str(topic), str(broker_name), int(queue))
            where = f"session {key[1]} of {o.process} read {key[2:]} offset {offset}"
            top = highest.get(key)
            if top is not None and offset > top + 1:
                report.violated("order", f"{where} after {top}: it skipped {offset - top - 1}")
            elif top is not None and offset <= top:
                # At least once: read again from an earlier offset (a broker that was behind
                # moved the consumer back); the same body, or a violation.
                report.counts["redelivered"] += 1
                if delivered.get((key, offset), body) != body:
                    report.violated(
                        "order",
                        f"{where} again: body {body!r}, {delivered[(key, offset)]!r} before",
                    )
            highest[key] = max(int(offset), -1 if top is None else top)
            delivered[(key, int(offset))] = body
            if log is None:
                continue
            found = log.get((str(topic), str(broker_name), int(queue), int(offset)))
            if found is None or found[0] != body:
                there = "nothing" if found is None else f"body {found[0]!r}"
                report.violated(
                    "order",
                    f"{o.process} read body {body!r} at {key[2:]} offset {offset}; the log "
                    f"after healing has {there} there",
                )


def _check_holes(ops: list[Operation], report: Report) -> None:
    for o in ops:
        if o.f != "read" or o.outcome != "ok" or not o.invoke.get("whole"):
            continue
        offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
        for broker_name, queue, offset, *_rest in o.get("messages"):
            offsets[(str(broker_name), int(queue))].append(int(offset))
        for (broker_name, queue), found in sorted(offsets.items()):
            found.sort()
            gaps = [(a, b) for a, b in itertools.pairwise(found) if b != a + 1]
            if gaps:
                a, b = gaps[0]
                report.violated(
                    "order",
                    f"a read of {o.get('topic')} ({o.process}) served queue {broker_name} "
                    f"{queue} with {len(gaps)} holes or repeats, first {a} then {b}",
                )


def _check_offsets(ops: list[Operation], epoch_starts: list[float], report: Report) -> None:
    # committed reads: against every read of the same queue, and every acknowledged commit of
    # it, that completed before this began (`epoch_starts` empty: judged across epochs too)
    Finished = tuple[float, int, float]  # completion (monotonic), offset, invoke (wall)
    done: dict[tuple[Any, ...], list[Finished]] = defaultdict(list)
    reads = [o for o in ops if o.f == "committed" and o.outcome == "ok"]
    report.counts["committed_reads"] = len(reads)
    for o in reads:
        key = (o.get("group"), o.get("topic"), o.get("broker_name"), o.get("queue"))
        assert o.done is not None
        done[key].append((float(o.done["mono"]), int(o.get("offset")), float(o.invoke["wall"])))
    for o in ops:
        # Only commits the broker answered: the client's own commit logs a refusal and goes on.
        if o.f != "commit" or o.outcome != "ok" or not o.get("acknowledged"):
            continue
        assert o.done is not None
        for topic, broker_name, queue, offset in o.get("offsets"):
            key = (o.get("group"), topic, broker_name, queue)
            done[key].append((float(o.done["mono"]), int(offset), float(o.invoke["wall"])))
    highest: dict[tuple[Any, ...], tuple[list[float], list[tuple[int, float]]]] = {}
    for key, finished in done.items():
        finished.sort()
        times, best = [], []
        top = (-(2**63), 0.0)
        for at, offset, began in finished:
            if offset >= top[0]:
                top = (offset, began)
            times.append(at)
            best.append(top)
        highest[key] = (times, best)
    for o in reads:
        assert o.done is not None
        key = (o.get("group"), o.get("topic"), o.get("broker_name"), o.get("queue"))
        times, best = highest[key]
        i = bisect_right(times, float(o.invoke["mono"]))
        if not i or int(o.get("offset")) >= best[i - 1][0]:
            continue
        before, began = best[i - 1]
        if bisect_right(epoch_starts, float(o.done["wall"])) > bisect_right(epoch_starts, began):
            # Across a failover: the new master answers with the offsets its last
            # SlaveSynchronize copied (RocketMQ's offsets are replicated asynchronously).
            report.counts["offsets_back_at_failover"] += 1
            most = max(report.counts["offsets_back_most"], before - int(o.get("offset")))
            report.counts["offsets_back_most"] = most
            continue
        report.violated(
            "offsets",
            f"committed offset of {key} read {o.get('offset')} after {before} was read or "
            "acknowledged as committed",
        )
    # a session's own commits
    committed: dict[tuple[Any, ...], int] = {}
    for o in ops:
        if o.f != "commit" or o.outcome != "ok":
            continue
        for topic, broker_name, queue, offset in o.get("offsets"):
            mine = (o.process, o.get("session"), o.get("group"), topic, broker_name, queue)
            if offset < committed.get(mine, -1):
                report.violated(
                    "offsets",
                    f"session {mine[1]} of {o.process} committed {offset} for {mine[2:]} after "
                    f"{committed[mine]}",
                )
            committed[mine] = max(offset, committed.get(mine, -1))


def _epoch_starts(events: list[Event]) -> list[float]:
    return sorted(float(e["wall"]) for e in events if e.get("type") == "epoch")


def _check_epochs(acked: list[Operation], log: Log | None, events: list[Event], r: Report) -> None:
    epochs = sorted(
        ((float(e["wall"]), int(e["epoch"]), str(e["broker"])) for e in events
         if e.get("type") == "epoch"),
    )  # fmt: skip
    r.counts["epochs"] = len(epochs)
    if not epochs:
        return  # not a controller-mode group
    starts = [start for start, _epoch, _broker in epochs]
    for o in acked:
        moment = float(o.invoke["wall"])
        found = None if log is None else log.get(_position(o))
        if found is not None and found[0] == o.get("body"):
            moment = max(moment, found[2] / 1000)
        i = bisect_right(starts, moment)
        broker = o.get("broker")
        if i == 0:
            r.violated("epoch", f"body {o.get('body')!r} acknowledged by {broker} before any epoch")
            continue
        _start, epoch, master = epochs[i - 1]
        if master != broker:
            r.violated(
                "epoch",
                f"body {o.get('body')!r} acknowledged by {broker} at {moment:.3f}, in epoch "
                f"{epoch} of {master} (from {_start:.3f})",
            )


def _check_deliveries(
    ops: list[Operation], acked: list[Operation], log: Log | None, events: list[Event], r: Report
) -> None:
    deliveries = [o for o in ops if o.f == "deliver"]
    r.counts["delivered"] = len(deliveries)
    seen: set[tuple[Any, Any]] = set()
    first_at: dict[tuple[Any, Any], float] = {}  # (group, body): its first delivery's invoke
    highest: dict[tuple[Any, str, str, int], int] = {}
    delivered: dict[tuple[tuple[Any, str, str, int], int], Any] = {}
    running: dict[tuple[str, Any, str, str, int], Operation] = {}
    for o in deliveries:
        group, body = o.get("group"), o.get("body")
        if (group, body) in seen:
            r.counts["delivered_again"] += 1
        else:
            seen.add((group, body))
            first_at[(group, body)] = float(o.invoke["mono"])
        if o.get("retry"):
            continue
        topic, broker_name, queue = (
            str(o.get("topic")),
            str(o.get("broker_name")),
            int(o.get("queue")),
        )
        offset = int(o.get("offset"))
        where = f"{o.process} (group {group}) was delivered {topic} {broker_name} {queue}@{offset}"
        if log is not None and any(k[0] == topic for k in log):
            found = log.get((topic, broker_name, queue, offset))
            if found is None or found[0] != body:
                there = "nothing" if found is None else f"body {found[0]!r}"
                r.violated("delivery", f"{where} with body {body!r}; the log has {there} there")
        if not o.get("orderly"):
            continue
        mine = (o.process, o.get("session"), topic, broker_name, queue)
        before = running.get(mine)
        if before is not None and (
            before.done is None or float(before.done["mono"]) > float(o.invoke["mono"])
        ):
            r.violated(
                "delivery",
                f"{where} while offset {before.get('offset')} of the queue was still with its "
                f"session {o.get('session')} (orderly: one at a time)",
            )
        running[mine] = o
        key = (group, topic, broker_name, queue)
        top = highest.get(key)
        if top is not None and offset > top + 1:
            r.violated("delivery", f"{where} after {top}: the group skipped {offset - top - 1}")
        elif top is not None and offset <= top and delivered.get((key, offset), body) != body:
            r.violated(
                "delivery", f"{where} again with body {body!r}, {delivered[(key, offset)]!r} before"
            )
        highest[key] = offset if top is None else max(top, offset)
        delivered[(key, offset)] = body
    for drained in (e for e in events if e.get("type") == "drained"):
        group, topic, at = drained.get("group"), drained.get("topic"), float(drained["mono"])
        missing = [
            o for o in acked
            if o.get("topic") == topic and o.done is not None and float(o.done["mono"]) < at
            and first_at.get((group, o.get("body")), at) >= at
        ]  # fmt: skip
        r.counts["undelivered"] += len(missing)
        for o in missing[:20]:
            r.violated(
                "delivery",
                f"body {o.get('body')!r} acknowledged at {_position(o)} was not delivered to "
                f"group {group} before it was drained",
            )
