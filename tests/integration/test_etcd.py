"""Real etcd (Debian's etcd-server 3.4) through tidemq's client (ha/etcd.py): a single member and
a 3-member cluster started by tests/support/etcd.py, the cluster surviving its leader's SIGKILL
with the client moving to another endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.etcd import EtcdCluster
from tidemq.ha.etcd import Etcd, EtcdUnavailable, parse_endpoints


@pytest.fixture
def single(tmp_path: Path) -> Iterator[EtcdCluster]:
    with EtcdCluster(1, tmp_path / "data", tmp_path / "logs") as cluster:
        yield cluster


@pytest.fixture
def three(tmp_path: Path) -> Iterator[EtcdCluster]:
    with EtcdCluster(3, tmp_path / "data", tmp_path / "logs") as cluster:
        yield cluster


async def test_single_member_keys_leases_and_compare_and_set(single: EtcdCluster) -> None:
    etcd = Etcd(parse_endpoints(single.endpoints), timeout=5)
    try:
        await etcd.put(b"/t/a", b"1")
        entry = await etcd.get(b"/t/a")
        assert entry is not None and entry.value == b"1"
        # compare-and-set on the modification revision: the second writer with the old one loses
        first = await etcd.transaction(
            lambda tx: [tx.mod(b"/t/a") == entry.mod_revision],
            lambda tx: [tx.put(b"/t/a", b"2")],
        )
        second = await etcd.transaction(
            lambda tx: [tx.mod(b"/t/a") == entry.mod_revision],
            lambda tx: [tx.put(b"/t/a", b"3")],
        )
        assert (first, second) == (True, False)
        assert [e.value for e in await etcd.get_prefix(b"/t/")] == [b"2"]
        lease = await etcd.grant(5)
        await etcd.put(b"/t/leased", b"x", lease=lease)
        assert await etcd.keep_alive(lease) > 0
        await etcd.revoke(lease)
        assert await etcd.get(b"/t/leased") is None
        assert await etcd.keep_alive(lease) == 0
    finally:
        await etcd.close()
    pids = [d.pid for d in single.daemons if d is not None]
    single.stop()
    assert all(d is not None and not d.running for d in single.daemons), pids


async def test_three_members_survive_the_leader_killed(three: EtcdCluster) -> None:
    etcd = Etcd(parse_endpoints(three.endpoints), timeout=3)
    try:
        await etcd.put(b"/t/k", b"before")
        leader = three.leader_index()
        assert leader is not None
        three.kill(leader)
        # the client may have been on the leader: it moves to a live member
        await etcd.put(b"/t/k", b"after")
        entry = await etcd.get(b"/t/k")
        assert entry is not None and entry.value == b"after"
    finally:
        await etcd.close()


async def test_no_member_answering_is_one_clear_error() -> None:
    from tests.support.processes import free_port

    etcd = Etcd([("127.0.0.1", free_port()), ("127.0.0.1", free_port())], timeout=1)
    try:
        with pytest.raises(EtcdUnavailable, match="etcd unreachable"):
            await etcd.get(b"/t/none")
    finally:
        await etcd.close()
