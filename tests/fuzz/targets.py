"""The fuzz targets: every decoder that reads bytes from outside, and the property each keeps.

A target is a function of one byte string. It hands the bytes (or a structure made from them) to
its decoders, each wrapped in `outcome(errors, ...)`: a decoder must return, or raise one of its
documented error types (`errors`, all `DecodeError`s but the properties parser's `ConfigError`).
Anything else propagates out of the target, and the fuzzer reports the input as a crash. A
decoder with a compiled twin (store/common/speedups.py) runs twice, compiled and pure, and the two
outcomes (value, or error type and message) must be equal (`TwinMismatch` otherwise). Streaming
decoders are fed the input whole and split at a point taken from its first byte, and must give
the same events both ways and buffer no more than their bound.

Hangs are caught by the runner's per-input timeout, allocations by its RSS limit and, in the
seeded replay of tests/fuzz/test_fuzz.py, by tracemalloc's peak per input (`ALLOCATION_BOUND`).

Targets (name: decoders; errors):

    frame            FrameDecoder (64 KiB frames), whole and split;   FrameError
                     parse_frames compiled and pure
    header_json      decode_json_header, compiled and pure mapping    HeaderDecodeError
    header_msgpack   decode_msgpack_header compiled and pure, with    HeaderDecodeError
                     the compiled and the pure mapping
    header_rocketmq  decode_rocketmq_header                           HeaderDecodeError
    request_headers  every request header schema and namesrv header,  HeaderFieldError,
                     decode_send_header compiled and pure             NamesrvProtocolError
    json_bodies      loads_fastjson and every RocketMQ JSON body      BodyDecodeError, ...
    ha_transfer      TransferDecoder + SlaveStreamChecker, split;     HAProtocolError
                     TransferBuffer (the slave's), the same events
    ha_ack           AckDecoder (feed, feed_last) + AckValidator      HAProtocolError
    commitlog_record decode_record, scan_record, scan_fast and        RecordFormatError
                     gather_entries compiled and pure
    batch_body       decode_batch_body, encode_batch compiled and     BatchDecodeError,
                     pure                                             RecordTooLargeError
    properties_file  parse_properties, decode_properties,             ConfigError
                     with_property compiled and pure
    namesrv_register RegisterBrokerBody.decode (plain and zlib)       NamesrvProtocolError
    pull_body        decode_received (the client's pulled records)    RecordFormatError
    spark_columns    ColumnBuffer.add + take (Arrow columns)          RecordFormatError
    acl_file         parse_document (plain_acl.yml rules)             AclFileError
"""

from __future__ import annotations

import dataclasses
import mmap
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final

from tidemq.broker.properties import parse_properties
from tidemq.client.protocol import admin, heartbeat, namesrv
from tidemq.client.protocol import headers as request_headers
from tidemq.client.remoting import frame, headers
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError, FrameError, HeaderDecodeError
from tidemq.client.remoting.frame import FrameDecoder
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.common import speedups
from tidemq.common.errors import ConfigError
from tidemq.ha.codec import (
    AckDecoder,
    AckValidator,
    BatchReceived,
    HAProtocolError,
    SlaveStreamChecker,
    TransferBuffer,
    TransferDecoder,
)
from tidemq.store import fast_scan, index_worker, record
from tidemq.store.batch_body import BatchDecodeError, decode_batch_body
from tidemq.store.record import (
    MessageBatch,
    RecordFormatError,
    RecordTooLargeError,
    decode_properties,
    decode_record,
    scan_record,
)

__all__ = ["ALLOCATION_BOUND", "TARGETS", "Target", "TwinMismatch", "outcome"]

# tracemalloc's peak while a target runs one input: at most this many bytes per input byte,
# plus a constant (the decoders' own tables, Arrow's buffers).
ALLOCATION_BOUND: Final = (64, 4 << 20)
FRAME_LIMIT: Final = 64 * 1024
HA_BODY_LIMIT: Final = 4096


class TwinMismatch(AssertionError):
    """A compiled function and its pure twin disagree, or a split stream decodes differently."""


def outcome(errors: tuple[type[Exception], ...], decode: Callable[..., Any], *args: Any) -> Any:
    """("ok", value) or ("error", type, message) for a documented error; anything else raises."""
    try:
        return ("ok", decode(*args))
    except errors as exc:
        return ("error", type(exc), str(exc))


