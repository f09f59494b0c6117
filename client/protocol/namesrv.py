"""Name-server messages: typed request headers, bodies and results, and their wire encodings.

Shared by the name server (`broker.namesrv`), the broker's registration client and admin tools.
A request header travels as the command's `extFields` (string to string); its keys are the
dataclass fields in camelCase, as RocketMQ's `CommandCustomHeader` classes name them, read and
written by the same `common.schema` dialect as every request header. Booleans are "true"/"false"
(read as Java's `Boolean.parseBoolean`), numbers are decimal text (an empty one is absent); a
missing required key, or a number that does not parse or fit a Java long, is a
`NamesrvProtocolError` naming the key. An error answer is a `NamesrvResponseError` (from
`client.errors`), the leaf of its response code.

Requests (code: extFields; body) and what a success answers:

- 103 REGISTER_BROKER: brokerName, brokerAddr, clusterName, haServerAddr, brokerId, compressed,
  bodyCrc32; RegisterBrokerBody. Answer: extFields haServerAddr and masterAddr (a slave whose
  master is registered and alive), body the KVTable of ORDER_TOPIC_CONFIG or nothing.
- 104 UNREGISTER_BROKER: brokerName, brokerAddr, clusterName, brokerId.
- 105 GET_ROUTEINFO_BY_TOPIC: topic. Answer: TopicRouteData JSON; TOPIC_NOT_EXIST (17) if unknown.
- 106 GET_BROKER_CLUSTER_INFO. Answer: ClusterInfo JSON.
- 206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER. Answer: TopicList.
- 216 DELETE_TOPIC_IN_NAMESRV: topic, clusterName (optional: only that cluster's groups).
- 219 GET_KVLIST_BY_NAMESPACE: namespace. Answer: KVTable; QUERY_NOT_FOUND (22) if unknown.
- 100/101/102 PUT/GET/DELETE_KV_CONFIG: namespace, key (and value for PUT). GET answers extFields
  value, or QUERY_NOT_FOUND.
- 224 GET_TOPICS_BY_CLUSTER: cluster. 304 GET_SYSTEM_TOPIC_LIST_FROM_NS. Answer: TopicList.
- 205/327 WIPE_/ADD_WRITE_PERM_OF_BROKER: brokerName. Answer: extFields wipeTopicCount or
  addTopicCount.
- 322 QUERY_DATA_VERSION: brokerName, brokerAddr, clusterName, brokerId; DataVersion JSON.
  Answer: extFields changed, body the version the name server holds for that address, if any.

Bodies (JSON, read with fastjson's bare keys tolerated, written with `client.remoting.dumps`)::

    RegisterBrokerBody  {"topicConfigSerializeWrapper": {"topicConfigTable": {topic: TopicConfig},
                          "dataVersion": {"timestamp": ms, "counter": n}}, "filterServerList": []}
    TopicList           {"topicList": [topic, ...], "brokerAddr": null | "host:port"}
    KVTable             {"table": {key: value}}
    DataVersion         {"timestamp": ms, "counter": n}

A compressed RegisterBrokerBody (`compressed=true`, RocketMQ 4.x `RegisterBrokerBody.encode(true)`)
is one zlib stream (Java's Deflater: zlib header and trailer) of, big-endian, UTF-8::

    int32 n | n bytes DataVersion JSON
    int32 topicCount
    topicCount times:
        int32 n | n bytes "topicName readQueueNums writeQueueNums perm topicFilterType"
    int32 n | n bytes filterServerList JSON array

The topic line carries neither topicSysFlag nor order: RocketMQ loses them too, so they read back
as 0/false. RocketMQ 5.x appends " attributesJSON" to the topic line and topic-queue mapping data
after the filter list; readers here ignore both, writers leave them out (4.x reads only 5 fields).

`bodyCrc32` is `zlib.crc32(body as sent) & 0x7FFFFFFF` (RocketMQ's UtilAll.crc32); 0 means the
sender did not compute it, and the name server then skips the check.

Scalable registration (tidemq; a RocketMQ name server reads neither extension as such):

- incremental: header `incremental=true`, JSON body whose topicConfigSerializeWrapper holds only
  the topics created or changed since `baseDataVersion`, with the broker's current dataVersion,
  and `"deletedTopicList": [topic, ...]`. The name server applies it only when the version it
  holds for that broker address is `baseDataVersion`; otherwise (it restarted, or missed a
  change) it applies nothing and answers extFields `fullRegistrationNeeded=true`, and the broker
  sends a full registration. An incremental registration with no topics is the heartbeat.
- split: a full registration of many topics is sent as `splitCount` requests (`splitIndex`
  0, 1, ...), each with a part of the table and the same dataVersion, each compressed when the
  broker's compressedRegister is on. The name server holds the broker's version only once the
  last part arrived, so an incremental registration before that asks for a full one again. Its
  answer to a part echoes `splitIndex`: the broker then sends the parts between the first and
  the last without waiting for each answer (the name server takes them in any order); a name
  server that does not echo it (RocketMQ's) gets one part after the other.
"""

