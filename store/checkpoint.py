"""The store checkpoint file `<storeRoot>/checkpoint` (RocketMQ's StoreCheckpoint).

One 4 KiB page, big-endian: `[0:8) physicMsgTimestamp [8:16) logicsMsgTimestamp
[16:24) indexMsgTimestamp`. physic is the store time of the last flushed CommitLog message,
logics of the last dispatched one, index of the last flushed index entry. Abnormal recovery starts
from the newest CommitLog file whose first message is older than `min_timestamp`.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

from tidemq.common.files import write_file_safely

_FIELDS = struct.Struct(">qqq")
FILE_SIZE = 4096


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
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
                ) = _FIELDS.unpack_from(data)

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's getMinTimestamp: the older of physic and logics, minus 3 s of slack."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def flush(self, logics_msg_timestamp: int | None = None) -> None:
        """Write and fsync the page through a temporary file, so a crash leaves old or new;
        `logics_msg_timestamp` is written instead of the dispatch's newest when given (what
        the ConsumeQueues are synced up to)."""
        page = bytearray(FILE_SIZE)
        logics = self.logics_msg_timestamp if logics_msg_timestamp is None else logics_msg_timestamp
        _FIELDS.pack_into(page, 0, self.physic_msg_timestamp, logics, self.index_msg_timestamp)
        with self._flush_lock:
            write_file_safely(self.path, bytes(page), keep_backup=False)