def same(what: str, expected: Any, got: Any) -> None:
    if expected != got:
        raise TwinMismatch(f"{what}: {expected!r} != {got!r}")


def pure(key: str) -> Any:
    return speedups.PURE_TWINS[key]


# imported for the twins they register in speedups.PURE_TWINS
assert fast_scan.scan_fast is not None and index_worker.gather_entries is not None


def _split_point(data: bytes) -> int:
    return data[0] % (len(data) + 1) if data else 0


# -- remoting ----------------------------------------------------------------------------------


def _feed_frames(chunks: list[bytes]) -> Any:
    decoder = FrameDecoder(FRAME_LIMIT)
    commands: list[Any] = []
    for chunk in chunks:
        try:
            commands += decoder.feed(chunk)
        except FrameError as exc:
            # feed drops the commands it completed in the failing call, so where the split
            # falls changes what came before the error, never the error itself
            return ("error", type(exc), str(exc))
        if decoder.buffered > FRAME_LIMIT + 4:
            raise AssertionError(f"decoder holds {decoder.buffered} bytes, past its frame limit")
    return ("ok", commands, decoder.buffered)


_PARSE_FRAMES_KEY: Final = "tidemq.client.remoting.frame.parse_frames"


def fuzz_frame(data: bytes) -> None:
    cut = _split_point(data)
    same("frame fed whole and split", _feed_frames([data]), _feed_frames([data[:cut], data[cut:]]))
    with memoryview(data) as view:
        same(
            "parse_frames twins",
            outcome((FrameError,), pure(_PARSE_FRAMES_KEY), view, FRAME_LIMIT),
            outcome((FrameError,), frame.parse_frames, view, FRAME_LIMIT),
        )


def _mapping_twins(decode: Callable[[bytes], Any], data: bytes) -> None:
    # the header decoders call the module's `_command_from_mapping`, the compiled twin if built
    compiled = outcome((HeaderDecodeError,), decode, data)
    selected = headers._command_from_mapping
    headers._command_from_mapping = pure(_MAPPING_KEY)
    try:
        reference = outcome((HeaderDecodeError,), decode, data)
    finally:
        headers._command_from_mapping = selected
    same("_command_from_mapping twins", reference, compiled)


_MAPPING_KEY: Final = "tidemq.client.remoting.headers._command_from_mapping"


def fuzz_header_json(data: bytes) -> None:
    _mapping_twins(headers.decode_json_header, data)


_MSGPACK_KEY: Final = "tidemq.client.remoting.headers.decode_msgpack_header"


def fuzz_header_msgpack(data: bytes) -> None:
    # the compiled decoder reads the map itself; the pure one has msgpack build a dict and
    # hands it to _command_from_mapping, itself compiled or pure
    _mapping_twins(pure(_MSGPACK_KEY), data)
    same(
        "decode_msgpack_header twins",
        outcome((HeaderDecodeError,), pure(_MSGPACK_KEY), data),
        outcome((HeaderDecodeError,), headers.decode_msgpack_header, data),
    )


def fuzz_header_rocketmq(data: bytes) -> None:
    outcome((HeaderDecodeError,), headers.decode_rocketmq_header, data)


# -- request headers -------------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _header_classes() -> list[tuple[type[Any], list[str]]]:
    found: dict[type[Any], None] = {}
    for module in (request_headers, admin, heartbeat, namesrv):
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and value.__name__.endswith("Header")
            ):
                found[value] = None
    return [
        (cls, [f.metadata.get("key") or _camel(f.name) for f in dataclasses.fields(cls)])
        for cls in sorted(found, key=lambda c: c.__name__)
    ]


_HEADER_CLASSES: Final = _header_classes()
_SEND_KEY: Final = "tidemq.client.protocol.headers.decode_send_header"
_HEADER_ERRORS: Final = (request_headers.HeaderFieldError, namesrv.NamesrvProtocolError)


