"""Where a consumer keeps how far it has consumed each queue (RocketMQ's OffsetStore).

Both stores hold a table MessageQueue -> next offset to consume in memory, updated as messages
are consumed, and write it out from time to time (every 5 s, `persistConsumerOffsetInterval`)
and when a queue is given up:

- `RemoteBrokerOffsetStore` (CLUSTERING): the group's offsets live on the broker, so another
  consumer that takes over a queue continues where this one stopped. Commit is
  UPDATE_CONSUMER_OFFSET, read is QUERY_CONSUMER_OFFSET, sent to the address the caller's
  `find_address(broker_name)` gives: the master, else (master down, after a route refresh) any
  member of the group, as RocketMQ's findBrokerAddressInSubscribe(name, 0, true) then
  (name, 0, false) do. So while a master is down offsets are committed to its slave.
- `LocalFileOffsetStore` (BROADCASTING): every consumer reads every queue, so each keeps its own
  offsets in a file on its host (format below).

`read_offset` answers an offset >= 0, or `OFFSET_NOT_FOUND` (-1: nothing stored, the consumer
then starts per ConsumeFromWhere), or `OFFSET_READ_ERROR` (-2: the store could not be asked;
the consumer skips the queue this round and tries again at the next rebalance).

Every method is async for one Protocol over both stores; the in-memory ones never wait.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from tidemq.client.errors import ClientError, QueryNotFoundError, TideMQError
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.common.files import sibling, write_file_safely

__all__ = [
    "OFFSET_NOT_FOUND",
    "OFFSET_READ_ERROR",
    "LocalFileOffsetStore",
    "OffsetAPI",
    "OffsetStore",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
    "decode_offset_table",
    "encode_offset_table",
]

log = logging.getLogger(__name__)

OFFSET_NOT_FOUND = -1
OFFSET_READ_ERROR = -2


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    """The in-memory table only; -1 when the queue is not in it."""
    READ_FROM_STORE = "READ_FROM_STORE"
    """The broker or the file; a value found replaces the in-memory one."""
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"
    """The in-memory table, else the store."""


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    async def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    async def remove_offset(self, mq: MessageQueue) -> None: ...

    async def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    """The in-memory part both stores share."""

    def __init__(self) -> None:
        self.offset_table: dict[MessageQueue, int] = {}

    async def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set the queue's offset; with `increase_only` never move it backwards.

        increase_only is what consumption uses: two consume tasks finishing out of order must
        not move the offset back. A reset (seek, READ_FROM_STORE) passes False.
        """
        old = self.offset_table.get(mq)
        if old is None or not increase_only or offset > old:
            self.offset_table[mq] = offset

    async def remove_offset(self, mq: MessageQueue) -> None:
        if self.offset_table.pop(mq, None) is not None:
            log.info("offset of %s removed from memory", mq)

    async def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the table, of one topic's queues when `topic` is given (not blank)."""
        return {
            mq: offset for mq, offset in self.offset_table.items() if not topic or mq.topic == topic
        }

    def _memory(self, mq: MessageQueue) -> int | None:
        return self.offset_table.get(mq)


