"""The gRPC fuzzer's requests, sans-IO: seeded hostile calls of every MessagingService RPC.

A `GrpcStep` is one call: the RPC's name, the request bytes (a list of commands for the
Telemetry stream), the call's metadata and a note naming what is hostile in it. JSON form:
`{"method", "payloads": [hex...], "metadata": [[key, value]...], "note"}`, replayable.

`GrpcSteps(rng, victims).next()` makes one call of a random RPC, each field drawn from:
- names (topics, groups, namespaces, client ids): tests/fuzz/request_values.py's hostile text
  (`../`, absolute paths at the run's victims, NUL, control characters, reserved prefixes,
  up to 70,000 characters) and 100 KB strings, or the run's good names;
- numbers: int32 / int64 boundaries, negative, zero; durations with huge, negative and
  out-of-range seconds and nanos; enums with values the definition does not have;
- receipt handles: text, RocketMQ's nine fields with hostile values (a broker name of `../`,
  queue and offsets at the int64 edges), or a live handle the run received, damaged;
- recall handles: text, base64 that is not UTF-8, RocketMQ's v1 fields with hostile values (a
  topic or broker name of `../`, times at the int64 edges, past, too far, not numbers, fields
  missing or extra, 100 KB), a live handle of a timer send of the run, or one damaged;
- bodies: empty, the broker's largest, one byte past it, beyond the gRPC frame limit;
- strings that are not UTF-8 on the wire (a placeholder swapped for invalid bytes of the same
  length after serialising, so the framing stays valid);
- with ACL accounts: the signature headers of one, or a wrong secret, an unknown or escaping
  access key, a signature that is not hex, a header without items, 5,000 characters long, no
  date-time;
- the bytes themselves (`raw`): truncated, bit-flipped, random, a length prefix past the end,
  a wire type where another belongs, nesting deeper than protobuf's recursion limit.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import random
from collections.abc import Callable
from typing import Any, Final

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tests.fuzz.request_values import MARK, Values
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Address,
    Endpoints,
    FilterExpression,
    Message,
    MessageQueue,
    Publishing,
    Resource,
    Settings,
    Subscription,
    SubscriptionEntry,
)

__all__ = ["GOOD_GROUP", "GOOD_TOPIC", "UNARY_RPCS", "GrpcStep", "GrpcSteps"]

GOOD_TOPIC: Final = "fzg-topic"
GOOD_GROUP: Final = "fzg-group"
GOOD_CLIENT: Final = "fzg-client"
# A string swapped for invalid UTF-8 of the same length after serialising.
BAD_UTF8_MARK: Final = "\x01BADUTF8\x01"
_BAD_UTF8: Final = b"\xff\xfe\xc0\x80\xed\xa0\x80\xf8\x88"  # 9 bytes, like the mark
assert len(BAD_UTF8_MARK.encode()) == len(_BAD_UTF8)

_INT32: Final = (0, 1, -1, 2, 32, 1000, 2**31 - 1, -(2**31), 10**6)
_INT64: Final = (0, -1, 1, 2**31, 2**63 - 1, -(2**63), 10**15)
# Duration's valid range is +-315,576,000,000 s; the wire carries any int64
_SECONDS: Final = (0, 1, -1, 5, 60, 3600, 315_576_000_000, 315_576_000_001, 2**63 - 1, -(2**63))
_NANOS: Final = (0, 1, 999_999_999, 10**9, -1, 2**31 - 1, -(2**31))
UNARY_RPCS: Final = (
    "QueryRoute",
    "Heartbeat",
    "SendMessage",
    "QueryAssignment",
    "AckMessage",
    "ForwardMessageToDeadLetterQueue",
    "UpdateOffset",
    "GetOffset",
    "QueryOffset",
    "EndTransaction",
    "NotifyClientTermination",
    "ChangeInvisibleDuration",
    "RecallMessage",
    "SyncLiteSubscription",
)
STREAM_RPCS: Final = ("ReceiveMessage", "PullMessage")


@dataclasses.dataclass(frozen=True)
class GrpcStep:
    method: str
    payloads: tuple[bytes, ...]  # one, or the Telemetry stream's commands
    metadata: tuple[tuple[str, str], ...]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "payloads": [p.hex() for p in self.payloads],
            "metadata": [list(kv) for kv in self.metadata],
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GrpcStep:
        return cls(
            data["method"],
            tuple(bytes.fromhex(p) for p in data["payloads"]),
            tuple((str(k), str(v)) for k, v in data["metadata"]),
            data.get("note", ""),
        )


def sign(access_key: str, secret: str, date: str) -> tuple[tuple[str, str], ...]:
    """The official clients' signature headers (broker/proxy/auth.py reads them)."""
    signature = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature}"
    )
    return (("x-mq-date-time", date), ("authorization", authorization))


