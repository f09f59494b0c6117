"""One log line per connection a server closes, at a bounded rate (issue 30 item 4).

A server closing thousands of hostile connections at once must not write thousands of lines a
second. `CloseLog.closed(reason, line)` logs `line` (which names the peer) while fewer than
`burst` closes were logged in the current `interval`; past that it counts the close under its
`reason`, and the first close or `flush()` after the interval logs one summary line:

    remoting: 1990 more connections closed in the last 1.0 s: 1985 partial frames over the
    budget, 5 frame receive timeout

so at most `burst` + 1 lines come out per interval, whatever the number of closes.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Final

__all__ = ["CloseLog"]

INTERVAL: Final = 1.0
BURST: Final = 10


class CloseLog:
    def __init__(
        self,
        logger: logging.Logger,
        name: str,
        *,
        interval: float = INTERVAL,
        burst: int = BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.name = name
        self.interval = interval
        self.burst = burst
        self._clock = clock
        self._window_end = 0.0
        self._window_start = 0.0
        self._logged = 0  # lines logged in the current window
        self._suppressed: Counter[str] = Counter()  # closes counted, by reason

    def closed(self, reason: str, line: str, level: int = logging.WARNING) -> None:
        """A connection closed because of `reason` (a few words, counted in summaries); `line`
        says which and why, with the figures, at `level`."""
        now = self._clock()
        if now >= self._window_end:
            self._summarise(now)
            self._window_start, self._window_end, self._logged = now, now + self.interval, 0
        if self._logged < self.burst:
            self._logged += 1
            self.logger.log(level, "%s: %s", self.name, line)
        else:
            self._suppressed[reason] += 1

    def flush(self, *, final: bool = False) -> None:
        """Log the summary of a finished interval now (a periodic task calls this), or with
        `final` of the current one too (the server stops)."""
        now = self._clock()
        if final or now >= self._window_end:
            self._summarise(now)

    def _summarise(self, now: float) -> None:
        suppressed = self._suppressed
        if not suppressed:
            return
        reasons = ", ".join(f"{count} {reason}" for reason, count in suppressed.most_common())
        self.logger.warning(
            "%s: %d more connections closed in the last %.1f s: %s",
            self.name,
            sum(suppressed.values()),
            now - self._window_start,
            reasons,
        )
        suppressed.clear()
