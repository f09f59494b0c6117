"""The `tidemq` data source's options, parsed and checked once on the driver.

Spark hands a data source its options as a case-insensitive mapping of strings. `SourceOptions.
parse` turns them into a frozen dataclass of plain values: it is pickled into every executor task
with the reader, so it holds nothing but str, int, float, bool and tuples (no sockets, no
compiled structs).

Names follow Spark's Kafka source where there is an equivalent (defaults in brackets):

- `namesrvAddr` [env NAMESRV_ADDR]: name servers, `host:port` separated by `;` or `,`;
- `topic` [required]: a comma list of topics;
- `startingOffsets` [latest when streaming, earliest in batch]: `earliest`, `latest` or JSON;
- `endingOffsets` [latest]: batch only, `latest` or JSON;
- `startingTimestamp` [unset]: ms since the epoch, per queue the first message stored at or after
  it; wins over startingOffsets;
- `maxOffsetsPerTrigger` [unset]: at most this many offsets per micro-batch;
- `minOffsetsPerTrigger` [unset] with `maxTriggerDelay` [15m]: hold a batch back until this many
  offsets are new, but not longer than the delay;
- `failOnDataLoss` [true]: offsets below a queue's min offset fail the query; false: skipped
  with a warning;
- `readFromSlave` [false]: false reads from the master and follows the broker's suggestion;
  true prefers a slave;
- `tags` [`*`]: a RocketMQ tag expression, e.g. `TagA || TagB`;
- `includeProperties` [false]: add the `properties` map column;
- `consumerGroup` [tidemq-spark]: the group pulls name (offsets are never committed to it);
- `minPartitions` [unset]: split queue ranges into at least this many tasks;
- `pullBatchSize` [2048]: messages asked for per PULL_MESSAGE (and rows per Arrow batch; a
  window's decoding has a fixed cost, which 2048 rows halve against 1024);
- `pullsInFlight` [4]: concurrent pulls per task;
- `pollTimeoutMs` [120000]: how long a task waits for data it expects before failing;
- `offsetFetchIntervalMs` [100]: streaming, how long queue max offsets are reused;
- `accessKey`, `secretKey` [unset]: credentials for brokers with `aclEnable`; every request is
  signed with them (both or neither; the secret is in the options pickled into each task, as
  Kafka's `sasl.jaas.config` is, and left out of their repr).

Offsets JSON (`startingOffsets`, `endingOffsets`, and what goes into Spark's checkpoint) is
`{"<topic>": {"<brokerName>": {"<queueId>": <offset>}}}`: the offset of the next message to read,
-2 meaning earliest and -1 latest (Kafka's conventions; -2 is refused in `endingOffsets`).
Queues not named in a JSON `startingOffsets` start at earliest, as newly created queues do.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidemq.client.config import parse_namesrv_addr, session_credentials
from tidemq.client.errors import ClientError
from tidemq.store.tags import parse_tag_expression

EARLIEST: Final = -2
LATEST: Final = -1

DEFAULT_GROUP: Final = "tidemq-spark"
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000

QueueKey = tuple[str, str, int]
"""(topic, brokerName, queueId): one message queue, one Spark partition (or more)."""


class OptionError(ClientError, ValueError):
    """An option is missing or malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where reading starts or ends: `earliest`, `latest`, or explicit per-queue offsets."""

    kind: str  # "earliest" | "latest" | "json"
    offsets: tuple[tuple[QueueKey, int], ...] = ()

    def as_dict(self) -> dict[QueueKey, int]:
        return dict(self.offsets)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    namesrv_addr: tuple[str, ...]
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fail_on_data_loss: bool = True
    read_from_slave: bool = False
    tags: str = "*"
    include_properties: bool = False
    consumer_group: str = DEFAULT_GROUP
    min_partitions: int | None = None
    pull_batch_size: int = 2048
    pulls_in_flight: int = 4
    poll_timeout_ms: int = 120_000
    offset_fetch_interval_ms: int = 100
    access_key: str = ""
    secret_key: str = field(default="", repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        """Check every option; `streaming` picks startingOffsets' default (latest vs earliest)."""
        opts = {k.lower(): v for k, v in options.items() if k.lower() != "path"}
        known = {name.lower() for name in _KNOWN}
        unknown = sorted(set(opts) - known)
        if unknown:
            by_lower = {name.lower(): name for name in _KNOWN}
            guesses = {
                name: by_lower[close[0]]
                for name in unknown
                if (close := difflib.get_close_matches(name, by_lower, n=1, cutoff=0.8))
            }
            hint = "".join(
                f" (did you mean {guesses[name]}?)" for name in unknown if name in guesses
            )
            raise OptionError(
                f"unknown option(s) {', '.join(unknown)}{hint}; tidemq knows {', '.join(_KNOWN)}"
            )
        namesrv = _namesrv(opts.get("namesrvaddr") or os.environ.get("NAMESRV_ADDR", ""))
        topics = tuple(dict.fromkeys(t.strip() for t in opts.get("topic", "").split(",")))
        topics = tuple(t for t in topics if t)
        if not topics:
            raise OptionError("option topic is required (a comma list of topics)")
        if "endingoffsets" in opts and streaming:
            raise OptionError("endingOffsets is for batch queries only (streaming never ends)")
        starting = _offset_spec(
            "startingOffsets",
            opts.get("startingoffsets", "latest" if streaming else "earliest"),
            topics,
            allow_earliest=True,
        )
        ending = _offset_spec(
            "endingOffsets", opts.get("endingoffsets", "latest"), topics, allow_earliest=False
        )
        max_rows = _positive(opts, "maxOffsetsPerTrigger")
        min_rows = _positive(opts, "minOffsetsPerTrigger")
        if max_rows is not None and min_rows is not None and min_rows > max_rows:
            raise OptionError(
                f"minOffsetsPerTrigger ({min_rows}) exceeds maxOffsetsPerTrigger ({max_rows})"
            )
        delay = DEFAULT_MAX_TRIGGER_DELAY_MS
        if "maxtriggerdelay" in opts:
            delay = parse_duration_ms("maxTriggerDelay", opts["maxtriggerdelay"])
        tags = opts.get("tags", "*").strip() or "*"
        if tags != "*" and not any(t.strip() for t in tags.split("||")):
            raise OptionError(f"tags: {tags!r} names no tag")
        timestamp = _non_negative(opts, "startingTimestamp")
        fetch_interval = _non_negative(opts, "offsetFetchIntervalMs")
        access_key = opts.get("accesskey", "").strip()
        secret_key = opts.get("secretkey", "").strip()
        try:
            session_credentials(access_key, secret_key)
        except ClientError as exc:
            raise OptionError(f"accessKey/secretKey: {exc}") from None
        return cls(
            namesrv_addr=namesrv,
            topics=topics,
            starting=starting,
            ending=ending,
            starting_timestamp=timestamp,
            max_offsets_per_trigger=max_rows,
            min_offsets_per_trigger=min_rows,
            max_trigger_delay_ms=delay,
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            read_from_slave=_bool(opts, "readFromSlave", False),
            tags=tags,
            include_properties=_bool(opts, "includeProperties", False),
            consumer_group=opts.get("consumergroup", DEFAULT_GROUP).strip() or DEFAULT_GROUP,
            min_partitions=_positive(opts, "minPartitions"),
            pull_batch_size=_positive(opts, "pullBatchSize") or 2048,
            pulls_in_flight=_positive(opts, "pullsInFlight") or 4,
            poll_timeout_ms=_positive(opts, "pollTimeoutMs") or 120_000,
            offset_fetch_interval_ms=100 if fetch_interval is None else fetch_interval,
            access_key=access_key,
            secret_key=secret_key,
        )

    @property
    def filters_tags(self) -> bool:
        return not parse_tag_expression(self.tags).matches_all


