"""Request bodies for the request fuzzer: well-formed JSON (or properties, or batch) with hostile
names and numbers inside, and now and then one of the wrong shape or no JSON at all.

`hostility` is the chance that each name or number is hostile rather than the good one given.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.request_catalog import Body
from tests.fuzz.request_values import Values
from tidemq.store.batch_body import encode_batch_body

__all__ = ["BodyMaker", "message_properties"]

_RUNTIME_KEYS = (
    "slaveReadEnable",
    "longPollingEnable",
    "shortPollingTimeMills",
    "channelExpiredTimeout",
    "flushConsumerOffsetInterval",
)
_PROPERTY_KEYS = (
    "KEYS",
    "TAGS",
    "DELAY",
    "WAIT",
    "UNIQ_KEY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MAX_OFFSET",
    "MIN_OFFSET",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "ORIGIN_MESSAGE_ID",
    "__STARTDELIVERTIME",
    "INSTANCE_ID",
)


def message_properties(values: Values, good_topics: list[str]) -> str:
    """A message's properties string (`key\\x01value\\x02`...) with hostile keys and values."""
    rng = values.rng
    parts = []
    for _ in range(rng.randint(0, 4)):
        key = rng.choice(_PROPERTY_KEYS) if rng.random() < 0.8 else values.text([])
        value = values.integer() if rng.random() < 0.4 else values.text(good_topics)
        parts.append(f"{key}\x01{value}\x02")
    return "".join(parts)