def ext_fields_of(data: bytes, keys: list[str]) -> dict[str, str]:
    """extFields from fuzz bytes: NUL-separated key, value; a one-byte key picks a known key."""
    tokens = data.split(b"\x00")
    ext: dict[str, str] = {}
    for raw_key, raw_value in zip(tokens[::2], tokens[1::2], strict=False):
        if len(raw_key) == 1 and raw_key[0] < len(keys):
            key = keys[raw_key[0]]
        else:
            key = raw_key.decode("utf-8", "replace")
        ext[key] = raw_value.decode("utf-8", "replace")
    return ext


def fuzz_request_headers(data: bytes) -> None:
    if not data:
        return
    cls, keys = _HEADER_CLASSES[data[0] % len(_HEADER_CLASSES)]
    ext = ext_fields_of(data[1:], keys)
    if issubclass(cls, namesrv.ExtFieldsHeader):
        outcome(_HEADER_ERRORS, cls.from_ext_fields, ext)
    else:
        outcome(_HEADER_ERRORS, request_headers.decode, cls, ext)
    if cls is request_headers.SendMessageRequestHeader:
        for short_keys, names in (
            (False, keys),
            (True, list(request_headers.SEND_V2_KEYS.values())),
        ):
            ext = ext_fields_of(data[1:], names)
            reference = outcome(_HEADER_ERRORS, pure(_SEND_KEY), dict(ext), short_keys)
            compiled = outcome(_HEADER_ERRORS, request_headers.decode_send_header, ext, short_keys)
            same("decode_send_header twins", reference, compiled)


# -- JSON bodies -----------------------------------------------------------------------------

_BODY_ERRORS: Final = (BodyDecodeError, namesrv.NamesrvProtocolError)
_BODY_DECODERS: Final[tuple[Callable[[bytes], Any], ...]] = (
    loads_fastjson,
    heartbeat.HeartbeatData.decode,
    heartbeat.LockBatchRequestBody.decode,
    heartbeat.LockBatchResponseBody.decode,
    heartbeat.GetConsumerListByGroupResponseBody.decode,
    admin.TopicStatsTable.decode,
    admin.ConsumeStats.decode,
    admin.ResetOffsetBody.decode,
    admin.HARuntimeInfo.decode,
    admin.decode_properties_text,
    namesrv.TopicList.decode,
    namesrv.KVTable.decode,
    namesrv.decode_data_version,
)


def fuzz_json_bodies(data: bytes) -> None:
    if not data:
        return
    decode = _BODY_DECODERS[data[0] % len(_BODY_DECODERS)]
    outcome(_BODY_ERRORS, decode, data[1:])
    # a name server's answers, as our client parses them
    answer = RemotingCommand.response_to(RemotingCommand.request(105), ResponseCode.SUCCESS)
    answer.body = data[1:]
    for parse in (namesrv.parse_route_response, namesrv.parse_cluster_info_response):
        outcome(_BODY_ERRORS, parse, answer)


# -- HA ----------------------------------------------------------------------------------------


def _feed_transfer(chunks: list[bytes]) -> Any:
    decoder = TransferDecoder(HA_BODY_LIMIT)
    checker = SlaveStreamChecker(0)
    events: list[Any] = []
    for chunk in chunks:
        try:
            fed = decoder.feed(chunk)
        except HAProtocolError as exc:
            return ("error", type(exc), str(exc))
        if decoder.buffered > HA_BODY_LIMIT + 12 + len(chunk):
            raise AssertionError(f"transfer decoder holds {decoder.buffered} bytes")
        _check_transfer_events(fed, checker, events)
    return ("ok", events, decoder.buffered)


def _check_transfer_events(fed: list[Any], checker: SlaveStreamChecker, events: list[Any]) -> None:
    """Each decoded event and the slave's verdict on it, into `events` (bodies copied out)."""
    for event in fed:
        verdict = checker.check(event)
        if isinstance(event, BatchReceived):
            if verdict is None:
                checker.applied(event)
            events.append((event.offset, bytes(event.body), verdict))
        else:
            events.append((event, verdict))


