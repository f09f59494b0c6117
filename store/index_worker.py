"""The index worker: a child process that builds the message index beside the event loop.

Dispatch (store/dispatch.py) builds the ConsumeQueues on the broker's event loop, where pulls and
long polling need them at once. The index (store/index.py) serves only queries by key, and
hashing every key in Python costs more than the rest of dispatch together. With
messageIndexWorkerEnable (the default) a started store hands the index to this child process,
which runs on the machine's other core: dispatch tells it how far the CommitLog has been
dispatched, and it reads the same records through its own read-only maps of the CommitLog files
(the page cache is shared) and writes the index files. A store that is only loaded, and every
recovery, builds the index in process as before.

Protocol: one text line per message, on the child's stdin and stdout.

    parent -> child   upto <offset>      every record below <offset> is whole: index it
                      flush              fsync the index, then answer "flushed <timestamp>"
                      stop               finish, fsync, exit (end of input means the same)
    child -> parent   indexed <offset>   every record below <offset> is indexed
                      flushed <ts>       entries stored up to <ts> are on disk

The parent keeps one "upto" in flight, sends the newest offset once ADVANCE_BYTES have gathered
or ADVANCE_DELAY has passed (a query sends at once), and reads the answers from the event loop
(a non-blocking pipe): no thread, and a few system calls per megabyte dispatched.

One writer at a time: an exclusive flock on `index.lock` (beside the index folder) is held by
whoever writes the index, and `MessageStore.load` takes it, waiting up to LOCK_WAIT seconds for
a child that is still finishing (its parent was killed: the child sees the end of its input and
exits). The parent hands its locked descriptor to the child (`WorkerSpec.lock_fd`, inherited
through the fork) instead of releasing the lock for the child to take: the lock is never free
while a child is pending. A free moment there let a child that started slowly, and whose parent
was killed meanwhile, take the lock after the next store had loaded and rebuilt the index, then
truncate that index at its own stale start and rebuild only what its dead parent had asked for.
On start the child forgets entries at or past its start offset (`IndexService.truncate_after`)
and indexes from there, so a child that died half way through a batch is replaced without
duplicates. While the child runs, the parent only reads the index files (`IndexService.refresh`
before a query) and deletes expired ones; the child keeps only its newest file open.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import mmap
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tidemq.common import speedups
from tidemq.common.files import make_dirs
from tidemq.store.errors import StoreLockedError
from tidemq.store.fast_scan import KeyGatherer, scan_fast
from tidemq.store.index import IndexService
from tidemq.store.layout import BLANK_MAGIC, TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from tidemq.store.record import read_total_size_and_magic, scan_record
from tidemq.store.segment import offset_to_name

log = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"  # the lock file is `index.lock` beside the index folder
LOCK_WAIT = 10.0  # seconds load waits for an exiting child
RESTART_DELAY = 1.0  # seconds before a child that died is replaced
EXIT_REPORT_INTERVAL = 30.0  # seconds between two ERROR lines about a child dying in a loop
EXIT_LOOP = 3  # children dying in a row at one offset that the broker's health reports
ADVANCE_BYTES = 1024 * 1024  # dispatched bytes that make an "upto" go at once
ADVANCE_DELAY = 0.01  # seconds a smaller advance waits
STOP_TIMEOUT = 30.0  # seconds a stopping child gets to finish before it is killed


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What the child needs to know, passed as JSON on its command line."""

    commitlog_dir: str
    commitlog_file_size: int
    index_dir: str
    max_hash_slot_num: int
    max_index_num: int
    start: int
    # The index writer lock, already held: a descriptor inherited from the parent (-1: none,
    # the child takes the lock itself).
    lock_fd: int = -1
    # Indexing is background work: below the broker's priority, it never delays the event loop
    # that serves clients when both want the same core. It catches up when the broker idles.
    nice: int = 0


# --- the lock ------------------------------------------------------------------------------


def take_lock(index_dir: Path, wait: float) -> int:
    """Hold the index writer lock; waits up to `wait` seconds for another holder to go."""
    make_dirs(index_dir)
    path = index_dir.with_name(index_dir.name + LOCK_SUFFIX)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise StoreLockedError(
                    f"the index in {index_dir} is being written by another process "
                    f"(lock file {path} is held): an index worker that did not exit?"
                ) from None
            time.sleep(0.05)
        else:
            return fd


def release_lock(fd: int) -> None:
    os.close(fd)  # closing the only descriptor releases the flock


# --- the child ------------------------------------------------------------------------------


