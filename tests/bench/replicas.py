"""Master/slave pairs of brokerd processes for the benchmarks, and their HA status.

`master_with_slave` starts a master (with the role asked) and its slave (brokerId=1) under one
brokerName, both with BROKER_SIZES; `wait_slave` waits until the master reports a slave
connection in TRANSFER state (GET_BROKER_HA_STATUS, whose JSON body `ha_status` returns).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.bench import BROKER_SIZES
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.remoting.codes import RequestCode


async def ha_status(api: BrokerAPI, address: str) -> dict[str, object]:
    response = await api.call(address, api.request(RequestCode.GET_BROKER_HA_STATUS))
    info = json.loads(bytes(response.body))
    assert isinstance(info, dict)
    return info


def master_with_slave(
    group: ProcessGroup, namesrv: Daemon, folder: Path, role: str, name: str, *overrides: str
) -> tuple[Daemon, Daemon]:
    """(master, slave) of brokerName `name`, stores under `folder`; `group` stops them.

    `overrides` (`key=value`) apply to both, after BROKER_SIZES.
    """
    master = group.brokerd(
        namesrv.address,
        folder / f"{name}-m",
        f"brokerRole={role}",
        *BROKER_SIZES,
        *overrides,
        f"brokerName={name}",
        name=f"{name}-master",
    )
    slave = group.brokerd(
        namesrv.address,
        folder / f"{name}-s",
        "brokerRole=SLAVE",
        "brokerId=1",
        *BROKER_SIZES,
        *overrides,
        f"brokerName={name}",
        name=f"{name}-slave",
    )
    return master, slave


async def wait_slave(address: str) -> None:
    """Wait (10 s at most) until the master at `address` transfers to a slave."""
    api = BrokerAPI()
    try:
        for _ in range(200):
            info = await ha_status(api, address)
            conns = info.get("haConnectionInfo")
            if isinstance(conns, list) and any(c.get("state") == "TRANSFER" for c in conns):
                return
            await asyncio.sleep(0.05)
    finally:
        await api.close()
    raise TimeoutError("slave did not connect")
