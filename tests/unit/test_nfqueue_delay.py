"""The NFQUEUE delayer's netlink codec (tests/support/nfqueue_delay.py): what it reads from the
kernel and what it writes back, without a socket."""

from __future__ import annotations

import struct

from tests.support.nfqueue_delay import (
    MSG_PACKET,
    MSG_VERDICT,
    NF_ACCEPT,
    PACKET_HDR,
    VERDICT_HDR,
    message,
    packet_ids,
)


def packet(packet_id: int, queue: int = 7) -> bytes:
    """A NFQNL_MSG_PACKET as the kernel sends it: other attributes around the packet header."""
    return message(
        MSG_PACKET,
        0,
        0,
        queue,
        [
            (5, b"\x00\x00\x00\x02"),  # NFQA_MARK
            (PACKET_HDR | 0x8000, struct.pack(">IHB", packet_id, 0x0800, 2)),  # nested flag set
            (10, b"abc"),  # a payload that needs padding
        ],
    )


def test_packet_ids_of_several_messages_in_one_read() -> None:
    data = packet(1) + packet(2**32 - 1) + packet(42)
    assert packet_ids(data) == [1, 2**32 - 1, 42]


def test_other_messages_and_a_truncated_tail_are_ignored() -> None:
    other = message(MSG_VERDICT, 0, 0, 7, [(VERDICT_HDR, struct.pack(">II", NF_ACCEPT, 9))])
    assert packet_ids(other + packet(5) + packet(6)[:10]) == [5]


def test_a_verdict_message_layout() -> None:
    verdict = message(MSG_VERDICT, 1, 3, 258, [(VERDICT_HDR, struct.pack(">II", NF_ACCEPT, 9))])
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", verdict)
    assert (length, kind, flags, seq) == (len(verdict), MSG_VERDICT, 1, 3)
    assert verdict[16:20] == bytes([0, 0]) + struct.pack(">H", 258)  # AF_UNSPEC, v0, queue
    assert struct.unpack_from("=HH", verdict, 20) == (12, VERDICT_HDR)
    assert struct.unpack_from(">II", verdict, 24) == (NF_ACCEPT, 9)
