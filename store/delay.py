"""Delay levels: `messageDelayLevel`, a space-separated list like `1s 5s 10s 30s 1m 2h 1d`."""

from __future__ import annotations

from store.errors import ConfigError

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """Milliseconds for levels 1..n (index 0 is level 1)."""
    levels: list[int] = []
    for item in text.split():
        unit = _UNIT_MS.get(item[-1:])
        try:
            amount = int(item[:-1])
        except ValueError:
            amount = -1
        if unit is None or amount < 0:
            raise ConfigError(f"messageDelayLevel: bad level {item!r} in {text!r}")
        levels.append(amount * unit)
    if not levels:
        raise ConfigError("messageDelayLevel: no levels")
    return levels
