"""Partitions between real network hosts (issue 20 item 2): every daemon and the client process
in a network namespace of its own, links cut, delayed and made lossy in a router namespace
(tests/support/netns.py), under SYNC_MASTER load from our client.

- master <-> slave cut: sends answer FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, never SEND_OK,
  and the slave gets nothing; healed, the slave catches up byte-identical;
- one-way cuts of that link (the slave's acks lost; the master's data lost): the same;
- 200 ms each way with 5 % loss on that link: a SEND_OK never comes sooner than the round trip
  the slave's acknowledgement needs (400 ms); healed, byte-identical;
- a master <-> slave link (100 ms each way) that flaps (1 s down, 2 s up) under sends: only
  SEND_OK or the stored-only statuses, no SEND_OK sooner than the slave's 200 ms round trip,
  every message read back once from both, byte-identical in the end;
- the master of group a cut from the client and the name server: the producer moves to group b,
  a consumer reads group a from its slave; healed, offsets never went backwards;
- the name server isolated: the brokers' routes expire, sends go on from the client's cached
  routes, nothing sent is lost; healed, the routes come back.

They need root (namespaces, nftables, iptables); elsewhere they skip with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fault.cq_check import check_consume_queues
from tests.support.conditions import eventually, eventually_sync
from tests.support.ha_processes import assert_identical
from tests.support.netns import (
    NETNS_DIR,
    PREFIX,
    Network,
    clean_leftovers,
    delete_namespace,
    namespace_pids,
    netns_inode,
    process_netns_inode,
    run,
    skip_reason,
)
from tests.support.netns_cluster import AgentError, ClientAgent, NetnsCluster

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))

TOPIC = "Partition"
STORED_NOT_REPLICATED = {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}
GROUP_A = ("namesrv", "master", "slave", "client")


@contextlib.asynccontextmanager
async def hosts(tmp_path: Path, names: Sequence[str]) -> AsyncIterator[NetnsCluster]:
    cluster = NetnsCluster(Network(names, tmp_path / "logs").build(), tmp_path)
    try:
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        await cluster.close()


async def group_a(cluster: NetnsCluster, *namesrv: str) -> ClientAgent:
    """Name server, SYNC_MASTER "master" and its "slave" of broker-a, the client process."""
    cluster.namesrvd(*namesrv)
    cluster.brokerd("master", "broker-a", "SYNC_MASTER")
    cluster.brokerd("slave", "broker-a", "SLAVE", master="master")
    agent = await cluster.client()
    await wait_transfer(agent, cluster.broker_addr("master"))
    return agent


async def wait_transfer(agent: ClientAgent, master: str, timeout: float = 30) -> None:
    async def transferring() -> bool:
        conns = (await agent.call("ha_status", address=master))["haConnectionInfo"]
        return any(c["state"] == "TRANSFER" for c in conns)

    await eventually(transferring, f"a slave in TRANSFER on {master}", timeout, interval=0.2)


async def max_offset(agent: ClientAgent, broker: str, key: str) -> int:
    value = (await agent.call("ha_status", address=broker))[key]
    assert isinstance(value, int)
    return value


async def caught_up(cluster: NetnsCluster, agent: ClientAgent, master: str, slave: str) -> int:
    """Wait for the slave to hold all the master has; check both CommitLogs are the same bytes
    and each store's ConsumeQueues agree with its CommitLog."""
    end = await max_offset(agent, cluster.broker_addr(master), "masterCommitLogMaxOffset")

    async def there() -> bool:
        return await max_offset(agent, cluster.broker_addr(slave), "maxOffset") >= end

    await eventually(there, f"{slave} to reach {end}", 60, interval=0.2)
    assert_identical(cluster.store(master), cluster.store(slave), 0, end)
    for host in (master, slave):
        assert not check_consume_queues(cluster.store(host)).problems, host
    return end


def statuses(results: list[list[Any]]) -> Counter[str]:
    return Counter(r[1] for r in results)


async def send(agent: ClientAgent, cluster: NetnsCluster, start: int, count: int) -> list[Any]:
    results: list[Any] = await agent.call(
        "send", address=cluster.broker_addr("master"), topic=TOPIC, start=start, count=count
    )
    return results


def assert_inside_namespaces(cluster: NetnsCluster, agent: ClientAgent) -> None:
    """Each daemon and the client process run in their host's namespace, and the machine's own
    namespace has none of the hosts' addresses."""
    network = cluster.network
    for daemon in cluster.daemons:
        host = "namesrv" if daemon.name == "namesrvd" else daemon.name
        assert daemon.pid is not None
        assert process_netns_inode(daemon.pid) == netns_inode(network.netns(host)), daemon
    assert process_netns_inode(agent.pid) == netns_inode(network.netns("client"))
    own = Path("/proc/self/net/fib_trie").read_text()
    assert not any(network.address(host) in own for host in network.hosts)


