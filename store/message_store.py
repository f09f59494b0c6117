"""The message store (RocketMQ's DefaultMessageStore): CommitLog, ConsumeQueues, index, services.

Layout under `storePathRootDir`:

    commitlog/<20-digit offset>            CommitLog segments (storePathCommitLog overrides)
    consumequeue/<topic>/<queueId>/<...>   ConsumeQueue files
    index/<yyyyMMddHHmmssSSS>              index files
    checkpoint                             flushed/dispatched store times (see checkpoint.py)
    abort                                  present while running (holding the boot id); left
                                           behind by a crash
    lock                                   flock'ed by the running process

Life cycle: `load()` takes the lock, opens every file and recovers (normal when the abort file is
absent, abnormal otherwise), then dispatches whatever the ConsumeQueues and the index miss so that
every queue's offsets match the CommitLog; `start()` starts the services and creates the abort
file, writing the machine's boot id (`/proc/sys/kernel/random/boot_id`; nothing when it cannot be
read) into it; `stop()` stops them, flushes everything and removes the abort file when dispatch
has caught up.

Recovery. In every kind the CommitLog is checked record by record (CRC) from a start file to its
end, a torn or corrupt tail is copied to `<segment>.<position>.torn` and cut, ConsumeQueues keep
their valid prefix (ConsumeQueue.recover) cut to the CommitLog's end, and index entries past the
end are undone. Then dispatch restarts at a point below which every record is known to have its
ConsumeQueue unit and its index entries; re-dispatching more is harmless (units and entries that
exist are skipped), less would lose them. With M the highest end of a ConsumeQueue's last unit
and S the start of the CommitLog file the check started from:

- normal (no abort file): the check starts at the third file from the end; dispatch restarts at M.
- abnormal, other boot (the abort file holds no boot id or another one: the machine restarted,
  and pages not yet on the disk may be lost): RocketMQ's recovery. The check starts at S, the
  newest file whose first record is older than the checkpoint's store times (minus 3 s; the
  index's too with messageIndexSafe); index files newer than the checkpoint are destroyed;
  dispatch restarts at min(M, S, R) with R where the kept index files end.
- abnormal, same boot (the abort file holds this boot's id: the process died, SIGKILL or a crash,
  but the machine kept running): every byte the process wrote, by pwrite or through a map, is in
  the page cache, so the ConsumeQueues and the index are exactly as dispatch (and the index
  worker) left them. The CommitLog check still starts at S, but no index file is destroyed,
  and dispatch restarts where it had got to: min(M, max(R, S)) with R the newest indexed record
  (the last index file's endPhyOffset); without the index, min(M, S).

Why those are safe. Records are indexed in CommitLog order, and a record's index entries are
written only after the ConsumeQueue units of every record up to it: dispatch writes a record's unit
before its entries (in a batch: all units, queue by queue, then all entries), and the index worker
(store/index_worker.py) indexes only below the offset dispatch has finished. So every record below
R has its unit and its entries; R's own record is dispatched again, as its entries may be half
written (those it has are added twice, which queries absorb). M alone proves nothing: a batch
writes queue by queue, so one queue can end at M while another still lacks units below it, and
records without a unit (transaction PREPARED and ROLLBACK ones) matter to the index only. Taking
the minimum with M only ever starts lower (when no queue got that far, e.g. after PREPARED
records). S is safe by RocketMQ's reasoning (the checkpoint holds store times dispatched and
flushed, and store times grow along the CommitLog); max(R, S) keeps an index that stopped long ago
(no keyed message since) from sending dispatch back further than S. Without an index nothing shows
where dispatch got to, hence S. In every kind dispatch restarts lower still where a damaged queue
must be rebuilt (at the end of its valid prefix), and never below the CommitLog's minimum. The
warning logged on an abnormal load names the kind.
"""

from __future__ import annotations