def _bad_utf8(data: bytes) -> bytes:
    return data.replace(BAD_UTF8_MARK.encode(), _BAD_UTF8)


def _nested(depth: int) -> bytes:
    """A Message (SendMessageRequest field 1) nesting `depth` Resources in each other through
    unknown length-delimited fields: past protobuf's recursion limit of 100 for large depths."""
    inner = b""
    for _ in range(depth):
        inner = b"\x0a" + _varint(len(inner)) + inner
    return inner


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class GrpcSteps:
    """Seeded hostile calls; `handles` are live receipt handles the run received."""

    def __init__(
        self,
        rng: random.Random,
        victims: list[str],
        max_body: int,
        frame_limit: int,
        accounts: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """`accounts`: (access key, secret key) of a broker with aclEnable: calls are signed
        by one of them, or carry a hostile `authorization` header (noted "auth")."""
        self.rng = rng
        self.accounts = accounts
        self.values = Values(rng, victims)
        self.max_body = max_body
        self.frame_limit = frame_limit
        self.handles: list[str] = []
        self.recall_handles: list[str] = []
        self.notes: list[str] = []

    # --- values ----------------------------------------------------------------------------

    def _note(self, what: str) -> None:
        self.notes.append(what)

    def name(self, good: str) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.35:
            return good
        self._note("name")
        if roll < 0.42:
            return BAD_UTF8_MARK
        if roll < 0.47:
            return rng.choice(["x", "../", "é"]) * 100_000
        return self.values.text([good])

    def resource(self, good: str) -> Resource:
        namespace = ""
        if self.rng.random() < 0.1:
            namespace = self.name("")
            self._note("namespace")
        return Resource(name=self.name(good), resource_namespace=namespace)

    def int32(self, good: int) -> int:
        if self.rng.random() < 0.4:
            return good
        self._note("int32")
        return self.rng.choice(_INT32)

    def int64(self, good: int) -> int:
        if self.rng.random() < 0.4:
            return good
        self._note("int64")
        return self.rng.choice(_INT64)

    def enum(self, good: int, known: int) -> int:
        roll = self.rng.random()
        if roll < 0.5:
            return good
        self._note("enum")
        return self.rng.choice([self.rng.randrange(known), known + 3, 2**31 - 1, -1])

    def duration(self, good_ms: int) -> Duration:
        if self.rng.random() < 0.4:
            return Duration(seconds=good_ms // 1000, nanos=(good_ms % 1000) * 1_000_000)
        self._note("duration")
        return Duration(seconds=self.rng.choice(_SECONDS), nanos=self.rng.choice(_NANOS))

    def timestamp(self) -> Timestamp:
        self._note("timestamp")
        return Timestamp(seconds=self.rng.choice(_SECONDS), nanos=self.rng.choice(_NANOS))

    def text(self) -> str:
        self._note("text")
        return self.values.text([])

    def handle(self) -> str:
        rng = self.rng
        roll = rng.random()
        if self.handles and roll < 0.3:
            live = rng.choice(self.handles)
            if rng.random() < 0.5:
                return live  # a live handle, maybe for another group or topic
            self._note("damaged handle")
            fields = live.split(" ")
            fields[rng.randrange(len(fields))] = rng.choice(
                ["-1", str(2**63), str(2**63 - 1), "../" + MARK, "", "x", "0", str(-(2**63))]
            )
            return " ".join(fields)
        self._note("handle")
        if roll < 0.7:
            fields = [
                rng.choice(["0", "-1", str(2**63 - 1), "1e3"]),
                str(rng.choice([0, 1, 2**62, -1])),
                str(rng.choice([0, 1000, -1, 2**63 - 1])),
                str(rng.choice([0, 7, -1, 2**31])),
                rng.choice(["0", "1", "2", "3", ""]),
                rng.choice(["broker-a", "../" + MARK, "/" + MARK, "a" * 300, "\x00", ""]),
                str(rng.choice([0, 1, -1, 2**31, 2**63])),
                str(rng.choice([0, 1, -1, 2**63])),
                str(rng.choice([0, -1, 2**63 - 1])),
            ]
            return " ".join(fields[: rng.choice([9, 9, 8, 3, 12])])
        return rng.choice([self.values.text([]), BAD_UTF8_MARK, "x" * 100_000, ""])

    def recall_handle(self) -> str:
        rng = self.rng
        roll = rng.random()
        if self.recall_handles and roll < 0.3:
            live = rng.choice(self.recall_handles)
            if rng.random() < 0.5:
                return live  # a live one: a timer of the run recalled (or too late)
            self._note("damaged recall handle")
            raw = bytearray(base64.urlsafe_b64decode(live + "=" * (-len(live) % 4)))
            raw[rng.randrange(len(raw))] = rng.randrange(256)
            return base64.urlsafe_b64encode(bytes(raw)).decode()
        self._note("recall handle")
        if roll < 0.75:
            now_ms = 1_700_000_000_000
            fields = [
                rng.choice(["v1", "v1", "v2", "", "V1"]),
                rng.choice([GOOD_TOPIC, "../" + MARK, "/" + MARK, "a" * 300, "\x00", ""]),
                rng.choice(["fzg-broker", "broker-a", "../" + MARK, "", "\t"]),
                str(rng.choice([now_ms, 2**63 - 1, 2**63, -1, 0, 10**30]))
                if rng.random() < 0.8
                else rng.choice(["1e3", "", "\uff10", "+5", " 5"]),
                rng.choice(["7F0000010001", "", "../" + MARK, "x" * 5000]),
            ]
            text = " ".join(fields[: rng.choice([5, 5, 4, 1, 7])])
            encoded = base64.urlsafe_b64encode(text.encode()).decode()
            return encoded if rng.random() < 0.8 else encoded.rstrip("=")
        return rng.choice(
            [
                self.values.text([]),
                BAD_UTF8_MARK,
                "x" * 100_000,
                "",
                base64.urlsafe_b64encode(rng.randbytes(rng.choice([1, 30, 300]))).decode(),
                "=" * 8,
                "v1 fzg-topic fzg-broker 1 id",  # the text itself, not its base64
            ]
        )

    def body(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return rng.randbytes(rng.choice([0, 1, 10, 300]))
        self._note("body size")
        size = rng.choice(
            [self.max_body, self.max_body + 1, self.max_body * 2, self.frame_limit + 1]
        )
        return bytes(size)

    def client_metadata(self) -> tuple[tuple[str, str], ...]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            client = GOOD_CLIENT
        elif roll < 0.7:
            return (("x-mq-language", "PYTHON"), *self.authorization())  # no client id
        else:
            self._note("client id")
            # gRPC metadata is printable ASCII: other text the client refuses to send
            client = rng.choice(
                ["../" + MARK, "/" + MARK, "x" * 4000, "", " ", "%RETRY%x", "a@b:1|2"]
            )
        return (
            ("x-mq-client-id", client),
            ("x-mq-language", rng.choice(["PYTHON", "JAVA", "../x", "x" * 2000])),
            ("x-mq-client-version", rng.choice(["5.1.2", "", "9" * 500])),
            *self.authorization(),
        )

    def authorization(self) -> tuple[tuple[str, str], ...]:
        """The 5.x signature headers of one of `accounts`, or hostile ones."""
        if not self.accounts:
            return ()
        rng = self.rng
        access_key, secret = rng.choice(self.accounts)
        date = rng.choice(["20261129T120000Z", "x", "", "../" + MARK, "9" * 3000])
        if rng.random() < 0.7:
            return sign(access_key, secret, date or "d")
        self._note("auth")
        good = dict(sign(access_key, secret, date or "d"))["authorization"]
        header = rng.choice(
            [
                dict(sign(access_key, "wrong-secret", date or "d"))["authorization"],
                dict(sign("../" + MARK, secret, date or "d"))["authorization"],
                good.replace("Signature=", "Signature=zz"),
                good.replace("Credential=", "Credential="),
                good.replace(access_key, ""),
                good.split(",")[0],
                "MQv2-HMAC-SHA1",
                "MQv2-HMAC-SHA1 " + "Credential=" + "k" * 5000,
                "MQv2-HMAC-SHA1 Credential=a/b/c, Signature=" + "0" * 4000,
                " ",
                "",
            ]
        )
        if rng.random() < 0.2:
            return (("authorization", header),)  # no date-time
        return (("x-mq-date-time", date), ("authorization", header))

    # --- messages --------------------------------------------------------------------------

    def message(self, topic: Resource | None = None) -> Message:
        rng = self.rng
        message = Message(topic=topic or self.resource(GOOD_TOPIC), body=self.body())
        system = message.system_properties
        system.message_id = rng.choice(
            ["01" + "A" * 30, self.text() if rng.random() < 0.3 else "m"]
        )
        system.message_type = self.enum(1, 6)
        system.body_encoding = self.enum(1, 3)  # IDENTITY
        if rng.random() < 0.4:
            system.tag = self.name("tag")
        if rng.random() < 0.3:
            system.keys.extend(self.name("k") for _ in range(rng.choice([1, 2, 50])))
        if rng.random() < 0.3:
            system.message_group = self.name("mg")
        if rng.random() < 0.3:
            system.delivery_timestamp.CopyFrom(self.timestamp())
        if rng.random() < 0.2:
            system.born_timestamp.CopyFrom(self.timestamp())
        if rng.random() < 0.2:
            system.body_digest.type = self.enum(1, 4)
            system.body_digest.checksum = self.name("00")
        if rng.random() < 0.2:
            system.trace_context = self.name("trace")
        if rng.random() < 0.2:
            system.queue_id = self.int32(0)
            system.invisible_duration.CopyFrom(self.duration(1000))
        if rng.random() < 0.3:
            for _ in range(rng.choice([1, 3, 200])):
                message.user_properties[self.name("k")] = self.name("v")
        return message

    def endpoints(self) -> Endpoints:
        rng = self.rng
        return Endpoints(
            scheme=self.enum(1, 4),
            addresses=[Address(host=self.name("127.0.0.1"), port=self.int32(8081))]
            * rng.choice([0, 1, 3]),
        )

    def queue(self) -> MessageQueue:
        return MessageQueue(topic=self.resource(GOOD_TOPIC), id=self.int32(-1))

    def filter(self) -> FilterExpression:
        rng = self.rng
        expression = rng.choice(["*", "a||b", "a > 1", "((((", "TAGS in ('x')", ""])
        if rng.random() < 0.3:
            expression = self.name("*")
        return FilterExpression(type=self.enum(1, 3), expression=expression)

    def settings(self) -> Settings:
        rng = self.rng
        settings = Settings(client_type=self.enum(rng.choice([1, 3, 4]), 7))
        if rng.random() < 0.5:
            settings.publishing.CopyFrom(
                Publishing(
                    topics=[self.resource(GOOD_TOPIC) for _ in range(rng.choice([0, 1, 3]))],
                    max_body_size=self.int32(4096),
                )
            )
        elif rng.random() < 0.8:
            settings.subscription.CopyFrom(
                Subscription(
                    group=self.resource(GOOD_GROUP),
                    subscriptions=[
                        SubscriptionEntry(topic=self.resource(GOOD_TOPIC), expression=self.filter())
                    ],
                    receive_batch_size=self.int32(32),
                    long_polling_timeout=self.duration(1000),
                )
            )
        if rng.random() < 0.3:
            settings.access_point.CopyFrom(self.endpoints())
        if rng.random() < 0.3:
            settings.request_timeout.CopyFrom(self.duration(3000))
        if rng.random() < 0.2:
            settings.user_agent.version = self.name("5.1.2")
            settings.user_agent.hostname = self.name("h")
        return settings

    # --- requests --------------------------------------------------------------------------

    def _requests(self) -> dict[str, Callable[[], Any]]:
        rng = self.rng
        return {
            "QueryRoute": lambda: pb.QueryRouteRequest(
                topic=self.resource(GOOD_TOPIC), endpoints=self.endpoints()
            ),
            "Heartbeat": lambda: pb.HeartbeatRequest(
                group=self.resource(GOOD_GROUP), client_type=self.enum(rng.choice([1, 3, 4]), 7)
            ),
            "SendMessage": lambda: pb.SendMessageRequest(
                messages=[self.message() for _ in range(rng.choice([0, 1, 1, 1, 2, 40]))]
            ),
            "QueryAssignment": lambda: pb.QueryAssignmentRequest(
                topic=self.resource(GOOD_TOPIC),
                group=self.resource(GOOD_GROUP),
                endpoints=self.endpoints(),
            ),
            "ReceiveMessage": lambda: pb.ReceiveMessageRequest(
                group=self.resource(GOOD_GROUP),
                message_queue=self.queue(),
                filter_expression=self.filter(),
                batch_size=self.int32(8),
                invisible_duration=self.duration(20_000),
                auto_renew=rng.random() < 0.2,
                long_polling_timeout=self.duration(rng.choice([0, 100])),
                attempt_id=self.name("attempt"),
            ),
            "AckMessage": lambda: pb.AckMessageRequest(
                group=self.resource(GOOD_GROUP),
                topic=self.resource(GOOD_TOPIC),
                entries=[
                    pb.AckMessageEntry(message_id=self.name("m"), receipt_handle=self.handle())
                    for _ in range(rng.choice([0, 1, 1, 3, 300]))
                ],
            ),
            "ForwardMessageToDeadLetterQueue": lambda: pb.ForwardMessageToDeadLetterQueueRequest(
                group=self.resource(GOOD_GROUP),
                topic=self.resource(GOOD_TOPIC),
                receipt_handle=self.handle(),
                message_id=self.name("m"),
                delivery_attempt=self.int32(1),
                max_delivery_attempts=self.int32(16),
            ),
            "PullMessage": lambda: pb.PullMessageRequest(
                group=self.resource(GOOD_GROUP),
                message_queue=self.queue(),
                offset=self.int64(0),
                batch_size=self.int32(8),
            ),
            "UpdateOffset": lambda: pb.UpdateOffsetRequest(
                group=self.resource(GOOD_GROUP), message_queue=self.queue(), offset=self.int64(0)
            ),
            "GetOffset": lambda: pb.GetOffsetRequest(
                group=self.resource(GOOD_GROUP), message_queue=self.queue()
            ),
            "QueryOffset": lambda: pb.QueryOffsetRequest(
                message_queue=self.queue(), query_offset_policy=self.enum(0, 3)
            ),
            "EndTransaction": lambda: pb.EndTransactionRequest(
                topic=self.resource(GOOD_TOPIC),
                message_id=self.name("m"),
                transaction_id=rng.choice(
                    ["7F00000100002A9F0000000000000000", self.text(), "", "zz" * 16]
                ),
                resolution=self.enum(1, 3),
                source=self.enum(1, 3),
                trace_context=self.name(""),
            ),
            "NotifyClientTermination": lambda: pb.NotifyClientTerminationRequest(
                group=self.resource(GOOD_GROUP)
            ),
            "ChangeInvisibleDuration": lambda: pb.ChangeInvisibleDurationRequest(
                group=self.resource(GOOD_GROUP),
                topic=self.resource(GOOD_TOPIC),
                receipt_handle=self.handle(),
                invisible_duration=self.duration(20_000),
                message_id=self.name("m"),
            ),
            "RecallMessage": lambda: pb.RecallMessageRequest(
                topic=self.resource(GOOD_TOPIC), recall_handle=self.recall_handle()
            ),
            "SyncLiteSubscription": lambda: pb.SyncLiteSubscriptionRequest(
                topic=self.resource(GOOD_TOPIC), group=self.resource(GOOD_GROUP)
            ),
        }

    def telemetry_command(self) -> pb.TelemetryCommand:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return pb.TelemetryCommand(settings=self.settings())
        self._note("telemetry command")
        if roll < 0.7:
            return pb.TelemetryCommand(thread_stack_trace=pb.ThreadStackTrace(nonce=self.name("n")))
        if roll < 0.8:
            return pb.TelemetryCommand(
                recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                    message=self.message(), transaction_id=self.name("t")
                )
            )
        if roll < 0.9:
            return pb.TelemetryCommand()  # no command at all
        return pb.TelemetryCommand(
            verify_message_command=pb.VerifyMessageCommand(nonce=self.name("n"))
        )

    def raw(self, data: bytes) -> bytes:
        """`data` damaged at the byte level."""
        rng = self.rng
        kind = rng.randrange(8)
        self._note(f"raw {kind}")
        if kind == 0 and data:
            return data[: rng.randrange(len(data))]
        if kind == 1 and data:
            damaged = bytearray(data)
            for _ in range(rng.choice([1, 2, 8])):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            return bytes(damaged)
        if kind == 2:
            return rng.randbytes(rng.choice([1, 7, 100, 5000]))
        if kind == 3:
            return data + b"\x0a" + _varint(2**31)  # a length past the end
        if kind == 4:
            return b"\x0a\x05" + data  # field 1 claims 5 bytes of what follows
        if kind == 5:
            return b"\x08" + _varint(2**64 - 1) + data  # a varint where a message belongs
        if kind == 6:
            return b"\x0a" + _varint(len(n := _nested(rng.choice([99, 101, 3000])))) + n
        return data + b"\xfa\xff\xff\xff\x0f\x00"  # an unknown field of the largest number

    def next(self) -> GrpcStep:
        rng = self.rng
        self.notes = []
        method = rng.choice([*UNARY_RPCS, *STREAM_RPCS, "Telemetry", "Telemetry"])
        metadata = self.client_metadata()
        if method == "Telemetry":
            commands = [self.telemetry_command() for _ in range(rng.choice([1, 2, 3]))]
            payloads = [c.SerializeToString() for c in commands]
            if rng.random() < 0.15:
                at = rng.randrange(len(payloads))
                payloads[at] = self.raw(payloads[at])
        else:
            payloads = [self._requests()[method]().SerializeToString()]
        if any(BAD_UTF8_MARK.encode() in p for p in payloads):
            self._note("bad utf-8")
            payloads = [_bad_utf8(p) for p in payloads]
        if method != "Telemetry" and rng.random() < 0.12:
            payloads = [self.raw(payloads[0])]
        note = ", ".join(sorted(set(self.notes)))
        return GrpcStep(method, tuple(payloads), metadata, note)
