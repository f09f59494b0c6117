"""What a remoting server's connections may hold, sans-IO (issue 30 item 4): the bytes of their
partly received frames, each and all together, and how long a frame may take to arrive.

A connection's codec (`FrameDecoder.buffered`, `FrameReceiver.held`) says after each read how
many bytes it holds of a frame not yet complete; `FrameHold.update` is told that figure, and is
the one place those bytes are counted:

- `max_partial_frame_bytes`: one connection holding more is closed (a frame's length field is
  checked against `max_frame_size` as soon as it arrives; this bounds the bytes actually kept).
- `partial_frame_budget`: the bytes of every connection of the server together
  (`PartialFrames.total`). A read that grows a connection's partial frame past `SMALL_PARTIAL`
  while the total is over the budget closes that connection. Closed rather than paused: a
  paused connection keeps what it holds, so the budget would stay spent until the frame
  timeout, and the legitimate connection that happened to arrive last would be the one to wait
  for it; closing gives the memory back at once, and a client retries. Partial frames of up to
  `SMALL_PARTIAL` bytes (a small request split by TCP) are counted but never refused, so an
  attack that spends the budget cannot stop small requests: the total stays under
  `partial_frame_budget + SMALL_PARTIAL x connections`.
- `frame_timeout`: a frame whose first bytes came this many seconds ago and which is still not
  complete closes its connection: checked on each read of it and, for a peer that stopped
  sending, by the server's periodic sweep (`FrameHold.overdue`; every quarter of the timeout, at
  most every 10 s).

The clock is the caller's (`now`, seconds of `time.monotonic`), so tests feed time as they feed
bytes. A frame's clock starts with the read that brought its first bytes: a read that completed
a frame and left a tail started a new frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tidemq.broker.remoting.close_log import CloseLog
from tidemq.client.remoting.frame import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "DEFAULT_LIMITS",
    "SMALL_PARTIAL",
    "FrameHold",
    "PartialFrames",
    "ReceiveLimits",
]

# A partial frame this small is never refused for the budget (see the module docstring).
SMALL_PARTIAL: Final = 64 * 1024

# The configuration keys that set these limits (broker/config.py RemotingConfig), for log lines.
_KEY_PER_CONNECTION: Final = "serverMaxPartialFrameBytes"
_KEY_BUDGET: Final = "serverPartialFrameBudgetBytes"
_KEY_TIMEOUT: Final = "serverFrameReceiveTimeoutSeconds"


@dataclass(frozen=True, slots=True)
class ReceiveLimits:
    """A server's bounds; the defaults are RemotingConfig's."""

    max_connections: int = 10_000
    max_partial_frame_bytes: int = DEFAULT_MAX_FRAME_SIZE
    partial_frame_budget: int = 256 * 1024 * 1024
    frame_timeout: float = 30.0


DEFAULT_LIMITS: Final = ReceiveLimits()


class PartialFrames:
    """The bytes held in partly received frames by all the connections of one server."""

    def __init__(self, limits: ReceiveLimits, close_log: CloseLog) -> None:
        self.limits = limits
        self.close_log = close_log
        self.total = 0

    def hold(self) -> FrameHold:
        """The account of one new connection."""
        return FrameHold(self)


class FrameHold:
    """One connection's partial frame: how many bytes it holds and since when."""

    __slots__ = ("_account", "held", "since")

    def __init__(self, account: PartialFrames) -> None:
        self._account = account
        self.held = 0
        self.since = 0.0  # when the partial frame's first bytes came (held > 0)

    @property
    def close_log(self) -> CloseLog:
        return self._account.close_log

    def update(self, held: int, completed: bool, now: float) -> tuple[str, str] | None:
        """After a read at `now`, the connection holds `held` bytes of an incomplete frame;
        `completed`: the read completed a frame (so a tail began a new one). Returns why the
        connection must close, as (reason, detail), or None."""
        account = self._account
        grown = held - self.held
        account.total += grown
        self.held = held
        if not held:
            self.since = 0.0
            return None
        if completed or not self.since:
            self.since = now
        limits = account.limits
        if held > limits.max_partial_frame_bytes:
            return (
                "partial frame over the per-connection limit",
                f"{held} bytes held, {_KEY_PER_CONNECTION}={limits.max_partial_frame_bytes}",
            )
        if grown > 0 and held > SMALL_PARTIAL and account.total > limits.partial_frame_budget:
            return (
                "partial frames over the budget",
                f"{held} bytes held here, {account.total} in all, "
                f"{_KEY_BUDGET}={limits.partial_frame_budget}",
            )
        return self.overdue(now)

    def overdue(self, now: float) -> tuple[str, str] | None:
        """(reason, detail) when the partial frame has taken longer than the frame timeout."""
        if not self.held:
            return None
        waited = now - self.since
        timeout = self._account.limits.frame_timeout
        if waited <= timeout:
            return None
        return (
            "frame receive timeout",
            f"{self.held} bytes of a frame in {waited:.1f} s, {_KEY_TIMEOUT}={timeout:g}",
        )

    def release(self) -> None:
        """The connection dropped its partial frame (it closes): its bytes leave the total."""
        self._account.total -= self.held
        self.held = 0
        self.since = 0.0