async def test_master_slave_cut(tmp_path: Path) -> None:
    """(Also checks that every process runs inside its own host.)"""
    async with hosts(tmp_path, GROUP_A) as cluster:
        agent = await group_a(cluster)
        assert_inside_namespaces(cluster, agent)
        master, slave = cluster.broker_addr("master"), cluster.broker_addr("slave")
        assert statuses(await send(agent, cluster, 0, 40)) == {"SEND_OK": 40}

        cluster.network.cut("master", "slave")
        slave_end = await max_offset(agent, slave, "maxOffset")
        during = await send(agent, cluster, 40, 12)
        assert set(statuses(during)) <= STORED_NOT_REPLICATED, statuses(during)

        async def dropped() -> bool:
            return not (await agent.call("ha_status", address=master))["haConnectionInfo"]

        await eventually(dropped, "the master to drop the unreachable slave", 30, interval=0.2)
        later = await send(agent, cluster, 52, 8)
        assert statuses(later) == {"SLAVE_NOT_AVAILABLE": 8}
        assert await max_offset(agent, slave, "maxOffset") == slave_end  # nothing crossed

        cluster.network.heal()
        await wait_transfer(agent, master)
        await caught_up(cluster, agent, "master", "slave")
        found = await agent.call("read_all", address=slave, topic=TOPIC)
        assert sorted(n for _, _, n in found) == list(range(60))
        print(f"during the cut: {statuses(during)}; after the drop: {statuses(later)}")


@pytest.mark.parametrize(
    "lost", [("slave", "master"), ("master", "slave")], ids=["acks-lost", "data-lost"]
)
async def test_one_way_master_slave_cut(tmp_path: Path, lost: tuple[str, str]) -> None:
    async with hosts(tmp_path, GROUP_A) as cluster:
        agent = await group_a(cluster)
        master = cluster.broker_addr("master")
        assert statuses(await send(agent, cluster, 0, 20)) == {"SEND_OK": 20}

        cluster.network.cut(*lost, both=False)
        during = await send(agent, cluster, 20, 8)
        assert set(statuses(during)) <= STORED_NOT_REPLICATED, statuses(during)

        cluster.network.heal()
        await wait_transfer(agent, master)
        await caught_up(cluster, agent, "master", "slave")
        found = await agent.call("read_all", address=cluster.broker_addr("slave"), topic=TOPIC)
        assert sorted(n for _, _, n in found) == list(range(28))
        print(f"{lost[0]} -> {lost[1]} cut: {statuses(during)}")


async def test_delay_and_loss_between_master_and_slave(tmp_path: Path) -> None:
    """200 ms each way and 5 % loss each way: a SEND_OK waits for the slave's acknowledgement,
    so it can never come back sooner than the 400 ms round trip; the rest is stored only."""
    async with hosts(tmp_path, GROUP_A) as cluster:
        agent = await group_a(cluster)
        network = cluster.network
        for a, b in (("master", "slave"), ("slave", "master")):
            network.delay(a, b, 200)
            network.loss(a, b, 5)
        results = await send(agent, cluster, 0, 30)
        counts = statuses(results)
        assert set(counts) <= {"SEND_OK"} | STORED_NOT_REPLICATED, counts
        assert counts["SEND_OK"] > 0, counts
        fastest_ok = min(r[5] for r in results if r[1] == "SEND_OK")
        assert fastest_ok >= 0.4, f"a SEND_OK after {fastest_ok:.3f} s: before the slave's ack"

        network.heal()
        await caught_up(cluster, agent, "master", "slave")
        print(f"200 ms + 5 % loss: {counts}, fastest SEND_OK {fastest_ok:.3f} s")


async def test_flapping_master_slave_link(tmp_path: Path) -> None:
    async with hosts(tmp_path, GROUP_A) as cluster:
        agent = await group_a(cluster)
        network = cluster.network
        for a, b in (("master", "slave"), ("slave", "master")):
            network.delay(a, b, 100)  # so that a SEND_OK shows it waited for the slave
        results: list[Any] = await send(agent, cluster, 0, 20)
        assert statuses(results) == {"SEND_OK": 20}
        flapping = asyncio.create_task(network.flap("master", "slave", down=1.0, up=2.0))
        try:
            while network.flaps < 4:
                results += await send(agent, cluster, len(results), 8)
        finally:
            flapping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flapping
        counts = statuses(results[20:])  # while flapping
        assert set(counts) <= {"SEND_OK"} | STORED_NOT_REPLICATED, counts
        fastest_ok = min(r[5] for r in results if r[1] == "SEND_OK")
        assert fastest_ok >= 0.2, f"a SEND_OK after {fastest_ok:.3f} s: before the slave's ack"

        network.heal()
        await wait_transfer(agent, cluster.broker_addr("master"))
        await caught_up(cluster, agent, "master", "slave")
        for host in ("master", "slave"):
            found = await agent.call("read_all", address=cluster.broker_addr(host), topic=TOPIC)
            assert sorted(n for _, _, n in found) == list(range(len(results))), host
        slowest = max(r[5] for r in results)
        print(f"{network.flaps} flaps (1 s down, 2 s up): {counts}, SEND_OK after "
              f"{fastest_ok:.3f} s at the soonest; the slowest answer {slowest:.3f} s")  # fmt: skip


