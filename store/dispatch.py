"""The reput (dispatch) service: follows the CommitLog and builds ConsumeQueues and the index.

It reads records from `reput_from_offset` up to what readers may see, hands each record to the
ConsumeQueue of its topic and queue and to the index, then tells arrival listeners (long-polling
pulls) that a queue grew. On a slave the same service runs over replicated bytes, which can end
in the middle of a record: an incomplete record at the readable end means "wait for more", while a
complete but malformed one stops dispatch with an error.

Work is done a chunk (`chunk_bytes`: CHUNK_BYTES, less on a slave) at a time: units are gathered
per queue and written together at the end of the chunk, queue by queue, then the chunk's index
entries, then the listeners are called once per queue and tagsCode. While the store runs with an
index worker (store/index_worker.py), the index is not built here: after each chunk the worker is
told how far dispatch got, and it indexes up to there in its own process.

Batches appended on this broker skip the scan: the append hands dispatch an `AppendedBatch`
(where each record and its properties start; topic, queue, first queue offset and store time are
the batch's), and when dispatch reaches its first byte it writes the batch's ConsumeQueue units
from that, looking only at each record's TAGS in place. Whatever the hint cannot cover (the index
built in this process, a queue that does not follow on, a hint that does not match the bytes)
goes through the scan, so the result is the same either way.

A record that cannot be put in its ConsumeQueue (or the index) raises `DispatchFailure` from
where it is written; store/dispatch_faults.py decides whether it is retried or its queue is
quarantined (skipped from then on), so that one record cannot hold back every record after it.
The checks for a quarantined queue sit where a queue is looked up (once per queue and chunk on
the fast path), and the `try` blocks cost nothing until something raises.

A queue whose next unit needs a new file (lazily mapped ConsumeQueues: a new queue, mostly) gets
it made while the service runs: the fast path stops before that queue's record, the file is
made (`segment.create_sparse`: folders, the file, its first block), and dispatch goes on from
that record, which adopts the file. When the records in sight need several (a backlog), they are
made in one trip to a worker thread: creating each on the event loop cost 0.1-8 ms of metadata
writes then, stalling every send and pull meanwhile. A single one (a send to a new queue) is
made on the loop (`FILES_MADE_ON_LOOP`: the trip cost more than the file). `dispatch_all`
(recovery, a slave's cut) and the general path still create in place.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import struct
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tidemq.common.lifecycle import BackgroundTask, Service
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import CQ_UNIT_SIZE
from tidemq.store.consume_queue import ConsumeQueue, pack_unit
from tidemq.store.delay import SCHEDULE_TOPIC
from tidemq.store.dispatch_faults import REPORT_INTERVAL, DispatchFailure, DispatchFaults
from tidemq.store.fast_scan import SLOW_FLAGS, KeyGatherer, extend_runs, find_value, scan_fast
from tidemq.store.layout import (
    BLANK_MAGIC,
    MAGIC_V1,
    OFFSET_QUEUE_OFFSET,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.record import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    DispatchInfo,
    EncodedBatch,
    find_property,
    read_total_size_and_magic,
    scan_record,
)
from tidemq.store.segment import SparseFile, create_sparse
from tidemq.store.tags import tags_code_for
from tidemq.store.timer_message import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_OUT_MS,
    TIMER_TOPIC,
    timer_tags_code,
)

if TYPE_CHECKING:
    from tidemq.store.index import IndexService
    from tidemq.store.segment import Segment
    from tidemq.store.segment_queue import SegmentQueue

log = logging.getLogger(__name__)

# (topic, queue id, new max queue offset, tagsCode, store timestamp). Called once per queue and
# distinct tagsCode for the units written together (up to a chunk's worth), after they are
# readable: the max offset covers them all, the timestamp is the newest one's.
ArrivalListener = Callable[[str, int, int, int, int], None]
# The ConsumeQueue of (topic, queue id), created when it does not exist yet.
QueueLookup = Callable[[str, int], ConsumeQueue]


class IndexSink(Protocol):
    """Where dispatch's index work goes (store/index_keeper.py IndexKeeper)."""

    def in_process(self) -> IndexService | None:
        """The index to build in this process, None when it is off or the worker builds it."""

    def advance(self, dispatched: int) -> None:
        """Dispatch has finished everything below `dispatched`."""


