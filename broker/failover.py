"""Controller mode: a broker group elects its master through etcd (issue 16).

etcd keys, under `/tidemq/<brokerClusterName>/<brokerName>/` (values JSON unless said)::

    master         {"brokerId", "addr", "haAddr", "epoch", "startOffset", "epochs": [[epoch,
                   startOffset], ...]}, attached to the master's lease: the master is whoever
                   holds this key; "epochs" is its epoch file, which a follower reconciles with
    epoch          the group's epoch, decimal text; every election increases it by one
    syncStateSet   {"epoch", "members": [brokerId, ...]}: changed by the master only, by
                   compare-and-set on its revision
    members/<id>   {"addr", "haAddr", "haClientAddr", "priority", "epoch", "maxOffset"},
                   attached to that broker's lease: present while the broker is alive
    designated     the brokerId an operator asked for (electMaster), until it is elected

Each broker holds one lease (masterLeaseTtlSeconds) and renews it every
masterLeaseKeepAliveInterval; each renewal is one turn of `GroupController`:

- the master moves its write deadline (`MessageStore.lease_deadline`) to the moment the
  keep-alive was sent plus the TTL minus masterLeaseSafetyMargin: when it cannot renew, it stops
  acknowledging writes before etcd can let the lease expire and elect another master;
- the master keeps the SyncStateSet: a slave whose acks have caught up with the master joins it,
  one that has not caught up for haMaxTimeSlaveNotCatchup leaves it; while a change is being
  written, SYNC sends wait for the union of the old and the new set (apache/rocketmq#5663);
- a slave follows the master of the `master` key (its HA address); before following a master
  new to it, it compares epoch files and cuts its log where it left the master's history (the
  first epoch of the master after the last one both share), keeping the cut bytes in
  `.diverged` files: a deposed master restarted, or a slave that received more of the old
  master's last writes than the new master, then converges byte-identical;
- with no `master` key, a broker of the SyncStateSet (any broker with enableElectUncleanMaster,
  or before a set exists) publishes its candidacy (last epoch, CommitLog end, priority); a turn
  later the best live candidate, by highest (epoch, end), then smallest brokerElectionPriority,
  then smallest brokerId, takes the key in one transaction that also increases the epoch and
  makes the set {itself}, and the broker switches to master in-process. A transaction etcd
  applied but whose answer was lost (a timeout) leaves the key naming this broker under its own
  lease while it is not master: the next turn completes that election when its log still ends
  where the record's epoch starts, and frees the key otherwise.

A slave's HA connection starts with the epoch handshake (ha/codec.py): the master learns the
slave's brokerId from it, the slave the master's epochs (and cuts its log where they part).
The slave also publishes its connection's local address in its member record (`haClientAddr`),
by which the master still knows a connection that said no HELLO.

A deposed master that is still running (cut off from etcd, then back) refuses writes at once and
turns into a slave in-process; like one restarted, it then follows the new master after cutting
its log where it left the group's history.

Not yet (issue 16, later increments): etcd watches instead of a turn every keep-alive interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.ha.controller_config import ControllerConfig
from tidemq.ha.epoch_file import EpochEntry, EpochFile
from tidemq.ha.etcd import Etcd, EtcdUnavailable

log = logging.getLogger(__name__)


class MemberConflict(Exception):
    """Another live broker of the group has this brokerId."""


class GroupMember(Protocol):
    """What the controller asks of its broker (broker/broker.py implements it)."""

    @property
    def broker_addr(self) -> str: ...

    @property
    def ha_addr(self) -> str: ...

    @property
    def max_offset(self) -> int: ...

    @property
    def ha_client_addr(self) -> str: ...

    def set_lease_deadline(self, deadline: float | None, reason: str) -> None: ...

    def switch_master(
        self, master_addr: str, master_ha_addr: str, cut: int | None
    ) -> Awaitable[None]: ...

    def stop_replication(self) -> Awaitable[int]: ...

    def resume_replication(self) -> Awaitable[None]: ...

    def promote(self, epoch: int) -> Awaitable[None]: ...

    def demote(self) -> Awaitable[None]: ...

    def identify_slaves(self, addresses: dict[str, int]) -> None: ...

    def caught_up_times(self) -> dict[int, float]: ...

    def require_acks_from(self, broker_ids: frozenset[int]) -> None: ...

    def set_in_sync_replicas(self, count: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Candidate:
    broker_id: int
    epoch: int
    max_offset: int
    priority: int

    def rank(self) -> tuple[int, int, int, int]:
        """Smallest first: highest (epoch, end), then smallest priority, then smallest id."""
        return (-self.epoch, -self.max_offset, self.priority, self.broker_id)


def best_candidate(candidates: list[Candidate], eligible: set[int] | None) -> Candidate | None:
    """The one to elect among `candidates` (only ids in `eligible`, when given)."""
    allowed = [c for c in candidates if eligible is None or c.broker_id in eligible]
    return min(allowed, key=Candidate.rank, default=None)


def divergence_point(mine: list[EpochEntry], masters: list[EpochEntry]) -> int | None:
    """Where this broker's log stops being the master's: the start, in the master's history,
    of the first epoch after the last epoch both share (same epoch, same start). None when the
    master's history has no epoch after it (this log can only be behind, never ahead), or when
    they share none (then the master's first epoch's start: nothing of ours is known good)."""
    known = {(e.epoch, e.start_offset) for e in masters}
    common = [e for e in mine if (e.epoch, e.start_offset) in known]
    if not common:
        return masters[0].start_offset if masters and mine else None
    last = common[-1].epoch
    later = [e for e in masters if e.epoch > last]
    return later[0].start_offset if later else None


def _json(value: bytes) -> dict[str, Any]:
    decoded = json.loads(value)
    if isinstance(decoded, dict):
        return decoded
    raise ValueError("not a JSON object")  # read as a malformed record, as a JSON error is


class GroupController(Service):
    def __init__(
        self,
        config: ControllerConfig,
        cluster: str,
        broker_name: str,
        broker_id: int,
        member: GroupMember,
        epochs: EpochFile,
    ) -> None:
        super().__init__()
        self.config = config
        self.broker_id = broker_id
        self.member = member
        self.epochs = epochs
        self.etcd = Etcd(config.endpoints, timeout=config.controller_request_timeout / 1000)
        prefix = f"/tidemq/{cluster}/{broker_name}/"
        self.key_master = f"{prefix}master".encode()
        self.key_epoch = f"{prefix}epoch".encode()
        self.key_set = f"{prefix}syncStateSet".encode()
        self.key_members = f"{prefix}members/".encode()
        self.key_designated = f"{prefix}designated".encode()
        self.key_me = self.key_members + str(broker_id).encode()
        self.lease = 0
        self.is_master = False
        self.epoch = 0
        self.master_id: int | None = None
        self.sync_state_set: frozenset[int] = frozenset()
        self.elections = 0
        self.elected_at_ms = 0  # wall clock of this broker's last election
        self.deposed = ""
        # Why the group has no master, as this broker sees it ("" while it has one).
        self.no_master_reason = ""
        self._published: dict[str, Any] | None = None
        self._vacancy_since: float | None = None
        self._following: tuple[int, int] | None = None  # the master and epoch reconciled with
        self._caught_up: dict[int, float] = {}
        self._logged: set[str] = set()
        self.add_child(Step(stop=self.etcd.close))
        self.add_child(Step(stop=self._release))
        self.add_child(BackgroundTask(self._run, "group-controller"))

    async def start(self) -> None:
        """Fails (EtcdUnavailable) when etcd cannot grant this broker its lease: a broker never
        starts on its own without its group's coordination; fails (MemberConflict) when another
        live broker of the group has this brokerId."""
        self.epochs.load()
        # A member slow to answer its first requests (a loaded machine, a new gRPC channel) is
        # given the lease's TTL before the broker gives up.
        deadline = time.monotonic() + self.config.master_lease_ttl_seconds
        while True:
            try:
                await self._grant()
                break
            except EtcdUnavailable:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.config.master_lease_keep_alive_interval / 1000)
        await self._claim_member()
        await super().start()

    async def _claim_member(self) -> None:
        """Take `members/<brokerId>` for this broker's lease. A record left by this broker's
        previous life goes when its lease expires (within the TTL); one that outlives that wait
        belongs to another running broker configured with the same brokerId."""
        interval = self.config.master_lease_keep_alive_interval / 1000
        deadline = time.monotonic() + self.config.master_lease_ttl_seconds + 2 * interval
        while True:
            record = json.dumps(self._member_record()).encode()
            try:
                claimed = await self.etcd.transaction(
                    lambda tx: [tx.version(self.key_me) == 0],
                    lambda tx, r=record: [tx.put(self.key_me, r, lease=self.lease)],  # type: ignore[misc]
                )
            except EtcdUnavailable:
                if time.monotonic() > deadline:
                    raise
                claimed = False
            if claimed:
                return
            if time.monotonic() > deadline:
                other = await self.etcd.get(self.key_me)
                holder = "" if other is None else _json(other.value).get("addr", "")
                raise MemberConflict(
                    f"brokerId: broker {self.broker_id} of this group is already running"
                    f"{f' at {holder}' if holder else ''} (etcd key {self.key_me.decode()})"
                )
            await asyncio.sleep(interval)
            with contextlib.suppress(EtcdUnavailable):
                await self.etcd.keep_alive(self.lease)

    async def _release(self) -> None:
        """At the broker's stop (it no longer serves): writes stay refused and the lease is
        revoked, so the others elect at once instead of after the TTL."""
        if self.is_master:
            self.member.set_lease_deadline(0.0, "this broker is stopping")
        if self.lease:
            with contextlib.suppress(EtcdUnavailable):
                await self.etcd.revoke(self.lease)
            self.lease = 0

    def runtime_info(self) -> dict[str, object]:
        return {
            "controllerMode": True,
            "brokerId": self.broker_id,
            "isMaster": self.is_master,
            "masterBrokerId": self.master_id,
            "epoch": self.epoch,
            "lastEpoch": self.epochs.last_epoch,
            "epochStartOffset": self.epochs.last.start_offset if self.epochs.last else -1,
            "epochEntries": [[e.epoch, e.start_offset] for e in self.epochs.entries],
            "syncStateSet": sorted(self.sync_state_set),
            "elections": self.elections,
            "electedAtMillis": self.elected_at_ms,
            "deposed": self.deposed,
            "noMasterReason": self.no_master_reason,
        }

    # --- the turn --------------------------------------------------------------------------

    async def _run(self) -> None:
        interval = self.config.master_lease_keep_alive_interval / 1000
        while True:
            started = time.monotonic()
            try:
                await self._turn()
                self._logged.discard("unreachable")
            except EtcdUnavailable as exc:
                self._once(
                    "unreachable",
                    logging.ERROR,
                    "%s%s",
                    exc,
                    "; this master stops acknowledging writes when its lease can no longer be "
                    "trusted"
                    if self.is_master
                    else "",
                )
            except Exception:
                log.exception("controller turn failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _grant(self) -> None:
        self.lease = await self.etcd.grant(self.config.master_lease_ttl_seconds)
        self._published = None

    async def _turn(self) -> None:
        if self.lease == 0:
            await self._grant()
        sent = time.monotonic()
        if await self.etcd.keep_alive(self.lease) == 0:
            log.error("this broker's etcd lease %x expired", self.lease)
            self.lease = 0
            if self.is_master:
                await self._step_down("its etcd lease expired")
            return
        if self.is_master:
            self.member.set_lease_deadline(sent + self.config.trusted_ms / 1000, "")
        await self._publish_member()
        entry = await self.etcd.get(self.key_master)
        if entry is None:
            if self.is_master:  # freed without this broker stepping down (an operator, etcd)
                await self._step_down("the master key is gone from etcd")
            self.master_id = None
            await self._campaign(sent)
            return
        self._vacancy_since = None
        self.no_master_reason = ""
        master = _json(entry.value)
        master_id, epoch = int(master["brokerId"]), int(master["epoch"])
        self.master_id, self.epoch = master_id, epoch
        if master_id == self.broker_id and entry.lease == self.lease:
            if self.is_master:
                await self._maintain_sync_state_set(entry.mod_revision)
            else:
                await self._won_unanswered(master, entry.mod_revision, sent)
            return
        if self.is_master:
            await self._step_down(f"broker {master_id} is master at epoch {epoch}")
        if self._following != (master_id, epoch):
            await self._follow(master)
            self._following = (master_id, epoch)

    async def _follow(self, master: dict[str, Any]) -> None:
        """Follow a master new to this broker. Replication stops; the log is cut where it left
        the master's history (a deposed master's unreplicated tail, or a slave that got more
        of the old master's last writes than the new master did), the cut bytes kept in
        `.diverged` files; replication resumes from the new master; the master's epochs go
        into the epoch file."""
        masters = [EpochEntry(int(e), int(o)) for e, o in master.get("epochs", [])]
        if not masters:
            masters = [EpochEntry(int(master["epoch"]), int(master["startOffset"]))]
        cut = divergence_point(self.epochs.entries, masters)
        if cut is not None and self.member.max_offset > cut:
            log.warning(
                "this log left the history of master %s (epoch %s) at %d: the bytes after it "
                "go to .diverged files",
                master["brokerId"],
                master["epoch"],
                cut,
            )
        else:
            cut = None
        await self.member.switch_master(str(master["addr"]), str(master["haAddr"]), cut)
        if cut is not None:
            self.epochs.truncate_after(cut - 1 if cut > 0 else 0)
        for entry in masters:
            if entry.epoch > self.epochs.last_epoch:
                self.epochs.append(entry.epoch, entry.start_offset)
        log.info("following master %s of epoch %s", master["brokerId"], master["epoch"])

    def _member_record(self) -> dict[str, Any]:
        return {
            "addr": self.member.broker_addr,
            "haAddr": self.member.ha_addr,
            "haClientAddr": self.member.ha_client_addr,
            "priority": self.config.broker_election_priority,
            "epoch": self.epochs.last_epoch,
            "maxOffset": self.member.max_offset,
        }

    async def _publish_member(self) -> None:
        record = self._member_record()
        same = self._published is not None and all(
            self._published.get(k) == record[k] for k in ("addr", "haAddr", "haClientAddr")
        )
        if same and self._vacancy_since is None:
            return  # the offset only matters to an election
        await self.etcd.put(self.key_me, json.dumps(record).encode(), lease=self.lease)
        self._published = record

    # --- election ----------------------------------------------------------------------------

    async def _campaign(self, sent: float) -> None:
        members = await self._read_set()
        eligible: set[int] | None = None
        if members is not None and not self.config.enable_elect_unclean_master:
            eligible = set(members)
        if eligible is not None and self.broker_id not in eligible:
            self.no_master_reason = (
                f"no master; broker {self.broker_id} is not in the SyncStateSet "
                f"{sorted(eligible)} (enableElectUncleanMaster=false)"
            )
            self._once(
                "not-eligible",
                logging.WARNING,
                "no master: this broker is not in the SyncStateSet %s and "
                "enableElectUncleanMaster is false; it is not a candidate",
                sorted(eligible),
            )
            return
        self.no_master_reason = "no master; an election is under way"
        if self._vacancy_since is None:
            # Published this turn (with this broker's end): the others get a turn to do so too.
            self._vacancy_since = time.monotonic()
            log.info("no master in etcd: broker %d is a candidate", self.broker_id)
            return
        candidates = []
        for entry in await self.etcd.get_prefix(self.key_members):
            try:
                record = _json(entry.value)
                broker_id = int(entry.key.rsplit(b"/", 1)[1])
                candidates.append(
                    Candidate(
                        broker_id,
                        int(record["epoch"]),
                        int(record["maxOffset"]),
                        int(record["priority"]),
                    )
                )
            except (ValueError, KeyError, IndexError):
                log.warning("ignoring a malformed member record %r", entry.key)
        best = best_candidate(candidates, eligible)
        designated = await self.etcd.get(self.key_designated)
        if designated is not None:
            wanted = [c for c in candidates if str(c.broker_id).encode() == designated.value]
            if wanted and (eligible is None or wanted[0].broker_id in eligible):
                best = wanted[0]  # an operator's choice among the eligible (electMaster)
        if best is None or best.broker_id != self.broker_id:
            self._once(
                f"wait-{best}",
                logging.INFO,
                "election: broker %s is the better candidate",
                None if best is None else best.broker_id,
            )
            return
        await self._elect(sent)

    async def _elect(self, sent: float) -> None:
        current = await self.etcd.get(self.key_epoch)
        epoch = (int(current.value) if current is not None else 0) + 1
        epoch_revision = current.mod_revision if current is not None else 0
        start = await self.member.stop_replication()
        record = {
            "brokerId": self.broker_id,
            "addr": self.member.broker_addr,
            "haAddr": self.member.ha_addr,
            "epoch": epoch,
            "startOffset": start,
            "epochs": [[e.epoch, e.start_offset] for e in self.epochs.entries] + [[epoch, start]],
        }
        sync_set = {"epoch": epoch, "members": [self.broker_id]}
        won = await self.etcd.transaction(
            lambda tx: [tx.version(self.key_master) == 0, tx.mod(self.key_epoch) == epoch_revision],
            lambda tx: [
                tx.put(self.key_master, json.dumps(record).encode(), lease=self.lease),
                tx.put(self.key_epoch, str(epoch).encode()),
                tx.put(self.key_set, json.dumps(sync_set).encode()),
                tx.delete(self.key_designated),
            ],
        )
        if not won:
            log.info("election: another broker was elected first")
            await self.member.resume_replication()
            return
        await self._won(epoch, start, sent)

    async def _won_unanswered(self, master: dict[str, Any], revision: int, sent: float) -> None:
        """etcd names this broker master under its own lease, yet it is not: its election's
        transaction was applied but the answer never came (a timeout on a slow etcd, a lost
        reply), and the turn failed. Left so, the group would keep a master that never acts,
        its key kept alive by this broker's keep-alives, for ever. When the log still ends where
        the record says the epoch starts (replication stayed stopped since), the election is
        completed; otherwise the key is freed, by compare-and-delete, for a new election."""
        epoch, start = int(master["epoch"]), int(master["startOffset"])
        if self.member.max_offset == start and epoch > self.epochs.last_epoch:
            log.warning(
                "etcd names this broker master of epoch %d though its election was not "
                "answered: the election is completed",
                epoch,
            )
            await self._won(epoch, start, sent)
            return
        log.warning(
            "etcd names this broker master of epoch %d from %d, but its log ends at %d: the "
            "master key is freed for a new election",
            epoch,
            start,
            self.member.max_offset,
        )
        await self.etcd.transaction(
            lambda tx: [tx.mod(self.key_master) == revision],
            lambda tx: [tx.delete(self.key_master)],
        )

    async def _won(self, epoch: int, start: int, sent: float) -> None:
        """This broker holds the `master` key of `epoch`, its log continuing at `start`."""
        self._vacancy_since = None
        self.is_master = True
        self.master_id, self.epoch = self.broker_id, epoch
        self.sync_state_set = frozenset({self.broker_id})
        self._caught_up.clear()
        self.elections += 1
        self.elected_at_ms = int(time.time() * 1000)
        self.epochs.append(epoch, start)
        self.member.set_lease_deadline(sent + self.config.trusted_ms / 1000, "")
        self.member.require_acks_from(frozenset())
        self.member.set_in_sync_replicas(1)
        log.info("elected master of epoch %d, the CommitLog continues at %d", epoch, start)
        await self.member.promote(epoch)

    async def hand_over(self, target: int) -> str:
        """electMaster: make broker `target` the master. This master checks that `target` is
        alive and in the SyncStateSet, stops acknowledging, frees the `master` key while naming
        `target` in `designated` (one transaction), and turns into a slave; `target` wins the
        election that follows. Returns why it cannot ("" when done)."""
        if not self.is_master:
            return f"broker {self.broker_id} is not the master (broker {self.master_id} is)"
        if target == self.broker_id:
            return f"broker {target} is the master already"
        if target not in self.sync_state_set and not self.config.enable_elect_unclean_master:
            return f"broker {target} is not in the SyncStateSet {sorted(self.sync_state_set)}"
        member = self.key_members + str(target).encode()
        if await self.etcd.get(member) is None:
            return f"broker {target} is not alive in etcd"
        entry = await self.etcd.get(self.key_master)
        if entry is None or entry.lease != self.lease:
            return "this broker no longer holds the master lease"
        self.member.set_lease_deadline(0.0, f"handing the group over to broker {target}")
        freed = await self.etcd.transaction(
            lambda tx: [tx.mod(self.key_master) == entry.mod_revision],
            lambda tx: [
                tx.delete(self.key_master),
                tx.put(self.key_designated, str(target).encode()),
            ],
        )
        if not freed:
            self.member.set_lease_deadline(time.monotonic(), "")  # the lease is renewed next turn
            return "the master key changed meanwhile"
        log.info("electMaster: handing the group over to broker %d", target)
        await self._step_down(f"handed over to broker {target} (electMaster)")
        return ""

    async def _step_down(self, reason: str) -> None:
        """Deposed while running: writes stop at once (they stopped already if the lease could
        not be renewed), then the broker turns into a slave in-process; the next master it
        follows cuts what this one wrote that the group did not keep (`_follow`)."""
        self.is_master = False
        self.deposed = reason
        self._following = None
        self.member.set_lease_deadline(0.0, f"this broker is no longer the master ({reason})")
        log.error("deposed: %s; writes are refused, turning into a slave", reason)
        await self.member.demote()

    # --- the SyncStateSet (master) ----------------------------------------------------------

    async def _read_set(self) -> list[int] | None:
        entry = await self.etcd.get(self.key_set)
        if entry is None:
            return None
        return [int(m) for m in _json(entry.value)["members"]]

    async def _maintain_sync_state_set(self, master_revision: int) -> None:
        addresses = {}
        for record in await self.etcd.get_prefix(self.key_members):
            try:
                client = str(_json(record.value).get("haClientAddr", ""))
                if client:
                    addresses[client] = int(record.key.rsplit(b"/", 1)[1])
            except (ValueError, IndexError):
                continue
        self.member.identify_slaves(addresses)
        now = time.monotonic()
        for broker_id, at in self.member.caught_up_times().items():
            if at > self._caught_up.get(broker_id, 0.0):
                self._caught_up[broker_id] = at
        limit = self.config.ha_max_time_slave_not_catchup / 1000
        wanted = {self.broker_id} | {i for i, at in self._caught_up.items() if now - at <= limit}
        entry = await self.etcd.get(self.key_set)
        current: frozenset[int] = frozenset()
        if entry is not None:
            current = frozenset(int(m) for m in _json(entry.value)["members"])
        if wanted != current:
            # Until etcd has the new set, a SYNC send needs the acks of both sets (#5663).
            self.member.require_acks_from((current | wanted) - {self.broker_id})
            revision = entry.mod_revision if entry is not None else 0
            body = json.dumps({"epoch": self.epoch, "members": sorted(wanted)}).encode()
            changed = await self.etcd.transaction(
                lambda tx: [
                    tx.mod(self.key_set) == revision,
                    tx.mod(self.key_master) == master_revision,
                ],
                lambda tx: [tx.put(self.key_set, body)],
            )
            if changed:
                log.info("SyncStateSet %s -> %s", sorted(current), sorted(wanted))
                current = frozenset(wanted)
        self.sync_state_set = current
        self.member.require_acks_from(current - {self.broker_id})
        self.member.set_in_sync_replicas(len(current))

    def _once(self, key: str, level: int, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args)