# Brokers register every 10 s (the least RocketMQ allows, set by NetnsCluster); a name server
# forgets one that has not registered for 15 s, checking each second.
QUICK_EXPIRY = ("scanNotActiveBrokerInterval=1000", "brokerChannelExpiredTime=15000")


async def produce(agent: ClientAgent, cluster: NetnsCluster, start: int, count: int) -> list[Any]:
    results: list[Any] = await agent.call(
        "produce",
        namesrv=cluster.namesrv_addr,
        group="PartitionPG",
        topic=TOPIC,
        start=start,
        count=count,
    )
    return results


async def wait_route(
    agent: ClientAgent, cluster: NetnsCluster, want: dict[str, set[int]], timeout: float = 60
) -> None:
    """Until the name server's route of TOPIC has exactly the broker ids `want` per group."""

    async def there() -> bool:
        try:
            route = await agent.call("route", namesrv=cluster.namesrv_addr, topic=TOPIC)
        except Exception:  # the name server unreachable or slow: ask again
            return False
        have = {name: {int(i) for i in addrs} for name, addrs in (route or {}).items()}
        return have == want

    await eventually(there, f"the route of {TOPIC} to be {want}", timeout, interval=0.5)


def assert_forward_only(consumed: list[list[Any]]) -> None:
    """Each queue's messages came at offsets 0, 1, 2, ...: none skipped, none read again."""
    per_queue: dict[tuple[str, int], list[int]] = {}
    for broker, queue, offset, _ in consumed:
        per_queue.setdefault((broker, queue), []).append(offset)
    for mq, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), f"{mq}: offsets {offsets}"


async def consume_until(agent: ClientAgent, consumed: list[list[Any]], numbers: set[int]) -> None:
    async def all_read() -> bool:
        consumed.extend(await agent.call("consumer_poll", timeout=0.5))
        return numbers <= {n for *_, n in consumed}

    await eventually(all_read, f"the consumer to read {len(numbers)} messages", 60, interval=0)


