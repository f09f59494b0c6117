"""In-process HA: real MessageStores, HAService and HAClient, over memory or loopback TCP.

Stores live on the test's tmp dir with 64 KiB CommitLog files (so files roll) and short
intervals (`STORES`, `ha_config`). `Harness` makes stores, services, clients and relays
and stops them at the end; `Relay` sits between a slave and its master, decodes both directions
(frames and reports) and can hold the slave's reports back: a slave that is connected but no
longer acknowledges. `raw_slave` is a connection the test drives by hand (`encode_ack` to
report, `read_frames`/`read_to_eof` to read).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.support.memory_streams import MemoryNetwork
from tests.support.messages import message
from tests.support.stores import StoreFactory
from tidemq.ha.codec import ACK_SIZE, AckDecoder, BatchReceived, TransferDecoder
from tidemq.ha.config import HAConfig
from tidemq.ha.master import HAService
from tidemq.ha.slave import ClientState, HAClient, Resync
from tidemq.ha.transport import Connect, Listen, Listening, Streams, connect_tcp, listen_tcp
from tidemq.store.commitlog import AppendResult, PutStatus
from tidemq.store.config import BrokerRole
from tidemq.store.get_message import GetMessageStatus
from tidemq.store.message_store import MessageStore
from tidemq.store.record import decode_record
from tidemq.store.segment import offset_to_name

FILE = 64 * 1024
# Not a divisor of FILE: a frame running over a file boundary could not hide.
BATCH = 5000
SIZE = 900  # a message's body: about 65 messages fill a file
TOPIC = "HaTopic"
HOST = "127.0.0.1"
# A part that takes longer to stop is stuck: fail naming it, with every task's stack.
STOP_TIMEOUT = 20.0


STORES = StoreFactory(
    mapped_file_size_commit_log=FILE,
    max_message_size=8192,
    mapped_file_size_consume_queue=20 * 256,
    flush_interval_commit_log=50,
    flush_interval_consume_queue=50,
)


def ha_config(**overrides: Any) -> HAConfig:
    values: dict[str, Any] = {
        "ha_send_heartbeat_interval": 100,
        "ha_housekeeping_interval": 1000,
        "ha_transfer_batch_size": BATCH,
        "ha_reconnect_interval": 50,
        "ha_diverged_retry_interval": 60_000,
        "slave_timeout": 1000,
    }
    values.update(overrides)
    return HAConfig(**values)


async def put_many(store: MessageStore, count: int, start: int = 0) -> list[AppendResult]:
    appends = []
    for i in range(start, start + count):
        result = await store.put_message(message(i, topic=TOPIC, size=SIZE, KEYS=f"key-{i}"))
        assert result.status is PutStatus.PUT_OK, result.remark
        assert result.append is not None
        appends.append(result.append)
    return appends


def commitlog_bytes(store: MessageStore, start: int, end: int) -> bytes:
    """The CommitLog's bytes in [start, end), read the way the HA write service reads them."""
    out = bytearray()
    at = start
    while at < end:
        got = store.get_commitlog_data(at)
        assert got is not None, f"{store.root.name}: no CommitLog data at {at}"
        first, view = got
        assert first == at
        n = min(len(view), end - at)
        out += view[:n]
        view.release()
        at += n
    return bytes(out)


def queue_bodies(store: MessageStore, queue_id: int = 0) -> dict[int, bytes]:
    """queue offset -> body of every message `get_message` serves from the queue."""
    out: dict[int, bytes] = {}
    offset = store.min_offset_in_queue(TOPIC, queue_id)
    while True:
        result = store.get_message("g", TOPIC, queue_id, offset, 32)
        if result.status is not GetMessageStatus.FOUND:
            return out
        for queue_offset, raw in zip(result.queue_offsets, result.messages, strict=True):
            out[queue_offset] = decode_record(raw).body
            raw.release()
        offset = result.next_begin_offset


def found(store: MessageStore, queue_offset: int) -> bool:
    result = store.get_message("g", TOPIC, 0, queue_offset, 1)
    for raw in result.messages:
        raw.release()
    return result.status is GetMessageStatus.FOUND