_TAGS = PROPERTY_TAGS.encode()
_KEYS = PROPERTY_KEYS.encode()
_UNIQ = PROPERTY_UNIQ_KEY.encode()
_DELAY = PROPERTY_DELAY.encode()
_TIMER_OUT = PROPERTY_TIMER_OUT_MS.encode()
_TIMER_DEL = PROPERTY_TIMER_DEL_UNIQKEY.encode()

# Bytes dispatched before yielding to the event loop, so appends and pulls stay responsive
# (about 1,000 records of 1 KiB: a few milliseconds).
CHUNK_BYTES = 1024 * 1024
# How far dispatch looks past a record whose queue needs a new file, for the files the records
# after it need (all made in one trip to a worker thread), and at most how many.
LOOK_AHEAD_BYTES = 4 * CHUNK_BYTES
FILES_AHEAD = 1024
# A queue's one new file, when no other record in sight needs one, is made on the loop: the
# trip to a worker thread cost more CPU than the file (scale5, 3,000 puts to new queues in
# process: 0.69 -> 0.33 ms of CPU per put without it; the trip's futures, wake-ups and the
# worker's GIL hand-offs, against the three to five system calls of `create_sparse`, 0.05-0.15
# ms on this machine's ext4 with the ConsumeQueue root marked, store/topic_folders.py), and a
# send to a new queue waits for its file anyway (`wait_dispatched`). A backlog's files still
# go in one trip, off the loop.
FILES_MADE_ON_LOOP = 1

_SCHEDULE_RAW = SCHEDULE_TOPIC.encode()
_TIMER_RAW = TIMER_TOPIC.encode()
_DELAYING_RAW = (_SCHEDULE_RAW, _TIMER_RAW)  # topics whose records take the general path
_TAGS_NEEDLE = _TAGS + b"\x01"

# Turns dispatch lets go by in a row when `defer` asks it to: it keeps at least a quarter.
DEFERRED_TURNS_MAX = 3

# Appended batches remembered for dispatch; when dispatch falls further behind, the oldest are
# forgotten and their records are scanned.
APPENDED_BATCHES_MAX = 4096
# The key of the in-process index among the quarantined "queues" (a name no topic can have).
INDEX_KEY = ("(index)", -1)
_PHY = struct.Struct(">q")  # a ConsumeQueue unit's first field
# TOTALSIZE, QUEUEOFFSET, PHYSICALOFFSET (which follows it)
_RECORD_CHECK = struct.Struct(f">i{OFFSET_QUEUE_OFFSET - 4}xqq")


@dataclass(slots=True, frozen=True)
class AppendedBatch:
    """Records of one topic and queue appended back to back on this broker, for dispatch."""

    start: int  # physical offset of the first record
    end: int
    topic: str
    queue_id: int
    first_queue_offset: int
    store_timestamp: int
    offsets: list[int]  # where each record starts, from `start`
    properties_at: list[int]  # where each record's properties start, from `start`


@dataclass(slots=True)
class _QueueRun:
    """ConsumeQueue units gathered for one queue during a chunk, written together."""

    queue: ConsumeQueue
    next_offset: int
    units: list[bytes]
    end_phy: int
    tags_codes: set[int]
    last_ts: int


def tags_code_of(info: DispatchInfo, delay_levels: list[int]) -> int:
    """tagsCode for the ConsumeQueue; a delayed or timer message's is its delivery time (a
    recall's tombstone's: minus it, store/timer_message.py)."""
    if info.topic == TIMER_TOPIC:
        raw = find_property(info.properties, _TIMER_OUT)
        if raw is not None:
            try:
                deliver = int(raw)
            except ValueError:
                pass
            else:
                return timer_tags_code(
                    deliver, find_property(info.properties, _TIMER_DEL) is not None
                )
    if info.topic == SCHEDULE_TOPIC:
        raw = find_property(info.properties, _DELAY)
        if raw is not None:
            try:
                level = int(raw)
            except ValueError:
                level = 0
            if level > 0:
                level = min(level, len(delay_levels))
                return info.store_timestamp + delay_levels[level - 1]
    return tags_code_for(find_property(info.properties, _TAGS))


