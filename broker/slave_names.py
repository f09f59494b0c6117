"""On a master: which slave broker each HA connection comes from.

A master sees a slave's HA connection only by its peer address, a temporary port
(`127.0.0.1:36260`), and RocketMQ's HA protocol carries nothing else. A tidemq slave reports the
local address of its HA connection as `haLocalAddress` in its GET_BROKER_HA_STATUS answer, so
when a slave connects the master asks the name servers for its group's slaves (cluster info),
asks each of them for its HA status, and maps `haLocalAddress` to the slave's broker address
and id. The HA status and the `brokerIP` label of `rocketmq_broker_commitlog_diff` then name
the slave by those. A slave that cannot be asked (a RocketMQ slave, one not registered yet after
`RESOLVE_ATTEMPTS` tries a second apart) keeps its connection address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable

from tidemq.broker.state import BrokerState
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import TideMQError
from tidemq.client.remoting.codes import RequestCode, SerializeType
from tidemq.client.remoting.signing import Signer
from tidemq.common.lifecycle import cancel_and_wait

log = logging.getLogger(__name__)

RESOLVE_ATTEMPTS = 10
RESOLVE_TIMEOUT = 3.0


class SlaveNames:
    def __init__(
        self,
        state: BrokerState,
        connections: Callable[[], list[str]],
        tls: ssl.SSLContext | None = None,
        signer: Signer | None = None,
    ) -> None:
        """`connections`: the peer addresses of the master's HA connections now; `signer`:
        the broker's own account with aclEnable (broker/acl/own_account.py)."""
        self.state = state
        self.connections = connections
        self.api = BrokerAPI(
            serialize_type=SerializeType.JSON, timeout=RESOLVE_TIMEOUT, tls=tls, signer=signer
        )
        self.names: dict[str, tuple[str, int]] = {}
        self._task: asyncio.Task[None] | None = None

    def lookup(self, connection: str) -> tuple[str, int] | None:
        """The slave's (broker address, broker id) for an HA connection's peer address."""
        return self.names.get(connection)

    def request(self) -> None:
        """Resolve the connections not named yet (a slave has just connected)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._resolve())

    async def _resolve(self) -> None:
        for _ in range(RESOLVE_ATTEMPTS):
            await self._ask_slaves()
            if all(address in self.names for address in self.connections()):
                return
            await asyncio.sleep(1.0)

    async def _ask_slaves(self) -> None:
        config = self.state.config
        for namesrv in config.name_servers:
            try:
                info = await self.api.get_cluster_info(namesrv)
            except TideMQError as exc:
                log.debug("slave names: cluster info from %s failed: %s", namesrv, exc)
                continue
            data = info.broker_addr_table.get(config.broker_name)
            for broker_id, address in data.broker_addrs.items() if data else []:
                if broker_id == 0:
                    continue
                try:
                    response = await self.api.call(
                        address, self.api.request(RequestCode.GET_BROKER_HA_STATUS)
                    )
                    local = json.loads(bytes(response.body)).get("haLocalAddress")
                except (TideMQError, ValueError, AttributeError) as exc:
                    log.debug("slave names: %s did not say: %s", address, exc)
                    continue
                if isinstance(local, str) and local:
                    self.names[local] = (address, broker_id)
            return

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.api.close()