def _read_transfer(chunks: list[bytes], read_size: int) -> Any:
    """`_feed_transfer`'s outcome from the slave's TransferBuffer: each chunk read into its
    room, `read_size` bytes at most a read."""
    frames = TransferBuffer(HA_BODY_LIMIT, read_size)
    checker = SlaveStreamChecker(0)
    events: list[Any] = []
    for chunk in chunks:
        # An empty chunk is an empty read: the decoder's `feed(b"")`.
        done = 0
        while True:
            room = frames.get_buffer()
            n = min(len(room), len(chunk) - done)
            room[:n] = chunk[done : done + n]
            done += n
            try:
                fed = frames.received(n)
            except HAProtocolError as exc:
                return ("error", type(exc), str(exc))
            _check_transfer_events(fed, checker, events)
            if done == len(chunk):
                break
    return ("ok", events, frames.buffered)


def fuzz_ha_transfer(data: bytes) -> None:
    cut = _split_point(data)
    whole = _feed_transfer([data])
    same("transfer fed whole and split", whole, _feed_transfer([data[:cut], data[cut:]]))
    # The slave's buffer gives what the decoder gives (the same error for the same first bad
    # header), whatever its reads.
    same("transfer read by the slave's buffer", whole, _read_transfer([data], 1 << 20))
    same("transfer read 97 bytes at a time", whole, _read_transfer([data], 97))


def _feed_acks(chunks: list[bytes], last_only: bool) -> Any:
    decoder = AckDecoder()
    validator = AckValidator()
    reports: list[Any] = []
    for chunk in chunks:
        try:
            if last_only:
                report = decoder.feed_last(chunk)
                fed = [] if report is None else [report]
            else:
                fed = decoder.feed(chunk)
            for report in fed:
                reports.append((report.offset, validator.report(report.offset, 2**40)))
        except HAProtocolError as exc:
            return ("error", type(exc))
    return ("ok", reports if not last_only else reports[-1:], decoder.buffered)


def fuzz_ha_ack(data: bytes) -> None:
    cut = _split_point(data) & ~7
    same(
        "acks fed whole and split",
        _feed_acks([data], False),
        _feed_acks([data[:cut], data[cut:]], False),
    )
    _feed_acks([data[:cut], data[cut:]], True)


# -- store -----------------------------------------------------------------------------------

_SCAN_FAST: Final = "tidemq.store.fast_scan.scan_fast"
_GATHER: Final = "tidemq.store.index_worker.gather_entries"
_GATHERER: Final = "tidemq.store.fast_scan.KeyGatherer"


def _as_mmap(data: bytes) -> mmap.mmap:
    mm = mmap.mmap(-1, max(len(data), 1))
    mm[: len(data)] = data
    return mm


# The store twins the store runs: compiled where built, else the pure ones (TIDEMQ_PURE_PYTHON=1,
# no compiler), when the comparison is of the pure twins with themselves.
_STORE: Final[Any] = SimpleNamespace(
    scan_fast=fast_scan.scan_fast,
    gather_entries=index_worker.gather_entries,
    KeyGatherer=fast_scan.KeyGatherer,
    encode_batch=record.encode_batch,
)


def fuzz_commitlog_record(data: bytes) -> None:
    compiled = _STORE
    outcome((RecordFormatError,), decode_record, data)
    info = scan_record(data, 0, check_crc=True)
    scan_record(memoryview(data), 0, check_crc=False)
    mm = _as_mmap(data)
    try:
        for pos in {0, _split_point(data)}:
            same(
                "scan_fast twins",
                outcome((), pure(_SCAN_FAST), mm, pos, len(data)),
                outcome((), compiled.scan_fast, mm, pos, len(data)),
            )
        expected: list[Any] = []
        got: list[Any] = []
        same(
            "gather_entries twins",
            outcome((), pure(_GATHER), mm, 0, len(data), pure(_GATHERER)(), expected),
            outcome((), compiled.gather_entries, mm, 0, len(data), compiled.KeyGatherer(), got),
        )
        same("gather_entries entries", expected, got)
    finally:
        mm.close()
    del info


_ENCODE_BATCH: Final = "tidemq.store.record.encode_batch"


def fuzz_batch_body(data: bytes) -> None:
    outcome((BatchDecodeError,), decode_batch_body, data)
    batch = MessageBatch("TopicFuzz", 1, data, properties="CLUSTER\x01c\x02")
    errors = (BatchDecodeError, RecordTooLargeError)
    reference = outcome(errors, pure(_ENCODE_BATCH), batch, 4096)
    compiled = outcome(errors, _STORE.encode_batch, batch, 4096)
    same("encode_batch twins", _batch_view(reference), _batch_view(compiled))


