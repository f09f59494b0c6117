"""Consumer groups' settings (RocketMQ's SubscriptionGroupManager): table `subscriptionGroup` of
`config/tables.db` (a row per group), imported from and exported to
`config/subscriptionGroup.json` (config_file.py).

File format (RocketMQ serialises the manager itself)::

    {"subscriptionGroupTable": {"cg": {"groupName": "cg", "consumeEnable": true,
                                       "consumeFromMinEnable": true,
                                       "consumeBroadcastEnable": true, "retryQueueNums": 1,
                                       "retryMaxTimes": 16, "brokerId": 0,
                                       "whichBrokerWhenConsumeSlowly": 1,
                                       "notifyConsumerIdsChangedEnable": true}, ...},
     "dataVersion": {"timestamp": 1700000000000, "counter": 5}}

It is also the body of GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), which a slave copies when the
DataVersion differs. The groups RocketMQ 4.9.7 pre-creates are in the table from the start
(the file is laid over them); a group that is not in the table is created on first use when
autoCreateSubscriptionGroup is on, or always for `CID_RMQ_SYS_*` system groups.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from tidemq.broker.managers.config_file import (
    CONFIG_FILE_MAX_SIZE,
    SUBSCRIPTION_GROUP_FILE,
    ConfigManager,
    compact_json,
    decode_json_object,
    decode_rows,
    pretty_json,
    with_valid_names,
)
from tidemq.client.protocol.models import DataVersion, SubscriptionGroupConfig
from tidemq.client.protocol.names import group_problem
from tidemq.client.remoting.json_body import DEFAULT_MAX_BODY_SIZE

__all__ = [
    "SYSTEM_GROUPS",
    "SubscriptionGroupManager",
    "SubscriptionGroupWrapper",
    "is_sys_consumer_group",
]

log = logging.getLogger(__name__)

TOOLS_CONSUMER_GROUP: Final = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP: Final = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP: Final = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP: Final = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PULL_GROUP: Final = "CID_ONSAPI_PULL"
CID_ONSAPI_PERMISSION_GROUP: Final = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP: Final = "CID_ONSAPI_OWNER"
CID_RMQ_SYS_PREFIX: Final = "CID_RMQ_SYS_"

# SubscriptionGroupManager.init() in 4.9.7, in its order. The ONS groups are set
# consumeBroadcastEnable=true explicitly there; that is also the default, so all are plain.
SYSTEM_GROUPS: Final = (
    TOOLS_CONSUMER_GROUP,
    FILTERSRV_CONSUMER_GROUP,
    SELF_TEST_CONSUMER_GROUP,
    ONS_HTTP_PROXY_GROUP,
    CID_ONSAPI_PULL_GROUP,
    CID_ONSAPI_PERMISSION_GROUP,
    CID_ONSAPI_OWNER_GROUP,
)


def is_sys_consumer_group(group: str) -> bool:
    """MixAll.isSysConsumerGroup: groups the broker creates on demand whatever the config."""
    return group.startswith(CID_RMQ_SYS_PREFIX)


@dataclass(slots=True)
class SubscriptionGroupWrapper:
    """The file's (and GET_ALL_SUBSCRIPTIONGROUP_CONFIG's) content."""

    table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_dict(self) -> dict[str, Any]:
        return {
            "subscriptionGroupTable": {k: v.to_dict() for k, v in self.table.items()},
            "dataVersion": self.data_version.to_dict(),
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> SubscriptionGroupWrapper:
        table = obj.get("subscriptionGroupTable") or {}
        return cls(
            {str(k): SubscriptionGroupConfig.from_dict(v) for k, v in table.items()},
            DataVersion.from_dict(obj.get("dataVersion")),
        )

    @classmethod
    def decode(
        cls, text: str | bytes, *, max_size: int = DEFAULT_MAX_BODY_SIZE
    ) -> SubscriptionGroupWrapper:
        """Parse the file or a GET_ALL_SUBSCRIPTIONGROUP_CONFIG body; `BodyDecodeError` if bad."""
        return decode_json_object(text, "subscription groups", cls.from_dict, max_size=max_size)


def _valid_groups(
    table: dict[str, SubscriptionGroupConfig], source: str
) -> dict[str, SubscriptionGroupConfig]:
    return with_valid_names(
        table,
        group_problem,
        "subscription group(s)",
        source,
        name_of=lambda config: config.group_name,
        renamed=lambda config, name: replace(config, group_name=name),
    )


class SubscriptionGroupManager(ConfigManager[SubscriptionGroupWrapper]):
    """Consumer group settings. Not thread safe: use it from the event loop only."""

    def __init__(self, config_dir: Path, *, auto_create: bool = True) -> None:
        super().__init__(config_dir / SUBSCRIPTION_GROUP_FILE)
        self.auto_create = auto_create
        self._table = {g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS}
        self.data_version = DataVersion()

    # --- persistence ----------------------------------------------------------------------

    def encode(self) -> str:
        return pretty_json(self.wrapper().to_dict())

    def parse(self, text: str) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper.decode(text, max_size=CONFIG_FILE_MAX_SIZE)

    def adopt(self, state: SubscriptionGroupWrapper) -> None:
        self._table.update(_valid_groups(state.table, "subscriptionGroup.json"))
        self.data_version = replace(state.data_version)

    def row_keys(self) -> Iterable[str]:
        return self._table.keys()

    def encode_row(self, key: str) -> str | None:
        config = self._table.get(key)
        return None if config is None else compact_json(config.to_dict())

    def adopt_rows(self, rows: dict[str, str], version: str | None) -> None:
        table = {
            key: SubscriptionGroupConfig.from_dict(entry)
            for key, entry in decode_rows(rows, "groupName")
        }
        valid = _valid_groups(table, "tables.db")
        self._table.update(valid)
        for key in [key for key, config in valid.items() if config is not table[key]]:
            self.changed(key)  # renamed to its key: its row is written again
        if version is not None:
            self.data_version = DataVersion.from_dict(json.loads(version))

    def encode_version(self) -> str | None:
        return compact_json(self.data_version.to_dict())

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(dict(self._table), replace(self.data_version))

    # --- queries and changes ---------------------------------------------------------------

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config without creating it."""
        return self._table.get(group)

    def groups(self) -> list[str]:
        return list(self._table)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation allows; else None."""
        config = self._table.get(group)
        if config is not None:
            return config
        if not (self.auto_create or is_sys_consumer_group(group)):
            return None
        config = SubscriptionGroupConfig(group)
        log.info("auto-created subscription group %s", config)
        self._put(config)
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group's config (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        old = self._table.get(config.group_name)
        log.info(
            "%s subscription group %s (was %s)", "create" if old is None else "update", config, old
        )
        self._put(replace(config))

    def update_many(self, configs: Iterable[SubscriptionGroupConfig]) -> int:
        """Create or replace several groups (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST): one
        DataVersion step and one transaction for all; returns how many."""
        names = []
        for config in configs:
            self._table[config.group_name] = replace(config)
            self.changed(config.group_name)
            names.append(config.group_name)
        if names:
            log.info(
                "created or updated %d subscription groups in one batch: %s%s",
                len(names),
                ", ".join(names[:10]),
                " ..." if len(names) > 10 else "",
            )
            self._changed()
        return len(names)

    def delete(self, group: str) -> bool:
        """Remove a group's config; False when there was none."""
        old = self._table.pop(group, None)
        if old is None:
            log.warning("delete subscription group %s: no such group", group)
            return False
        log.info("deleted subscription group %s", old)
        self.changed(group)
        self._changed()
        return True

    def replace_all(self, wrapper: SubscriptionGroupWrapper) -> bool:
        """SlaveSynchronize: adopt the master's table when its DataVersion differs from ours."""
        if wrapper.data_version == self.data_version:
            return False
        for group in self._table.keys() - wrapper.table.keys():
            self.changed(group)
        for group, config in wrapper.table.items():
            if self._table.get(group) != config:
                self.changed(group)
        self._table = dict(wrapper.table)
        self.data_version = replace(wrapper.data_version)
        log.info("subscription groups replaced from the master: %d groups", len(self._table))
        self.version_changed()
        self.persist_quietly()
        return True

    def _put(self, config: SubscriptionGroupConfig) -> None:
        self._table[config.group_name] = config
        self.changed(config.group_name)
        self._changed()

    def _changed(self) -> None:
        self.data_version.next_version()
        self.version_changed()
        self.persist_quietly()
