"""RocketMQ records built independently of store/record.py, for tests of its decoders.

`reference_record(...)` packs the 17 fields of RocketMQ's `CommitLog.MessageExtEncoder` one by
one with struct (so a mistake shared with the module under test cannot hide); `host_bytes`
is a socket address as a record holds it (4 or 16 address bytes, then the port as an int).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib

MAGIC = 0xDAA320A7


def host_bytes(ip: str, port: int) -> bytes:
    return ipaddress.ip_address(ip).packed + struct.pack(">i", port)


def reference_record(
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phy: int,
    sys_flag: int,
    born_ts: int,
    born: tuple[str, int],
    store_ts: int,
    store: tuple[str, int],
    reconsume: int,
    prepared: int,
    body: bytes,
    topic: bytes,
    props: bytes,
) -> bytes:
    """The 17 fields of RocketMQ's record, packed one by one."""
    born_raw = host_bytes(*born)
    store_raw = host_bytes(*store)
    if len(born_raw) == 20:
        sys_flag |= 0x10
    if len(store_raw) == 20:
        sys_flag |= 0x20
    tail = (
        struct.pack(">i", sys_flag)  # 8 SYSFLAG
        + struct.pack(">q", born_ts)  # 9 BORNTIMESTAMP
        + born_raw  # 10 BORNHOST
        + struct.pack(">q", store_ts)  # 11 STORETIMESTAMP
        + store_raw  # 12 STOREHOST
        + struct.pack(">i", reconsume)  # 13 RECONSUMETIMES
        + struct.pack(">q", prepared)  # 14 PREPARED TRANSACTION OFFSET
        + struct.pack(">i", len(body))  # 15 BODYLEN
        + body
        + struct.pack(">B", len(topic))  # 16 TOPICLEN
        + topic
        + struct.pack(">h", len(props))  # 17 PROPLEN
        + props
    )
    head_after_total = (
        struct.pack(">I", MAGIC)  # 2 MAGICCODE
        + struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)  # 3 BODYCRC
        + struct.pack(">i", queue_id)  # 4 QUEUEID
        + struct.pack(">i", flag)  # 5 FLAG
        + struct.pack(">q", queue_offset)  # 6 QUEUEOFFSET
        + struct.pack(">q", phy)  # 7 PHYSICALOFFSET
    )
    total = 4 + len(head_after_total) + len(tail)
    return struct.pack(">i", total) + head_after_total + tail  # 1 TOTALSIZE