def _batch_view(result: Any) -> Any:
    if result[0] != "ok":
        return result
    encoded = result[1]
    return ("ok", bytes(encoded.data), encoded.offsets, encoded.properties_at, encoded.wait_store)


_WITH_PROPERTY_KEY: Final = "tidemq.store.record.with_property"


def fuzz_properties_file(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    outcome((ConfigError,), parse_properties, text)
    # a send's properties text (name\x01value\x02...): decoded, and given its CLUSTER
    decode_properties(text)
    same(
        "with_property twins",
        outcome((), pure(_WITH_PROPERTY_KEY), text, "CLUSTER", "DefaultCluster"),
        outcome((), record.with_property, text, "CLUSTER", "DefaultCluster"),
    )


def fuzz_namesrv_register(data: bytes) -> None:
    errors = (namesrv.NamesrvProtocolError,)
    outcome(errors, namesrv.RegisterBrokerBody.decode, data, False)
    outcome(errors, namesrv.RegisterBrokerBody.decode, data, True)
    # the fuzzer rarely makes a valid zlib stream: give the compressed reader the input itself
    outcome(errors, namesrv.RegisterBrokerBody.decode, zlib.compress(data), True)


def fuzz_pull_body(data: bytes) -> None:
    from tidemq.client.consumer.received import decode_received

    outcome((RecordFormatError,), decode_received, data, "broker-a")


_SPARK: dict[str, Any] = {}


def fuzz_spark_columns(data: bytes) -> None:
    if not _SPARK:
        from tidemq.client.spark import records
        from tidemq.store.tags import parse_tag_expression

        _SPARK["records"] = records
        _SPARK["filter"] = parse_tag_expression("*")
        _SPARK["schema"] = records.spark_schema(include_properties=True)
    records = _SPARK["records"]
    errors = (RecordFormatError,)
    same(
        "walk_records twins",
        outcome(errors, pure(_WALK_RECORDS), data),
        outcome(errors, records.walk_records, data),
    )
    buffer = records.ColumnBuffer("TopicFuzz", "broker-a", 0, _SPARK["schema"], _SPARK["filter"])
    added = outcome(errors, buffer.add, data, 0, 2**62)
    if added[0] == "ok" and buffer._walked:
        # the compiled twin (when built) and the pure one on what take() decodes
        walked = list(buffer._walked)  # empty when the body holds no record
        same(
            "fast_columns twins",
            _columns_view(outcome(errors, pure(_FAST_COLUMNS), walked)),
            _columns_view(outcome(errors, records.fast_columns, walked)),
        )
        outcome(errors, buffer.take)


_WALK_RECORDS: Final = "tidemq.client.spark.records.walk_records"
_FAST_COLUMNS: Final = "tidemq.client.spark.records.fast_columns"


def _columns_view(result: Any) -> Any:
    if result[0] != "ok" or result[1] is None:
        return result
    return ("ok", [(str(column.type), column.to_pylist()) for column in result[1]])


def fuzz_acl_file(data: bytes) -> None:
    from tidemq.broker.acl.rules import AclFileError, parse_document

    outcome((AclFileError,), parse_document, data.decode("utf-8", "replace"), "plain_acl.yml")


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], None]


TARGETS: Final[dict[str, Target]] = {
    target.name: target
    for target in (
        Target("frame", fuzz_frame),
        Target("header_json", fuzz_header_json),
        Target("header_msgpack", fuzz_header_msgpack),
        Target("header_rocketmq", fuzz_header_rocketmq),
        Target("request_headers", fuzz_request_headers),
        Target("json_bodies", fuzz_json_bodies),
        Target("ha_transfer", fuzz_ha_transfer),
        Target("ha_ack", fuzz_ha_ack),
        Target("commitlog_record", fuzz_commitlog_record),
        Target("batch_body", fuzz_batch_body),
        Target("properties_file", fuzz_properties_file),
        Target("namesrv_register", fuzz_namesrv_register),
        Target("pull_body", fuzz_pull_body),
        Target("spark_columns", fuzz_spark_columns),
        Target("acl_file", fuzz_acl_file),
    )
}
