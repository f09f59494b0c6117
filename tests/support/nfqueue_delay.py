"""A packet delayer: `python -m tests.support.nfqueue_delay --queue N --delay-ms D`.

This machine's kernel has no netem qdisc (nor fq/etf, which could hold packets to a departure
time), so delay cannot be a qdisc. It does have NFQUEUE (xt_NFQUEUE and nfnetlink_queue): an
iptables rule hands each matching packet to this process, which gives the kernel its ACCEPT
verdict `delay` later. The packets themselves stay in the kernel; only the verdicts come from
user space, so the delay is per packet, in order, transparent to both ends (no proxy, no address
change), and holds for every protocol the rule matches. Its precision is this process's
scheduling (a few ms on a busy machine), never less than `delay`.

Run it inside the network namespace whose iptables rule names the queue (each namespace has its
own queues). It prints "bound <queue>" once the kernel accepted the binding, then runs until
killed. A packet whose verdict never comes (the process died) is dropped by the kernel: a dead
delayer is a cut link, never a silently undelayed one.

nfnetlink_queue messages (linux/netfilter/nfnetlink_queue.h), after a 16-byte nlmsghdr and the
4-byte nfgenmsg (family, version 0, big-endian queue number), as netlink attributes
(2-byte length, 2-byte type, payload padded to 4):

    config  type 0x0302  NFQA_CFG_CMD(1) = [u8 cmd][u8 pad][be16 pf]  (cmd 1 = BIND)
                         NFQA_CFG_PARAMS(2) = [be32 copy range][u8 copy mode]  (1 = META)
                         NFQA_CFG_QUEUE_MAXLEN(3) = [be32 packets]
    packet  type 0x0300  NFQA_PACKET_HDR(1) = [be32 packet id][be16 hw protocol][u8 hook]
    verdict type 0x0301  NFQA_VERDICT_HDR(2) = [be32 verdict][be32 packet id]  (1 = ACCEPT)
"""

from __future__ import annotations

import argparse
import collections
import errno
import select
import socket
import struct
import sys
import time
from typing import Final

NETLINK_NETFILTER: Final = 12
NLM_F_REQUEST: Final = 0x1
NLM_F_ACK: Final = 0x4
NLMSG_ERROR: Final = 2
SUBSYS_QUEUE: Final = 3
MSG_PACKET: Final = SUBSYS_QUEUE << 8 | 0
MSG_VERDICT: Final = SUBSYS_QUEUE << 8 | 1
MSG_CONFIG: Final = SUBSYS_QUEUE << 8 | 2
CFG_CMD: Final = 1
CFG_PARAMS: Final = 2
CFG_QUEUE_MAXLEN: Final = 3
CMD_BIND: Final = 1
COPY_META: Final = 1
PACKET_HDR: Final = 1
VERDICT_HDR: Final = 2
NF_ACCEPT: Final = 1
QUEUE_MAXLEN: Final = 65536

_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("=BBH")
_ATTR = struct.Struct("=HH")


def _align(n: int) -> int:
    return (n + 3) & ~3


def message(kind: int, flags: int, seq: int, queue: int, attrs: list[tuple[int, bytes]]) -> bytes:
    body = _NFGENMSG.pack(socket.AF_UNSPEC, 0, socket.htons(queue))
    for attr_type, payload in attrs:
        attr = _ATTR.pack(_ATTR.size + len(payload), attr_type) + payload
        body += attr + bytes(_align(len(attr)) - len(attr))
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def packet_ids(data: bytes) -> list[int]:
    """The packet ids of the NFQNL_MSG_PACKET messages in one netlink read."""
    ids = []
    at = 0
    while at + _NLMSGHDR.size <= len(data):
        length, kind = _NLMSGHDR.unpack_from(data, at)[:2]
        if length < _NLMSGHDR.size:
            break
        if kind == MSG_PACKET:
            attr = at + _NLMSGHDR.size + _NFGENMSG.size
            while attr + _ATTR.size <= at + length:
                attr_len, attr_type = _ATTR.unpack_from(data, attr)
                if attr_len < _ATTR.size:
                    break
                if attr_type & 0x7FFF == PACKET_HDR:
                    ids.append(struct.unpack_from(">I", data, attr + _ATTR.size)[0])
                attr += _align(attr_len)
        at += _align(length)
    return ids


def _configure(sock: socket.socket, queue: int, seq: int, attr: tuple[int, bytes]) -> None:
    sock.send(message(MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, queue, [attr]))
    reply = sock.recv(4096)
    kind = _NLMSGHDR.unpack_from(reply)[1]
    code = struct.unpack_from("=i", reply, _NLMSGHDR.size)[0] if kind == NLMSG_ERROR else 0
    if code:
        raise OSError(-code, f"nfnetlink_queue refused the configuration of queue {queue}")


def bind(queue: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    _configure(sock, queue, 1, (CFG_CMD, struct.pack(">BBH", CMD_BIND, 0, 0)))
    _configure(sock, queue, 2, (CFG_PARAMS, struct.pack(">IB", 0, COPY_META)))
    _configure(sock, queue, 3, (CFG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_MAXLEN)))
    return sock


def run(queue: int, delay: float) -> None:
    sock = bind(queue)
    print(f"bound {queue}", flush=True)
    held: collections.deque[tuple[float, int]] = collections.deque()
    while True:
        wait = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([sock], [], [], wait)
        if readable:
            try:
                data = sock.recv(1 << 20)
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:  # the kernel dropped what did not fit
                    raise
                continue
            release = time.monotonic() + delay
            held.extend((release, packet_id) for packet_id in packet_ids(data))
        now = time.monotonic()
        while held and held[0][0] <= now:
            packet_id = held.popleft()[1]
            verdict = struct.pack(">II", NF_ACCEPT, packet_id)
            sock.send(message(MSG_VERDICT, NLM_F_REQUEST, 0, queue, [(VERDICT_HDR, verdict)]))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.nfqueue_delay")
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args()
    try:
        run(args.queue, args.delay_ms / 1000)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"nfqueue_delay: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