class CommitLogReader:
    """Read-only maps of CommitLog files, opened by name as the scan reaches them."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self._maps: dict[int, mmap.mmap] = {}

    def segment(self, offset: int) -> tuple[int, mmap.mmap] | None:
        start = offset - offset % self.file_size
        mm = self._maps.get(start)
        if mm is None:
            path = self.directory / offset_to_name(start)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                if os.fstat(fd).st_size != self.file_size:
                    return None
                mm = mmap.mmap(fd, self.file_size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            for older in [s for s in self._maps if s < start]:
                self._maps.pop(older).close()  # retention may delete them: let the space go
            self._maps[start] = mm
        return start, mm

    def close(self) -> None:
        for mm in self._maps.values():
            mm.close()
        self._maps.clear()


def gather_entries(
    mm: mmap.mmap, pos: int, end: int, keys: KeyGatherer, entries: list[tuple[int, int, int]]
) -> tuple[int, bool]:
    """Index entries of the records in mm[pos:end]; returns (where it stopped, at a blank).

    The pure-Python twin of the compiled loop in store/_fast_scan.pyx (store/common/speedups.py
    picks).
    """
    gather = keys.gather
    while pos < end:
        record = scan_fast(mm, pos, end)
        if record is not None:
            total, _queue_id, _queue_offset, phy, store_ts, props, topic_raw = record
            gather(mm, entries, topic_raw, phy, store_ts, props, pos + total)
            pos += total
            continue
        if end - pos < 8:
            break
        info = scan_record(memoryview(mm)[:end], pos, check_crc=False)
        if info.size <= 0:
            _total, magic = read_total_size_and_magic(memoryview(mm), pos)
            # Anything but the end-of-file blank: dispatch reports it and stops there too.
            return pos, magic == BLANK_MAGIC
        if info.sys_flag & TRANSACTION_MASK != TRANSACTION_ROLLBACK_TYPE:
            keys.gather_info(info, entries)
        pos += info.size
    return pos, False


gather_entries = speedups.select(gather_entries, "tidemq.store._fast_scan")


class IndexBuilder:
    """The child's work: follow the CommitLog up to what the parent allows, index it."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.index = IndexService(Path(spec.index_dir), spec.max_hash_slot_num, spec.max_index_num)
        # As after a crash on the same boot: a worker killed mid-batch leaves entries past the
        # header's count, which load undoes; nothing is destroyed.
        self.index.load(False, 0, keep_newer=True)
        self.index.truncate_after(spec.start)
        self.index.close_older_files()
        self.reader = CommitLogReader(Path(spec.commitlog_dir), spec.commitlog_file_size)
        self.keys = KeyGatherer()
        self.position = spec.start

    def index_upto(self, target: int) -> int:
        """Index every record below `target`; returns how far it got (target, unless stuck)."""
        size = self.spec.commitlog_file_size
        entries: list[tuple[int, int, int]] = []
        while self.position < target:
            found = self.reader.segment(self.position)
            if found is None:
                # Deleted by retention under our feet: what it held is gone from the index too.
                next_file = self.position - self.position % size + size
                log.warning("CommitLog file for offset %d is gone: skipped", self.position)
                self.position = next_file
                continue
            start, mm = found
            pos, at_blank = gather_entries(
                mm, self.position - start, min(target - start, size), self.keys, entries
            )
            self.position = start + size if at_blank else start + pos
            if not at_blank and start + pos < min(target, start + size):
                log.error("cannot index the record at %d: stopped there", start + pos)
                break
        self.index.put_hashed(entries)
        if self.index.files > 1:
            self.index.flush()  # a file closed here is not fsynced by a later flush
            self.index.close_older_files()
        return self.position

    def close(self) -> None:
        self.index.flush()
        self.index.close()
        self.reader.close()


def serve(spec: WorkerSpec, commands: IO[bytes], replies: IO[bytes]) -> None:
    """The child's loop over its commands (see the module docstring)."""
    builder = IndexBuilder(spec)
    try:
        for line in commands:
            command, _, argument = line.strip().partition(b" ")
            if command == b"upto":
                reached = builder.index_upto(int(argument))
                replies.write(b"indexed %d\n" % reached)
            elif command == b"flush":
                replies.write(b"flushed %d\n" % builder.index.flush())
            elif command == b"stop":
                break
            else:
                log.error("unknown command %r", line)
                continue
            replies.flush()
    finally:
        builder.close()


