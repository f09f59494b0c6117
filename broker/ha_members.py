"""On a master: which addresses belong to its broker group, so that its HA port admits them and
no one else (the default: an empty haAllowedSlaveAddresses).

The members are the slaves the name servers list under this broker's brokerName (cluster info,
every brokerId but the master's 0), and in controller mode also the HA client addresses the
members publish in etcd (broker/failover.py). A connection is admitted by its peer's IP. A
connection from an IP not known yet is held, nothing read and nothing sent, while the master asks
the name servers again (every `POLL_INTERVAL`), until the IP is known or `haAdmissionTimeout`
passed and a lookup started after the connection came has ended; then it is refused with one log
line. Name servers that do not answer leave the known slaves as they were (a master restarted
while no name server answers admits no slave until one does, or haAllowedSlaveAddresses lists
them).

Why hold instead of refusing at once: a slave connects to its master's HA port right after it
registered (it learns the HA address from its registration), possibly before the master has
asked the name servers since; and in controller mode a slave may follow the master etcd names
before its registration reached every name server. The first lookup after the connect finds it,
so a slave is admitted within a round trip; a stranger waits at most the timeout, holding one
socket (ha/transport.py bounds how many). A slave that is refused reconnects after
haReconnectInterval anyway.

The IP is what is checked: brokers on one machine share it (every broker of a test on
127.0.0.1), and a stranger there is as trusted as the brokers' own user. Across machines a
stranger is told apart; a slave whose HA connection leaves from another address than its
brokerIP1 needs haAllowedSlaveAddresses. What a name server lists is what brokers registered,
unauthenticated in RocketMQ 4.x: with aclEnable the HA proof (broker/acl/ha_auth.py) is what keeps a
registered impostor out.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
import time

from tidemq.broker.state import BrokerState
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import TideMQError
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.signing import Signer
from tidemq.common.lifecycle import cancel_and_wait

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5
LOOKUP_TIMEOUT = 3.0


def normal_ip(text: str) -> str | None:
    """An address as compared (an IPv4-mapped IPv6 address as its IPv4 one); None: not an IP."""
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def host_of(address: str) -> str:
    """The host of "host:port"."""
    return address.rpartition(":")[0].strip("[]") if ":" in address else address


class GroupMembers:
    def __init__(
        self,
        state: BrokerState,
        timeout_ms: int,
        tls: ssl.SSLContext | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.state = state
        self.timeout = timeout_ms / 1000
        self.api = BrokerAPI(
            serialize_type=SerializeType.JSON, timeout=LOOKUP_TIMEOUT, tls=tls, signer=signer
        )
        self._from_namesrv: frozenset[str] = frozenset()
        self._from_etcd: frozenset[str] = frozenset()
        self._changed = asyncio.Event()
        self._lookup: asyncio.Task[None] | None = None
        self._last_lookup = 0.0
        # Lookups numbered as they start; the highest that ended.
        self._started = 0
        self._ended = 0

    def known(self, ip: str) -> bool:
        address = normal_ip(ip)
        return address is not None and (address in self._from_namesrv or address in self._from_etcd)

    def learn(self, addresses: list[str]) -> None:
        """Controller mode: the members' HA client addresses ("ip:port") published in etcd."""
        ips = frozenset(filter(None, (normal_ip(host_of(a)) for a in addresses)))
        if ips != self._from_etcd:
            self._from_etcd = ips
            self._changed.set()

    async def admit(self, ip: str) -> str | None:
        """None once `ip` is a slave's. Refused once the timeout passed and a lookup that
        started after the connection came has ended (so that even a timeout of 0 asks once);
        at the latest a lookup's worth after the timeout."""
        arrived = time.monotonic()
        asked_before = self._started
        give_up = arrived + self.timeout + LOOKUP_TIMEOUT * max(1, len(self._name_servers()))
        while not self.known(ip):
            now = time.monotonic()
            timed_out = now >= arrived + self.timeout
            if (timed_out and self._ended > asked_before) or now >= give_up:
                return (
                    f"not a slave of group {self.state.config.broker_name} as the name servers "
                    f"know them (after {(now - arrived) * 1000:.0f} ms; "
                    "haAllowedSlaveAddresses admits other addresses)"
                )
            self._look_up()
            self._changed.clear()
            wait = (give_up if timed_out else arrived + self.timeout) - now
            try:
                async with asyncio.timeout(min(max(wait, 0.01), POLL_INTERVAL)):
                    await self._changed.wait()
            except TimeoutError:
                pass
        return None

    def _name_servers(self) -> list[str]:
        return self.state.config.name_servers

    def _look_up(self) -> None:
        """Ask the name servers, unless a lookup runs or one started within POLL_INTERVAL."""
        if self._lookup is not None and not self._lookup.done():
            return
        if time.monotonic() - self._last_lookup < POLL_INTERVAL:
            return
        self._last_lookup = time.monotonic()
        self._started += 1
        self._lookup = asyncio.get_running_loop().create_task(self._ask_name_servers(self._started))

    async def _ask_name_servers(self, number: int) -> None:
        try:
            found, answered = await self._slaves_of_group()
            if answered:
                self._from_namesrv = frozenset(found)
        finally:
            self._ended = max(self._ended, number)
            self._changed.set()  # every waiter looks again, found or not

    async def _slaves_of_group(self) -> tuple[set[str], bool]:
        """The IPs of this group's slaves, and whether any name server answered."""
        config = self.state.config
        found: set[str] = set()
        answered = False
        for namesrv in config.name_servers:
            try:
                info = await self.api.get_cluster_info(namesrv)
            except TideMQError as exc:
                log.debug("HA members: cluster info from %s failed: %s", namesrv, exc)
                continue
            answered = True
            data = info.broker_addr_table.get(config.broker_name)
            for broker_id, address in data.broker_addrs.items() if data else ():
                if broker_id != 0:  # the master itself is no slave
                    found.update(await _resolve(host_of(address)))
        return found, answered

    async def stop(self) -> None:
        task, self._lookup = self._lookup, None
        await cancel_and_wait(task)
        await self.api.close()


async def _resolve(host: str) -> set[str]:
    """A registered host's IPs (a name when brokerIP1 is one)."""
    ip = normal_ip(host)
    if ip is not None:
        return {ip}
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None)
    except OSError:
        return set()
    return {ip for info in infos if (ip := normal_ip(str(info[4][0]))) is not None}
