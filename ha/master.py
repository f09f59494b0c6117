"""The master side of replication: HAService (accept) and HAConnection (read + write services).

Each slave connection runs two services (RocketMQ's ReadSocketService and WriteSocketService):

- read: 8-byte reports from the slave. The first is where the slave stands (its request
  offset) and decides where the transfer starts and the connection's state; each later one is
  an ack, validated (never above the master's max offset, never backwards, never above what
  this connection was sent) before it may release SYNC_MASTER sends, which only the acks of a
  connection in TRANSFER do. No report for haHousekeepingInterval closes the connection; slaves
  ack at least every heartbeat interval, so an idle but healthy link is never dropped.
- write: starts where the slave asked (a slave that reports 0 starts at the beginning of the
  master's last CommitLog file, as RocketMQ does) and ships `[8 offset][4 size]` + up to
  haTransferBatchSize raw CommitLog bytes per frame, never crossing a file. Each turn takes one
  contiguous span of the file (up to TRANSFER_SPAN readable bytes), cuts it into those frames
  and hands them to the transport in one call, headers and views of the mapped file (no copy);
  the bytes on the wire are the ones a frame-at-a-time writer sends. It is woken as soon
  as new data is readable (not every 100 ms), sends a heartbeat (size 0) after
  haSendHeartbeatInterval without data, and waits for the socket to drain (backpressure).

A slave whose request is outside what the master holds is told so with a heartbeat at the edge
of the master's data, and the connection's state says why: DIVERGED (the slave holds more than
the master) or BEHIND_RETENTION (the slave needs data the master has deleted, found at its
first report or when retention deletes a file the transfer has not reached yet).

Known limit: the protocol carries offsets only, so a slave that diverged (it holds bytes the
master never had) but reconnects after the master has grown past its end looks like a slave that
is merely behind, and is sent the master's bytes from its own end on. Catching that needs the
content of the slave's tail (a record checksum, for instance), which RocketMQ's HA protocol does
not carry; it is not done yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator

from tidemq.common.lifecycle import Service, Step, cancel_and_wait
from tidemq.ha.codec import (
    AckDecoder,
    AckValidator,
    HAProtocolError,
    HelloDecoder,
    encode_confirm,
    encode_epochs,
    encode_heartbeat,
    encode_transfer_header,
)
from tidemq.ha.config import HAConfig
from tidemq.ha.group_transfer import AllInSyncTransfer, GroupTransferService, InSyncCap
from tidemq.ha.transport import ChunkReceiver, Listen, Listening, listen_tcp
from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore
from tidemq.store.replication import ReplicatedCap, Replication

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
# CommitLog bytes the write service takes per turn, framed at haTransferBatchSize (the TCP
# transport lets a connection hold more than this unsent: ha/transport.py).
TRANSFER_SPAN = 4 * 1024 * 1024
LAG_LOG_INTERVAL = 30.0
RATE_BUCKET = 0.1


class SlaveState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"  # connected, no report yet
    TRANSFER = "TRANSFER"
    DIVERGED = "DIVERGED"
    BEHIND_RETENTION = "BEHIND_RETENTION"


class TransferRate:
    """Bytes per second over the last few seconds.

    Sizes added within RATE_BUCKET seconds of each other share a sample, so that a slave adding
    every received chunk keeps a few dozen samples, not thousands, for `per_second` to sum.
    """

    def __init__(self, window: float = 3.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()
        self.total = 0

    def add(self, size: int) -> None:
        now = time.monotonic()
        self.total += size
        samples = self._samples
        if samples and now - samples[-1][0] < RATE_BUCKET:
            at, bucket = samples[-1]
            samples[-1] = (at, bucket + size)
            return
        samples.append((now, size))
        while samples and now - samples[0][0] > self.window:
            samples.popleft()

    def per_second(self) -> float:
        now = time.monotonic()
        recent = sum(size for at, size in self._samples if now - at <= self.window)
        return recent / self.window


class _ReportSink:
    """Where the master's reads of a slave's reports land (ha/transport.py's ReadSink): one
    small buffer, reused; each read is handed on as bytes (reports are 8 bytes each)."""

    __slots__ = ("_on_read", "_room")

    def __init__(self, on_read: Callable[[bytes], None]) -> None:
        self._room = memoryview(bytearray(READ_CHUNK))
        self._on_read = on_read

    def get_buffer(self) -> memoryview:
        return self._room

    def buffer_updated(self, nbytes: int) -> None:
        self._on_read(bytes(self._room[:nbytes]))


class HAConnection:
    def __init__(
        self,
        service: HAService,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.validator = AckValidator()
        self.decoder = AckDecoder()
        self.state = SlaveState.HANDSHAKE
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.next_transfer_from = -1
        # End of the CommitLog bytes handed to this connection (the request offset until the
        # first batch): a slave cannot hold more, so it cannot acknowledge more.
        self.sent_offset = -1
        self.last_read = time.monotonic()
        # Set once the connection winds down: from then on it vouches for nothing, even before
        # the service has dropped it (a send answered meanwhile must not count on it).
        self.ending = False
        self.last_write = time.monotonic()
        self.rate = TransferRate()
        self._data = asyncio.Event()
        # The write service's wake-up for its next heartbeat (armed while it waits for data).
        self._heartbeat_due: asyncio.TimerHandle | None = None
        self._reported = asyncio.Event()
        self._last_lag_log = 0.0
        # Controller mode: the slave's brokerId (from its etcd member record), and when its ack
        # last reached what the master held at its previous catch-up (the SyncStateSet's rule:
        # a slave that has not caught up for haMaxTimeSlaveNotCatchup leaves the set).
        self.broker_id: int | None = None
        self.caught_up_at = 0.0
        self._catch_up_mark = 0
        # Controller mode: the slave's HELLO comes first (ha/codec.py's epoch handshake), and
        # CONFIRM frames tell it the master's confirmed offset (the last one sent here).
        self._hello = HelloDecoder() if service.epochs is not None else None
        self.confirm_sent = -1

    @property
    def known_offset(self) -> int:
        """Where the slave is known to be: its last ack, else its request offset."""
        return self.slave_ack_offset if self.slave_ack_offset >= 0 else self.slave_request_offset

    @property
    def reported(self) -> bool:
        return self._reported.is_set()

    def wake(self) -> None:
        self._data.set()

    async def run(self) -> None:
        read = asyncio.create_task(self._read_service(), name=f"ha-read {self.address}")
        write = asyncio.create_task(self._write_service(), name=f"ha-write {self.address}")
        try:
            done, _pending = await asyncio.wait({read, write}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.warning("HA connection %s failed: %s", self.address, task.exception())
        finally:
            self.ending = True
            if self._heartbeat_due is not None:
                self._heartbeat_due.cancel()
                self._heartbeat_due = None
            try:
                with contextlib.suppress(Exception):  # a failure was logged above
                    await cancel_and_wait(read, write)
            finally:
                # Also when the service's stop cancels this connection while it winds down.
                self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    # --- read service: reports and acks -------------------------------------------------------

    async def _read_service(self) -> None:
        """The first read through the stream (it may hold bytes that came with the connect),
        the later ones acted on by the transport's own receive callback (`_on_read`: an ack
        releases SYNC_MASTER sends there, with no task woken and no loop turn); this task only
        watches for silence (haHousekeepingInterval), the slave's close and a bad report."""
        housekeeping = self.service.config.ha_housekeeping_interval / 1000
        receiver: ChunkReceiver | None = None
        while True:
            remaining = housekeeping - (time.monotonic() - self.last_read)
            try:
                # A timer rather than wait_for: no task per wait.
                async with asyncio.timeout(max(remaining, 0.01)):
                    if receiver is not None:
                        more = await receiver.received()
                    else:
                        data = await self.reader.read(READ_CHUNK)
                        more = bool(data)
                        if more:
                            self._on_read(data)
                        if len(data) < READ_CHUNK:
                            # The stream's buffer is empty: from here on the callback reads.
                            receiver = ChunkReceiver(
                                self.reader,
                                self.writer,
                                _ReportSink(self._on_read),
                                wake_on_data=False,
                            )
            except TimeoutError:
                if time.monotonic() - self.last_read < housekeeping:
                    continue  # the callback read meanwhile
                log.warning(
                    "HA: slave %s sent nothing for %.0f ms (haHousekeepingInterval): closing",
                    self.address,
                    housekeeping * 1000,
                )
                return
            except HAProtocolError as exc:
                log.error("HA: closing connection of slave %s: %s", self.address, exc)
                return
            if not more:
                log.info("HA: slave %s closed the connection", self.address)
                return

    def _on_read(self, data: bytes) -> None:
        """What the slave sent (raises HAProtocolError on a bad report)."""
        self.last_read = time.monotonic()
        if self._hello is not None and not self._hello.done:
            rest = self._hello.feed(data)
            if rest is None:
                return
            self._answer_hello()
            data = rest
        for event in self.decoder.feed(data):
            self._on_report(event.offset)

    def _answer_hello(self) -> None:
        """Controller mode: the slave said who it is and which epochs it holds; it learns the
        master's epochs before its first report (so before any transfer frame)."""
        assert self._hello is not None and self.service.epochs is not None
        self.broker_id = self._hello.broker_id
        self.writer.write(encode_epochs(self.service.epochs()))
        log.info(
            "HA: slave %s is broker %d, its epochs end with %s",
            self.address,
            self.broker_id,
            self._hello.entries[-1] if self._hello.entries else "none",
        )

    def _on_report(self, offset: int) -> None:
        store = self.service.store
        acked = self.validator.report(offset, store.max_phy_offset)
        if acked is None:
            self.slave_request_offset = offset
            self.sent_offset = offset
            log.info("HA: slave %s connected, its CommitLog ends at %d", self.address, offset)
            # Decided with the first report, so that no later report is judged before it.
            self.next_transfer_from = self._start_offset()
            self._catch_up_mark = store.max_phy_offset
            self._reported.set()
            for listener in self.service.slave_listeners:
                listener(self.address)
            return
        if acked > self.sent_offset:
            # Within the master's max, but bytes it was never sent (a DIVERGED connection is
            # sent none): it cannot hold them, so the ack is forged.
            raise HAProtocolError(
                f"slave ack {acked} is above what the master sent it ({self.sent_offset})"
            )
        self.slave_ack_offset = acked
        if self.state is not SlaveState.TRANSFER:
            return  # a DIVERGED or BEHIND_RETENTION slave's report vouches for nothing
        if acked >= self._catch_up_mark:
            self.caught_up_at = time.monotonic()
            self._catch_up_mark = store.max_phy_offset
        self.service.transfer.on_ack(acked)
        self._log_lag(store.max_phy_offset - acked)

    def _log_lag(self, lag: int) -> None:
        threshold = self.service.config.ha_lag_warn_bytes
        now = time.monotonic()
        if threshold and lag > threshold and now - self._last_lag_log > LAG_LOG_INTERVAL:
            self._last_lag_log = now
            log.warning("HA: slave %s lags %d bytes behind the master", self.address, lag)

    # --- write service: transfers and heartbeats -------------------------------------------

    def _start_offset(self) -> int:
        store = self.service.store
        request = self.slave_request_offset
        master_max, master_min = store.max_phy_offset, store.min_phy_offset
        if request == 0:
            file_size = store.config.mapped_file_size_commit_log
            self.state = SlaveState.TRANSFER
            return max(master_min, master_max - master_max % file_size)
        if request > master_max:
            self.state = SlaveState.DIVERGED
            log.error(
                "HA: slave %s is DIVERGED: its CommitLog ends at %d, beyond the master's end %d",
                self.address,
                request,
                master_max,
            )
            return master_max
        if request < master_min:
            self.state = SlaveState.BEHIND_RETENTION
            log.error(
                "HA: slave %s is BEHIND_RETENTION: it needs offset %d, but the master's oldest "
                "retained offset is %d",
                self.address,
                request,
                master_min,
            )
            return master_min
        self.state = SlaveState.TRANSFER
        return request

    def _behind_retention(self) -> bool:
        """A transferring slave whose next offset retention deleted meanwhile (#3388)."""
        master_min = self.service.store.min_phy_offset
        if self.next_transfer_from >= master_min:
            return False
        self.state = SlaveState.BEHIND_RETENTION
        log.error(
            "HA: slave %s is BEHIND_RETENTION: it needs offset %d, but retention deleted it; "
            "the master's oldest retained offset is %d",
            self.address,
            self.next_transfer_from,
            master_min,
        )
        self.next_transfer_from = master_min
        return True

    async def _write_service(self) -> None:
        await self._reported.wait()
        if self.state is SlaveState.TRANSFER:
            log.info("HA: transfer to slave %s starts at %d", self.address, self.next_transfer_from)
        else:
            # Tell the slave where the master stands, at once: it reports the mismatch.
            await self._send_heartbeat()
        heartbeat = self.service.config.ha_send_heartbeat_interval / 1000
        while True:
            self._data.clear()
            if self.state is SlaveState.TRANSFER and self._ship():
                await self.writer.drain()
                continue
            if self.state is SlaveState.TRANSFER and self._behind_retention():
                await self._send_heartbeat()  # at the master's oldest offset: the slave sees it
                continue
            confirm = self._confirm_frame()
            if confirm is not None:
                self.writer.write(confirm)
                self.last_write = time.monotonic()
                await self.writer.drain()
                continue
            idle = time.monotonic() - self.last_write
            if idle >= heartbeat:
                await self._send_heartbeat()
                continue
            # One timer per heartbeat interval, not one per wait: the writer waits here once
            # per batch of sends (a timeout context made and cancelled a timer each time).
            # A timer armed before later writes wakes the writer early; it arms the next.
            if self._heartbeat_due is None:
                self._heartbeat_due = asyncio.get_running_loop().call_later(
                    heartbeat - idle, self._heartbeat_timer
                )
            await self._data.wait()

    def _heartbeat_timer(self) -> None:
        self._heartbeat_due = None
        self._data.set()

    def _ship(self) -> bool:
        """Hand the transport what is readable from `next_transfer_from` on: one contiguous
        span of the file (up to TRANSFER_SPAN bytes) cut into the frames the protocol carries
        (haTransferBatchSize each, the last one shorter), headers and views of the mapped file
        in one call. Whether there was anything to send."""
        store = self.service.store
        got = store.get_commitlog_data(self.next_transfer_from)
        if got is None:
            return False
        start, view = got
        if start != self.next_transfer_from:
            # A slave that reported 0 whose start file is gone: follow the master's data.
            self.next_transfer_from = start
        span = min(len(view), TRANSFER_SPAN)
        boundary = self.service.next_epoch_start(start)
        if boundary is not None and boundary < start + span:
            span = boundary - start  # controller mode: no frame crosses an epoch's start
        batch = self.service.config.ha_transfer_batch_size
        frames: list[bytes | memoryview] = []
        for at in range(0, span, batch):
            size = min(span - at, batch)
            frames.append(encode_transfer_header(start + at, size))
            frames.append(view[at : at + size])
        confirm = self._confirm_frame()
        if confirm is not None:
            frames.append(confirm)
        self.writer.writelines(frames)
        self.next_transfer_from = self.sent_offset = start + span
        self.last_write = time.monotonic()
        self.rate.add(span)
        return True

    def _confirm_frame(self) -> bytes | None:
        """Controller mode, to a transferring slave: a CONFIRM frame when the master's confirmed
        offset moved since the last one (None otherwise)."""
        if self._hello is None or self.state is not SlaveState.TRANSFER:
            return None
        confirmed = self.service.confirmed_offset()
        if confirmed <= self.confirm_sent:
            return None
        self.confirm_sent = confirmed
        return encode_confirm(confirmed)

    async def _send_heartbeat(self) -> None:
        self.writer.write(encode_heartbeat(self.next_transfer_from))
        self.last_write = time.monotonic()
        await self.writer.drain()

    def runtime_info(self, master_max: int) -> dict[str, object]:
        known = self.known_offset
        return {
            "addr": self.address,
            "state": self.state.value,
            "slaveRequestOffset": self.slave_request_offset,
            "slaveAckOffset": self.slave_ack_offset,
            "diff": master_max - known if known >= 0 else master_max,
            "inSync": self.state is SlaveState.TRANSFER
            and master_max - max(known, 0) < self.service.config.ha_slave_fallbehind_max,
            "transferredByteInSecond": int(self.rate.per_second()),
            "transferFromWhere": self.next_transfer_from,
        }