from __future__ import annotations

import enum
import json
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Self, TypeVar

from tidemq.client.errors import NamesrvResponseError
from tidemq.client.protocol.models import (
    ClusterInfo,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError
from tidemq.client.remoting.json_body import dumps, loads_fastjson
from tidemq.common.errors import DecodeError
from tidemq.common.schema import Dialect, schema_for
from tidemq.store.crc import java_crc32

__all__ = [
    "MAX_DECOMPRESSED_BODY",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "AddWritePermOfBrokerRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "ExtFieldsHeader",
    "GetKVConfigRequestHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "KVTable",
    "NamesrvProtocolError",
    "NamesrvResponseError",
    "PutKVConfigRequestHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResult",
    "QueueCounts",
    "RegisterBrokerBody",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResult",
    "TopicList",
    "UnregisterBrokerRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WritePermCount",
    "body_crc32",
    "check_success",
    "decode_data_version",
    "parse_cluster_info_response",
    "parse_kv_config_response",
    "parse_kv_list_response",
    "parse_query_data_version_response",
    "parse_register_broker_response",
    "parse_route_response",
    "parse_topic_list_response",
    "parse_write_perm_response",
    "query_data_version_request",
    "register_broker_request",
    "simple_request",
    "topic_config_wrapper",
]

# The KV namespace whose entries are per-topic order configurations ("brokerName:queueNums;...").
NAMESPACE_ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"

# A compressed registration body larger than this once inflated is refused: a frame is at most
# 16 MiB, and a broker's topic table compresses maybe 10:1, so this bounds a zlib bomb only.
MAX_DECOMPRESSED_BODY: Final = 256 * 1024 * 1024

_INT32: Final = struct.Struct(">i")
_TOPIC_FILTER_TYPES: Final = frozenset({"SINGLE_TAG", "MULTI_TAG"})


T = TypeVar("T")


class NamesrvProtocolError(DecodeError, ValueError):
    """A name-server header or body does not follow its format; the message says which part."""


def body_crc32(body: Body) -> int:
    """RocketMQ's UtilAll.crc32: CRC-32 of the bytes, masked to a non-negative Java int."""
    return java_crc32(body)


# --- request headers ------------------------------------------------------------------------


# Java's decodeCommandCustomHeader reading, as for every request header (client.protocol.headers).
EXT_FIELDS = Dialect(
    error=NamesrvProtocolError, strict=False, missing="{owner}: extFields lack {key}"
)


class ExtFieldsHeader:
    """Base of the request and response headers that travel as `extFields`.

    Subclasses are dataclasses read and written through their `common.schema` schema: a field
    without a default is required on decoding, a field whose value is None is left out on
    encoding.
    """

    __slots__ = ()

    def to_ext_fields(self) -> dict[str, str]:
        return schema_for(type(self), EXT_FIELDS).encode(self)

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        return schema_for(cls, EXT_FIELDS).decode(ext)


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader(ExtFieldsHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: int = 0
    # tidemq's controller mode: the epoch of an elected master (left out otherwise, so that a
    # RocketMQ 4.x broker's registration and ours are the same fields).
    master_epoch: int | None = None
    # tidemq's scalable registration (module docstring), left out of a plain registration:
    # `incremental` for the topics changed since the body's baseDataVersion only; `splitIndex`
    # and `splitCount` for one part of a full registration sent in several.
    incremental: bool | None = None
    split_index: int | None = None
    split_count: int | None = None


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRequestHeader(ExtFieldsHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class QueryDataVersionRequestHeader(ExtFieldsHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(ExtFieldsHeader):
    topic: str


@dataclass(frozen=True, slots=True)
class DeleteTopicFromNamesrvRequestHeader(ExtFieldsHeader):
    topic: str
    cluster_name: str | None = None


@dataclass(frozen=True, slots=True)
class GetKVListByNamespaceRequestHeader(ExtFieldsHeader):
    namespace: str


@dataclass(frozen=True, slots=True)
class GetKVConfigRequestHeader(ExtFieldsHeader):
    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class PutKVConfigRequestHeader(ExtFieldsHeader):
    namespace: str
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class DeleteKVConfigRequestHeader(ExtFieldsHeader):
    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class GetTopicsByClusterRequestHeader(ExtFieldsHeader):
    cluster: str


@dataclass(frozen=True, slots=True)
class WipeWritePermOfBrokerRequestHeader(ExtFieldsHeader):
    broker_name: str


@dataclass(frozen=True, slots=True)
class AddWritePermOfBrokerRequestHeader(ExtFieldsHeader):
    broker_name: str


# --- bodies ---------------------------------------------------------------------------------


def _json_object(body: Body, what: str) -> dict[str, Any]:
    try:
        obj = loads_fastjson(body)
    except BodyDecodeError as exc:
        raise NamesrvProtocolError(f"{what}: {exc}") from exc
    if not isinstance(obj, dict):
        raise NamesrvProtocolError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _from_dict(build: Callable[[dict[str, Any]], T], obj: dict[str, Any], what: str) -> T:
    """`build(obj)`, its complaints about the values' types and ranges as NamesrvProtocolError."""
    try:
        return build(obj)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise NamesrvProtocolError(f"{what}: a field has a bad value: {exc}") from exc


def _str_list(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise NamesrvProtocolError(f"{what}: expected a list of strings")
    return list(value)


@dataclass(slots=True)
class TopicList:
    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"topicList": self.topic_list, "brokerAddr": self.broker_addr}

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    @classmethod
    def decode(cls, body: Body) -> TopicList:
        obj = _json_object(body, "TopicList")
        addr = obj.get("brokerAddr")
        return cls(
            topic_list=_str_list(obj.get("topicList"), "TopicList.topicList"),
            broker_addr=None if addr is None else str(addr),
        )


@dataclass(slots=True)
class KVTable:
    table: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return dumps({"table": self.table})

    @classmethod
    def decode(cls, body: Body) -> KVTable:
        table = _json_object(body, "KVTable").get("table")
        if table is None:
            return cls()
        if not isinstance(table, dict):
            raise NamesrvProtocolError("KVTable.table: expected a JSON object")
        return cls({str(k): str(v) for k, v in table.items()})


# The last registration body decoded, as (body, compressed, decoded): the name server's name
# gate and its processor both read each one (an immutable `bytes`), and a 1,000,000-topic
# table registers in 1,250 parts of 800, each decoded twice before: 40 % of the name server's
# work for them (py-spy). Readers must not change the decoded body.
_last_decoded: tuple[object, tuple[bool, bool], RegisterBrokerBody] | None = None

# What a name server keeps of a topic's config: (readQueueNums, writeQueueNums, perm,
# topicSysFlag).
QueueCounts = tuple[int, int, int, int]

# One topic of a registration's topicConfigTable exactly as brokers write it (tidemq's
# `compact_json(TopicConfig.to_dict())`, RocketMQ's fastjson without pretty printing): a valid
# topic name as the key and as its topicName (also a valid broker-kind name for the name gate:
# the gate has nothing left to check), JSON integers below 10^9 (so within a Java int, no sign,
# no leading zero), one of the two filter types. Groups: the key, then everything from
# readQueueNums to topicSysFlag's value (topics with equal counts have equal texts there).
_INT: Final = r"(?:0|[1-9][0-9]{0,8})"
_ROUTE_ENTRY: Final = (
    r'"([%|a-zA-Z0-9_-]{1,127})":\{"topicName":"\{ref}",'
    rf'("readQueueNums":{_INT},"writeQueueNums":{_INT},"perm":{_INT},'
    rf'"topicFilterType":"(?:SINGLE_TAG|MULTI_TAG)","topicSysFlag":{_INT}),'
    r'"order":(?:true|false)\}'
)
_ROUTE_TABLE_START: Final = '{"topicConfigSerializeWrapper":{"topicConfigTable":{'
# A body whose table is one or more such entries, up to the table's end: the whole table
# checked in C, then its entries taken by `_ROUTE_ENTRIES`.
_ROUTE_TABLE: Final = re.compile(
    re.escape(_ROUTE_TABLE_START)
    + "(?:"
    + _ROUTE_ENTRY.replace("{ref}", "1")
    + ",)*"
    + _ROUTE_ENTRY.replace("{ref}", "3")
    + r"\}"
)
_ROUTE_ENTRIES: Final = re.compile(_ROUTE_ENTRY.replace("{ref}", "1"))
# Each entry's topicName in a table `_ROUTE_TABLE` matched (there equal to its key).
_ROUTE_NAMES: Final = re.compile(r'\{"topicName":"([^"]*)"')
_COUNTS: Final = re.compile(r"[0-9]+")


def _route_rows(body: bytes) -> tuple[int, int, list[tuple[QueueCounts, list[str]]]] | None:
    """(where the table's entries begin, where they end, its topics grouped by their counts)
    when the whole topicConfigTable of `body` is in the brokers' shape, else None."""
    if not body.startswith(_ROUTE_TABLE_START_BYTES):
        return None
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        return None
    matched = _ROUTE_TABLE.match(text)
    if matched is None:
        return None
    start, end = len(_ROUTE_TABLE_START), matched.end() - 1
    # A part's topics mostly have equal counts: then their names are all that is taken, and
    # each step is a loop in C. (Each entry holds one counts text, followed by a comma.)
    names = _ROUTE_NAMES.findall(text, start, end)
    last = matched.group(4)
    if text.count(last + ",", start, end) == len(names):
        return start, end, [(_counts_of(last), names)]
    groups: dict[str, list[str]] = {}
    for name, counts_text in _ROUTE_ENTRIES.findall(text, start, end):
        groups.setdefault(counts_text, []).append(name)
    return start, end, [(_counts_of(t), group) for t, group in groups.items()]


def _counts_of(text: str) -> QueueCounts:
    read, write, perm, flag = map(int, _COUNTS.findall(text))
    return read, write, perm, flag


_ROUTE_TABLE_START_BYTES: Final = _ROUTE_TABLE_START.encode()


@dataclass(slots=True)
class RegisterBrokerBody:
    """What a broker registers: its topic table with the table's version, and filter servers."""

    topic_config_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = field(default_factory=list)
    # An incremental registration's (tidemq): the version the name server must hold for this
    # broker for the change to apply, and the topics deleted since then.
    base_data_version: DataVersion | None = None
    deleted_topics: list[str] = field(default_factory=list)
    # Topics read by `decode_routes` without a TopicConfig (never by `decode`, never encoded),
    # grouped by their (readQueueNums, writeQueueNums, perm, topicSysFlag).
    topic_queue_rows: list[tuple[QueueCounts, list[str]]] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        if compressed:
            return _encode_compressed(self)
        obj: dict[str, Any] = {
            "topicConfigSerializeWrapper": self.topic_config_wrapper.to_dict(),
            "filterServerList": self.filter_server_list,
        }
        if self.base_data_version is not None:
            obj["baseDataVersion"] = self.base_data_version.to_dict()
            obj["deletedTopicList"] = self.deleted_topics
        return dumps(obj)

    @classmethod
    def decode(cls, body: Body, compressed: bool = False) -> RegisterBrokerBody:
        """The body as sent; the last one decoded is remembered (`_last_decoded`)."""
        global _last_decoded
        last = _last_decoded
        if last is not None and last[0] is body and last[1] == (compressed, False):
            return last[2]
        decoded = cls._decode(body, compressed)
        if isinstance(body, bytes):
            _last_decoded = (body, (compressed, False), decoded)
        return decoded

    @classmethod
    def _decode(cls, body: Body, compressed: bool) -> RegisterBrokerBody:
        if compressed:
            return _decode_compressed(body)
        obj = _json_object(body, "RegisterBrokerBody")
        wrapper = obj.get("topicConfigSerializeWrapper") or {}
        if not isinstance(wrapper, dict):
            raise NamesrvProtocolError(
                "RegisterBrokerBody: topicConfigSerializeWrapper is not an object"
            )
        topics = _from_dict(TopicConfigSerializeWrapper.from_dict, wrapper, "RegisterBrokerBody")
        filters = _str_list(obj.get("filterServerList"), "RegisterBrokerBody.filterServerList")
        base = obj.get("baseDataVersion")
        if base is None:
            return cls(topics, filters)
        if not isinstance(base, dict):
            raise NamesrvProtocolError("RegisterBrokerBody: baseDataVersion is not an object")
        base_version = _from_dict(DataVersion.from_dict, base, "RegisterBrokerBody.baseDataVersion")
        deleted = _str_list(obj.get("deletedTopicList"), "RegisterBrokerBody.deletedTopicList")
        return cls(topics, filters, base_version, deleted)

    @classmethod
    def decode_routes(cls, body: Body, compressed: bool = False) -> RegisterBrokerBody:
        """`decode` for a name server, which keeps of each topic only its queue counts, perm
        and sys flag: a body whose whole topic table is in the shape brokers write
        (`_ROUTE_ENTRY`) has those read straight into `topic_queue_rows`, without a decoded
        object per topic, and its `topic_config_wrapper` holds the version and no topics. Any
        other body is `decode`d. The last one read is remembered, as by `decode`."""
        global _last_decoded
        last = _last_decoded
        if last is not None and last[0] is body and last[1] == (compressed, True):
            return last[2]
        if compressed or not isinstance(body, bytes):
            return cls.decode(body, compressed)
        rows = _route_rows(body)
        if rows is None:
            decoded = cls.decode(body, compressed)
        else:
            table_start, table_end, entries = rows
            # the rest of the body read as usual, the table cut out
            decoded = cls._decode(body[:table_start] + body[table_end:], False)
            decoded.topic_queue_rows = entries
        _last_decoded = (body, (compressed, True), decoded)
        return decoded

    @property
    def topic_count(self) -> int:
        rows = sum(len(names) for _, names in self.topic_queue_rows)
        return len(self.topic_config_wrapper.topic_config_table) + rows

    @classmethod
    def empty(cls) -> RegisterBrokerBody:
        """What a registration without a body stands for (RocketMQ: version 0/0, no topics)."""
        return cls(TopicConfigSerializeWrapper(data_version=DataVersion(timestamp=0, counter=0)))


def full_registration_json(
    topic_rows: Iterable[tuple[str, str]], data_version: DataVersion
) -> bytes:
    """The JSON RegisterBrokerBody of a full registration (or one part of it) whose topics are
    given as (name, that TopicConfig's JSON text): the text is put in as it is, without decoding
    and encoding it again (a broker keeps its table's rows as such texts). Equal to
    `RegisterBrokerBody(TopicConfigSerializeWrapper(table, data_version)).encode()` for the same
    topics."""
    wrapper = topic_wrapper_json(topic_rows, data_version)
    return b'{"topicConfigSerializeWrapper":' + wrapper + b',"filterServerList":[]}'


def increment_registration_json(
    topic_rows: Iterable[tuple[str, str]],
    data_version: DataVersion,
    base_data_version: DataVersion,
    deleted_topics: list[str],
) -> bytes:
    """The JSON RegisterBrokerBody of an incremental registration whose changed topics are
    given as (name, TopicConfig JSON text), put in as they are: equal to
    `RegisterBrokerBody(TopicConfigSerializeWrapper(table, data_version), [],
    base_data_version=..., deleted_topics=...).encode()` for the same topics."""
    wrapper = topic_wrapper_json(topic_rows, data_version)
    return (
        b'{"topicConfigSerializeWrapper":'
        + wrapper
        + b',"filterServerList":[],"baseDataVersion":'
        + dumps(base_data_version.to_dict())
        + b',"deletedTopicList":'
        + dumps(deleted_topics)
        + b"}"
    )


def topic_wrapper_json(topic_rows: Iterable[tuple[str, str]], data_version: DataVersion) -> bytes:
    """A TopicConfigSerializeWrapper's compact JSON (GET_ALL_TOPIC_CONFIG's body) of topics
    given as (name, TopicConfig JSON text), the texts put in as they are: equal to
    `dumps(TopicConfigSerializeWrapper(table, data_version).to_dict())`."""
    table = ",".join([f"{_json_string(name)}:{text}" for name, text in topic_rows])
    version = dumps(data_version.to_dict()).decode()
    return f'{{"topicConfigTable":{{{table}}},"dataVersion":{version}}}'.encode()


# A name as a JSON string (the C encoder json.dumps uses; non-ASCII kept, as `dumps` does).
_json_string: Final[Callable[[str], str]] = json.encoder.encode_basestring


def _encode_compressed(body: RegisterBrokerBody) -> bytes:
    parts: list[bytes] = []

    def chunk(data: bytes) -> None:
        parts.append(_INT32.pack(len(data)))
        parts.append(data)

    wrapper = body.topic_config_wrapper
    chunk(dumps(wrapper.data_version.to_dict()))
    parts.append(_INT32.pack(len(wrapper.topic_config_table)))
    for config in wrapper.topic_config_table.values():
        line = (
            f"{config.topic_name} {config.read_queue_nums} {config.write_queue_nums} "
            f"{config.perm} {config.topic_filter_type}"
        )
        chunk(line.encode("utf-8"))
    chunk(dumps(body.filter_server_list))
    return zlib.compress(b"".join(parts), 9)  # Deflater.BEST_COMPRESSION


class _Reader:
    """Sequential reads over the inflated bytes, each checked against what is left."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int32(self, what: str) -> int:
        value: int = _INT32.unpack_from(self.take(4, what))[0]
        return value

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise NamesrvProtocolError(
                f"compressed RegisterBrokerBody: {what} needs {n} bytes at {self.pos}, "
                f"{len(self.data) - self.pos} left"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def chunk(self, what: str) -> bytes:
        return self.take(self.int32(f"{what} length"), what)


def _inflate(body: Body) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_DECOMPRESSED_BODY)
    except zlib.error as exc:
        raise NamesrvProtocolError(f"compressed RegisterBrokerBody is not zlib: {exc}") from exc
    if inflater.unconsumed_tail:
        raise NamesrvProtocolError(
            f"compressed RegisterBrokerBody inflates to more than {MAX_DECOMPRESSED_BODY} bytes"
        )
    return data


def _decode_topic_line(line: bytes) -> TopicConfig:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NamesrvProtocolError(f"compressed topic config is not UTF-8: {exc}") from exc
    fields = text.split(" ")
    while fields and not fields[-1]:
        fields.pop()  # Java's String.split drops trailing empty strings
    if len(fields) < 5 or fields[4] not in _TOPIC_FILTER_TYPES:
        raise NamesrvProtocolError(f"compressed topic config {text!r} is not 'name r w perm type'")
    try:
        read, write, perm = int(fields[1]), int(fields[2]), int(fields[3])
    except ValueError:
        raise NamesrvProtocolError(f"compressed topic config {text!r} has a bad number") from None
    return TopicConfig(fields[0], read, write, perm, topic_filter_type=fields[4])


def _decode_compressed(body: Body) -> RegisterBrokerBody:
    reader = _Reader(_inflate(body))
    version = _json_object(reader.chunk("dataVersion"), "compressed dataVersion")
    count = reader.int32("topic count")
    table: dict[str, TopicConfig] = {}
    for i in range(count):
        config = _decode_topic_line(reader.chunk(f"topic config {i}"))
        table[config.topic_name] = config
    try:
        filters = loads_fastjson(reader.chunk("filterServerList"))
    except BodyDecodeError as exc:
        raise NamesrvProtocolError(f"compressed filterServerList: {exc}") from exc
    # Whatever follows (5.x topic-queue mapping data) is not ours to read.
    data_version = _from_dict(DataVersion.from_dict, version, "compressed dataVersion")
    wrapper = TopicConfigSerializeWrapper(table, data_version)
    return RegisterBrokerBody(wrapper, _str_list(filters, "compressed filterServerList"))


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """A registration's answer: for a slave, its master's HA and broker addresses;
    `full_registration_needed` (tidemq) when an incremental registration was not applied because
    the name server does not hold its base version (it restarted, or missed a change)."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: KVTable | None = None
    full_registration_needed: bool = False
    # Set by a name server that read an incremental registration as one (a RocketMQ name
    # server does not, and takes it as a full registration of the changed topics).
    incremental: bool = False
    # Set by a name server that read a part of a split registration as one (tidemq's echoes
    # its splitIndex): it takes the middle parts in any order, so they may be pipelined.
    split: bool = False

    def ext_fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.ha_server_addr is not None:
            out["haServerAddr"] = self.ha_server_addr
        if self.master_addr is not None:
            out["masterAddr"] = self.master_addr
        if self.full_registration_needed:
            out["fullRegistrationNeeded"] = "true"
        if self.incremental:
            out["incremental"] = "true"
        return out

    def ext_fields_of_part(self, split_index: int) -> dict[str, str]:
        """`ext_fields` of the answer to part `split_index` of a split registration."""
        return {**self.ext_fields(), "splitIndex": str(split_index)}


@dataclass(frozen=True, slots=True)
class QueryDataVersionResult:
    changed: bool
    data_version: DataVersion | None


# --- building requests ----------------------------------------------------------------------


def simple_request(code: RequestCode, header: ExtFieldsHeader | None = None) -> RemotingCommand:
    """A request whose only content is `header` (or nothing)."""
    return RemotingCommand.request(code, None if header is None else header.to_ext_fields())


def register_broker_request(
    *,
    broker_name: str,
    broker_addr: str,
    cluster_name: str,
    ha_server_addr: str,
    broker_id: int,
    body: RegisterBrokerBody | bytes,
    compressed: bool = False,
    master_epoch: int | None = None,
    split: tuple[int, int] | None = None,
    incremental_json: bool = False,
) -> RemotingCommand:
    """REGISTER_BROKER with the body encoded as asked and its bodyCrc32 filled in; `split` is
    (index, count) for one part of a split full registration. A body with a
    `base_data_version` is sent as an incremental registration (JSON, never compressed). A body
    given as bytes is JSON sent as it is: a full registration's (`full_registration_json`), or
    with `incremental_json` an incremental one's (`increment_registration_json`)."""
    if isinstance(body, bytes):
        incremental, compressed, data = incremental_json, False, body
    else:
        incremental = body.base_data_version is not None
        compressed = compressed and not incremental
        data = body.encode(compressed)
    header = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=broker_addr,
        cluster_name=cluster_name,
        ha_server_addr=ha_server_addr,
        broker_id=broker_id,
        compressed=compressed,
        body_crc32=body_crc32(data),
        master_epoch=master_epoch,
        incremental=True if incremental else None,
        split_index=None if split is None else split[0],
        split_count=None if split is None else split[1],
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), data)


def decode_data_version(body: Body) -> DataVersion:
    """The DataVersion JSON of a QUERY_DATA_VERSION request or response."""
    return _from_dict(DataVersion.from_dict, _json_object(body, "DataVersion"), "DataVersion")


def query_data_version_request(
    header: QueryDataVersionRequestHeader, data_version: DataVersion
) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.QUERY_DATA_VERSION, header.to_ext_fields(), dumps(data_version.to_dict())
    )


def topic_config_wrapper(
    topics: Iterable[TopicConfig], data_version: DataVersion | None = None
) -> TopicConfigSerializeWrapper:
    """A topic table keyed by topic name (a convenience for registering brokers and tests)."""
    return TopicConfigSerializeWrapper(
        {t.topic_name: t for t in topics}, data_version or DataVersion()
    )


# --- parsing responses ----------------------------------------------------------------------


def check_success(response: RemotingCommand, *also: ResponseCode) -> None:
    """Raise the code's `NamesrvResponseError` unless the response is SUCCESS or one of `also`."""
    if response.code != ResponseCode.SUCCESS and response.code not in also:
        raise NamesrvResponseError.for_code(response.code, response.remark)


def parse_register_broker_response(response: RemotingCommand) -> RegisterBrokerResult:
    check_success(response)
    ext = response.ext_fields
    kv = KVTable.decode(response.body) if len(response.body) else None
    full_needed = ext.get("fullRegistrationNeeded") == "true"
    incremental = ext.get("incremental") == "true"
    split_seen = ext.get("splitIndex") is not None
    return RegisterBrokerResult(
        ext.get("haServerAddr"), ext.get("masterAddr"), kv, full_needed, incremental, split_seen
    )


def parse_route_response(response: RemotingCommand) -> TopicRouteData | None:
    """The route, or None when the name server does not know the topic (TOPIC_NOT_EXIST)."""
    check_success(response, ResponseCode.TOPIC_NOT_EXIST)
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    return _from_dict(
        TopicRouteData.from_dict, _json_object(response.body, "TopicRouteData"), "TopicRouteData"
    )


def parse_cluster_info_response(response: RemotingCommand) -> ClusterInfo:
    check_success(response)
    return _from_dict(
        ClusterInfo.from_dict, _json_object(response.body, "ClusterInfo"), "ClusterInfo"
    )


def parse_topic_list_response(response: RemotingCommand) -> TopicList:
    check_success(response)
    return TopicList.decode(response.body) if len(response.body) else TopicList()


def parse_query_data_version_response(response: RemotingCommand) -> QueryDataVersionResult:
    check_success(response)
    changed = response.ext_fields.get("changed", "false").lower() == "true"
    if not len(response.body):
        return QueryDataVersionResult(changed, None)
    return QueryDataVersionResult(changed, decode_data_version(response.body))


def parse_kv_list_response(response: RemotingCommand) -> KVTable | None:
    """The namespace's table, or None when the name server has no such namespace."""
    check_success(response, ResponseCode.QUERY_NOT_FOUND)
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return KVTable.decode(response.body)


def parse_kv_config_response(response: RemotingCommand) -> str | None:
    check_success(response, ResponseCode.QUERY_NOT_FOUND)
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return response.ext_fields.get("value")


class WritePermCount(enum.Enum):
    """The response field that counts the topics a write-permission change touched."""

    WIPE = "wipeTopicCount"
    ADD = "addTopicCount"


def parse_write_perm_response(response: RemotingCommand, kind: WritePermCount) -> int:
    check_success(response)
    text = response.ext_fields.get(kind.value, "0")
    try:
        return int(text)
    except ValueError:
        raise NamesrvProtocolError(f"{kind.value}: expected an integer, got {text!r}") from None
