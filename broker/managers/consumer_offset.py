"""Committed consume offsets (RocketMQ's ConsumerOffsetManager): table `consumerOffset` of
`config/tables.db` (a row per `topic@group`, its queue map as JSON), imported from and exported
to `config/consumerOffset.json` (config_file.py).

File format: one map per `topic@group`, queue id -> next offset to consume::

    {"offsetTable": {"TopicTest@cg": {"0": 12, "1": 3}, "%RETRY%cg@cg": {"0": 0}}}

Java writes the queue ids as bare numbers (`{0:12,1:3}`), which is not JSON; both forms are
read. The same text is the body of GET_ALL_CONSUMER_OFFSET (43), which a slave fetches from its
master every 10 s. The broker persists the rows that changed every flushConsumerOffsetInterval
(5 s) and at shutdown: `take_changes()` on the loop, `store.write` off it.

Slave synchronisation differs from RocketMQ on purpose. RocketMQ's slave takes the master's
table wholesale (`offsetTable.putAll`), so offsets that consumers committed to the slave while
the master was down are overwritten with the master's older ones when it returns, and the
consumers receive those messages again (apache/rocketmq#1094). `merge_from_master` instead
keeps, for each queue, the larger of the two offsets, and keeps queues the master does not
list. The price: a deliberate rewind on the master (an admin offset reset) does not reach the
slave; a consumer that fails over to the slave resumes from the slave's higher offset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidemq.broker.managers.config_file import (
    CONFIG_FILE_MAX_SIZE,
    CONSUMER_OFFSET_FILE,
    ConfigManager,
    compact_json,
    decode_json_object,
    pretty_json,
)
from tidemq.client.remoting.json_body import DEFAULT_MAX_BODY_SIZE, dumps

__all__ = ["ConsumerOffsetManager", "OffsetMergeResult", "OffsetTable", "parse_offset_table"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR: Final = "@"
# Controller mode's offset log (broker/offset_log.py): how far each broker applied its own log is
# a row of its table, never taken from another broker's.
OFFSET_LOG_TOPIC: Final = "rmq_sys_CONSUMER_OFFSET_LOG"

OffsetTable = dict[str, dict[int, int]]


def _key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def _split(key: str) -> tuple[str, str] | None:
    """(topic, group) of a `topic@group` key; None for a key that is not exactly that."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return (parts[0], parts[1]) if len(parts) == 2 else None


def parse_offset_table(text: str | bytes, *, max_size: int = DEFAULT_MAX_BODY_SIZE) -> OffsetTable:
    """The `offsetTable` of a consumerOffset.json or GET_ALL_CONSUMER_OFFSET body.

    Raises `BodyDecodeError` when the content is not such a table.
    """
    return decode_json_object(text, "consumer offsets", _offset_table, max_size=max_size)


def _offset_table(obj: dict[str, Any]) -> OffsetTable:
    raw = obj.get("offsetTable") or {}
    return {str(key): _queue_offsets(queues) for key, queues in raw.items()}


def _queue_offsets(queues: dict[str, Any]) -> dict[int, int]:
    return {int(queue_id): int(offset) for queue_id, offset in queues.items()}


@dataclass(frozen=True, slots=True)
class OffsetMergeResult:
    """What `merge_from_master` did: offsets taken from the master, and offsets where the
    slave's own was larger and was kept (each of those would be a redelivery in RocketMQ)."""

    adopted: int
    kept_local: int


