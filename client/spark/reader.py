"""Executor side: read one queue's offset range `[start, end)` into Arrow record batches.

A `QueueRange` (the Spark input partition) carries everything a task needs: the queue, the
range, and the broker group's addresses as the driver last saw them. The task opens its own
connections (`BrokerClient`) on a private event loop, reads and closes them: executors share
nothing and keep nothing between tasks.

The range is cut into windows of `pullBatchSize` offsets; up to `pullsInFlight` windows are
pulled concurrently over one connection (a broker answers at most
maxTransferCountOnMessageInMemory messages per pull, 32 by default, so several pulls in flight
keep the pipe full), and each window becomes one RecordBatch, yielded in offset order. The
generator drives the loop only while Spark asks for the next batch.

Per pull:
- FOUND: records in the window are kept; without a tag filter the queue offsets must be
  contiguous, and a hole (records removed under the reader) is data loss;
- PULL_NOT_FOUND below `end`: the member asked is behind (a lagging slave): ask another member,
  back off, give up after `pollTimeoutMs` without progress;
- PULL_OFFSET_MOVED, or a slave's PULL_RETRY_IMMEDIATELY at a position below its min offset:
  the offsets below the queue's min offset are gone (retention): data loss;
- member choice: `readFromSlave=false` starts at the master and follows the broker's
  `suggestWhichBrokerId` (RocketMQ's consumer rule); `readFromSlave=true` prefers a slave;
  either way an unreachable or lagging member is left for another one of the group.

Data loss fails the task with `DataLossError` when `failOnDataLoss` (Spark then fails the query),
else the lost offsets are skipped with a warning. Reading the same range twice yields the same
records, as long as retention has not removed them in between.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from tidemq.client.protocol.headers import PULL_FLAG_SUBSCRIPTION, PullMessageRequestHeader, encode
from tidemq.client.protocol.models import MASTER_ID
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import Body
from tidemq.client.spark.brokers import BrokerClient, DataLossError, SourceError, new_event_loop
from tidemq.client.spark.options import EARLIEST, SourceOptions
from tidemq.client.spark.records import ColumnBuffer, record_offsets
from tidemq.store.record import RecordFormatError
from tidemq.store.tags import parse_tag_expression

log = logging.getLogger(__name__)

PULL_TIMEOUT = 10.0
BACKOFF_MIN = 0.05
BACKOFF_MAX = 1.0
_PULL_CODES = (
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
)


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One Spark input partition: offsets `[start, end)` of one queue (start -2: earliest).

    `brokers` is the group's (brokerId, address) list from the driver's route, so a task needs
    no name server round trip unless a member fails. Picklable: plain values only.
    """

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    brokers: tuple[tuple[int, str], ...]

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.topic, self.broker_name, self.queue_id)


@dataclass(slots=True)
class _Pull:
    code: int
    next_begin: int
    min_offset: int
    max_offset: int
    suggest: int
    body: Body  # a large one is a view of the connection's receive buffer: no copy made


