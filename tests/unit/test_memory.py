"""client/memory.py: the malloc thresholds that keep freed memory in a process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tidemq.client.memory import GLIBC_TUNABLES, MMAP_THRESHOLD, TRIM_THRESHOLD, retain_freed_memory

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_glibc_takes_the_thresholds() -> None:
    assert retain_freed_memory() is True


def test_the_environment_spelling_names_the_same_thresholds() -> None:
    assert GLIBC_TUNABLES.split(":") == [
        f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}",
        f"glibc.malloc.trim_threshold={TRIM_THRESHOLD}",
    ]


@pytest.mark.skipif(not GLIBC, reason="GLIBC_TUNABLES is glibc's")
def test_a_process_started_with_the_tunables_accepts_them() -> None:
    # glibc ignores a tunable it does not know or a value out of range without a word; this
    # process would still start, so ask it what its malloc does with a 4 MiB block: with the
    # thresholds it comes from the heap (brk), not from a mapping of its own.
    probe = (
        "import ctypes, sys\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.malloc.restype = ctypes.c_void_p\n"
        "libc.sbrk.restype = ctypes.c_void_p\n"
        "block = libc.malloc(4 << 20)\n"
        "top = libc.sbrk(0)\n"
        "print(int(block < top))\n"
    )
    env = {**os.environ, "GLIBC_TUNABLES": GLIBC_TUNABLES}
    with_tunables = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    env.pop("GLIBC_TUNABLES")
    without = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert (with_tunables.stdout.strip(), without.stdout.strip()) == ("1", "0")
