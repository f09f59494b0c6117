"""What dispatch does when a record cannot be put in its ConsumeQueue (issue 30 item 3).

Dispatch follows the CommitLog in order, so one record that always fails would hold back every
record after it. The policy, by the failure's cause:

- Environment (`ENVIRONMENT_ERRNOS`: no space, quota, read-only or failing disk, no file
  descriptors or memory): the store itself is refused; dispatch retries the record every second
  for as long as it lasts (skipping would lose ConsumeQueue units for good over something that
  passes), and says so: `stuck` is set, the ERROR line is repeated every `REPORT_INTERVAL`.
- A failure not tied to one queue (a listener, the scan: `DispatchFailure.skippable` False):
  nothing to quarantine, so retried and reported the same way.
- Anything else (the record's queue cannot be opened: a plain file where its folder goes,
  FileExistsError / NotADirectoryError; a name the file system refuses, "embedded null byte",
  ENAMETOOLONG; or a bug in writing that queue): bound to the record, not to the moment.
  After `QUARANTINE_AFTER` consecutive failed attempts on the same queue (one a second at run
  time; back to back when recovery re-dispatches at load), the queue (topic, queue id) is
  quarantined: dispatch skips its records from then on, counting each; the CommitLog keeps
  their bytes. Every other queue keeps flowing.

The decision depends only on the failing queue, the cause's class and the attempt count, never
on timing, so a master and its slave (which dispatch the same bytes independently) end the same
way, and so does recovery when it re-dispatches the record at a restart.

The quarantined queues are kept in the store root's `dispatchQuarantine.json` (written when a
queue is quarantined and at a clean stop), so that a restart skips their records at once and
still lists them, and so that their next queue offset (which the CommitLog otherwise takes from
the ConsumeQueues, and they have none) goes on from where it was:

    {"queues": [{"topic": "T", "queueId": 0, "physicalOffset": 4096,
                 "cause": "NotADirectoryError: ...", "records": 3, "nextQueueOffset": 3}]}

To lift a quarantine once its cause is removed, stop the broker, delete the file (or the queue's
entry) and start it: the queue's ConsumeQueue starts at the next record dispatch meets (the
records skipped before are padded over, their bytes stay in the CommitLog). A file that cannot
be read is moved aside (`.unreadable`) with an ERROR line, and dispatch quarantines again what
it cannot write.

`DispatchFaults` is sans-IO apart from its log lines: the caller passes the time.
"""

from __future__ import annotations

import errno
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Final

log = logging.getLogger("tidemq.store.dispatch")

QUARANTINE_AFTER: Final = 5  # failed attempts on one queue before it is quarantined
REPORT_INTERVAL: Final = 30.0  # seconds between two ERROR lines about the same ongoing fault
QUARANTINE_LISTED: Final = 32  # quarantined queues listed in the runtime info (all are counted)
QUARANTINE_FILE: Final = "dispatchQuarantine.json"  # in the store root

ENVIRONMENT_ERRNOS: Final = frozenset(
    (
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EIO,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
    )
)
DISK_ERRNOS: Final = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO))


class DispatchFailure(Exception):
    """A record's dispatch to the ConsumeQueue of (topic, queue_id) raised `__cause__`.

    `skippable` False: the failure is not tied to one queue (a listener, the scan), so there is
    nothing to quarantine and it is retried while it lasts.
    """

    def __init__(
        self, topic: str, queue_id: int, physical_offset: int, *, skippable: bool = True
    ) -> None:
        super().__init__(topic, queue_id, physical_offset)
        self.topic = topic
        self.queue_id = queue_id
        self.physical_offset = physical_offset
        self.skippable = skippable

    def __str__(self) -> str:
        where = f"topic {self.topic!r} queue {self.queue_id}, " if self.skippable else ""
        return f"dispatch failed ({where}physical offset {self.physical_offset}): {self.cause}"

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.queue_id)

    @property
    def cause(self) -> str:
        exc = self.__cause__
        return f"{type(exc).__name__}: {exc}" if exc is not None else "unknown"

    @property
    def environment(self) -> bool:
        return is_environment(self.__cause__)


def is_environment(exc: BaseException | None) -> bool:
    """True for failures of the store's disk or process, which retrying may get past."""
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