class ReputService(Service):
    """Dispatch, as a task from start until stop (the store waits for it to be idle first)."""

    # False sends every record through the general path; tests compare the two paths' output.
    fast_path = True

    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: StoreCheckpoint,
        queues: QueueLookup,
        index: IndexSink,
        delay_levels: list[int],
    ) -> None:
        super().__init__()
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.queues = queues
        self.index = index
        self.delay_levels = delay_levels
        # An upper bound on what dispatch may index (HA's haReadReplicatedOnly), None = none.
        self.dispatch_cap: Callable[[], int] | None = None
        self.reput_from_offset = 0
        self.listeners: list[ArrivalListener] = []
        self.stalled_at = -1  # offset of a malformed record that stopped dispatch
        self._stall_reported = float("-inf")  # time.monotonic() it was last logged
        # The last dispatch attempt failed (e.g. no space for a new ConsumeQueue file): it is
        # retried every second, or its queue quarantined (`faults`); a stop does not wait for
        # it (recovery redoes it at start).
        self.failing = False
        self.faults = DispatchFaults()
        # Called when a queue has just been quarantined (the store keeps the list in a file).
        self.on_quarantine: Callable[[], None] | None = None
        # Quarantined (topic, queue id) -> entry: the same dict as `faults.quarantined`, looked
        # up where a queue is (empty, and so false, on a healthy store).
        self._quarantine = self.faults.quarantined
        # Bytes dispatched per event-loop turn. A slave takes smaller steps (ha/slave.py), so
        # that a catch-up's receive path gets the loop often and dispatch follows behind it.
        self.chunk_bytes = CHUNK_BYTES
        # True: let this event-loop turn go by (a slave receiving a catch-up), at most
        # DEFERRED_TURNS_MAX in a row, so dispatch lags but keeps going.
        self.defer: Callable[[], bool] | None = None
        self._wakeup = asyncio.Event()
        self._topic_names: dict[bytes, str] = {}
        self._keys = KeyGatherer()
        self._appended: deque[AppendedBatch] = deque(maxlen=APPENDED_BATCHES_MAX)
        # True while the running service dispatches: a new ConsumeQueue file is made in a
        # worker thread (module docstring); `_file_needed` is the one the fast path stopped at,
        # `_files_ahead` those the records after it will need (made in the same trip).
        self._files_off_loop = False
        self._file_needed: tuple[SegmentQueue, Path] | None = None
        self._files_ahead: dict[Path, SegmentQueue] = {}
        # Sends whose record waits for a new file (`wait_dispatched`): CommitLog end -> future.
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self.add_child(BackgroundTask(self._run, "reput"))

    def index_in_process(self) -> IndexService | None:
        """The index to build here: none when it is off, the index worker builds it, or it is
        quarantined (it failed for a cause retrying does not get past)."""
        if self._quarantine and INDEX_KEY in self._quarantine:
            return None
        return self.index.in_process()

    def note_appended(
        self, batch: EncodedBatch, wrote_offset: int, first_queue_offset: int, store_ts: int
    ) -> None:
        """A batch was appended at `wrote_offset`: dispatch may take its layout from here."""
        if (
            batch.sys_flag & SLOW_FLAGS
            or batch.topic in (SCHEDULE_TOPIC, TIMER_TOPIC)
            or not batch.offsets
        ):
            return  # records the scan's general path handles
        if self.index_in_process() is not None:
            return  # the scan gathers index keys as it goes
        self._appended.append(
            AppendedBatch(
                wrote_offset,
                wrote_offset + len(batch.data),
                batch.topic,
                batch.queue_id,
                first_queue_offset,
                store_ts,
                batch.offsets,
                batch.properties_at,
            )
        )

    def rewind(self, offset: int) -> None:
        """Dispatch again from `offset` (the CommitLog was cut or replaced there)."""
        self.reput_from_offset = offset
        self._appended.clear()

    def limit(self) -> int:
        """How far dispatch may go: the CommitLog's readable end, or the HA cap when set."""
        end = self.commitlog.max_offset
        cap = self.dispatch_cap
        return end if cap is None else min(end, cap())

    @property
    def behind_bytes(self) -> int:
        """Readable bytes not dispatched yet (on a slave: received, not yet in the queues).

        Dispatch skips what retention deleted, and an empty slave's log starts where its master
        started it: neither counts."""
        return max(0, self.limit() - max(self.reput_from_offset, self.commitlog.min_offset))

    def wakeup(self) -> None:
        self._wakeup.set()

    def needs_file(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the unit at `queue_offset` needs a new ConsumeQueue file, which the running
        service makes in a worker thread while the loop goes on (its record's send waits for
        it: `wait_dispatched`)."""
        try:
            segments = self.queues(topic, queue_id).segments
        except Exception:  # noqa: BLE001 - dispatch meets the same error and reports it
            return False
        if segments.maps is None:
            return False
        files = segments.segments
        if files and files[-1].wrote < files[-1].size:  # file_needed's own first test
            return False
        return segments.file_needed(queue_offset * CQ_UNIT_SIZE) is not None

    async def wait_dispatched(self, offset: int) -> None:
        """Until dispatch has passed CommitLog `offset`, or has stopped short of it (a cap, a
        fault): a send whose record needed a new file is answered once the record is readable,
        as one that needed none is (read your writes)."""
        if self.reput_from_offset >= offset or not self.running:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((offset, future))
        await future

    def _release(self, everyone: bool = False) -> None:
        if not self._waiting:
            return
        reached = self.reput_from_offset
        waiting, self._waiting = self._waiting, []
        for offset, future in waiting:
            if everyone or offset <= reached:
                if not future.done():
                    future.set_result(None)
            else:
                self._waiting.append((offset, future))

    async def _run(self) -> None:
        try:
            await self._run_rounds()
        finally:
            self._release(everyone=True)

    async def _run_rounds(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                # Yield between chunks so appends and pulls are served meanwhile.
                deferred = 0
                while True:
                    if deferred < DEFERRED_TURNS_MAX and self.defer is not None and self.defer():
                        deferred += 1
                        await asyncio.sleep(0)
                        continue
                    deferred = 0
                    self._files_off_loop = True
                    try:
                        dispatched = self.dispatch_available(self.chunk_bytes)
                    finally:
                        self._files_off_loop = False
                    self.index.advance(self.reput_from_offset)
                    self._release()
                    if self._file_needed is not None:
                        if len(self._files_ahead) < FILES_MADE_ON_LOOP:
                            self._make_file_here()
                        else:
                            await self._make_files()
                        continue
                    if dispatched == 0:
                        self._release(everyone=True)  # nothing more for now: none waits on
                        break
                    await asyncio.sleep(0)
                if self.failing:
                    self.faults.succeeded()
                self.failing = False
            except Exception as exc:  # noqa: BLE001 - logged with its traceback by `faults`
                failure = self._as_failure(exc)
                self.failing = True
                self._release(everyone=True)
                if self.faults.failed(failure, time.monotonic()):
                    self.failing = False  # its queue is quarantined: go on at once
                    self._quarantined()
                else:
                    await asyncio.sleep(1)
                self._wakeup.set()

    def _make_file_here(self) -> None:
        """Make the one file dispatch stopped at, on the loop (`FILES_MADE_ON_LOOP`); the
        queue adopts it (or its error) when dispatch takes up again at its record."""
        assert self._file_needed is not None
        segments, path = self._file_needed
        self._file_needed = None
        maps = segments.maps
        assert maps is not None
        if path in maps.creating:
            return
        future: Future[SparseFile] = Future()
        try:
            future.set_result(create_sparse(path, segments.segment_size, first_page=False))
        except Exception as exc:  # noqa: BLE001 - raised where the queue adopts it
            future.set_exception(exc)
        maps.creating[path] = future

    async def _make_files(self) -> None:
        """Make the file dispatch stopped at, and those the records after it need, in one trip
        to a worker thread (a hop per file cost several ms under load, and a backlog of new
        queues waited a hop each); each queue adopts its file (or its error) when dispatch
        reaches it, and a stop meanwhile removes those not adopted (`discard_creations`)."""
        assert self._file_needed is not None
        segments, path = self._file_needed
        wanted = {path: segments, **self._files_ahead}
        self._file_needed = None
        self._files_ahead = {}
        work: list[tuple[Path, int, Future[SparseFile]]] = []
        for file, owner in wanted.items():
            maps = owner.maps
            assert maps is not None
            if file in maps.creating:
                continue
            future: Future[SparseFile] = Future()
            maps.creating[file] = future
            work.append((file, owner.segment_size, future))

        def make() -> None:
            for file, size, future in work:
                try:
                    future.set_result(create_sparse(file, size))
                except BaseException as exc:  # noqa: BLE001 - raised where the queue adopts it
                    future.set_exception(exc)

        await asyncio.to_thread(make)

    def _look_ahead(self, mm: mmap.mmap, pos: int, end: int) -> None:
        """After the fast path stopped at `pos` for a file: note the files the records up to
        `end` will need too (at most FILES_AHEAD, within LOOK_AHEAD_BYTES; a record the fast
        path does not take ends the look)."""
        stop = min(end, pos + LOOK_AHEAD_BYTES)
        ahead = self._files_ahead
        while pos < stop and len(ahead) < FILES_AHEAD:
            record = scan_fast(mm, pos, stop)
            if record is None or record[6] == _SCHEDULE_RAW or record[6] == _TIMER_RAW:
                return
            total, queue_id, queue_offset, _phy, _ts, _props, topic_raw = record
            pos += total
            topic = self._topic_names.get(topic_raw) or self._name(topic_raw)
            if self._quarantine and (topic, queue_id) in self._quarantine:
                continue
            try:
                segments = self.queues(topic, queue_id).segments
            except Exception:  # noqa: BLE001 - dispatch meets it again at this record
                return
            if segments.maps is None:
                continue
            path = segments.file_needed(queue_offset * CQ_UNIT_SIZE)
            if path is not None and path not in segments.maps.creating:
                ahead[path] = segments

    def _needs_file(self, queue: ConsumeQueue, queue_offset: int) -> bool:
        """True (and noted) when the running service must make a file before `queue` takes
        the unit of `queue_offset` (module docstring)."""
        segments = queue.segments
        maps = segments.maps
        if not self._files_off_loop or maps is None:
            return False
        path = segments.file_needed(queue_offset * CQ_UNIT_SIZE)
        if path is None or path in maps.creating:
            return False
        self._file_needed = (segments, path)
        return True

    def _as_failure(self, exc: Exception) -> DispatchFailure:
        """`exc` as a DispatchFailure; one not tied to a queue cannot be quarantined."""
        if isinstance(exc, DispatchFailure):
            return exc
        failure = DispatchFailure("", -1, self.reput_from_offset, skippable=False)
        failure.__cause__ = exc
        return failure

    def _quarantined(self) -> None:
        if self.on_quarantine is not None:
            self.on_quarantine()

    def dispatch_all(self) -> None:
        """Dispatch everything readable now, at once (recovery at load, a slave's cut).

        A record failing for a cause bound to it is retried back to back until its queue is
        quarantined, as the running service would after as many attempts a second apart; a
        failure of the disk or one not tied to a queue is raised (the store cannot start).
        """
        while True:
            try:
                self.dispatch_available(1 << 62)
            except Exception as exc:
                failure = self._as_failure(exc)
                if not failure.skippable or failure.environment:
                    raise
                if self.faults.failed(failure, time.monotonic()):
                    self._quarantined()
            else:
                return

    async def wait_idle(self) -> None:
        """Until dispatch has caught up with the CommitLog (or stopped at a malformed record,
        or is failing)."""
        while self.behind_bytes > 0 and self.stalled_at < 0 and not self.failing:
            self.wakeup()
            await asyncio.sleep(0.001)

    def dispatch_available(self, budget: int) -> int:
        """Dispatch up to about `budget` bytes of records; returns how many bytes were consumed."""
        commitlog = self.commitlog
        limit = self.limit()
        done = 0
        while done < budget and self.reput_from_offset < limit and self._file_needed is None:
            if self.reput_from_offset < commitlog.min_offset:
                self.reput_from_offset = commitlog.min_offset
            segment = commitlog.segments.find(self.reput_from_offset)
            if segment is None:
                break
            base = segment.start_offset
            position = self.reput_from_offset - base
            readable = min(segment.read_position, limit - base)
            if position >= readable:
                break
            appended = self._next_appended()
            if appended is not None:
                if appended.start == self.reput_from_offset and appended.end - base <= readable:
                    self._appended.popleft()
                    if self._dispatch_appended(segment, appended):
                        done += appended.end - appended.start
                        self.reput_from_offset = appended.end
                        continue
                elif base + position < appended.start < base + readable:
                    readable = appended.start - base  # scan up to it, take it from there
            consumed, next_file = self._dispatch_segment(segment, position, readable, budget - done)
            done += consumed
            self.reput_from_offset = base + position + consumed
            if next_file:
                self.reput_from_offset = commitlog.next_segment_offset(base)
                done += 1
            elif consumed == 0:
                break
        return done

    def _next_appended(self) -> AppendedBatch | None:
        """The first remembered batch at or past where dispatch is (older ones are dropped)."""
        appended = self._appended
        while appended and appended[0].start < self.reput_from_offset:
            appended.popleft()
        return appended[0] if appended else None

    def _dispatch_appended(self, segment: Segment, batch: AppendedBatch) -> bool:
        """Dispatch `batch`'s records from its layout; False when the scan must do it."""
        if self._quarantine and (batch.topic, batch.queue_id) in self._quarantine:
            return False  # the scan skips its records one by one, counting them
        queue = self.queues(batch.topic, batch.queue_id)
        if batch.end <= queue.max_physical_offset:
            return True  # built already
        if queue.max_physical_offset > batch.start or not queue.can_append_at(
            batch.first_queue_offset
        ):
            return False
        if self._needs_file(queue, batch.first_queue_offset):
            return False  # the scan stops at its first record until the file is made
        mm = segment.map
        at = batch.start - segment.start_offset
        offsets = batch.offsets
        count = len(offsets)
        last = offsets[-1]
        sizes = [
            b - a for a, b in zip(offsets, [*offsets[1:], batch.end - batch.start], strict=True)
        ]
        # The bytes must be the ones the batch describes (first and last record's head).
        if _RECORD_CHECK.unpack_from(mm, at) != (sizes[0], batch.first_queue_offset, batch.start):
            return False
        if _RECORD_CHECK.unpack_from(mm, at + last) != (
            sizes[-1],
            batch.first_queue_offset + count - 1,
            batch.start + last,
        ):
            return False
        codes = [
            tags_code_for(find_value(mm, _TAGS_NEEDLE, at + p, at + o + size))
            for p, o, size in zip(batch.properties_at, offsets, sizes, strict=True)
        ]
        try:
            queue.put_units(
                b"".join(map(pack_unit, [batch.start + o for o in offsets], sizes, codes)),
                batch.end,
            )
        except Exception as exc:
            raise DispatchFailure(batch.topic, batch.queue_id, batch.start) from exc
        next_offset = batch.first_queue_offset + count
        for code in set(codes):
            for listener in self.listeners:
                listener(batch.topic, batch.queue_id, next_offset, code, batch.store_timestamp)
        self.checkpoint.logics_msg_timestamp = batch.store_timestamp
        return True

    def _dispatch_segment(
        self, segment: Segment, pos: int, end: int, budget: int
    ) -> tuple[int, bool]:
        """Dispatch the records of `segment` in [pos, end); returns (bytes, reached the blank).

        The common record (IPv4 hosts, no transaction bits, not a delayed message) takes a fast
        path: one unpack for its fixed head, property lookups by `mmap.find` in place, its
        ConsumeQueue unit gathered per queue and its index entries per chunk, all written when
        the chunk ends (or before a record that takes the general path), and then one arrival
        call per queue and tagsCode instead of one per message. Anything else goes through
        `scan_record` and `_dispatch_record`, which also classify what cannot be dispatched.
        """
        mm = segment.map
        base = segment.start_offset
        first = pos
        stop = pos + budget
        runs: dict[tuple[bytes, int], _QueueRun] = {}
        entries: list[tuple[int, int, int]] = []
        index = self.index_in_process()
        index_from = index.indexed_up_to if index is not None else 0
        gather_keys = self._keys.gather
        keys = self._keys if index is not None else None
        fast_path = self.fast_path
        last_ts = -1
        next_file = False
        try:
            while pos < end and pos < stop:
                if fast_path and runs:
                    # The records that extend a run, nearly all of them: one call for the lot.
                    pos, taken_ts = extend_runs(
                        mm, pos, end, stop, runs, keys, entries, index_from, _DELAYING_RAW
                    )
                    if taken_ts >= 0:
                        last_ts = taken_ts
                    if not (pos < end and pos < stop):
                        break
                record = scan_fast(mm, pos, end) if fast_path else None
                if record is None or record[6] == _SCHEDULE_RAW or record[6] == _TIMER_RAW:
                    # The general path, for one record; what is gathered so far goes first.
                    self._write_gathered(runs, entries, index, last_ts)
                    last_ts = -1
                    size, next_file = self._dispatch_general(segment.view, base, pos, end)
                    if size == 0:
                        break
                    pos += size
                    index_from = index.indexed_up_to if index is not None else 0
                    continue
                total, queue_id, queue_offset, phy, store_ts, props, topic_raw = record
                rec_end = pos + total
                tags_code = tags_code_for(find_value(mm, _TAGS_NEEDLE, props, rec_end))
                run = runs.get((topic_raw, queue_id))
                if run is not None and run.next_offset == queue_offset:
                    run.units.append(pack_unit(phy, total, tags_code))
                    run.next_offset = queue_offset + 1
                    run.end_phy = phy + total
                    run.tags_codes.add(tags_code)
                    run.last_ts = store_ts
                elif not self._start_run(
                    runs, topic_raw, queue_id, queue_offset, phy, total, tags_code, store_ts
                ):
                    # Before this record: its queue's file is made first, with those of the
                    # records after it.
                    self._look_ahead(mm, rec_end, end)
                    break
                if index is not None and phy >= index_from:
                    gather_keys(mm, entries, topic_raw, phy, store_ts, props, rec_end)
                last_ts = store_ts
                pos = rec_end
        finally:
            self._write_gathered(runs, entries, index, last_ts)
        return pos - first, next_file

    def _start_run(
        self,
        runs: dict[tuple[bytes, int], _QueueRun],
        topic_raw: bytes,
        queue_id: int,
        queue_offset: int,
        phy: int,
        size: int,
        tags_code: int,
        store_ts: int,
    ) -> bool:
        """A fast-path record that does not extend its queue's run: start one, or put it when
        it does not follow on from what the queue holds (first unit, gap, repeat). False: not
        taken, its queue needs a file made first (`_needs_file`)."""
        if (topic_raw, queue_id) in runs:
            self._write_runs(runs)
        topic = self._topic_names.get(topic_raw) or self._name(topic_raw)
        if self._quarantine and (topic, queue_id) in self._quarantine:
            self.faults.skipped((topic, queue_id), phy, queue_offset, time.monotonic())
            return True
        try:
            queue = self.queues(topic, queue_id)
        except Exception as exc:
            raise DispatchFailure(topic, queue_id, phy) from exc
        if phy + size <= queue.max_physical_offset:
            return True  # built already: re-dispatch after recovery
        if self._needs_file(queue, queue_offset):
            return False
        if queue.can_append_at(queue_offset):
            runs[(topic_raw, queue_id)] = _QueueRun(
                queue,
                queue_offset + 1,
                [pack_unit(phy, size, tags_code)],
                phy + size,
                {tags_code},
                store_ts,
            )
            return True
        try:
            queue.put(phy, size, tags_code, queue_offset)
        except Exception as exc:
            raise DispatchFailure(topic, queue_id, phy) from exc
        for listener in self.listeners:
            listener(topic, queue_id, queue_offset + 1, tags_code, store_ts)
        return True

    def _name(self, topic_raw: bytes) -> str:
        name = self._topic_names[topic_raw] = str(topic_raw, "utf-8", "replace")
        return name

    def _write_runs(self, runs: dict[tuple[bytes, int], _QueueRun]) -> None:
        """Write gathered ConsumeQueue units, then tell the listeners (readers look at once).

        A run is taken out of `runs` once written, so that when a later one fails, the caller's
        second try (its `finally`) does not write the first again."""
        written: list[_QueueRun] = []
        try:
            for key, run in list(runs.items()):
                try:
                    run.queue.put_units(b"".join(run.units), run.end_phy)
                except Exception as exc:
                    (phy,) = _PHY.unpack_from(run.units[0])  # the run's first record
                    raise DispatchFailure(run.queue.topic, run.queue.queue_id, phy) from exc
                del runs[key]
                written.append(run)
        finally:
            for run in written:
                queue = run.queue
                for tags_code in run.tags_codes:
                    for listener in self.listeners:
                        listener(
                            queue.topic, queue.queue_id, run.next_offset, tags_code, run.last_ts
                        )

    def _write_gathered(
        self,
        runs: dict[tuple[bytes, int], _QueueRun],
        entries: list[tuple[int, int, int]],
        index: IndexService | None,
        last_ts: int,
    ) -> None:
        if runs:
            self._write_runs(runs)
        if entries and index is not None:
            try:
                index.put_hashed(entries)
            except Exception as exc:
                raise DispatchFailure(*INDEX_KEY, entries[0][1]) from exc
            finally:
                entries.clear()
        if last_ts >= 0:
            self.checkpoint.logics_msg_timestamp = last_ts

    def _dispatch_general(
        self, view: memoryview, base: int, pos: int, end: int
    ) -> tuple[int, bool]:
        """One record at `pos` the slow way; returns (its size, reached the end-of-file blank).

        Size 0: nothing to dispatch here now (an incomplete record: wait for more bytes; or a
        malformed one: dispatch stops and `stalled_at` says where).
        """
        if end - pos < 8:
            return 0, False
        bounded = view[:end]
        info = scan_record(bounded, pos, check_crc=False)
        if info.size <= 0:
            # Looked at only when the scan fails, which keeps the common case to one parse.
            total, magic = read_total_size_and_magic(bounded, pos)
            if magic == BLANK_MAGIC:
                return 0, True
            if magic == MAGIC_V1 and total > 0 and pos + total > end:
                return 0, False  # the rest of this record has not arrived yet
            now = time.monotonic()
            if self.stalled_at != base + pos or now - self._stall_reported >= REPORT_INTERVAL:
                # Every append wakes dispatch up to it again: once per REPORT_INTERVAL.
                self._stall_reported = now
                log.error(
                    "malformed record at physical offset %d: dispatch stops there (nothing "
                    "after it is readable until an operator repairs the CommitLog)",
                    base + pos,
                )
            self.stalled_at = base + pos
            return 0, False
        self._dispatch_record(info, self.delay_levels, self.index_in_process())
        return info.size, False

    def _dispatch_record(
        self, info: DispatchInfo, levels: list[int], index: IndexService | None
    ) -> None:
        tran = info.sys_flag & TRANSACTION_MASK
        if tran in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            pass
        elif self._quarantine and (info.topic, info.queue_id) in self._quarantine:
            key = (info.topic, info.queue_id)
            self.faults.skipped(key, info.physical_offset, info.queue_offset, time.monotonic())
        else:
            try:
                queue = self.queues(info.topic, info.queue_id)
                # A unit the queue holds already (dispatch restarted below its end at recovery)
                # is neither written nor announced again.
                written = info.physical_offset + info.size > queue.max_physical_offset
                if written:
                    tags_code = tags_code_of(info, levels)
                    queue.put(info.physical_offset, info.size, tags_code, info.queue_offset)
            except Exception as exc:
                raise DispatchFailure(info.topic, info.queue_id, info.physical_offset) from exc
            if written:
                for listener in self.listeners:
                    listener(
                        info.topic,
                        info.queue_id,
                        info.queue_offset + 1,
                        tags_code,
                        info.store_timestamp,
                    )
        if index is not None:
            keys = find_property(info.properties, _KEYS)
            uniq = find_property(info.properties, _UNIQ)
            if keys or uniq:
                try:
                    index.build_index(
                        info.topic,
                        keys.decode("utf-8", "replace") if keys else None,
                        uniq.decode("utf-8", "replace") if uniq else None,
                        info.physical_offset,
                        info.store_timestamp,
                        info.sys_flag,
                    )
                except Exception as exc:
                    raise DispatchFailure(*INDEX_KEY, info.physical_offset) from exc
        self.checkpoint.logics_msg_timestamp = info.store_timestamp