class ConsumerOffsetManager(ConfigManager[OffsetTable]):
    """Consume offsets by topic@group and queue. Not thread safe: use it from the event loop."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / CONSUMER_OFFSET_FILE)
        self._table: OffsetTable = {}

    # --- persistence ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"offsetTable": self.snapshot()}

    def encode(self) -> str:
        return pretty_json(self.to_dict())

    def encode_body(self) -> bytes:
        """The GET_ALL_CONSUMER_OFFSET response body (compact JSON)."""
        return dumps(self.to_dict())

    def parse(self, text: str) -> OffsetTable:
        return parse_offset_table(text, max_size=CONFIG_FILE_MAX_SIZE)

    def adopt(self, state: OffsetTable) -> None:
        self._table = state

    def row_keys(self) -> Iterable[str]:
        return self._table.keys()

    def encode_row(self, key: str) -> str | None:
        queues = self._table.get(key)
        return None if queues is None else compact_json(queues)

    def adopt_rows(self, rows: dict[str, str], version: str | None) -> None:
        self._table = {key: _queue_offsets(json.loads(value)) for key, value in rows.items()}

    # --- commit and query -----------------------------------------------------------------

    def commit(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store a group's next offset for a queue. A lower offset than stored is accepted (a
        consumer may rewind) but logged, as RocketMQ's "[NOTIFYME]" warning does."""
        key = _key(topic, group)
        queues = self._table.setdefault(key, {})
        previous = queues.get(queue_id)
        queues[queue_id] = offset
        self.changed(key)
        if previous is not None and offset < previous:
            log.warning(
                "consumer offset moved back: client=%s key=%s queue=%d offset=%d stored=%d",
                client_host,
                key,
                queue_id,
                offset,
                previous,
            )

    def correct_past_end(self, end_of: Callable[[str, int], int]) -> int:
        """Lower each committed offset past its queue's end (`end_of(topic, queue_id)`) to that
        end; returns how many were. After a power cut the store may have lost its unflushed
        tail while the offsets file (synced on its own schedule) kept offsets into it: trusted,
        they would make consumers skip the messages stored again at those offsets."""
        corrected = 0
        for key, queues in self._table.items():
            split = _split(key)
            if split is None:
                continue
            topic, group = split
            for queue_id, offset in queues.items():
                end = end_of(topic, queue_id)
                if offset > end:
                    log.warning(
                        "committed offset past the end of its queue, corrected: group %s topic "
                        "%s queue %d committed %d, the queue ends at %d",
                        group,
                        topic,
                        queue_id,
                        offset,
                        end,
                    )
                    queues[queue_id] = end
                    corrected += 1
                    self.changed(key)
        return corrected

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self._table.get(_key(topic, group), {}).get(queue_id, -1)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        """Every queue's committed offset for a group and topic (a copy; empty when none)."""
        return dict(self._table.get(_key(topic, group), {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        """whichGroupByTopic: the groups holding offsets of `topic`."""
        return {p[1] for p in map(_split, self._table) if p is not None and p[0] == topic}

    def topics_of_group(self, group: str) -> set[str]:
        """whichTopicByConsumer: the topics `group` holds offsets of."""
        return {p[0] for p in map(_split, self._table) if p is not None and p[1] == group}

    def snapshot(self) -> OffsetTable:
        """A deep copy of the table, for GET_ALL_CONSUMER_OFFSET and admin views."""
        return {key: dict(queues) for key, queues in self._table.items()}

    # --- removal and copies -----------------------------------------------------------------

    def remove(self, group: str, topic: str) -> bool:
        """Drop a group's offsets of one topic; False when there were none."""
        key = _key(topic, group)
        self.changed(key)
        return self._table.pop(key, None) is not None

    def remove_group(self, group: str) -> int:
        """Drop every offset of a group; returns how many topics it had."""
        return self._remove_where(lambda topic, g: g == group)

    def remove_topic(self, topic: str) -> int:
        """Drop every group's offsets of a topic; returns how many groups had some."""
        return self._remove_where(lambda t, group: t == topic)

    def _remove_where(self, match: Callable[[str, str], bool]) -> int:
        doomed = [k for k in self._table if (p := _split(k)) is not None and match(*p)]
        for key in doomed:
            del self._table[key]
            self.changed(key)
            log.info("removed consumer offsets of %s", key)
        return len(doomed)

    def clone(self, src_group: str, dest_group: str, topic: str) -> bool:
        """cloneOffset: give `dest_group` the offsets `src_group` has for `topic`."""
        offsets = self._table.get(_key(topic, src_group))
        if offsets is None:
            return False
        key = _key(topic, dest_group)
        self._table[key] = dict(offsets)
        self.changed(key)
        return True

    # --- slave synchronisation ---------------------------------------------------------------

    def merge_from_master(self, master: OffsetTable) -> OffsetMergeResult:
        """Take the master's offsets without ever moving one of ours backwards (module doc)."""
        adopted = kept = 0
        for key, master_queues in master.items():
            if key.startswith(OFFSET_LOG_TOPIC + TOPIC_GROUP_SEPARATOR):
                continue
            local = self._table.setdefault(key, {})
            for queue_id, offset in master_queues.items():
                mine = local.get(queue_id)
                if mine is None or offset > mine:
                    local[queue_id] = offset
                    self.changed(key)
                    adopted += 1
                elif mine > offset:
                    kept += 1
        if kept:
            log.info(
                "offset sync: %d queue offsets of this slave are ahead of the master's and "
                "were kept (consumers committed here while the master was away)",
                kept,
            )
        return OffsetMergeResult(adopted, kept)