class OffsetAPI(Protocol):
    """The two calls of `client.api.BrokerAPI` the remote store uses."""

    async def query_consumer_offset(
        self, address: str, group: str, topic: str, queue_id: int
    ) -> int: ...

    async def update_consumer_offset(
        self, address: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None: ...


class RemoteBrokerOffsetStore(_MemoryTable):
    """A CLUSTERING group's offsets, kept on the queue's broker (see the module docstring)."""

    def __init__(
        self,
        group: str,
        api: OffsetAPI,
        find_address: Callable[[str], Awaitable[str | None]],
    ) -> None:
        super().__init__()
        self.group = group
        self.api = api
        self.find_address = find_address

    async def load(self) -> None:
        """Nothing to load: offsets are read from the broker queue by queue."""

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            offset = self._memory(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return OFFSET_NOT_FOUND
        return await self._read_from_broker(mq)

    async def _read_from_broker(self, mq: MessageQueue) -> int:
        address = await self.find_address(mq.broker_name)
        if address is None:
            log.warning("offset of %s for %s: broker not found", mq, self.group)
            return OFFSET_READ_ERROR
        try:
            offset = await self.api.query_consumer_offset(
                address, self.group, mq.topic, mq.queue_id
            )
        except QueryNotFoundError:
            return OFFSET_NOT_FOUND
        except (TideMQError, OSError, TimeoutError) as exc:
            log.warning("offset of %s for %s from %s: %s", mq, self.group, address, exc)
            return OFFSET_READ_ERROR
        if offset < 0:  # the API's answer to QUERY_NOT_FOUND
            return OFFSET_NOT_FOUND
        await self.update_offset(mq, offset, increase_only=False)
        return offset

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Commit the offsets of `mqs`; forget the queues not in `mqs` (no longer ours).

        An empty `mqs` does nothing (RocketMQ's rule: it would otherwise drop everything).
        The commits run concurrently so that one unreachable broker does not delay the others.
        """
        keep = set(mqs)
        if not keep:
            return
        snapshot = dict(self.offset_table)
        await asyncio.gather(
            *(self._commit(mq, offset) for mq, offset in snapshot.items() if mq in keep)
        )
        for mq in snapshot.keys() - keep:
            self.offset_table.pop(mq, None)
            log.info("group %s: offset of %s dropped, queue no longer ours", self.group, mq)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self._memory(mq)
        if offset is not None:
            await self._commit(mq, offset)

    async def _commit(self, mq: MessageQueue, offset: int) -> bool:
        """UPDATE_CONSUMER_OFFSET; failures are logged (the next persist tries again)."""
        address = await self.find_address(mq.broker_name)
        if address is None:
            log.warning("commit offset %d of %s for %s: broker not found", offset, mq, self.group)
            return False
        try:
            await self.api.update_consumer_offset(
                address, self.group, mq.topic, mq.queue_id, offset
            )
        except (TideMQError, OSError, TimeoutError) as exc:
            log.warning("commit offset %d of %s to %s: %s", offset, mq, address, exc)
            return False
        log.debug("group %s: offset %d of %s committed to %s", self.group, offset, mq, address)
        return True


# --- the local file ---------------------------------------------------------------------------

OFFSETS_FILE = "offsets.json"


def offset_key(mq: MessageQueue) -> str:
    """'topic@brokerName@queueId'. Topics cannot hold '@'; broker names can ('room@name')."""
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


def parse_offset_key(key: str) -> MessageQueue:
    topic, _, rest = key.partition("@")
    broker, _, queue_id = rest.rpartition("@")
    if not topic or not broker or not queue_id.isdigit():
        raise ValueError(f"bad queue key {key!r}")
    return MessageQueue(topic, broker, int(queue_id))


def encode_offset_table(table: dict[MessageQueue, int]) -> str:
    """The file's text: {"offsetTable": {"topic@brokerName@queueId": offset, ...}}.

    RocketMQ writes the same object with fastjson, keyed by each MessageQueue's JSON (which is
    not valid JSON); string keys keep the file readable by any JSON tool.
    """
    body = {"offsetTable": {offset_key(mq): offset for mq, offset in sorted(table.items())}}
    return json.dumps(body, indent=2) + "\n"


def decode_offset_table(text: str) -> dict[MessageQueue, int]:
    """The table from the file's text; ValueError when it is not such a document."""
    doc: Any = json.loads(text)
    entries = doc.get("offsetTable") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise ValueError("no offsetTable object")  # noqa: TRY004 - bad data, not a caller bug
    table = {}
    for key, offset in entries.items():
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise ValueError(f"offset of {key!r} is not an integer: {offset!r}")  # noqa: TRY004
        table[parse_offset_key(key)] = offset
    return table


def _read_offsets_file(path: Path) -> dict[MessageQueue, int] | None:
    """The file's table, None when it does not exist; OSError/ValueError when unreadable."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    if not text.strip():
        raise ValueError("empty file")
    return decode_offset_table(text)


def load_offsets_file(path: Path) -> dict[MessageQueue, int]:
    """The table in `path`, else in `path`.bak; {} when neither exists.

    Raises ClientError when a file exists but neither can be read: starting empty would
    silently move every queue to its ConsumeFromWhere position.
    """
    backup = sibling(path, ".bak")
    problem = None
    try:
        table = _read_offsets_file(path)
        if table is not None:
            return table
    except (OSError, ValueError) as exc:
        problem = f"{path}: {exc}"
        log.warning("offsets file %s unreadable (%s), trying %s", path, exc, backup)
    try:
        table = _read_offsets_file(backup)
    except (OSError, ValueError) as exc:
        problem = f"{problem}; {backup}: {exc}" if problem else f"{backup}: {exc}"
        table = None
    if table is not None:
        log.warning("offsets of %s taken from %s", path, backup)
        return table
    if problem is not None:
        raise ClientError(
            f"consumer offsets unreadable ({problem}); remove the files to start every queue "
            "from its ConsumeFromWhere position"
        )
    return {}


def write_offsets_file(path: Path, text: str) -> None:
    """Replace `path` atomically, its previous content kept in `path`.bak.

    At every moment path holds the old or the new table whole, and path.bak a whole earlier one
    (`common.files.write_file_safely`).
    """
    write_file_safely(path, text.encode("utf-8"))


class LocalFileOffsetStore(_MemoryTable):
    """A BROADCASTING consumer's own offsets in `<directory>/<client_id>/<group>/offsets.json`.

    The file holds the queues of the last `persist_all` (plus any `persist`ed since), written
    by `write_offsets_file`; `load` reads it back, from the .bak when the file is damaged.
    File I/O runs in a worker thread, one write at a time.
    """

    def __init__(self, group: str, client_id: str, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.group = group
        self.path = Path(directory) / client_id / group / OFFSETS_FILE
        self._file_table: dict[MessageQueue, int] = {}
        self._io_lock = asyncio.Lock()

    async def load(self) -> None:
        """Read the file into memory (ClientError when it and its .bak are unreadable)."""
        async with self._io_lock:
            table = await asyncio.to_thread(load_offsets_file, self.path)
        self._file_table = dict(table)
        self.offset_table.update(table)
        log.info("group %s: %d offsets loaded from %s", self.group, len(table), self.path)

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            offset = self._memory(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return OFFSET_NOT_FOUND
        return await self._read_from_file(mq)

    async def _read_from_file(self, mq: MessageQueue) -> int:
        try:
            async with self._io_lock:
                table = await asyncio.to_thread(load_offsets_file, self.path)
        except ClientError as exc:
            # RocketMQ answers -1 here too: the queue then starts per ConsumeFromWhere.
            log.error("offset of %s: %s", mq, exc)
            return OFFSET_NOT_FOUND
        offset = table.get(mq)
        if offset is None:
            return OFFSET_NOT_FOUND
        await self.update_offset(mq, offset, increase_only=False)
        return offset

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Write the offsets of `mqs` (only those: the file then holds exactly them)."""
        keep = set(mqs)
        if not keep:
            return
        self._file_table = {mq: off for mq, off in self.offset_table.items() if mq in keep}
        await self._write()

    async def persist(self, mq: MessageQueue) -> None:
        """Write this queue's offset, the file's other entries unchanged."""
        offset = self._memory(mq)
        if offset is None:
            return
        self._file_table[mq] = offset
        await self._write()

    async def _write(self) -> None:
        text = encode_offset_table(self._file_table)
        async with self._io_lock:
            try:
                await asyncio.to_thread(write_offsets_file, self.path, text)
            except OSError as exc:
                log.error("group %s: offsets not written to %s: %s", self.group, self.path, exc)
