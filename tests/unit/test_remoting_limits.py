"""What a remoting server's connections may hold (issue 30 item 4), without sockets where that
is possible: the accounting of partly received frames fed byte by byte through the codecs, the
rate-limited close log, a connection over a limit, and a server on loopback refusing connections
past its maximum and closing a frame that stalls."""

from __future__ import annotations

import asyncio
import logging
import struct
import tracemalloc

import pytest

from tests.support.certs import Pki, make_pki
from tests.support.conditions import eventually
from tests.support.fake_transport import FakeTransport
from tidemq.broker.config import RemotingConfig
from tidemq.broker.remoting.close_log import CloseLog
from tidemq.broker.remoting.limits import SMALL_PARTIAL, PartialFrames, ReceiveLimits
from tidemq.broker.remoting.server import RemotingServer
from tidemq.broker.remoting.tls import TlsMode, TlsServerSettings
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import FrameError
from tidemq.client.remoting.frame import FrameDecoder, encode_command
from tidemq.client.transport.connection import RemotingConnection
from tidemq.client.transport.receive import FrameReceiver
from tidemq.common.errors import ConfigError
from tidemq.common.settings import from_properties

MiB = 1024 * 1024
log = logging.getLogger("test.limits")


def prefix(length: int) -> bytes:
    """A frame's length field and type word (JSON, header length 0): nothing more is needed
    for a frame that never completes."""
    return struct.pack(">iI", length, 0)


def account(**limits: float) -> PartialFrames:
    return PartialFrames(ReceiveLimits(**limits), CloseLog(log, "test"))  # type: ignore[arg-type]


class Fed:
    """A decoder and its connection's account, fed as a connection's reads would be."""

    def __init__(self, frames: PartialFrames) -> None:
        self.decoder = FrameDecoder()
        self.hold = frames.hold()

    def read(self, data: bytes, now: float = 0.0) -> tuple[str, str] | None:
        commands = self.decoder.feed(data)
        return self.hold.update(self.decoder.buffered, bool(commands), now)


# --- the account --------------------------------------------------------------------------


def test_a_connection_holding_more_than_its_limit_is_refused() -> None:
    frames = account(max_partial_frame_bytes=MiB)
    fed = Fed(frames)
    assert fed.read(prefix(15 * MiB)) is None
    for _ in range(15):
        assert fed.read(bytes(64 * 1024)) is None
    refusal = fed.read(bytes(64 * 1024 + 16))
    assert refusal is not None
    reason, detail = refusal
    assert reason == "partial frame over the per-connection limit"
    assert "serverMaxPartialFrameBytes=1048576" in detail
    assert frames.total == fed.decoder.buffered == MiB + 16 + 8


def test_the_budget_refuses_the_read_that_goes_over_it_and_spares_small_frames() -> None:
    frames = account(partial_frame_budget=MiB)
    big, other, small = Fed(frames), Fed(frames), Fed(frames)
    assert big.read(prefix(15 * MiB) + bytes(MiB - 8 - 1000)) is None  # 1000 bytes of room
    assert other.read(prefix(15 * MiB) + bytes(100_000)) is not None  # over it: refused
    # a small request split by TCP is never refused, even with the budget spent
    head = encode_command(RemotingCommand.request(10, {"topic": "T"}, bytes(2000)))
    assert small.read(head[:1500]) is None
    assert frames.total > MiB
    assert small.read(head[1500:]) is None
    assert small.hold.held == 0
    # a refused connection gives its bytes back (the connection calls release as it closes)
    before = frames.total
    other.hold.release()
    assert frames.total == before - 100_008
    assert big.read(bytes(500)) is None  # room again
    big.hold.release()
    assert frames.total == 0


def test_a_partial_frame_that_only_shrinks_is_not_refused_for_the_budget() -> None:
    frames = account(partial_frame_budget=MiB)
    first, second = Fed(frames), Fed(frames)
    frame = encode_command(RemotingCommand.request(10, {}, bytes(200_000)))
    assert first.read(frame[:150_000]) is None
    assert second.read(prefix(15 * MiB) + bytes(MiB)) is not None  # spends the budget
    # the first frame completes, a new one begins with fewer bytes: no growth, no refusal
    assert first.read(frame[150_000:] + frame[:100_000]) is None


def test_small_partial_frames_are_counted() -> None:
    frames = account()
    fed = Fed(frames)
    assert fed.read(prefix(SMALL_PARTIAL) + bytes(100)) is None
    assert frames.total == 108