class HAService(Service):
    """The master's HA port: one HAConnection per slave, and SYNC_MASTER acknowledgement."""

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        host: str,
        port: int,
        *,
        listen: Listen = listen_tcp,
        all_ack_in_sync: bool = False,
        epochs: Callable[[], list[tuple[int, int]]] | None = None,
    ) -> None:
        """`all_ack_in_sync`: controller mode's allAckInSyncStateSet, a SYNC_MASTER send waits
        for every slave of the SyncStateSet (`require_acks_from`) instead of any one slave.
        `epochs`: controller mode's epoch file as (epoch, start offset) pairs; given, every
        connection starts with the epoch handshake (ha/codec.py), absent, the stream is
        RocketMQ 4.x's byte for byte."""
        super().__init__()
        self.add_child(Step(stop=self._close))
        self.store = store
        self.config = config
        self.host = host
        self.port = port
        self.connections: set[HAConnection] = set()
        self.epochs = epochs
        transfer = AllInSyncTransfer if all_ack_in_sync else GroupTransferService
        self.transfer = transfer(
            self._usable_slaves,
            slave_timeout_ms=config.slave_timeout,
            fallbehind_max=config.ha_slave_fallbehind_max,
        )
        self._listen = listen
        self._server: Listening | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Called with a slave's address once it has reported where it stands.
        self.slave_listeners: list[Callable[[str], None]] = []
        if epochs is not None:  # a confirmed offset that moves is sent to the slaves
            self.transfer.ack_listeners.append(lambda _acked: self._wake_all())

    # --- controller mode ---------------------------------------------------------------------

    def next_epoch_start(self, offset: int) -> int | None:
        """Controller mode: where the first epoch after `offset` starts (None: none, or 4.x)."""
        if self.epochs is None:
            return None
        return next((start for _epoch, start in self.epochs() if start > offset), None)

    def identify(self, addresses: dict[str, int]) -> None:
        """Which connection is which slave, for those that said no HELLO: {the slave's local
        address of its HA connection: its brokerId}, as the slaves publish them in etcd."""
        for connection in self.connections:
            if connection.broker_id is None:
                connection.broker_id = addresses.get(connection.address)
        self.transfer.on_ack(self.transfer.acked_offset)

    def in_sync_ids(self, max_lag_ms: int) -> set[int]:
        """The slaves that caught up within `max_lag_ms` (haMaxTimeSlaveNotCatchup)."""
        now = time.monotonic()
        return {
            c.broker_id
            for c in self._usable_slaves()
            if c.broker_id is not None and now - c.caught_up_at <= max_lag_ms / 1000
        }

    def require_acks_from(self, broker_ids: frozenset[int]) -> None:
        """allAckInSyncStateSet: the slaves every SYNC send must reach (the set, or while it
        changes the union of the old and the new set)."""
        if isinstance(self.transfer, AllInSyncTransfer):
            self.transfer.require(broker_ids)

    def _usable_slaves(self) -> Iterator[HAConnection]:
        """Lazily: a SYNC_MASTER send asks only whether there is one (GroupTransferService)."""
        return (
            c
            for c in self.connections
            if c.reported and c.state is SlaveState.TRANSFER and not c.ending
        )

    async def on_start(self) -> None:
        self._server, self.port = await self._listen(self._accept, self.host, self.port)
        log.info("HA service listening on %s:%d", self.host, self.port)

    def confirmed_offset(self) -> int:
        """Controller mode's confirmed offset, sent to the slaves (CONFIRM frames): what this
        master makes readable, so a slave serves nothing its master does not: on a SYNC_MASTER
        with allAckInSyncStateSet what its SyncStateSet has (`InSyncCap`), else all it stored."""
        if self.store.role is BrokerRole.SYNC_MASTER and isinstance(
            self.transfer, AllInSyncTransfer
        ):
            return InSyncCap(self.transfer, lambda: self.store.max_phy_offset).acked_offset
        return self.store.max_phy_offset

    def replication(self) -> Replication:
        """What the store is given to attach HA (`MessageStore.attach_replication`): wake-ups
        for the connections' writers; on a SYNC_MASTER the acknowledgement waiter, and the
        dispatch cap: in controller mode (allAckInSyncStateSet) always, what the SyncStateSet
        has (`InSyncCap`), in 4.x groups with haReadReplicatedOnly, what a slave has."""
        if self.store.role is not BrokerRole.SYNC_MASTER:
            return Replication(self._wake_all)
        cap: ReplicatedCap | None = None
        if isinstance(self.transfer, AllInSyncTransfer):
            cap = InSyncCap(self.transfer, lambda: self.store.max_phy_offset)
        elif self.config.ha_read_replicated_only:
            cap = self.transfer
        return Replication(self._wake_all, sync=self.transfer, dispatch_cap=cap)

    def _wake_all(self) -> None:
        for connection in self.connections:
            connection.wake()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = HAConnection(self, reader, writer)
        log.info("HA: slave connected from %s", connection.address)
        self.connections.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            # Cancelled by stop(): end quietly (asyncio 3.11 logs a cancelled handler's error).
            with contextlib.suppress(asyncio.CancelledError):
                await connection.run()
        finally:
            self.connections.discard(connection)
            if task is not None:
                self._tasks.discard(task)
            log.info(
                "HA: slave %s disconnected (%d left)", connection.address, len(self.connections)
            )

    def runtime_info(self) -> dict[str, object]:
        master_max = self.store.max_phy_offset
        infos = [
            c.runtime_info(master_max) for c in sorted(self.connections, key=lambda c: c.address)
        ]
        return {
            "master": True,
            "masterCommitLogMaxOffset": master_max,
            "inSyncSlaveNums": sum(1 for i in infos if i["inSync"]),
            "ackedOffset": self.transfer.acked_offset,
            "haConnectionInfo": infos,
        }

    async def _close(self) -> None:
        self.transfer.fail_all()
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(Exception):  # each connection logged its own failure
            await cancel_and_wait(*self._tasks)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
