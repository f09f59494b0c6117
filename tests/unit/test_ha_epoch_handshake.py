"""Controller mode's epoch handshake on the HA stream (ha/codec.py): the bytes, split anywhere,
and what a decoder refuses."""

from __future__ import annotations

import struct

import pytest

from tidemq.ha.codec import (
    HANDSHAKE_MAGIC,
    EpochsDecoder,
    HAProtocolError,
    HelloDecoder,
    encode_epochs,
    encode_hello,
)


def test_the_bytes() -> None:
    hello = encode_hello(3, [(1, 0), (2, 4096)])
    assert hello == struct.pack(">iiiiqiq", HANDSHAKE_MAGIC, 3, 2, 1, 0, 2, 4096)
    assert hello[:4] == b"TQH1"
    assert encode_epochs([]) == struct.pack(">ii", HANDSHAKE_MAGIC, 0)


@pytest.mark.parametrize("cut", [0, 1, 4, 11, 12, 20, 31])
def test_decoded_from_any_split_with_what_follows(cut: int) -> None:
    data = encode_hello(7, [(1, 0), (5, 123)]) + b"\x00" * 8  # and the first report
    decoder = HelloDecoder()
    first = decoder.feed(data[:cut])
    rest = decoder.feed(data[cut:]) if first is None else first + data[cut:]
    assert decoder.done and decoder.broker_id == 7
    assert decoder.entries == [(1, 0), (5, 123)]
    assert rest == b"\x00" * 8
    epochs = EpochsDecoder()
    assert epochs.feed(encode_epochs([(2, 9)])) == b""
    assert epochs.entries == [(2, 9)]


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">iii", 0x12345678, 1, 0),  # a RocketMQ 4.x report, not a HELLO
        struct.pack(">iii", HANDSHAKE_MAGIC, 1, -1),
        struct.pack(">iii", HANDSHAKE_MAGIC, 1, 10**9),
        encode_hello(1, [(2, 10), (1, 20)]),  # epochs going back
        encode_hello(1, [(1, 20), (2, 10)]),  # offsets going back
    ],
)
def test_refused(data: bytes) -> None:
    with pytest.raises(HAProtocolError):
        HelloDecoder().feed(data)


def test_no_transfer_frame_crosses_an_epochs_start() -> None:
    from tidemq.ha.config import HAConfig
    from tidemq.ha.master import HAService

    epochs = [(1, 0), (2, 5000), (3, 9000)]
    service = HAService(None, HAConfig(), "127.0.0.1", 0, epochs=lambda: epochs)  # type: ignore[arg-type]
    assert service.next_epoch_start(0) == 5000
    assert service.next_epoch_start(5000) == 9000  # a span starting at an epoch's start
    assert service.next_epoch_start(9000) is None
    rocketmq4 = HAService(None, HAConfig(), "127.0.0.1", 0)  # type: ignore[arg-type]
    assert rocketmq4.next_epoch_start(0) is None
