"""In-place record parsing for the loops that read every record: dispatch and the index worker.

`scan_fast` reads the common record (IPv4 hosts; no transaction state, or COMMIT: a committed
transactional message gets its unit like any other) straight from the mapped CommitLog file with
one unpack for the fixed head and checks that its lengths agree; anything else (IPv6 hosts change
the layout; PREPARED and ROLLBACK records get no unit, and are not indexed; a blank, a torn or a
malformed record) returns None and goes through `record.scan_record`.
Properties are looked up with `mmap.find` where they lie, never decoded as a whole.

`KeyGatherer` turns a record's UNIQ_KEY and KEYS into index entries
`(key hash, physical offset, store timestamp)`, RocketMQ's buildIndex order, for
`IndexService.put_hashed`.

`extend_runs` is dispatch's loop over the records that extend a queue's run of ConsumeQueue
units gathered in a chunk (store/dispatch.py): nearly every record, one unit and its index keys.

`scan_fast`, `find_value`, `KeyGatherer` and `extend_runs` are the pure-Python twins of compiled
ones in store/_fast_scan.pyx, which run when built (store/common/speedups.py picks; same results
and errors).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping
from typing import Final, Protocol

from tidemq.common import speedups
from tidemq.store.index import prefixed_key_hash, topic_prefix_hash
from tidemq.store.layout import (
    FAST_HEAD_FORMAT,
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    HEAD_V4_SIZE,
    MAGIC_V1,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.record import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    DispatchInfo,
    find_property,
)
from tidemq.store.tags import tags_code_for

# The fixed head of a record with IPv4 hosts, only the fields the loops need: TOTALSIZE,
# MAGICCODE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, STORETIMESTAMP, BODYLENGTH.
_FAST_HEAD = struct.Struct(FAST_HEAD_FORMAT)
_SHORT = struct.Struct(">h")
# Records `scan_fast` leaves to the general path: IPv6 hosts change the layout, and PREPARED and
# ROLLBACK records are dispatched differently (bit 0x4 is set in both, not in COMMIT).
SLOW_FLAGS: Final = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6 | TRANSACTION_PREPARED_TYPE
assert TRANSACTION_ROLLBACK_TYPE & TRANSACTION_PREPARED_TYPE
assert not TRANSACTION_COMMIT_TYPE & TRANSACTION_PREPARED_TYPE

KEYS_NEEDLE: Final = PROPERTY_KEYS.encode() + b"\x01"
UNIQ_NEEDLE: Final = PROPERTY_UNIQ_KEY.encode() + b"\x01"
TAGS_NEEDLE: Final = PROPERTY_TAGS.encode() + b"\x01"
# A ConsumeQueue unit: physical offset, size, tagsCode (store/consume_queue.py's pack_unit).
_UNIT = struct.Struct(">qiq")

# (total size, queue id, queue offset, physical offset, store timestamp, properties start,
#  topic) of a record; positions are in the map.
FastRecord = tuple[int, int, int, int, int, int, bytes]


def scan_fast(mm: mmap.mmap, pos: int, end: int) -> FastRecord | None:
    """The record at `pos` if it is a whole, common one ending by `end`; else None."""
    if end - pos < HEAD_V4_SIZE:
        return None
    total, magic, queue_id, queue_offset, phy, sys_flag, store_ts, body_len = (
        _FAST_HEAD.unpack_from(mm, pos)
    )
    rec_end = pos + total
    at = pos + HEAD_V4_SIZE + body_len
    if (
        magic != MAGIC_V1
        or sys_flag & SLOW_FLAGS
        or rec_end > end
        or body_len < 0
        or at + 3 > rec_end
    ):
        return None
    props = at + 3 + mm[at]
    if props > rec_end or _SHORT.unpack_from(mm, props - 2)[0] != rec_end - props:
        return None
    return total, queue_id, queue_offset, phy, store_ts, props, mm[at + 1 : props - 2]


def find_value(mm: mmap.mmap, needle: bytes, start: int, end: int) -> bytes | None:
    """The value of property `needle` (`name\\x01`) in mm[start:end], found in place."""
    at = mm.find(needle, start, end)
    if at < 0:
        return None
    if at == start or mm[at - 1] == 0x02:
        begin = at + len(needle)
        stop = mm.find(b"\x02", begin, end)
        return mm[begin : stop if stop >= 0 else end]
    # The name turned up inside another property's value: search properly (rare).
    return find_property(mm[start:end], needle[:-1])


scan_fast = speedups.select(scan_fast, "tidemq.store._fast_scan")
find_value = speedups.select(find_value, "tidemq.store._fast_scan")


class KeyGatherer:
    """Index entries of records, with each topic's `topic#` hash worked out once."""

    def __init__(self) -> None:
        self._prefixes: dict[bytes, int] = {}

    def prefix(self, topic_raw: bytes) -> int:
        prefix = self._prefixes.get(topic_raw)
        if prefix is None:
            topic = str(topic_raw, "utf-8", "replace")
            prefix = self._prefixes[topic_raw] = topic_prefix_hash(topic)
        return prefix

    def gather(
        self,
        mm: mmap.mmap,
        entries: list[tuple[int, int, int]],
        topic_raw: bytes,
        phy: int,
        store_ts: int,
        props: int,
        rec_end: int,
    ) -> None:
        """buildIndex for a record found by `scan_fast`: UNIQ_KEY, then each key of KEYS."""
        prefix = self._prefixes.get(topic_raw)
        if prefix is None:
            prefix = self.prefix(topic_raw)
        uniq = find_value(mm, UNIQ_NEEDLE, props, rec_end)
        if uniq:
            entries.append((prefixed_key_hash(prefix, uniq), phy, store_ts))
        keys = find_value(mm, KEYS_NEEDLE, props, rec_end)
        self._add_keys(entries, prefix, keys, phy, store_ts)

    def gather_info(self, info: DispatchInfo, entries: list[tuple[int, int, int]]) -> None:
        """buildIndex for a record parsed by `scan_record` (the caller skips ROLLBACK ones)."""
        prefix = self.prefix(info.topic.encode())
        uniq = find_property(info.properties, UNIQ_NEEDLE[:-1])
        if uniq:
            entries.append(
                (prefixed_key_hash(prefix, uniq), info.physical_offset, info.store_timestamp)
            )
        keys = find_property(info.properties, KEYS_NEEDLE[:-1])
        self._add_keys(entries, prefix, keys, info.physical_offset, info.store_timestamp)

    @staticmethod
    def _add_keys(
        entries: list[tuple[int, int, int]],
        prefix: int,
        keys: bytes | None,
        phy: int,
        store_ts: int,
    ) -> None:
        if not keys:
            return
        if b" " not in keys:
            entries.append((prefixed_key_hash(prefix, keys), phy, store_ts))
            return
        entries.extend(
            (prefixed_key_hash(prefix, key), phy, store_ts) for key in keys.split(b" ") if key
        )