class RangeReader:
    """Pulls one `QueueRange`; `batches()` is the synchronous generator a task returns."""

    def __init__(self, options: SourceOptions, part: QueueRange, schema: StructType) -> None:
        self.options = options
        self.part = part
        self.schema = schema
        self.tag_filter = parse_tag_expression(options.tags)
        self.client = BrokerClient(options)
        self.client.addrs = {part.broker_name: dict(part.brokers)}
        has_slave = any(broker_id != MASTER_ID for broker_id, _ in part.brokers)
        self.broker_id = 1 if options.read_from_slave and has_slave else MASTER_ID
        self.lost = 0
        self._last_progress = time.monotonic()

    # --- the generator Spark iterates ------------------------------------------------------

    def batches(self) -> Iterator[Any]:
        loop = new_event_loop()
        try:
            start = self.part.start
            if start == EARLIEST:
                start = loop.run_until_complete(self._min_offset())
            end = self.part.end
            if start >= end:
                return
            size = self.options.pull_batch_size
            windows = deque((lo, min(lo + size, end)) for lo in range(start, end, size))
            running: deque[asyncio.Task[Any]] = deque()
            try:
                while windows or running:
                    while windows and len(running) < self.options.pulls_in_flight:
                        lo, hi = windows.popleft()
                        running.append(loop.create_task(self._window(lo, hi)))
                    batch = loop.run_until_complete(running.popleft())
                    if batch.num_rows:
                        yield batch
            finally:
                for task in running:
                    task.cancel()
                if running:
                    loop.run_until_complete(asyncio.gather(*running, return_exceptions=True))
        finally:
            loop.run_until_complete(self.client.close())
            loop.close()
            if self.lost:
                log.warning(
                    "%s: skipped %d lost offsets (failOnDataLoss=false)", self.part, self.lost
                )

    # --- one window ---------------------------------------------------------------------------

    async def _window(self, lo: int, hi: int) -> Any:
        part = self.part
        buffer = ColumnBuffer(
            part.topic, part.broker_name, part.queue_id, self.schema, self.tag_filter
        )
        filtering = not self.tag_filter.matches_all
        pos = lo
        backoff = BACKOFF_MIN
        while pos < hi:
            pull = await self._pull(pos, hi - pos)
            if pull.code == ResponseCode.SUCCESS:
                try:
                    first, last, count = buffer.add(pull.body, pos, hi)
                except RecordFormatError as exc:
                    raise SourceError(f"{part}: bad record from the broker: {exc}") from exc
                if not filtering and count:
                    self._check_contiguous(pull.body, pos, hi, first, last, count)
                if not filtering and count and pull.next_begin > last + 1 and last + 1 < hi:
                    # Units scanned past the last record without returning any: removed.
                    self._data_lost(last + 1, min(pull.next_begin, hi), "records removed")
                if pull.next_begin <= pos:
                    raise SourceError(
                        f"{part}: the broker found records at {pos} but moved no further"
                    )
                pos = min(pull.next_begin, hi)
                self._progress()
                backoff = BACKOFF_MIN
                continue
            if pull.min_offset > pos:
                # Below the queue's min offset: a master says PULL_OFFSET_MOVED, a slave
                # PULL_RETRY_IMMEDIATELY without moving the offset. Either way they are gone.
                upto = min(pull.min_offset, hi)
                self._data_lost(pos, upto, f"the queue's min offset is now {pull.min_offset}")
                pos = upto
                self._progress()
                continue
            if pull.code == ResponseCode.PULL_RETRY_IMMEDIATELY and pull.next_begin > pos:
                # Scanned units without a matching record: filtered by tags (normal), or
                # records removed while their ConsumeQueue units remain (data loss).
                upto = min(pull.next_begin, hi)
                if not filtering:
                    self._data_lost(pos, upto, "records removed from the CommitLog")
                pos = upto
                self._progress()
                continue
            # Nothing at `pos` on this member (a slave behind its master, or a member that
            # lost data): try another member, and wait a little when every one says so.
            self._switch_member(pull.code)
            await self._wait(backoff, f"offset {pos} (code {pull.code}, max {pull.max_offset})")
            backoff = min(backoff * 2, BACKOFF_MAX)
        try:
            return buffer.take()  # the window's records decoded, all at once
        except RecordFormatError as exc:
            raise SourceError(f"{part}: bad record from the broker: {exc}") from exc

    def _check_contiguous(
        self, body: Body, pos: int, hi: int, first: int, last: int, count: int
    ) -> None:
        """Without a tag filter a pull from `pos` returns pos, pos+1, ...: a hole is data loss."""
        if first == pos and last - first + 1 == count:
            return
        expected = pos
        for offset in record_offsets(body):
            if offset >= hi:
                break
            if offset > expected:
                self._data_lost(expected, offset, "records removed from the queue")
            expected = max(expected, offset + 1)

    def _data_lost(self, lo: int, hi: int, why: str) -> None:
        if hi <= lo:
            return
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{self.part}: offsets [{lo}, {hi}) are lost ({why}). Set failOnDataLoss=false "
                "to skip lost offsets instead of failing the query"
            )
        self.lost += hi - lo
        log.warning("%s: offsets [%d, %d) lost (%s); skipped", self.part, lo, hi, why)

    def _progress(self) -> None:
        self._last_progress = time.monotonic()

    async def _wait(self, delay: float, what: str) -> None:
        waited = time.monotonic() - self._last_progress
        if waited * 1000 > self.options.poll_timeout_ms:
            raise SourceError(
                f"{self.part}: no data at {what} for {waited:.0f} s (pollTimeoutMs); members "
                f"{self.client.addrs.get(self.part.broker_name)}"
            )
        await asyncio.sleep(delay)

    def _switch_member(self, code: int) -> None:
        members = [m for m, _addr in self.client.members(self.part.broker_name)]
        if len(members) > 1 and self.broker_id in members:
            index = members.index(self.broker_id)
            self.broker_id = members[(index + 1) % len(members)]
            log.info("%s: member answered %d, trying broker id %d", self.part, code, self.broker_id)

    # --- requests -----------------------------------------------------------------------------

    async def _min_offset(self) -> int:
        part = self.part
        values = await self.client.offsets([part.key], "min")
        return values[part.key]

    async def _pull(self, offset: int, count: int) -> _Pull:
        part = self.part
        header = PullMessageRequestHeader(
            consumer_group=self.options.consumer_group,
            topic=part.topic,
            queue_id=part.queue_id,
            queue_offset=offset,
            max_msg_nums=count,
            # No suspend: the range is known to exist, so an empty answer means "not here".
            # No commit-offset flag: the Spark checkpoint owns the offsets, not the group.
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription=self.options.tags,
            expression_type="TAG",
        )
        api = self.client.api
        request_fields = encode(header)

        async def call(address: str) -> _Pull:
            request = api.request(RequestCode.PULL_MESSAGE, request_fields)
            response = await api.call(address, request, ok=_PULL_CODES, timeout=PULL_TIMEOUT)
            ext = response.ext_fields
            return _Pull(
                response.code,
                int(ext.get("nextBeginOffset", offset)),
                int(ext.get("minOffset", 0)),
                int(ext.get("maxOffset", 0)),
                int(ext.get("suggestWhichBrokerId", MASTER_ID)),
                response.body,
            )

        deadline_ms = self.options.poll_timeout_ms
        started = time.monotonic()
        while True:
            try:
                pull = await self.client.on_member(
                    part.broker_name, call, prefer=self.broker_id, what=f"pull of {part}"
                )
                break
            except SourceError:
                if (time.monotonic() - started) * 1000 > deadline_ms:
                    raise
                await asyncio.sleep(BACKOFF_MAX)
        if not self.options.read_from_slave:
            self.broker_id = pull.suggest
        return pull


def read_range(options: SourceOptions, part: Any, schema: StructType) -> Iterator[Any]:
    """The `read()` of both readers: RecordBatches of `part` (nothing for a placeholder)."""
    if not isinstance(part, QueueRange):
        # Spark plans one InputPartition(None) when a batch reader returns no partitions.
        return iter(())
    _freeze_imports()
    return RangeReader(options, part, schema).batches()


_frozen = False


def _freeze_imports() -> None:
    """Once per reused PySpark worker: the objects alive now (modules, classes, functions: what
    imports made) leave the garbage collector's sight.

    A reused worker (`SPARK_REUSE_WORKER`, Spark's default) runs `gc.collect()` after every
    task, and a full collection walks every object: with this package and its dependencies
    imported, about 55,000, 20-50 ms per task of 50,000 rows on the development machine, as much
    as decoding them. What a task leaves behind was made after this call and is still
    collected. This is what `gc.freeze` is for (CPython's documentation: processes that live on
    long-lived objects). Elsewhere (a driver reading a range itself) nothing is frozen."""
    global _frozen
    if not _frozen and os.environ.get("SPARK_REUSE_WORKER"):
        _frozen = True
        gc.freeze()