async def test_master_cut_from_client_and_name_server(tmp_path: Path) -> None:
    """Group a's master keeps only its slave: the producer moves to group b, a consumer reads
    group a from the slave (the master is out of its reach); healed, nothing is read twice."""
    names = ("namesrv", "master", "slave", "master-b", "slave-b", "client")
    async with hosts(tmp_path, names) as cluster:
        cluster.namesrvd(*QUICK_EXPIRY)
        cluster.brokerd("master", "broker-a", "SYNC_MASTER")
        cluster.brokerd("slave", "broker-a", "SLAVE", master="master")
        cluster.brokerd("master-b", "broker-b", "SYNC_MASTER")
        cluster.brokerd("slave-b", "broker-b", "SLAVE", master="master-b")
        agent = await cluster.client()
        for master in ("master", "master-b"):
            await wait_transfer(agent, cluster.broker_addr(master))
            await agent.call("create_topic", address=cluster.broker_addr(master), topic=TOPIC,
                             queues=4)  # fmt: skip
        await wait_route(agent, cluster, {"broker-a": {0, 1}, "broker-b": {0, 1}})
        before = await produce(agent, cluster, 0, 40)
        assert statuses(before) == {"SEND_OK": 40}
        assert {r[2] for r in before} == {"broker-a", "broker-b"}

        for peer in ("client", "namesrv"):
            cluster.network.cut("master", peer)
        during = await produce(agent, cluster, 40, 20)
        failed = [r for r in during if r[1] != "SEND_OK"]
        moved = during[during.index(failed[0]) + 1 :] if failed else during
        assert all(r[1] == "SEND_OK" and r[2] == "broker-b" for r in moved), during
        assert len(failed) <= 2, failed  # the first send to the cut master, maybe one more
        resent = [await produce(agent, cluster, r[0], 1) for r in failed]
        assert all(r[0][1] == "SEND_OK" for r in resent), resent

        # the name server forgets the master; the consumer reads group a from the slave, as
        # it must: the master is out of the client's reach
        await wait_route(agent, cluster, {"broker-a": {1}, "broker-b": {0, 1}})
        with pytest.raises(AgentError, match=r"ConnectError|Timeout"):
            await agent.call("ha_status", address=cluster.broker_addr("master"))
        await agent.call("consumer_start", namesrv=cluster.namesrv_addr, group="PartitionCG",
                         topic=TOPIC, brokers=["broker-a", "broker-b"], queues=4)  # fmt: skip
        consumed: list[list[Any]] = []
        await consume_until(agent, consumed, set(range(60)))
        from_a = [c for c in consumed if c[0] == "broker-a"]
        assert {c[3] for c in from_a} == {r[0] for r in before if r[2] == "broker-a"}

        cluster.network.heal()
        await wait_route(agent, cluster, {"broker-a": {0, 1}, "broker-b": {0, 1}})
        after = await agent.call("send", address=cluster.broker_addr("master"), topic=TOPIC,
                                 start=60, count=12)  # fmt: skip
        assert statuses(after) == {"SEND_OK": 12}
        await consume_until(agent, consumed, set(range(72)))
        assert_forward_only(consumed)
        assert sorted(n for *_, n in consumed) == list(range(72))
        # the group's offsets on the returned master reach what was read, none behind it
        read = Counter((c[0], c[1]) for c in consumed)

        async def committed() -> bool:
            master = cluster.broker_addr("master")
            for queue in range(4):
                offset = await agent.call(
                    "committed", address=master, group="PartitionCG", topic=TOPIC, queue_id=queue
                )
                if offset != read[("broker-a", queue)]:
                    return False
            return True

        await eventually(
            committed, "broker-a's master to hold the consumed offsets", 30, interval=0.5
        )
        await agent.call("consumer_stop")
        print(f"while cut: {len(failed)} send(s) failed then all went to broker-b; "
              f"{len(from_a)} messages of broker-a read from its slave")  # fmt: skip


async def test_name_server_isolated(tmp_path: Path) -> None:
    async with hosts(tmp_path, GROUP_A) as cluster:
        agent = await group_a(cluster, *QUICK_EXPIRY)
        await agent.call("create_topic", address=cluster.broker_addr("master"), topic=TOPIC,
                         queues=4)  # fmt: skip
        await wait_route(agent, cluster, {"broker-a": {0, 1}})
        sent = await produce(agent, cluster, 0, 20)

        for peer in ("master", "slave", "client"):
            cluster.network.cut("namesrv", peer)
        namesrv = cluster.daemons[0]

        async def expired() -> bool:
            sent.extend(await produce(agent, cluster, len(sent), 5))  # from cached routes
            log = namesrv.log_text()
            return all(
                re.search(
                    rf"broker removed: \S+ {re.escape(cluster.broker_addr(h))} .*expired", log
                )
                for h in ("master", "slave")
            )

        await eventually(expired, "the name server to expire both brokers", 60, interval=0.2)

        cluster.network.heal()
        await wait_route(agent, cluster, {"broker-a": {0, 1}})
        sent += await produce(agent, cluster, len(sent), 10)
        assert statuses(sent) == {"SEND_OK": len(sent)}
        found = await agent.call("read_all", address=cluster.broker_addr("master"), topic=TOPIC)
        assert sorted(n for *_, n in found) == list(range(len(sent)))
        await caught_up(cluster, agent, "master", "slave")
        print(f"{len(sent)} messages sent across the name server's isolation, none lost")


def test_leftovers_of_a_crashed_run_are_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    leftover = f"{PREFIX}{gone.pid}-0-router"
    run("ip", "netns", "add", leftover)
    inside = subprocess.Popen(["ip", "netns", "exec", leftover, "sleep", "600"])
    try:
        # `ip netns exec` execs in place: the pid is in the namespace once it entered it
        eventually_sync(lambda: inside.pid in namespace_pids(leftover), "sleep in the namespace")
        assert leftover in clean_leftovers()
        assert inside.wait(10) == -signal.SIGKILL
        assert not (NETNS_DIR / leftover).exists()
    finally:
        inside.kill()
        inside.wait()
        delete_namespace(leftover)


def test_a_failing_test_leaves_no_namespace(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the test failed"), Network(GROUP_A, tmp_path) as net:
        names = [net.router, *(net.netns(h) for h in GROUP_A)]
        net.cut("master", "slave")
        net.delay("client", "master", 50)
        assert all((NETNS_DIR / n).exists() for n in names)
        raise RuntimeError("the test failed")
    assert not any((NETNS_DIR / n).exists() for n in names)
