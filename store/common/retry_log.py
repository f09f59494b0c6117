"""The log of a loop that retries what failed: one traceback, then one line a minute.

A background loop (the timer wheel's enqueue and delivery) that fails on every pass would
otherwise log a traceback twice a second for as long as the cause lasts. `RetryLog.failed()`
logs the first failure of a run of failures with its traceback; while the failures go on it
logs one line per `interval`:

    timer delivery: failed 118 more times in the last 60 s (last: OSError: [Errno 28] ...)

and `succeeded()` after a run logs one line saying how many passes failed in all. A loop
that only ever returns by failing (and so never calls `succeeded()`) starts a new run when its
last failure is `interval` old: that one gets its traceback again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

__all__ = ["RetryLog"]

INTERVAL: Final = 60.0


class RetryLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        self.interval = interval
        self.clock = clock
        self.failures = 0  # of the current run
        self._unlogged = 0
        self._logged_at = 0.0
        self._failed_at = 0.0

    def failed(self, exc: BaseException, retry: str) -> None:
        """Call from the `except` block of a failed pass; `retry` says what happens next."""
        now = self.clock()
        if self.failures and now - self._failed_at >= self.interval:
            self.succeeded()
        self._failed_at = now
        self.failures += 1
        if self.failures == 1:
            self.logger.error("%s failed; %s", self.what, retry, exc_info=exc)
            self._logged_at = now
            return
        self._unlogged += 1
        if now - self._logged_at >= self.interval:
            self.logger.error(
                "%s: failed %d more times in the last %.0f s (last: %s: %s)",
                self.what,
                self._unlogged,
                now - self._logged_at,
                type(exc).__name__,
                exc,
            )
            self._unlogged = 0
            self._logged_at = now

    def succeeded(self) -> None:
        """Call after a pass that did not fail."""
        if self.failures > 1:
            self.logger.warning("%s works again after %d failed passes", self.what, self.failures)
        elif self.failures == 1:
            self.logger.warning("%s works again", self.what)
        self.failures = 0
        self._unlogged = 0
