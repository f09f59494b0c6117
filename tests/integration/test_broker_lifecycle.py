"""The order in which an in-process master broker (loopback, port 0) stops its parts: metrics
first, then it stops serving (held pulls answered, server, schedule, HA), then the rest in
reverse of starting: unregistered, the tables persisted, the store stopped, the name-server
client closed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig, RemotingConfig
from tidemq.broker.remoting.server import RemotingServer
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.protocol.namesrv import RegisterBrokerBody, RegisterBrokerRequestHeader
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.common.lifecycle import cancel_and_wait
from tidemq.ha.config import HAConfig
from tidemq.store.config import StoreConfig


def recorded(calls: list[str], name: str, action: Callable[[], Any]) -> Callable[[], Any]:
    def record() -> Any:
        calls.append(name)
        return action()

    return record


def recorded_async(
    calls: list[str], name: str, action: Callable[[], Awaitable[None]]
) -> Callable[[], Awaitable[None]]:
    async def record() -> None:
        calls.append(name)
        await action()

    return record


def small_store(root: Path) -> StoreConfig:
    """Default sizes would reserve 1 GiB of CommitLog and 400 MiB of index for each test."""
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=4 * 1024 * 1024,
        max_hash_slot_num=5000,
        max_index_num=20000,
    )


def make_broker(root: Path) -> Broker:
    return Broker(
        BrokerConfig(
            broker_name="lifecycle", listen_port=0, metrics_port=0, broker_ip1="127.0.0.1"
        ),
        small_store(root),
        RemotingConfig(bind_address="127.0.0.1"),
        HAConfig(ha_listen_port=0),
    )


async def test_a_master_stops_its_parts_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = make_broker(tmp_path)
    calls: list[str] = []
    client = broker.namesrv_client
    monkeypatch.setattr(client, "close", recorded_async(calls, "namesrv client", client.close))
    for manager in (broker.topics, broker.groups, broker.offsets, broker.delay_offsets):
        persist = recorded(calls, f"persist {manager.path.name}", manager.persist_quietly)
        monkeypatch.setattr(manager, "persist_quietly", persist)
    await broker.start()
    try:
        assert broker.running and broker.metrics is not None
        assert broker.ha_service is not None and broker.ha_service.port > 0
        for name, part in (
            ("metrics", broker.metrics),
            ("pull holds", broker.pull_holds),
            ("server", broker.server),
            ("registration", broker.registration),
            ("schedule", broker.schedule),
            ("ha service", broker.ha_service),
            ("store", broker.store),
        ):
            assert part is not None
            monkeypatch.setattr(part, "stop", recorded_async(calls, name, part.stop))
    finally:
        await broker.stop()
    assert not broker.running
    # The schedule persists the delay offsets at its own stop; the parts stopped early are
    # stopped again, harmlessly, at their place in the reverse order.
    first_calls = list(dict.fromkeys(calls))
    assert first_calls == [
        "metrics",
        "pull holds",
        "server",
        "schedule",
        "persist delayOffset.json",
        "ha service",
        "registration",
        "persist topics.json",
        "persist subscriptionGroup.json",
        "persist consumerOffset.json",
        "store",
        "namesrv client",
    ]
    await broker.stop()  # idempotent
    assert list(dict.fromkeys(calls)) == first_calls


async def test_a_topic_made_during_the_first_registration_is_registered_soon(
    tmp_path: Path,
) -> None:
    # A name server (in process, loopback) that holds the broker's first registration until
    # the topic exists: the change must still reach it, not wait for the 30 s period.
    first_held = asyncio.Event()
    release = asyncio.Event()
    registered: list[set[str]] = []

    async def register(connection: RemotingConnection, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        body = RegisterBrokerBody.decode(request.body, header.compressed)
        if not registered:
            first_held.set()
            await release.wait()
        registered.append(set(body.topic_config_wrapper.topic_config_table))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def unregister(
        connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    namesrv = RemotingServer("127.0.0.1", 0, name="test namesrv")
    namesrv.register(RequestCode.REGISTER_BROKER, register)
    namesrv.register(RequestCode.UNREGISTER_BROKER, unregister)
    await namesrv.start()
    broker = Broker(
        BrokerConfig(
            broker_name="lifecycle",
            listen_port=0,
            broker_ip1="127.0.0.1",
            namesrv_addr=f"127.0.0.1:{namesrv.port}",
        ),
        small_store(tmp_path),
        RemotingConfig(bind_address="127.0.0.1"),
        HAConfig(ha_listen_port=0),
    )
    starting = asyncio.get_running_loop().create_task(broker.start())
    try:
        await asyncio.wait_for(first_held.wait(), 10)
        broker.topics.update(TopicConfig("MadeWhileRegistering", 4, 4))
        release.set()
        await asyncio.wait_for(starting, 10)
        await eventually(
            lambda: any("MadeWhileRegistering" in topics for topics in registered),
            "a registration with the new topic",
            5,
        )
    finally:
        release.set()
        await cancel_and_wait(starting)
        await broker.stop()
        await namesrv.stop()
