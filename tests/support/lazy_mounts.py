"""Lossy file systems (tests/support/lazyfs.py) mounted for a test, cut, and mounted again.

`LazyMount(folder, name)` keeps `folder/name.backing` (what the "disk" holds) and mounts it at
`folder/name`: `start()` runs the daemon and returns once it serves requests, `cut("all")` or
`cut("torn", seed)` is the power cut (the daemon aborts the mount, drops what was not synced
and exits; the kernel's page cache of the mount is dropped with it), `start()` again is the next
boot's fresh mount, `stop()` a clean unmount (nothing lost). Mounting needs root and /dev/fuse:
`can_mount()` says whether this machine can, `NEEDS_FUSE` is the reason a test skips with.
Every mount still up when the interpreter exits is unmounted.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Self

from tests.support.conditions import eventually_sync

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
NEEDS_FUSE: Final = "the lossy file system needs root, /dev/fuse and fusermount3 (CI has them)"

_mounted: set[LazyMount] = set()


def can_mount() -> bool:
    try:
        import pyfuse3  # noqa: F401
    except ImportError:
        return False
    return (
        os.geteuid() == 0
        and os.path.exists("/dev/fuse")
        and shutil.which("fusermount3") is not None
    )


def _mounted_at(path: Path) -> bool:
    text = Path("/proc/self/mountinfo").read_text()
    return any(line.split()[4] == str(path) for line in text.splitlines())


class LazyMountError(RuntimeError):
    """The daemon did not mount, or did not answer (its log's tail is in the message)."""


class LazyMount:
    def __init__(self, folder: Path, name: str) -> None:
        self.name = name
        self.backing = folder / f"{name}.backing"
        self.path = folder / name
        self.control = folder / f"{name}.control"
        self.log_path = folder / f"{name}.lazyfs.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.boots = 0

    def start(self, timeout: float = 20.0) -> Self:
        if self.process is not None:
            raise LazyMountError(f"{self.name} is mounted already")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        start = self._log.tell()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.lazyfs",
                str(self.backing),
                str(self.path),
                "--control",
                str(self.control),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
        _mounted.add(self)
        self.boots += 1

        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise LazyMountError(f"lazyfs {self.name} exited:\n{self.log_tail()}")
            with self.log_path.open("rb") as log:
                log.seek(start)
                return b"mounted" in log.read()

        try:
            eventually_sync(ready, f"lazyfs {self.name} mounted", timeout, interval=0.02)
        except BaseException:
            self.stop()
            raise
        return self

    def request(self, line: str, timeout: float = 60.0) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.control))
            sock.sendall(line.encode() + b"\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        text = answer.decode().strip()
        if not text or text.startswith("error"):
            raise LazyMountError(f"lazyfs {self.name}: {line!r} answered {text!r}")
        return text

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = json.loads(self.request("stats"))
        return stats

    def cut(self, mode: str = "all", seed: int = 0, timeout: float = 60.0) -> dict[str, object]:
        """The power cut: every process using the mount must be dead (or it sees I/O errors).

        Returns the daemon's summary: files, pages_lost, pages_kept, dirs (counts) and
        first_unsynced ({path under the backing folder: its first unsynced byte})."""
        line = "cut all" if mode == "all" else f"cut torn {seed}"
        summary: dict[str, object] = json.loads(self.request(line, timeout))
        assert self.process is not None
        try:
            self.process.wait(timeout)
        finally:
            self._finish()
        return summary

    def stop(self, timeout: float = 20.0) -> None:
        """A clean unmount: everything written stays in the backing folder."""
        if self.process is None:
            return
        if self.process.poll() is None:
            subprocess.run(["fusermount3", "-u", str(self.path)], check=False, capture_output=True)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._finish()

    def _finish(self) -> None:
        if _mounted_at(self.path):
            subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
        _mounted.discard(self)
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def mounted(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self if self.process is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LazyMount {self.path} boots={self.boots} mounted={self.mounted}>"


@atexit.register
def _unmount_leftovers() -> None:
    for mount in list(_mounted):
        if mount.process is not None and mount.process.poll() is None:
            mount.process.kill()
            mount.process.wait()
        mount._finish()
