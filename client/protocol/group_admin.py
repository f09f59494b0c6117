"""Headers and bodies of the group and statistics admin calls (RocketMQ 4.x names):

- CLONE_GROUP_OFFSET (314), `CloneGroupOffsetRequestHeader`: no body either way.
- GET_BROKER_CONSUME_STATS (317), `GetConsumeStatsInBrokerHeader`; answer `ConsumeStatsList`::

      {"brokerAddr": "h:p", "totalDiff": 12,
       "consumeStatsList": [{"group": [<ConsumeStats>, ...]}, ...]}

  one ConsumeStats per topic the group holds offsets of, each in the MapForm of
  `client.protocol.admin` (fastjson's object keys for a Java requester, pairs otherwise).
- VIEW_BROKER_STATS_DATA (315), `ViewBrokerStatsDataRequestHeader` (statsName TOPIC_PUT_NUMS with
  statsKey topic, or GROUP_GET_NUMS with `topic@group`); answer `BrokerStatsData`::

      {"statsMinute": {"sum": 5, "tps": 0.08, "avgpt": 1.0}, "statsHour": {...}, "statsDay": {...}}

- GET_CONSUMER_RUNNING_INFO (307), `GetConsumerRunningInfoRequestHeader`, admin -> broker ->
  the consumer client named by clientId; answer `ConsumerRunningInfo`::

      {"properties": {"consumerGroup": "g", "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", ...},
       "subscriptionSet": [<SubscriptionData>, ...],
       "mqTable": {<MessageQueue>: <ProcessQueueInfo>, ...},   (MapForm, as above)
       "statusTable": {"topic": <ConsumeStatus>, ...}, "jstack": ""}
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from tidemq.client.protocol.admin import (
    Body,
    ConsumeStats,
    MapForm,
    _as_dict,
    _decode_map,
    _encode_map,
    _encode_object,
    _float,
    _int,
    _object,
)
from tidemq.client.protocol.heartbeat import MessageQueue, SubscriptionData
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import dumps

__all__ = [
    "BrokerStatsData",
    "BrokerStatsItem",
    "CloneGroupOffsetRequestHeader",
    "ConsumeStatsList",
    "ConsumeStatus",
    "ConsumerRunningInfo",
    "GetConsumeStatsInBrokerHeader",
    "GetConsumerRunningInfoRequestHeader",
    "ProcessQueueInfo",
    "ViewBrokerStatsDataRequestHeader",
]


@dataclass(slots=True)
class CloneGroupOffsetRequestHeader:
    src_group: str
    dest_group: str
    topic: str = ""
    offline: bool = False


@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader:
    is_order: bool = False


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader:
    stats_name: str
    stats_key: str


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader:
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


# --- ConsumeStatsList -----------------------------------------------------------------------


@dataclass(slots=True)
class ConsumeStatsList:
    broker_addr: str = ""
    total_diff: int = 0
    groups: list[tuple[str, list[ConsumeStats]]] = field(default_factory=list)

    def encode(self, form: MapForm = MapForm.PAIRS) -> bytes:
        entries = []
        for group, stats in self.groups:
            items = ",".join(s.encode(form).decode() for s in stats)
            entries.append("{" + dumps(group).decode() + ":[" + items + "]}")
        return _encode_object(
            {"brokerAddr": self.broker_addr, "totalDiff": self.total_diff},
            "consumeStatsList",
            "[" + ",".join(entries) + "]",
        )

    @classmethod
    def decode(cls, body: Body) -> ConsumeStatsList:
        obj = _object(body, "ConsumeStatsList")
        entries = obj.get("consumeStatsList") or []
        if not isinstance(entries, list):
            raise BodyDecodeError("consumeStatsList: expected an array")
        groups = []
        for entry in entries:
            for group, stats in _as_dict(entry, "consumeStatsList entry").items():
                if not isinstance(stats, list):
                    raise BodyDecodeError(f"consumeStatsList[{group}]: expected an array")
                groups.append((str(group), [ConsumeStats.decode(dumps(s)) for s in stats]))
        return cls(str(obj.get("brokerAddr") or ""), _int(obj, "totalDiff"), groups)


# --- BrokerStatsData ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerStatsItem:
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"sum": self.sum, "tps": self.tps, "avgpt": self.avgpt}

    @classmethod
    def from_dict(cls, obj: Any) -> BrokerStatsItem:
        obj = _as_dict(obj if obj is not None else {}, "BrokerStatsItem")
        return cls(_int(obj, "sum"), _float(obj, "tps"), _float(obj, "avgpt"))


@dataclass(frozen=True, slots=True)
class BrokerStatsData:
    stats_minute: BrokerStatsItem = BrokerStatsItem()
    stats_hour: BrokerStatsItem = BrokerStatsItem()
    stats_day: BrokerStatsItem = BrokerStatsItem()

    def sum_24h(self) -> int:
        """RocketMQ statsAll's compute24HourSum: the day's sum, else the hour's, else the
        minute's."""
        for item in (self.stats_day, self.stats_hour, self.stats_minute):
            if item.sum:
                return item.sum
        return 0

    def encode(self) -> bytes:
        return dumps(
            {
                "statsMinute": self.stats_minute.to_dict(),
                "statsHour": self.stats_hour.to_dict(),
                "statsDay": self.stats_day.to_dict(),
            }
        )

    @classmethod
    def decode(cls, body: Body) -> BrokerStatsData:
        obj = _object(body, "BrokerStatsData")
        return cls(
            BrokerStatsItem.from_dict(obj.get("statsMinute")),
            BrokerStatsItem.from_dict(obj.get("statsHour")),
            BrokerStatsItem.from_dict(obj.get("statsDay")),
        )


