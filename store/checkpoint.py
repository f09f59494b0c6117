"""The store checkpoint file `<storeRoot>/checkpoint` (RocketMQ's StoreCheckpoint).

One 4 KiB page, big-endian: `[0:8) physicMsgTimestamp [8:16) logicsMsgTimestamp
[16:24) indexMsgTimestamp [24:32) masterFlushedOffset [32:40) confirmPhyOffset` (RocketMQ 5's
layout; a 4.x checkpoint has zeros past 24). physic is the store time of the last flushed
CommitLog message, logics of the last dispatched one, index of the last flushed index entry.
Abnormal recovery starts from the newest CommitLog file whose first message is older than
`min_timestamp`. confirmPhyOffset (controller mode) is how far the group had confirmed this
broker's log when the page was written: a slave restarted serves no further until its master
confirms more (MessageStore.serve_confirmed_only). masterFlushedOffset is kept as read.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

from tidemq.common.files import write_file_safely

_FIELDS = struct.Struct(">qqqqq")
FILE_SIZE = 4096


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        # Where the confirmed offset is read from before each flush (MessageStore); None when it
        # has none to give (a slave standing for election: the value read at load stays).
        self.confirmed_source: Callable[[], int | None] | None = None
        # Flushes run in worker threads; a stopping service's flush can still be running when the
        # next one starts, and both write the same temporary file.
        self._flush_lock = threading.Lock()
        if path.exists():
            data = path.read_bytes()
            if len(data) >= _FIELDS.size:
                (
                    self.physic_msg_timestamp,
                    self.logics_msg_timestamp,
                    self.index_msg_timestamp,
                    self.master_flushed_offset,
                    self.confirm_phy_offset,
                ) = _FIELDS.unpack_from(data)

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's getMinTimestamp: the older of physic and logics, minus 3 s of slack."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def note_confirmed(self) -> None:
        """Take the confirmed offset now (on the event loop, before a flush in a thread)."""
        source = self.confirmed_source
        confirmed = source() if source is not None else None
        if confirmed is not None:
            self.confirm_phy_offset = confirmed

    def flush(self, logics_msg_timestamp: int | None = None) -> None:
        """Write and fsync the page through a temporary file, so a crash leaves old or new;
        `logics_msg_timestamp` is written instead of the dispatch's newest when given (what
        the ConsumeQueues are synced up to)."""
        page = bytearray(FILE_SIZE)
        logics = self.logics_msg_timestamp if logics_msg_timestamp is None else logics_msg_timestamp
        _FIELDS.pack_into(
            page,
            0,
            self.physic_msg_timestamp,
            logics,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        with self._flush_lock:
            write_file_safely(self.path, bytes(page), keep_backup=False)
