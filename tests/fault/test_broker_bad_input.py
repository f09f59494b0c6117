"""Bad input to a real brokerd: a clear response or a closed connection, and nothing else breaks.

Malformed frames go over raw sockets: garbage, length fields outside [4, maxFrameSize], a header
length beyond its frame, an unknown serialisation, headers that do not decode (JSON, msgpack,
ROCKETMQ binary), a frame cut short by a client that leaves. The broker must close that one
connection without answering and log why. Well-formed requests it cannot serve (an unknown
request code, a send to a topic it may not create, an oversized body or properties, a corrupt
batch, a missing or malformed header field) must get their error code with a remark that says
why, on a connection that goes on serving.

Every case is watched the same way (`watch`):

- before the bad input, a normal client (`BrokerAPI`) is connected, has a long-polling pull held
  on the control queue, and has just stored a control message at physical offset P, S bytes
  long; the max offsets of the queues the bad request names are noted, and so is the log's end;
- after it, the broker process runs, the normal client's connection is the same open one, the
  held pull is answered with the next control message, which the store put at exactly P + S
  (nothing was appended to the CommitLog in between), the named queues' max offsets are
  unchanged, and a new connection sends and pulls.

Two brokers, started once for the module, serve every case: `big` with the defaults (16 MiB
frames, topics created on first send) and `strict` (maxFrameSize=65536,
autoCreateTopicEnable=false). Both have maxMessageSize=1 MiB (the test store overrides).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import struct
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Final

import msgpack  # type: ignore[import-untyped]
import pytest

from tests.support.conditions import eventually
from tests.support.processes import TEST_STORE_OVERRIDES, Daemon, ProcessGroup
from tidemq.broker.managers.topic_config import validate_topic_name
from tidemq.client.api import BrokerAPI, PullResult, PullStatus, SendStatus
from tidemq.client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    SEND_V2_KEYS,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode,
)
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_command
from tidemq.client.remoting.headers import (
    encode_json_header,
    encode_msgpack_header,
    encode_rocketmq_header,
)
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import StoredMessage, encode_properties

TIMEOUT: Final = 5.0
STRICT_MAX_FRAME: Final = 65536
MAX_MESSAGE_SIZE: Final = next(
    int(o.split("=")[1]) for o in TEST_STORE_OVERRIDES if o.startswith("maxMessageSize=")
)
CONTROL: Final = "BadInputControl"  # the normal client's topic
VICTIM: Final = "BadInputVictim"  # the topic bad requests name
MISSING: Final = "BadInputMissing"  # never created on the strict broker
QUEUES: Final = 4
BAD_BODY: Final = b"this body must never be stored"

_PREFIX: Final = struct.Struct(">iI")
_INT32: Final = struct.Struct(">i")


# --- brokers and clients ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Brokers:
    big: Daemon
    strict: Daemon


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    root = tmp_path_factory.mktemp("bad-input")
    group = ProcessGroup(root / "logs")
    try:
        namesrv = group.namesrvd(name="namesrvd")
        big = group.brokerd(namesrv.address, root / "store-big", name="brokerd-big")
        strict = group.brokerd(
            namesrv.address,
            root / "store-strict",
            "brokerName=broker-strict",
            f"maxFrameSize={STRICT_MAX_FRAME}",
            "autoCreateTopicEnable=false",
            name="brokerd-strict",
        )
        yield Brokers(big, strict)
        for daemon in (strict, big):  # all that bad input left them able to stop cleanly
            assert daemon.stop() == 0, f"{daemon.name} did not stop cleanly:\n{daemon.log_tail()}"
    finally:
        group.stop_all()


@pytest.fixture
async def api() -> AsyncIterator[BrokerAPI]:
    client = BrokerAPI(timeout=TIMEOUT)
    try:
        yield client
    finally:
        await client.close()


_topics_created: set[str] = set()


async def ensure_topics(api: BrokerAPI, address: str) -> None:
    """CONTROL and VICTIM exist on the broker (the strict one creates no topic on a send)."""
    if address in _topics_created:
        return
    for topic in (CONTROL, VICTIM):
        await api.create_topic(address, TopicConfig(topic, QUEUES, QUEUES))
    _topics_created.add(address)


def send_header(
    topic: str, queue_id: int, properties: str | None = None
) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="PG",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties({"KEYS": "k"}) if properties is None else properties,
        default_topic_queue_nums=QUEUES,
    )


def pull_header(
    topic: str, queue_id: int, offset: int, suspend_ms: int = 0
) -> PullMessageRequestHeader:
    return PullMessageRequestHeader(
        consumer_group="CG",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms else 0),
        commit_offset=0,
        suspend_timeout_millis=suspend_ms,
        sub_version=0,
        subscription="*",
    )


async def read_one(
    api: BrokerAPI, address: str, topic: str, queue_id: int, offset: int
) -> StoredMessage:
    pulled = await api.pull(address, pull_header(topic, queue_id, offset))
    assert pulled.status is PullStatus.FOUND, pulled
    return pulled.messages[0]


# --- the witness: a normal client's view before and after the bad input ----------------------


@dataclass(slots=True)
class Witness:
    daemon: Daemon
    log_mark: int
    offsets: dict[tuple[str, int], int]  # the watched queues' max offsets before the bad input

    async def expect_log(self, needle: str) -> None:
        """A broker log line written since the watch began contains `needle`."""

        def written() -> str:
            return self.daemon.log_text()[self.log_mark :]

        try:
            await eventually(lambda: needle in written(), f"a log line with {needle!r}", TIMEOUT)
        except AssertionError as exc:
            raise AssertionError(f"{exc} in:\n{written()[-3000:]}") from None


GATED: Final = -1  # what `max_offset` says of a queue whose topic the name gate refuses


async def max_offset(api: BrokerAPI, address: str, topic: str, queue_id: int) -> int:
    """The queue's max offset; GATED when its topic is not a topic name, and the broker refused
    to look it up (a look-up could create its ConsumeQueue)."""
    if validate_topic_name(topic) is None:
        return await api.get_max_offset(address, topic, queue_id)
    ext = {"topic": topic, "queueId": str(queue_id)}
    response = await api.invoke(address, api.request(RequestCode.GET_MAX_OFFSET, ext))
    assert response.code == ResponseCode.SYSTEM_ERROR, response
    assert (response.remark or "").startswith("topic: "), response.remark
    return GATED


@contextlib.asynccontextmanager
async def watch(daemon: Daemon, api: BrokerAPI, *queues: tuple[str, int]) -> AsyncIterator[Witness]:
    """Check, around the bad input in the body, that the broker goes on as if it never came."""
    address = daemon.address
    await ensure_topics(api, address)
    sent = await api.send(address, send_header(CONTROL, 0), b"before")
    before = await read_one(api, address, CONTROL, 0, sent.queue_offset)
    offsets = {queue: await max_offset(api, address, *queue) for queue in queues}
    connection = await api.remoting.connection(address)
    held = asyncio.create_task(
        api.pull(address, pull_header(CONTROL, 0, sent.queue_offset + 1, 20_000), timeout=30)
    )
    await asyncio.sleep(0)  # the held pull is on the wire before the bad input
    witness = Witness(daemon, len(daemon.log_text()), offsets)
    try:
        yield witness
        await _check_unharmed(daemon, api, connection, held, before, offsets)
    finally:
        held.cancel()


async def _check_unharmed(
    daemon: Daemon,
    api: BrokerAPI,
    connection: RemotingConnection,
    held: asyncio.Task[PullResult],
    before: StoredMessage,
    offsets: dict[tuple[str, int], int],
) -> None:
    address = daemon.address
    assert daemon.running, f"{daemon.name} died:\n{daemon.log_tail()}"
    assert connection.is_open, "the bad input closed a normal client's connection"
    sent = await api.send(address, send_header(CONTROL, 0), b"after")
    assert sent.status is SendStatus.SEND_OK
    pulled = await asyncio.wait_for(held, TIMEOUT)
    assert pulled.status is PullStatus.FOUND, "the pull held across the bad input was lost"
    assert [m.body for m in pulled.messages] == [b"after"]
    after = pulled.messages[0]
    assert after.queue_offset == before.queue_offset + 1
    # contiguous: no CommitLog file fills up in this module (4 MiB files, some KiB written)
    grew = after.physical_offset - before.physical_offset - before.total_size
    assert grew == 0, f"{grew} bytes were appended to the CommitLog around the bad request"
    for (topic, queue_id), offset in offsets.items():
        assert await max_offset(api, address, topic, queue_id) == offset, (
            f"{topic}:{queue_id} changed"
        )
    assert await api.remoting.connection(address) is connection, "the client had to reconnect"
    fresh = BrokerAPI(timeout=TIMEOUT)
    try:
        sent = await fresh.send(address, send_header(CONTROL, 1), b"new connection")
        got = await read_one(fresh, address, CONTROL, 1, sent.queue_offset)
        assert got.body == b"new connection"
    finally:
        await fresh.close()


# --- a raw connection ------------------------------------------------------------------------


class Raw:
    """A plain TCP connection: any bytes out; frames, EOF or a reset in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.unclaimed: list[RemotingCommand] = []
        host, port = writer.get_extra_info("sockname")[:2]
        self.name = f"{host}:{port}"  # how the broker's log names this connection

    @classmethod
    async def open(cls, address: str) -> Raw:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        with contextlib.suppress(ConnectionError):  # the broker may close before reading it all
            await self.writer.drain()

    async def request(self, command: RemotingCommand) -> RemotingCommand:
        """Send `command` as it is and return its response (other frames are kept aside)."""
        await self.write(encode_command(command))
        try:
            async with asyncio.timeout(TIMEOUT):
                while True:
                    for received in self.unclaimed:
                        if received.opaque == command.opaque:
                            self.unclaimed.remove(received)
                            return received
                    chunk = await self.reader.read(65536)
                    if not chunk:
                        raise AssertionError(
                            "the broker closed the connection instead of answering"
                        )
                    self.unclaimed += self.decoder.feed(chunk)
        except TimeoutError:
            raise AssertionError(f"no response to request code {command.code}") from None

    async def closed_by_broker(self) -> bytes:
        """Read until the broker closes the connection; what it sent before that."""
        received = bytearray()
        try:
            async with asyncio.timeout(TIMEOUT):
                while chunk := await self.reader.read(65536):
                    received += chunk
        except ConnectionResetError:
            pass  # closed with our bytes unread: a reset instead of a FIN
        except TimeoutError:
            raise AssertionError(
                f"the broker kept the connection open for {TIMEOUT} s after bad input"
            ) from None
        return bytes(received)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@contextlib.asynccontextmanager
