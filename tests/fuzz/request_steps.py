"""The request fuzzer's inputs: `Step`s (one request each, recorded as sent, so a saved run
replays byte for byte) and the seeded `Scenarios` that make them.

A scenario is a short sequence of operations (create topic, send, pull, consumer send-back,
update/query offset, delete topic, reset offset, heartbeat, lock, subscription group config)
against the run's good topics and groups, each field good or hostile at the scenario's
`hostility`; or a single request of any served code with hostile fields. Scenarios are Python
generators that receive each step's answer: a send-back uses the offset the send before it got.
Good sends (`Step.track`) with a SEND_OK answer are what the run later pulls back.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Final

from tests.fuzz.request_bodies import BodyMaker, message_properties
from tests.fuzz.request_catalog import CATALOG, Body, CodeSpec, Field, Kind, Server
from tests.fuzz.request_values import Values
from tests.fuzz.request_wire import Answer
from tidemq.client.remoting.codes import RequestCode as C
from tidemq.client.remoting.codes import ResponseCode, SerializeType
from tidemq.store.record import decode_message_id

__all__ = ["GOOD_GROUPS", "GOOD_TOPICS", "Scenario", "Scenarios", "Step"]

GOOD_TOPICS: Final = ["fz-t0", "fz-t1", "fz-t2"]
GOOD_GROUPS: Final = ["fz-g0", "fz-g1"]
QUEUES: Final = 4
_SERIALISATIONS: Final = (SerializeType.JSON, SerializeType.MSGPACK, SerializeType.ROCKETMQ)


@dataclass
class Step:
    """One request: to `target` ("namesrv", "master" or "slave"), `ext` as sent (values are
    strings, or any JSON value when `typed`), the body's bytes."""

    target: str
    code: int
    serialize: int
    ext: dict[str, Any]
    body: bytes = b""
    typed: bool = False
    track: bool = False  # a good send: its SEND_OK message must be pullable at the end
    op: str = "single"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": self.target,
            "code": self.code,
            "serialize": self.serialize,
            "ext": self.ext,
            "op": self.op,
        }
        try:
            out["body_text"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_b64"] = base64.b64encode(self.body).decode()
        if self.typed:
            out["typed"] = True
        if self.track:
            out["track"] = True
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Step:
        if "body_b64" in obj:
            body = base64.b64decode(obj["body_b64"])
        else:
            body = str(obj.get("body_text", "")).encode("utf-8", "surrogatepass")
        return cls(
            obj["target"],
            int(obj["code"]),
            int(obj["serialize"]),
            dict(obj["ext"]),
            body,
            bool(obj.get("typed", False)),
            bool(obj.get("track", False)),
            str(obj.get("op", "single")),
        )


# A scenario yields steps and is sent each one's answer.
Scenario = Generator[Step, Answer, None]


@dataclass
class _Memory:
    """What the run learnt from answers: physical offsets of messages it stored."""

    offsets: list[int] = field(default_factory=list)


class Scenarios:
    """Seeded scenario maker; `tag` prefixes every message body of the run."""

    OPS: Final = (
        "create_topic",
        "send",
        "pull",
        "send_back",
        "update_offset",
        "query_offset",
        "delete_topic",
        "reset_offset",
        "heartbeat",
        "lock",
        "group_config",
        "single",
    )

    def __init__(
        self, rng: random.Random, victims: list[str], tag: str, *, names: bool = True
    ) -> None:
        """`names`=False: no hostile names (request_values.py), the other values stay."""
        self.rng = rng
        self.values = Values(rng, victims, names=names)
        self.bodies = BodyMaker(self.values)
        self.tag = tag
        self.memory = _Memory()
        self.sent = 0
        self.specs = list(CATALOG.values())
        # Every code once first, in a seeded order: a short run covers the whole catalog,
        # whatever the machine's speed.
        self._unvisited = rng.sample(self.specs, len(self.specs))

    @property
    def first_pass(self) -> bool:
        """Whether some code of the catalog has not been sent yet."""
        return bool(self._unvisited)

    def next(self) -> Scenario:
        rng = self.rng
        if self._unvisited:
            return self._single(self._unvisited.pop())
        if rng.random() < 0.45:
            return self._single(rng.choice(self.specs))
        hostility = rng.choice([0.0, 0.1, 0.3, 0.6])
        ops = rng.choices(self.OPS, k=rng.randint(2, 6))
        return self._sequence(ops, hostility)

    # --- fields -------------------------------------------------------------------------

    def _value(self, f: Field, good: dict[str, str], hostility: float) -> Any:
        rng, values = self.rng, self.values
        if f.key in good and rng.random() >= hostility:
            return good[f.key]
        if f.kind is Kind.INT:
            return values.integer()
        if f.kind is Kind.BOOL:
            return values.boolean()
        return values.text(GOOD_TOPICS + GOOD_GROUPS)

    def step(
        self,
        spec: CodeSpec,
        good: dict[str, str],
        hostility: float,
        *,
        target: str | None = None,
        body: bytes | None = None,
        op: str = "single",
    ) -> Step:
        rng = self.rng
        typed = hostility > 0 and rng.random() < 0.07
        serialize = rng.choice(_SERIALISATIONS[:2] if typed else _SERIALISATIONS)
        ext: dict[str, Any] = {}
        for f in spec.fields:
            if hostility > 0 and rng.random() < hostility * 0.1:
                continue  # absent
            if f.key not in good and not f.required and rng.random() >= hostility:
                continue  # an optional field left out, as a client would
            value = self._value(f, good, hostility)
            if typed and rng.random() < 0.5:
                value = self.values.wrong_type()
            ext[f.key] = value
        if hostility > 0 and rng.random() < hostility * 0.05:
            ext[self.values.text([])] = self.values.text([])  # a key no header has
        if body is None:
            self.sent += 1
            tag = f"{self.tag}|{self.sent}|".encode()
            body = self.bodies.make(spec.body, GOOD_TOPICS, GOOD_GROUPS, hostility, tag)
        if target is None:
            target = "namesrv" if spec.server is Server.NAMESRV else "master"
            if spec.server is Server.BROKER and rng.random() < 0.25:
                target = "slave"
        return Step(target, spec.code, int(serialize), ext, body, typed, op=op)

    # --- scenarios ------------------------------------------------------------------------

    def _single(self, spec: CodeSpec) -> Scenario:
        step = self.step(spec, self._good_fields(spec), self.rng.choice([0.3, 0.6, 1.0]))
        if spec.code == C.DELETE_TOPIC_IN_BROKER and step.ext.get("topic") in GOOD_TOPICS:
            # deleting a good topic is an admin's right and drops the messages the run checks
            step.ext["topic"] = self.values.path()
        yield step

    def _good_fields(self, spec: CodeSpec) -> dict[str, str]:
        """Plausible values of a code's fields: the run's names, small numbers."""
        rng = self.rng
        topic, group = rng.choice(GOOD_TOPICS), rng.choice(GOOD_GROUPS)
        good: dict[str, str] = {}
        for f in spec.fields:
            key = f.key.lower()
            if f.kind is Kind.BOOL:
                good[f.key] = "false"
            elif f.kind is Kind.INT:
                good[f.key] = str(rng.randint(0, QUEUES - 1)) if "queue" in key else "0"
            elif "topic" in key or f.key == "b":
                good[f.key] = topic
            elif "group" in key or f.key == "a":
                good[f.key] = group
            else:
                good[f.key] = rng.choice(["fz-client", "broker-a", "DefaultCluster", "k"])
        return good

    def _sequence(self, ops: list[str], hostility: float) -> Scenario:
        for op in ops:
            if op == "single":
                yield from self._single(self.rng.choice(self.specs))
                continue
            yield from getattr(self, f"_op_{op}")(hostility)

    def _broker_step(self, code: int, good: dict[str, str], hostility: float, op: str) -> Step:
        spec = CATALOG[(Server.BROKER, code)]
        return self.step(spec, good, hostility, target="master", op=op)

    def _op_create_topic(self, hostility: float) -> Scenario:
        good = {
            "topic": self.rng.choice(GOOD_TOPICS),
            "defaultTopic": "TBW102",
            "readQueueNums": str(QUEUES),
            "writeQueueNums": str(QUEUES),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        yield self._broker_step(C.UPDATE_AND_CREATE_TOPIC, good, hostility, "create_topic")

    def _op_send(self, hostility: float) -> Scenario:
        rng = self.rng
        topic = rng.choice(GOOD_TOPICS)
        good = {
            "a": rng.choice(GOOD_GROUPS),
            "b": topic,
            "c": "TBW102",
            "d": str(QUEUES),
            "e": str(rng.randint(0, QUEUES - 1)),
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": f"KEYS\x01k{self.sent}\x02TAGS\x01A\x02WAIT\x01true\x02",
        }
        step = self._broker_step(C.SEND_MESSAGE_V2, good, hostility, "send")
        if rng.random() < hostility:
            step.ext["i"] = message_properties(self.values, GOOD_TOPICS)
        step.track = step.ext == good  # only an all-good send is a tracked message
        answer = yield step
        self._remember(answer)

    def _remember(self, answer: Answer) -> None:
        response = answer.response
        if response is None or response.code != ResponseCode.SUCCESS:
            return
        try:
            _, offset = decode_message_id(response.ext_fields.get("msgId", ""))
        except ValueError:
            return
        self.memory.offsets.append(offset)

    def _op_pull(self, hostility: float) -> Scenario:
        rng = self.rng
        good = {
            "consumerGroup": rng.choice(GOOD_GROUPS),
            "topic": rng.choice(GOOD_TOPICS),
            "queueId": str(rng.randint(0, QUEUES - 1)),
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subVersion": "0",
            "subscription": "*",
            "expressionType": "TAG",
        }
        yield self._broker_step(C.PULL_MESSAGE, good, hostility, "pull")

    def _op_send_back(self, hostility: float) -> Scenario:
        rng = self.rng
        if not self.memory.offsets:
            yield from self._op_send(0.0)
        if not self.memory.offsets:
            return
        good = {
            "offset": str(rng.choice(self.memory.offsets)),
            "group": rng.choice(GOOD_GROUPS),
            "delayLevel": str(rng.choice([-1, 0, 1, 3])),
            "originTopic": rng.choice(GOOD_TOPICS),
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        }
        yield self._broker_step(C.CONSUMER_SEND_MSG_BACK, good, hostility, "send_back")

    def _offset_fields(self) -> dict[str, str]:
        rng = self.rng
        return {
            "consumerGroup": rng.choice(GOOD_GROUPS),
            "topic": rng.choice(GOOD_TOPICS),
            "queueId": str(rng.randint(0, QUEUES - 1)),
            "commitOffset": str(rng.randint(0, 5)),
        }

    def _op_update_offset(self, hostility: float) -> Scenario:
        good = self._offset_fields()
        yield self._broker_step(C.UPDATE_CONSUMER_OFFSET, good, hostility, "update_offset")

    def _op_query_offset(self, hostility: float) -> Scenario:
        good = self._offset_fields()
        yield self._broker_step(C.QUERY_CONSUMER_OFFSET, good, hostility, "query_offset")

    def _op_delete_topic(self, hostility: float) -> Scenario:
        # Only ever hostile: deleting a good topic would drop the messages the run checks.
        values = self.values
        topic = values.text(GOOD_TOPICS + GOOD_GROUPS)
        if topic in GOOD_TOPICS:
            topic = values.path()
        spec = CATALOG[(Server.BROKER, C.DELETE_TOPIC_IN_BROKER)]
        yield Step(
            "master", spec.code, int(self.rng.choice(_SERIALISATIONS)), {"topic": topic},
            op="delete_topic",
        )  # fmt: skip

    def _op_reset_offset(self, hostility: float) -> Scenario:
        rng = self.rng
        good = {
            "topic": rng.choice(GOOD_TOPICS),
            "group": rng.choice(GOOD_GROUPS),
            "timestamp": rng.choice(["-1", "0", "1700000000000"]),
            "isForce": "true",
        }
        yield self._broker_step(C.INVOKE_BROKER_TO_RESET_OFFSET, good, hostility, "reset_offset")

    def _body_op(self, code: int, hostility: float, op: str) -> Scenario:
        spec = CATALOG[(Server.BROKER, code)]
        self.sent += 1
        body = self.bodies.make(
            spec.body, GOOD_TOPICS, GOOD_GROUPS, hostility, f"{self.tag}|{self.sent}|".encode()
        )
        yield self.step(spec, {}, hostility, target="master", body=body, op=op)

    def _op_heartbeat(self, hostility: float) -> Scenario:
        yield from self._body_op(C.HEART_BEAT, hostility, "heartbeat")

    def _op_lock(self, hostility: float) -> Scenario:
        code = self.rng.choice([C.LOCK_BATCH_MQ, C.UNLOCK_BATCH_MQ])
        yield from self._body_op(code, hostility, "lock")

    def _op_group_config(self, hostility: float) -> Scenario:
        yield from self._body_op(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, hostility, "group_config")


def body_kind(step: Step) -> Body:
    server = Server.NAMESRV if step.target == "namesrv" else Server.BROKER
    spec = CATALOG.get((server, step.code))
    return Body.NONE if spec is None else spec.body
