"""The reput (dispatch) service: follows the CommitLog and builds ConsumeQueues and the index.

It reads records from `reput_from_offset` up to what readers may see, hands each record to the
ConsumeQueue of its topic and queue and to the index, then tells arrival listeners (long-polling
pulls) that a queue grew. On a slave the same service runs over replicated bytes, which can end
in the middle of a record: an incomplete record at the readable end means "wait for more", while a
complete but malformed one stops dispatch with an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from store.javahash import java_string_hash
from store.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    DispatchInfo,
    find_property,
    read_total_size_and_magic,
    scan_record,
)

if TYPE_CHECKING:
    from store.index import IndexService
    from store.message_store import MessageStore

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# (topic, queue id, new max queue offset, tagsCode, store timestamp)
ArrivalListener = Callable[[str, int, int, int, int], None]

_TAGS = PROPERTY_TAGS.encode()
_KEYS = PROPERTY_KEYS.encode()
_UNIQ = PROPERTY_UNIQ_KEY.encode()
_DELAY = PROPERTY_DELAY.encode()

# Bytes dispatched before yielding to the event loop, so appends and pulls stay responsive.
CHUNK_BYTES = 4 * 1024 * 1024


def tags_code_of(info: DispatchInfo, delay_levels: list[int]) -> int:
    """tagsCode for the ConsumeQueue; a delayed message's is its delivery time."""
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
    tags = find_property(info.properties, _TAGS)
    if not tags:
        return 0
    return _tags_hash(tags)


@lru_cache(maxsize=4096)
def _tags_hash(tags: bytes) -> int:
    # A topic has a handful of tags, so nearly every message hits the cache.
    return java_string_hash(tags.decode("utf-8", "replace"))


class ReputService:
    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.reput_from_offset = 0
        self.listeners: list[ArrivalListener] = []
        self.stalled_at = -1  # offset of a malformed record that stopped dispatch
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def limit(self) -> int:
        """How far dispatch may go: the CommitLog's readable end, or the HA cap when set."""
        end = self.store.commitlog.max_offset
        cap = self.store.dispatch_cap
        return end if cap is None else min(end, cap())

    @property
    def behind_bytes(self) -> int:
        return max(0, self.limit() - self.reput_from_offset)

    def wakeup(self) -> None:
        self._wakeup.set()

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="reput")

    async def stop(self) -> None:
        from store.services import cancel_task

        await cancel_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                # Yield between chunks so appends and pulls are served meanwhile.
                while True:
                    if self.dispatch_available(CHUNK_BYTES) == 0:
                        break
                    await asyncio.sleep(0)
            except Exception:
                log.exception("dispatch failed at physical offset %d", self.reput_from_offset)
                await asyncio.sleep(1)
                self._wakeup.set()

    async def wait_idle(self) -> None:
        """Until dispatch has caught up with the CommitLog (or stopped at a malformed record)."""
        while self.behind_bytes > 0 and self.stalled_at < 0:
            self.wakeup()
            await asyncio.sleep(0.001)

    def dispatch_available(self, budget: int) -> int:
        """Dispatch up to about `budget` bytes of records; returns how many bytes were consumed."""
        commitlog = self.store.commitlog
        limit = self.limit()
        done = 0
        while done < budget and self.reput_from_offset < limit:
            if self.reput_from_offset < commitlog.min_offset:
                self.reput_from_offset = commitlog.min_offset
            got = commitlog.get_data(self.reput_from_offset)
            if got is None:
                break
            start, view = got
            if start + len(view) > limit:
                view = view[: limit - start]
            consumed, next_file = self._dispatch_view(start, view, budget - done)
            done += consumed
            self.reput_from_offset = start + consumed
            if next_file:
                self.reput_from_offset = commitlog.next_segment_offset(start)
                done += 1
            elif consumed == 0:
                break
        return done

    def _dispatch_view(self, start: int, view: memoryview, budget: int) -> tuple[int, bool]:
        """Dispatch records in `view`; returns (bytes consumed, reached the end-of-file blank)."""
        pos = 0
        end = len(view)
        store = self.store
        levels = store.delay_levels
        index = store.index if store.config.message_index_enable else None
        while pos < end and pos < budget:
            if end - pos < 8:
                break
            info = scan_record(view, pos, check_crc=False)
            if info.size <= 0:
                # Looked at only when the scan fails, which keeps the common case to one parse.
                total, magic = read_total_size_and_magic(view, pos)
                if magic == BLANK_MAGIC:
                    return pos, True
                if magic == MAGIC_V1 and total > 0 and pos + total > end:
                    break  # the rest of this record has not arrived yet
                self.stalled_at = start + pos
                log.error("malformed record at physical offset %d: dispatch stops", start + pos)
                break
            self._dispatch_record(info, levels, index)
            pos += info.size
        return pos, False

    def _dispatch_record(
        self, info: DispatchInfo, levels: list[int], index: IndexService | None
    ) -> None:
        store = self.store
        tran = info.sys_flag & TRANSACTION_MASK
        if tran not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            queue = store.find_or_create_consume_queue(info.topic, info.queue_id)
            # A unit the queue holds already (dispatch restarted below its end at recovery) is
            # neither written nor announced again.
            if info.physical_offset + info.size > queue.max_physical_offset:
                tags_code = tags_code_of(info, levels)
                queue.put(info.physical_offset, info.size, tags_code, info.queue_offset)
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
                index.build_index(
                    info.topic,
                    keys.decode("utf-8", "replace") if keys else None,
                    uniq.decode("utf-8", "replace") if uniq else None,
                    info.physical_offset,
                    info.store_timestamp,
                    info.sys_flag,
                )
        store.checkpoint.logics_msg_timestamp = info.store_timestamp