async def raw_connection(address: str) -> AsyncIterator[Raw]:
    raw = await Raw.open(address)
    try:
        yield raw
    finally:
        await raw.close()


# --- building requests and frames ------------------------------------------------------------


def frame(
    header: bytes,
    body: bytes = b"",
    *,
    kind: int = SerializeType.JSON,
    length: int | None = None,
    header_len: int | None = None,
) -> bytes:
    """A frame with any length field, serialisation byte and header length, consistent or not."""
    if length is None:
        length = 4 + len(header) + len(body)
    if header_len is None:
        header_len = len(header)
    return _PREFIX.pack(length, kind << 24 | header_len) + header + body


def send_ext(
    topic: str = VICTIM, queue_id: int = 0, *, v2: bool = True, properties: str | None = None
) -> dict[str, str]:
    header = send_header(topic, queue_id, properties)
    return encode(header, SEND_V2_KEYS) if v2 else encode(header)


def request(
    code: int,
    ext: dict[str, str],
    body: bytes = b"",
    *,
    drop: tuple[str, ...] = (),
    oneway: bool = False,
    opaque: int = 1,
    serialize_type: SerializeType = SerializeType.JSON,
    **changes: str,
) -> RemotingCommand:
    """A request (JSON header unless told) with `drop`ped and changed extFields."""
    fields = {k: v for k, v in ext.items() if k not in drop} | changes
    return RemotingCommand.request(
        code, fields, body, oneway=oneway, opaque=opaque, serialize_type=serialize_type
    )


