"""Controller-mode brokers (issue 16) as real processes: `start_member` runs brokerd in
controller mode on an etcd (tests/support/etcd.py) with fast lease timing (`CONTROLLER_TIMING`:
a 2 s lease renewed every 250 ms, writes stop 700 ms before it can expire) and fast HA timing;
`stored_by(result)` is the address of the broker that answered a send SEND_OK;
`controller(api, broker)` is the broker's controller status (GET_BROKER_HA_STATUS's
"controller": isMaster, epoch, syncStateSet, elections, electedAtMillis, ...); `wait_master`
waits until one of some brokers says it is master.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.conditions import eventually
from tests.support.ha_brokers import HA_TIMING, ha_status
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import TideMQError
from tidemq.client.message import SendResult
from tidemq.store.record import decode_message_id

CONTROLLER_TIMING = (
    "masterLeaseTtlSeconds=2",
    "masterLeaseKeepAliveInterval=250",
    "masterLeaseSafetyMargin=700",
    "controllerRequestTimeout=1000",
    "registerNameServerPeriod=10000",
)


def start_member(
    processes: ProcessGroup,
    namesrv: Daemon,
    controller_addr: str,
    root: Path,
    broker_id: int,
    *extra: str,
) -> Daemon:
    """Broker `broker_id` of group broker-a, its store in root/store-<id>, named broker-<id>."""
    return processes.brokerd(
        namesrv.address,
        root / f"store-{broker_id}",
        *member_overrides(controller_addr, broker_id),
        *extra,
        name=f"broker-{broker_id}",
    )


def member_overrides(controller_addr: str, broker_id: int) -> tuple[str, ...]:
    """brokerd's `key=value` arguments of a controller-mode member with the tests' timing."""
    return (
        "enableControllerMode=true",
        f"controllerAddr={controller_addr}",
        "brokerRole=SYNC_MASTER",
        f"brokerId={broker_id}",
        f"brokerElectionPriority={broker_id}",
        *HA_TIMING,
        *CONTROLLER_TIMING,
    )


def stored_by(result: SendResult) -> str:
    """The address of the broker that stored a message answered SEND_OK (its offsetMsgId)."""
    (ip, port), _offset = decode_message_id(result.offset_msg_id)
    return f"{ip}:{port}"


async def controller(api: BrokerAPI, broker: Daemon | str) -> dict[str, object]:
    """The controller status of a broker (a Daemon or its address)."""
    address = broker if isinstance(broker, str) else broker.address
    info = (await ha_status(api, address))["controller"]
    assert isinstance(info, dict)
    return info


async def wait_master(api: BrokerAPI, brokers: list[Daemon], timeout: float) -> Daemon:
    found: list[Daemon] = []

    async def elected() -> bool:
        for broker in brokers:
            try:
                if (await controller(api, broker))["isMaster"]:
                    found.append(broker)
                    return True
            except TideMQError:
                continue
        return False

    await eventually(elected, "a master elected", timeout, interval=0.05)
    return found[0]


async def wait_sync_state_set(
    api: BrokerAPI, master: Daemon, members: list[int], timeout: float = 30
) -> None:
    async def there() -> bool:
        return (await controller(api, master))["syncStateSet"] == members

    await eventually(there, f"the SyncStateSet {members}", timeout, interval=0.05)
