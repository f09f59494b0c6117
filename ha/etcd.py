"""The broker's etcd client: aetcd (etcd's v3 gRPC API, asyncio-native) over several endpoints.

Why aetcd: it is the maintained asyncio successor of aetcd3 and python-etcd3 (the gRPC v3 API
that etcd 3.4 serves, transactions, leases), with no thread of its own. It talks to one endpoint
per client, so this module holds one client at a time and moves to the next endpoint of
controllerAddr when a call fails (a member down, a partition): each call tries every endpoint
once, starting with the one that answered last, and gives up with `EtcdUnavailable` naming them.
Every call has a deadline (`timeout`), so a member that accepts but never answers costs one
timeout, never a hang.

Only this module imports aetcd (it ships no type information): the rest of tidemq sees `Entry`
records, lease ids and booleans.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions

log = logging.getLogger(__name__)

T = TypeVar("T")


class EtcdUnavailable(Exception):
    """No endpoint of controllerAddr answered within the deadline."""


@dataclass(frozen=True, slots=True)
class Entry:
    key: bytes
    value: bytes
    mod_revision: int
    lease: int


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """controllerAddr's `host:port;host:port` (ValueError naming the entry that is not one)."""
    endpoints = []
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not host:port")
        endpoints.append((host, int(port)))
    return endpoints


# What a failed call can raise: gRPC's errors mapped by aetcd, its connect timeout, ours.
_CALL_ERRORS = (aetcd.exceptions.ClientError, OSError, TimeoutError, asyncio.TimeoutError)


class Etcd:
    def __init__(self, endpoints: list[tuple[str, int]], *, timeout: float) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = endpoints
        self.timeout = timeout
        self._current = 0
        self._client: Any = None

    @property
    def endpoint(self) -> str:
        host, port = self.endpoints[self._current]
        return f"{host}:{port}"

    def _connect(self) -> Any:
        if self._client is None:
            host, port = self.endpoints[self._current]
            self._client = aetcd.Client(
                host=host,
                port=port,
                timeout=self.timeout,
                connect_wait_timeout=max(1, int(self.timeout)),
            )
        return self._client

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), self.timeout)
            except (*_CALL_ERRORS, asyncio.CancelledError):
                pass

    async def call(self, operation: Callable[[Any], Awaitable[T]]) -> T:
        """`operation(client)` on the first endpoint that answers (EtcdUnavailable if none)."""
        failures = []
        for _ in range(len(self.endpoints)):
            client = self._connect()
            try:
                return await asyncio.wait_for(operation(client), self.timeout)
            except _CALL_ERRORS as exc:
                failures.append(f"{self.endpoint}: {type(exc).__name__} {exc}".strip())
                await self._drop_client()
                self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable("etcd unreachable (" + "; ".join(failures) + ")")

    async def close(self) -> None:
        await self._drop_client()

    # --- keys --------------------------------------------------------------------------------

    async def get(self, key: bytes) -> Entry | None:
        found = await self.call(lambda c: c.get(key))
        return None if found is None else _entry(found)

    async def get_prefix(self, prefix: bytes) -> list[Entry]:
        async def read(client: Any) -> list[Entry]:
            return [_entry(kv) for kv in await client.get_prefix(prefix)]

        return await self.call(read)

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> None:
        await self.call(lambda c: c.put(key, value, lease=lease or None))

    async def delete(self, key: bytes) -> None:
        await self.call(lambda c: c.delete(key))

    async def transaction(
        self,
        compare: Callable[[Any], list[Any]],
        success: Callable[[Any], list[Any]],
    ) -> bool:
        """Compare-and-set: `success`'s operations run when every comparison holds. The builders
        get aetcd's `transactions` namespace (create/mod/value/version; put/delete)."""

        async def run(client: Any) -> bool:
            tx = client.transactions
            succeeded, _responses = await client.transaction(
                compare=compare(tx), success=success(tx), failure=[]
            )
            return bool(succeeded)

        return await self.call(run)

    # --- leases ------------------------------------------------------------------------------

    async def grant(self, ttl_seconds: int) -> int:
        async def grant(client: Any) -> int:
            lease = await client.lease(ttl_seconds)
            return int(lease.id)

        return await self.call(grant)

    async def keep_alive(self, lease: int) -> int:
        """One keep-alive; the TTL etcd granted again, 0 when the lease is gone (expired or
        revoked: it cannot come back)."""

        async def refresh(client: Any) -> int:
            reply = await client.refresh_lease(lease)
            return 0 if reply is None else max(int(reply.TTL), 0)

        return await self.call(refresh)

    async def revoke(self, lease: int) -> None:
        await self.call(lambda c: c.revoke_lease(lease))


def _entry(kv: Any) -> Entry:
    return Entry(bytes(kv.key), bytes(kv.value), int(kv.mod_revision), int(kv.lease))
