"""RemotingConnection: frames queued in one loop iteration are written together; timeouts; a
request that cannot be written fails alone, a write that raises fails the waiting requests."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.fake_transport import FakeTransport
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import EncodeError
from tidemq.client.remoting.frame import FrameDecoder, encode_command, encode_command_parts
from tidemq.client.transport.connection import ConnectionClosedError, RemotingConnection


def connect(handler: Any = None) -> tuple[RemotingConnection, FakeTransport]:
    connection = RemotingConnection(handler)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def commands_in(data: bytes) -> list[RemotingCommand]:
    return FrameDecoder().feed(data)


async def test_frames_of_one_iteration_go_out_in_one_write() -> None:
    connection, transport = connect()
    oneway = [RemotingCommand.request(100 + i, {"i": str(i)}, b"body" * i) for i in range(5)]
    for command in oneway:
        await connection.oneway(command)
    assert transport.writes == []  # not yet: the loop has not finished this iteration
    await asyncio.sleep(0)
    assert len(transport.writes) == 1
    got = commands_in(transport.writes[0])
    assert [(c.code, c.ext_fields, bytes(c.body)) for c in got] == [
        (c.code, c.ext_fields, bytes(c.body)) for c in oneway
    ]


async def test_responses_to_requests_read_together_are_written_together() -> None:
    async def echo(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, 0, ext_fields=dict(request.ext_fields))

    connection, transport = connect(echo)
    requests = [RemotingCommand.request(1, {"n": str(n)}, opaque=n + 1) for n in range(10)]
    connection.data_received(b"".join(encode_command(r) for r in requests))
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(transport.writes) == 1
    answers = commands_in(transport.writes[0])
    assert sorted((a.opaque, a.ext_fields["n"]) for a in answers) == [
        (n + 1, str(n)) for n in range(10)
    ]
    assert all(a.is_response for a in answers)


async def test_close_writes_what_is_queued_first() -> None:
    connection, transport = connect()
    await connection.oneway(RemotingCommand.request(7))
    connection.close()
    assert transport.closing
    assert [c.code for c in commands_in(b"".join(transport.writes))] == [7]
    await asyncio.sleep(0)
    assert len(transport.writes) == 1  # the flush scheduled earlier finds nothing left


async def test_frames_queued_when_the_connection_is_lost_are_dropped() -> None:
    connection, transport = connect()
    await connection.oneway(RemotingCommand.request(7))
    connection.connection_lost(None)
    await asyncio.sleep(0)
    assert transport.writes == []
    await connection.oneway(RemotingCommand.request(8))  # closed: dropped at once
    await asyncio.sleep(0)
    assert transport.writes == []


async def test_request_gets_its_response() -> None:
    connection, transport = connect()
    call = asyncio.ensure_future(connection.request(RemotingCommand.request(5), 5.0))
    await eventually(lambda: transport.writes, "the request on the wire")
    (sent,) = commands_in(b"".join(transport.writes))
    connection.data_received(encode_command(RemotingCommand.response_to(sent, 0, "fine")))
    response = await call
    assert (response.opaque, response.remark) == (sent.opaque, "fine")
    assert not connection._pending


async def test_a_request_started_without_a_coroutine_is_answered_and_then_forgotten() -> None:
    connection, transport = connect()
    request = RemotingCommand.request(5)
    started = connection.start_request(request, 5.0)
    assert started is not None
    future, timer = started
    await eventually(lambda: transport.writes, "the request on the wire")
    (sent,) = commands_in(b"".join(transport.writes))
    assert sent.opaque == request.opaque
    connection.data_received(encode_command(RemotingCommand.response_to(sent, 0, "fine")))
    assert (await future).remark == "fine"
    connection.end_request(request.opaque, timer)
    assert not connection._pending and not connection._deadlines


async def test_a_started_request_times_out_as_a_request_does() -> None:
    connection, _transport = connect()
    request = RemotingCommand.request(5)
    started = connection.start_request(request, 0.05)
    assert started is not None
    future, timer = started
    with pytest.raises(TimeoutError):
        await future
    connection.end_request(request.opaque, timer)
    assert not connection._pending


async def test_no_request_starts_on_a_paused_or_closed_connection() -> None:
    connection, _transport = connect()
    connection.pause_writing()
    assert connection.start_request(RemotingCommand.request(5), 5.0) is None
    connection.resume_writing()
    connection.connection_lost(None)
    assert connection.start_request(RemotingCommand.request(5), 5.0) is None
    assert not connection._pending


async def test_an_encoded_request_is_written_as_it_is_and_answered() -> None:
    connection, transport = connect()
    opaques = [connection.writable_opaque(), connection.writable_opaque()]
    assert None not in opaques and opaques[0] != opaques[1]
    opaque = opaques[1]
    assert opaque is not None
    request = RemotingCommand.request(5, {"k": "v"}, b"body", opaque=opaque)
    head, body = encode_command_parts(request)
    future, timer = connection.start_encoded(opaque, head, body, 5.0)
    await eventually(lambda: transport.writes, "the request on the wire")
    assert b"".join(transport.writes) == head + body
    (sent,) = commands_in(b"".join(transport.writes))
    connection.data_received(encode_command(RemotingCommand.response_to(sent, 0, "fine")))
    assert (await future).remark == "fine"
    connection.end_request(opaque, timer)
    assert not connection._pending and not connection._deadlines


async def test_an_encoded_request_times_out_as_a_request_does() -> None:
    connection, _transport = connect()
    opaque = connection.writable_opaque()
    assert opaque is not None
    head, body = encode_command_parts(RemotingCommand.request(5, opaque=opaque))
    future, timer = connection.start_encoded(opaque, head, body, 0.05)
    with pytest.raises(TimeoutError):
        await future
    connection.end_request(opaque, timer)
    assert not connection._pending


async def test_no_opaque_is_given_for_a_paused_or_closed_connection() -> None:
    connection, _transport = connect()
    connection.pause_writing()
    assert connection.writable_opaque() is None
    connection.resume_writing()
    assert connection.writable_opaque() is not None
    connection.connection_lost(None)
    assert connection.writable_opaque() is None


async def test_a_request_that_cannot_be_encoded_leaves_nothing_waiting() -> None:
    connection, transport = connect()
    with pytest.raises(EncodeError):
        connection.start_request(RemotingCommand.request(5, body="text"), 5.0)  # type: ignore[arg-type]
    assert not connection._pending and not connection._deadlines
    assert not transport.writes


async def test_request_times_out_and_forgets_the_call() -> None:
    connection, _transport = connect()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await connection.request(RemotingCommand.request(5), 0.05)
    assert 0.04 <= loop.time() - started < 1.0
    assert not connection._pending


async def test_a_late_response_after_a_timeout_is_ignored() -> None:
    connection, transport = connect()
    with pytest.raises(TimeoutError):
        await connection.request(RemotingCommand.request(5), 0.01)
    (sent,) = commands_in(b"".join(transport.writes))
    connection.data_received(encode_command(RemotingCommand.response_to(sent, 0)))


async def test_a_cancelled_request_forgets_the_call() -> None:
    connection, transport = connect()
    call = asyncio.ensure_future(connection.request(RemotingCommand.request(5), 5.0))
    await eventually(lambda: transport.writes, "the request on the wire")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not connection._pending


async def test_a_request_fails_when_the_connection_closes() -> None:
    connection, transport = connect()
    call = asyncio.ensure_future(connection.request(RemotingCommand.request(5), 5.0))
    await eventually(lambda: transport.writes, "the request on the wire")
    connection.connection_lost(None)
    with pytest.raises(ConnectionClosedError):
        await call


async def test_requests_sharing_a_timeout_each_time_out_at_their_own_deadline() -> None:
    connection, _transport = connect()
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.ensure_future(connection.request(RemotingCommand.request(5), 0.05))
    await asyncio.sleep(0.1)  # sent 0.1 s after the first: a deadline later than the first's
    second = asyncio.ensure_future(connection.request(RemotingCommand.request(6), 0.05))
    with pytest.raises(TimeoutError):
        await first
    with pytest.raises(TimeoutError):
        await second
    assert 0.14 <= loop.time() - started < 1.0  # the second was not failed with the first
    assert not connection._pending
    assert not connection._deadlines


async def test_a_request_with_a_shorter_timeout_than_the_one_before_is_not_late() -> None:
    connection, transport = connect()
    loop = asyncio.get_running_loop()
    slow = asyncio.ensure_future(connection.request(RemotingCommand.request(5), 30.0))
    await eventually(lambda: connection._deadlines, "the slow request's deadline queued")
    started = loop.time()
    with pytest.raises(TimeoutError):
        await connection.request(RemotingCommand.request(6), 0.05)
    assert loop.time() - started < 1.0  # not held to the 30 s deadline queued before it
    assert not slow.done()
    (sent_slow,) = [c for c in commands_in(b"".join(transport.writes)) if c.code == 5]
    connection.data_received(encode_command(RemotingCommand.response_to(sent_slow, 0)))
    assert (await slow).opaque == sent_slow.opaque


async def test_answered_requests_leave_no_timer_behind_once_their_deadline_passed() -> None:
    connection, transport = connect()
    for code in range(3):
        call = asyncio.ensure_future(connection.request(RemotingCommand.request(code), 0.05))
        await eventually(lambda: transport.writes, "the request on the wire")
        (sent,) = commands_in(transport.writes.pop())
        connection.data_received(encode_command(RemotingCommand.response_to(sent, 0)))
        await call
        assert not connection._deadlines  # an answered request is forgotten at once
    await eventually(lambda: connection._expiry is None, "the deadline timer done")
    assert not connection._deadlines


async def test_a_request_answered_without_waiting_makes_no_task() -> None:
    async def at_once(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, 0)

    async def not_these(_connection: RemotingConnection, request: RemotingCommand) -> None:
        raise AssertionError(f"request code {request.code} went to the async handler")

    connection = RemotingConnection(not_these, handler_now=at_once, now_codes={1, 2, 3})
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(encode_command(RemotingCommand.request(1, opaque=1)))
    assert connection.requests_in_flight == 0  # answered in data_received itself
    await asyncio.sleep(0)
    assert [c.opaque for c in commands_in(b"".join(transport.writes))] == [1]


async def test_a_request_that_waits_goes_on_in_a_task_and_can_be_cancelled() -> None:
    release = asyncio.Event()
    steps: list[str] = []

    async def waits(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        steps.append("started")
        await asyncio.sleep(0)  # a bare yield first, then a future
        steps.append("yielded")
        try:
            await release.wait()
        except asyncio.CancelledError:
            steps.append("cancelled")
            raise
        return RemotingCommand.response_to(request, 0, remark="late")

    connection, transport = connect(waits)
    connection.data_received(encode_command(RemotingCommand.request(1, opaque=1)))
    connection.data_received(encode_command(RemotingCommand.request(1, opaque=2)))
    assert steps == ["started", "started"]  # both started in data_received
    assert connection.requests_in_flight == 2
    await eventually(lambda: steps.count("yielded") == 2, "both past their first yield")
    first, second = sorted(connection._handling, key=id)
    second.cancel()
    release.set()
    await connection.wait_requests_done(5.0)
    assert steps.count("cancelled") == 1
    answers = commands_in(b"".join(transport.writes))
    assert len(answers) == 1 and answers[0].remark == "late"
    assert first.done() and second.cancelled()


async def test_a_request_waiting_on_one_future_goes_on_without_a_task() -> None:
    """A SYNC_MASTER send waits on its slave's ack future: the future's callback steps it on
    (no task); a second wait then continues in a task; it counts as in flight all along."""
    loop = asyncio.get_running_loop()
    acks = {n: loop.create_future() for n in (1, 2, 3)}
    later = asyncio.Event()
    tasks_seen: list[asyncio.Task[Any] | None] = []

    async def waits(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        ok = await acks[request.opaque]
        tasks_seen.append(asyncio.current_task())
        if request.opaque == 3:
            await later.wait()  # a second wait
        return RemotingCommand.response_to(request, 0, remark=f"acked {ok}")

    connection, transport = connect(waits)
    for n in (1, 2, 3):
        connection.data_received(encode_command(RemotingCommand.request(1, opaque=n)))
    assert connection.requests_in_flight == 3
    assert not connection._handling  # no task for any of them
    acks[2].set_result(True)
    await eventually(lambda: connection.requests_in_flight == 2, "request 2 answered")
    acks[1].cancel()  # the wait itself cancelled: the request ends as a cancelled task does
    await eventually(lambda: connection.requests_in_flight == 1, "request 1 ended")
    acks[3].set_result(False)
    await eventually(lambda: len(connection._handling) == 1, "request 3 in a task")
    assert tasks_seen == [None, None]  # stepped by the callbacks, not by tasks
    later.set()
    await connection.wait_requests_done(5.0)
    assert connection.requests_in_flight == 0
    await asyncio.sleep(0)
    answers = commands_in(b"".join(transport.writes))
    assert [(c.opaque, c.remark) for c in answers] == [(2, "acked True"), (3, "acked False")]


async def test_wait_requests_done_waits_for_requests_without_a_task() -> None:
    ack = asyncio.get_running_loop().create_future()

    async def waits(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        await ack
        return RemotingCommand.response_to(request, 0)

    connection, transport = connect(waits)
    connection.data_received(encode_command(RemotingCommand.request(1, opaque=7)))
    done = asyncio.ensure_future(connection.wait_requests_done(5.0))
    await asyncio.sleep(0.01)
    assert not done.done()
    ack.set_result(None)
    await asyncio.wait_for(done, 5)
    await asyncio.sleep(0)
    assert [c.opaque for c in commands_in(b"".join(transport.writes))] == [7]


async def test_a_handler_that_answers_at_once_makes_no_coroutine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the broker's dispatch_now for END_TRANSACTION: the answer itself, or None for a oneway
    # request; a handler that raises gets SYSTEM_ERROR as an async one does
    def no_coroutine(*_args: object) -> None:
        raise AssertionError("a coroutine was made for a request answered at once")

    monkeypatch.setattr(RemotingConnection, "_handle", no_coroutine)

    def at_once(
        _connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        if request.code == 2:
            raise ValueError("bug")
        if request.code == 3:
            return None
        return RemotingCommand.response_to(request, 0, "ok")

    async def not_these(_connection: RemotingConnection, request: RemotingCommand) -> None:
        raise AssertionError(f"request code {request.code} went to the async handler")

    connection = RemotingConnection(not_these, handler_now=at_once, now_codes={1, 2, 3})
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    oneway = RemotingCommand.request(1, opaque=2)
    oneway.flag |= 2
    requests = [
        RemotingCommand.request(1, opaque=1),
        oneway,  # answered, but oneway: nothing goes out
        RemotingCommand.request(2, opaque=3),
        RemotingCommand.request(3, opaque=4),
    ]
    connection.data_received(b"".join(encode_command(c) for c in requests))
    await asyncio.sleep(0)
    answers = commands_in(b"".join(transport.writes))
    assert [(c.opaque, c.code, c.remark) for c in answers] == [
        (1, 0, "ok"),
        (3, ResponseCode.SYSTEM_ERROR, "ValueError: bug"),
    ]


class RecordingScope:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def begin_read(self) -> None:
        self.calls.append("begin")

    def end_read(self) -> None:
        self.calls.append("end")
        if self.fail:
            raise OSError("no space left on device")


async def test_the_requests_of_one_read_are_bracketed_by_the_read_scope() -> None:
    scope = RecordingScope()

    async def noting(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        scope.calls.append(f"request {request.opaque}")
        return RemotingCommand.response_to(request, 0)

    connection = RemotingConnection(noting, read_scope=scope)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    both = [RemotingCommand.request(1, opaque=n) for n in (1, 2)]
    connection.data_received(b"".join(encode_command(c) for c in both))
    assert scope.calls == ["begin", "request 1", "request 2", "end"]
    connection.data_received(encode_command(RemotingCommand.request(1, opaque=3)))
    assert scope.calls[-1] == "request 3"  # one request alone: nothing to gather
    await asyncio.sleep(0)
    assert [c.opaque for c in commands_in(b"".join(transport.writes))] == [1, 2, 3]


async def test_a_long_read_is_stored_and_answered_in_steps() -> None:
    # the answers of each step are written before the next step's requests run, so the peer
    # starts on them while the rest are stored
    scope = RecordingScope()
    transport = FakeTransport()

    async def noting(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        scope.calls.append(f"request {request.opaque} after {len(transport.writes)} writes")
        return RemotingCommand.response_to(request, 0)

    connection = RemotingConnection(noting, read_scope=scope)
    connection.connection_made(transport)  # type: ignore[arg-type]
    requests = [RemotingCommand.request(1, opaque=n) for n in range(1, 41)]
    connection.data_received(b"".join(encode_command(c) for c in requests))
    steps = [
        list(group)
        for is_bracket, group in itertools.groupby(
            scope.calls, key=lambda call: call in ("begin", "end")
        )
        if not is_bracket
    ]
    assert [len(step) for step in steps] == [16, 16, 8]
    assert scope.calls.count("begin") == scope.calls.count("end") == 3
    assert steps[1][0] == "request 17 after 1 writes"  # the first 16 answers went out
    assert steps[2][0] == "request 33 after 2 writes"
    await asyncio.sleep(0)
    assert [c.opaque for c in commands_in(b"".join(transport.writes))] == list(range(1, 41))


async def test_oneway_requests_do_not_count_toward_a_step() -> None:
    # a transaction's END (oneway) between the sends of a read: a step still holds 16 answered
    # requests, and the oneway ones after the 16th go with it (at f455978 each counted, and a
    # read of sends and ENDs was written and appended twice as often)
    scope = RecordingScope()
    transport = FakeTransport()

    async def noting(
        _connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        scope.calls.append(f"request {request.opaque}")
        return RemotingCommand.response_to(request, 0)

    connection = RemotingConnection(noting, read_scope=scope)
    connection.connection_made(transport)  # type: ignore[arg-type]
    requests = []
    for n in range(1, 41):
        request = RemotingCommand.request(1, opaque=n)
        if n % 2 == 0 or n == 35:  # the even ones, and two in a row at the end
            request.flag |= 2
        requests.append(request)
    connection.data_received(b"".join(encode_command(c) for c in requests))
    steps = [
        [int(call.split()[1]) for call in group]
        for is_bracket, group in itertools.groupby(
            scope.calls, key=lambda call: call in ("begin", "end")
        )
        if not is_bracket
    ]
    # answered: 1, 3, ..., 33 (17 of them), then 37, 39
    assert steps == [list(range(1, 33)), list(range(33, 41))]
    await asyncio.sleep(0)
    answered = [c.opaque for c in commands_in(b"".join(transport.writes))]
    assert answered == [n for n in range(1, 41) if n % 2 and n != 35]


async def test_when_the_read_scope_fails_no_answer_of_that_read_goes_out() -> None:
    async def ok(_connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, 0)

    connection = RemotingConnection(ok, read_scope=RecordingScope(fail=True))
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    both = [RemotingCommand.request(1, opaque=n) for n in (1, 2)]
    connection.data_received(b"".join(encode_command(c) for c in both))
    assert transport.closing
    await asyncio.sleep(0)
    assert transport.writes == []


# --- a request that cannot be written fails alone ------------------------------------------


async def test_a_request_whose_body_no_transport_can_write_fails_alone_at_once() -> None:
    # At c82965c the str body was queued and failed inside the flush callback, which left the
    # frames queued: this request and every later one waited for their timeouts.
    connection, transport = connect()
    bad = RemotingCommand.request(5, body="a str body")  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="not str"):
        await asyncio.wait_for(connection.request(bad, 30.0), 1.0)
    assert not connection._pending
    assert connection.is_open
    call = asyncio.ensure_future(connection.request(RemotingCommand.request(6, body=b"ok"), 5.0))
    await eventually(lambda: transport.writes, "the next request on the wire")
    (sent,) = commands_in(b"".join(transport.writes))
    assert (sent.code, sent.body) == (6, b"ok")
    connection.data_received(encode_command(RemotingCommand.response_to(sent, 0)))
    assert (await asyncio.wait_for(call, 1.0)).opaque == sent.opaque


class BrokenTransport(FakeTransport):
    """A transport whose writes raise; aborting it reports the loss, as a real one does."""

    def __init__(self, connection: RemotingConnection) -> None:
        super().__init__()
        self.connection = connection

    def write(self, data: bytes) -> None:
        raise RuntimeError("the transport failed")

    def writelines(self, parts: list[bytes]) -> None:
        raise RuntimeError("the transport failed")

    def abort(self) -> None:
        super().abort()
        asyncio.get_running_loop().call_soon(self.connection.connection_lost, None)


async def test_a_write_that_raises_fails_the_waiting_requests_at_once() -> None:
    # At c82965c the exception escaped the flush callback with the frames still queued: the
    # requests waited for their timeouts, and close() raised it again.
    connection = RemotingConnection()
    transport = BrokenTransport(connection)
    connection.connection_made(transport)  # type: ignore[arg-type]
    calls = [
        asyncio.ensure_future(connection.request(RemotingCommand.request(code), 30.0))
        for code in (5, 6)
    ]
    for call in calls:
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(call, 1.0)
    assert transport.closing
    assert not connection._outgoing and not connection._pending
    connection.close()  # nothing left queued to fail again


async def test_a_oneway_request_waits_for_a_paused_connection_no_longer_than_its_timeout() -> None:
    connection, transport = connect()
    connection.pause_writing()
    with pytest.raises(TimeoutError):
        await connection.oneway(RemotingCommand.request(5), 0.05)
    assert not transport.writes
    connection.resume_writing()
    await connection.oneway(RemotingCommand.request(5), 0.05)
    await eventually(lambda: transport.writes, "the oneway request on the wire")
    (sent,) = commands_in(b"".join(transport.writes))
    assert sent.is_oneway


async def test_a_oneway_request_goes_now_only_on_a_connection_that_takes_writes() -> None:
    connection, transport = connect()
    connection.pause_writing()
    paused = RemotingCommand.request(5)
    assert not connection.oneway_now(paused)
    assert not paused.is_oneway  # untouched: the caller awaits oneway with it
    connection.resume_writing()
    first, second = RemotingCommand.request(5), RemotingCommand.request(6)
    assert connection.oneway_now(first) and connection.oneway_now(second)
    await eventually(lambda: transport.writes, "the oneway requests on the wire")
    sent = commands_in(b"".join(transport.writes))
    assert [(c.code, c.is_oneway) for c in sent] == [(5, True), (6, True)]
    assert sent[0].opaque != sent[1].opaque
    connection.close()
    assert not connection.oneway_now(RemotingCommand.request(7))


async def test_requests_ask_for_the_running_loop_once_per_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython 3.11's get_running_loop() makes a getpid() system call per call: 0.8 per send
    # before (strace of 20,000 public sends), none after.
    asked: list[None] = []
    real = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        asked.append(None)
        return real()

    connection, transport = connect()
    monkeypatch.setattr(asyncio, "get_running_loop", counted)
    for _ in range(3):
        request = RemotingCommand.request(5)
        started = connection.start_request(request, 5.0)
        assert started is not None
        connection.data_received(encode_command(RemotingCommand.response_to(request, 0)))
        await started[0]
        connection.end_request(request.opaque, started[1])
        await eventually(lambda: not connection._outgoing, "the request written")
    monkeypatch.undo()
    assert len(asked) <= 1
    assert len(commands_in(b"".join(transport.writes))) == 3
