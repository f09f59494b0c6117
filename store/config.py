"""The store's configuration: RocketMQ's MessageStoreConfig keys and defaults.

Sizes are bytes, intervals milliseconds, ratios percent unless the name says otherwise, exactly as
RocketMQ 4.9.7 reads them. Keys that RocketMQ took from Java system properties
(`diskSpaceCleanForciblyRatio`, `diskSpaceWarningLevelRatio`) are ordinary keys here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from tidemq.common.errors import ConfigError
from tidemq.common.settings import setting

CQ_UNIT_SIZE = 20
MAX_TOPIC_LENGTH = 127
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class AppendMode(enum.Enum):
    """How appends reach a segment: positioned writes into the page cache, or copies into the map.

    `pwrite` is the default: on first touch each 4 KiB page of a fresh mapping faults while the
    GIL is held, which makes single appends through the map slower (see `make bench`), and a full
    disk surfaces as ENOSPC instead of SIGBUS.
    """

    pwrite = "pwrite"
    mmap = "mmap"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    store_path_root_dir: str = setting(
        str(Path.home() / "store"), doc="root of the store: commitlog, consumequeue, index"
    )
    store_path_commit_log: str = setting("", doc="CommitLog folder; empty = <root>/commitlog")
    mapped_file_size_commit_log: int = setting(
        1024 * 1024 * 1024, min_value=4096, doc="size of one CommitLog segment file"
    )
    mapped_file_size_consume_queue: int = setting(
        300_000 * CQ_UNIT_SIZE, min_value=CQ_UNIT_SIZE, doc="size of one ConsumeQueue file"
    )
    max_mapped_consume_queue_files: int = setting(
        1024,
        min_value=1,
        doc="tidemq: ConsumeQueue files open and mapped at once; past it the least recently "
        "used is closed (each holds two descriptors)",
    )
    append_mode: AppendMode = setting(
        AppendMode.pwrite, doc="tidemq: pwrite (page cache writes) or mmap (copies into the map)"
    )
    broker_role: BrokerRole = setting(BrokerRole.ASYNC_MASTER)
    flush_disk_type: FlushDiskType = setting(FlushDiskType.ASYNC_FLUSH)
    sync_flush_timeout: int = setting(
        5000, min_value=1, doc="SYNC_FLUSH wait before FLUSH_DISK_TIMEOUT"
    )
    flush_interval_commit_log: int = setting(500, min_value=1)
    flush_commit_log_least_pages: int = setting(4, min_value=0)
    flush_commit_log_thorough_interval: int = setting(10_000, min_value=0)
    flush_commit_log_timed: bool = setting(True)
    commit_interval_commit_log: int = setting(200, min_value=1)
    commit_commit_log_least_pages: int = setting(4, min_value=0)
    commit_commit_log_thorough_interval: int = setting(200, min_value=0)
    flush_interval_consume_queue: int = setting(1000, min_value=1)
    flush_consume_queue_least_pages: int = setting(2, min_value=0)
    flush_consume_queue_thorough_interval: int = setting(60_000, min_value=0)
    transient_store_pool_enable: bool = setting(False)
    transient_store_pool_size: int = setting(5, min_value=1)
    file_reserved_time: int = setting(72, min_value=0, doc="hours a CommitLog file is kept")
    delete_when: str = setting("04", doc="hours of the day (;-list) when expired files go")
    disk_max_used_space_ratio: int = setting(75, min_value=10, max_value=95)
    disk_space_clean_forcibly_ratio: float = setting(0.85, min_value=0.1, max_value=1.0)
    disk_space_warning_level_ratio: float = setting(0.90, min_value=0.1, max_value=1.0)
    clean_resource_interval: int = setting(10_000, min_value=1)
    delete_commit_log_files_interval: int = setting(100, min_value=0)
    delete_consume_queue_files_interval: int = setting(100, min_value=0)
    destroy_mapped_file_interval_forcibly: int = setting(
        120_000, key="destroyMapedFileIntervalForcibly", min_value=0
    )
    clean_file_forcibly_enable: bool = setting(True)
    send_thread_pool_queue_capacity: int = setting(
        10_000,
        min_value=1,
        doc="puts waiting for a flush or a slave's ack at once; one more is refused busy",
    )
    max_message_size: int = setting(4 * 1024 * 1024, min_value=1024)
    check_crc_on_recover: bool = setting(True, key="checkCRCOnRecover")
    message_index_enable: bool = setting(True)
    message_index_safe: bool = setting(False)
    message_index_worker_enable: bool = setting(
        True, doc="a started store builds the index in a child process (store/index_worker.py)"
    )
    message_index_worker_nice: int = setting(
        10,
        min_value=0,
        max_value=19,
        doc="tidemq: how much lower the index worker's CPU priority is than the broker's",
    )
    max_hash_slot_num: int = setting(5_000_000, min_value=1)
    max_index_num: int = setting(5_000_000 * 4, min_value=2)
    access_message_in_memory_max_ratio: int = setting(40, min_value=0, max_value=100)
    max_transfer_bytes_on_message_in_memory: int = setting(256 * 1024, min_value=1)
    max_transfer_count_on_message_in_memory: int = setting(32, min_value=1)
    max_transfer_bytes_on_message_in_disk: int = setting(64 * 1024, min_value=1)
    max_transfer_count_on_message_in_disk: int = setting(8, min_value=1)
    offset_check_in_slave: bool = setting(False)
    message_delay_level: str = setting(DEFAULT_DELAY_LEVELS)
    physical_memory_bytes: int = setting(
        0, min_value=0, doc="tidemq: RAM size for the in-memory ratio; 0 = read from the OS"
    )
    timer_wheel_enable: bool = setting(
        True, doc="timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS) accepted"
    )
    timer_max_delay_sec: int = setting(
        3600 * 24 * 3, min_value=1, doc="the longest delay a timer message may ask for"
    )
    timer_precision_ms: int = setting(
        1000,
        min_value=100,
        max_value=1000,
        doc="width of a time wheel slot (100, 200, 500 or 1000; others round down to one)",
    )
    timer_roll_window_slot: int = setting(
        3600 * 24 * 2,
        min_value=2,
        doc="slots ahead a timer is put in the wheel; a later one is rolled (written again)",
    )
    timer_flush_interval_ms: int = setting(
        1000, min_value=1, doc="how often the timer log, wheel and checkpoint are fsynced"
    )
    mapped_file_size_timer_log: int = setting(
        100 * 1024 * 1024, min_value=4096, doc="size of one timer log segment file"
    )

    @property
    def root(self) -> Path:
        return Path(self.store_path_root_dir).expanduser()

    @property
    def commit_log_dir(self) -> Path:
        if self.store_path_commit_log:
            return Path(self.store_path_commit_log).expanduser()
        return self.root / "commitlog"

    @property
    def consume_queue_file_size(self) -> int:
        """RocketMQ rounds the ConsumeQueue file size up to a whole number of units."""
        units = -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE)
        return units * CQ_UNIT_SIZE

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(h) for h in self.delete_when.split(";") if h.strip())

    def validate(self) -> None:
        try:
            hours = self.delete_hours
        except ValueError:
            raise ConfigError(
                f"deleteWhen: expected hours like 04 or 04;16, got {self.delete_when!r}"
            ) from None
        if any(not 0 <= h <= 23 for h in hours):
            raise ConfigError(f"deleteWhen: hours must be 0-23, got {self.delete_when!r}")
        if self.max_hash_slot_num >= 2**31 // 4 or self.max_index_num >= 2**31 // 20:
            raise ConfigError("maxHashSlotNum/maxIndexNum: index file would exceed 2 GiB")
        if self.mapped_file_size_commit_log > 2**40:
            raise ConfigError("mappedFileSizeCommitLog: at most 1 TiB")
        if self.mapped_file_size_commit_log <= self.max_message_size:
            # A record must always fit into an empty file.
            raise ConfigError("mappedFileSizeCommitLog: must be larger than maxMessageSize")
        from tidemq.store.delay import parse_delay_levels

        parse_delay_levels(self.message_delay_level)

    @property
    def timer_precision(self) -> int:
        """timerPrecisionMs as RocketMQ's setter takes it: rounded down to 100, 200, 500 or 1000."""
        return max(c for c in (100, 200, 500, 1000) if c <= self.timer_precision_ms)
