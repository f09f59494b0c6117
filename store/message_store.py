"""The message store (RocketMQ's DefaultMessageStore): a façade over CommitLog, queues, services.

Layout under `storePathRootDir`:

    commitlog/<20-digit offset>            CommitLog segments (storePathCommitLog overrides)
    consumequeue/<topic>/<queueId>/<...>   ConsumeQueue files
    index/<yyyyMMddHHmmssSSS>              index files
    checkpoint                             flushed/dispatched store times (see checkpoint.py)
    abort                                  present while running (holding the boot id); left
                                           behind by a crash (store/recovery.py)
    lock                                   flock'ed by the running process (store/store_lock.py)

Life cycle: `load()` takes the lock, opens every file and recovers (store/recovery.py: normal when
the abort file is absent, abnormal otherwise), then dispatches whatever the ConsumeQueues and the
index miss so that every queue's offsets match the CommitLog; `start()` starts the services and
creates the abort file; `stop()` stops them, flushes everything and removes the abort file when
dispatch has caught up. The store is a `Service` (store/common/lifecycle.py), its services its
children: `_add_services` gives both orders.

The parts, one purpose each: dispatch (store/dispatch.py), the index and its worker
(store/index_keeper.py), flushing (store/flushing.py), retention (store/retention.py), a slave's
resync (store/resync.py). HA attaches once, through `attach_replication`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidemq.common.files import make_dirs, path_inside, write_file_safely
from tidemq.common.lifecycle import Service, Step
from tidemq.store.checkpoint import StoreCheckpoint
from tidemq.store.commitlog import AppendResult, CommitLog, PutStatus
from tidemq.store.config import BrokerRole, FlushDiskType, StoreConfig
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.delay import DELAY_MARKER as _DELAY_MARKER
from tidemq.store.delay import park_delayed, parse_delay_levels
from tidemq.store.dispatch import ArrivalListener, ReputService
from tidemq.store.dispatch_faults import QUARANTINE_FILE
from tidemq.store.flushing import StoreFlusher
from tidemq.store.get_message import GetMessageResult, RecordFilter, TransferLimits, get_message
from tidemq.store.index import IndexService
from tidemq.store.index_keeper import IndexKeeper
from tidemq.store.index_worker import IndexWorker
from tidemq.store.layout import TRANSACTION_PREPARED_TYPE
from tidemq.store.lazy_check import FirstUseCheck
from tidemq.store.map_budget import MapBudget
from tidemq.store.queue_summary import SUMMARY_FILE, QueueSummary, take_summary, write_summary
from tidemq.store.record import (
    EncodedRecord,
    MessageBatch,
    MessageToStore,
    StoredMessage,
    decode_record,
    waits_for_store,
)
from tidemq.store.recovery import (
    Recovery,
    RecoveryPlan,
    apply_recovery,
    check_commitlog,
    fitting_summary,
    plan_cut,
    rebuild_queue_offsets,
    recovery_kind,
    write_abort_file,
)
from tidemq.store.replication import Replication, ReplicationHook
from tidemq.store.resync import reset_for_resync, truncate_for_resync, withdraw_dispatched
from tidemq.store.retention import Retention
from tidemq.store.segment_queue import SegmentQueue
from tidemq.store.services import (
    CleanService,
    CommitService,
    DiskState,
    DiskUsage,
    FlushCommitLogService,
    FlushConsumeQueueService,
    GroupCommitService,
    disk_used_ratio,
)
from tidemq.store.store_lock import StoreLock
from tidemq.store.tags import MATCH_ALL, TagFilter
from tidemq.store.timer_message import TIMER_MARKER as _TIMER_MARKER
from tidemq.store.timer_message import TimerLimits, park_timer
from tidemq.store.topic_folders import mark_topic_root
from tidemq.store.transient_pool import TransientStorePool

__all__ = ["MessageStore", "PutMessageResult", "QueryMessageResult", "Recovery", "Replication"]

log = logging.getLogger(__name__)


# Enum members read per message, as module constants: a class attribute of an Enum goes through
# EnumType.__getattr__ on Python 3.11 and costs ten times a global.
_PUT_OK: Final = PutStatus.PUT_OK
_SLAVE: Final = BrokerRole.SLAVE
_STORED: Final = frozenset(
    (
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    )
)


@dataclass(slots=True)
class PutMessageResult:
    status: PutStatus
    append: AppendResult | None = None
    remark: str = ""

    @property
    def ok(self) -> bool:
        """Stored: PUT_OK, or one of the three 'stored, but' statuses."""
        status = self.status
        return status is _PUT_OK or status in _STORED  # an Enum's hash is Python code


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


class MessageStore(Service):
    def __init__(self, config: StoreConfig, *, disk_usage: DiskUsage = disk_used_ratio) -> None:
        super().__init__()
        self.config = config
        self.root = config.root
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.timer_limits = TimerLimits(config.timer_wheel_enable, config.timer_max_delay_sec)
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
        # ConsumeQueue files are mapped on demand, at most this many at once.
        self.consume_queue_maps = MapBudget(config.max_mapped_consume_queue_files)
        self.index_keeper = IndexKeeper(config)
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
        # Controller mode (the broker sets it before load): readers see only what the group
        # confirmed. The checkpoint keeps the confirmed offset; a load serves no further than it
        # (RocketMQ 5's confirmPhyOffset), nor does a candidate back to being a slave.
        self.serve_confirmed_only = False
        self.checkpoint.confirmed_source = self._confirmed_now
        self.reput = ReputService(
            self.commitlog,
            self.checkpoint,
            self.find_or_create_consume_queue,
            self.index_keeper,
            self.delay_levels,
        )
        self.reput.on_quarantine = self._write_quarantine
        # Checks the files of a queue taken from a clean stop's summary at its first use.
        self.first_use_check = FirstUseCheck(
            self.commitlog, lambda: self.reput.reput_from_offset, self.delay_levels
        )
        self.limits = TransferLimits(
            config.max_transfer_bytes_on_message_in_memory,
            config.max_transfer_count_on_message_in_memory,
            config.max_transfer_bytes_on_message_in_disk,
            config.max_transfer_count_on_message_in_disk,
            (config.physical_memory_bytes or physical_memory_bytes())
            * config.access_message_in_memory_max_ratio
            // 100,
        )
        self.replication: Replication | None = None
        # Controller mode (broker/failover.py): a master acknowledges writes only before this
        # time.monotonic() instant, where the etcd lease it holds stops being trusted; None in
        # RocketMQ 4.x groups. `fence_reason` says why writes stopped (send status and log).
        self.lease_deadline: float | None = None
        self.fence_reason = "this master's etcd lease could not be renewed"
        # Controller mode: the SyncStateSet's size (the master included) and minInSyncReplicas;
        # a write is refused before it is stored while the set is smaller (0, 0 otherwise).
        self.in_sync_replicas = 0
        self.min_in_sync_replicas = 0
        # The SYNC_MASTER waiter of the attached replication, looked up on every put.
        self._sync_replication: ReplicationHook | None = None
        self.disk = DiskState()
        # Puts stored and waiting for a flush or the slave (SYNC_FLUSH, SYNC_MASTER): each holds
        # its request until answered, so their number is bounded (sendThreadPoolQueueCapacity).
        self.puts_waiting = 0
        self._max_puts_waiting = config.send_thread_pool_queue_capacity
        self.last_exit_ok = True
        self.recovery = Recovery.NORMAL
        self.recovery_plan: RecoveryPlan | None = None  # what load() found and cut
        # Where load() restarted dispatch (the CommitLog offset), -1 before load().
        self.redispatch_from = -1
        self._lock = StoreLock(self.root)
        # ConsumeQueues with units not flushed yet (ConsumeQueue.dirty).
        self.dirty_queues: set[ConsumeQueue] = set()
        self.flusher = StoreFlusher(
            self.commitlog,
            self.checkpoint,
            self.consume_queues,
            self.index_keeper,
            self.dirty_queues,
        )
        self.retention = Retention(
            self.commitlog, self.consume_queues, self.index_keeper, self.reput
        )
        self._commit = (
            CommitService(config, self.commitlog, self.on_committed) if self.pool else None
        )
        self._commitlog_flush = (
            GroupCommitService(config, self.commitlog, self.flusher)
            if config.flush_disk_type is FlushDiskType.SYNC_FLUSH
            else FlushCommitLogService(config, self.flusher)
        )
        # Looked up on every put; set by start, so that puts to a store that is only loaded
        # (benchmarks, tests) neither wait for nor wake a flush that does not run.
        self._flush: FlushCommitLogService | None = None
        self._group_commit: GroupCommitService | None = None
        self._flush_cq = FlushConsumeQueueService(config, self.flusher)
        self.cleaner = CleanService(
            config, self.disk, self.retention.delete_expired_commitlog, disk_usage
        )
        self._add_services()

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
        return self.role is _SLAVE

    @property
    def index(self) -> IndexService | None:
        return self.index_keeper.index

    @property
    def disk_full(self) -> bool:
        return self.disk.full

    # --- life cycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Lock, open and recover the store; afterwards queues match the CommitLog."""
        make_dirs(self.root)
        self._lock.take()
        try:
            self.index_keeper.take_lock()
            self._load()
        except BaseException:
            self.close_files()
            self._lock.release()
            raise

    def _load(self) -> None:
        self.recovery = recovery_kind(self.root)
        self.last_exit_ok = self.recovery is Recovery.NORMAL
        self.commitlog.segments.load()
        if self.recovery is Recovery.NORMAL and (self.root / SUMMARY_FILE).exists():
            check_from_segment, end = check_commitlog(
                self.recovery, self.commitlog, self.checkpoint, self.config
            )
            summary = fitting_summary(take_summary(self.root), self.recovery, self.commitlog, end)
            if summary is not None:
                self._queues_from_summary(summary)
            else:
                self._load_consume_queues()
        else:
            # Listed and loaded first: a file that stops the load stops it before anything
            # (the summary included) is changed.
            self._load_consume_queues()
            check_from_segment, end = check_commitlog(
                self.recovery, self.commitlog, self.checkpoint, self.config
            )
            summary = fitting_summary(take_summary(self.root), self.recovery, self.commitlog, end)
        index_load = None
        if self.index is not None:
            index_load = self.index.plan_load(
                self.last_exit_ok,
                self.checkpoint.index_msg_timestamp,
                keep_newer=self.recovery is Recovery.SAME_BOOT,
            )
        plan = plan_cut(
            self.recovery,
            self.commitlog,
            check_from_segment,
            end,
            self.consume_queues,
            index_load,
            summary,
        )
        self.recovery_plan = plan
        self.redispatch_from = apply_recovery(
            plan, self.commitlog, self.consume_queues, self.index, self.root
        )
        self.reput.reput_from_offset = self.redispatch_from
        self._read_quarantine()
        if self.serve_confirmed_only:
            self.withdraw_unconfirmed(self.checkpoint.confirm_phy_offset)
        self.reput.dispatch_all()
        rebuild_queue_offsets(self.commitlog, self.consume_queues, plan.queue_cuts)
        self._continue_quarantined_queues()

    # --- queues dispatch cannot write (store/dispatch_faults.py) ------------------------------

    def _read_quarantine(self) -> None:
        path = self.root / QUARANTINE_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        try:
            self.reput.faults.restore(data)
        except ValueError as exc:
            # Not worth refusing to start for: dispatch quarantines again what it cannot write.
            aside = path.with_name(path.name + ".unreadable")
            log.error("%s: %s; moved to %s, dispatch starts without it", path, exc, aside.name)
            path.replace(aside)
            return
        faults = self.reput.faults
        log.warning(
            "dispatch quarantine (%s): %d queues skipped: %s",
            path,
            len(faults.quarantined),
            faults.listing(),
        )

    def _write_quarantine(self) -> None:
        """Keep the quarantine in QUARANTINE_FILE (none: no file); a disk that refuses it is
        logged, the quarantine holds in memory and the next write tries again."""
        path = self.root / QUARANTINE_FILE
        try:
            if self.reput.faults.quarantined:
                write_file_safely(path, self.reput.faults.encode(), keep_backup=False)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.error("the dispatch quarantine could not be written to %s: %s", path, exc)

    def _continue_quarantined_queues(self) -> None:
        """A quarantined queue has no ConsumeQueue to take its next queue offset from: it goes
        on from the highest one dispatch skipped, so offsets are not handed out twice."""
        table = self.commitlog.topic_queue_table
        for (topic, queue_id), entry in self.reput.faults.quarantined.items():
            if queue_id < 0:
                continue  # the in-process index (dispatch.INDEX_KEY), not a queue
            key = f"{topic}-{queue_id}"
            table[key] = max(table.get(key, 0), entry.next_queue_offset)

    def _load_consume_queues(self) -> None:
        cq_root = self.root / "consumequeue"
        # Made here (not by the first queue's file) to carry the placement hint from the start:
        # each topic's folder a hierarchy of its own (store/topic_folders.py).
        make_dirs(cq_root)
        mark_topic_root(cq_root)
        # scandir: the types come with the listing, no stat per folder.
        with os.scandir(cq_root) as listing:
            topics = sorted((e.name, e.path) for e in listing if e.is_dir())
        for topic, topic_path in topics:
            with os.scandir(topic_path) as listing:
                queue_ids = sorted(int(e.name) for e in listing if e.is_dir() and e.name.isdigit())
            for queue_id in queue_ids:
                queue = self._new_consume_queue(topic, queue_id, listed=True)
                queue.load()

    def _queues_from_summary(self, summary: QueueSummary) -> None:
        """Every queue of a fitting summary, from it alone: nothing listed, opened or stat'ed
        (store/lazy_check.py checks each queue's files at its first use)."""
        for (topic, queue_id), state in summary.queues.items():
            # The names are the store's own folders', as the stop recorded them.
            queue = self._new_consume_queue(topic, queue_id, listed=True)
            queue.segments.assume(state.first_file, state.file_count, state.newest_change_ns)
            queue.unchecked = state
            queue.check_first = self.first_use_check

    def _new_consume_queue(
        self, topic: str, queue_id: int, *, listed: bool = False
    ) -> ConsumeQueue:
        """`listed`: the names come from the store's own folders (no check of the path)."""
        queue = ConsumeQueue(
            self.root / "consumequeue",
            topic,
            queue_id,
            self.config.consume_queue_file_size,
            self.consume_queue_maps,
            listed=listed,
        )
        queue.dirty = self.dirty_queues
        self.consume_queues[(topic, queue_id)] = queue
        return queue

    def _add_services(self) -> None:
        """The services as children, in the start order; they stop in the stop order.

        Start: the CommitLog's flush (group commit or async flush), the commit service, the
        ConsumeQueues' flush, the index worker, dispatch, retention, then the abort file.
        Stop: retention; the commit service, whose last commit makes everything readable; dispatch,
        once idle; the index worker; the CommitLog's last flush, then the ConsumeQueues'. Two
        parts stop out of the reverse of their start, each through a stop-only Step: the
        ConsumeQueues' flush (the Step comes first, so it stops last) and the commit service (a
        Step after dispatch stops it first; its own stop later finds it stopped). Both Steps
        come no later than their service's start, so a failed start still stops all it started.
        """
        flush_cq = self._flush_cq
        self.add_child(Step(stop=flush_cq.stop))
        self.add_child(Step(start=self._publish_commitlog_flush))
        self.add_child(self._commitlog_flush)
        if self._commit is not None:
            self.add_child(self._commit)
        self.add_child(Step(start=flush_cq.start))
        self.add_child(Step(start=self.start_index_worker, stop=self.stop_index_worker))
        self.add_child(self.reput)
        self.add_child(Step(stop=self.reput.wait_idle))
        if self._commit is not None:
            self.add_child(Step(stop=self._commit.stop))
        self.add_child(self.cleaner)

    def _publish_commitlog_flush(self) -> None:
        flush = self._commitlog_flush
        if isinstance(flush, GroupCommitService):
            self._group_commit = flush
        else:
            self._flush = flush

    async def on_start(self) -> None:
        # The boot id tells the next load whether the machine kept running (store/recovery.py).
        write_abort_file(self.root)
        self.reput.wakeup()

    async def stop(self) -> None:
        """Stop the services (when started), then let go of what load() took: files, lock.

        Only when a started store's services have all stopped cleanly does it flush the
        checkpoint and remove the abort file (once dispatch has caught up). A failed stop or
        start leaves any abort file in place: the next load then recovers as after a crash.
        """
        if not self.running:
            await self.stop_index_worker()  # a loaded store can run one unstarted (benchmarks)
            if self.reput.faults.quarantined:  # what recovery's dispatch skipped
                self._write_quarantine()
            self.close_files()
            self._lock.release()
            return
        await super().stop()
        self.checkpoint.note_confirmed()
        await asyncio.to_thread(self.checkpoint.flush)
        if self.reput.faults.quarantined:  # the records skipped since it was last written
            self._write_quarantine()
        # Files made for dispatch that it never took (it stopped): they hold no unit, and the
        # summary below says their queues have no such file.
        self.consume_queue_maps.discard_creations()
        if self.reput.behind_bytes == 0:
            # The next normal load takes the queues from here instead of mapping their files.
            await asyncio.to_thread(
                write_summary,
                self.root,
                self.commitlog.min_offset,
                self.commitlog.max_offset,
                self.consume_queues,
            )
            (self.root / "abort").unlink(missing_ok=True)
        else:
            log.warning("dispatch is %d bytes behind: abort file kept", self.reput.behind_bytes)
        self.close_files()
        self._lock.release()

    def close_files(self) -> None:
        self.consume_queue_maps.discard_creations()  # made for dispatch, which stopped first
        self.commitlog.segments.close()
        for queue in self.consume_queues.values():
            queue.close()
        self.index_keeper.close()

    async def start_index_worker(self) -> None:
        """Hand the index to a child process (store/index_keeper.py).

        `start` does this; a loaded store that is not started can too (the benchmarks do).
        """
        await self.index_keeper.start_worker(
            self.commitlog.segments.directory, self.reput.reput_from_offset
        )

    async def stop_index_worker(self) -> None:
        await self.index_keeper.stop_worker(self.reput.reput_from_offset)

    @property
    def index_worker(self) -> IndexWorker | None:
        return self.index_keeper.worker

    async def wait_index(self, timeout: float = 1.0) -> None:
        """Until the index covers what is dispatched now, at most `timeout` seconds.

        Queries by key call it first, so that a message is found once its send returned.
        """
        await self.index_keeper.wait_index(self.reput, timeout)

    # --- replication ------------------------------------------------------------------------

    def attach_replication(self, replication: Replication) -> None:
        """HA attaches (the broker calls this once HA has started); replaces any earlier one.

        The SYNC_MASTER waiter is used on a SYNC_MASTER only; the dispatch cap bounds what
        dispatch makes readable, and its acks wake dispatch.
        """
        self.detach_replication()
        self.replication = replication
        if self.role is BrokerRole.SYNC_MASTER:
            self._sync_replication = replication.sync
        cap = replication.dispatch_cap
        if cap is not None:
            self.reput.dispatch_cap = lambda: cap.acked_offset
            cap.ack_listeners.append(self._wake_dispatch)

    def detach_replication(self) -> None:
        """HA goes (the broker calls this before stopping it)."""
        replication = self.replication
        if replication is None:
            return
        cap = replication.dispatch_cap
        if cap is not None and self._wake_dispatch in cap.ack_listeners:
            cap.ack_listeners.remove(self._wake_dispatch)
        if cap is not None and self.serve_confirmed_only:
            # Controller mode: what the group confirmed stays the end (a stop would otherwise
            # dispatch the unconfirmed tail and note it as confirmed; a demotion's slave cap
            # replaces this one).
            confirmed = cap.acked_offset
            self.reput.dispatch_cap = lambda: confirmed
        else:
            self.reput.dispatch_cap = None
        self._sync_replication = None
        self.replication = None

    def _wake_dispatch(self, _acked: int) -> None:
        self.reput.wakeup()

    # --- writes -----------------------------------------------------------------------------

    def _check_writable(self) -> PutMessageResult | None:
        if self.role is _SLAVE:  # is_slave, inline: once per put
            return PutMessageResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark="service not available now: this broker is a slave and refuses writes",
            )
        if self.lease_deadline is not None and time.monotonic() >= self.lease_deadline:
            return self._fenced()
        if self.in_sync_replicas < self.min_in_sync_replicas:
            return PutMessageResult(
                PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
                remark=(
                    f"in-sync replicas not enough: the SyncStateSet has {self.in_sync_replicas}, "
                    f"minInSyncReplicas is {self.min_in_sync_replicas}"
                ),
            )
        if self.disk.full:
            return PutMessageResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark=(
                    "service not available now: the disk is full "
                    f"({self.disk.used_ratio:.0%} used, diskSpaceWarningLevelRatio "
                    f"{self.config.disk_space_warning_level_ratio:.0%})"
                ),
            )
        if self.puts_waiting >= self._max_puts_waiting:
            return PutMessageResult(
                PutStatus.TOO_MANY_REQUESTS,
                remark=(
                    "[TOO_MANY_REQUESTS]broker busy, start flow control for a while: "
                    f"{self.puts_waiting} sends wait for their flush or the slave"
                ),
            )
        return None

    async def put_message(
        self, msg: MessageToStore, on_appended: Callable[[AppendResult], None] | None = None
    ) -> PutMessageResult:
        """Store `msg`; `on_appended` runs once it has its offsets, before the wait for the
        flush or the slave (anything that reads the queue meanwhile may already see it)."""
        refused = self._check_writable()
        if refused is not None:
            return refused
        if _TIMER_MARKER in msg.properties:  # park_timer's own first test, saving the call
            timer_refused = park_timer(msg, int(time.time() * 1000), self.timer_limits)
            if timer_refused is not None:
                return PutMessageResult(timer_refused.status, remark=timer_refused.remark)
        if _DELAY_MARKER in msg.properties:  # park_delayed's own first test, saving the call
            park_delayed(msg, self.delay_levels)
        append = self.commitlog.put(msg)
        if append.status is not _PUT_OK:
            return await self._after_append(append, waits_for_store(msg.properties))
        if on_appended is not None:
            on_appended(append)
        new_file = self.reput.needs_file(msg.topic, msg.queue_id, append.queue_offset)
        result = await self._after_append(append, waits_for_store(msg.properties))
        if new_file:
            await self.reput.wait_dispatched(append.end_offset)
        return result

    async def put_encoded(
        self, records: Sequence[EncodedRecord], store_host: bytes, wait_store: bool = False
    ) -> PutMessageResult:
        """Store records the broker encoded itself (of any topics and queues), back to back
        in one append: all or none of them. No timer or delay parking: a record that would need
        it goes through `put_message`. `wait_store`: the flush or slave wait as WAIT=true."""
        if not wait_store:
            done = self.put_encoded_now(records, store_host)
            return done if isinstance(done, PutMessageResult) else await done
        refused = self._check_writable()
        if refused is not None:
            return refused
        append = self.commitlog.put_encoded(records, store_host)
        if append.status is not _PUT_OK:
            return await self._after_append(append, wait_store)
        new_file = self._needs_files(records, append)
        result = await self._after_append(append, wait_store)
        if new_file:
            await self.reput.wait_dispatched(append.end_offset)
        return result

    def put_encoded_now(
        self, records: Sequence[EncodedRecord], store_host: bytes
    ) -> PutMessageResult | Coroutine[Any, Any, PutMessageResult]:
        """`put_encoded` without a wait for the flush or slave, and without a coroutine when
        there is nothing to wait for (END_TRANSACTION's commit and op message): the result, or
        an awaitable of it when a record starts a ConsumeQueue file (its dispatch is waited
        for, as `put_encoded` waits)."""
        refused = self._check_writable()
        if refused is not None:
            return refused
        append = self.commitlog.put_encoded(records, store_host)
        if append.status is not _PUT_OK:
            return PutMessageResult(append.status, append, append.remark)
        new_file = self._needs_files(records, append)
        result = self._after_append_now(append)
        if new_file:
            return self._dispatched(result, append.end_offset)
        return result

    def _needs_files(self, records: Sequence[EncodedRecord], append: AppendResult) -> bool:
        reput = self.reput
        new_file = False
        queue_offsets = append.queue_offsets
        # by index: zip(strict=True) parses its keyword per call, more than the loop costs
        for i, record in enumerate(records):
            # PREPARED and ROLLBACK records (bit 0x4 of both) get no unit, so need no file
            if not record.sys_flag & TRANSACTION_PREPARED_TYPE and reput.needs_file(
                record.topic, record.queue_id, queue_offsets[i]
            ):
                new_file = True
        return new_file

    async def _dispatched(self, result: PutMessageResult, end_offset: int) -> PutMessageResult:
        await self.reput.wait_dispatched(end_offset)
        return result

    async def put_message_batch(self, batch: MessageBatch) -> PutMessageResult:
        """A SEND_BATCH_MESSAGE: messages of one topic and queue, stored contiguously."""
        refused = self._check_writable()
        if refused is not None:
            return refused
        encoded = self.commitlog.encode_message_batch(batch)
        if isinstance(encoded, AppendResult):
            return PutMessageResult(encoded.status, encoded, encoded.remark)
        append = self.commitlog.append_batch(encoded, batch.store_host)
        if append.status is not PutStatus.PUT_OK:
            return await self._after_append(append, encoded.wait_store)
        self.reput.note_appended(
            encoded, append.wrote_offset, append.queue_offset, append.store_timestamp
        )
        # Whether the queue's last file is full: a batch that fills it and goes on into the
        # next is answered without waiting for that next file.
        new_file = self.reput.needs_file(batch.topic, batch.queue_id, append.queue_offset)
        result = await self._after_append(append, encoded.wait_store)
        if new_file:
            await self.reput.wait_dispatched(append.end_offset)
        return result

    def _after_append_now(self, append: AppendResult) -> PutMessageResult:
        """`_after_append` of an appended put that waits for nothing (wait_store False): what it
        does then, with no await."""
        if self.pool is None and not self.commitlog.holds_gathered:  # else end_gathering does
            self.reput.wakeup()
            self._notify_data()
        if self._flush is not None and not self.config.flush_commit_log_timed:
            self._flush.wakeup()
        if self.lease_deadline is not None and time.monotonic() >= self.lease_deadline:
            return self._fenced(append)  # stored, acknowledged after another master's election
        return PutMessageResult(_PUT_OK, append)

    async def _after_append(self, append: AppendResult, wait_store: bool) -> PutMessageResult:
        if append.status is not _PUT_OK:
            return PutMessageResult(append.status, append, append.remark)
        if not wait_store:
            return self._after_append_now(append)
        if self.pool is None and not self.commitlog.holds_gathered:  # else end_gathering does
            self.reput.wakeup()
            self._notify_data()
        status = _PUT_OK
        if self._group_commit is not None and wait_store:
            self.puts_waiting += 1
            try:
                if not await self._group_commit.wait_flushed(append.end_offset):
                    status = PutStatus.FLUSH_DISK_TIMEOUT
            finally:
                self.puts_waiting -= 1
        elif self._flush is not None and not self.config.flush_commit_log_timed:
            self._flush.wakeup()
        replica = self._sync_replication
        if replica is not None and wait_store:
            if not replica.is_slave_ok(append.end_offset):
                status = PutStatus.SLAVE_NOT_AVAILABLE
            else:
                self.puts_waiting += 1
                try:
                    if not await replica.wait_for_slave(append.end_offset):
                        status = PutStatus.FLUSH_SLAVE_TIMEOUT
                finally:
                    self.puts_waiting -= 1
        if self.lease_deadline is not None and time.monotonic() >= self.lease_deadline:
            # Stored, but its acknowledgement would come when another master may be elected.
            return self._fenced(append)
        return PutMessageResult(status, append)

    def _fenced(self, append: AppendResult | None = None) -> PutMessageResult:
        return PutMessageResult(
            PutStatus.SERVICE_NOT_AVAILABLE,
            append,
            remark=f"service not available now: {self.fence_reason}; writes are not acknowledged",
        )

    # --- gathered appends: the puts of one read, one system call --------------------------

    def begin_gathering(self) -> None:
        """Gather the appends that follow until `end_gathering` (ASYNC_FLUSH without a transient
        pool; otherwise appends go on being written one by one). The remoting server brackets
        the requests of one read with the two; their responses are written after it."""
        if self.pool is None and self._group_commit is None:
            self.commitlog.gathering = True

    def end_gathering(self) -> None:
        """Write the gathered appends; wake dispatch and replication for them."""
        commitlog = self.commitlog
        commitlog.gathering = False
        if commitlog.write_gathered():
            self.reput.wakeup()
            self._notify_data()

    def _notify_data(self) -> None:
        replication = self.replication
        if replication is not None:
            replication.on_data()

    def append_to_commitlog(
        self, offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]
    ) -> None:
        """The slave side of HA: append the master's bytes at exactly `offset` (one buffer, or
        the bodies of consecutive frames). Dispatch follows in its own task. With SYNC_FLUSH the
        group commit flushes them (no put waits on a slave, and nothing else would: its
        CommitLog stayed unsynced until it stopped, and a power cut tore pages anywhere in it)."""
        self.commitlog.append_raw(offset, data)
        self.reput.wakeup()
        if self._group_commit is not None:
            self._group_commit.wakeup()

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
        return await self.flusher.flush_commitlog(least_pages)

    async def delete_expired_commitlog(
        self, reserved_ms: int, at_once: bool, batch_max: int
    ) -> int:
        return await self.retention.delete_expired_commitlog(reserved_ms, at_once, batch_max)

    # --- reads ------------------------------------------------------------------------------

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queues.get((topic, queue_id))

    def find_or_create_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Dispatch's lookup: a queue taken from the summary has its files checked (and
        recovered if they changed) before dispatch decides where its next unit goes."""
        queue = self.consume_queues.get((topic, queue_id))
        if queue is None:
            return self._new_consume_queue(topic, queue_id)
        if queue.check_first is not None:  # checked()'s own test: once per send
            queue.checked()
        return queue

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_filter: TagFilter = MATCH_ALL,
        record_filter: RecordFilter | None = None,
    ) -> GetMessageResult:
        """`record_filter` (SQL92) sees each record that passed `tag_filter`."""
        del group  # kept for RocketMQ's signature
        return get_message(
            self.find_consume_queue(topic, queue_id),
            offset,
            max_msg_nums,
            tag_filter,
            commitlog=self.commitlog,
            limits=self.limits,
            is_slave=self.is_slave,
            offset_check_in_slave=self.config.offset_check_in_slave,
            record_filter=record_filter,
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

    @property
    def served_end(self) -> int:
        """Where what readers may see by physical offset ends: the dispatch cap when one is set
        (controller mode: the offset the group confirmed; haReadReplicatedOnly: what the slave
        has), else the CommitLog's end. Reads through the ConsumeQueues (pull, pop) and the
        index (by key) end there already, being made by dispatch."""
        return self.reput.limit()

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
        index = self.index_keeper.refreshed()
        if index is None:
            return QueryMessageResult([], 0, 0)
        found = index.query_offsets(topic, key, max_num, begin, end)
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

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self.reput.listeners.append(listener)

    # --- controller mode: a slave elected master ------------------------------------------

    def cut_incomplete_tail(self) -> int:
        """A slave about to stand for election, its replication stopped: dispatch what it
        received, move an incomplete record at the end (the old master's last frame may have
        cut one) into a `.diverged` file, and take up each queue's next offset. Returns where
        the log ends: the next epoch's start. A slave's cap (its master's confirmed offset,
        ha/slave.py) goes: the candidate stands with its whole log (resuming replication sets
        it again)."""
        self.reput.dispatch_cap = None
        self.reput.dispatch_all()
        end = self.reput.reput_from_offset
        if end < self.max_phy_offset and self.reput.stalled_at < 0:
            log.warning(
                "an incomplete record at the end of the CommitLog (%d-%d) is kept aside",
                end,
                self.max_phy_offset,
            )
            self.truncate_for_resync(end)
        # A slave's appends are raw bytes: the next queue offset of each queue comes from its
        # ConsumeQueues, as after a restart.
        rebuild_queue_offsets(self.commitlog, self.consume_queues)
        self._continue_quarantined_queues()
        self.reput.wakeup()  # the index follows what dispatch did here
        return self.max_phy_offset

    def withdraw_unconfirmed(self, confirmed: int) -> None:
        """Serve nothing past `confirmed` until a cap set later (the HA client's, a promotion's)
        allows it: what dispatch made readable past it is withdrawn from the ConsumeQueues and
        the index (a restarted slave's unconfirmed tail; a candidate's whole log, dispatched when
        it stood for election and lost), and dispatch stops there."""
        self.reput.dispatch_cap = lambda: confirmed
        dispatched = max((q.max_physical_offset for q in self.consume_queues.values()), default=0)
        if max(dispatched, self.reput.reput_from_offset) <= confirmed:
            return
        log.warning(
            "serving stops at the confirmed offset %d (the log ends at %d): what was made "
            "readable past it is withdrawn until the master confirms it",
            confirmed,
            self.max_phy_offset,
        )
        withdraw_dispatched(
            confirmed, self.commitlog, self.consume_queues, self.index_keeper, self.reput
        )

    def _confirmed_now(self) -> int | None:
        """The confirmed offset the checkpoint keeps (None: keep the one it has)."""
        if not self.serve_confirmed_only:
            return None
        cap = self.reput.dispatch_cap
        if cap is not None:
            return min(self.max_phy_offset, cap())
        if self.role is not BrokerRole.SLAVE:
            return self.max_phy_offset  # a master without a cap confirms its whole log
        return None  # a slave standing for election, its cap lifted

    def take_role(self, role: BrokerRole) -> None:
        """Controller mode: the broker was elected, the store takes writes as `role`."""
        self.role = role

    # --- resynchronising a slave with its master (store/resync.py) -------------------------

    def truncate_for_resync(self, offset: int) -> None:
        """A diverged slave: keep its bytes past `offset` aside (`*.diverged`) and cut there."""
        truncate_for_resync(
            offset, self.commitlog, self.consume_queues, self.index_keeper, self.reput
        )

    def reset_for_resync(self) -> Path:
        """A slave behind its master's retention: move all its data aside and start empty."""
        return reset_for_resync(
            self.root,
            self.commitlog,
            self.consume_queues,
            self.index_keeper,
            self.reput,
            self.close_files,
        )

    def delete_topics(self, topics: set[str]) -> None:
        quarantined = self.reput.faults.quarantined
        lifted = [key for key in quarantined if key[0] in topics]
        for key in lifted:  # a deleted topic's queues start afresh if it is created again
            del quarantined[key]
            self.commitlog.topic_queue_table.pop(f"{key[0]}-{key[1]}", None)
        if lifted:
            self._write_quarantine()
        for key in [k for k in self.consume_queues if k[0] in topics]:
            queue = self.consume_queues.pop(key)
            queue.destroy()
            self.commitlog.topic_queue_table.pop(f"{key[0]}-{key[1]}", None)
        for topic in topics:
            folder = path_inside(self.root / "consumequeue", topic)
            for sub in sorted(folder.glob("*"), reverse=True):
                if sub.is_dir():
                    sub.rmdir()
            if folder.is_dir():
                folder.rmdir()


def _has_key(msg: StoredMessage, key: str) -> bool:
    keys = (msg.keys or "").split(" ")
    return key in keys or msg.properties.get("UNIQ_KEY") == key
