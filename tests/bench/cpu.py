"""CPU time of a broker process, its children and this process, from Linux /proc.

`BrokerCpu.now(pid)` reads a snapshot; the difference of two snapshots divided by the messages
handled between them is the CPU cost per message of each part (`per_message`, microseconds).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BrokerCpu:
    """CPU seconds so far: the broker's user and system time, its children's, this process's."""

    broker_user: float
    broker_system: float
    workers: float
    client: float

    @classmethod
    def now(cls, broker_pid: int) -> BrokerCpu:
        tick = os.sysconf("SC_CLK_TCK")
        user, system = user_system(broker_pid)
        children = Path(f"/proc/{broker_pid}/task/{broker_pid}/children").read_text().split()
        workers = sum(sum(user_system(int(pid))) for pid in children)
        own = os.times()
        return cls(user / tick, system / tick, workers / tick, own.user + own.system)

    def per_message(self, before: BrokerCpu, messages: int) -> dict[str, float]:
        """Microseconds per message since `before`, by part."""
        return {
            name: (getattr(self, name) - getattr(before, name)) / messages * 1e6
            for name in ("broker_user", "broker_system", "workers", "client")
        }


def user_system(pid: int) -> tuple[int, int]:
    """User and system clock ticks of process `pid` so far (Linux /proc), 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0
    return int(fields[11]), int(fields[12])


def describe(cpu: dict[str, float]) -> str:
    """`per_message`'s figures as one line: the broker's (and what it would sustain on a core)."""
    broker = cpu["broker_user"] + cpu["broker_system"]
    return (
        f"broker CPU {broker:5.1f} us/msg "
        f"(user {cpu['broker_user']:.1f}, system {cpu['broker_system']:.1f}; "
        f"= {1e6 / broker:,.0f} msg/s per core), index worker {cpu['workers']:.1f}, "
        f"client {cpu['client']:.1f} us/msg"
    )
