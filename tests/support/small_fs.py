"""A small file system for tests of a full disk: a tmpfs of a few MiB mounted in a temp dir.

`small_filesystem(path, size)` mounts it (root only: the caller skips otherwise, with
`NEEDS_ROOT` as the reason) and unmounts it at the end; `fill(path, leave)` takes all but
`leave` bytes of it with one file whose blocks are reserved, and returns that file (delete it
to free the space).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

NEEDS_ROOT: Final = "mounting a small tmpfs for the full-disk tests needs root (CI runs as root)"


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def small_filesystem(path: Path, size: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tidemq-test", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        # lazy: a file still open in a store that failed to stop must not keep it mounted
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(path: Path, leave: int, name: str = "filler") -> Path:
    filler = path / name
    size = shutil.disk_usage(path).free - leave
    fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if size > 0:
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    return filler