def send_v2(
    body: bytes = BAD_BODY, *, drop: tuple[str, ...] = (), **changes: str
) -> RemotingCommand:
    return request(RequestCode.SEND_MESSAGE_V2, send_ext(), body, drop=drop, **changes)


def pull_ext(topic: str = VICTIM) -> dict[str, str]:
    return encode(pull_header(topic, 0, 0))


SEND_REQUEST: Final = send_v2()
SEND_JSON: Final = encode_json_header(SEND_REQUEST)
SEND_MSGPACK: Final = encode_msgpack_header(
    dataclasses.replace(SEND_REQUEST, serialize_type=SerializeType.MSGPACK)
)
SEND_BINARY: Final = encode_rocketmq_header(
    dataclasses.replace(SEND_REQUEST, serialize_type=SerializeType.ROCKETMQ)
)
GOOD_BATCH: Final = encode_batch_body([(0, b"first of a batch", encode_properties({"KEYS": "b1"}))])


def batch(body: bytes) -> RemotingCommand:
    return request(RequestCode.SEND_BATCH_MESSAGE, send_ext(v2=False), body)


def _batch_with(**fields: int) -> bytes:
    """GOOD_BATCH with some of its first message's header fields replaced."""
    total, magic, crc, flag, body_len = struct.unpack_from(">iiiii", GOOD_BATCH)
    values = {"total": total, "magic": magic, "crc": crc, "flag": flag, "body_len": body_len}
    values.update(fields)
    return struct.pack(">iiiii", *values.values()) + GOOD_BATCH[20:]


def _props_len(delta: int) -> bytes:
    body_len = struct.unpack_from(">i", GOOD_BATCH, 16)[0]
    at = 20 + body_len
    props_len = struct.unpack_from(">h", GOOD_BATCH, at)[0]
    return GOOD_BATCH[:at] + struct.pack(">h", props_len + delta) + GOOD_BATCH[at + 2 :]


