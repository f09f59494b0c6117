"""The live charts' arithmetic (client/dashboard/sampler.py) and the page's topic and group
labels (views.py): rates between samples, series that start late, restarted counters."""

from __future__ import annotations

from typing import Any, cast

from tidemq.client.admin.api import AdminClient
from tidemq.client.dashboard.sampler import Sample, Sampler
from tidemq.client.dashboard.views import group_is_system, topic_kind


def sampler_with(*samples: Sample) -> Sampler:
    sampler = Sampler(cast(AdminClient, object()), interval=2.0, keep=10)
    sampler.samples.extend(samples)
    return sampler


def test_rates_are_changes_over_the_time_between_samples() -> None:
    snapshot: dict[str, Any] = sampler_with(
        Sample(100.0, {"a/0": 10}, {"a/0": 0}, {"T": 5}, {"G": 3}),
        Sample(102.0, {"a/0": 30}, {"a/0": 4}, {"T": 5}, {"G": 7}),
        Sample(106.0, {"a/0": 70, "b/0": 1}, {"a/0": 4}, {"T": 25, "U": 0}, {"G": 0}),
    ).snapshot()
    assert snapshot["times"] == [102000, 106000]
    assert snapshot["brokerIn"] == {"a/0": [10.0, 10.0], "b/0": [None, None]}
    assert snapshot["brokerOut"] == {"a/0": [2.0, 0.0]}
    assert snapshot["topicIn"] == {"T": [0.0, 5.0], "U": [None, None]}
    assert snapshot["groupLag"] == {"G": [7.0, 0.0]}  # a level, not a rate
    assert snapshot["interval"] == 2.0 and snapshot["error"] == ""


def test_a_series_starts_late_and_a_restarted_counter_never_goes_negative() -> None:
    snapshot = sampler_with(
        Sample(0.0, {"a/0": 500}),
        Sample(1.0, {"a/0": 3, "b/0": 0}),
        Sample(2.0, {"a/0": 9, "b/0": 4}),
    ).snapshot()
    assert snapshot["brokerIn"] == {"a/0": [0.0, 6.0], "b/0": [None, 4.0]}


def test_one_sample_draws_nothing_yet() -> None:
    snapshot = sampler_with(Sample(0.0, {"a/0": 1})).snapshot()
    assert snapshot["times"] == [] and snapshot["brokerIn"] == {}


def test_topic_kinds_and_system_groups() -> None:
    own = frozenset({"DefaultCluster", "broker-a"})
    assert topic_kind("orders", own) == "normal"
    assert topic_kind("%RETRY%g", own) == "retry"
    assert topic_kind("%DLQ%g", own) == "dlq"
    for system in ("TBW102", "SCHEDULE_TOPIC_XXXX", "broker-a", "DefaultCluster_REPLY_TOPIC"):
        assert topic_kind(system, own) == "system"
    assert topic_kind("other_REPLY_TOPIC", own) == "normal"
    assert group_is_system("TOOLS_CONSUMER") and group_is_system("CID_RMQ_SYS_TRANS")
    assert not group_is_system("orders-consumers")


def test_what_the_newest_sample_lacks_leaves_the_charts_and_their_legends() -> None:
    """A broker stopped (no runtime info), a topic deleted, a group gone: not in the newest
    sample, so no longer a series, however long they were charted before."""
    snapshot = sampler_with(
        Sample(0.0, {"a/0": 1, "a/1": 1}, {"a/0": 0, "a/1": 0}, {"T": 1, "Gone": 1}, {"G": 1}),
        Sample(1.0, {"a/0": 2, "a/1": 2}, {"a/0": 0, "a/1": 0}, {"T": 2, "Gone": 2}, {"G": 2}),
        Sample(2.0, {"a/0": 3}, {"a/0": 0}, {"T": 3}, {}),
    ).snapshot()
    assert snapshot["brokerIn"] == {"a/0": [1.0, 1.0]}
    assert snapshot["brokerOut"] == {"a/0": [0.0, 0.0]}
    assert snapshot["topicIn"] == {"T": [1.0, 1.0]}
    assert snapshot["groupLag"] == {}
