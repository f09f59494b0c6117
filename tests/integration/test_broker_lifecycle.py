"""The order in which an in-process master broker (loopback, port 0) stops its parts: metrics
first, then it stops serving (held pulls answered, server, schedule, HA), then the rest in
reverse of starting: unregistered, the tables persisted, the store stopped, the name-server
client closed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tidemq.broker.broker import Broker
from tidemq.broker.config import BrokerConfig, RemotingConfig
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


def make_broker(root: Path) -> Broker:
    return Broker(
        BrokerConfig(
            broker_name="lifecycle", listen_port=0, metrics_port=0, broker_ip1="127.0.0.1"
        ),
        StoreConfig(store_path_root_dir=str(root)),
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