# --- malformed frames: the connection is closed, the reason logged ----------------------------


@dataclass(frozen=True, slots=True)
class Malformed:
    data: bytes
    reason: str  # what the log line says after "malformed frame: "


def _length_of(data: bytes) -> int:
    length: int = _INT32.unpack_from(data)[0]
    return length


_HTTP: Final = b"GET / HTTP/1.1\r\nHost: tidemq\r\n\r\n"
_BINARY_GARBAGE: Final = bytes(range(64))
_HL_OVER: Final = len(SEND_JSON) + len(BAD_BODY) + 1
_TOO_BIG_FOR_STRICT: Final = b"x" * (STRICT_MAX_FRAME + 1 - 4 - len(SEND_JSON))

MALFORMED: Final = {
    "garbage-text": Malformed(
        _HTTP, f"frame length {_length_of(_HTTP)} exceeds the maximum {DEFAULT_MAX_FRAME_SIZE}"
    ),
    "garbage-binary": Malformed(
        _BINARY_GARBAGE, "header length 329223 exceeds frame length 66051 - 4"
    ),
    # only the length field: the broker must not wait for 16 MiB before refusing
    "length-16MiB-plus-1": Malformed(
        _INT32.pack(DEFAULT_MAX_FRAME_SIZE + 1),
        f"frame length {DEFAULT_MAX_FRAME_SIZE + 1} exceeds the maximum {DEFAULT_MAX_FRAME_SIZE}",
    ),
    "length-int32-max": Malformed(
        _PREFIX.pack(2**31 - 1, len(SEND_JSON)) + SEND_JSON,
        f"frame length {2**31 - 1} exceeds the maximum {DEFAULT_MAX_FRAME_SIZE}",
    ),
    "length-negative": Malformed(_INT32.pack(-1), "frame length -1 is below the minimum of 4"),
    "length-int32-min": Malformed(
        _PREFIX.pack(-(2**31), 0), f"frame length {-(2**31)} is below the minimum of 4"
    ),
    "length-zero": Malformed(_PREFIX.pack(0, 0), "frame length 0 is below the minimum of 4"),
    "length-three": Malformed(_INT32.pack(3) + b"abc", "frame length 3 is below the minimum of 4"),
    "header-length-beyond-frame": Malformed(
        frame(SEND_JSON, BAD_BODY, header_len=_HL_OVER),
        f"header length {_HL_OVER} exceeds frame length {_HL_OVER + 3} - 4",
    ),
    "header-length-24-bit-max": Malformed(
        frame(SEND_JSON, BAD_BODY, header_len=0xFFFFFF),
        f"header length {0xFFFFFF} exceeds frame length {_HL_OVER + 3} - 4",
    ),
    "serialize-type-3": Malformed(frame(SEND_JSON, BAD_BODY, kind=3), "unknown serialize type 3"),
    "serialize-type-255": Malformed(
        frame(SEND_JSON, BAD_BODY, kind=255), "unknown serialize type 255"
    ),
    "json-truncated": Malformed(
        frame(SEND_JSON[:-1], BAD_BODY), "JSON header does not parse: Expecting"
    ),
    "json-invalid-utf8": Malformed(
        frame(SEND_JSON.replace(b'"PG"', b'"P\xffG"'), BAD_BODY),
        "JSON header does not parse: 'utf-8' codec can't decode byte 0xff",
    ),
    "json-empty": Malformed(frame(b"", BAD_BODY), "JSON header does not parse: Expecting value"),
    "json-array": Malformed(frame(b"[310,1]", BAD_BODY), "JSON header is not an object/map: list"),
    "json-without-code": Malformed(
        frame(json.dumps({"opaque": 1, "extFields": send_ext()}).encode(), BAD_BODY),
        "header has no 'code' field",
    ),
    "json-code-beyond-int32": Malformed(
        frame(b'{"code":4294967606,"opaque":1}', BAD_BODY),
        "header field 'code'=4294967606 does not fit a 32-bit int",
    ),
    "json-extfields-not-object": Malformed(
        frame(b'{"code":310,"opaque":1,"extFields":["b","BadInputVictim"]}', BAD_BODY),
        "header field 'extFields' is not an object",
    ),
    "json-nested-100k-deep": Malformed(
        frame(b"[" * 100_000), "JSON header does not parse: maximum recursion depth exceeded"
    ),
    "json-5000-digit-number": Malformed(
        frame(b'{"code":' + b"9" * 5000 + b',"opaque":1}'),
        "JSON header does not parse: Exceeds the limit (4300 digits)",
    ),
    "msgpack-truncated": Malformed(
        frame(SEND_MSGPACK[:-1], BAD_BODY, kind=SerializeType.MSGPACK),
        "msgpack header does not parse: Unpack failed: incomplete input",
    ),
    "msgpack-trailing-byte": Malformed(
        frame(SEND_MSGPACK + b"\xc0", BAD_BODY, kind=SerializeType.MSGPACK),
        "msgpack header does not parse: unpack(b) received extra data",
    ),
    "msgpack-reserved-byte": Malformed(
        frame(b"\xc1", BAD_BODY, kind=SerializeType.MSGPACK),
        "msgpack header does not parse: FormatError",
    ),
    "msgpack-nested-100k-deep": Malformed(
        frame(b"\x91" * 100_000, kind=SerializeType.MSGPACK),
        "msgpack header does not parse: StackError",
    ),
    "msgpack-array-of-4G": Malformed(
        frame(b"\xdd\xff\xff\xff\xff", kind=SerializeType.MSGPACK),
        "msgpack header does not parse: 4294967295 exceeds max_array_len",
    ),
    "msgpack-not-a-map": Malformed(
        frame(msgpack.packb([310, 1]), BAD_BODY, kind=SerializeType.MSGPACK),
        "msgpack header is not an object/map: list",
    ),
    "msgpack-bytes-in-extfields": Malformed(
        frame(
            msgpack.packb({"code": 310, "opaque": 1, "extFields": {"b": VICTIM.encode()}}),
            BAD_BODY,
            kind=SerializeType.MSGPACK,
        ),
        "extFields['b'] has a value of unexpected type bytes",
    ),
    "binary-too-short": Malformed(
        frame(b"\0" * 5, BAD_BODY, kind=SerializeType.ROCKETMQ),
        "binary header of 5 bytes is shorter than 21",
    ),
    "binary-remark-overruns": Malformed(
        frame(
            struct.pack(">hBhiiii", 310, 0, 401, 1, 0, 1000, 0),
            BAD_BODY,
            kind=SerializeType.ROCKETMQ,
        ),
        "binary header remark length 1000 is outside [0, 0]",
    ),
    "binary-trailing-byte": Malformed(
        frame(SEND_BINARY + b"\0", BAD_BODY, kind=SerializeType.ROCKETMQ),
        "binary header has 1 bytes after extFields",
    ),
}

