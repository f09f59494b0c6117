"""Is this broker serving? What GET /health on the metrics port answers (issue 30 item 3).

`check_health` reads the broker's state, on the event loop, at request time:

- problems (any: HTTP 503): dispatch is stuck (a failure being retried: store/dispatch_faults.py;
  or a malformed record stopped it), the disk refuses writes (diskSpaceWarningLevelRatio
  reached, a CommitLog write refused by the disk in the last SPACE_REFUSED_WINDOW seconds: an
  append for space, a slave's append of replicated bytes; or dispatch retrying a disk error),
  a SYNC_MASTER has no slave in sync (the reason its sends would get SLAVE_NOT_AVAILABLE),
  controller mode's SyncStateSet is below minInSyncReplicas.
- notes (HTTP 200, the broker serves): queues quarantined by dispatch, delayed messages skipped
  as undeliverable, an index worker that keeps dying at the same offset (store/index_worker.py).

The answer (`Health.http`): 200 `text/plain` "serving\\n" (then one "note: ..." line each), or
503 `application/json` {"status": "failing", "problems": [...], "notes": [...]}.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Final, Protocol

from tidemq.store.config import BrokerRole
from tidemq.store.message_store import MessageStore

SPACE_REFUSED_WINDOW: Final = 60.0


class SlaveCheck(Protocol):
    """The SYNC_MASTER's acknowledgement service (ha/group_transfer.py)."""

    def slave_problem(self, master_put_where: int) -> str | None: ...


@dataclass(slots=True)
class Health:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    undeliverable: int = 0  # delayed messages the schedule skipped since it started

    @property
    def serving(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line for the runtime info: "serving", or "failing: <problem>; <problem>"."""
        return "serving" if self.serving else "failing: " + "; ".join(self.problems)

    def http(self) -> tuple[bytes, bytes, bytes]:
        """(status line, content type, body) of the answer to GET /health."""
        if self.serving:
            lines = ["serving", *(f"note: {note}" for note in self.notes)]
            return b"200 OK", b"text/plain; charset=utf-8", "\n".join(lines).encode() + b"\n"
        body = {"status": "failing", "problems": self.problems, "notes": self.notes}
        return (
            b"503 Service Unavailable",
            b"application/json",
            json.dumps(body, ensure_ascii=False).encode() + b"\n",
        )


def check_health(
    store: MessageStore,
    *,
    sync_master: SlaveCheck | None = None,
    undeliverable: int = 0,
    now: float | None = None,
) -> Health:
    """`sync_master`: the acknowledgement service when this broker is a SYNC_MASTER with HA
    started; `undeliverable`: delayed messages the schedule skipped."""
    health = Health(undeliverable=undeliverable)
    problems = health.problems
    reput = store.reput
    faults = reput.faults
    stuck = faults.stuck
    if stuck is not None:
        problems.append(stuck)
    if reput.stalled_at >= 0:
        problems.append(f"dispatch stopped at a malformed record at physical offset "
                        f"{reput.stalled_at}")  # fmt: skip
    now = time.monotonic() if now is None else now
    if store.disk.full:
        problems.append(
            f"disk refused: {store.disk.used_ratio:.0%} used, writes refused "
            f"(diskSpaceWarningLevelRatio {store.config.disk_space_warning_level_ratio:.0%})"
        )
    elif now - store.commitlog.disk_refused_at < SPACE_REFUSED_WINDOW:
        ago = now - store.commitlog.disk_refused_at
        problems.append(f"disk refused: a CommitLog write was refused {ago:.0f} s ago")
    elif faults.disk_refused:
        problems.append("disk refused: dispatch cannot write a ConsumeQueue")
    if store.role is BrokerRole.SYNC_MASTER and sync_master is not None:
        missing = sync_master.slave_problem(store.max_phy_offset)
        if missing is not None:
            problems.append(f"SYNC_MASTER without a slave in sync: {missing}")
    if store.in_sync_replicas < store.min_in_sync_replicas:
        problems.append(
            f"in-sync replicas not enough: the SyncStateSet has {store.in_sync_replicas}, "
            f"minInSyncReplicas is {store.min_in_sync_replicas}"
        )
    if faults.quarantined:
        health.notes.append(
            f"dispatch quarantined {len(faults.quarantined)} queues, "
            f"{faults.quarantined_records} records skipped: {faults.listing()}"
        )
    if undeliverable:
        health.notes.append(f"{undeliverable} delayed messages skipped as undeliverable")
    worker = store.index_worker
    loop = worker.exit_loop if worker is not None else None
    if loop is not None:
        health.notes.append(loop)
    return health