def test_a_frame_that_takes_too_long_is_refused_on_its_next_read_or_by_the_sweep() -> None:
    frames = account(frame_timeout=5.0)
    fed = Fed(frames)
    assert fed.read(prefix(MiB), now=100.0) is None
    assert fed.read(bytes(1000), now=104.0) is None
    assert fed.hold.overdue(105.0) is None
    refusal = fed.hold.overdue(105.5)
    assert refusal is not None
    assert refusal[0] == "frame receive timeout"
    assert "serverFrameReceiveTimeoutSeconds=5" in refusal[1]
    refusal = fed.read(bytes(1000), now=106.0)
    assert refusal is not None
    assert refusal[0] == "frame receive timeout"


def test_the_clock_restarts_with_each_frame_even_when_no_read_ends_on_a_boundary() -> None:
    # A busy client whose reads all end inside a frame: every frame is quick, none times out.
    frames = account(frame_timeout=5.0)
    fed = Fed(frames)
    frame = encode_command(RemotingCommand.request(10, {"k": "v"}, bytes(500)))
    stream = frame * 100
    step = len(frame) + 7
    now = 0.0
    for start in range(0, len(stream), step):
        now += 1.0  # 100 s in all, one second per read
        assert fed.read(stream[start : start + step], now) is None
    assert fed.hold.overdue(now + 4.0) is None


def test_an_idle_connection_without_a_partial_frame_is_never_overdue() -> None:
    frames = account(frame_timeout=1.0)
    fed = Fed(frames)
    frame = encode_command(RemotingCommand.request(10, {}, b"x"))
    assert fed.read(frame, now=0.0) is None
    assert fed.hold.overdue(1000.0) is None


def test_a_trickled_frame_holds_about_what_it_received() -> None:
    # c82965c kept each read as a bytes object of its own: a 1-byte read cost ~50 bytes.
    decoder = FrameDecoder()
    received = 100_000
    body = b"\x01" * received + bytes(MiB - received - 10) + b"\x02" * 10
    frame = encode_command(RemotingCommand.request(10, {"k": "v"}, body))
    head = len(frame) - len(body)
    tracemalloc.start()
    try:
        decoder.feed(frame[:head])
        start, _peak = tracemalloc.get_traced_memory()
        for _ in range(received):
            decoder.feed(b"\x01")
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered == head + received
    assert held - start < 1.25 * received, held - start
    # and the frame still decodes as sent, once complete
    [command] = decoder.feed(frame[head + received :])
    assert bytes(command.body) == body


def test_discard_drops_the_partial_frame_and_fails_the_codec() -> None:
    decoder = FrameDecoder()
    decoder.feed(prefix(MiB) + bytes(200_000))
    decoder.discard("over a limit")
    assert decoder.buffered == 0
    with pytest.raises(FrameError, match="over a limit"):
        decoder.feed(b"more")
    receiver = FrameReceiver()
    view = receiver.get_buffer()
    data = prefix(MiB) + bytes(1000)
    view[: len(data)] = data
    receiver.received(len(data))
    assert receiver.held == MiB + 4  # the buffer is taken for the whole frame
    receiver.discard("over a limit")
    assert receiver.held == receiver.buffered == 0
    with pytest.raises(FrameError, match="over a limit"):
        receiver.received(1)


# --- the close log --------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_closes_beyond_the_burst_are_summed_up_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    closes = CloseLog(log, "broker-a", interval=1.0, burst=3, clock=clock)
    with caplog.at_level(logging.INFO, logger=log.name):
        for i in range(2000):
            closes.closed("partial frames over the budget", f"closing connection peer-{i}")
            clock.now += 0.0001
        closes.closed("frame receive timeout", "closing connection late")
        assert len(caplog.records) == 3
        closes.flush()  # the interval is not over: nothing yet
        assert len(caplog.records) == 3
        clock.now = 1.5
        closes.flush()
    lines = [record.getMessage() for record in caplog.records]
    assert lines[:3] == [f"broker-a: closing connection peer-{i}" for i in range(3)]
    assert lines[3].startswith("broker-a: 1998 more connections closed in the last 1.5 s: ")
    assert lines[3].endswith("1997 partial frames over the budget, 1 frame receive timeout")


# --- a connection over a limit ------------------------------------------------------------


