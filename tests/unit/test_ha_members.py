"""Who a master's HA port admits by default (broker/ha_members.py), the name servers' answers
played by a stand-in: no sockets."""

from __future__ import annotations

import asyncio
import time

from tidemq.broker.config import BrokerConfig
from tidemq.broker.ha_members import GroupMembers, normal_ip
from tidemq.broker.state import BrokerState


class Registry:
    """What the name servers list as the group's slaves, and how often they were asked."""

    def __init__(self, *slaves: str, answers: bool = True) -> None:
        self.slaves = set(slaves)
        self.answers = answers
        self.asked = 0

    async def lookup(self) -> tuple[set[str], bool]:
        self.asked += 1
        await asyncio.sleep(0)
        return (set(self.slaves), True) if self.answers else (set(), False)


def members(registry: Registry, timeout_ms: int) -> GroupMembers:
    config = BrokerConfig(broker_name="broker-a", namesrv_addr="127.0.0.1:1")
    group = GroupMembers(BrokerState(config, "127.0.0.1:10911", b""), timeout_ms)
    group._slaves_of_group = registry.lookup  # type: ignore[method-assign]
    return group


async def test_a_registered_slave_is_admitted_at_the_first_lookup() -> None:
    registry = Registry("10.0.0.2")
    group = members(registry, 5000)
    started = time.monotonic()
    assert await group.admit("10.0.0.2") is None
    assert await group.admit("::ffff:10.0.0.2") is None  # IPv4-mapped: the same address
    assert time.monotonic() - started < 1 and registry.asked == 1
    await group.stop()


async def test_a_slave_registering_while_held_is_admitted() -> None:
    registry = Registry()
    group = members(registry, 5000)
    held = asyncio.create_task(group.admit("10.0.0.3"))
    await asyncio.sleep(0.2)
    assert not held.done()
    registry.slaves.add("10.0.0.3")
    assert await asyncio.wait_for(held, 2) is None
    await group.stop()


async def test_a_stranger_is_refused_after_the_timeout_even_a_zero_one() -> None:
    for timeout_ms in (0, 300):
        registry = Registry("10.0.0.2")
        group = members(registry, timeout_ms)
        refused = await asyncio.wait_for(group.admit("10.0.0.9"), 3)
        assert refused is not None and "not a slave of group broker-a" in refused
        assert registry.asked >= 1  # asked once at least, also with a timeout of 0
        await group.stop()
    # With a timeout of 0, a slave the master has not asked about yet is still found.
    group = members(Registry("10.0.0.2"), 0)
    assert await group.admit("10.0.0.2") is None
    await group.stop()


async def test_name_servers_that_do_not_answer_keep_what_was_known() -> None:
    registry = Registry("10.0.0.2")
    group = members(registry, 200)
    assert await group.admit("10.0.0.2") is None
    registry.answers = False
    await asyncio.sleep(0.6)  # past POLL_INTERVAL: the next stranger causes another lookup
    assert await group.admit("10.0.0.9") is not None
    assert registry.asked >= 2
    assert await group.admit("10.0.0.2") is None
    await group.stop()


async def test_etcd_members_are_admitted() -> None:
    group = members(Registry(), 200)
    group.learn(["10.0.0.4:41234"])
    assert await group.admit("10.0.0.4") is None
    group.learn([])
    assert await group.admit("10.0.0.4") is not None
    await group.stop()


def test_addresses_compare_as_ips() -> None:
    assert normal_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert normal_ip("[::1]") == "::1"
    assert normal_ip("broker-host") is None
