"""Tests of the HA stream codecs: exact bytes, any read split, every refusal, both side checks."""

from __future__ import annotations

import array
import dataclasses
import itertools
import struct
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.ha.codec import (
    ACK_SIZE,
    CONFIRM_SIZE,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_TRANSFER_BATCH_SIZE,
    MAX_OFFSET,
    MAX_WIRE_BODY_SIZE,
    TRANSFER_HEADER_SIZE,
    TRANSFER_READ_SIZE,
    AckDecoder,
    AckValidator,
    BatchReceived,
    ConfirmReceived,
    Diverged,
    HAProtocolError,
    HeartbeatReceived,
    OffsetReported,
    SlaveStreamChecker,
    TransferBuffer,
    TransferDecoder,
    TransferEvent,
    encode_ack,
    encode_confirm,
    encode_heartbeat,
    encode_transfer,
    encode_transfer_header,
)

# Built here with struct, not with the codec, so a shared mistake cannot hide.


def wire_header(offset: int, size: int) -> bytes:
    return struct.pack(">qi", offset, size)


def wire_frame(offset: int, body: bytes) -> bytes:
    return struct.pack(">qi", offset, len(body)) + body


def wire_ack(offset: int) -> bytes:
    return struct.pack(">q", offset)


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def as_kind(chunk: bytes, kind: str) -> bytes | bytearray | memoryview:
    if kind == "bytearray":
        return bytearray(chunk)
    if kind == "memoryview":
        return memoryview(bytearray(chunk))
    return chunk


