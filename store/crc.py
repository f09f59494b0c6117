"""CRC-32 (IEEE 802.3, zlib's) of message bodies and registration bodies: RocketMQ's UtilAll.crc32.

RocketMQ stores `crc32(body) & 0x7FFFFFFF` in every record (BODYCRC) and checks it at recovery;
the name server checks it on registrations. ISA-L's implementation (python-isal) gives the same
values as zlib's at about 3x the speed for a 1 KiB body and over 10x for megabytes, which is a
visible share of a batched send's CPU and of recovery time; zlib's is the fallback where isal
has no wheel.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - platforms without an isal wheel
    from zlib import crc32

__all__ = ["crc32", "java_crc32"]


def java_crc32(data: bytes | bytearray | memoryview) -> int:
    """The CRC as RocketMQ keeps it: masked to a non-negative Java int."""
    return crc32(data) & 0x7FFFFFFF
