"""The message index: find CommitLog offsets by message key or unique key in a time range.

This is RocketMQ 4.9.7's IndexFile / IndexService, byte for byte on disk.

Files live in ``<storeRoot>/index/``, one per index, named by the local time of its creation as
``yyyyMMddHHmmssSSS``; name order is creation order. A file is created at its full size::

    size = 40 + maxHashSlotNum * 4 + maxIndexNum * 20

All integers are big-endian (Java ByteBuffer).

Header, 40 bytes::

    [0:8)   beginTimestamp   store time (ms) of the first entry
    [8:16)  endTimestamp     store time (ms) of the newest entry
    [16:24) beginPhyOffset   CommitLog offset of the first entry
    [24:32) endPhyOffset     CommitLog offset of the newest entry
    [32:36) hashSlotCount    number of slots in use (incremented when a put finds its slot empty)
    [36:40) indexCount       next entry number; starts at 1 because entry 0 means "none"
                             (a fresh file holds 0 here until its first put; 0 reads as 1)

A file created when the previous one filled up starts with begin and end of both timestamp and
offset set to the previous file's end values; the first put overwrites the begin values.

Slot table, maxHashSlotNum x 4 bytes: for slot ``keyHash % maxHashSlotNum``, the number of the
newest entry whose key falls in that slot, 0 if none.

Entries, maxIndexNum x 20 bytes, entry n at ``40 + maxHashSlotNum*4 + n*20``::

    [0:4)   keyHash     abs(Java String.hashCode(key)), 0 for Integer.MIN_VALUE
    [4:12)  phyOffset   CommitLog offset of the message
    [12:16) timeDiff    (storeTimestamp - beginTimestamp) // 1000, clamped to [0, 2**31-1]
    [16:20) prevIndex   the slot's previous newest entry: entries of a slot form a chain

A file is full when indexCount >= maxIndexNum, so it holds maxIndexNum - 1 entries.

A query walks the slot's chain, so a hash collision can return offsets of messages with other
keys: callers must read each message and re-check its keys, exactly as RocketMQ's query path
does.

Each message is indexed under ``topic#uniqKey`` (when it has a UNIQ_KEY) and ``topic#key`` for
each non-empty key of its space-separated KEYS. Messages whose transaction type is ROLLBACK are
skipped (PREPARED ones are indexed, as in RocketMQ), and so are messages below the last file's
endPhyOffset: they were indexed before a crash and are being re-dispatched.

Where tidemq differs from RocketMQ, the format stays the same and each reads the other's files:

- The first entry of a rolled file gets timeDiff 0. RocketMQ takes it against the seeded begin
  (the previous file's end) just before the put moves the begin to the entry's own store time,
  so the entry reads back as stored up to that gap later and time-range queries can miss it.
- Two files created in the same millisecond get distinct names (the second counts upwards);
  RocketMQ would reopen the same file.
- `truncate_after` (RocketMQ has no counterpart) undoes entries past a CommitLog cut.

Threads: every method except `IndexService.flush` belongs to one thread (the event loop).
`flush` may run in a worker thread meanwhile: it fsyncs duplicated descriptors and never touches
the maps.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidemq.common import speedups
from tidemq.common.errors import ConfigError
from tidemq.common.files import fsync_dir, make_dirs
from tidemq.store.errors import CorruptStoreError
from tidemq.store.javahash import HIGH_DIGITS, LOW_DIGITS, ascii_hash_u32, java_string_hash
from tidemq.store.layout import TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from tidemq.store.segment import preallocate

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SLOT_SIZE",
    "IndexQueryResult",
    "IndexService",
    "index_file_name",
    "index_file_size",
    "index_key_hash",
]

log = logging.getLogger(__name__)

HEADER_SIZE: Final = 40
SLOT_SIZE: Final = 4
ENTRY_SIZE: Final = 20
INVALID_INDEX: Final = 0
KEY_SEPARATOR: Final = " "

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
assert _HEADER.size == HEADER_SIZE
assert _SLOT.size == SLOT_SIZE
assert _ENTRY.size == ENTRY_SIZE

_INT_MAX: Final = 2**31 - 1
_ZERO_ENTRY: Final = bytes(ENTRY_SIZE)
_MASK32: Final = 0xFFFFFFFF
_POW31: Final = [pow(31, n, 1 << 32) for n in range(256)]
_MAX_FILE_SIZE: Final = 2**31 - 1  # RocketMQ computes the size in a Java int
_NAME_DIGITS: Final = 17

# MessageSysFlag transaction bits (store/layout.py). RocketMQ's buildIndex skips only ROLLBACK:
# PREPARED messages are indexed (it is the ConsumeQueue dispatcher that skips both).

# Bound methods hoisted once: attribute lookups are a measurable share of a put.
_pack_header = _HEADER.pack_into
_pack_slot = _SLOT.pack_into
_unpack_slot = _SLOT.unpack_from
_pack_entry = _ENTRY.pack_into
_unpack_entry = _ENTRY.unpack_from


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: Java hashCode made non-negative (MIN_VALUE becomes 0)."""
    h = java_string_hash(key)
    if h >= 0:
        return h
    h = -h
    return h if h <= _INT_MAX else 0


