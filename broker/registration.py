"""Registration with the name servers (RocketMQ's BrokerOuterAPI.registerBrokerAll).

The broker registers with every name server of namesrvAddr in parallel: at start, whenever its
topic table changes, and every registerNameServerPeriod (clamped to 10-60 s, as RocketMQ does).
Each call waits at most registerBrokerTimeoutMills. The result of the first name server that
answered tells a slave its master's HA address and broker address. At stop the broker
unregisters from every name server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tidemq.client.protocol.models import TopicConfigSerializeWrapper
from tidemq.client.protocol.namesrv import (
    NamesrvResponseError,
    RegisterBrokerBody,
    RegisterBrokerResult,
    UnregisterBrokerRequestHeader,
    check_success,
    parse_register_broker_response,
    register_broker_request,
    simple_request,
)
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.transport.client import RemotingClient
from tidemq.common.lifecycle import BackgroundTask, Service, Step

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    master_epoch: int | None = None  # controller mode: an elected master's epoch


ResultListener = Callable[[RegisterBrokerResult], None]


def registration_period_ms(configured: int) -> int:
    return max(10_000, min(configured, 60_000))


class NameServerRegistration(Service):
    """Children: the first registration and, at stop, the unregistration; the periodic loop."""

    def __init__(
        self,
        identity: BrokerIdentity,
        name_servers: list[str],
        client: RemotingClient,
        topics: Callable[[], TopicConfigSerializeWrapper],
        *,
        period_ms: int,
        timeout_ms: int,
        on_result: ResultListener | None = None,
    ) -> None:
        self.identity = identity
        self.name_servers = name_servers
        self.client = client
        self.topics = topics
        self.period = registration_period_ms(period_ms) / 1000
        self.timeout = timeout_ms / 1000
        self.on_result = on_result
        self._wakeup = asyncio.Event()
        self.registrations = 0
        super().__init__()
        self.add_child(Step(start=self.register_all, stop=self._unregister_all))
        self.add_child(BackgroundTask(self._run, "register-broker"))

    def request_registration(self) -> None:
        """Register soon (the topic table changed)."""
        self._wakeup.set()

    def change_identity(self, identity: BrokerIdentity) -> None:
        """Controller mode: the broker was elected master (id 0, with its epoch); register as it
        with every name server now."""
        self.identity = identity
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.period)
            self._wakeup.clear()
            try:
                await self.register_all()
            except Exception:
                log.exception("registration with the name servers failed")

    async def register_all(self) -> list[RegisterBrokerResult]:
        if not self.name_servers:
            return []
        wrapper = self.topics()
        body = RegisterBrokerBody(wrapper, [])
        results = await asyncio.gather(
            *(self._register_one(address, body) for address in self.name_servers)
        )
        answered = [r for r in results if r is not None]
        self.registrations += 1
        if answered and self.on_result is not None:
            self.on_result(answered[0])
        return answered

    async def _register_one(
        self, address: str, body: RegisterBrokerBody
    ) -> RegisterBrokerResult | None:
        ident = self.identity
        request = register_broker_request(
            broker_name=ident.broker_name,
            broker_addr=ident.broker_addr,
            cluster_name=ident.cluster_name,
            ha_server_addr=ident.ha_server_addr,
            broker_id=ident.broker_id,
            body=body,
            master_epoch=ident.master_epoch,
        )
        try:
            response = await self.client.invoke(address, request, self.timeout)
            return parse_register_broker_response(response)
        except (ConnectionError, TimeoutError, NamesrvResponseError, ValueError) as exc:
            log.warning(
                "register broker %s with name server %s failed: %s", ident.broker_name, address, exc
            )
            return None

    async def _unregister_all(self) -> None:
        await asyncio.gather(*(self._unregister_one(a) for a in self.name_servers))

    async def _unregister_one(self, address: str) -> None:
        ident = self.identity
        header = UnregisterBrokerRequestHeader(
            broker_name=ident.broker_name,
            broker_addr=ident.broker_addr,
            cluster_name=ident.cluster_name,
            broker_id=ident.broker_id,
        )
        try:
            response = await self.client.invoke(
                address, simple_request(RequestCode.UNREGISTER_BROKER, header), self.timeout
            )
            check_success(response)
        except (ConnectionError, TimeoutError, NamesrvResponseError, ValueError) as exc:
            log.warning("unregister from name server %s failed: %s", address, exc)
