"""Bodies of the admin calls that show operators the RocketMQ 5 side of a broker:

- GET_TIMER_METRICS (61, RocketMQ 5's code and body, `TimerMetricsSerializeWrapper`): timer
  messages waiting per real topic::

      {"timingCount": {"T": {"count": 3, "timeStamp": 1700000000000}, ...},
       "dataVersion": {"timestamp": 1700000000000, "counter": 12, "stateVersion": 0}}

- GET_GRPC_CLIENT_LIST (32001, tidemq's own: RocketMQ's proxy has no such call): the 5.x clients
  connected over gRPC, no header; answer::

      {"brokerName": "broker-a", "clients": [{"clientId": "...", "clientAddr": "h:p",
        "language": "PYTHON", "version": "5.1.2", "clientType": "SIMPLE_CONSUMER",
        "group": "G" ("" for a producer), "topics": ["T", ...],
        "lastHeartbeatTimestamp": 1700000000000}, ...]}

  language and version as the client's settings name them (their user agent), else as its
  `x-mq-language` / `x-mq-client-version` headers (the Node.js client sends "HTTP" there).

- GET_POP_PROGRESS (32002, tidemq's own), header `consumerGroup` and `topic` (each optional:
  every group, every topic); answer::

      {"brokerName": "broker-a", "queues": [{"group": "G", "topic": "T", "queueId": 0,
        "brokerOffset": 10, "popOffset": 8, "inFlight": 3, "invisible": 2, "acked": 5}, ...]}

  popOffset: where the group pops next (its consumer offset); inFlight: messages handed out and
  neither acknowledged nor revived; invisible: those of them whose invisible time has not passed
  (the rest wait for the revive service); acked: acknowledgements the revive service has read
  since the broker started (records read again at a start count again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidemq.client.remoting.errors import BodyDecodeError

__all__ = [
    "GrpcClientInfo",
    "PopQueueProgress",
    "TimerTopicCount",
    "decode_grpc_clients",
    "decode_pop_progress",
    "decode_timer_metrics",
]


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise BodyDecodeError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def _int(data: dict[str, Any], key: str, what: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyDecodeError(f"{what}.{key}: expected an integer, got {value!r}")
    return value


def _str(data: dict[str, Any], key: str, what: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise BodyDecodeError(f"{what}.{key}: expected text, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class GrpcClientInfo:
    client_id: str
    client_addr: str
    language: str
    version: str
    client_type: str  # PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, ...
    group: str
    topics: tuple[str, ...] = ()
    last_heartbeat_timestamp: int = 0
    broker_name: str = ""  # the broker that reported it (set by the reader)

    def to_dict(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "clientAddr": self.client_addr,
            "language": self.language,
            "version": self.version,
            "clientType": self.client_type,
            "group": self.group,
            "topics": list(self.topics),
            "lastHeartbeatTimestamp": self.last_heartbeat_timestamp,
        }

    @classmethod
    def from_dict(cls, data: Any, broker_name: str = "") -> GrpcClientInfo:
        what = "client"
        data = _dict(data, what)
        topics = _list(data.get("topics", []), f"{what}.topics")
        if not all(isinstance(t, str) for t in topics):
            raise BodyDecodeError(f"{what}.topics: expected a list of text")
        return cls(
            client_id=_str(data, "clientId", what),
            client_addr=_str(data, "clientAddr", what),
            language=_str(data, "language", what),
            version=_str(data, "version", what),
            client_type=_str(data, "clientType", what),
            group=_str(data, "group", what),
            topics=tuple(topics),
            last_heartbeat_timestamp=_int(data, "lastHeartbeatTimestamp", what),
            broker_name=broker_name,
        )


def decode_grpc_clients(body: Any) -> list[GrpcClientInfo]:
    data = _dict(body, "GrpcClientList")
    broker = _str(data, "brokerName", "GrpcClientList")
    clients = _list(data.get("clients", []), "GrpcClientList.clients")
    return [GrpcClientInfo.from_dict(c, broker) for c in clients]


@dataclass(frozen=True, slots=True)
class PopQueueProgress:
    group: str
    topic: str
    queue_id: int
    broker_offset: int
    pop_offset: int
    in_flight: int
    invisible: int
    acked: int
    broker_name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "brokerOffset": self.broker_offset,
            "popOffset": self.pop_offset,
            "inFlight": self.in_flight,
            "invisible": self.invisible,
            "acked": self.acked,
        }

    @classmethod
    def from_dict(cls, data: Any, broker_name: str = "") -> PopQueueProgress:
        what = "queue"
        data = _dict(data, what)
        return cls(
            group=_str(data, "group", what),
            topic=_str(data, "topic", what),
            queue_id=_int(data, "queueId", what),
            broker_offset=_int(data, "brokerOffset", what),
            pop_offset=_int(data, "popOffset", what),
            in_flight=_int(data, "inFlight", what),
            invisible=_int(data, "invisible", what),
            acked=_int(data, "acked", what),
            broker_name=broker_name,
        )


def decode_pop_progress(body: Any) -> list[PopQueueProgress]:
    data = _dict(body, "PopProgress")
    broker = _str(data, "brokerName", "PopProgress")
    queues = _list(data.get("queues", []), "PopProgress.queues")
    return [PopQueueProgress.from_dict(q, broker) for q in queues]


@dataclass(frozen=True, slots=True)
class TimerTopicCount:
    topic: str
    count: int
    timestamp: int  # when the count last changed (ms)


def encode_timer_metrics(
    counts: dict[str, tuple[int, int]], version: dict[str, int]
) -> dict[str, Any]:
    """`counts`: topic -> (count, time of its last change)."""
    return {
        "timingCount": {t: {"count": c, "timeStamp": ts} for t, (c, ts) in counts.items()},
        "dataVersion": version,
    }


def decode_timer_metrics(body: Any) -> list[TimerTopicCount]:
    data = _dict(body, "TimerMetrics")
    table = _dict(data.get("timingCount", {}), "TimerMetrics.timingCount")
    out = []
    for topic, metric in table.items():
        what = f"TimerMetrics.timingCount[{topic}]"
        metric = _dict(metric, what)
        out.append(
            TimerTopicCount(topic, _int(metric, "count", what), _int(metric, "timeStamp", what))
        )
    return sorted(out, key=lambda t: t.topic)