def test_a_connection_over_a_limit_is_aborted_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    frames = account(max_partial_frame_bytes=100_000)
    connection = RemotingConnection(hold=frames.hold())
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger=log.name):
        connection.data_received(prefix(MiB) + bytes(90_000))
        assert not transport.closing
        connection.data_received(bytes(20_000))
        assert transport.closing
        assert frames.total == 0
        connection.connection_lost(None)  # nothing more to say: the bytes were dropped
    assert [record.getMessage() for record in caplog.records] == [
        "test: closing connection 127.0.0.1:40000: partial frame over the per-connection "
        "limit: 110008 bytes held, serverMaxPartialFrameBytes=100000"
    ]


def test_a_peer_leaving_mid_frame_gives_its_bytes_back() -> None:
    frames = account()
    connection = RemotingConnection(hold=frames.hold())
    connection.connection_made(FakeTransport())  # type: ignore[arg-type]
    connection.data_received(prefix(MiB) + bytes(300_000))
    assert frames.total == 300_008
    connection.connection_lost(None)
    assert frames.total == 0


# --- a server on loopback -----------------------------------------------------------------


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 5) == b""
    except ConnectionResetError:
        return True


async def test_connections_past_the_maximum_are_closed_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RemotingServer("127.0.0.1", 0, name="srv", limits=ReceiveLimits(max_connections=3))
    await server.start()
    streams = []
    try:
        for _ in range(3):
            streams.append(await asyncio.open_connection("127.0.0.1", server.port))
        await eventually(lambda: len(server.connections) == 3, "three connections")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await closed_by_server(reader)
        writer.close()
        assert len(server.connections) == 3
        assert any("too many connections" in r.getMessage() for r in caplog.records)
        # one leaves: a new one is served again
        streams.pop()[1].close()
        await eventually(lambda: len(server.connections) == 2, "a connection gone")
        streams.append(await asyncio.open_connection("127.0.0.1", server.port))
        await eventually(lambda: len(server.connections) == 3, "a new connection served")
    finally:
        for _reader, writer in streams:
            writer.close()
        await server.stop(grace=0.1)


async def test_a_frame_that_stalls_is_closed_by_the_sweep(caplog: pytest.LogCaptureFixture) -> None:
    server = RemotingServer("127.0.0.1", 0, name="srv", limits=ReceiveLimits(frame_timeout=0.5))
    await server.start()
    writers = []
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(writer)
        writer.write(prefix(MiB) + bytes(1000))  # then nothing more
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(idle_writer)
        assert await closed_by_server(reader)
        assert server.partial_frames.total == 0
        assert any("frame receive timeout" in r.getMessage() for r in caplog.records)
        await eventually(lambda: len(server.connections) == 1, "the stalled one gone")
        assert not idle_reader.at_eof()  # an idle connection has no frame to time out
    finally:
        for writer in writers:
            writer.close()
        await server.stop(grace=0.1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def test_a_tls_port_refuses_past_the_maximum_before_reading(pki: Pki) -> None:
    tls = TlsServerSettings(TlsMode.permissive, str(pki.server.cert), str(pki.server.key))
    server = RemotingServer(
        "127.0.0.1", 0, name="srv", tls=tls, limits=ReceiveLimits(max_connections=1)
    )
    await server.start()
    writers = []
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(writer)
        writer.write(prefix(100))  # plaintext on a permissive port: served
        await eventually(lambda: len(server.connections) == 1, "the first connection")
        second, second_writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(second_writer)
        assert await closed_by_server(second)
    finally:
        for writer in writers:
            writer.close()
        await server.stop(grace=0.1)


# --- configuration --------------------------------------------------------------------------


def test_the_keys_reach_the_server_limits() -> None:
    config = from_properties(
        RemotingConfig,
        {
            "serverMaxConnections": "500",
            "serverMaxPartialFrameBytes": "1048576",
            "serverPartialFrameBudgetBytes": "8388608",
            "serverFrameReceiveTimeoutSeconds": "7",
        },
    )
    assert config.receive_limits() == ReceiveLimits(500, MiB, 8 * MiB, 7.0)
    assert RemotingConfig().receive_limits() == ReceiveLimits()


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"serverMaxConnections": "0"}, "serverMaxConnections"),
        ({"serverFrameReceiveTimeoutSeconds": "soon"}, "serverFrameReceiveTimeoutSeconds"),
        ({"serverPartialFrameBudgetBytes": "12"}, "serverPartialFrameBudgetBytes"),
        (
            {"serverMaxPartialFrameBytes": "2048", "serverPartialFrameBudgetBytes": "1024"},
            "serverMaxPartialFrameBytes",
        ),
    ],
)
def test_a_bad_value_names_its_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        from_properties(RemotingConfig, props)
