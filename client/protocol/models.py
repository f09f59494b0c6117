"""RocketMQ's JSON data objects: topic and subscription-group configs, routes, cluster info.

Field names are RocketMQ's (fastjson writes Java bean properties), so that a RocketMQ client,
name server or admin tool reads what we write. `to_dict()` gives the JSON object; `from_dict()`
accepts what Java writes, ignoring unknown fields and tolerating missing ones (defaults are
RocketMQ's). Map keys that Java writes as bare numbers (`brokerAddrs: {0: "..."}`) arrive as
strings after `client.remoting.json_body.loads_fastjson` and are turned back into ints here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from tidemq.client.protocol.headers import MAX_QUEUE_NUMS

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
PERM_READ_WRITE = PERM_READ | PERM_WRITE

MASTER_ID = 0


def perm_to_string(perm: int) -> str:
    return "".join(
        (
            "R" if perm & PERM_READ else "-",
            "W" if perm & PERM_WRITE else "-",
            "X" if perm & PERM_INHERIT else "-",
        )
    )


_INT_MIN: Final = -(1 << 31)
_INT_MAX: Final = (1 << 31) - 1


def _int(
    obj: dict[str, Any], key: str, default: int, bits: int = 32, high: int | None = None
) -> int:
    """A Java int (or long, `bits`=64) field: a number or a decimal string that fits. Anything
    else is a ValueError, which the broker answers as a bad body (a list or an object here once
    raised TypeError: a traceback and SYSTEM_ERROR instead of the refusal)."""
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, (list, dict)):
        raise ValueError(f"{key}: not a number: {value!r}"[:200])  # noqa: TRY004 (a bad body)
    number = int(value)
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise ValueError(f"{key}: {number} does not fit {bits} bits"[:200])
    if high is not None and not 0 <= number <= high:
        raise ValueError(f"{key}: must be 0 to {high}, got {number}")
    return number


def _bool(obj: dict[str, Any], key: str, default: bool) -> bool:
    value = obj.get(key, default)
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value) if value is not None else default


@dataclass(slots=True)
class DataVersion:
    """Changes whenever a broker's topic or group table changes (timestamp + counter)."""

    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def next_version(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_dict(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_dict(cls, obj: dict[str, Any] | None) -> DataVersion:
        obj = obj or {}
        return cls(_int(obj, "timestamp", 0, 64), _int(obj, "counter", 0, 64))


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> TopicConfig:
        # Every field present with its JSON type, as tidemq and RocketMQ write them: taken in
        # one step (a million-topic registration or table is read a million entries at a time).
        try:
            name, read, write, perm = (
                obj["topicName"],
                obj["readQueueNums"],
                obj["writeQueueNums"],
                obj["perm"],
            )
            kind, flag, order = obj["topicFilterType"], obj["topicSysFlag"], obj["order"]
        except (KeyError, TypeError):
            pass
        else:
            if (
                type(name) is str
                and type(read) is int
                and type(write) is int
                and type(perm) is int
                and type(flag) is int
                and type(kind) is str
                and kind
                and type(order) is bool
                and _INT_MIN <= read <= _INT_MAX
                and _INT_MIN <= write <= _INT_MAX
                and _INT_MIN <= perm <= _INT_MAX
                and _INT_MIN <= flag <= _INT_MAX
            ):
                return cls(name, read, write, perm, kind, flag, order)
        return cls.from_any_dict(obj)

    @classmethod
    def from_any_dict(cls, obj: dict[str, Any]) -> TopicConfig:
        """`from_dict` for any shape: fields missing, as strings, out of range (refused)."""
        return cls(
            topic_name=str(obj.get("topicName", "")),
            read_queue_nums=_int(obj, "readQueueNums", 16),
            write_queue_nums=_int(obj, "writeQueueNums", 16),
            perm=_int(obj, "perm", PERM_READ_WRITE),
            topic_filter_type=str(obj.get("topicFilterType") or "SINGLE_TAG"),
            topic_sys_flag=_int(obj, "topicSysFlag", 0),
            order=_bool(obj, "order", False),
        )


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5's: a FIFO group (POP hands out a queue's next batch once the last is acked)
    consume_message_orderly: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = {
            "groupName": self.group_name,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "retryQueueNums": self.retry_queue_nums,
            "retryMaxTimes": self.retry_max_times,
            "brokerId": self.broker_id,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
        }
        if self.consume_message_orderly:  # written only when set: 4.x tools never see it
            out["consumeMessageOrderly"] = True
        return out

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(
            group_name=str(obj.get("groupName", "")),
            consume_enable=_bool(obj, "consumeEnable", True),
            consume_from_min_enable=_bool(obj, "consumeFromMinEnable", True),
            consume_broadcast_enable=_bool(obj, "consumeBroadcastEnable", True),
            # the queues of the group's %RETRY% topic: bounded as a created topic's
            retry_queue_nums=_int(obj, "retryQueueNums", 1, high=MAX_QUEUE_NUMS),
            retry_max_times=_int(obj, "retryMaxTimes", 16),
            broker_id=_int(obj, "brokerId", MASTER_ID, 64),
            which_broker_when_consume_slowly=_int(obj, "whichBrokerWhenConsumeSlowly", 1),
            notify_consumer_ids_changed_enable=_bool(obj, "notifyConsumerIdsChangedEnable", True),
            consume_message_orderly=_bool(obj, "consumeMessageOrderly", False),
        )


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            # 4.x spelled it topicSynFlag; write both so old and new clients read it.
            "topicSysFlag": self.topic_sys_flag,
            "topicSynFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> QueueData:
        flag = obj.get("topicSysFlag", obj.get("topicSynFlag", 0))
        return cls(
            broker_name=str(obj.get("brokerName", "")),
            read_queue_nums=_int(obj, "readQueueNums", 0),
            write_queue_nums=_int(obj, "writeQueueNums", 0),
            perm=_int(obj, "perm", PERM_READ_WRITE),
            topic_sys_flag=int(flag or 0),
        )


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> BrokerData:
        addrs = obj.get("brokerAddrs") or {}
        return cls(
            cluster=str(obj.get("cluster", "")),
            broker_name=str(obj.get("brokerName", "")),
            broker_addrs={int(k): str(v) for k, v in addrs.items()},
        )

    def select_broker_addr(self) -> str | None:
        """The master's address, or any member's when there is no master (RocketMQ's rule)."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return next(iter(self.broker_addrs.values()), None)


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "queueDatas": [q.to_dict() for q in self.queue_datas],
            "brokerDatas": [b.to_dict() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        return out

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> TopicRouteData:
        return cls(
            queue_datas=[QueueData.from_dict(q) for q in obj.get("queueDatas") or []],
            broker_datas=[BrokerData.from_dict(b) for b in obj.get("brokerDatas") or []],
            order_topic_conf=obj.get("orderTopicConf"),
            filter_server_table=dict(obj.get("filterServerTable") or {}),
        )


@dataclass(slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_dict() for k, v in sorted(self.broker_addr_table.items())},
            "clusterAddrTable": {k: sorted(v) for k, v in sorted(self.cluster_addr_table.items())},
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> ClusterInfo:
        return cls(
            broker_addr_table={
                k: BrokerData.from_dict(v) for k, v in (obj.get("brokerAddrTable") or {}).items()
            },
            cluster_addr_table={k: set(v) for k, v in (obj.get("clusterAddrTable") or {}).items()},
        )


@dataclass(slots=True)
class TopicConfigSerializeWrapper:
    """What a broker registers with the name servers and persists as topics.json."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topicConfigTable": {k: v.to_dict() for k, v in self.topic_config_table.items()},
            "dataVersion": self.data_version.to_dict(),
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> TopicConfigSerializeWrapper:
        table = obj.get("topicConfigTable") or {}
        return cls(
            topic_config_table={k: TopicConfig.from_dict(v) for k, v in table.items()},
            data_version=DataVersion.from_dict(obj.get("dataVersion")),
        )