KeyGatherer = speedups.select(KeyGatherer, "tidemq.store._fast_scan")  # type: ignore[misc]


class QueueRun(Protocol):
    """What `extend_runs` reads and extends of a queue's run (dispatch's _QueueRun)."""

    next_offset: int
    units: list[bytes]
    end_phy: int
    tags_codes: set[int]
    last_ts: int


def extend_runs(
    mm: mmap.mmap,
    pos: int,
    end: int,
    stop: int,
    runs: Mapping[tuple[bytes, int], QueueRun],
    keys: KeyGatherer | None,
    entries: list[tuple[int, int, int]],
    index_from: int,
    skip_topics: tuple[bytes, bytes],
) -> tuple[int, int]:
    """Dispatch's loop over records from `pos` (while before `end` and `stop`) that extend a run
    of `runs`: a record `scan_fast` reads, not of `skip_topics` (the delay and timer topics),
    whose queue has a run expecting its queue offset. Each gets its unit (tagsCode from its TAGS)
    added to the run, and its index entries to `entries` when `keys` is given and its physical
    offset is at least `index_from`. Returns where it stopped (the first record it did not take)
    and the store timestamp of the last record taken, -1 when none was."""
    last_ts = -1
    while pos < end and pos < stop:
        record = scan_fast(mm, pos, end)
        if record is None:
            break
        total, queue_id, queue_offset, phy, store_ts, props, topic_raw = record
        if topic_raw in skip_topics:
            break
        run = runs.get((topic_raw, queue_id))
        if run is None or run.next_offset != queue_offset:
            break
        rec_end = pos + total
        tags_code = tags_code_for(find_value(mm, TAGS_NEEDLE, props, rec_end))
        run.units.append(_UNIT.pack(phy, total, tags_code))
        run.next_offset = queue_offset + 1
        run.end_phy = phy + total
        run.tags_codes.add(tags_code)
        run.last_ts = store_ts
        if keys is not None and phy >= index_from:
            keys.gather(mm, entries, topic_raw, phy, store_ts, props, rec_end)
        last_ts = store_ts
        pos = rec_end
    return pos, last_ts


extend_runs = speedups.select(extend_runs, "tidemq.store._fast_scan")
