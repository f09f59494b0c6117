"""FrameReceiver (client/transport/receive.py), sans-IO: the same commands and errors as
FrameDecoder for any stream cut into any reads; large bodies are views of pooled buffers that
are reused once released and never while a caller keeps a view; the pool keeps its bounds."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import FrameError
from tidemq.client.remoting.frame import FrameDecoder, encode_command
from tidemq.client.transport.receive import (
    FRAME_BUFFERS,
    LARGE_FRAME,
    RECEIVE_BUFFER,
    BufferPool,
    FrameReceiver,
)


def response(opaque: int, size: int, seed: int = 0, kind: int = SerializeType.JSON) -> bytes:
    body = random.Random(seed).randbytes(size)
    command = RemotingCommand.response_to(
        RemotingCommand.request(10, {"n": str(size)}, serialize_type=SerializeType(kind)), 0
    )
    command.opaque = opaque
    command.body = body
    return encode_command(command)


def read_all(receiver: FrameReceiver, stream: bytes, reads: list[int]) -> list[RemotingCommand]:
    """Feed `stream` as a transport would: each read as large as the next of `reads` (cycled)
    and as the buffer the receiver offers allow."""
    out: list[RemotingCommand] = []
    pos = 0
    turn = 0
    while pos < len(stream):
        buffer = receiver.get_buffer(-1)
        wanted = reads[turn % len(reads)] if reads else len(stream)
        turn += 1
        n = min(len(buffer), max(1, wanted), len(stream) - pos)
        buffer[:n] = stream[pos : pos + n]
        del buffer
        out += receiver.received(n)
        pos += n
    return out


def plain(command: RemotingCommand) -> tuple[Any, ...]:
    return (
        command.code,
        command.opaque,
        command.flag,
        command.remark,
        command.ext_fields,
        command.serialize_type,
        bytes(command.body),
    )


SIZES = st.sampled_from(
    [0, 1, 100, LARGE_FRAME - 200, LARGE_FRAME, LARGE_FRAME + 1, 200_000, RECEIVE_BUFFER + 5]
) | st.integers(0, 3 * RECEIVE_BUFFER)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(SIZES, min_size=1, max_size=6),
    reads=st.lists(st.integers(1, 400_000), max_size=5),
    kind=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.MSGPACK]),
)
def test_the_receiver_gives_the_decoders_commands(
    sizes: list[int], reads: list[int], kind: int
) -> None:
    stream = b"".join(response(i, size, i, kind) for i, size in enumerate(sizes))
    expected = [plain(c) for c in FrameDecoder().feed(stream)]
    receiver = FrameReceiver()
    got = read_all(receiver, stream, reads)
    assert [plain(c) for c in got] == expected
    assert receiver.buffered == 0


def test_large_bodies_are_views_of_a_pooled_buffer_and_small_ones_bytes() -> None:
    receiver = FrameReceiver()
    small, large = read_all(receiver, response(1, 100) + response(2, 300_000), [4096])
    assert type(small.body) is bytes
    assert isinstance(large.body, memoryview) and large.body.readonly is False
    assert isinstance(large.body.obj, bytearray)
    assert bytes(large.body) == random.Random(0).randbytes(300_000)


def test_a_body_kept_by_its_caller_is_never_overwritten() -> None:
    receiver = FrameReceiver()
    kept = [read_all(receiver, response(i, 500_000, seed=i), [65536])[0].body for i in range(12)]
    for i, body in enumerate(kept):
        assert bytes(body) == random.Random(i).randbytes(500_000)
    assert len({id(body.obj) for body in kept}) == 12  # each its own buffer


def test_a_released_body_s_buffer_is_reused() -> None:
    receiver = FrameReceiver()
    first = read_all(receiver, response(1, 400_000, seed=1), [100_000])[0]
    buffer_id = id(first.body.obj)
    del first  # the caller is done with it: the buffer is free again
    second = read_all(receiver, response(2, 300_000, seed=2), [100_000])[0]
    assert id(second.body.obj) == buffer_id
    assert bytes(second.body) == random.Random(2).randbytes(300_000)
    # a slice of a body pins the buffer too
    piece = second.body[10:20]
    del second
    third = read_all(receiver, response(3, 300_000, seed=3), [100_000])[0]
    assert id(third.body.obj) != buffer_id
    assert bytes(piece) == random.Random(2).randbytes(300_000)[10:20]


def test_the_pool_keeps_its_bounds() -> None:
    pool = BufferPool(max_buffers=2, max_bytes=5 << 20)
    held = [pool.take(1 << 20) for _ in range(3)]  # all busy: three made, two kept
    assert len({id(b) for b in held}) == 3
    assert pool.pooled_bytes == 2 << 20
    big = pool.take(6 << 20)  # over max_bytes: handed out, not kept
    assert len(big) == 6 << 20 and pool.pooled_bytes <= 5 << 20
    del held, big
    again = pool.take(100)
    assert len(again) == 1 << 20  # a free kept one, sized in 1 MiB steps


def test_threads_never_share_a_buffer() -> None:
    pool = BufferPool()
    taken: list[bytearray] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            buffer = pool.take(1000)
            with lock:
                taken.append(buffer)  # kept: busy from here on

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(b) for b in taken}) == len(taken) == 200


@pytest.mark.parametrize(
    "prefix",
    [
        b"\x00\x00\x00\x02",  # length below 4
        b"\x7f\xff\xff\xff",  # above the maximum
        b"\x00\x00\x00\x10\x00\x00\x00\x20",  # header longer than the frame
        b"\x00\x10\x00\x10\x09\x00\x00\x01",  # unknown serialize type, in a large frame
    ],
)
def test_errors_are_the_decoders(prefix: bytes) -> None:
    with pytest.raises(FrameError) as decoder_error:
        FrameDecoder().feed(response(1, 10) + prefix)
    receiver = FrameReceiver()
    pooled = FRAME_BUFFERS.pooled_bytes
    with pytest.raises(FrameError) as receiver_error:
        read_all(receiver, response(1, 10) + prefix, [])
    assert str(receiver_error.value) == str(decoder_error.value)
    assert FRAME_BUFFERS.pooled_bytes == pooled  # no buffer was sized for the bad frame
    assert receiver.failed and receiver.buffered == 0
    with pytest.raises(FrameError, match="already failed"):
        receiver.received(0)
    assert len(receiver.get_buffer(-1)) > 0  # a last read may still come before the close


def test_a_bad_header_of_a_large_frame_fails() -> None:
    frame = bytearray(response(1, 200_000, kind=SerializeType.JSON))
    frame[8] = ord("[")  # the JSON header is not an object any more
    with pytest.raises(FrameError) as decoder_error:
        FrameDecoder().feed(bytes(frame))
    with pytest.raises(FrameError) as receiver_error:
        read_all(FrameReceiver(), bytes(frame), [70_000])
    assert str(receiver_error.value) == str(decoder_error.value)


def test_buffered_counts_an_incomplete_frame() -> None:
    receiver = FrameReceiver()
    stream = response(1, 10) + response(2, 100_000)
    read_all(receiver, stream[: len(stream) - 5], [1000])
    assert receiver.buffered == len(response(2, 100_000)) - 5
    small = FrameReceiver()
    read_all(small, response(3, 100)[:-1], [])
    assert small.buffered == len(response(3, 100)) - 1