class BodyMaker:
    def __init__(self, values: Values) -> None:
        self.values = values
        self.rng = values.rng

    def _name(self, good: list[str], hostility: float) -> Any:
        if good and self.rng.random() >= hostility:
            return self.rng.choice(good)
        if self.rng.random() < 0.05 and self.values.names:
            return self.values.wrong_type()  # null or a list: an empty or bracketed name
        return self.values.text(good)

    def _number(self, good: int, hostility: float) -> Any:
        return good if self.rng.random() >= hostility else self.values.json_number()

    def _json(self, obj: Any) -> bytes:
        roll = self.rng.random()
        if roll < 0.03:
            return self.rng.choice([b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"a":'])
        if roll < 0.06:
            return json.dumps([obj]).encode()
        return json.dumps(obj, ensure_ascii=self.rng.random() < 0.5).encode(
            "utf-8", "surrogatepass"
        )

    def make(
        self, kind: Body, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        """A body of `kind`; `tag` is a message body's identifying prefix."""
        maker = getattr(self, f"_{kind.value}")
        body: bytes = maker(topics, groups, hostility, tag)
        return body

    def _none(self, topics: list[str], groups: list[str], hostility: float, tag: bytes) -> bytes:
        return b"" if self.rng.random() >= hostility * 0.2 else b"unexpected body \x00\xff"

    def _message(self, topics: list[str], groups: list[str], hostility: float, tag: bytes) -> bytes:
        size = self.rng.choice([0, 1, 10, 100, 1000]) if self.rng.random() < hostility else 64
        return tag + b"." * size

    def _batch(self, topics: list[str], groups: list[str], hostility: float, tag: bytes) -> bytes:
        rng = self.rng
        if rng.random() < hostility * 0.2:
            return rng.randbytes(rng.randint(0, 64))
        messages = []
        for i in range(rng.randint(0, 4)):
            props = "" if rng.random() >= hostility else message_properties(self.values, topics)
            props = props[:8000]  # the batch format's properties length is 16 bits
            messages.append((0, tag + b"#%d" % i, props))
        return encode_batch_body(messages)

    def _subscription(self, topics: list[str], hostility: float) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "topic": self._name(topics, hostility),
            "subString": self._name(["*"], hostility),
            "tagsSet": [],
            "codeSet": [],
            "subVersion": self._number(0, hostility),
            "expressionType": self._name(["TAG"], hostility),
        }

    def _heartbeat(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        rng = self.rng
        consumers = [
            {
                "groupName": self._name(groups, hostility),
                "consumeType": self._name(["CONSUME_PASSIVELY"], hostility),
                "messageModel": self._name(["CLUSTERING"], hostility),
                "consumeFromWhere": self._name(["CONSUME_FROM_LAST_OFFSET"], hostility),
                "subscriptionDataSet": [
                    self._subscription(topics, hostility) for _ in range(rng.randint(0, 2))
                ],
                "unitMode": False,
            }
            for _ in range(rng.randint(0, 2))
        ]
        producers = [{"groupName": self._name(groups, hostility)} for _ in range(rng.randint(0, 2))]
        return self._json(
            {
                "clientID": self._name(["fz-client"], hostility),
                "producerDataSet": producers,
                "consumerDataSet": consumers,
            }
        )

    def _check_client(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        return self._json(
            {
                "clientId": self._name(["fz-client"], hostility),
                "group": self._name(groups, hostility),
                "subscriptionData": self._subscription(topics, hostility),
            }
        )

    def _lock_batch(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        queues = [
            {
                "topic": self._name(topics, hostility),
                "brokerName": self._name(["broker-a"], hostility),
                "queueId": self._number(self.rng.randint(0, 7), hostility),
            }
            for _ in range(self.rng.randint(0, 3))
        ]
        return self._json(
            {
                "consumerGroup": self._name(groups, hostility),
                "clientId": self._name(["fz-client"], hostility),
                "mqSet": queues,
            }
        )

    def _group_config(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        return self._json(
            {
                "groupName": self._name(groups, hostility),
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "retryQueueNums": self._number(1, hostility),
                "retryMaxTimes": self._number(16, hostility),
                "brokerId": self._number(0, hostility),
                "whichBrokerWhenConsumeSlowly": self._number(1, hostility),
                "notifyConsumerIdsChangedEnable": True,
            }
        )

    def _group_config_list(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        entries = [
            {
                "groupName": self._name(groups, hostility),
                "retryQueueNums": self._number(1, hostility),
                "retryMaxTimes": self._number(16, hostility),
            }
            for _ in range(self.rng.randint(0, 3))
        ]
        return self._json({"groupConfigList": entries})

    def _topic_config_list(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        entries = [
            {
                "topicName": self._name(topics, hostility),
                "readQueueNums": self._number(4, hostility),
                "writeQueueNums": self._number(4, hostility),
                "perm": self._number(6, hostility),
                "topicSysFlag": self._number(0, hostility),
                "order": False,
            }
            for _ in range(self.rng.randint(0, 3))
        ]
        return self._json({"topicConfigList": entries})

    def _batch_ack(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        acks = [
            {
                "c": self._name(groups, hostility),
                "t": self._name(topics, hostility),
                "r": self.rng.choice(["0", "1"]),
                "so": self._number(self.rng.randint(0, 10), hostility),
                "q": self._number(self.rng.randint(0, 7), hostility),
                "rq": self._number(self.rng.randint(0, 7), hostility),
                "pt": self._number(1_700_000_000_000, hostility),
                "it": self._number(30_000, hostility),
                "b": self.rng.choice(["AQ==", "Aw==", "", "!!", "/////w=="]),
            }
            for _ in range(self.rng.randint(0, 3))
        ]
        return self._json({"brokerName": self._name(["broker-a"], hostility), "acks": acks})

    def _properties(self, keys: tuple[str, ...], hostility: float) -> bytes:
        rng = self.rng
        lines = []
        for _ in range(rng.randint(0, 3)):
            key = rng.choice(keys) if rng.random() >= hostility * 0.5 else self.values.text([])
            value = self.values.integer() if rng.random() < 0.5 else self.values.text([])
            lines.append(f"{key}={value}")
        return "\n".join(lines).encode("utf-8", "surrogatepass")

    def _broker_properties(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        # brokerPermission is left out: a broker an admin made read-only is not a bug
        return self._properties(
            (*_RUNTIME_KEYS, "storePathRootDir", "storePathCommitLog", "brokerName"), hostility
        )

    def _namesrv_properties(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        return self._properties(
            (
                "orderMessageEnable",
                "scanNotActiveBrokerInterval",
                "brokerChannelExpiredTime",
                "kvConfigPath",
                "configStorePath",
            ),
            hostility,
        )

    def _register_broker(
        self, topics: list[str], groups: list[str], hostility: float, tag: bytes
    ) -> bytes:
        table = {}
        for _ in range(self.rng.randint(0, 3)):
            name = self._name(topics, hostility)
            table[name if isinstance(name, str) else json.dumps(name)] = {
                "topicName": name,
                "readQueueNums": self._number(4, hostility),
                "writeQueueNums": self._number(4, hostility),
                "perm": self._number(6, hostility),
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            }
        return self._json(
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": table,
                    "dataVersion": {
                        "timestamp": self._number(1, hostility),
                        "counter": self._number(1, hostility),
                    },
                },
                "filterServerList": [],
            }
        )
