"""Admin request headers and JSON bodies: runtime info, topic and consume stats, offset resets.

Field names are RocketMQ's (`common/admin/*.java`, `common/protocol/body/*.java`,
`common/protocol/header/*RequestHeader.java`); headers are dataclasses for
`client.protocol.headers.encode/decode`.

**Maps keyed by a MessageQueue.** TopicStatsTable, ConsumeStats and ResetOffsetBody are Java
`Map<MessageQueue, ...>`, which fastjson writes with JSON objects as keys::

    {"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":5,...}}}

That is not JSON, and `loads_fastjson` (like every standard parser) cannot read it. So these
bodies come in two forms, chosen by `MapForm`:

- `MapForm.FASTJSON`: exactly what a Java broker writes; the broker answers a request whose
  language is JAVA this way, so RocketMQ's mqadmin, dashboard and exporter read it.
- `MapForm.PAIRS` (tidemq's form, for every other requester): the same object with the map
  written as a list of `[key, value]` pairs, which is standard JSON::

    {"offsetTable":[[{"brokerName":"broker-a","queueId":0,"topic":"T"},{"maxOffset":5,...}]]}

`decode` reads the pairs form, an object whose keys are `topic@broker@qid` strings, and the
fastjson form: when a body does not parse, each object key that is a flat JSON object
(`{"brokerName":..,"queueId":..,"topic":..}`, outside string literals) is rewritten into its
`topic@broker@qid` string and the body parsed again (what a Java broker and the C++ client
write, e.g. the C++ consumer's ConsumerRunningInfo).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import dumps, loads_fastjson

__all__ = [
    "ConsumeStats",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "HAClientRuntimeInfo",
    "HAConnectionRuntimeInfo",
    "HARuntimeInfo",
    "MapForm",
    "OffsetWrapper",
    "ResetOffsetBody",
    "ResetOffsetRequestHeader",
    "TopicOffset",
    "TopicStatsTable",
    "decode_properties_text",
    "encode_properties_text",
]

V = TypeVar("V")
Body = bytes | bytearray | memoryview | str


class MapForm(enum.Enum):
    FASTJSON = "fastjson"
    PAIRS = "pairs"


# --- headers --------------------------------------------------------------------------------


@dataclass(slots=True)
class GetTopicStatsInfoRequestHeader:
    topic: str


@dataclass(slots=True)
class GetConsumeStatsRequestHeader:
    consumer_group: str
    topic: str = ""


@dataclass(slots=True)
class GetConsumerConnectionListRequestHeader:
    consumer_group: str


@dataclass(slots=True)
class GetProducerConnectionListRequestHeader:
    producer_group: str


@dataclass(slots=True)
class ResetOffsetRequestHeader:
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220).

    `timestamp` -1 means "now" (each queue's max offset). `is_force` false only moves offsets
    backwards (RocketMQ's rule)."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = True


# --- MessageQueue-keyed maps ----------------------------------------------------------------


def _mq_json(mq: MessageQueue) -> str:
    # fastjson writes bean properties in alphabetical order.
    return dumps({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}).decode()


def _encode_map(table: Mapping[MessageQueue, Any], form: MapForm) -> str:
    items = sorted(table.items())
    if form is MapForm.PAIRS:
        return dumps([[mq.to_dict(), value] for mq, value in items]).decode()
    inner = ",".join(f"{_mq_json(mq)}:{dumps(value).decode()}" for mq, value in items)
    return "{" + inner + "}"


def _encode_object(fields: Mapping[str, Any], map_key: str, table: str) -> bytes:
    """A JSON object whose `map_key` member is the pre-encoded `table` text."""
    parts = [f"{json.dumps(map_key)}:{table}"]
    parts += [f"{json.dumps(k)}:{dumps(v).decode()}" for k, v in fields.items()]
    return ("{" + ",".join(parts) + "}").encode()


def _mq_from_key(key: str) -> MessageQueue:
    topic, sep, rest = key.partition("@")
    broker, sep2, qid = rest.rpartition("@")
    if not sep or not sep2 or not qid.lstrip("-").isdigit():
        raise BodyDecodeError(f"not a message queue key: {key!r}")
    return MessageQueue(topic, broker, int(qid))


def _decode_map(value: Any, convert: Callable[[Any], V], what: str) -> dict[MessageQueue, V]:
    if value is None:
        return {}
    out: dict[MessageQueue, V] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out[_mq_from_key(str(key))] = convert(item)
        return out
    if not isinstance(value, list):
        raise BodyDecodeError(f"{what}: expected a list of [queue, value] pairs")
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], dict)):
            raise BodyDecodeError(f"{what}: expected [queue, value] pairs, got {pair!r}")
        out[MessageQueue.from_dict(pair[0])] = convert(pair[1])
    return out


# A string literal (left alone), or an object key that is itself a flat JSON object.
_OBJECT_KEY: Final = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"?'
    r'|([{,]\s*)(\{[^{}"]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^{}"]*)*\})(?=\s*:)',
    re.DOTALL,
)


def _queue_key(match: re.Match[str]) -> str:
    key = match.group(2)
    if key is None:
        return match.group(0)
    try:
        obj = json.loads(key)
        if not (isinstance(obj, dict) and {"topic", "brokerName", "queueId"} <= obj.keys()):
            return match.group(0)  # not a queue: left for the parser to refuse
        mq = MessageQueue.from_dict(obj)
    except ValueError:
        return match.group(0)
    return match.group(1) + json.dumps(f"{mq.topic}@{mq.broker_name}@{mq.queue_id}")


def queue_keys_as_strings(text: str) -> str:
    """fastjson's `{{"brokerName":..,"queueId":..,"topic":..}:value}` maps with each queue key
    written as the string `topic@broker@qid`; string contents are left alone."""
    return _OBJECT_KEY.sub(_queue_key, text)


def _object(body: Body, what: str) -> dict[str, Any]:
    try:
        obj = loads_fastjson(body)
    except BodyDecodeError:
        text = body if isinstance(body, str) else bytes(body).decode("utf-8", "replace")
        obj = loads_fastjson(queue_keys_as_strings(text))
    if not isinstance(obj, dict):
        raise BodyDecodeError(f"{what}: expected a JSON object")
    return obj


def _as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyDecodeError(f"{what}: expected a JSON object, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = obj.get(key, default)
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        raise BodyDecodeError(f"{key}: not an integer: {value!r}") from None


def _float(obj: Mapping[str, Any], key: str) -> float:
    value = obj.get(key, 0.0)
    try:
        return float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        raise BodyDecodeError(f"{key}: not a number: {value!r}") from None


# --- TopicStatsTable (GET_TOPIC_STATS_INFO 202) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOffset:
    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }

    @classmethod
    def from_dict(cls, obj: Any) -> TopicOffset:
        obj = _as_dict(obj, "TopicOffset")
        return cls(_int(obj, "minOffset"), _int(obj, "maxOffset"), _int(obj, "lastUpdateTimestamp"))


@dataclass(slots=True)
class TopicStatsTable:
    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def encode(self, form: MapForm = MapForm.PAIRS) -> bytes:
        table = {mq: o.to_dict() for mq, o in self.offset_table.items()}
        return _encode_object({}, "offsetTable", _encode_map(table, form))

    @classmethod
    def decode(cls, body: Body) -> TopicStatsTable:
        obj = _object(body, "TopicStatsTable")
        return cls(_decode_map(obj.get("offsetTable"), TopicOffset.from_dict, "offsetTable"))


# --- ConsumeStats (GET_CONSUME_STATS 208) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }

    def progress_data(self, mq: MessageQueue) -> dict[str, Any]:
        """The queue's progress as mqadmin --json and the dashboard show it (with the diff)."""
        return {
            "topic": mq.topic,
            "brokerName": mq.broker_name,
            "queueId": mq.queue_id,
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "diff": self.diff,
            "lastTimestamp": self.last_timestamp,
        }

    @classmethod
    def from_dict(cls, obj: Any) -> OffsetWrapper:
        obj = _as_dict(obj, "OffsetWrapper")
        return cls(
            _int(obj, "brokerOffset"), _int(obj, "consumerOffset"), _int(obj, "lastTimestamp")
        )


