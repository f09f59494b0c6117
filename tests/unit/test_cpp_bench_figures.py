"""The C++ client bench's figures from its senders' reports (tests/bench/cpp_bench.py)."""

from __future__ import annotations

import math

from tests.bench.cpp_bench import SenderReport, cpp_case, percentiles_ms
from tests.bench.cpu import BrokerCpu


def report(
    sent: int, started: float, ended: float, latencies: list[int], **failed: int
) -> SenderReport:
    return SenderReport.of(
        {
            "event": "done",
            "sent": sent,
            "failed": failed,
            "started": started,
            "ended": ended,
            "cpu": 0.25,
            "latencies_us": latencies,
        }
    )


def test_percentiles_are_the_sorted_positions_in_milliseconds() -> None:
    latencies = list(range(1000, 0, -1))  # 1..1000 us, unsorted
    assert percentiles_ms(latencies) == (0.501, 0.991)
    assert all(math.isnan(v) for v in percentiles_ms([]))


def test_a_case_adds_up_every_sender_over_the_span_of_all_of_them() -> None:
    reports = [
        report(100, 10.0, 12.0, [500] * 100),
        report(300, 11.0, 14.0, [1500] * 296 + [9000] * 6, FLUSH_SLAVE_TIMEOUT=2),
    ]
    before = BrokerCpu(1.0, 0.5, 0.0, 9.0)
    after = BrokerCpu(1.04, 0.52, 0.004, 9.5)
    case = cpp_case(reports, before, after)
    assert case.sent == 400
    assert case.failed == {"FLUSH_SLAVE_TIMEOUT": 2}
    assert case.rate == 100.0  # 400 sends from 10.0 to 14.0
    assert math.isclose(case.broker_us, 150.0)  # 0.06 s of broker CPU over 400 sends
    assert math.isclose(case.cpu["workers"], 10.0)
    # the client is the senders' own CPU, not this process's
    assert math.isclose(case.cpu["client"], 1250.0)
    assert (case.p50_ms, case.p99_ms) == (1.5, 9.0)