MALFORMED_ON_STRICT: Final = {
    # a whole, valid send, one byte longer than the strict broker's maxFrameSize
    "frame-65537": Malformed(
        frame(SEND_JSON, _TOO_BIG_FOR_STRICT),
        f"frame length {STRICT_MAX_FRAME + 1} exceeds the maximum {STRICT_MAX_FRAME}",
    ),
    "length-field-65537": Malformed(
        _INT32.pack(STRICT_MAX_FRAME + 1),
        f"frame length {STRICT_MAX_FRAME + 1} exceeds the maximum {STRICT_MAX_FRAME}",
    ),
    "garbage-text": Malformed(
        _HTTP, f"frame length {_length_of(_HTTP)} exceeds the maximum {STRICT_MAX_FRAME}"
    ),
}


@pytest.mark.parametrize(
    ("broker", "case"),
    [pytest.param("big", case, id=f"big-{name}") for name, case in MALFORMED.items()]
    + [
        pytest.param("strict", case, id=f"strict-{name}")
        for name, case in MALFORMED_ON_STRICT.items()
    ],
)
async def test_malformed_frame_closes_only_its_connection(
    brokers: Brokers, api: BrokerAPI, broker: str, case: Malformed
) -> None:
    daemon: Daemon = getattr(brokers, broker)
    async with watch(daemon, api, (VICTIM, 0)) as witness, raw_connection(daemon.address) as raw:
        await raw.write(case.data)
        assert await raw.closed_by_broker() == b"", "the broker answered a malformed frame"
        await witness.expect_log(f"closing connection {raw.name}: malformed frame: {case.reason}")


# --- a frame cut short by a client that leaves ------------------------------------------------


_WHOLE_SEND: Final = frame(SEND_JSON, BAD_BODY)


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(3, id="inside-length-field"),
        pytest.param(6, id="inside-header-length"),
        pytest.param(8 + len(SEND_JSON) // 2, id="inside-header"),
        pytest.param(len(_WHOLE_SEND) - 1, id="one-byte-short"),
    ],
)
@pytest.mark.parametrize("leaving", ["close", "half-close"])
async def test_truncated_frame_then_client_leaves(
    brokers: Brokers, api: BrokerAPI, cut: int, leaving: str
) -> None:
    daemon = brokers.big
    async with watch(daemon, api, (VICTIM, 0)) as witness:
        raw = await Raw.open(daemon.address)
        try:
            await raw.write(_WHOLE_SEND[:cut])
            await asyncio.sleep(0.1)  # the broker has the partial frame before we leave
            if leaving == "half-close":
                raw.writer.write_eof()  # no more bytes: the broker must close, not wait
                assert await raw.closed_by_broker() == b""
        finally:
            await raw.close()
        await witness.expect_log(
            f"connection {raw.name} closed with an incomplete frame: {cut} bytes discarded"
        )


