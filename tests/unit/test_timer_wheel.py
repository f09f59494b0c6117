"""The timer wheel, log and checkpoint codecs, the timer transform at put (sans-IO), the store's
entry for a delivery timestamp, and the client's timer fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.client.admin.api import BrokerAddress
from tidemq.client.dashboard.views import _broker_row
from tidemq.client.errors import InvalidMessageError
from tidemq.client.message import Message
from tidemq.client.validators import check_message
from tidemq.store.commitlog import PutStatus
from tidemq.store.config import StoreConfig
from tidemq.store.record import MessageToStore, decode_properties, encode_properties
from tidemq.store.timer_checkpoint import TimerProgress
from tidemq.store.timer_log import (
    MAGIC_DEFAULT,
    MAGIC_ROLL,
    UNIT_SIZE,
    TimerUnit,
    decode_unit,
    encode_unit,
    scan_units,
)
from tidemq.store.timer_message import TIMER_TOPIC, TimerLimits, park_timer
from tidemq.store.timer_store import TimerStore
from tidemq.store.timer_wheel import BLANK, TimerWheel, wheel_size

NOW = 1_700_000_000_000


def small_wheel(slots: int = 100, precision: int = 1000) -> TimerWheel:
    return TimerWheel(bytearray(wheel_size(slots)), slots, precision)


def test_a_slot_links_its_records_and_a_lap_later_is_blank() -> None:
    wheel = small_wheel()
    assert wheel.add(NOW + 1500, 0) == BLANK
    assert wheel.add(NOW + 1999, 52) == 0  # same slot: the new record points at the old
    slot = wheel.slot(NOW + 1000)
    assert slot is not None and (slot.first_pos, slot.last_pos, slot.num) == (0, 52, 2)
    assert wheel.slot(NOW + 1000 + 200 * 1000) is None  # the same index one lap on
    assert wheel.slot(NOW + 2000) is None


def test_revise_is_idempotent_and_pending_counts_the_span() -> None:
    wheel = small_wheel()
    wheel.add(NOW, 0)
    wheel.revise(NOW, 0)  # already there: nothing changes
    wheel.revise(NOW, 52)  # lost from the wheel, found in the log
    wheel.revise(NOW + 5000, 104)
    assert wheel.slot(NOW) == wheel.slot(NOW) and wheel.slot(NOW).num == 2  # type: ignore[union-attr]
    assert wheel.pending(NOW, NOW + 10_000) == 3
    assert wheel.pending(NOW + 1000, NOW + 10_000) == 1


def test_a_unit_round_trips_and_a_torn_one_ends_the_scan() -> None:
    unit = TimerUnit(BLANK, MAGIC_DEFAULT | MAGIC_ROLL, NOW, NOW - 5, 4096, 300, 7)
    data = encode_unit(unit)
    assert len(data) == UNIT_SIZE and decode_unit(data) == unit  # negative delay kept
    log = data + data[:30] + bytes(22)
    assert [u for _pos, u in scan_units(log, 1000)] == [unit]
    assert decode_unit(bytes(UNIT_SIZE)) is None


def test_the_checkpoint_has_rocketmqs_56_bytes() -> None:
    progress = TimerProgress(NOW, 104, 9, 12, 1, 2, 3)
    data = progress.encode()
    assert len(data) == 56 and TimerProgress.decode(data) == progress
    assert TimerProgress.decode(data[:32]) == TimerProgress(NOW, 104, 9, 12)
    with pytest.raises(ValueError):
        TimerProgress.decode(b"short")


def message(props: dict[str, str], topic: str = "T") -> MessageToStore:
    return MessageToStore(topic, 3, b"body", encode_properties(props))


def test_park_moves_a_timer_to_the_timer_topic() -> None:
    msg = message({"TIMER_DELAY_MS": "300"})
    assert park_timer(msg, NOW, TimerLimits()) is None
    props = decode_properties(msg.properties)
    assert (msg.topic, msg.queue_id) == (TIMER_TOPIC, 0)
    assert props["TIMER_OUT_MS"] == str(NOW + 300)  # the exact millisecond
    assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("T", "3")


@pytest.mark.parametrize(
    ("props", "status", "words"),
    [
        ({"TIMER_DELAY_SEC": "soon"}, PutStatus.WHEEL_TIMER_MSG_ILLEGAL, "not a whole number"),
        ({"TIMER_DELIVER_MS": "1e9"}, PutStatus.WHEEL_TIMER_MSG_ILLEGAL, "TIMER_DELIVER_MS"),
        ({"TIMER_DELAY_SEC": "61"}, PutStatus.WHEEL_TIMER_MSG_ILLEGAL, "timerMaxDelaySec (60 s)"),
    ],
)
def test_park_refuses_bad_timers(props: dict[str, str], status: PutStatus, words: str) -> None:
    refusal = park_timer(message(props), NOW, TimerLimits(max_delay_sec=60))
    assert refusal is not None and refusal.status is status and words in refusal.remark


def test_past_disabled_and_delay_level_timers() -> None:
    past = message({"TIMER_DELIVER_MS": str(NOW - 1)})
    assert park_timer(past, NOW, TimerLimits()) is None and past.topic == "T"
    off = park_timer(message({"TIMER_DELAY_MS": "5"}), NOW, TimerLimits(enabled=False))
    assert off is not None and off.status is PutStatus.WHEEL_TIMER_NOT_ENABLE
    leveled = message({"TIMER_DELAY_MS": "5", "DELAY": "2"})
    assert park_timer(leveled, NOW, TimerLimits()) is None
    assert leveled.topic == "T" and "TIMER_DELAY_MS" not in leveled.properties


def store_config(root: Path, **extra: object) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_timer_log=4096,
        **extra,  # type: ignore[arg-type]
    )


def test_timer_store_recovers_its_slots_and_queue_offset(tmp_path: Path) -> None:
    timers = TimerStore(store_config(tmp_path), slots_total=3600)
    timers.load(NOW, 0, 0)
    for i in range(100):  # 100 records cross segments of 4096 bytes (78 records each)
        timers.add(10_000 + i, 100, NOW + 2000 + i * 10, i, NOW)
    timers.queue_offset = 100
    timers.save_progress()
    timers.close()
    reopened = TimerStore(store_config(tmp_path), slots_total=3600)
    reopened.load(NOW, 0, 100)
    assert reopened.queue_offset == 100 and reopened.pending == 100
    last, units = reopened.slot_units(NOW + 2000, -1)
    assert [u.phy_offset for _pos, u in units] == [10_000 + i for i in range(100)]
    assert reopened.slot_units(NOW + 2000, last) == (last, [])
    reopened.close()


def test_timer_store_cuts_a_torn_tail_and_resumes_after_the_last_record(tmp_path: Path) -> None:
    timers = TimerStore(store_config(tmp_path), slots_total=3600)
    timers.load(NOW, 0, 0)
    for i in range(5):
        timers.add(1000 * i, 100, NOW + 3000, i, NOW)
    timers.close()  # the checkpoint still says queue offset 0: the log knows better
    segment = next((tmp_path / "timerlog").iterdir())
    with segment.open("r+b") as f:
        f.seek(5 * UNIT_SIZE)
        f.write(b"\x00\x00\x00\x34garbage")  # a torn record after the fifth
    reopened = TimerStore(store_config(tmp_path), slots_total=3600)
    reopened.load(NOW, 0, 10)
    assert reopened.queue_offset == 5
    assert reopened.log.max_offset == 5 * UNIT_SIZE
    reopened.close()


def test_a_timer_beyond_the_roll_window_rolls(tmp_path: Path) -> None:
    timers = TimerStore(store_config(tmp_path, timer_roll_window_slot=10), slots_total=3600)
    timers.load(NOW, 0, 0)
    at = timers.add(1, 100, NOW + 3_600_000, 0, NOW)
    assert at == NOW + 10_000
    _last, units = timers.slot_units(at, -1)
    assert units[0][1].rolls and units[0][1].deliver_ms == at
    timers.close()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("deliver_at_ms", "1700000000000", "must be an int, not str"),
        ("delay_ms", True, "must be an int, not bool"),
        ("delay_ms", 2**63, "outside Java's long range"),
    ],
)
def test_the_client_refuses_a_timer_of_the_wrong_type(
    field: str, value: object, words: str
) -> None:
    msg = Message("T", b"x", **{field: value})  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match=words):
        check_message(msg)


def test_the_client_sends_the_timer_properties() -> None:
    props = Message("T", b"x", deliver_at_ms=NOW, delay_ms=300).all_properties()
    assert (props["TIMER_DELIVER_MS"], props["TIMER_DELAY_MS"]) == (str(NOW), "300")


def test_the_dashboard_shows_the_timers_pending() -> None:
    row = _broker_row(
        BrokerAddress("c", "broker-a", 0, "127.0.0.1:1"), {"timerCongestNum": "7"}, None
    )
    assert row["timersPending"] == 7