_KNOWN: Final = (
    "namesrvAddr",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "readFromSlave",
    "tags",
    "includeProperties",
    "consumerGroup",
    "minPartitions",
    "pullBatchSize",
    "pullsInFlight",
    "pollTimeoutMs",
    "offsetFetchIntervalMs",
    "accessKey",
    "secretKey",
)


def _namesrv(value: str) -> tuple[str, ...]:
    try:
        addrs = tuple(parse_namesrv_addr(value))
    except ClientError as exc:
        raise OptionError(f"namesrvAddr: {exc}") from None
    if not addrs:
        raise OptionError("option namesrvAddr is required (or NAMESRV_ADDR): host:port[;...]")
    return addrs


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"{name}: expected true or false, got {raw!r}")


def _int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise OptionError(f"{name}: expected an integer, got {raw!r}") from None


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    value = _int(opts, name)
    if value is not None and value <= 0:
        raise OptionError(f"{name}: must be positive, got {value}")
    return value


def _non_negative(opts: Mapping[str, str], name: str) -> int | None:
    value = _int(opts, name)
    if value is not None and value < 0:
        raise OptionError(f"{name}: must not be negative, got {value}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, raw: str) -> int:
    """`500ms`, `30s`, `15m`/`15min`, `2h`, `1d`; a bare number is milliseconds (as Spark's)."""
    match = _DURATION.match(raw)
    if match is None:
        raise OptionError(f"{name}: expected a duration like 30s or 15m, got {raw!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def _offset_spec(
    name: str, raw: str, topics: tuple[str, ...], *, allow_earliest: bool
) -> OffsetSpec:
    text = raw.strip()
    if text.lower() == "latest":
        return OffsetSpec("latest")
    if text.lower() == "earliest":
        if not allow_earliest:
            raise OptionError(f"{name}: earliest is not allowed here")
        return OffsetSpec("earliest")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(
            f"{name}: expected earliest, latest or JSON like "
            '{"topic": {"broker-a": {"0": 23, "1": -2}}}, got ' + repr(raw)
        ) from None
    try:
        offsets = offsets_from_json(obj)
    except ValueError as exc:
        raise OptionError(f"{name}: {exc}") from None
    for (topic, _broker, _queue), offset in offsets.items():
        if topic not in topics:
            raise OptionError(f"{name}: topic {topic!r} is not one of option topic {topics}")
        if offset < EARLIEST or (offset == EARLIEST and not allow_earliest):
            raise OptionError(f"{name}: offset {offset} is not allowed")
    return OffsetSpec("json", tuple(sorted(offsets.items())))


def offsets_from_json(obj: object) -> dict[QueueKey, int]:
    """`{"topic": {"broker": {"queueId": offset}}}` to a flat map; ValueError when malformed."""
    if not isinstance(obj, dict):
        raise ValueError("offsets must be a JSON object of topics")  # noqa: TRY004 (bad input)
    out: dict[QueueKey, int] = {}
    for topic, brokers in obj.items():
        if not isinstance(brokers, dict):
            raise ValueError(  # noqa: TRY004 (a malformed document is bad input)
                f"offsets of topic {topic!r} must be an object of broker names"
            )
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise ValueError(  # noqa: TRY004 (bad input)
                    f"offsets of {topic!r}/{broker!r} must be an object of queue ids"
                )
            for queue, offset in queues.items():
                if not (isinstance(queue, str) and queue.isdigit()):
                    raise ValueError(f"queue id {queue!r} of {topic!r}/{broker!r} is not a number")
                if isinstance(offset, bool) or not isinstance(offset, int):
                    raise ValueError(  # noqa: TRY004 (bad input)
                        f"offset of {topic}/{broker}/{queue} is not an integer"
                    )
                out[(topic, broker, int(queue))] = offset
    return out


def offsets_to_json(offsets: Mapping[QueueKey, int]) -> dict[str, dict[str, dict[str, int]]]:
    """The canonical nested form: keys in sorted order, as `json.dumps(sort_keys=True)` would.

    Spark compares offsets by their JSON text (and the runner serialises without sort_keys),
    so two equal offsets must always come out with the same key order.
    """
    nested: dict[str, dict[str, dict[str, int]]] = {}
    for (topic, broker, queue), offset in offsets.items():
        nested.setdefault(topic, {}).setdefault(broker, {})[str(queue)] = int(offset)
    return {
        topic: {
            broker: {q: queues[q] for q in sorted(queues)} for broker, queues in sorted(b.items())
        }
        for topic, b in sorted(nested.items())
    }
