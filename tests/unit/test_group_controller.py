"""broker/failover.py's GroupController turn by turn on an in-memory etcd (tests/support/
fake_etcd.py): an election whose answer was lost (applied by etcd, the broker's request timed
out) is completed on the next turn instead of leaving the group a master that never acts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.fake_etcd import FakeEtcd
from tidemq.broker.failover import GroupController
from tidemq.ha.controller_config import ControllerConfig
from tidemq.ha.epoch_file import EpochFile
from tidemq.ha.etcd import EtcdUnavailable

MASTER_KEY = b"/tidemq/DefaultCluster/broker-a/master"


@dataclass
class Member:
    """The broker as its controller sees it: a log end, and what it was asked to do."""

    max_offset: int = 1000
    broker_addr: str = "10.0.0.2:10911"
    ha_addr: str = "10.0.0.2:10912"
    ha_client_addr: str = ""
    calls: list[str] = field(default_factory=list)
    deadline: float | None = None

    def set_lease_deadline(self, deadline: float | None, reason: str) -> None:
        self.deadline = deadline

    async def switch_master(self, master_addr: str, master_ha_addr: str, cut: int | None) -> None:
        self.calls.append(f"follow {master_addr}")

    async def stop_replication(self) -> int:
        self.calls.append("stop replication")
        return self.max_offset

    async def resume_replication(self) -> None:
        self.calls.append("resume replication")

    async def promote(self, epoch: int) -> None:
        self.calls.append(f"promote {epoch}")

    async def demote(self) -> None:
        self.calls.append("demote")

    def identify_slaves(self, addresses: dict[str, int]) -> None:
        pass

    def caught_up_times(self) -> dict[int, float]:
        return {}

    def require_acks_from(self, broker_ids: frozenset[int]) -> None:
        pass

    def set_in_sync_replicas(self, count: int) -> None:
        pass


def is_master(group: GroupController) -> bool:
    return group.is_master  # read through a call: each turn may change it


def controller(tmp_path: Path, member: Member, etcd: FakeEtcd) -> GroupController:
    config = ControllerConfig(enable_controller_mode=True, controller_addr="127.0.0.1:1")
    made = GroupController(
        config, "DefaultCluster", "broker-a", 2, member, EpochFile(tmp_path / "epochs")
    )
    made.etcd = etcd  # type: ignore[assignment]
    return made


async def test_an_election_whose_answer_was_lost_is_completed_next_turn(tmp_path: Path) -> None:
    etcd, member = FakeEtcd(), Member()
    group = controller(tmp_path, member, etcd)
    await group._turn()  # no master: a candidate (its record published)
    etcd.lose_next_answer = True
    with pytest.raises(EtcdUnavailable, match="answer was lost"):
        await group._turn()  # elected in etcd, but the broker never heard
    record = json.loads(etcd.keys[MASTER_KEY].value)
    assert (record["brokerId"], record["epoch"], record["startOffset"]) == (2, 1, 1000)
    assert not is_master(group) and member.calls == ["stop replication"]

    await group._turn()
    assert is_master(group) and group.epoch == 1
    assert member.calls == ["stop replication", "promote 1"]
    assert [(e.epoch, e.start_offset) for e in group.epochs.entries] == [(1, 1000)]
    assert member.deadline is not None  # it acknowledges writes until its lease's deadline
    await group._turn()  # and stays master, keeping its SyncStateSet
    assert is_master(group) and member.calls.count("promote 1") == 1


async def test_a_lost_answer_with_a_log_that_moved_frees_the_key(tmp_path: Path) -> None:
    etcd, member = FakeEtcd(), Member()
    group = controller(tmp_path, member, etcd)
    await group._turn()
    etcd.lose_next_answer = True
    with pytest.raises(EtcdUnavailable):
        await group._turn()
    member.max_offset = 1200  # not where the record says the epoch starts
    await group._turn()
    assert MASTER_KEY not in etcd.keys and not is_master(group)
    await group._turn()  # a candidate again
    await group._turn()  # a new election, from where the log ends now
    assert is_master(group)
    record = json.loads(etcd.keys[MASTER_KEY].value)
    assert (record["epoch"], record["startOffset"]) == (2, 1200)
