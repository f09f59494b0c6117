"""Recall handles (RocketMQ 5.3's RecallMessageHandle.HandleV1), sans-IO.

SendMessage answers a timer message with a recall handle; RecallMessage gives it back to cancel
the delivery (broker/recall.py). The handle is URL-safe base64 (padded, RFC 4648 section 5) of
five fields joined by one space:

    v1 <topic> <brokerName> <deliverMs> <messageId>

- topic: the message's own topic (namespace-qualified as stored);
- brokerName: the broker that holds the timer;
- deliverMs: the timer's delivery time, epoch milliseconds. tidemq's TIMER_OUT_MS is the exact
  millisecond; RocketMQ writes its slot-rounded TIMER_OUT_MS + 1 here. The handle is opaque to
  clients, so only a broker reads this field;
- messageId: the message's UNIQ_KEY (the 5.x message id).

`RecallHandle.decode` refuses anything else with `InvalidRecallHandle` naming what is wrong
(RocketMQ reads the first five of more fields; tidemq wants exactly five, since no field may
hold a space).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Final

from tidemq.common.errors import DecodeError

VERSION_1: Final = "v1"
SEPARATOR: Final = " "
MAX_LENGTH: Final = 2048  # base64 of a 255-character topic and broker name, an id, a time


class InvalidRecallHandle(DecodeError, ValueError):
    """A recall handle that is not one this protocol writes."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str

    def encode(self) -> str:
        raw = SEPARATOR.join(
            (VERSION_1, self.topic, self.broker_name, str(self.deliver_ms), self.message_id)
        )
        return base64.urlsafe_b64encode(raw.encode()).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> RecallHandle:
        if not text:
            raise InvalidRecallHandle("the recall handle is empty")
        if len(text) > MAX_LENGTH:
            raise InvalidRecallHandle(f"the recall handle is longer than {MAX_LENGTH} characters")
        padded = text + "=" * (-len(text) % 4)  # Java's URL decoder takes it unpadded too
        try:
            raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
        except (binascii.Error, ValueError):
            raise InvalidRecallHandle(
                "the recall handle is not URL-safe base64 of UTF-8 text"
            ) from None
        parts = raw.split(SEPARATOR)
        if parts[0] != VERSION_1:
            raise InvalidRecallHandle(f"recall handle version {parts[0][:16]!r} is not v1")
        if len(parts) != 5:
            raise InvalidRecallHandle(f"the recall handle has {len(parts)} fields, not 5")
        _version, topic, broker_name, deliver, message_id = parts
        for name, value in (("topic", topic), ("broker name", broker_name), ("id", message_id)):
            if not value:
                raise InvalidRecallHandle(f"the recall handle's {name} is empty")
        if not deliver.isascii() or not deliver.isdigit() or len(deliver) > 18:
            raise InvalidRecallHandle(f"the recall handle's time {deliver[:24]!r} is not a time")
        return cls(topic, broker_name, int(deliver), message_id)