def is_disk(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


@dataclass(slots=True)
class Quarantined:
    """A queue dispatch skips: where and why it was first refused, and records skipped."""

    topic: str
    queue_id: int
    physical_offset: int  # of the first record that could not be dispatched
    cause: str
    records: int = 0
    next_queue_offset: int = 0  # one past the highest queue offset of a record skipped

    def describe(self) -> str:
        return (
            f"{self.topic!r}-{self.queue_id} from physical offset {self.physical_offset}: "
            f"{self.cause} ({self.records} records skipped)"
        )


@dataclass(slots=True)
class _Ongoing:
    key: tuple[str, int]
    physical_offset: int
    cause: str
    environment: bool
    disk: bool
    attempts: int
    since: float
    reported: float


@dataclass(slots=True)
class DispatchFaults:
    """Failed attempts, the quarantined queues, and the counters operators see."""

    quarantine_after: int = QUARANTINE_AFTER
    errors_total: int = 0  # failed dispatch attempts
    quarantined_records: int = 0  # records skipped because their queue is quarantined
    quarantined: dict[tuple[str, int], Quarantined] = field(default_factory=dict)
    _ongoing: _Ongoing | None = None
    _skipped_since_report: int = 0
    _skip_reported: float = float("-inf")

    # --- what dispatch calls ------------------------------------------------------------------

    def failed(self, failure: DispatchFailure, now: float) -> bool:
        """One failed attempt; True when the queue is quarantined now (dispatch goes on at once),
        False when the record is to be retried."""
        self.errors_total += 1
        cause = failure.cause
        environment = failure.environment or not failure.skippable
        ongoing = self._ongoing
        if ongoing is None or ongoing.key != failure.key or ongoing.cause != cause:
            ongoing = self._ongoing = _Ongoing(
                failure.key,
                failure.physical_offset,
                cause,
                environment,
                is_disk(failure.__cause__),
                0,
                now,
                now,
            )
            log.error(
                "dispatch stuck at physical offset %d (topic %r, queue %d): %s; %s",
                failure.physical_offset,
                failure.topic,
                failure.queue_id,
                cause,
                "retried every second while it lasts"
                if environment
                else f"retried, then the queue is quarantined after {self.quarantine_after} "
                "failed attempts",
                exc_info=failure.__cause__,
            )
        ongoing.attempts += 1
        if environment or ongoing.attempts < self.quarantine_after:
            if now - ongoing.reported >= REPORT_INTERVAL:
                ongoing.reported = now
                log.error(
                    "dispatch still stuck at physical offset %d (topic %r, queue %d) for %.0f s, "
                    "%d failed attempts: %s",
                    ongoing.physical_offset,
                    failure.topic,
                    failure.queue_id,
                    now - ongoing.since,
                    ongoing.attempts,
                    cause,
                )
            return False
        self._ongoing = None
        self.quarantined[failure.key] = Quarantined(
            failure.topic, failure.queue_id, failure.physical_offset, cause
        )
        log.error(
            "dispatch quarantined queue %r-%d at physical offset %d after %d failed attempts: "
            "%s; its records stay in the CommitLog and are skipped, the other queues go on",
            failure.topic,
            failure.queue_id,
            failure.physical_offset,
            ongoing.attempts,
            cause,
        )
        return True

    def succeeded(self) -> None:
        """Dispatch got past what failed (a retry worked)."""
        ongoing = self._ongoing
        if ongoing is not None:
            self._ongoing = None
            log.warning(
                "dispatch going again at physical offset %d after %d failed attempts",
                ongoing.physical_offset,
                ongoing.attempts,
            )

    def skipped(
        self, key: tuple[str, int], physical_offset: int, queue_offset: int, now: float
    ) -> None:
        """The record at `physical_offset`, `queue_offset` of the quarantined queue `key` was
        skipped; counted once (dispatch going over it again, a retry or a recovery, does not
        count it again), reported at most once per REPORT_INTERVAL."""
        entry = self.quarantined[key]
        if queue_offset < entry.next_queue_offset:
            return
        entry.records += 1
        entry.next_queue_offset = queue_offset + 1
        self.quarantined_records += 1
        self._skipped_since_report += 1
        if now - self._skip_reported >= REPORT_INTERVAL:
            self._skip_reported = now
            log.error(
                "dispatch skipped %d records of quarantined queues since the last report (the "
                "last: topic %r queue %d at physical offset %d, %s); %d quarantined queues",
                self._skipped_since_report,
                entry.topic,
                entry.queue_id,
                physical_offset,
                entry.cause,
                len(self.quarantined),
            )
            self._skipped_since_report = 0

    # --- what operators see -------------------------------------------------------------------

    @property
    def stuck(self) -> str | None:
        """Why dispatch is not moving now (a failure being retried), None when it moves."""
        ongoing = self._ongoing
        if ongoing is None:
            return None
        topic, queue_id = ongoing.key
        return (
            f"dispatch stuck at physical offset {ongoing.physical_offset} (topic {topic!r}, "
            f"queue {queue_id}) after {ongoing.attempts} failed attempts: {ongoing.cause}"
        )

    @property
    def disk_refused(self) -> bool:
        """The failure being retried is the disk's (no space, read-only, I/O error)."""
        ongoing = self._ongoing
        return ongoing is not None and ongoing.disk

    # --- the quarantine file ------------------------------------------------------------------

    def encode(self) -> bytes:
        """The quarantined queues as QUARANTINE_FILE holds them."""
        queues = [
            {
                "topic": q.topic,
                "queueId": q.queue_id,
                "physicalOffset": q.physical_offset,
                "cause": q.cause,
                "records": q.records,
                "nextQueueOffset": q.next_queue_offset,
            }
            for q in self.quarantined.values()
        ]
        return json.dumps({"queues": queues}, indent=2, ensure_ascii=False).encode() + b"\n"

    def restore(self, data: bytes) -> None:
        """Quarantine the queues of a QUARANTINE_FILE's contents (ValueError: not one); its
        counts go on from the file's."""
        try:
            queues: list[dict[str, Any]] = json.loads(data)["queues"]
            entries = [
                Quarantined(
                    str(q["topic"]),
                    int(q["queueId"]),
                    int(q["physicalOffset"]),
                    str(q["cause"]),
                    int(q["records"]),
                    int(q["nextQueueOffset"]),
                )
                for q in queues
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a dispatch quarantine file: {exc!r}") from exc
        for entry in entries:
            self.quarantined[(entry.topic, entry.queue_id)] = entry
            self.quarantined_records += entry.records

    def listing(self) -> str:
        """The quarantined queues, for the runtime info: '; '-joined, the first
        QUARANTINE_LISTED."""
        entries = list(self.quarantined.values())
        text = "; ".join(q.describe() for q in entries[:QUARANTINE_LISTED])
        if len(entries) > QUARANTINE_LISTED:
            text += f"; and {len(entries) - QUARANTINE_LISTED} more"
        return text
