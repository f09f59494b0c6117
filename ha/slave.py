"""The slave side of replication (RocketMQ's HAClient).

The slave connects to its master's HA address (learned from its name-server registration, or
fixed by haMasterAddress), reports its CommitLog's max offset at once, and then appends every
batch at exactly the offset its header names, acknowledging after each read and at least every
heartbeat interval. Reads land in one reused buffer (ha/codec.py's TransferBuffer: nothing is
allocated per read); the frames of one read are appended together (one write per CommitLog
file), and acknowledged at once, by the read's own callback (one report per read that moved
the log's end, with no task woken: a SYNC_MASTER's sends wait for it): the receive path never
waits for dispatch, which builds
ConsumeQueues and the index from the replicated bytes in its own task, a bounded chunk per
event-loop turn, and may lag behind a catch-up (`dispatchBehindBytes` in the runtime info says
by how much).

Every header is checked against the local max offset (heartbeats included). A mismatch in the
middle of a session (after a frame that continued the log) is a protocol error, as in RocketMQ:
the slave closes and reconnects after haReconnectInterval, reporting its true offset. The first
frame after the report is the master's answer to it, and a mismatch there is never papered over:

- the master is behind the slave (DIVERGED: the slave holds bytes the master does not). With
  haSlaveAutoTruncate the slave copies its extra tail into a `.diverged` file beside the segment,
  truncates to the master's end and resynchronises; otherwise it reports the divergence (log,
  status) and checks again only every haDivergedRetryInterval;
- the master is ahead of the slave's end (BEHIND_RETENTION: the master deleted what the slave
  needs). With haSlaveAutoResync the slave moves its whole CommitLog and ConsumeQueues aside and
  restarts from the master's oldest retained offset; otherwise it reports and waits likewise.

Controller mode: the master's CONFIRM frames (ha/codec.py) say what its SyncStateSet has; the
slave's dispatch stops there (`confirmed_offset`, the store's dispatch cap), so its consumers
read nothing an election could cut from its log (RocketMQ 5's confirmOffset: its slave's
reput ends there too). The store's checkpoint keeps that offset (confirmPhyOffset): a
restarted slave's load serves no further, nor does a candidate that lost an election once it
follows the new master (MessageStore.withdraw_unconfirmed).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.ha.codec import (
    BatchReceived,
    ConfirmReceived,
    EpochsDecoder,
    HAProtocolError,
    TransferBuffer,
    TransferEvent,
    encode_ack,
    encode_hello,
)
from tidemq.ha.config import HAConfig
from tidemq.ha.master import TransferRate
from tidemq.ha.transport import ChunkReceiver, Connect, connect_tcp
from tidemq.store.dispatch_faults import REPORT_INTERVAL, is_disk
from tidemq.store.errors import OffsetMismatchError
from tidemq.store.message_store import MessageStore

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
# The slave's dispatch step per event-loop turn (a master's is 1 MiB): about a millisecond of
# work, so that the receive path, which takes all the socket holds each turn, is not held up.
DISPATCH_CHUNK_BYTES = 256 * 1024


class ClientState(enum.Enum):
    READY = "READY"  # no master address, or waiting to reconnect
    TRANSFER = "TRANSFER"
    DIVERGED = "DIVERGED"
    BEHIND_RETENTION = "BEHIND_RETENTION"
    SHUTDOWN = "SHUTDOWN"


class MismatchError(Exception):
    def __init__(self, state: ClientState, local: int, master: int) -> None:
        super().__init__(f"{state.value}: slave CommitLog ends at {local}, master sends {master}")
        self.state = state
        self.local = local
        self.master = master


Resync = Callable[[ClientState, int, int], bool]


@dataclass(frozen=True, slots=True)
class EpochHandshake:
    """Controller mode's start of a connection (ha/codec.py): this slave's brokerId and epoch
    file, and what to do with the master's epochs (cut the log where they part) before the
    first report."""

    broker_id: int
    entries: Callable[[], list[tuple[int, int]]]
    on_master_epochs: Callable[[list[tuple[int, int]]], None]


class _FrameSink:
    """Where the slave's reads land (ha/transport.py's ReadSink): a TransferBuffer, whose
    completed frames go to `on_frames` at once, so their bodies (views of the buffer) are
    appended before the next read reuses it."""

    __slots__ = ("_frames", "_on_frames")

    def __init__(self, on_frames: Callable[[list[TransferEvent]], None], confirm: bool) -> None:
        self._frames = TransferBuffer(confirm_frames=confirm)
        self._on_frames = on_frames

    def get_buffer(self) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._on_frames(self._frames.received(nbytes))


class HAClient(Service):
    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        *,
        resync: Resync | None = None,
        connect: Connect = connect_tcp,
        handshake: EpochHandshake | None = None,
    ) -> None:
        super().__init__()
        self._handshake = handshake
        self.store = store
        self.config = config
        self.master_address = config.ha_master_address or ""
        self.fixed_address = bool(config.ha_master_address)
        self.state = ClientState.READY
        self.last_mismatch: MismatchError | None = None
        # The disk refusing replicated bytes, reported once per REPORT_INTERVAL with a count.
        self._disk_refusals = 0
        self._disk_refusal_reported = float("-inf")
        self.last_read = 0.0
        self.last_write = 0.0
        self.reported_offset = -1
        # This end's address of the HA connection ("ip:port"; empty while not connected): the
        # master sees the connection by it (controller mode publishes it in etcd).
        self.local_address = ""
        self.rate = TransferRate()
        self.connects = 0
        self.local_address = ""
        self._resync = resync
        self._connect = connect
        self._address_changed = asyncio.Event()
        # The session's writer, for the reports the receive callback sends.
        self._writer: asyncio.StreamWriter | None = None
        self._arrived = False  # bytes came in since dispatch last asked
        # No frame of this session continued the log yet: the next one answers the report.
        self._answering_report = True
        # Dispatch follows the receive path: small steps, and turns given up while bytes arrive.
        store.reput.chunk_bytes = DISPATCH_CHUNK_BYTES
        store.reput.defer = self._receiving
        # Controller mode: the master's confirmed offset, where dispatch stops from the start
        # on (the store's load dispatched its whole log). It stays set while the client is
        # stopped (a switch of masters cuts the log meanwhile); standing for election lifts it
        # (MessageStore.cut_incomplete_tail), a promotion replaces it (attach_replication).
        self.confirmed_offset = 0
        self._cap: Callable[[], int] | None = None
        if handshake is not None:
            self._cap = lambda: self.confirmed_offset
            # What the group had confirmed when the checkpoint was last written (a restart).
            self.confirmed_offset = store.checkpoint.confirm_phy_offset
        # Started again after a stop (controller mode switches masters): ready, not SHUTDOWN.
        self.add_child(Step(start=self._open))
        self.add_child(BackgroundTask(self._run, "ha-client"))
        # Stops first: the loop, cancelled next, must not take itself for READY again.
        self.add_child(Step(stop=self._shut_down))

    def update_master_address(self, address: str | None) -> None:
        """From the registration result; ignored when haMasterAddress is configured."""
        if self.fixed_address or not address or address == self.master_address:
            return
        log.info(
            "HA: master HA address is now %s (was %s)", address, self.master_address or "unset"
        )
        self.master_address = address
        self._address_changed.set()

    def _receiving(self) -> bool:
        """Whether bytes arrived since the last call (dispatch then lets the turn go by)."""
        arrived, self._arrived = self._arrived, False
        return arrived

    def _open(self) -> None:
        self.state = ClientState.READY
        self.store.reput.defer = self._receiving
        if self._cap is not None:
            self.store.reput.dispatch_cap = self._cap

    def _shut_down(self) -> None:
        self.state = ClientState.SHUTDOWN
        self.store.reput.defer = None

    async def _run(self) -> None:
        while True:
            if not self.master_address:
                self._address_changed.clear()
                await self._address_changed.wait()
                continue
            pause = self.config.ha_reconnect_interval / 1000
            try:
                await self._session(self.master_address)
            except MismatchError as exc:
                pause = self._on_mismatch(exc)
            except (OSError, TimeoutError, HAProtocolError, EOFError) as exc:
                self._log_ended(exc)
                if self.state is not ClientState.SHUTDOWN:
                    self.state = ClientState.READY
            except Exception:
                # Never end replication silently: log it and reconnect after the pause.
                log.exception("HA: replication from master %s failed", self.master_address)
                if self.state is not ClientState.SHUTDOWN:
                    self.state = ClientState.READY
            self._address_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._address_changed.wait(), pause)

    def _log_ended(self, exc: BaseException) -> None:
        if not is_disk(exc):
            log.warning("HA: connection to master %s ended: %s", self.master_address, exc)
            return
        # The disk refuses the replicated bytes: it lasts, and every reconnect meets it again.
        self.store.commitlog.disk_refused_at = now = time.monotonic()
        self._disk_refusals += 1
        if now - self._disk_refusal_reported >= REPORT_INTERVAL:
            self._disk_refusal_reported = now
            log.error(
                "HA: the disk refuses the data of master %s (%d times since the last report): "
                "%s; reconnecting",
                self.master_address,
                self._disk_refusals,
                exc,
            )
            self._disk_refusals = 0

    def _on_mismatch(self, exc: MismatchError) -> float:
        self.last_mismatch = exc
        self.state = exc.state
        log.error(
            "HA: %s (master %s). %s",
            exc,
            self.master_address,
            "Resynchronising." if self._resync_allowed(exc.state) else "Waiting for an operator.",
        )
        resync = self._resync
        if (
            self._resync_allowed(exc.state)
            and resync is not None
            and resync(exc.state, exc.local, exc.master)
        ):
            self.state = ClientState.READY
            if exc.state is ClientState.BEHIND_RETENTION:
                self._start_empty_log_at(exc.master)
            return 0.0
        return self.config.ha_diverged_retry_interval / 1000

    def _start_empty_log_at(self, offset: int) -> None:
        """Continue an emptied store at the master's oldest retained offset (Part C).

        Reporting 0 instead would get only the master's last file (RocketMQ's rule for a new
        slave), leaving out the older files the master still holds.
        """
        if self.store.max_phy_offset or offset % self.store.config.mapped_file_size_commit_log:
            return
        try:
            self.store.append_to_commitlog(offset, b"")
        except OffsetMismatchError as exc:
            log.warning("HA: the slave's CommitLog cannot start at %d: %s", offset, exc)

    def _resync_allowed(self, state: ClientState) -> bool:
        if state is ClientState.DIVERGED:
            return self.config.ha_slave_auto_truncate
        if state is ClientState.BEHIND_RETENTION:
            return self.config.ha_slave_auto_resync
        return False

    async def _session(self, address: str) -> None:
        reader, writer = await asyncio.wait_for(self._connect(address), CONNECT_TIMEOUT)
        self.connects += 1
        local = writer.get_extra_info("sockname")
        self.local_address = f"{local[0]}:{local[1]}" if isinstance(local, tuple) else ""
        self._answering_report = True
        # The address the master sees this connection come from: it names this slave to the
        # master (broker/slave_names.py), which only sees a temporary port.
        local = writer.get_extra_info("sockname")
        self.local_address = f"{local[0]}:{local[1]}" if isinstance(local, tuple) else ""
        try:
            log.info("HA: connected to master %s", address)
            if self._handshake is not None:
                await self._exchange_epochs(reader, writer, self._handshake)
                # What the handshake cut is confirmed no more (the new master confirms anew).
                self.confirmed_offset = min(self.confirmed_offset, self.store.max_phy_offset)
            # Before the report: the master sends nothing until it has it.
            sink = _FrameSink(self._on_frames, confirm=self._handshake is not None)
            receiver = ChunkReceiver(reader, writer, sink, wake_on_data=False)
            await self._report(writer)
            self._writer = writer
            await self._receive(receiver, writer)
        finally:
            self._writer = None
            self.local_address = ""
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _exchange_epochs(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: EpochHandshake
    ) -> None:
        """Controller mode: HELLO out, the master's EPOCHS in, the log cut where they part."""
        writer.write(encode_hello(hello.broker_id, hello.entries()))
        await writer.drain()
        decoder = EpochsDecoder()
        timeout = self.config.ha_housekeeping_interval / 1000
        while True:
            data = await asyncio.wait_for(reader.read(64 * 1024), timeout)
            if not data:
                raise EOFError("the master closed the connection during the epoch handshake")
            rest = decoder.feed(data)
            if rest is not None:
                break
        if rest:  # the master sends nothing more until this slave has reported
            raise HAProtocolError(f"{len(rest)} bytes after the master's epochs")
        hello.on_master_epochs(decoder.entries)

    async def _report(self, writer: asyncio.StreamWriter) -> None:
        offset = self.store.max_phy_offset
        writer.write(encode_ack(offset))
        self.reported_offset = offset
        self.last_write = time.monotonic()
        await writer.drain()

    async def _receive(self, receiver: ChunkReceiver, writer: asyncio.StreamWriter) -> None:
        """Heartbeat when idle; end the session when the master is silent or closes.

        The frames are appended and acknowledged as they arrive, by `receiver`'s callback.
        """
        config = self.config
        heartbeat = config.ha_send_heartbeat_interval / 1000
        housekeeping = config.ha_housekeeping_interval / 1000
        self.last_read = time.monotonic()
        while True:
            now = time.monotonic()
            if now - self.last_read > housekeeping:
                raise TimeoutError(f"nothing from the master for {housekeeping * 1000:.0f} ms")
            wait = min(heartbeat - (now - self.last_write), housekeeping - (now - self.last_read))
            # A timer rather than wait_for: no task per wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.01)):
                    if not await receiver.received():
                        raise EOFError("the master closed the connection")
                    self.last_read = time.monotonic()
            if self.store.max_phy_offset > self.reported_offset or (
                time.monotonic() - self.last_write >= heartbeat
            ):
                await self._report(writer)

    def _on_frames(self, events: list[TransferEvent]) -> None:
        self._arrived = True
        self._apply(events)
        self.last_read = now = time.monotonic()
        offset = self.store.max_phy_offset
        writer = self._writer
        if writer is not None and offset > self.reported_offset:
            # The read's report, now: what it appended is acknowledged before the next read.
            writer.write(encode_ack(offset))
            self.reported_offset = offset
            self.last_write = now

    def _apply(self, events: list[TransferEvent]) -> None:
        """Check every frame of a read against the log's end, then append their bodies in one
        go (dispatch follows in its own task). Frames before a mismatch are appended first."""
        end = self.store.max_phy_offset
        file_size = self.store.config.mapped_file_size_commit_log
        start = end
        bodies: list[bytes | memoryview] = []
        confirmed = -1
        for event in events:
            if type(event) is ConfirmReceived:
                confirmed = max(confirmed, event.offset)
                continue
            if end != 0 and event.offset != end:
                self._append(start, bodies)
                if not self._answering_report:
                    raise HAProtocolError(
                        f"master jumped from {end} to {event.offset} in the middle of the stream"
                    )
                state = ClientState.DIVERGED if event.offset < end else ClientState.BEHIND_RETENTION
                raise MismatchError(state, end, event.offset)
            if end == 0 and event.offset % file_size:
                # An empty slave can start only at a file boundary; the master's data starts
                # elsewhere.
                raise MismatchError(ClientState.BEHIND_RETENTION, end, event.offset)
            if self._answering_report:  # the master answered the report: a session begins
                self._answering_report = False
                self.state = ClientState.TRANSFER
                self.last_mismatch = None
            if isinstance(event, BatchReceived):
                if not bodies:
                    start = event.offset
                bodies.append(event.body)
                end = event.offset + len(event.body)
        self._append(start, bodies)
        if confirmed > self.confirmed_offset:
            self.confirmed_offset = confirmed
            self.store.reput.wakeup()

    def _append(self, offset: int, bodies: list[bytes | memoryview]) -> None:
        if not bodies:
            return
        try:
            self.store.append_to_commitlog(offset, bodies)
        except OffsetMismatchError as exc:
            # E.g. an empty first file at 0 left by a crash: the store cannot start elsewhere.
            state = ClientState.DIVERGED if offset < exc.expected else ClientState.BEHIND_RETENTION
            raise MismatchError(state, exc.expected, offset) from exc
        self.rate.add(sum(map(len, bodies)))

    def runtime_info(self) -> dict[str, object]:
        mismatch = self.last_mismatch
        return {
            "master": False,
            "masterAddr": self.master_address,
            "state": self.state.value,
            "maxOffset": self.store.max_phy_offset,
            # Controller mode: the master's confirmed offset, where this slave's reads end.
            "confirmedOffset": self.confirmed_offset if self._cap is not None else None,
            "reportedOffset": self.reported_offset,
            # Received but not yet in the ConsumeQueues: dispatch follows the receive path.
            "dispatchBehindBytes": self.store.reput.behind_bytes,
            "transferredByteInSecond": int(self.rate.per_second()),
            "lastReadTimestamp": int(self.last_read * 1000),
            "lastWriteTimestamp": int(self.last_write * 1000),
            "connects": self.connects,
            "haLocalAddress": self.local_address,
            "mismatch": None
            if mismatch is None
            else {
                "state": mismatch.state.value,
                "slaveOffset": mismatch.local,
                "masterOffset": mismatch.master,
            },
        }