def copy_commitlog(source: MessageStore, root: Path, files: int | None = None) -> None:
    """Copy the first `files` CommitLog files (all by default) into the store folder `root`."""
    target = root / "commitlog"
    target.mkdir(parents=True, exist_ok=True)
    for segment in source.commitlog.segments.segments[:files]:
        shutil.copyfile(segment.path, target / segment.path.name)


def empty_first_file(root: Path) -> None:
    folder = root / "commitlog"
    folder.mkdir(parents=True)
    (folder / offset_to_name(0)).write_bytes(bytes(FILE))


def side_files(store: MessageStore, suffix: str) -> list[Path]:
    return sorted(store.config.commit_log_dir.glob(f"*.{suffix}"))


def caught_up(master: MessageStore, slave: MessageStore) -> Callable[[], bool]:
    return lambda: slave.max_phy_offset == master.max_phy_offset > 0


def holds(store: MessageStore, offset: int) -> Callable[[], bool]:
    return lambda: store.max_phy_offset >= offset


def reported(service: HAService, count: int = 1) -> Callable[[], bool]:
    return lambda: sum(1 for c in service.connections if c.reported) == count


class Relay:
    """A relay from a slave to the master's HA port that decodes what it forwards.

    `frames` lists every master frame as (offset, body size), 0 for a heartbeat; `reports` every
    slave report. `hold_reports()` stops forwarding the slave's reports (the first report of a
    connection still passes: it is where the slave stands); `release_reports()` resumes.
    """

    def __init__(self, target_port: int, listen: Listen, connect: Connect) -> None:
        self.target_port = target_port
        self._listen = listen
        self._connect = connect
        self.port = 0
        self.accepted = 0
        self.frames: list[tuple[int, int]] = []
        self.reports: list[int] = []
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: Listening | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server, self.port = await self._listen(self._accept, HOST, 0)

    def hold_reports(self) -> None:
        self._flowing.clear()

    def release_reports(self) -> None:
        self._flowing.set()

    def heartbeats(self) -> int:
        return sum(1 for _offset, size in self.frames if size == 0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self.accepted += 1
        up_writer: asyncio.StreamWriter | None = None
        pumps: list[asyncio.Task[None]] = []
        try:
            up_reader, up_writer = await self._connect(f"{HOST}:{self.target_port}")
            pumps = [
                asyncio.create_task(self._downstream(up_reader, writer)),
                asyncio.create_task(self._upstream(reader, up_writer)),
            ]
            with contextlib.suppress(asyncio.CancelledError):  # stop(): end quietly
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            # Closed before any wait: stop() may cancel this handler while it cleans up.
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        await w.wait_closed()
            self._handlers.discard(handler)

    async def _downstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = TransferDecoder()
        while data := await reader.read(256 * 1024):
            for event in decoder.feed(data):
                size = event.size if isinstance(event, BatchReceived) else 0
                self.frames.append((event.offset, size))
            writer.write(data)
            await writer.drain()

    async def _upstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = AckDecoder()
        forwarded = 0
        while data := await reader.read(64 * 1024):
            self.reports += [event.offset for event in decoder.feed(data)]
            if forwarded < ACK_SIZE:
                head = data[: ACK_SIZE - forwarded]
                writer.write(head)
                forwarded += len(head)
                data = data[len(head) :]
            if data:
                await self._flowing.wait()
                writer.write(data)
                forwarded += len(data)
            await writer.drain()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


class Harness:
    """Makes stores, HA services and relays and stops them, newest first, at the end of a test.

    Services, clients and relays talk over `network` (in memory), or over loopback TCP when it
    is None.
    """

    def __init__(self, tmp_path: Path, network: MemoryNetwork | None) -> None:
        self.tmp = tmp_path
        self.network = network
        self.listen: Listen = listen_tcp if network is None else network.listen
        self.connect: Connect = connect_tcp if network is None else network.connect
        self._cleanups: list[tuple[object, Callable[[], Awaitable[None]]]] = []

    async def store(
        self, name: str, role: BrokerRole = BrokerRole.ASYNC_MASTER, **overrides: Any
    ) -> MessageStore:
        store = STORES.open(self.tmp / name, broker_role=role, **overrides)
        self._cleanups.append((store, store.stop))
        await store.start()
        return store

    async def service(self, store: MessageStore, **overrides: Any) -> HAService:
        service = HAService(store, ha_config(**overrides), HOST, 0, listen=self.listen)
        self._cleanups.append((service, service.stop))
        await service.start()
        store.attach_replication(service.replication())  # as the broker does
        return service

    async def client(
        self, store: MessageStore, port: int, *, resync: Resync | None = None, **overrides: Any
    ) -> HAClient:
        config = ha_config(ha_master_address=f"{HOST}:{port}", **overrides)
        client = HAClient(store, config, resync=resync, connect=self.connect)
        self._cleanups.append((client, client.stop))
        await client.start()
        return client

    async def relay(self, port: int) -> Relay:
        relay = Relay(port, self.listen, self.connect)
        self._cleanups.append((relay, relay.stop))
        await relay.start()
        return relay

    @contextlib.asynccontextmanager
    async def raw_slave(self, port: int, *, limit: int | None = None) -> AsyncIterator[Streams]:
        """A connection to the master's HA port that the test drives by hand.

        `limit` (in memory only): the master must stop writing above 2 * `limit` unread bytes.
        """
        address = f"{HOST}:{port}"
        if limit is None:
            reader, writer = await self.connect(address)
        else:
            assert self.network is not None, "a reader limit needs the in-memory network"
            reader, writer = self.network.connect_now(address, limit=limit)
        try:
            yield reader, writer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def stop(self, thing: object) -> None:
        for i, (owner, stop) in enumerate(self._cleanups):
            if owner is thing:
                del self._cleanups[i]
                await stop()
                return
        raise AssertionError(f"{thing!r} is not managed here")

    async def close(self) -> None:
        stuck = []
        while self._cleanups:
            owner, stop = self._cleanups.pop()
            try:
                await asyncio.wait_for(stop(), STOP_TIMEOUT)
            except TimeoutError:
                stuck.append(f"{owner!r} did not stop:\n{_task_stacks()}")
        # Everything else was stopped first: nothing is left running into the next test.
        assert not stuck, "\n".join(stuck)


@contextlib.asynccontextmanager
async def harness(tmp_path: Path, network: MemoryNetwork | None) -> AsyncIterator[Harness]:
    """A Harness closed at the end, which fails if asyncio logged an error meanwhile."""
    # asyncio logs what tasks and callbacks let escape, e.g. a cancelled connection handler.
    escaped = ErrorRecords()
    logging.getLogger("asyncio").addHandler(escaped)
    made = Harness(tmp_path, network)
    try:
        yield made
        await made.close()
    finally:
        logging.getLogger("asyncio").removeHandler(escaped)
    assert [r.getMessage() for r in escaped.records] == []


def _task_stacks() -> str:
    out = io.StringIO()
    for task in asyncio.all_tasks():
        task.print_stack(file=out)
    return out.getvalue()


class ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def resync_callback(store: MessageStore, calls: list[tuple[ClientState, int, int]]) -> Resync:
    """What the broker does when its slave is told to resynchronise."""

    def resync(state: ClientState, local: int, master: int) -> bool:
        calls.append((state, local, master))
        if state is ClientState.DIVERGED:
            store.truncate_for_resync(master)
            return True
        if state is ClientState.BEHIND_RETENTION:
            store.reset_for_resync()
            return True
        return False

    return resync


async def read_frames(reader: asyncio.StreamReader, count: int) -> list[tuple[int, int]]:
    decoder = TransferDecoder()
    frames: list[tuple[int, int]] = []
    while len(frames) < count:
        data = await asyncio.wait_for(reader.read(64 * 1024), 5)
        assert data, "the master closed the connection"
        for event in decoder.feed(data):
            frames.append((event.offset, event.size if isinstance(event, BatchReceived) else 0))
    return frames


async def read_to_eof(reader: asyncio.StreamReader, timeout: float = 1.0) -> None:
    """Until the master hangs up, well before its housekeeping would (5 s in these tests)."""
    async with asyncio.timeout(timeout):
        while await reader.read(64 * 1024):
            pass
