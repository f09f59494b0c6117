"""The renewal table of push consumers' messages (broker/proxy/renewal.py), sans-IO: which are
due, RocketMQ's renewal steps, what an ack or a gone client takes out."""

from __future__ import annotations

from tidemq.broker.pop.receipt import ReceiptHandle, TopicType
from tidemq.broker.proxy.renewal import RENEW_STEPS_MS, Renewals, renew_step_ms

KEY = ("client-1", "G")


def handle(pop_time: int, invisible: int, offset: int = 0) -> str:
    return ReceiptHandle(
        offset, pop_time, invisible, 0, TopicType.NORMAL, "b", 0, offset, 100
    ).encode()


def test_rocketmqs_steps_then_an_hour_each_time() -> None:
    assert [renew_step_ms(n) for n in range(8)] == [*RENEW_STEPS_MS, 3_600_000, 3_600_000]
    assert RENEW_STEPS_MS[:3] == (60_000, 180_000, 300_000)
    assert renew_step_ms(-1) == 60_000


def test_due_renewed_removed() -> None:
    table = Renewals()
    table.add(KEY, "m1", "T", handle(0, 60_000), 0)
    table.add(KEY, "m2", "T", handle(0, 20_000, 1), 0)
    table.add(("client-2", "G"), "m3", "T", "not a handle", 0)  # due at once: dropped on refusal
    assert len(table) == 3
    assert sorted(m for _k, m, _r in table.due(5_000, 10_000)) == ["m3"]
    due = {m: r for _k, m, r in table.due(10_000, 10_000)}
    assert sorted(due) == ["m2", "m3"]
    table.renewed(due["m2"], handle(10_000, 60_000, 1), 10_000)
    assert due["m2"].renew_times == 1 and due["m2"].next_visible_ms == 70_000
    assert sorted(m for _k, m, _r in table.due(10_000, 10_000)) == ["m3"]
    removed = table.remove(KEY, "m2")
    assert removed is not None and removed.handle == handle(10_000, 60_000, 1)
    assert table.remove(KEY, "m2") is None and table.remove(("x", "y"), "m1") is None


def test_a_gone_client_takes_out_all_of_its_groups_messages_only() -> None:
    table = Renewals()
    table.add(("client-1", "G"), "m1", "T", handle(0, 1000), 0)
    table.add(("client-1", "H"), "m2", "T", handle(0, 1000), 0)
    table.add(("client-2", "G"), "m3", "T", handle(0, 1000), 0)
    gone = table.forget_client("client-1")
    assert sorted(group for group, _r in gone) == ["G", "H"]
    assert len(table) == 1 and table.forget_client("client-1") == []
