"""Keeping freed heap memory in the process, for daemons and Spark's Python workers.

glibc's malloc serves a block of more than 128 KiB (a pull response, a received frame) with a
fresh mmap and unmaps it when it is freed, and it returns the free top of its heap to the kernel
beyond a small threshold. Each new block then costs the kernel a page fault and a zeroed page for
every 4 KiB: on a VM, 2 to 15 us a page, more than the work done with the bytes (measured on a
pull-heavy read: 1 to 1.3 us of CPU per 1 KiB row between reader and broker). RocketMQ's JVM
keeps its heap for the same reason (`-Xms` = `-Xmx`, `-XX:+AlwaysPreTouch` in runbroker.sh).

With the thresholds below, blocks up to 32 MiB come from the heap and freed memory stays there
for the next block: a process's footprint is its peak use rather than its current use. The two
spellings set the same thing: `retain_freed_memory()` in a running process (the daemons call it
at start), `GLIBC_TUNABLES` in the environment of a process about to start (Spark's Python
workers, see client/spark/session.py). Elsewhere than glibc neither has any effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Final

log = logging.getLogger(__name__)

MMAP_THRESHOLD: Final = 32 << 20  # glibc's largest allowed value
TRIM_THRESHOLD: Final = 512 << 20
GLIBC_TUNABLES: Final = (
    f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:glibc.malloc.trim_threshold={TRIM_THRESHOLD}"
)

_M_TRIM_THRESHOLD: Final = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD: Final = -3


def retain_freed_memory() -> bool:
    """Set this process's malloc thresholds as above; False where there is no glibc mallopt."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    done = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and done
    if not done:
        log.warning("malloc refused the thresholds: freed memory returns to the kernel")
    return done
