"""An in-memory etcd for unit tests of broker/failover.py's GroupController: the calls of
ha/etcd.py's `Etcd` (get, get_prefix, put, delete, transaction, grant, keep_alive, revoke,
close) on a dict of keys with revisions and leases, no expiry (a test expires a lease with
`expire`).

Transactions take the same builders as `Etcd.transaction`: comparisons `tx.version(key) == n`
and `tx.mod(key) == revision`, operations `tx.put(key, value, lease=...)` and `tx.delete(key)`.
`lose_next_answer` makes the next transaction apply and then raise EtcdUnavailable, as a
client whose answer was lost sees it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidemq.ha.etcd import Entry, EtcdUnavailable

Check = Callable[["FakeEtcd"], bool]
Apply = Callable[["FakeEtcd"], None]


@dataclass
class _Field:
    kind: str  # "version" or "mod"
    key: bytes

    def __eq__(self, value: object) -> Check:  # type: ignore[override]
        def check(etcd: FakeEtcd) -> bool:
            entry = etcd.keys.get(self.key)
            if self.kind == "version":
                return (0 if entry is None else 1) == value
            return (0 if entry is None else entry.mod_revision) == value

        return check


class _Transactions:
    def version(self, key: bytes) -> _Field:
        return _Field("version", key)

    def mod(self, key: bytes) -> _Field:
        return _Field("mod", key)

    def put(self, key: bytes, value: bytes, lease: int = 0) -> Apply:
        return lambda etcd: etcd.write(key, value, lease)

    def delete(self, key: bytes) -> Apply:
        def delete(etcd: FakeEtcd) -> None:
            etcd.keys.pop(key, None)

        return delete


class FakeEtcd:
    def __init__(self) -> None:
        self.keys: dict[bytes, Entry] = {}
        self.leases: set[int] = set()
        self.revision = 0
        self.lose_next_answer = False
        self._leases = itertools.count(0x100)

    def write(self, key: bytes, value: bytes, lease: int = 0) -> None:
        self.revision += 1
        self.keys[key] = Entry(key, value, self.revision, lease)

    def expire(self, lease: int) -> None:
        self.leases.discard(lease)
        self.keys = {k: e for k, e in self.keys.items() if e.lease != lease}

    async def get(self, key: bytes) -> Entry | None:
        return self.keys.get(key)

    async def get_prefix(self, prefix: bytes) -> list[Entry]:
        return [e for k, e in sorted(self.keys.items()) if k.startswith(prefix)]

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> None:
        self.write(key, value, lease)

    async def delete(self, key: bytes) -> None:
        self.keys.pop(key, None)

    async def transaction(
        self,
        compare: Callable[[Any], list[Check]],
        success: Callable[[Any], list[Apply]],
    ) -> bool:
        tx = _Transactions()
        held = all(check(self) for check in compare(tx))
        if held:
            for apply in success(tx):
                apply(self)
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise EtcdUnavailable("etcd unreachable (the answer was lost)")
        return held

    async def grant(self, ttl_seconds: int) -> int:
        lease = next(self._leases)
        self.leases.add(lease)
        return lease

    async def keep_alive(self, lease: int) -> int:
        return 2 if lease in self.leases else 0

    async def revoke(self, lease: int) -> None:
        self.expire(lease)

    async def close(self) -> None:
        pass