@dataclass(slots=True)
class ConsumeStats:
    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        """computeTotalDiff: the group's lag in messages over every queue."""
        return sum(o.diff for o in self.offset_table.values())

    def merge(self, other: ConsumeStats) -> None:
        """Add another broker's answer (examineConsumeStats asks every master)."""
        self.offset_table.update(other.offset_table)
        self.consume_tps += other.consume_tps

    def encode(self, form: MapForm = MapForm.PAIRS) -> bytes:
        table = {mq: o.to_dict() for mq, o in self.offset_table.items()}
        return _encode_object(
            {"consumeTps": self.consume_tps}, "offsetTable", _encode_map(table, form)
        )

    @classmethod
    def decode(cls, body: Body) -> ConsumeStats:
        obj = _object(body, "ConsumeStats")
        return cls(
            _decode_map(obj.get("offsetTable"), OffsetWrapper.from_dict, "offsetTable"),
            _float(obj, "consumeTps"),
        )


# --- ResetOffsetBody (INVOKE_BROKER_TO_RESET_OFFSET 222, RESET_CONSUMER_CLIENT_OFFSET 220) ----


def _offset(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BodyDecodeError(f"offset: not an integer: {value!r}") from None


@dataclass(slots=True)
class ResetOffsetBody:
    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def encode(self, form: MapForm = MapForm.PAIRS) -> bytes:
        return _encode_object({}, "offsetTable", _encode_map(self.offset_table, form))

    @classmethod
    def decode(cls, body: Body) -> ResetOffsetBody:
        obj = _object(body, "ResetOffsetBody")
        return cls(_decode_map(obj.get("offsetTable"), _offset, "offsetTable"))


# --- HARuntimeInfo (GET_BROKER_HA_STATUS 907) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class HAConnectionRuntimeInfo:
    addr: str
    slave_ack_offset: int
    diff: int
    in_sync: bool
    transferred_byte_in_second: int
    transfer_from_where: int
    # tidemq: the slave's broker address and id when the master knows them (a RocketMQ master
    # sends neither: "" and -1).
    slave_broker_addr: str = ""
    slave_broker_id: int = -1

    @classmethod
    def from_dict(cls, obj: Any) -> HAConnectionRuntimeInfo:
        obj = _as_dict(obj, "HAConnectionRuntimeInfo")
        return cls(
            str(obj.get("addr", "")),
            _int(obj, "slaveAckOffset"),
            _int(obj, "diff"),
            bool(obj.get("inSync", False)),
            _int(obj, "transferredByteInSecond"),
            _int(obj, "transferFromWhere"),
            str(obj.get("slaveBrokerAddr") or ""),
            _int(obj, "slaveBrokerId", -1),
        )


@dataclass(frozen=True, slots=True)
class HAClientRuntimeInfo:
    master_addr: str
    max_offset: int
    transferred_byte_in_second: int
    last_read_timestamp: int
    last_write_timestamp: int
    master_flush_offset: int = 0
    # tidemq: received from the master but not dispatched yet (absent from RocketMQ's: 0).
    dispatch_behind_bytes: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> HAClientRuntimeInfo:
        obj = _as_dict(obj, "HAClientRuntimeInfo")
        return cls(
            str(obj.get("masterAddr") or ""),
            _int(obj, "maxOffset"),
            _int(obj, "transferredByteInSecond"),
            _int(obj, "lastReadTimestamp"),
            _int(obj, "lastWriteTimestamp"),
            _int(obj, "masterFlushOffset"),
            _int(obj, "dispatchBehindBytes"),
        )


@dataclass(frozen=True, slots=True)
class ControllerRuntimeInfo:
    """tidemq's controller mode (broker/failover.py): the broker's view of its group."""

    broker_id: int
    is_master: bool
    master_broker_id: int | None
    epoch: int
    sync_state_set: list[int]
    elections: int
    epoch_entries: list[tuple[int, int]]  # (epoch, start offset), the broker's epoch file
    deposed: str = ""
    no_master_reason: str = ""  # why the group has no master, as this broker sees it

    @classmethod
    def from_dict(cls, obj: Any) -> ControllerRuntimeInfo:
        obj = _as_dict(obj, "controller")
        master = obj.get("masterBrokerId")
        members = obj.get("syncStateSet") or []
        entries = obj.get("epochEntries") or []
        if not isinstance(members, list) or not isinstance(entries, list):
            raise BodyDecodeError("controller: syncStateSet and epochEntries must be lists")
        try:
            return cls(
                _int(obj, "brokerId"),
                bool(obj.get("isMaster", False)),
                None if master is None else int(master),
                _int(obj, "epoch"),
                [int(m) for m in members],
                _int(obj, "elections"),
                [(int(e), int(o)) for e, o in entries],
                str(obj.get("deposed") or ""),
                str(obj.get("noMasterReason") or ""),
            )
        except (TypeError, ValueError):
            raise BodyDecodeError("controller: malformed members or epoch entries") from None


@dataclass(frozen=True, slots=True)
class HARuntimeInfo:
    master: bool
    master_commit_log_max_offset: int = 0
    in_sync_slave_nums: int = 0
    ha_connection_info: list[HAConnectionRuntimeInfo] = field(default_factory=list)
    ha_client_runtime_info: HAClientRuntimeInfo | None = None
    controller: ControllerRuntimeInfo | None = None  # controller mode only

    @classmethod
    def decode(cls, body: Body) -> HARuntimeInfo:
        obj = _object(body, "HARuntimeInfo")
        client = obj.get("haClientRuntimeInfo")
        if client is None and obj.get("master") is False:
            client = obj  # tidemq's slave answers with the client fields at the top level
        connections = obj.get("haConnectionInfo") or []
        if not isinstance(connections, list):
            raise BodyDecodeError("haConnectionInfo: expected a list")
        return cls(
            master=bool(obj.get("master", False)),
            master_commit_log_max_offset=_int(obj, "masterCommitLogMaxOffset"),
            in_sync_slave_nums=_int(obj, "inSyncSlaveNums"),
            ha_connection_info=[HAConnectionRuntimeInfo.from_dict(c) for c in connections],
            ha_client_runtime_info=None
            if client is None
            else HAClientRuntimeInfo.from_dict(client),
            controller=None
            if obj.get("controller") is None
            else ControllerRuntimeInfo.from_dict(obj["controller"]),
        )


# --- broker configuration as properties text (UPDATE/GET_BROKER_CONFIG 25/26) ---------------


def encode_properties_text(props: Mapping[str, str]) -> bytes:
    """`key=value` lines, as Java's MixAll.properties2String writes them."""
    return "".join(f"{k}={v}\n" for k, v in props.items()).encode("utf-8")


def decode_properties_text(body: Body) -> dict[str, str]:
    """`key=value` lines (blank lines and `#` comments skipped); BodyDecodeError otherwise."""
    if isinstance(body, str):
        text = body
    else:
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyDecodeError(f"properties are not UTF-8: {exc}") from exc
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise BodyDecodeError(f"not a key=value line: {line!r}")
        out[key.strip()] = value.strip()
    return out
