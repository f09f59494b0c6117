"""What HA gives the store when it attaches (`MessageStore.attach_replication`).

ha.master.HAService builds a `Replication`; the broker hands it to the store once HA has started
and detaches it before HA stops. ha.GroupTransferService is both the SYNC_MASTER waiter and the
dispatch cap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol


class ReplicationHook(Protocol):
    """What the store asks of HA on a SYNC_MASTER, for a send that waits for its store."""

    def is_slave_ok(self, master_put_where: int) -> bool: ...

    def wait_for_slave(self, next_offset: int) -> Awaitable[bool]: ...


class ReplicatedCap(Protocol):
    """haReadReplicatedOnly: dispatch stays below what a slave has acknowledged."""

    @property
    def acked_offset(self) -> int: ...

    @property
    def ack_listeners(self) -> list[Callable[[int], None]]: ...


@dataclass(frozen=True, slots=True)
class Replication:
    on_data: Callable[[], None]  # readers may see more CommitLog bytes (wakes the HA writers)
    sync: ReplicationHook | None = None  # SYNC_MASTER: sends that wait for a slave
    dispatch_cap: ReplicatedCap | None = None  # haReadReplicatedOnly