def topic_prefix_hash(topic: str) -> int:
    """Java hashCode of ``topic + "#"``, unsigned: the start of every key hash of the topic."""
    return java_string_hash(topic + "#") & _MASK32


def prefixed_key_hash(prefix_hash: int, key: bytes) -> int:
    """`index_key_hash` of ``topic#key`` from `topic_prefix_hash(topic)` and the key's UTF-8.

    Java's hash of a concatenation is ``h(a) * 31**len(b) + h(b)`` (mod 2**32, lengths in
    UTF-16 units), so the topic part is hashed once per topic, not once per key.
    """
    units = len(key)
    if 0 < units < len(_POW31) and key.isascii():
        # ascii_hash_u32 inlined: this runs twice per message in dispatch.
        h = (
            prefix_hash * _POW31[units]
            + int(key.translate(HIGH_DIGITS), 31) * 31
            + int(key.translate(LOW_DIGITS), 31)
        ) & _MASK32
    else:
        if key.isascii():
            tail = ascii_hash_u32(key)
        else:
            text = key.decode("utf-8", "replace")
            units = len(text.encode("utf-16-be", "surrogatepass")) // 2
            tail = java_string_hash(text)
        h = (prefix_hash * pow(31, units, 1 << 32) + tail) & _MASK32
    if h < 1 << 31:
        return h
    h = (1 << 32) - h
    return h if h <= _INT_MAX else 0


prefixed_key_hash = speedups.select(prefixed_key_hash, "tidemq.store._hashing")


def index_file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    return HEADER_SIZE + max_hash_slot_num * SLOT_SIZE + max_index_num * ENTRY_SIZE