def main(argv: list[str]) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s index-worker %(name)s: %(message)s",
    )
    # Ctrl-C and a service manager's SIGTERM reach the whole process group; the broker then
    # stops this process itself (or its end of input does), after it has indexed what was asked.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spec = WorkerSpec(**json.loads(argv[0]))
    if spec.nice > 0:
        os.nice(spec.nice)
    lock = spec.lock_fd if spec.lock_fd >= 0 else take_lock(Path(spec.index_dir), LOCK_WAIT)
    try:
        serve(spec, sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:
        pass  # the parent is gone; the index is flushed by serve's finally
    finally:
        release_lock(lock)
    return 0


# --- the parent -----------------------------------------------------------------------------


class IndexWorker:
    """The parent's handle on the child: start, advance, flush, stop, replace when it dies."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.indexed = spec.start  # what the child has confirmed
        self.flushed_timestamp = 0
        self._target = spec.start
        self._sent = spec.start
        self._process: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_waiters: list[asyncio.Future[int]] = []
        self._progress = asyncio.Event()
        self._stopping = False
        self._restart: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None  # a delayed "upto"
        self._replies = b""  # the start of an answer line not yet whole
        # Children that died in a row without indexing anything (one that keeps dying on the
        # same record is a loop the health reports), and when that was last logged.
        self.exits_in_a_row = 0
        self._exited_at = -1
        self._exit_reported = float("-inf")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def exit_loop(self) -> str | None:
        """Why the index falls behind, while children keep dying at the same offset."""
        if self.exits_in_a_row < EXIT_LOOP or self._exited_at != self.indexed:
            return None
        return (
            f"the index worker exited {self.exits_in_a_row} times in a row at offset "
            f"{self.indexed}: key and id queries miss the messages after it"
        )

    def start(self, lock: int | None = None) -> None:
        """Start the child and hand it the index writer lock (module docstring).

        `lock` is the caller's descriptor of the held lock (the store's, at the first start):
        once the child has it, it is closed here. Without one (a restart: the previous child
        has exited, which freed the lock) the lock is taken here first.
        """
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        owned = lock is None
        if lock is None:
            try:
                lock = take_lock(Path(self.spec.index_dir), 0)
            except StoreLockedError as exc:
                log.error("index worker not started: %s; retrying in %.0f s", exc, RESTART_DELAY)
                self._restart = self._loop.call_later(RESTART_DELAY, self._restart_now)
                return
        spec = dataclasses.replace(self.spec, start=self.indexed, lock_fd=lock)
        # The child imports this very copy of the package, installed or not.
        source_root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tidemq.store.index_worker",
                    json.dumps(dataclasses.asdict(spec)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                pass_fds=(lock,),
            )
        except BaseException:
            if owned:
                release_lock(lock)
            raise
        release_lock(lock)  # the child's copy of the descriptor holds the lock now
        self._process = process
        self._sent = self.indexed
        assert process.stdout is not None
        os.set_blocking(process.stdout.fileno(), False)
        self._replies = b""
        self._loop.add_reader(process.stdout.fileno(), self._on_readable, process)
        log.info("index worker pid %d started at offset %d", process.pid, self.indexed)
        if self._target > self._sent:
            self._send_upto()

    def advance(self, offset: int, *, now: bool = False) -> None:
        """Records below `offset` are dispatched: let the child index them.

        Sent when ADVANCE_BYTES have gathered or ADVANCE_DELAY has passed (or `now`), with one
        request in flight at a time: a line per dispatch chunk would cost the broker a system
        call and a wake-up of the child per batch it stores.
        """
        if offset > self._target:
            self._target = offset
        self._send_due(now)

    def _send_due(self, now: bool = False) -> None:
        if self._target <= self._sent or self._sent != self.indexed:
            return  # nothing new, or a request in flight (its answer comes back here)
        if now or self._target - self._sent >= ADVANCE_BYTES:
            self._send_upto()
        elif self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(ADVANCE_DELAY, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._send_due(now=True)

    async def wait_indexed(self, offset: int, timeout: float) -> bool:
        """Until the child has indexed everything below `offset` (False on timeout)."""
        deadline = time.monotonic() + timeout
        while self.indexed < offset and self.running:
            self.advance(offset, now=True)
            self._progress.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._progress.wait(), left)
            except TimeoutError:
                return False
        return self.indexed >= offset

    async def flush(self, timeout: float = 10.0) -> int | None:
        """fsync the index in the child; the store time now durable (None if it did not answer)."""
        if not self.running:
            return None
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(future)
        if not self._write(b"flush\n"):
            return None
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            log.warning("index worker did not answer a flush within %.0f s", timeout)
            return None

    async def stop(self) -> None:
        """Index what was dispatched, fsync and exit; killed if it takes over STOP_TIMEOUT."""
        self._stopping = True
        self._cancel_timers()
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            if self._target > self._sent:
                self._write(b"upto %d\n" % self._target)
            self._write(b"stop\n")
            self._close_stdin(process)
            try:
                await asyncio.to_thread(process.wait, STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.error("index worker pid %d did not stop: killed", process.pid)
                process.kill()
                await asyncio.to_thread(process.wait)
            self._drain(process)  # its last answers: what it indexed and flushed
        self._detach(process)
        self._process = None

    def kill(self) -> None:
        """Stop the child at once (resync): its partial work is undone by the next start."""
        self._stopping = True
        self._cancel_timers()
        process = self._process
        if process is not None:
            process.kill()
            process.wait()
            self._detach(process)
        self._process = None

    def restart_at(self, offset: int) -> None:
        """After `kill`: start again from `offset` (entries from there on are rebuilt)."""
        self.indexed = self._target = self._sent = offset
        self.start()

    # --- plumbing -------------------------------------------------------------------------

    def _cancel_timers(self) -> None:
        for timer in (self._restart, self._timer):
            if timer is not None:
                timer.cancel()
        self._restart = self._timer = None

    def _send_upto(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._write(b"upto %d\n" % self._target):
            self._sent = self._target

    def _write(self, line: bytes) -> bool:
        process = self._process
        if process is None or process.stdin is None or process.poll() is not None:
            return False
        try:
            process.stdin.write(line)
            process.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False  # it died; _on_exit replaces it
        return True

    @staticmethod
    def _close_stdin(process: subprocess.Popen[bytes]) -> None:
        if process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()

    def _on_readable(self, process: subprocess.Popen[bytes]) -> None:
        """The child's stdout is readable: handle whole answer lines; at its end, its exit."""
        if not self._drain(process):
            self._detach(process)
            self._wait_exit(process)

    def _drain(self, process: subprocess.Popen[bytes]) -> bool:
        """Read what the child has written; False at the end of its output."""
        stdout = process.stdout
        if stdout is None or stdout.closed:
            return False
        while True:
            try:
                data = os.read(stdout.fileno(), 65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            *lines, self._replies = (self._replies + data).split(b"\n")
            for line in lines:
                self._on_reply(process, line)

    def _detach(self, process: subprocess.Popen[bytes]) -> None:
        """Stop watching the child's pipes and close them (idempotent)."""
        stdout = process.stdout
        if stdout is not None and not stdout.closed:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(stdout.fileno())
            stdout.close()
        self._close_stdin(process)

    def _wait_exit(self, process: subprocess.Popen[bytes]) -> None:
        # Its output ended: it exits at once (or has); poll rather than block the loop.
        if process.poll() is None and self._loop is not None:
            self._loop.call_later(0.01, self._wait_exit, process)
            return
        self._on_exit(process)

    def _on_reply(self, process: subprocess.Popen[bytes], line: bytes) -> None:
        if process is not self._process:
            return
        word, _, value = line.strip().partition(b" ")
        if word == b"indexed":
            self.indexed = int(value)
            self._progress.set()
            if self._sent > self.indexed:
                self._sent = self.indexed  # it stopped short of the target: nothing in flight
            else:
                self._send_due()
        elif word == b"flushed":
            self.flushed_timestamp = int(value)
            waiters, self._flush_waiters = self._flush_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(self.flushed_timestamp)

    def _on_exit(self, process: subprocess.Popen[bytes]) -> None:
        if process is not self._process:
            return
        self._progress.set()
        for waiter in self._flush_waiters:
            if not waiter.done():
                waiter.cancel()
        self._flush_waiters = []
        if self._stopping:
            return
        self.exits_in_a_row = self.exits_in_a_row + 1 if self._exited_at == self.indexed else 1
        self._exited_at = self.indexed
        now = time.monotonic()
        if self.exits_in_a_row == 1 or now - self._exit_reported >= EXIT_REPORT_INTERVAL:
            # Not one line a second when every child dies on the same record.
            self._exit_reported = now
            log.error(
                "index worker pid %d exited with %s: restarting at offset %d in %.0f s "
                "(%d exits in a row there)",
                process.pid,
                process.returncode,
                self.indexed,
                RESTART_DELAY,
                self.exits_in_a_row,
            )
        self._process = None
        assert self._loop is not None
        self._restart = self._loop.call_later(RESTART_DELAY, self._restart_now)

    def _restart_now(self) -> None:
        self._restart = None
        if not self._stopping:
            self.restart_at(self.indexed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