# --- well-formed requests the broker refuses: an error response, the connection stays ---------


@dataclass(frozen=True, slots=True)
class Refused:
    request: RemotingCommand
    code: ResponseCode | None  # None: a oneway request, no response at all
    remark: str = ""  # a part of the response's remark
    queue: tuple[str, int] = (VICTIM, 0)  # the queue the request names, to stay unchanged
    log: str = ""  # a part of a broker log line; "{peer}" is the raw connection's address
    topic_absent: str = ""  # a topic the request must not have created


_OVERSIZED: Final = b"o" * (MAX_MESSAGE_SIZE + 1)
_BIG_PROPERTIES: Final = encode_properties({"KEYS": "k", "BIG": "p" * 33_000})

REFUSED: Final = {
    "unknown-code": Refused(
        request(9999, {"topic": VICTIM}, BAD_BODY),
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        "request type 9999 not supported",
        log="request code 9999 from {peer} not supported",
    ),
    "unknown-negative-code": Refused(
        request(-7, {}, BAD_BODY),
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        "request type -7 not supported",
        log="request code -7 from {peer} not supported",
    ),
    "unknown-code-oneway": Refused(
        request(9999, {"topic": VICTIM}, BAD_BODY, oneway=True),
        None,
        log="request code 9999 from {peer} not supported",
    ),
    "body-over-maxMessageSize": Refused(
        send_v2(_OVERSIZED),
        ResponseCode.MESSAGE_ILLEGAL,
        f"message body of {MAX_MESSAGE_SIZE + 1} bytes exceeds {MAX_MESSAGE_SIZE}",
    ),
    "body-over-maxMessageSize-v1": Refused(
        request(RequestCode.SEND_MESSAGE, send_ext(v2=False), _OVERSIZED),
        ResponseCode.MESSAGE_ILLEGAL,
        f"message body of {MAX_MESSAGE_SIZE + 1} bytes exceeds {MAX_MESSAGE_SIZE}",
    ),
    "properties-over-32767": Refused(
        send_v2(i=_BIG_PROPERTIES),
        ResponseCode.MESSAGE_ILLEGAL,
        "bytes exceed 32767",
    ),
    "batch-ends-inside-a-message-header": Refused(
        batch(GOOD_BATCH[:10]),
        ResponseCode.MESSAGE_ILLEGAL,
        "batch body ends inside a message header",
    ),
    "batch-size-beyond-body": Refused(
        batch(GOOD_BATCH[:-1]),
        ResponseCode.MESSAGE_ILLEGAL,
        f"batch message at 0 has a bad size {len(GOOD_BATCH)}",
    ),
    "batch-size-too-small": Refused(
        batch(_batch_with(total=5)), ResponseCode.MESSAGE_ILLEGAL, "has a bad size 5"
    ),
    "batch-negative-body-length": Refused(
        batch(_batch_with(body_len=-1)), ResponseCode.MESSAGE_ILLEGAL, "has a bad size"
    ),
    "batch-body-length-beyond-message": Refused(
        batch(_batch_with(body_len=1000)),
        ResponseCode.MESSAGE_ILLEGAL,
        "body length 1000 too large",
    ),
    "batch-properties-length-mismatch": Refused(
        batch(_props_len(+1)), ResponseCode.MESSAGE_ILLEGAL, "properties length mismatch"
    ),
    "batch-good-then-corrupt": Refused(
        batch(GOOD_BATCH + GOOD_BATCH[:-3]),
        ResponseCode.MESSAGE_ILLEGAL,
        f"batch message at {len(GOOD_BATCH)} has a bad size",
    ),
    "batch-good-then-oversized": Refused(
        batch(GOOD_BATCH + encode_batch_body([(0, _OVERSIZED, "")])),
        ResponseCode.MESSAGE_ILLEGAL,
        f"message body of {MAX_MESSAGE_SIZE + 1} bytes exceeds {MAX_MESSAGE_SIZE}",
    ),
    "batch-empty": Refused(batch(b""), ResponseCode.MESSAGE_ILLEGAL, "empty batch"),
    "send-v2-without-topic": Refused(
        send_v2(drop=("b",)), ResponseCode.SYSTEM_ERROR, "the custom field <topic> is null"
    ),
    "send-v2-without-producer-group": Refused(
        send_v2(drop=("a",)), ResponseCode.SYSTEM_ERROR, "the custom field <producerGroup> is null"
    ),
    "send-v1-without-topic": Refused(
        request(RequestCode.SEND_MESSAGE, send_ext(v2=False), BAD_BODY, drop=("topic",)),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <topic> is null",
    ),
    "batch-without-queue-id": Refused(
        request(RequestCode.SEND_BATCH_MESSAGE, send_ext(v2=False), GOOD_BATCH, drop=("queueId",)),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <queueId> is null",
    ),
    "send-queue-id-not-a-number": Refused(
        send_v2(e="zero"), ResponseCode.SYSTEM_ERROR, "queueId: not an integer: 'zero'"
    ),
    # Java reads these into an Integer or a Long: a larger number is a bad header, not a message
    "send-flag-beyond-int32": Refused(
        send_v2(h=str(2**31)), ResponseCode.SYSTEM_ERROR, f"flag: '{2**31}' does not fit 32 bits"
    ),
    "send-sys-flag-beyond-int32": Refused(
        send_v2(f=str(2**40)), ResponseCode.SYSTEM_ERROR, f"sysFlag: '{2**40}' does not fit 32 bits"
    ),
    "send-reconsume-times-beyond-int32": Refused(
        send_v2(j=str(-(2**31) - 1)),
        ResponseCode.SYSTEM_ERROR,
        f"reconsumeTimes: '{-(2**31) - 1}' does not fit 32 bits",
    ),
    "send-born-timestamp-beyond-int64": Refused(
        send_v2(g=str(2**63)),
        ResponseCode.SYSTEM_ERROR,
        f"bornTimestamp: '{2**63}' does not fit 64 bits",
    ),
    "send-v2-without-sys-flag": Refused(
        send_v2(drop=("f",)), ResponseCode.SYSTEM_ERROR, "the custom field <sysFlag> is null"
    ),
    "send-v1-without-default-topic": Refused(
        request(RequestCode.SEND_MESSAGE, send_ext(v2=False), BAD_BODY, drop=("defaultTopic",)),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <defaultTopic> is null",
    ),
    "send-queue-id-beyond-topic": Refused(
        send_v2(e="99"), ResponseCode.SYSTEM_ERROR, "request queueId[99] is illegal"
    ),
    "send-topic-with-illegal-characters": Refused(
        send_v2(b="bad topic!"),
        ResponseCode.SYSTEM_ERROR,
        "The specified topic contains illegal characters",
        queue=("bad topic!", 0),
        topic_absent="bad topic!",
    ),
    "send-to-broker-only-topic": Refused(
        send_v2(b="SCHEDULE_TOPIC_XXXX"),
        ResponseCode.NO_PERMISSION,
        "sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden",
        queue=("SCHEDULE_TOPIC_XXXX", 0),
    ),
    "pull-without-topic": Refused(
        request(RequestCode.PULL_MESSAGE, pull_ext(), drop=("topic",)),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <topic> is null",
    ),
    "pull-without-queue-offset": Refused(
        request(RequestCode.PULL_MESSAGE, pull_ext(), drop=("queueOffset",)),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <queueOffset> is null",
    ),
    "pull-queue-id-not-a-number": Refused(
        request(RequestCode.PULL_MESSAGE, pull_ext(), queueId="first"),
        ResponseCode.SYSTEM_ERROR,
        "queueId: not an integer: 'first'",
    ),
    "get-max-offset-without-queue-id": Refused(
        request(RequestCode.GET_MAX_OFFSET, {"topic": VICTIM}),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <queueId> is null",
    ),
    # every processor refuses a bad header or body alike, answered in the request's serialisation
    "pull-without-topic-msgpack": Refused(
        request(
            RequestCode.PULL_MESSAGE,
            pull_ext(),
            drop=("topic",),
            serialize_type=SerializeType.MSGPACK,
        ),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <topic> is null",
    ),
    "send-queue-id-not-a-number-rocketmq-binary": Refused(
        request(
            RequestCode.SEND_MESSAGE_V2,
            send_ext(),
            BAD_BODY,
            serialize_type=SerializeType.ROCKETMQ,
            e="zero",
        ),
        ResponseCode.SYSTEM_ERROR,
        "queueId: not an integer: 'zero'",
    ),
    "update-offset-without-queue-id": Refused(
        request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "CG", "topic": VICTIM, "commitOffset": "0"},
        ),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <queueId> is null",
    ),
    "send-back-offset-not-a-number": Refused(
        request(
            RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": "x", "group": "CG", "delayLevel": "0"}
        ),
        ResponseCode.SYSTEM_ERROR,
        "offset: not an integer: 'x'",
    ),
    "create-topic-without-topic": Refused(
        request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"readQueueNums": "4"}),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <topic> is null",
    ),
    "consume-stats-without-group": Refused(
        request(RequestCode.GET_CONSUME_STATS, {"topic": VICTIM}),
        ResponseCode.SYSTEM_ERROR,
        "the custom field <consumerGroup> is null",
    ),
    "heartbeat-body-not-json": Refused(
        request(RequestCode.HEART_BEAT, {}, b"{not json"),
        ResponseCode.SYSTEM_ERROR,
        "bad heartbeat body: ",
    ),
    "lock-body-not-json": Refused(
        request(RequestCode.LOCK_BATCH_MQ, {}, b"[1, 2"),
        ResponseCode.SYSTEM_ERROR,
        "bad lock body: ",
    ),
}

