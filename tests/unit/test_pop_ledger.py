"""The revive ledger (broker/pop/ledger.py): what comes back after an invisible time, fed the
revive queue's records in order. Each of RocketMQ's reported POP failures is a situation here."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.pop.ledger import Ack, Checkpoint, ReviveLedger

POP = 1_000_000
CK = Checkpoint("T", "G", 0, 10, POP, 30_000, (10, 11, 12))


def ack(offset: int, checkpoint: Checkpoint = CK, *, any_checkpoint: bool = False) -> Ack:
    c = checkpoint
    return Ack(c.topic, c.group, c.queue_id, c.start_offset, c.pop_time, offset, any_checkpoint)


def test_unacknowledged_offsets_come_back_after_the_deadline() -> None:
    ledger = ReviveLedger()
    ledger.checkpoint(CK, 0, POP)
    ledger.ack(ack(11), 1, POP + 5)
    assert ledger.in_flight("T", "G") == 2
    ledger.ack(ack(99, Checkpoint("T", "H", 0, 0, POP, 1, (0,))), 2, CK.deadline + 1)
    assert ledger.due(CK.deadline) == []  # not yet by the clock
    [revival] = ledger.due(CK.deadline + 1)
    assert revival.offsets == (10, 12)
    assert ledger.due(CK.deadline + 10) == []  # once


def test_a_ck_is_not_judged_before_records_past_its_deadline_are_read() -> None:
    """apache/rocketmq#7724: an ACK stored before the deadline but not read yet must count."""
    ledger = ReviveLedger()
    ledger.checkpoint(CK, 0, POP)
    assert ledger.due(CK.deadline + 60_000) == []  # the clock says due, the queue has not
    ledger.ack(ack(10), 1, CK.deadline - 1)
    ledger.ack(ack(11), 2, CK.deadline - 1)
    ledger.ack(ack(12), 3, CK.deadline - 1)
    assert ledger.due(CK.deadline + 60_000) == []  # all acknowledged: nothing revived
    assert ledger.revive_offset == 4


def test_the_revive_offset_is_the_oldest_open_checkpoint() -> None:
    """apache/rocketmq#5408: a finished CK releases the revive offset at once."""
    second = Checkpoint("T", "G", 1, 0, POP + 1, 30_000, (0,))
    ledger = ReviveLedger(start_position=100)
    ledger.checkpoint(CK, 100, POP)
    ledger.checkpoint(second, 101, POP + 1)
    assert ledger.revive_offset == 100
    for offset in (10, 11, 12):
        ledger.ack(ack(offset), 102, POP + 2)
    assert ledger.revive_offset == 101
    ledger.ack(ack(0, second), 103, POP + 3)
    assert ledger.revive_offset == 104


def test_a_restart_rereading_a_revived_checkpoint_does_not_revive_it_twice() -> None:
    ledger = ReviveLedger()
    ledger.checkpoint(CK, 0, POP)
    ledger.ack(ack(12), 1, CK.deadline + 5)  # late: 10 and 11 will come back
    [revival] = ledger.due(CK.deadline + 10)
    ledger.close(revival.checkpoint.key, 2, CK.deadline + 10)  # the CLOSE the service writes
    restarted = ReviveLedger(start_position=0)  # the revive offset was not persisted yet
    restarted.checkpoint(CK, 0, POP)
    restarted.ack(ack(12), 1, CK.deadline + 5)
    restarted.close(CK.key, 2, CK.deadline + 10)
    assert restarted.due(CK.deadline + 1_000_000) == []


def test_the_old_handle_still_acknowledges_after_a_change_of_invisible_duration() -> None:
    """apache/rocketmq#9583: ChangeInvisibleDuration writes a new CK, then acks the old one;
    the consumer's ack with the handle it had still ends the message."""
    renewed = Checkpoint("T", "G", 0, 10, POP + 20_000, 60_000, (11,))
    ledger = ReviveLedger()
    ledger.checkpoint(CK, 0, POP)
    ledger.checkpoint(renewed, 1, POP + 20_000)
    ledger.ack(ack(11), 2, POP + 20_000)  # the change ends offset 11 in the old CK
    ledger.ack(ack(11, any_checkpoint=True), 3, POP + 25_000)  # the consumer, old handle
    ledger.ack(ack(10), 4, POP + 25_000)
    ledger.ack(ack(12), 5, POP + 25_000)
    ledger.ack(ack(0, Checkpoint("X", "G", 0, 0, 0, 0, (0,))), 6, POP + 200_000)
    assert ledger.due(POP + 200_000) == []
    assert ledger.in_flight("T", "G") == 0


def test_an_ack_read_before_its_checkpoint_is_kept_for_it() -> None:
    ledger = ReviveLedger()
    ledger.ack(ack(10), 0, POP)
    ledger.checkpoint(CK, 1, POP)
    ledger.ack(ack(0, Checkpoint("X", "G", 0, 0, 0, 0, (0,))), 2, CK.deadline + 1)
    [revival] = ledger.due(CK.deadline + 1)
    assert revival.offsets == (11, 12)


@given(st.sets(st.sampled_from((10, 11, 12))), st.integers(0, 60_000))
def test_exactly_the_offsets_acknowledged_before_judgement_stay_away(
    acked: set[int], delay: int
) -> None:
    ledger = ReviveLedger()
    ledger.checkpoint(CK, 0, POP)
    position = 1
    for offset in sorted(acked):
        ledger.ack(ack(offset), position, POP + delay)
        position += 1
    ledger.ack(ack(0, Checkpoint("X", "G", 0, 0, 0, 0, (0,))), position, CK.deadline + 1)
    revived = {o for r in ledger.due(CK.deadline + 1) for o in r.offsets}
    in_time = acked if delay <= CK.invisible_time else set()
    assert revived == {10, 11, 12} - acked or (
        delay > CK.invisible_time and revived <= {10, 11, 12}
    )
    assert revived.isdisjoint(in_time)
