"""The name server's KV configuration (RocketMQ's KVConfigManager), in memory.

`namespace -> {key -> value}`. RocketMQ keeps it in `~/namesrv/kvConfig.json`; tidemq's name
server keeps no state on disk, so entries live as long as the process (admin tools put them
again after a restart, as they must for a fresh RocketMQ name server). The one namespace the
name server itself reads is ORDER_TOPIC_CONFIG: key topic, value the topic's order config
(`brokerName:queueNums;...`), returned as a route's `orderTopicConf` when orderMessageEnable.
A namespace stays (possibly empty) once created, as in RocketMQ.
"""

from __future__ import annotations

__all__ = ["KvConfigStore"]


class KvConfigStore:
    def __init__(self) -> None:
        self._tables: dict[str, dict[str, str]] = {}

    def put(self, namespace: str, key: str, value: str) -> str | None:
        """Set a value; returns the previous one."""
        table = self._tables.setdefault(namespace, {})
        previous = table.get(key)
        table[key] = value
        return previous

    def get(self, namespace: str, key: str) -> str | None:
        return self._tables.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        return self._tables.get(namespace, {}).pop(key, None) is not None

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of the namespace's table, or None when it was never created."""
        table = self._tables.get(namespace)
        return None if table is None else dict(table)
