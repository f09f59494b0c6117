"""store/common/retry_log.py: a loop failing on every pass logs one traceback, then a line a
minute, then one line when it works again."""

from __future__ import annotations

import logging

import pytest

from tidemq.common.retry_log import RetryLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_run_of_failures_logs_one_traceback_then_a_line_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    retries = RetryLog(logging.getLogger("t"), "timer delivery", clock=clock)
    with caplog.at_level(logging.WARNING, "t"):
        for _ in range(240):  # two minutes at two passes a second
            try:
                raise OSError(28, "No space left on device")
            except OSError as exc:
                retries.failed(exc, "it starts again from the cursor")
            clock.now += 0.5
        retries.succeeded()
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("ERROR", "timer delivery failed; it starts again from the cursor", True),
        (
            "ERROR",
            "timer delivery: failed 120 more times in the last 60 s "
            "(last: OSError: [Errno 28] No space left on device)",
            False,
        ),
        ("WARNING", "timer delivery works again after 240 failed passes", False),
    ]


def test_a_failure_long_after_the_last_starts_a_new_run_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    retries = RetryLog(logging.getLogger("t"), "timer delivery", clock=clock)
    with caplog.at_level(logging.WARNING, "t"):
        for _ in range(2):
            retries.failed(ValueError("bad"), "again")
            clock.now += 3600
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 2