REFUSED_ON_STRICT: Final = {
    "send-v2-to-missing-topic": Refused(
        request(RequestCode.SEND_MESSAGE_V2, send_ext(MISSING), BAD_BODY),
        ResponseCode.TOPIC_NOT_EXIST,
        f"topic[{MISSING}] not exist, apply first please!",
        queue=(MISSING, 0),
        topic_absent=MISSING,
    ),
    "send-v1-to-missing-topic": Refused(
        request(RequestCode.SEND_MESSAGE, send_ext(MISSING, v2=False), BAD_BODY),
        ResponseCode.TOPIC_NOT_EXIST,
        f"topic[{MISSING}] not exist, apply first please!",
        queue=(MISSING, 0),
        topic_absent=MISSING,
    ),
    "batch-to-missing-topic": Refused(
        request(RequestCode.SEND_BATCH_MESSAGE, send_ext(MISSING, v2=False), GOOD_BATCH),
        ResponseCode.TOPIC_NOT_EXIST,
        f"topic[{MISSING}] not exist, apply first please!",
        queue=(MISSING, 0),
        topic_absent=MISSING,
    ),
}


@pytest.mark.parametrize(
    ("broker", "case"),
    [pytest.param("big", case, id=f"big-{name}") for name, case in REFUSED.items()]
    + [
        pytest.param("strict", case, id=f"strict-{name}")
        for name, case in REFUSED_ON_STRICT.items()
    ],
)
async def test_refused_request_gets_its_error_and_connection_stays(
    brokers: Brokers, api: BrokerAPI, broker: str, case: Refused
) -> None:
    daemon: Daemon = getattr(brokers, broker)
    topic, queue_id = case.queue
    async with watch(daemon, api, case.queue) as witness, raw_connection(daemon.address) as raw:
        if case.code is None:
            await raw.write(encode_command(case.request))
        else:
            response = await raw.request(case.request)
            assert response.is_response
            assert response.serialize_type == case.request.serialize_type
            assert response.code == case.code, (response.code, response.remark)
            assert case.remark in (response.remark or ""), response.remark
        # the same connection goes on serving, and answers nothing else before
        follow = await raw.request(
            request(
                RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}, opaque=2
            )
        )
        if witness.offsets[case.queue] == GATED:
            assert follow.code == ResponseCode.SYSTEM_ERROR, follow.remark
            assert (follow.remark or "").startswith("topic: "), follow.remark
        else:
            assert follow.code == ResponseCode.SUCCESS, follow.remark
            assert int(follow.ext_fields["offset"]) == witness.offsets[case.queue]
        assert raw.unclaimed == [], "the broker sent frames nobody asked for"
        if case.log:
            await witness.expect_log(case.log.format(peer=raw.name))
    if case.topic_absent:
        topics = await api.all_topic_config(daemon.address)
        assert case.topic_absent not in topics.topic_config_table


# --- the frame size limit is exact ------------------------------------------------------------


async def test_frame_of_exactly_max_frame_size_is_served(brokers: Brokers, api: BrokerAPI) -> None:
    daemon = brokers.strict
    await ensure_topics(api, daemon.address)
    queue = (VICTIM, 3)
    before = await api.get_max_offset(daemon.address, *queue)
    command = request(RequestCode.SEND_MESSAGE_V2, send_ext(*queue), b"")
    fill = STRICT_MAX_FRAME - 4 - len(encode_json_header(command))
    command.body = b"f" * fill
    data = encode_command(command)
    assert _length_of(data) == STRICT_MAX_FRAME
    async with raw_connection(daemon.address) as raw:
        response = await raw.request(command)
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert int(response.ext_fields["queueOffset"]) == before
    stored = await read_one(api, daemon.address, *queue, before)
    assert stored.body == b"f" * fill
