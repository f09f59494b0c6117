"""The scale section of `make bench` (tests/bench/scale_bench.py), scaled down and seeded.

A real namesrvd and brokerd: 6,000 topics created in lists of 500, single creates at 1,000 and
at 6,000 topics (then in turn with a second broker of 1,000 topics), route queries and sends to
random topics, a broker restart until the last topic is routable again, then 200 idle clients
heartbeating every 2 s. What it proves: every step of the section runs and yields a figure (the
lists are served, every route and send answers, the restarted broker registers its whole table,
no idle client is dropped). Timing targets are `make bench`'s to report, never asserted here.
"""

from __future__ import annotations

import math

from tests.bench.scale_bench import ScaleKnobs, measure

KNOBS = ScaleKnobs(
    topics=6000,
    batch=500,
    samples=3,
    pairs=5,
    sends=200,
    routes=500,
    clients=200,
    groups=20,
    heartbeat_interval=2.0,
    seed=34,
    early=1000,
    # Small ConsumeQueue files: the sends create 200 queues.
    broker_overrides=("mappedFileSizeConsumeQueue=20000",),
)


def test_the_scale_section_measures_every_figure() -> None:
    results = {result.name: result for result in measure(KNOBS)}
    assert "topic creation (lists of 500)" in results  # the batch request was served
    # Read in clock ticks (10 ms): 5 single creates on the small broker may read 0 here.
    cpu_ratio = results.pop("broker CPU per single create, 6,000 / 1,000 topics")
    assert cpu_ratio.target is None
    for result in results.values():
        assert math.isfinite(result.value) and result.value >= 0, result
    assert results["one more create at 6,000 topics"].value > 0
    # The target compares medians taken in turn with a second broker of 1,000 topics.
    beside = results["one more create at 1,000 topics, in turn with it"].value
    ratio = results["one more create, 6,000 / 1,000 topics"]
    assert beside > 0 and ratio.target == 1.25
    assert ratio.value == results["one more create at 6,000 topics"].value / beside
    first, last = results["creation rate, first 10 %"], results["creation rate, last 10 %"]
    assert results["creation rate, last 10 % / first 10 %"].value == last.value / first.value
    cpu_first = results["creation CPU per topic, first 10 %"].value
    cpu_last = results["creation CPU per topic, last 10 %"].value
    assert cpu_first > 0 and cpu_last > 0  # the daemons' CPU was read
    assert results["creation CPU per topic, last 10 % / first 10 %"].value == cpu_last / cpu_first
    per_cpu = results["creation rate per daemon CPU second, last 10 % / first 10 %"]
    assert per_cpu.value == cpu_first / cpu_last and per_cpu.target == 0.8  # the target
    assert results["creation rate, last 10 % / first 10 %"].target is None  # reported only
    assert results["broker restart: listening and routable"].value > 0
    assert results["broker restart: broker CPU until routable"].value > 0
    # Read in clock ticks (10 ms) from /proc: the name server takes a registration of 6,000
    # topics in a few milliseconds, so this span may read 0 here (at 1M topics it is ~1 s).
    assert "broker restart: name server CPU until routable" in results
    assert results["broker CPU per send to a random topic"].value > 0