def index_file_name(epoch_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ's UtilAll.timeMillisToHumanString."""
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


@dataclass(frozen=True, slots=True)
class IndexLoadPlan:
    """What loading the index does to its files (`IndexService.plan_load`), oldest first."""

    kept: tuple[Path, ...]  # opened
    destroyed: tuple[Path, ...]  # newer than the checkpoint after a crash of the machine
    empty: tuple[Path, ...]  # created but never sized (a crash): removed
    undo_torn_puts: bool  # an abnormal load: entries past a file's indexCount are undone
    rebuild_from: int  # `IndexService.rebuild_from` afterwards (-1 after a clean stop)


@dataclass(frozen=True, slots=True)
class IndexQueryResult:
    """RocketMQ's QueryOffsetResult.

    `phy_offsets` may hold offsets of messages with colliding keys; re-check against the message.
    The two `last_update_*` fields are the newest index file's end values: they tell a caller how
    far the index had got when it answered.
    """

    phy_offsets: list[int]
    last_update_timestamp: int
    last_update_phy_offset: int


class _IndexFile:
    """One mapped index file; header fields are mirrored in attributes to keep puts cheap."""

    __slots__ = (
        "_entries_pos",
        "_fd",
        "_map",
        "begin_phy_offset",
        "begin_timestamp",
        "dirty",
        "end_phy_offset",
        "end_timestamp",
        "hash_slot_count",
        "hash_slot_num",
        "index_count",
        "index_num",
        "name",
        "path",
    )
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def __init__(self, path: Path, fd: int, hash_slot_num: int, index_num: int) -> None:
        self.path = path
        self.name = path.name
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._entries_pos = HEADER_SIZE + hash_slot_num * SLOT_SIZE
        self._fd = fd
        self._map = mmap.mmap(fd, index_file_size(hash_slot_num, index_num))
        fields = _HEADER.unpack_from(self._map, 0)
        self.begin_timestamp, self.end_timestamp = fields[0], fields[1]
        self.begin_phy_offset, self.end_phy_offset = fields[2], fields[3]
        self.hash_slot_count = fields[4]
        self.index_count = max(fields[5], 1)  # IndexHeader.load: a fresh file stores 0
        # Until the first flush nothing is known to be durable.
        self.dirty = True

    @classmethod
    def create(
        cls, path: Path, hash_slot_num: int, index_num: int, prev_end_phy: int, prev_end_ts: int
    ) -> _IndexFile:
        size = index_file_size(hash_slot_num, index_num)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            # Preallocated (see `preallocate`): in a sparse file each of the index worker's
            # stores into a fresh page costs a block allocation, and a full disk turns it into
            # a SIGBUS; with the blocks reserved up front neither can happen.
            preallocate(fd, size)
            f = cls(path, fd, hash_slot_num, index_num)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        f._continue_from(prev_end_phy, prev_end_ts)
        return f

    @classmethod
    def open(cls, path: Path, hash_slot_num: int, index_num: int) -> _IndexFile:
        fd = os.open(path, os.O_RDWR)
        try:
            _check_size(path, os.fstat(fd).st_size, hash_slot_num, index_num)
            f = cls(path, fd, hash_slot_num, index_num)
        except BaseException:
            os.close(fd)
            raise
        f.dirty = False
        return f

    def _continue_from(self, end_phy: int, end_ts: int) -> None:
        # IndexFile's constructor: a rolled file starts where the previous one ended, which also
        # keeps build_index's "already indexed" check working across the roll.
        if end_phy > 0:
            self.begin_phy_offset = self.end_phy_offset = end_phy
        if end_ts > 0:
            self.begin_timestamp = self.end_timestamp = end_ts
        if end_phy > 0 or end_ts > 0:
            # Java writes only these four fields here; indexCount stays 0 on disk until a put.
            _pack_header(
                self._map,
                0,
                self.begin_timestamp,
                self.end_timestamp,
                self.begin_phy_offset,
                self.end_phy_offset,
                0,
                0,
            )

    def put(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """IndexFile.putKey; False when the file is full."""
        count = self.index_count
        if count >= self.index_num:
            return False
        mm = self._map
        slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE
        prev = _unpack_slot(mm, slot_pos)[0]
        if prev <= INVALID_INDEX or prev > count:
            prev = INVALID_INDEX
        begin_ts = self.begin_timestamp
        if count <= 1 or begin_ts <= 0:
            # The first entry defines beginTimestamp, so its diff is 0 (RocketMQ differs in a
            # rolled file; see the module docstring).
            diff = 0
        else:
            # Negative differences clamp to 0, so floor division agrees with Java's truncation.
            diff = min(max((store_timestamp - begin_ts) // 1000, 0), _INT_MAX)
        _pack_entry(mm, self._entries_pos + count * ENTRY_SIZE, key_hash, phy_offset, diff, prev)
        _pack_slot(mm, slot_pos, count)
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if prev == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        # Set last: flush clears the flag before it fsyncs, so a put racing a flush stays dirty.
        self.dirty = True
        return True

    def reload_header(self) -> None:
        """Re-read the header, which another process (the index worker) may have moved on."""
        fields = _HEADER.unpack_from(self._map, 0)
        self.begin_timestamp, self.end_timestamp = fields[0], fields[1]
        self.begin_phy_offset, self.end_phy_offset = fields[2], fields[3]
        self.hash_slot_count = fields[4]
        self.index_count = max(fields[5], 1)

    def put_many(self, entries: list[tuple[int, int, int]], start: int) -> int:
        """`put` for entries[start:] (key hash, phy offset, store time) until the file is full.

        One header write for the lot; returns how many entries went in.
        """
        count = self.index_count
        limit = self.index_num
        mm = self._map
        slots = self.hash_slot_num
        entries_pos = self._entries_pos
        begin_ts = self.begin_timestamp
        slot_count = self.hash_slot_count
        i = start
        n = len(entries)
        while i < n and count < limit:
            key_hash, phy_offset, store_timestamp = entries[i]
            slot_pos = HEADER_SIZE + (key_hash % slots) * SLOT_SIZE
            prev = _unpack_slot(mm, slot_pos)[0]
            if prev <= INVALID_INDEX or prev > count:
                prev = INVALID_INDEX
                slot_count += 1
            diff = 0
            if count > 1 and begin_ts > 0 and store_timestamp > begin_ts:
                diff = (store_timestamp - begin_ts) // 1000
                if diff > _INT_MAX:
                    diff = _INT_MAX
            _pack_entry(mm, entries_pos + count * ENTRY_SIZE, key_hash, phy_offset, diff, prev)
            _pack_slot(mm, slot_pos, count)
            if count <= 1:
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = begin_ts = store_timestamp
            count += 1
            i += 1
        if i == start:
            return 0
        self.index_count = count
        self.hash_slot_count = slot_count
        _key_hash, self.end_phy_offset, self.end_timestamp = entries[i - 1]
        self._write_header()
        self.dirty = True
        return i - start

    # The compiled twin when built (store/_index.pyx; store/common/speedups.py picks).
    put_many = speedups.select(put_many, "tidemq.store._index")

    def _write_header(self) -> None:
        _pack_header(
            self._map,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def is_time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched: [begin, end] overlaps the file's time span."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def select(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        """IndexFile.selectPhyOffset: append matching offsets, newest first, up to max_num."""
        count = self.index_count
        mm = self._map
        current = _unpack_slot(mm, HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE)[0]
        if current <= INVALID_INDEX or current > count or count <= 1:
            return
        begin_ts = self.begin_timestamp
        entries_pos = self._entries_pos
        while len(out) < max_num:
            h, phy, diff, prev = _unpack_entry(mm, entries_pos + current * ENTRY_SIZE)
            if diff < 0:
                break
            stored_at = begin_ts + diff * 1000
            if h == key_hash and begin <= stored_at <= end:
                out.append(phy)
            # Java stops on prev == current; prev >= current also stops a corrupt cycle, and
            # never triggers on a sound file, where a chain always points to older entries.
            if prev <= INVALID_INDEX or prev > count or prev >= current or stored_at < begin:
                break
            current = prev

    def undo_torn_puts(self) -> int:
        """Undo the entries a killed process left past indexCount; returns how many.

        A put writes its entry, then the slot, then the header (a batch: all its entries and
        slots, then the header once). Killed in between, the process leaves entries past
        indexCount with slots pointing at them, and a later put would take such a slot for
        empty (or for its own entry) and cut the chain of the slot's older entries. Undone
        newest first, each slot goes back to the entry's prevIndex, as in `discard_from`; the
        header never counted them. Entries past indexCount are otherwise zero (files are
        created sparse and `discard_from` zeroes what it undoes), so the first zero entry ends
        the torn run.
        """
        mm = self._map
        count = self.index_count
        end = count
        while end < self.index_num:
            pos = self._entries_pos + end * ENTRY_SIZE
            if mm[pos : pos + ENTRY_SIZE] == _ZERO_ENTRY:
                break
            end += 1
        for current in range(end - 1, count - 1, -1):
            pos = self._entries_pos + current * ENTRY_SIZE
            h, _phy, _diff, prev = _unpack_entry(mm, pos)
            slot_pos = HEADER_SIZE + (h % self.hash_slot_num) * SLOT_SIZE
            if _unpack_slot(mm, slot_pos)[0] == current:
                _pack_slot(mm, slot_pos, prev)
            _pack_entry(mm, pos, 0, 0, 0, 0)
        if end > count:
            self.dirty = True
        return end - count

    def discard_from(self, phy_offset: int) -> None:
        """Undo the newest puts whose offset is >= phy_offset, newest first.

        Offsets only grow within a file, so they are a suffix. Restoring each undone entry's slot
        to its prevIndex gives back exactly the file as it was before those puts, except that the
        end timestamp is known only to the second (beginTimestamp + timeDiff * 1000).
        """
        mm = self._map
        current = self.index_count - 1
        while current >= 1:
            pos = self._entries_pos + current * ENTRY_SIZE
            h, phy, _diff, prev = _unpack_entry(mm, pos)
            if phy < phy_offset:
                break
            _pack_slot(mm, HEADER_SIZE + (h % self.hash_slot_num) * SLOT_SIZE, prev)
            if prev == INVALID_INDEX:
                self.hash_slot_count -= 1
            _pack_entry(mm, pos, 0, 0, 0, 0)
            current -= 1
        if current == self.index_count - 1:
            return
        self.index_count = current + 1
        if current >= 1:
            _h, phy, diff, _prev = _unpack_entry(mm, self._entries_pos + current * ENTRY_SIZE)
            self.end_phy_offset = phy
            self.end_timestamp = self.begin_timestamp + diff * 1000
        self._write_header()
        self.dirty = True

    def dup_fd(self) -> int:
        return os.dup(self._fd)

    def close(self) -> None:
        # No memoryview of the map is ever exported, so close cannot raise BufferError.
        self._map.close()
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _check_size(path: Path, actual: int, hash_slot_num: int, index_num: int) -> None:
    expected = index_file_size(hash_slot_num, index_num)
    if actual != expected:
        raise CorruptStoreError(
            f"index file {path} has {actual} bytes, expected {expected} for "
            f"maxHashSlotNum={hash_slot_num} maxIndexNum={index_num}; "
            "fix the configuration or move the index directory aside (it can be rebuilt)"
        )


def _is_index_name(name: str) -> bool:
    return len(name) == _NAME_DIGITS and name.isdigit()


class IndexService:
    """RocketMQ's IndexService: the list of index files, oldest first; the last one is written."""

    def __init__(
        self, index_dir: Path, max_hash_slot_num: int = 5_000_000, max_index_num: int = 20_000_000
    ) -> None:
        if max_hash_slot_num < 1 or max_index_num < 2:
            raise ConfigError("maxHashSlotNum must be >= 1 and maxIndexNum >= 2")
        if index_file_size(max_hash_slot_num, max_index_num) > _MAX_FILE_SIZE:
            raise ConfigError("maxHashSlotNum/maxIndexNum: index file would exceed 2 GiB")
        self.index_dir = index_dir
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self._files: list[_IndexFile] = []
        # Guards the file list and descriptor lifetimes against a concurrent flush; held briefly.
        self._lock = threading.Lock()
        self._dir_dirty = False
        # Set by an abnormal load: the CommitLog offset from which dispatch must run again for
        # the index to be complete (-1 after a clean shutdown: nothing to rebuild).
        self.rebuild_from = -1

    @property
    def files(self) -> int:
        return len(self._files)

    # -- lifecycle -------------------------------------------------------------------------

    def load(
        self, last_exit_ok: bool, index_checkpoint_timestamp: int, *, keep_newer: bool = False
    ) -> None:
        """Open the existing files, oldest first: `apply_load` of `plan_load`."""
        self.apply_load(self.plan_load(last_exit_ok, index_checkpoint_timestamp, keep_newer))

    def plan_load(
        self, last_exit_ok: bool, index_checkpoint_timestamp: int, keep_newer: bool = False
    ) -> IndexLoadPlan:
        """Which files `apply_load` keeps, destroys and removes; reads headers only.

        After a crash, files that end after the checkpoint's indexMsgTimestamp may miss entries
        that never reached the disk; they are destroyed (with every later file) and
        `rebuild_from` says where re-dispatch must start to rebuild them: the end of the last
        file kept. It is worked out on every abnormal load, not only on one that destroys files,
        so that a crash during the rebuild cannot lose the entries of the files destroyed before.

        `keep_newer` keeps those files: the process died but the machine did not, so every
        page it wrote is still there and the files hold exactly what dispatch put (the store's
        same-boot recovery). `rebuild_from` is then where the index stops: the newest indexed
        record, whose entries may be half written (0 without files).

        After any crash, entries a put left past a file's indexCount are undone
        (`undo_torn_puts`, which leaves the header, hence `rebuild_from`, as it is).
        """
        if self._files:
            raise RuntimeError("IndexService.load called twice")
        kept: list[Path] = []
        destroyed: list[Path] = []
        empty: list[Path] = []
        last_end_phy = 0
        if self.index_dir.is_dir():
            for path in sorted(self.index_dir.iterdir()):
                if not _is_index_name(path.name) or not path.is_file():
                    log.warning("ignoring %s: not an index file name", path)
                    continue
                size = path.stat().st_size
                if size == 0:
                    empty.append(path)  # a crash between creating and sizing the file
                    continue
                _check_size(path, size, self.max_hash_slot_num, self.max_index_num)
                with path.open("rb") as f:
                    header = _HEADER.unpack(f.read(HEADER_SIZE))
                end_timestamp, end_phy = header[1], header[3]
                newer = bool(destroyed) or end_timestamp > index_checkpoint_timestamp
                if not last_exit_ok and not keep_newer and newer:
                    destroyed.append(path)
                    continue
                kept.append(path)
                last_end_phy = end_phy
        rebuild_from = -1 if last_exit_ok else (last_end_phy if kept else 0)
        return IndexLoadPlan(
            tuple(kept), tuple(destroyed), tuple(empty), not last_exit_ok, rebuild_from
        )

    def apply_load(self, plan: IndexLoadPlan) -> None:
        """Remove and destroy the files `plan_load` named, open the others."""
        if self._files:
            raise RuntimeError("IndexService.load called twice")
        make_dirs(self.index_dir)
        for path in plan.empty:
            log.warning("removing empty index file %s", path)
            path.unlink()
        for path in plan.destroyed:
            log.info("destroying index file %s: newer than the checkpoint", path)
            path.unlink(missing_ok=True)
            self._dir_dirty = True
        for path in plan.kept:
            self._files.append(_IndexFile.open(path, self.max_hash_slot_num, self.max_index_num))
        if plan.undo_torn_puts:
            for f in self._files:
                undone = f.undo_torn_puts()
                if undone:
                    log.warning("index file %s: %d torn entries undone", f.path, undone)
            self.rebuild_from = plan.rebuild_from

    def close(self) -> None:
        """Unmap and close every file. Does not fsync: call `flush` first for durability."""
        with self._lock:
            for f in self._files:
                f.close()
            self._files.clear()

    # -- writing ---------------------------------------------------------------------------

    def build_index(
        self,
        topic: str,
        keys: str | None,
        uniq_key: str | None,
        phy_offset: int,
        store_timestamp: int,
        sys_flag: int,
    ) -> None:
        """IndexService.buildIndex for one dispatched message."""
        # RocketMQ gets (or rolls) the file before looking at the message, keys or not.
        f = self._files[-1] if self._files else self._roll()
        if f.index_count >= f.index_num:
            f = self._roll()
        if phy_offset < f.end_phy_offset:
            return  # already indexed: re-dispatch after recovery
        if sys_flag & TRANSACTION_MASK == TRANSACTION_ROLLBACK_TYPE:
            return
        prefix = topic + "#"
        if uniq_key is not None:
            f = self._put(f, prefix + uniq_key, phy_offset, store_timestamp)
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if key:
                    f = self._put(f, prefix + key, phy_offset, store_timestamp)

    @property
    def indexed_up_to(self) -> int:
        """endPhyOffset of the last file: messages below it are indexed already."""
        return self._files[-1].end_phy_offset if self._files else 0

    def refresh(self) -> None:
        """Catch up with files the index worker writes: headers re-read, new files opened.

        A file is taken only once it has its full size (the worker creates it, then sizes it).
        """
        expected = index_file_size(self.max_hash_slot_num, self.max_index_num)
        with self._lock:
            for f in self._files:
                f.reload_header()
            newest = self._files[-1].name if self._files else ""
            for path in sorted(self.index_dir.iterdir()):
                if not _is_index_name(path.name) or path.name <= newest:
                    continue
                try:
                    if path.stat().st_size != expected:
                        break
                except FileNotFoundError:
                    break
                self._files.append(
                    _IndexFile.open(path, self.max_hash_slot_num, self.max_index_num)
                )
                newest = path.name

    def close_older_files(self) -> None:
        """Close all but the newest file (the index worker writes only that one)."""
        with self._lock:
            for f in self._files[:-1]:
                f.close()
            del self._files[:-1]

    def put_hashed(self, entries: list[tuple[int, int, int]]) -> None:
        """Add (key hash, phy offset, store time) entries in order, rolling files as they fill.

        The batch form of `build_index` for dispatch: the caller has applied build_index's
        rules (skip messages below `indexed_up_to` and ROLLBACK ones) and hashed the keys with
        `prefixed_key_hash`.
        """
        if not entries:
            return
        f = self._files[-1] if self._files else self._roll()
        done = 0
        while done < len(entries):
            put = f.put_many(entries, done)
            done += put
            if done < len(entries):
                f = self._roll()

    def _put(self, f: _IndexFile, key: str, phy_offset: int, store_timestamp: int) -> _IndexFile:
        key_hash = index_key_hash(key)
        if not f.put(key_hash, phy_offset, store_timestamp):
            f = self._roll()
            f.put(key_hash, phy_offset, store_timestamp)  # a fresh file always has room
        return f

    def _roll(self) -> _IndexFile:
        """getAndCreateLastIndexFile: start a new file continuing from the last one."""
        prev = self._files[-1] if self._files else None
        make_dirs(self.index_dir)
        with self._lock:
            f = self._create_file(
                prev.name if prev else "",
                prev.end_phy_offset if prev else 0,
                prev.end_timestamp if prev else 0,
            )
            self._files.append(f)
            self._dir_dirty = True
        return f

    def _create_file(self, prev_name: str, end_phy: int, end_ts: int) -> _IndexFile:
        name = index_file_name(time.time_ns() // 1_000_000)
        while True:
            if name <= prev_name:
                # Two rolls in one millisecond (or a clock step back): RocketMQ would reopen the
                # same file. Names only need to sort in creation order, so count upwards.
                name = f"{int(prev_name) + 1:0{_NAME_DIGITS}d}"
            try:
                return _IndexFile.create(
                    self.index_dir / name,
                    self.max_hash_slot_num,
                    self.max_index_num,
                    end_phy,
                    end_ts,
                )
            except FileExistsError:
                prev_name = name

    # -- reading ---------------------------------------------------------------------------

    def query_offsets(
        self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
    ) -> IndexQueryResult:
        """IndexService.queryOffset: up to max_num offsets of `topic#key` stored in [begin, end].

        Files are searched newest first, and offsets within a file newest first. The caller
        bounds max_num (RocketMQ: maxMsgsNumBatch) and re-checks keys against the messages.
        """
        offsets: list[int] = []
        if not self._files:
            return IndexQueryResult(offsets, 0, 0)
        last = self._files[-1]
        key_hash = index_key_hash(topic + "#" + key)
        for f in reversed(self._files):
            if f.is_time_matched(begin_ts, end_ts):
                f.select(offsets, key_hash, max_num, begin_ts, end_ts)
            if f.begin_timestamp < begin_ts or len(offsets) >= max_num:
                break
        return IndexQueryResult(offsets, last.end_timestamp, last.end_phy_offset)

    # -- durability and cleanup ------------------------------------------------------------

    def flush(self) -> int:
        """fsync every file written since the last flush; return the end timestamp now durable.

        Safe in a worker thread while the event loop keeps putting: the descriptors are
        duplicated under the lock, so a file deleted meanwhile is still fsynced harmlessly.
        """
        with self._lock:
            if not self._files:
                return 0
            # Read before fsyncing: every put that produced this value is then on disk.
            end_ts = self._files[-1].end_timestamp
            fds = []
            for f in self._files:
                if f.dirty:
                    f.dirty = False
                    fds.append(f.dup_fd())
            sync_dir, self._dir_dirty = self._dir_dirty, False
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        if sync_dir:
            fsync_dir(self.index_dir)
        return end_ts

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """IndexService.deleteExpiredFile: drop leading files that index only deleted messages.

        The last file is always kept. Returns how many files were deleted.
        """
        victims: list[_IndexFile] = []
        for f in self._files[:-1]:
            if f.end_phy_offset >= commitlog_min_offset:
                break
            victims.append(f)
        if victims:
            self._destroy(victims)
        return len(victims)

    def truncate_after(self, phy_offset: int) -> None:
        """Forget every entry for CommitLog offsets >= phy_offset (the CommitLog was cut there).

        Files that begin at or past the cut are destroyed; in the last remaining file the newest
        entries past the cut are undone. Without that undo, build_index would treat the messages
        written at those offsets afterwards as already indexed and skip them.
        """
        doomed = [f for f in self._files if f.begin_phy_offset >= phy_offset]
        if doomed:
            self._destroy(doomed)
        if self._files:
            self._files[-1].discard_from(phy_offset)

    def _destroy(self, victims: list[_IndexFile]) -> None:
        with self._lock:
            for f in victims:
                self._files.remove(f)
                f.destroy()
            self._dir_dirty = True
