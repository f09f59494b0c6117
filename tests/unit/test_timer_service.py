"""The timer service over a real store in a temporary folder (no sockets, no other process):
timers reach their topic in time order and never early, one due already is delivered at once,
a restart in the middle loses and repeats nothing, a record whose message is not there any more
is skipped; a recalled timer is never delivered, also after a restart or a roll, and a recall
that cannot be served is refused with its kind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tidemq.broker.recall import RecallRefusal, RecallRefused, RecallService
from tidemq.broker.recall_handle import RecallHandle
from tidemq.broker.timer import TimerMessageService
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore
from tidemq.store.record import MessageToStore, decode_properties, encode_properties
from tidemq.store.timer_message import TIMER_TOPIC
from tidemq.store.timer_store import TimerStore

HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"


def now_ms() -> int:
    return int(time.time() * 1000)


class Running:
    """A started store, its timer store and a delivering service; what reached topic T."""

    def __init__(self, root: Path, **config: int) -> None:
        self.config = StoreConfig(
            store_path_root_dir=str(root),
            mapped_file_size_commit_log=1 << 20,
            mapped_file_size_timer_log=4096,
            message_index_enable=False,
            message_index_worker_enable=False,
            **config,  # type: ignore[arg-type]
        )
        self.store = MessageStore(self.config)
        self.timers = TimerStore(self.config, slots_total=3600)
        self.service = TimerMessageService(self.store, self.timers, lambda: HOST, deliver=True)
        self.arrived: list[tuple[bytes, int]] = []  # (body, when it was put into T)
        self.delivered: list[MessageToStore] = []

    async def start(self) -> None:
        self.store.load()
        await self.store.start()
        queue = self.store.find_consume_queue(TIMER_TOPIC, 0)
        self.timers.load(now_ms(), 0, queue.max_offset if queue else 0)
        original = self.store.put_message

        async def put(msg: MessageToStore, *args: object) -> object:
            if msg.topic == "T" and "TIMER_DEQUEUE_MS" in msg.properties:  # not the send
                self.arrived.append((msg.body, now_ms()))
                self.delivered.append(msg)
            return await original(msg)

        self.store.put_message = put  # type: ignore[method-assign, assignment]
        await self.service.start()

    async def stop(self) -> None:
        await self.service.stop()
        self.timers.close()
        await self.store.stop()


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    made = Running(tmp_path)
    await made.start()
    try:
        yield made
    finally:
        if made.service.running:
            await made.stop()


async def send_timer(store: MessageStore, body: bytes, at: int) -> None:
    props = encode_properties({"TIMER_DELIVER_MS": str(at)})
    result = await store.put_message(MessageToStore("T", 1, body, props))
    assert result.ok


async def test_timers_arrive_in_time_order_and_never_early(running: Running) -> None:
    start = now_ms() + 300
    due = {b"m%d" % i: start + (7 * i) % 400 for i in range(40)}  # out of order on purpose
    for body, at in due.items():
        await send_timer(running.store, body, at)
    await eventually(lambda: len(running.arrived) == 40, "all delivered", 10)
    assert all(when >= due[body] for body, when in running.arrived)
    order = [due[body] for body, _when in running.arrived]
    assert order == sorted(order)
    assert running.timers.pending == 0 and running.timers.cursor > max(due.values())


async def test_a_unit_due_before_the_cursor_is_delivered_at_once(running: Running) -> None:
    # Stored straight into the timer topic with a time already passed (a lagging enqueue).
    props = encode_properties(
        {"TIMER_OUT_MS": str(now_ms() - 5000), "REAL_TOPIC": "T", "REAL_QID": "2"}
    )
    await running.store.put_message(MessageToStore(TIMER_TOPIC, 0, b"late", props))
    await eventually(lambda: len(running.arrived) == 1, "delivered", 10)
    assert running.arrived[0][0] == b"late" and running.timers.pending == 0


async def test_a_restart_between_timers_loses_and_repeats_nothing(tmp_path: Path) -> None:
    first = Running(tmp_path)
    await first.start()
    start = now_ms() + 200
    for i in range(10):
        await send_timer(first.store, b"r%d" % i, start + i * 150)
    await eventually(lambda: len(first.arrived) >= 3, "some delivered", 10)
    await first.stop()
    second = Running(tmp_path)
    await second.start()
    try:
        await eventually(
            lambda: len(first.arrived) + len(second.arrived) == 10, "the rest delivered", 10
        )
        await asyncio.sleep(0.3)  # nothing more follows
    finally:
        await second.stop()
    bodies = [body for body, _when in first.arrived + second.arrived]
    assert sorted(bodies) == sorted(b"r%d" % i for i in range(10))


async def test_a_record_whose_message_is_not_there_is_skipped(running: Running) -> None:
    """A wheel record names its timer-topic unit; a CommitLog cut and rewritten (a deposed
    master resynchronised) holds another message at its place: that one is not delivered."""
    at = now_ms() + 300
    await send_timer(running.store, b"real", at)
    store = running.store
    await eventually(lambda: store.max_offset_in_queue(TIMER_TOPIC, 0) == 1, "dispatched", 10)
    queue = store.find_consume_queue(TIMER_TOPIC, 0)
    unit = queue.unit(0) if queue is not None else None
    assert unit is not None
    # A record for unit 99 pointing where unit 0's message is, due first.
    running.timers.add(unit.physical_offset, unit.size, at - 100, 99, now_ms())
    await eventually(lambda: len(running.arrived) == 1, "the real one delivered", 10)
    await asyncio.sleep(0.2)
    assert [body for body, _when in running.arrived] == [b"real"]
    assert running.service.undeliverable == 1


async def test_a_timer_beyond_the_roll_window_is_written_again_and_arrives_in_time(
    tmp_path: Path,
) -> None:
    """Slots of 100 ms, a window of 2 slots: a timer 900 ms ahead rolls (its message goes back
    into the timer topic) until it is within the window, then arrives at its time."""
    rolling = Running(tmp_path, timer_precision_ms=100, timer_roll_window_slot=2)
    await rolling.start()
    try:
        due = now_ms() + 900
        await send_timer(rolling.store, b"far", due)
        await eventually(lambda: len(rolling.arrived) == 1, "delivered", 10)
    finally:
        await rolling.stop()
    (body, when), msg = rolling.arrived[0], rolling.delivered[0]
    assert body == b"far" and when >= due
    rolls = decode_properties(msg.properties)["TIMER_ROLL_TIMES"]
    assert int(rolls) >= 2  # 900 ms in windows of 200 ms


class Topics:
    """The one topic a recall checks for (the broker's TopicConfigManager answers the same)."""

    def select(self, topic: str) -> object | None:
        return object() if topic == "T" else None


def recall_service(running: Running) -> RecallService:
    return RecallService(
        running.store, Topics(), lambda: running.service, lambda: "broker-a", lambda: HOST
    )  # type: ignore[arg-type]


async def send_recallable(running: Running, uniq: str, at: int) -> str:
    """A timer with a UNIQ_KEY (as every client sets it); its recall handle."""
    props = {"TIMER_DELIVER_MS": str(at), "UNIQ_KEY": uniq}
    msg = MessageToStore("T", 1, uniq.encode(), encode_properties(props))
    assert (await running.store.put_message(msg)).ok
    handle = recall_service(running).handle_of("T", decode_properties(msg.properties))
    assert handle
    return handle


def arrived_bodies(running: Running) -> list[bytes]:
    return [body for body, _when in running.arrived]


async def test_a_recalled_timer_is_not_delivered_and_the_others_are(running: Running) -> None:
    at = now_ms() + 600
    handles = [await send_recallable(running, f"U{i}", at + i) for i in range(3)]
    assert await recall_service(running).recall("T", handles[1], HOST) == "U1"
    await eventually(lambda: len(running.arrived) == 2, "the two others delivered", 10)
    await eventually(lambda: running.service.recalled == 1, "the recalled one dropped", 10)
    assert sorted(arrived_bodies(running)) == [b"U0", b"U2"]
    assert running.timers.pending == 0  # the tombstone is not left waiting


async def test_a_recall_survives_a_restart(tmp_path: Path) -> None:
    first = Running(tmp_path)
    await first.start()
    at = now_ms() + 1500
    kept = await send_recallable(first, "KEEP", at)
    gone = await send_recallable(first, "GONE", at)
    del kept
    await recall_service(first).recall("T", gone, HOST)
    await first.stop()
    second = Running(tmp_path)
    await second.start()
    try:
        await eventually(lambda: len(second.arrived) == 1, "the kept one delivered", 10)
        await eventually(lambda: second.service.recalled == 1, "the recalled one dropped", 10)
    finally:
        await second.stop()
    assert arrived_bodies(first) == [] and arrived_bodies(second) == [b"KEEP"]


async def test_a_recall_of_a_timer_beyond_the_roll_window(tmp_path: Path) -> None:
    """The tombstone rolls as its timer does, and both meet in the timer's own slot."""
    rolling = Running(tmp_path, timer_precision_ms=100, timer_roll_window_slot=2)
    await rolling.start()
    try:
        at = now_ms() + 900
        handle = await send_recallable(rolling, "FAR", at)
        await send_recallable(rolling, "NEAR", at)
        await recall_service(rolling).recall("T", handle, HOST)
        await eventually(lambda: len(rolling.arrived) == 1, "the other delivered", 10)
        await eventually(lambda: rolling.service.recalled == 1, "the recalled one dropped", 10)
    finally:
        await rolling.stop()
    assert arrived_bodies(rolling) == [b"NEAR"]


async def test_recalls_refused_with_their_kinds(running: Running) -> None:
    service = recall_service(running)
    at = now_ms() + 60_000
    good = RecallHandle("T", "broker-a", at, "ID")

    async def kind_of(topic: str, text: str) -> RecallRefusal:
        with pytest.raises(RecallRefused) as refused:
            await service.recall(topic, text, HOST)
        return refused.value.kind

    assert await kind_of("NOPE", good.encode()) is RecallRefusal.NO_TOPIC
    assert await kind_of("T", "not base64!") is RecallRefusal.BAD_HANDLE
    other_topic = RecallHandle("U", "broker-a", at, "ID").encode()
    assert await kind_of("T", other_topic) is RecallRefusal.BAD_HANDLE
    other_broker = RecallHandle("T", "broker-b", at, "ID").encode()
    assert await kind_of("T", other_broker) is RecallRefusal.OTHER_BROKER
    past = RecallHandle("T", "broker-a", now_ms() - 1, "ID").encode()
    assert await kind_of("T", past) is RecallRefusal.TOO_LATE
    far = RecallHandle("T", "broker-a", now_ms() + 4 * 86_400_000, "ID").encode()
    assert await kind_of("T", far) is RecallRefusal.TOO_FAR
    assert running.service.recalled == 0


async def test_a_tombstone_whose_time_passed_is_refused_never_stored_in_its_topic(
    running: Running,
) -> None:
    props = {"TIMER_DELIVER_MS": str(now_ms() - 10), "TIMER_DEL_UNIQKEY": "T+X"}
    msg = MessageToStore("T", 0, b"0", encode_properties(props))
    result = await running.store.put_message(msg)
    assert result.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert running.store.max_offset_in_queue("T", 0) == 0