import asyncio
import enum
import fcntl
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from store.checkpoint import StoreCheckpoint
from store.commitlog import AppendResult, CommitLog, PutStatus
from store.config import BrokerRole, FlushDiskType, StoreConfig
from store.consume_queue import ConsumeQueue, UnitChecker
from store.delay import parse_delay_levels
from store.dispatch import SCHEDULE_TOPIC, ReputService
from store.errors import StoreLockedError
from store.get_message import GetMessageResult, TransferLimits, get_message
from store.index import IndexService
from store.index_worker import LOCK_WAIT as INDEX_LOCK_WAIT
from store.index_worker import IndexWorker, WorkerSpec
from store.index_worker import release_lock as release_index_lock
from store.index_worker import take_lock as take_index_lock
from store.record import (
    MAGIC_V1,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    RECORD_MIN_SIZE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    MessageBatch,
    MessageToStore,
    StoredMessage,
    decode_properties,
    decode_record,
    encode_properties,
    read_queue_position,
    read_topic,
    waits_for_store,
)
from store.segment_queue import SegmentQueue
from store.services import (
    CleanService,
    CommitService,
    DiskUsage,
    FlushCommitLogService,
    FlushConsumeQueueService,
    GroupCommitService,
    disk_used_ratio,
)
from store.tags import MATCH_ALL, TagFilter

log = logging.getLogger(__name__)


class ReplicationHook(Protocol):
    """What the store asks of HA on a SYNC_MASTER (implemented by ha.GroupTransferService)."""

    def is_slave_ok(self, master_put_where: int) -> bool: ...

    def wait_for_slave(self, next_offset: int) -> Awaitable[bool]: ...


class Recovery(enum.Enum):
    """Which recovery load() ran (module docstring)."""

    NORMAL = "normal"  # clean shutdown: no abort file
    SAME_BOOT = "same boot"  # the process died, the machine kept running: pages intact
    OTHER_BOOT = "other boot"  # the machine restarted, or the abort file holds no boot id


BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id() -> str:
    """This boot's id (Linux), "" when it cannot be read; tests replace this function."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def _same_boot(abort: Path) -> bool:
    """Did the process that left `abort` behind run in this boot of the machine?"""
    try:
        written = abort.read_text(errors="replace").strip()
    except OSError:
        return False
    return bool(written) and written == read_boot_id()


@dataclass(frozen=True, slots=True)
class RecoveredQueues:
    end: int  # the highest end (offset + size) of a ConsumeQueue's last unit, 0 if none
    damaged_from: int  # the lowest such end of a queue that lost units to rebuild, -1 if none


@dataclass(slots=True)
class PutMessageResult:
    status: PutStatus
    append: AppendResult | None = None
    remark: str = ""

    @property
    def ok(self) -> bool:
        """Stored: PUT_OK, or one of the three 'stored, but' statuses."""
        return self.status in (
            PutStatus.PUT_OK,
            PutStatus.FLUSH_DISK_TIMEOUT,
            PutStatus.FLUSH_SLAVE_TIMEOUT,
            PutStatus.SLAVE_NOT_AVAILABLE,
        )


@dataclass(frozen=True, slots=True)
class QueryMessageResult:
    messages: list[StoredMessage]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


def physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


class TransientStorePool:
    """Reusable write buffers of one segment's size (RocketMQ's TransientStorePool)."""

    def __init__(self, count: int, size: int) -> None:
        self.size = size
        self._free = [bytearray(size) for _ in range(count)]

    def borrow(self) -> bytearray | None:
        if not self._free:
            log.warning("transient store pool exhausted: appends go straight to the file")
            return None
        return self._free.pop()

    def give_back(self, buffer: bytearray) -> None:
        self._free.append(buffer)

    @property
    def available(self) -> int:
        return len(self._free)


class MessageStore:
    def __init__(self, config: StoreConfig, *, disk_usage: DiskUsage = disk_used_ratio) -> None:
        self.config = config
        self.root = config.root
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.role = config.broker_role
        self.pool: TransientStorePool | None = None
        if self.transient_pool_enabled:
            self.pool = TransientStorePool(
                config.transient_store_pool_size, config.mapped_file_size_commit_log
            )
        segments = SegmentQueue(
            config.commit_log_dir,
            config.mapped_file_size_commit_log,
            append_mode=config.append_mode,
            write_buffers=self.pool.borrow if self.pool else None,
        )
        self.commitlog = CommitLog(config, segments)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index: IndexService | None = None
        # The child process that builds the index while the store runs (store/index_worker.py).
        self.index_worker: IndexWorker | None = None
        self._index_lock: int | None = None  # index.lock while this process writes the index
        if config.message_index_enable:
            self.index = IndexService(
                self.root / "index", config.max_hash_slot_num, config.max_index_num
            )
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
        self.reput = ReputService(self)
        self.limits = TransferLimits(
            config.max_transfer_bytes_on_message_in_memory,
            config.max_transfer_count_on_message_in_memory,
            config.max_transfer_bytes_on_message_in_disk,
            config.max_transfer_count_on_message_in_disk,
            (config.physical_memory_bytes or physical_memory_bytes())
            * config.access_message_in_memory_max_ratio
            // 100,
        )
        self.replication: ReplicationHook | None = None
        # Called whenever readers may see more CommitLog bytes (HA write services wait on it).
        self.data_listeners: list[Callable[[], None]] = []
        # An upper bound on what dispatch may index (haReadReplicatedOnly), None = no bound.
        self.dispatch_cap: Callable[[], int] | None = None
        self.disk_full = False
        self.disk_used_ratio = 0.0
        self.last_exit_ok = True
        self.recovery = Recovery.NORMAL
        # Where load() restarted dispatch (the CommitLog offset), -1 before load().
        self.redispatch_from = -1
        self._lock_fd: int | None = None
        self._commit = CommitService(self) if self.pool else None
        self._flush: FlushCommitLogService | None = None
        self._group_commit: GroupCommitService | None = None
        self._flush_cq = FlushConsumeQueueService(self)
        self.cleaner = CleanService(self, disk_usage)
        self._flush_lock = asyncio.Lock()
        self._running = False

    @property
    def transient_pool_enabled(self) -> bool:
        config = self.config
        return (
            config.transient_store_pool_enable
            and config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
            and config.broker_role is not BrokerRole.SLAVE
        )

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    # --- life cycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Lock, open and recover the store; afterwards queues match the CommitLog."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            if self.index is not None:
                # A worker left by a killed predecessor finishes its batch and exits first.
                self._index_lock = take_index_lock(self.index.index_dir, INDEX_LOCK_WAIT)
            self._load()
        except BaseException:
            self.close_files()
            self._release_lock()
            raise

    def _load(self) -> None:
        abort = self.root / "abort"
        self.last_exit_ok = not abort.exists()
        if self.last_exit_ok:
            self.recovery = Recovery.NORMAL
        elif _same_boot(abort):
            self.recovery = Recovery.SAME_BOOT
        else:
            self.recovery = Recovery.OTHER_BOOT
        self.commitlog.segments.load()
        self._load_consume_queues()
        if self.index is not None:
            self.index.load(
                self.last_exit_ok,
                self.checkpoint.index_msg_timestamp,
                keep_newer=self.recovery is Recovery.SAME_BOOT,
            )
        self._recover()

    def _take_lock(self) -> None:
        path = self.root / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise StoreLockedError(
                f"store {self.root} is in use by another process{who}: lock file {path} is held"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load_consume_queues(self) -> None:
        cq_root = self.root / "consumequeue"
        if not cq_root.is_dir():
            return
        for topic_dir in sorted(cq_root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.is_dir() or not queue_dir.name.isdigit():
                    continue
                queue = self._new_consume_queue(topic_dir.name, int(queue_dir.name))
                queue.load()

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.root / "consumequeue", topic, queue_id, self.config.consume_queue_file_size
        )
        self.consume_queues[(topic, queue_id)] = queue
        return queue

    def _recover(self) -> None:
        segments = self.commitlog.segments.segments
        if self.last_exit_ok:
            start_index = max(0, len(segments) - 3)
        else:
            start_index = self._abnormal_start_index()
        # The checkpoint-safe file: the CommitLog check starts there.
        safe_start = segments[start_index].start_offset if segments else 0
        end = self.commitlog.recover(start_index)
        queues = self._recover_consume_queues(end)
        if self.index is not None:
            self.index.truncate_after(end)
        reput_from = self._redispatch_start(queues, safe_start)
        self.redispatch_from = max(reput_from, self.commitlog.min_offset)
        if self.recovery is not Recovery.NORMAL:
            how = (
                "same boot: the pages it wrote are intact, dispatch resumes where it stopped"
                if self.recovery is Recovery.SAME_BOOT
                else "another boot (or no boot id): RocketMQ's recovery from the checkpoint"
            )
            log.warning(
                "store %s was not shut down cleanly; abnormal recovery, %s: CommitLog checked "
                "from %d, ends at %d, re-dispatch from %d",
                self.root,
                how,
                safe_start,
                end,
                self.redispatch_from,
            )
        self.reput.reput_from_offset = self.redispatch_from
        self.reput.dispatch_available(1 << 62)
        self._recover_topic_queue_table()

    def _redispatch_start(self, queues: RecoveredQueues, safe_start: int) -> int:
        """Where dispatch must restart for the ConsumeQueues and the index to be complete.

        M = `queues.end` (the highest end of a last unit), S = `safe_start`, R = the index's
        `rebuild_from`; see the module docstring for the rules and why they are safe.
        """
        index = self.index
        if self.recovery is Recovery.NORMAL:
            reput_from = queues.end
        elif self.recovery is Recovery.SAME_BOOT:
            if index is not None:
                # R is the start of the newest indexed record, which is dispatched again: its
                # entries may be half written (UNIQ_KEY but not all KEYS); those it has are
                # added twice, which queries absorb (query_message lists an offset once).
                reput_from = min(queues.end, max(index.rebuild_from, safe_start))
            else:
                reput_from = min(queues.end, safe_start)
        else:
            reput_from = min(queues.end, safe_start)
            if index is not None and index.rebuild_from >= 0:
                # Index files destroyed by load() may hold entries older than safe_start.
                reput_from = min(reput_from, index.rebuild_from)
        if queues.damaged_from >= 0:
            reput_from = min(reput_from, queues.damaged_from)
        return reput_from

    def _abnormal_start_index(self) -> int:
        """Newest segment whose first record is older than the checkpoint says is safe."""
        segments = self.commitlog.segments.segments
        safe = self.checkpoint.min_timestamp
        if self.config.message_index_enable and self.config.message_index_safe:
            safe = self.checkpoint.min_timestamp_index
        for index in range(len(segments) - 1, -1, -1):
            ts = self.commitlog.first_record_timestamp(segments[index])
            if 0 < ts <= safe:
                return index
        return 0

    def _recover_consume_queues(self, commitlog_end: int) -> RecoveredQueues:
        """Recover every queue: where their units end, and where damaged ones need rebuilding."""
        end = 0
        damaged_from: list[int] = []
        for queue in self.consume_queues.values():
            clean = queue.recover(self._unit_checker(queue), commitlog_end)
            queue.truncate_dirty(commitlog_end)
            if not clean:
                damaged_from.append(max(queue.max_physical_offset, 0))
            end = max(end, queue.max_physical_offset)
        return RecoveredQueues(end, min(damaged_from, default=-1))

    def _unit_checker(self, queue: ConsumeQueue) -> UnitChecker:
        """Does the CommitLog hold this queue's record of this size and queue offset there?"""
        commitlog = self.commitlog
        commitlog_min = commitlog.min_offset
        topic = queue.topic.encode()
        queue_id = queue.queue_id

        def check(phy: int, size: int, queue_offset: int) -> bool:
            if phy < commitlog_min:
                return True  # deleted by retention: nothing left to check it against
            record = commitlog.get_record(phy, size) if size >= RECORD_MIN_SIZE else None
            if record is None:
                return False
            total, magic, stored_queue_id, stored_offset = read_queue_position(record, 0)
            if magic != MAGIC_V1 or total != size:
                return False
            return (
                stored_queue_id == queue_id
                and stored_offset == queue_offset
                and read_topic(record, 0, size) == topic
            )

        return check

    def _recover_topic_queue_table(self) -> None:
        table: dict[str, int] = {}
        commitlog_min = self.commitlog.min_offset
        for (topic, queue_id), queue in self.consume_queues.items():
            queue.correct_min_offset(commitlog_min)
            table[f"{topic}-{queue_id}"] = queue.max_offset
        self.commitlog.topic_queue_table = table

    async def start(self) -> None:
        if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(self)
            await self._group_commit.start()
        else:
            self._flush = FlushCommitLogService(self)
            await self._flush.start()
        if self._commit is not None:
            await self._commit.start()
        await self._flush_cq.start()
        await self.start_index_worker()
        await self.reput.start()
        await self.cleaner.start()
        # The boot id tells the next load whether the machine kept running (module docstring).
        (self.root / "abort").write_text(read_boot_id())
        self._running = True
        self.reput.wakeup()

    async def stop(self) -> None:
        if not self._running:
            await self.stop_index_worker()
            self.close_files()
            self._release_lock()
            return
        self._running = False
        await self.cleaner.stop()
        if self._commit is not None:
            await self._commit.stop()
        await self.reput.wait_idle()
        await self.reput.stop()
        await self.stop_index_worker()
        if self._group_commit is not None:
            await self._group_commit.stop()
        if self._flush is not None:
            await self._flush.stop()
        await self._flush_cq.stop()
        await asyncio.to_thread(self.checkpoint.flush)
        if self.reput.behind_bytes == 0:
            (self.root / "abort").unlink(missing_ok=True)
        else:
            log.warning("dispatch is %d bytes behind: abort file kept", self.reput.behind_bytes)
        self.close_files()
        self._release_lock()

    def close_files(self) -> None:
        self.commitlog.segments.close()
        for queue in self.consume_queues.values():
            queue.close()
        if self.index is not None:
            self.index.close()
        if self._index_lock is not None:
            release_index_lock(self._index_lock)
            self._index_lock = None

    async def start_index_worker(self) -> None:
        """Hand the index to a child process (module docstring of store/index_worker.py).

        `start` does this; a loaded store that is not started can too (the benchmarks do).
        """
        index = self.index
        if index is None or not self.config.message_index_worker_enable:
            return
        # What recovery indexed here must be on disk before the worker's flushes vouch for it.
        await asyncio.to_thread(index.flush)
        if self._index_lock is not None:
            release_index_lock(self._index_lock)
            self._index_lock = None
        self.index_worker = IndexWorker(
            WorkerSpec(
                commitlog_dir=str(self.commitlog.segments.directory.resolve()),
                commitlog_file_size=self.config.mapped_file_size_commit_log,
                index_dir=str(index.index_dir.resolve()),
                max_hash_slot_num=self.config.max_hash_slot_num,
                max_index_num=self.config.max_index_num,
                start=self.reput.reput_from_offset,
                nice=self.config.message_index_worker_nice,
            )
        )
        self.index_worker.start()

    async def stop_index_worker(self) -> None:
        worker = self.index_worker
        if worker is None or self.index is None:
            return
        worker.advance(self.reput.reput_from_offset)
        await worker.stop()
        self.index_worker = None
        self._index_lock = take_index_lock(self.index.index_dir, INDEX_LOCK_WAIT)
        self.index.refresh()

    async def wait_index(self, timeout: float = 1.0) -> None:
        """Until the index covers what is dispatched now, at most `timeout` seconds.

        Queries by key call it first, so that a message is found once its send returned.
        """
        worker = self.index_worker
        if worker is None:
            return
        deadline = time.monotonic() + timeout
        target = self.reput.limit()
        reput = self.reput
        # Dispatch first: the worker never indexes past it (recovery relies on that, above).
        while reput.reput_from_offset < target and reput.stalled_at < 0:
            if time.monotonic() >= deadline:
                break
            reput.wakeup()
            await asyncio.sleep(0.001)
        left = max(0.0, deadline - time.monotonic())
        await worker.wait_indexed(min(target, reput.reput_from_offset), left)

    # --- writes -----------------------------------------------------------------------------

    def _check_writable(self) -> PutMessageResult | None:
        if self.is_slave:
            return PutMessageResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark="service not available now: this broker is a slave and refuses writes",
            )
        if self.disk_full:
            return PutMessageResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark=(
                    "service not available now: the disk is full "
                    f"({self.disk_used_ratio:.0%} used, diskSpaceWarningLevelRatio "
                    f"{self.config.disk_space_warning_level_ratio:.0%})"
                ),
            )
        return None

    def _apply_delay(self, msg: MessageToStore) -> None:
        """A DELAY=n message is parked in SCHEDULE_TOPIC_XXXX queue n-1 (levels beyond clamp)."""
        marker = PROPERTY_DELAY + NAME_VALUE_SEPARATOR
        if marker not in msg.properties:
            return
        tran = msg.sys_flag & TRANSACTION_MASK
        if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return
        props = decode_properties(msg.properties)
        try:
            level = int(props.get(PROPERTY_DELAY, "0"))
        except ValueError:
            return
        if level <= 0:
            return
        level = min(level, len(self.delay_levels))
        props[PROPERTY_DELAY] = str(level)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.properties = encode_properties(props)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1

    async def put_message(self, msg: MessageToStore) -> PutMessageResult:
        refused = self._check_writable()
        if refused is not None:
            return refused
        self._apply_delay(msg)
        append = self.commitlog.put(msg)
        return await self._after_append(append, waits_for_store(msg.properties))

    async def put_messages(self, msgs: Sequence[MessageToStore]) -> PutMessageResult:
        """A batch of one topic and queue, stored contiguously."""
        refused = self._check_writable()
        if refused is not None:
            return refused
        append = self.commitlog.put_batch(msgs)
        wait = bool(msgs) and waits_for_store(msgs[0].properties)
        return await self._after_append(append, wait)

    async def put_message_batch(self, batch: MessageBatch) -> PutMessageResult:
        """`put_messages(batch.as_messages())`, without a MessageToStore per message."""
        refused = self._check_writable()
        if refused is not None:
            return refused
        encoded = self.commitlog.encode_message_batch(batch)
        if isinstance(encoded, AppendResult):
            return PutMessageResult(encoded.status, encoded, encoded.remark)
        append = self.commitlog.append_batch(encoded, batch.store_host)
        if append.status is PutStatus.PUT_OK:
            self.reput.note_appended(
                encoded, append.wrote_offset, append.queue_offset, append.store_timestamp
            )
        return await self._after_append(append, encoded.wait_store)

    async def _after_append(self, append: AppendResult, wait_store: bool) -> PutMessageResult:
        if append.status is not PutStatus.PUT_OK:
            return PutMessageResult(append.status, append, append.remark)
        if self.pool is None:
            self.reput.wakeup()
            self._notify_data()
        status = PutStatus.PUT_OK
        if self._group_commit is not None and wait_store:
            if not await self._group_commit.wait_flushed(append.end_offset):
                status = PutStatus.FLUSH_DISK_TIMEOUT
        elif self._flush is not None and not self.config.flush_commit_log_timed:
            self._flush.wakeup()
        if self.role is BrokerRole.SYNC_MASTER and wait_store and self.replication is not None:
            replica = self.replication
            if not replica.is_slave_ok(append.end_offset):
                status = PutStatus.SLAVE_NOT_AVAILABLE
            elif not await replica.wait_for_slave(append.end_offset):
                status = PutStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageResult(status, append)

    def _notify_data(self) -> None:
        for listener in self.data_listeners:
            listener()

    def append_to_commitlog(self, offset: int, data: bytes | memoryview) -> None:
        """The slave side of HA: append the master's bytes at exactly `offset`."""
        self.commitlog.append_raw(offset, data)
        self.reput.wakeup()

    def on_committed(self) -> None:
        """The commit service moved bytes into the files: readers may see more, buffers return."""
        self.reput.wakeup()
        self._notify_data()
        if self._flush is not None:
            self._flush.wakeup()
        if self.pool is not None:
            for segment in self.commitlog.segments.segments[:-1]:
                buffer = segment.take_write_buffer()
                if buffer is not None:
                    self.pool.give_back(buffer)

    async def flush_commitlog(self, least_pages: int) -> bool:
        """fsync the CommitLog off the loop; records the flushed store time in the checkpoint."""
        async with self._flush_lock:
            store_ts = self.commitlog.last_store_timestamp
            flushed = await asyncio.to_thread(self.commitlog.segments.flush, least_pages)
            if flushed:
                self.checkpoint.physic_msg_timestamp = store_ts
            return flushed

    async def flush_consume_queues(self, least_pages: int) -> None:
        logics_ts = self.checkpoint.logics_msg_timestamp
        queues = list(self.consume_queues.values())
        worker = self.index_worker
        index = self.index if worker is None else None

        def work() -> int:
            for queue in queues:
                queue.flush(least_pages)
            return index.flush() if index is not None else 0

        index_ts = await asyncio.to_thread(work)
        self.checkpoint.logics_msg_timestamp = max(logics_ts, 0)
        if index is not None:
            self.checkpoint.index_msg_timestamp = index_ts
        elif worker is not None:
            worker_ts = await worker.flush()
            if worker_ts is not None:
                self.checkpoint.index_msg_timestamp = worker_ts
        await asyncio.to_thread(self.checkpoint.flush)

    def set_disk_full(self, full: bool, ratio: float) -> None:
        if full and not self.disk_full:
            log.error("disk %.0f%% used: writes refused until space is freed", ratio * 100)
        elif not full and self.disk_full:
            log.info("disk %.0f%% used: writes accepted again", ratio * 100)
        self.disk_full = full

    async def delete_expired_commitlog(
        self, reserved_ms: int, at_once: bool, batch_max: int
    ) -> int:
        segments = self.commitlog.segments
        count = len(segments) - 1 if at_once else segments.expired_by_time(reserved_ms)
        count = min(count, batch_max)
        if count <= 0:
            return 0
        removed = segments.segments[:count]
        segments.segments = segments.segments[count:]
        for segment in removed:
            log.info("retention: deleting CommitLog file %s", segment.path.name)
            await asyncio.to_thread(segment.destroy)
        self._clean_consume_queues()
        return count

    def _clean_consume_queues(self) -> None:
        commitlog_min = self.commitlog.min_offset
        for queue in self.consume_queues.values():
            queue.delete_expired(commitlog_min)
        if self.index is not None:
            if self.index_worker is not None:
                self.index.refresh()
            self.index.delete_expired(commitlog_min)
        if self.reput.reput_from_offset < commitlog_min:
            self.reput.reput_from_offset = commitlog_min

    # --- reads ------------------------------------------------------------------------------

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queues.get((topic, queue_id))

    def find_or_create_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.consume_queues.get((topic, queue_id))
        return queue if queue is not None else self._new_consume_queue(topic, queue_id)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_filter: TagFilter = MATCH_ALL,
    ) -> GetMessageResult:
        del group  # kept for RocketMQ's signature: filters per group come with SQL92
        return get_message(
            self.find_consume_queue(topic, queue_id),
            offset,
            max_msg_nums,
            tag_filter,
            commitlog=self.commitlog,
            limits=self.limits,
            is_slave=self.is_slave,
            offset_check_in_slave=self.config.offset_check_in_slave,
        )

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        return queue.max_offset if queue else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        return queue.min_offset if queue else 0

    def offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(
            timestamp, lambda phy, _size: self.commitlog.store_timestamp_at(phy)
        )

    def commitlog_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        unit = queue.unit(queue_offset) if queue else None
        return unit.physical_offset if unit else 0

    def message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        unit = queue.unit(queue_offset) if queue else None
        if unit is None:
            return -1
        return self.commitlog.store_timestamp_at(unit.physical_offset)

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        if queue is None:
            return -1
        return self.message_store_timestamp(topic, queue_id, queue.min_offset)

    def look_message_by_offset(self, physical_offset: int, size: int = -1) -> StoredMessage | None:
        if size < 0:
            head = self.commitlog.get_record(physical_offset, 4)
            if head is None:
                return None
            size = int.from_bytes(head, "big", signed=True)
        record = self.commitlog.get_record(physical_offset, size)
        if record is None:
            return None
        try:
            return decode_record(record, check_crc=False)
        except ValueError:
            return None

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Messages whose KEYS or UNIQ_KEY contain `key`, stored within [begin, end] ms."""
        if self.index is None:
            return QueryMessageResult([], 0, 0)
        if self.index_worker is not None:
            self.index.refresh()
        found = self.index.query_offsets(topic, key, max_num, begin, end)
        messages = []
        # A message re-dispatched after a crash can be indexed twice: list it once.
        for phy in dict.fromkeys(found.phy_offsets):
            msg = self.look_message_by_offset(phy)
            # Hash collisions in the index: keep only messages that really carry the key.
            if msg is not None and msg.topic == topic and _has_key(msg, key):
                messages.append(msg)
        return QueryMessageResult(
            messages, found.last_update_timestamp, found.last_update_phy_offset
        )

    def queues(self) -> Iterator[tuple[str, int]]:
        return iter(list(self.consume_queues))

    def get_commitlog_data(self, offset: int) -> tuple[int, memoryview] | None:
        return self.commitlog.get_data(offset, return_first_on_not_found=offset == 0)

    @property
    def max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    def add_arrival_listener(self, listener: Callable[[str, int, int, int, int], None]) -> None:
        self.reput.listeners.append(listener)

    # --- resynchronising a slave with its master ------------------------------------------

    def truncate_for_resync(self, offset: int) -> None:
        """A diverged slave: keep its bytes past `offset` aside (`*.diverged`) and cut there."""
        log.warning("resync: truncating the CommitLog at %d (the tail is kept aside)", offset)
        self.commitlog.truncate_to(offset, "diverged")
        for queue in self.consume_queues.values():
            queue.truncate_dirty(offset)
        worker = self.index_worker
        if worker is not None:
            worker.kill()  # restarted below at the cut, which undoes what it had past there
        if self.index is not None:
            if worker is not None:
                self.index.refresh()
            self.index.truncate_after(offset)
        self._recover_topic_queue_table()
        self.reput.rewind(min(self.reput.reput_from_offset, offset))
        if worker is not None:
            worker.restart_at(min(worker.indexed, offset))

    def reset_for_resync(self) -> Path:
        """A slave behind its master's retention: move all its data aside and start empty.

        Returns the folder the CommitLog, ConsumeQueues and index were moved to.
        """
        aside = self.root / f"resync-{int(time.time() * 1000)}"
        aside.mkdir(parents=True)
        worker = self.index_worker
        if worker is not None:
            worker.kill()
        self.close_files()
        moves = [
            (self.commitlog.segments.directory, aside / "commitlog"),
            (self.root / "consumequeue", aside / "consumequeue"),
            (self.root / "index", aside / "index"),
        ]
        for source, target in moves:
            if source.exists():
                source.rename(target)
        log.warning("resync: the whole store was moved to %s; replication starts afresh", aside)
        old = self.commitlog.segments
        self.commitlog.segments = SegmentQueue(
            old.directory, old.segment_size, append_mode=old.append_mode
        )
        self.commitlog.topic_queue_table = {}
        self.consume_queues = {}
        if self.index is not None:
            self.index = IndexService(
                self.root / "index", self.config.max_hash_slot_num, self.config.max_index_num
            )
            self.index.load(True, 0)
        self.reput.rewind(0)
        self.reput.stalled_at = -1
        if worker is not None:
            worker.restart_at(0)
        return aside

    def delete_topics(self, topics: set[str]) -> None:
        for key in [k for k in self.consume_queues if k[0] in topics]:
            queue = self.consume_queues.pop(key)
            queue.destroy()
            self.commitlog.topic_queue_table.pop(f"{key[0]}-{key[1]}", None)
        for topic in topics:
            folder = self.root / "consumequeue" / topic
            for sub in sorted(folder.glob("*"), reverse=True):
                if sub.is_dir():
                    sub.rmdir()
            if folder.is_dir():
                folder.rmdir()


def _has_key(msg: StoredMessage, key: str) -> bool:
    keys = (msg.keys or "").split(" ")
    return key in keys or msg.properties.get("UNIQ_KEY") == key