def feed_all(decoder: TransferDecoder, chunks: list[bytes]) -> list[TransferEvent]:
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def pattern(size: int) -> bytes:
    """A body whose bytes differ from its neighbours', so a misplaced slice is seen."""
    return (bytes(range(251)) * (size // 251 + 1))[size % 251 : size % 251 + size]


offsets = st.integers(min_value=0, max_value=MAX_OFFSET)
bodies = st.binary(min_size=0, max_size=300)
# Up to 40 KB: bodies that span or fill reads of the zero-copy (>= 4 KiB) kind.
large_bodies = st.integers(min_value=4000, max_value=40_000).map(pattern)


@st.composite
def replication_streams(draw: st.DrawFn, large: bool = False) -> tuple[int, list[bytes]]:
    """A master's contiguous stream: a start offset and bodies, b"" standing for a heartbeat."""
    start = draw(st.integers(min_value=0, max_value=2**40))
    body = st.one_of(bodies, large_bodies) if large else bodies
    return start, draw(st.lists(body, max_size=30 if not large else 12))


def encode_stream(start: int, frames: list[bytes]) -> tuple[bytes, list[TransferEvent]]:
    wire = bytearray()
    expected: list[TransferEvent] = []
    offset = start
    for body in frames:
        wire += wire_frame(offset, body)
        expected.append(BatchReceived(offset, body) if body else HeartbeatReceived(offset))
        offset += len(body)
    return bytes(wire), expected


# -- constants and events --------------------------------------------------------------------


def test_constants_match_rocketmq() -> None:
    assert ACK_SIZE == 8
    assert TRANSFER_HEADER_SIZE == 12
    assert DEFAULT_TRANSFER_BATCH_SIZE == 32 * 1024
    assert DEFAULT_MAX_BODY_SIZE == 4 * 1024 * 1024
    assert TransferDecoder().max_body_size == DEFAULT_MAX_BODY_SIZE


@pytest.mark.parametrize(
    "event",
    [OffsetReported(1), HeartbeatReceived(2), BatchReceived(3, b"x"), Diverged(4, 5)],
)
def test_events_are_frozen_and_slotted(event: object) -> None:
    assert not hasattr(event, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, dataclasses.fields(event)[0].name, 9)  # type: ignore[arg-type]


def test_batch_properties_and_short_repr() -> None:
    batch = BatchReceived(100, b"a" * 32768)
    assert batch.size == 32768
    assert batch.end_offset == 100 + 32768
    assert repr(batch) == "BatchReceived(offset=100)"
    assert BatchReceived(1, memoryview(b"ab")) == BatchReceived(1, b"ab")


# -- upstream: acks --------------------------------------------------------------------------


def test_ack_exact_bytes() -> None:
    assert encode_ack(0x0102030405060708) == bytes.fromhex("0102030405060708")
    assert encode_ack(0) == wire_ack(0) == bytes(8)
    assert encode_ack(MAX_OFFSET) == wire_ack(MAX_OFFSET)


@pytest.mark.parametrize("offset", [-1, MAX_OFFSET + 1])
def test_encode_ack_refuses_what_a_long_offset_cannot_be(offset: int) -> None:
    with pytest.raises(ValueError, match="offset"):
        encode_ack(offset)


def test_ack_split_and_coalesced_reads() -> None:
    decoder = AckDecoder()
    stream = wire_ack(5) + wire_ack(1 << 40) + wire_ack(7)
    assert decoder.feed(stream[:3]) == []
    assert decoder.buffered == 3
    assert decoder.feed(stream[3:20]) == [OffsetReported(5), OffsetReported(1 << 40)]
    assert decoder.buffered == 4
    assert decoder.feed(stream[20:]) == [OffsetReported(7)]
    assert decoder.buffered == 0


def test_ack_byte_by_byte() -> None:
    decoder = AckDecoder()
    stream = b"".join(wire_ack(v) for v in (0, 1, 2**62))
    events = [event for i in range(len(stream)) for event in decoder.feed(stream[i : i + 1])]
    assert events == [OffsetReported(0), OffsetReported(1), OffsetReported(2**62)]


def test_ack_feed_last_keeps_rocketmq_semantics() -> None:
    decoder = AckDecoder()
    stream = wire_ack(10) + wire_ack(20) + wire_ack(30)
    # As RocketMQ's master: of one read only the last complete long is used; the tail waits.
    assert decoder.feed_last(stream[:20]) == OffsetReported(20)
    assert decoder.feed_last(stream[20:23]) is None
    assert decoder.feed_last(b"") is None
    assert decoder.feed_last(stream[23:]) == OffsetReported(30)


def test_ack_tail_survives_reuse_of_the_callers_buffer() -> None:
    decoder = AckDecoder()
    buf = bytearray(wire_ack(42)[:5])
    assert decoder.feed(buf) == []
    buf[:] = b"\xff" * 5
    assert decoder.feed(wire_ack(42)[5:]) == [OffsetReported(42)]


@pytest.mark.parametrize("method", ["feed", "feed_last"])
def test_negative_ack_is_a_protocol_error_and_kills_the_decoder(method: str) -> None:
    decoder = AckDecoder()
    # The negative value is not the last one: feed_last must not skip over it unseen.
    with pytest.raises(HAProtocolError, match="negative offset -1"):
        getattr(decoder, method)(wire_ack(5) + wire_ack(-1) + wire_ack(6))
    with pytest.raises(HAProtocolError, match="already failed"):
        getattr(decoder, method)(wire_ack(7))


@given(
    values=st.lists(offsets, max_size=40),
    data=st.data(),
)
def test_ack_any_chunking_gives_the_same_reports(values: list[int], data: st.DataObject) -> None:
    stream = b"".join(wire_ack(v) for v in values)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    kinds = st.sampled_from(["bytes", "bytearray", "memoryview"])
    every, last = AckDecoder(), AckDecoder()
    reported: list[OffsetReported] = []
    for chunk in split(stream, cuts):
        kind = data.draw(kinds)
        events = every.feed(as_kind(chunk, kind))
        reported += events
        assert last.feed_last(as_kind(chunk, kind)) == (events[-1] if events else None)
    assert reported == [OffsetReported(v) for v in values]
    assert every.buffered == last.buffered == 0


# -- downstream: transfer frames -------------------------------------------------------------


def test_transfer_header_exact_bytes() -> None:
    assert encode_transfer_header(0x0102030405060708, 0x8000) == bytes.fromhex(
        "010203040506070800008000"
    )
    assert encode_transfer_header(1 << 30, 32768) == wire_header(1 << 30, 32768)
    assert encode_heartbeat(4096) == wire_header(4096, 0)


@pytest.mark.parametrize(
    ("offset", "size", "match"),
    [
        (-1, 0, "offset"),
        (MAX_OFFSET + 1, 0, "offset"),
        (0, -1, "size"),
        (0, MAX_WIRE_BODY_SIZE + 1, "size"),
        (MAX_OFFSET, 1, "ends past"),
    ],
)
def test_encode_transfer_header_refuses_unencodable_frames(
    offset: int, size: int, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        encode_transfer_header(offset, size)


def test_encode_transfer_does_not_copy_the_body() -> None:
    body = bytearray(b"commitlog bytes")
    header, view = encode_transfer(300, body)
    assert header == wire_header(300, len(body))
    assert isinstance(view, memoryview)
    assert view.obj is body
    assert bytes(header) + bytes(view) == wire_frame(300, bytes(body))


def test_encode_transfer_counts_bytes_not_items() -> None:
    body = array.array("i", [1, 2, 3])
    header, view = encode_transfer(0, body)  # type: ignore[arg-type]
    assert header == wire_header(0, 3 * body.itemsize)
    assert bytes(view) == body.tobytes()


def test_encode_transfer_of_an_empty_body_is_a_heartbeat() -> None:
    assert encode_transfer(77, b"") == [wire_header(77, 0)]


def test_batch_and_heartbeat_round_trip() -> None:
    decoder = TransferDecoder()
    body = bytes(range(256)) * 128
    stream = b"".join(encode_transfer(1000, body)) + encode_heartbeat(1000 + len(body))
    assert decoder.feed(stream) == [
        BatchReceived(1000, body),
        HeartbeatReceived(1000 + len(body)),
    ]
    assert decoder.buffered == 0


def test_header_split_across_reads() -> None:
    decoder = TransferDecoder()
    frame = wire_frame(2**33, b"hello")
    assert decoder.feed(frame[:5]) == []
    assert decoder.feed(frame[5:11]) == []
    assert decoder.buffered == 11
    assert decoder.feed(frame[11:14]) == []
    assert decoder.buffered == 14
    assert decoder.feed(frame[14:]) == [BatchReceived(2**33, b"hello")]
    assert decoder.buffered == 0


def test_body_split_across_many_reads_is_joined_once() -> None:
    decoder = TransferDecoder()
    body = bytes(range(256)) * 128  # one 32 KiB batch
    stream = wire_frame(0, body)
    chunks = split(stream, list(range(1000, len(stream), 1000)))
    (event,) = feed_all(decoder, chunks)
    assert event == BatchReceived(0, body)
    assert isinstance(event, BatchReceived)
    assert type(event.body) is bytes


def test_body_inside_one_read_is_a_view_of_it() -> None:
    decoder = TransferDecoder()
    one, two = pattern(3000), pattern(3001)
    chunk = wire_frame(0, one) + wire_frame(3000, two)
    first, second = decoder.feed(chunk)
    assert isinstance(first, BatchReceived)
    assert isinstance(second, BatchReceived)
    for event in (first, second):
        assert isinstance(event.body, memoryview)
        assert event.body.obj is chunk
        assert event.body.readonly
    assert (first.body, second.body) == (one, two)


def test_body_that_is_a_whole_read_is_that_read() -> None:
    decoder = TransferDecoder()
    body = b"x" * DEFAULT_TRANSFER_BATCH_SIZE
    assert decoder.feed(wire_header(64, len(body))) == []
    (event,) = decoder.feed(body)
    assert isinstance(event, BatchReceived)
    assert event.body is body


def test_mutable_input_is_copied_because_the_caller_reuses_it() -> None:
    decoder = TransferDecoder()
    buf = bytearray(wire_frame(8, b"abcdef"))
    (event,) = decoder.feed(buf)
    buf[:] = bytes(len(buf))
    assert event == BatchReceived(8, b"abcdef")


def test_small_reads_are_merged_and_their_bodies_survive_later_reads() -> None:
    decoder = TransferDecoder()
    stream = wire_frame(0, b"abc") + wire_frame(3, b"defg")
    (first,) = decoder.feed(stream[:16])  # the first frame and 1 byte of the next
    assert decoder.feed(stream[16:20]) == []  # merged into the buffer `first` came from
    assert first == BatchReceived(0, b"abc")
    assert decoder.feed(stream[20:]) == [BatchReceived(3, b"defg")]


def test_tiny_reads_do_not_multiply_the_memory_held() -> None:
    body = pattern(256 * 1024)
    stream = wire_frame(0, body)
    decoder = TransferDecoder()
    tracemalloc.start()
    try:
        for i in range(len(stream) - 1):
            decoder.feed(stream[i : i + 1])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One bytes object per queued 1-byte read would be ~40 times the body.
    assert peak < 2 * len(body)
    assert decoder.feed(stream[-1:]) == [BatchReceived(0, body)]


def test_heartbeats_only() -> None:
    decoder = TransferDecoder()
    stream = encode_heartbeat(0) + encode_heartbeat(0) + encode_heartbeat(1 << 30)
    events = [event for b in range(len(stream)) for event in decoder.feed(stream[b : b + 1])]
    assert events == [HeartbeatReceived(0), HeartbeatReceived(0), HeartbeatReceived(1 << 30)]


def test_frames_across_a_read_boundary_keep_their_order() -> None:
    decoder = TransferDecoder()
    stream = wire_frame(0, b"ab") + encode_heartbeat(2) + wire_frame(2, b"cdef")
    assert decoder.feed(stream[:17]) == [BatchReceived(0, b"ab")]
    assert decoder.feed(stream[17:]) == [HeartbeatReceived(2), BatchReceived(2, b"cdef")]


def test_body_of_exactly_the_bound_is_accepted() -> None:
    decoder = TransferDecoder(max_body_size=16)
    assert decoder.feed(wire_frame(0, b"z" * 16)) == [BatchReceived(0, b"z" * 16)]


@pytest.mark.parametrize(
    ("header", "max_body_size", "match"),
    [
        (wire_header(-1, 10), DEFAULT_MAX_BODY_SIZE, "negative offset -1"),
        (wire_header(-(2**63), 0), DEFAULT_MAX_BODY_SIZE, "negative offset"),
        (wire_header(0, -1), DEFAULT_MAX_BODY_SIZE, "negative body size -1"),
        (wire_header(0, -(2**31)), DEFAULT_MAX_BODY_SIZE, "negative body size"),
        (wire_header(0, 17), 16, "body size 17 at offset 0 exceeds 16"),
        (wire_header(0, DEFAULT_MAX_BODY_SIZE + 1), DEFAULT_MAX_BODY_SIZE, "exceeds 4194304"),
        (wire_header(0, MAX_WIRE_BODY_SIZE), DEFAULT_MAX_BODY_SIZE, "exceeds"),
        (wire_header(MAX_OFFSET, 1), DEFAULT_MAX_BODY_SIZE, "ends past"),
    ],
)
def test_bad_header_is_refused_before_its_body_arrives(
    header: bytes, max_body_size: int, match: str
) -> None:
    decoder = TransferDecoder(max_body_size=max_body_size)
    assert decoder.feed(header[:7]) == []
    with pytest.raises(HAProtocolError, match=match):
        decoder.feed(header[7:])


def test_a_failed_decoder_stays_failed() -> None:
    decoder = TransferDecoder()
    # The good frame before the bad header in the same read is dropped with it.
    with pytest.raises(HAProtocolError):
        decoder.feed(wire_frame(0, b"ok") + wire_header(-5, 0))
    with pytest.raises(HAProtocolError, match="already failed"):
        decoder.feed(encode_heartbeat(2))


def test_offset_at_the_top_of_the_range_is_accepted() -> None:
    decoder = TransferDecoder()
    stream = encode_heartbeat(MAX_OFFSET) + wire_frame(MAX_OFFSET - 3, b"end")
    assert decoder.feed(stream) == [
        HeartbeatReceived(MAX_OFFSET),
        BatchReceived(MAX_OFFSET - 3, b"end"),
    ]


@pytest.mark.parametrize("bound", [0, -1, MAX_WIRE_BODY_SIZE + 1])
def test_decoder_bound_must_fit_the_size_field(bound: int) -> None:
    with pytest.raises(ValueError, match="max_body_size"):
        TransferDecoder(max_body_size=bound)


def test_empty_feed_is_a_no_op() -> None:
    decoder = TransferDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(wire_header(0, 3)) == []
    assert decoder.feed(b"") == []
    assert decoder.buffered == TRANSFER_HEADER_SIZE


@given(stream=replication_streams())
def test_byte_by_byte_gives_the_frames(stream: tuple[int, list[bytes]]) -> None:
    wire, expected = encode_stream(*stream)
    decoder = TransferDecoder()
    assert feed_all(decoder, [wire[i : i + 1] for i in range(len(wire))]) == expected
    assert decoder.buffered == 0


@given(stream=replication_streams(large=True), data=st.data())
def test_any_chunking_gives_the_frames(
    stream: tuple[int, list[bytes]], data: st.DataObject
) -> None:
    wire, expected = encode_stream(*stream)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=40))
    kinds = st.sampled_from(["bytes", "bytearray", "memoryview"])
    decoder = TransferDecoder(max_body_size=40_000)
    events = [
        event
        for chunk in split(wire, cuts)
        for event in decoder.feed(as_kind(chunk, data.draw(kinds)))
    ]
    assert events == expected
    assert decoder.buffered == 0


@given(offset=offsets, body=bodies)
def test_round_trip(offset: int, body: bytes) -> None:
    if offset > MAX_OFFSET - len(body):
        offset = MAX_OFFSET - len(body)
    (event,) = TransferDecoder().feed(b"".join(encode_transfer(offset, body)))
    assert event == (BatchReceived(offset, body) if body else HeartbeatReceived(offset))


# -- slave side: decoding in the receive buffer ----------------------------------------------


def read_through(buffer: TransferBuffer, wire: bytes, sizes: list[int]) -> list[TransferEvent]:
    """What the transport does: each read fills part of `get_buffer`'s view (`sizes` cycled,
    cut to the room there is); every body is copied out before the next read, as the slave
    appends it."""
    events: list[TransferEvent] = []
    done, turn = 0, 0
    while done < len(wire):
        room = buffer.get_buffer()
        assert 1 <= len(room) <= buffer.read_size
        n = min(len(room), len(wire) - done, sizes[turn % len(sizes)] if sizes else len(room))
        room[:n] = wire[done : done + n]
        done += n
        turn += 1
        for event in buffer.received(n):
            if isinstance(event, BatchReceived):
                assert isinstance(event.body, memoryview) and event.body.readonly
                event = BatchReceived(event.offset, bytes(event.body))
            events.append(event)
    return events


def test_buffer_read_size_is_what_the_slave_appends_at_once() -> None:
    buffer = TransferBuffer()
    assert buffer.max_body_size == DEFAULT_MAX_BODY_SIZE
    assert buffer.read_size == TRANSFER_READ_SIZE == 1024 * 1024
    assert len(buffer.get_buffer()) == TRANSFER_READ_SIZE


def test_buffer_bodies_are_views_of_one_reused_buffer() -> None:
    buffer = TransferBuffer()
    seen = []
    for offset in (0, 3000, 6000):
        frame = wire_frame(offset, pattern(3000))
        room = buffer.get_buffer()
        room[: len(frame)] = frame
        (event,) = buffer.received(len(frame))
        assert isinstance(event, BatchReceived) and isinstance(event.body, memoryview)
        assert bytes(event.body) == pattern(3000)
        seen.append(event.body.obj)
    # No read allocated anything: every body lies in the same buffer, which starts over at its
    # front once a read ended on a frame boundary.
    assert seen[0] is seen[1] is seen[2]
    assert buffer.buffered == 0


def test_buffer_moves_an_incomplete_frame_to_the_front_and_keeps_it() -> None:
    # 80 frames of 32 KiB: reads pass the recycling point twice, with a frame cut at each read.
    frames = [pattern(DEFAULT_TRANSFER_BATCH_SIZE - i) for i in range(80)]
    wire, expected = encode_stream(1 << 30, frames)
    buffer = TransferBuffer()
    assert read_through(buffer, wire, [100_003, 77_777, TRANSFER_READ_SIZE]) == expected
    assert buffer.buffered == 0


def test_buffer_holds_a_frame_of_the_largest_size() -> None:
    body = pattern(4000)
    buffer = TransferBuffer(max_body_size=4000, read_size=1000)
    wire = wire_frame(0, body) + wire_frame(4000, body) + encode_heartbeat(8000)
    assert read_through(buffer, wire, [999, 1000, 7]) == [
        BatchReceived(0, body),
        BatchReceived(4000, body),
        HeartbeatReceived(8000),
    ]


@given(stream=replication_streams(large=True), data=st.data())
def test_buffer_gives_the_frames_the_decoder_gives(
    stream: tuple[int, list[bytes]], data: st.DataObject
) -> None:
    wire, expected = encode_stream(*stream)
    read_size = data.draw(st.sampled_from([1, 13, 4096, 50_000, TRANSFER_READ_SIZE]))
    sizes = data.draw(st.lists(st.integers(1, read_size), max_size=10))
    buffer = TransferBuffer(max_body_size=40_000, read_size=read_size)
    assert read_through(buffer, wire, sizes) == expected
    assert buffer.buffered == 0


@given(
    garbage=st.binary(min_size=12, max_size=200),
    sizes=st.lists(st.integers(1, 64), min_size=1, max_size=5),
)
def test_buffer_refuses_what_the_decoder_refuses(garbage: bytes, sizes: list[int]) -> None:
    def outcome(decode: Callable[[], list[TransferEvent]]) -> object:
        try:
            return decode()
        except HAProtocolError as exc:
            return str(exc)

    # Each feeds the same reads; events of the read that fails are dropped by both.
    cuts = list(itertools.accumulate(itertools.islice(itertools.cycle(sizes), len(garbage))))
    reads = split(garbage, [c for c in cuts if c < len(garbage)])
    decoder = TransferDecoder(max_body_size=100)
    buffer = TransferBuffer(max_body_size=100, read_size=64)

    def through_buffer(read: bytes) -> list[TransferEvent]:
        buffer.get_buffer()[: len(read)] = read
        return [
            BatchReceived(e.offset, bytes(e.body)) if isinstance(e, BatchReceived) else e
            for e in buffer.received(len(read))
        ]

    for read in reads:
        expected = outcome(lambda: decoder.feed(read))  # noqa: B023 - called at once
        assert outcome(lambda: through_buffer(read)) == expected  # noqa: B023
        if isinstance(expected, str):
            break


@pytest.mark.parametrize(
    ("header", "max_body_size", "match"),
    [
        (wire_header(-1, 10), DEFAULT_MAX_BODY_SIZE, "negative offset -1"),
        (wire_header(0, -1), DEFAULT_MAX_BODY_SIZE, "negative body size -1"),
        (wire_header(0, 17), 16, "body size 17 at offset 0 exceeds 16"),
        (wire_header(0, MAX_WIRE_BODY_SIZE), DEFAULT_MAX_BODY_SIZE, "exceeds"),
        (wire_header(MAX_OFFSET, 1), DEFAULT_MAX_BODY_SIZE, "ends past"),
    ],
)
def test_buffer_refuses_a_bad_header_before_its_body_and_stays_failed(
    header: bytes, max_body_size: int, match: str
) -> None:
    buffer = TransferBuffer(max_body_size=max_body_size)
    buffer.get_buffer()[:7] = header[:7]
    assert buffer.received(7) == []
    buffer.get_buffer()[:5] = header[7:]
    with pytest.raises(HAProtocolError, match=match):
        buffer.received(5)
    with pytest.raises(HAProtocolError, match="already failed"):
        buffer.received(0)


def test_buffer_refuses_more_than_the_room_it_gave() -> None:
    buffer = TransferBuffer(read_size=100)
    assert len(buffer.get_buffer()) == 100
    with pytest.raises(ValueError, match="at most 100"):
        buffer.received(101)


@pytest.mark.parametrize(
    ("max_body_size", "read_size", "match"),
    [(0, 100, "max_body_size 0"), (100, 0, "read_size 0")],
)
def test_buffer_sizes_must_be_usable(max_body_size: int, read_size: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TransferBuffer(max_body_size=max_body_size, read_size=read_size)


# -- slave side: stream consistency ----------------------------------------------------------


def test_empty_slave_accepts_any_offset_and_adopts_it() -> None:
    checker = SlaveStreamChecker(0)
    assert checker.check(HeartbeatReceived(1 << 30)) is None
    batch = BatchReceived(1 << 30, b"abc")
    assert checker.check(batch) is None
    checker.applied(batch)
    assert checker.local_max_offset == (1 << 30) + 3


def test_frames_that_continue_the_log_are_in_sync() -> None:
    checker = SlaveStreamChecker(100)
    assert checker.check(HeartbeatReceived(100)) is None
    batch = BatchReceived(100, b"0123456789")
    assert checker.check(batch) is None
    checker.applied(batch)
    assert checker.local_max_offset == 110
    assert checker.check(HeartbeatReceived(110)) is None


@pytest.mark.parametrize("event", [HeartbeatReceived(90), BatchReceived(120, b"x")])
def test_divergence_reports_both_offsets(event: TransferEvent) -> None:
    # RocketMQ #323: the slave only logged and reconnected forever; the service needs both.
    checker = SlaveStreamChecker(100)
    verdict = checker.check(event)
    assert verdict == Diverged(local_offset=100, master_offset=event.offset)
    match verdict:
        case Diverged(local, master):
            assert (local, master) == (100, event.offset)
        case _:
            pytest.fail("no divergence")
    assert checker.local_max_offset == 100


def test_applying_a_diverged_batch_is_a_bug() -> None:
    checker = SlaveStreamChecker(100)
    with pytest.raises(ValueError, match="diverged"):
        checker.applied(BatchReceived(50, b"x"))
    assert checker.local_max_offset == 100


def test_checker_refuses_a_negative_local_offset() -> None:
    with pytest.raises(ValueError, match="offset"):
        SlaveStreamChecker(-1)


@given(stream=replication_streams(), local_is_empty=st.booleans())
def test_a_masters_contiguous_stream_never_diverges(
    stream: tuple[int, list[bytes]], local_is_empty: bool
) -> None:
    start, frames = stream
    wire, _ = encode_stream(start, frames)
    checker = SlaveStreamChecker(0 if local_is_empty else start)
    for event in TransferDecoder().feed(wire):
        assert checker.check(event) is None
        if isinstance(event, BatchReceived):
            checker.applied(event)
    if any(frames):
        assert checker.local_max_offset == start + sum(map(len, frames))


# -- master side: ack validation -------------------------------------------------------------


def test_first_report_is_the_request_offset_not_an_ack() -> None:
    validator = AckValidator()
    assert validator.report(500, master_max_offset=1000) is None
    assert validator.slave_request_offset == 500
    assert validator.slave_ack_offset is None


def test_later_reports_are_acks() -> None:
    validator = AckValidator()
    validator.report(0, master_max_offset=1000)
    assert validator.report(400, master_max_offset=1000) == 400
    assert validator.report(400, master_max_offset=1000) == 400  # the 5 s repeat
    assert validator.report(1000, master_max_offset=1000) == 1000  # caught up
    assert validator.slave_request_offset == 0
    assert validator.slave_ack_offset == 1000


def test_forged_ack_above_the_masters_max_is_refused() -> None:
    # RocketMQ #3015: a too-large ack released SYNC_MASTER writes that no slave held.
    validator = AckValidator()
    validator.report(100, master_max_offset=1000)
    with pytest.raises(HAProtocolError, match="ack 1001 is above the master's max offset 1000"):
        validator.report(1001, master_max_offset=1000)
    assert validator.slave_ack_offset is None


def test_request_above_the_masters_max_is_a_diverged_slave_not_a_violation() -> None:
    validator = AckValidator()
    # The master answers with a heartbeat at its max; the slave then sees the divergence.
    assert validator.report(2000, master_max_offset=1000) is None
    assert validator.slave_request_offset == 2000
    with pytest.raises(HAProtocolError, match="ack 2000 is above the master's max offset 1000"):
        validator.report(2000, master_max_offset=1000)
    assert validator.slave_ack_offset is None


def test_ack_below_the_previous_report_is_refused() -> None:
    validator = AckValidator()
    validator.report(100, master_max_offset=1000)
    validator.report(300, master_max_offset=1000)
    with pytest.raises(HAProtocolError, match="ack 299 is below its previous report 300"):
        validator.report(299, master_max_offset=1000)
    assert validator.slave_ack_offset == 300
    assert validator.report(300, master_max_offset=1000) == 300


def test_ack_below_the_request_offset_is_refused() -> None:
    validator = AckValidator()
    validator.report(100, master_max_offset=1000)
    with pytest.raises(HAProtocolError, match="below its previous report 100"):
        validator.report(99, master_max_offset=1000)


@given(reports=st.lists(st.integers(0, 2**40), min_size=1, max_size=20))
def test_non_decreasing_reports_within_the_log_are_accepted(reports: list[int]) -> None:
    reports.sort()
    validator = AckValidator()
    acks = [validator.report(offset, master_max_offset=reports[-1]) for offset in reports]
    assert acks == [None, *reports[1:]]
    assert validator.slave_request_offset == reports[0]


def test_decoder_and_validator_together() -> None:
    decoder, validator = AckDecoder(), AckValidator()
    acks = []
    for read in (wire_ack(0)[:3], wire_ack(0)[3:] + wire_ack(50)[:2], wire_ack(50)[2:]):
        reported = decoder.feed_last(read)
        if reported is not None:
            acks.append(validator.report(reported.offset, master_max_offset=64))
    assert acks == [None, 50]


# -- controller mode: CONFIRM frames ---------------------------------------------------------


def test_a_confirm_frame_is_a_header_of_size_minus_one() -> None:
    assert encode_confirm(4096) == wire_header(4096, -1) == wire_header(4096, CONFIRM_SIZE)
    with pytest.raises(ValueError):
        encode_confirm(-1)


@pytest.mark.parametrize("sizes", [[], [1], [5, 13], [12]], ids=["whole", "1", "5-13", "12"])
def test_confirm_frames_between_transfers_are_decoded_in_controller_mode(sizes: list[int]) -> None:
    wire = (
        encode_confirm(0)
        + wire_frame(0, pattern(100))
        + encode_confirm(100)
        + encode_heartbeat(100)
        + wire_frame(100, pattern(50))
        + encode_confirm(150)
    )
    expected = [
        ConfirmReceived(0),
        BatchReceived(0, pattern(100)),
        ConfirmReceived(100),
        HeartbeatReceived(100),
        BatchReceived(100, pattern(50)),
        ConfirmReceived(150),
    ]
    assert read_through(TransferBuffer(confirm_frames=True), wire, sizes) == expected
    decoder = TransferDecoder(confirm_frames=True)
    chunks = split(wire, [n for n in itertools.accumulate(sizes) if n < len(wire)])
    assert feed_all(decoder, chunks) == expected
    assert SlaveStreamChecker(100).check(ConfirmReceived(7)) is None


def test_a_4x_stream_refuses_a_confirm_frame() -> None:
    """RocketMQ 4.x's stream (no epoch handshake) stays byte for byte: size -1 is refused."""
    wire = wire_frame(0, pattern(10)) + encode_confirm(10)
    with pytest.raises(HAProtocolError, match="negative body size -1"):
        read_through(TransferBuffer(), wire, [])
    with pytest.raises(HAProtocolError, match="negative body size -1"):
        TransferDecoder().feed(wire)
    with pytest.raises(HAProtocolError, match="negative offset"):  # not even in controller mode
        TransferDecoder(confirm_frames=True).feed(wire_header(-5, CONFIRM_SIZE))
    with pytest.raises(HAProtocolError, match="negative body size -2"):
        read_through(TransferBuffer(confirm_frames=True), wire_header(0, -2), [])
