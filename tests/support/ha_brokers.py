"""Master/slave brokers as real processes: their HA timing and status, and waits on both.

`HA_TIMING`: brokerd overrides that make replication react in well under a second.
`ha_status(api, address)`: the broker's GET_BROKER_HA_STATUS JSON (master: "haConnectionInfo",
"masterCommitLogMaxOffset"; slave: "state", "maxOffset", ...).
"""

from __future__ import annotations

import json

from tests.support.conditions import eventually
from tests.support.processes import Daemon
from tidemq.client.api import BrokerAPI
from tidemq.client.remoting.codes import RequestCode

HA_TIMING = (
    "haSendHeartbeatInterval=500",
    "haHousekeepingInterval=3000",
    "haReconnectInterval=300",
    "slaveSynchronizeInterval=500",
)


async def ha_status(api: BrokerAPI, address: str) -> dict[str, object]:
    response = await api.call(address, api.request(RequestCode.GET_BROKER_HA_STATUS))
    info = json.loads(bytes(response.body))
    assert isinstance(info, dict)
    return info


async def wait_slave_connected(api: BrokerAPI, master: Daemon, timeout: float = 15.0) -> None:
    async def connected() -> bool:
        info = await ha_status(api, master.address)
        conns = info.get("haConnectionInfo")
        return isinstance(conns, list) and any(c.get("state") == "TRANSFER" for c in conns)

    await eventually(connected, "the slave to connect to the master's HA port", timeout)


async def wait_caught_up(
    api: BrokerAPI, master: Daemon, slave: Daemon, timeout: float = 30.0
) -> int:
    target = int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])  # type: ignore[call-overload]

    async def caught_up() -> bool:
        info = await ha_status(api, slave.address)
        return int(info["maxOffset"]) >= target  # type: ignore[call-overload]

    await eventually(caught_up, f"the slave to reach offset {target}", timeout)
    return target