# --- ConsumerRunningInfo --------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


@dataclass(slots=True)
class ProcessQueueInfo:
    """A consumer's view of one queue it consumes (RocketMQ's field names, `droped` too)."""

    commit_offset: int = -1
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mi_b: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {_camel(f.name): getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, obj: Any) -> ProcessQueueInfo:
        obj = _as_dict(obj, "ProcessQueueInfo")
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = _camel(f.name)
            if f.type == "bool":
                values[f.name] = bool(obj.get(key, False))
            else:
                values[f.name] = _int(obj, key, f.default)  # type: ignore[arg-type]
        return cls(**values)


@dataclass(slots=True)
class ConsumeStatus:
    """A consumer's rates for one topic: pull and consume latency (ms) and throughput."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    _KEYS = (
        ("pull_rt", "pullRT"),
        ("pull_tps", "pullTPS"),
        ("consume_rt", "consumeRT"),
        ("consume_ok_tps", "consumeOKTPS"),
        ("consume_failed_tps", "consumeFailedTPS"),
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {key: getattr(self, name) for name, key in self._KEYS}
        out["consumeFailedMsgs"] = self.consume_failed_msgs
        return out

    @classmethod
    def from_dict(cls, obj: Any) -> ConsumeStatus:
        obj = _as_dict(obj, "ConsumeStatus")
        values: dict[str, Any] = {name: _float(obj, key) for name, key in cls._KEYS}
        return cls(**values, consume_failed_msgs=_int(obj, "consumeFailedMsgs"))


@dataclass(slots=True)
class ConsumerRunningInfo:
    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: list[SubscriptionData] = field(default_factory=list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str = ""

    def encode(self, form: MapForm = MapForm.PAIRS) -> bytes:
        table = {mq: info.to_dict() for mq, info in self.mq_table.items()}
        return _encode_object(
            {
                "properties": self.properties,
                "subscriptionSet": [s.to_dict() for s in self.subscription_set],
                "statusTable": {t: s.to_dict() for t, s in sorted(self.status_table.items())},
                "jstack": self.jstack,
            },
            "mqTable",
            _encode_map(table, form),
        )

    @classmethod
    def decode(cls, body: Body) -> ConsumerRunningInfo:
        obj = _object(body, "ConsumerRunningInfo")
        props = _as_dict(obj.get("properties") or {}, "properties")
        subs = obj.get("subscriptionSet") or []
        if not isinstance(subs, list):
            raise BodyDecodeError("subscriptionSet: expected an array")
        status = _as_dict(obj.get("statusTable") or {}, "statusTable")
        return cls(
            {str(k): str(v) for k, v in props.items()},
            [SubscriptionData.from_dict(_as_dict(s, "SubscriptionData")) for s in subs],
            _decode_map(obj.get("mqTable"), ProcessQueueInfo.from_dict, "mqTable"),
            {str(t): ConsumeStatus.from_dict(s) for t, s in status.items()},
            str(obj.get("jstack") or ""),
        )
