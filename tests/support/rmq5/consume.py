"""`python consume.py ENDPOINT JSON`: the official 5.x SimpleConsumer or PushConsumer, driven
line by line. Runs in .venv-rmq5 (imports only the official client).

JSON: {"mode": "simple" | "push", "topic": T, "group": G, "tag": expression (default "*"),
"await_seconds": long polling of a receive (simple; default 5), "access_key" / "secret_key"
(Credentials), "tls": true (the client's TLS option)}. A consumer that does not start prints
{"error": "startup: ..."} and ends.

simple: one command per stdin line, one JSON answer per stdout line:
- {"op": "receive", "max": n, "invisible": seconds} -> {"messages": [message...]} or
  {"error": "<exception class>: <text>"}; message = {"id", "body", "tag", "attempt", "topic",
  "handle", "properties"}; the consumer keeps the last message received under each id;
- {"op": "ack", "id": id} -> {"acked": id} or {"error": ...};
- {"op": "change", "id": id, "invisible": seconds} -> {"changed": id, "handle": new} or
  {"error": ...} (the client keeps acking with the new handle);
- {"op": "ack_with", "id": id, "handle": h}: ack a message with an older handle h;
- {"op": "quit"}.
push: prints {"consumed": message} per message its listener gets (it answers SUCCESS, or
FAILURE for bodies starting with "fail" the first time it sees them: a FIFO consumer retries
in the client without a new attempt number), until stdin closes. With "slow_seconds": s, the
listener takes s seconds over bodies starting with "slow", then prints {"done": id}.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (  # type: ignore[import-not-found]
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)

PRINT_LOCK = threading.Lock()


def emit(answer: dict[str, Any]) -> None:
    with PRINT_LOCK:
        print(json.dumps(answer), flush=True)


def describe(message: Any) -> dict[str, Any]:
    return {
        "id": message.message_id,
        "body": message.body.decode(),
        "tag": message.tag,
        "attempt": message.delivery_attempt,
        "topic": message.topic,
        "handle": message.receipt_handle,
        "properties": dict(message.properties),
    }


class Listener(MessageListener):  # type: ignore[misc]
    def __init__(self, slow_seconds: float = 0.0) -> None:
        self.seen: set[str] = set()
        self.slow_seconds = slow_seconds

    def consume(self, message: Any) -> Any:
        emit({"consumed": describe(message)})
        first = message.message_id not in self.seen
        self.seen.add(message.message_id)
        if self.slow_seconds and message.body.startswith(b"slow"):
            time.sleep(self.slow_seconds)  # a listener slower than the invisible duration
            emit({"done": message.message_id})
        if message.body.startswith(b"fail") and first:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS


def error(exc: Exception) -> dict[str, Any]:
    return {"error": f"{type(exc).__name__}: {exc}"}


def simple(config: Any, request: dict[str, Any]) -> None:
    subscription = {request["topic"]: FilterExpression(request.get("tag", "*"))}
    consumer = SimpleConsumer(
        config,
        request["group"],
        subscription,
        await_duration=request.get("await_seconds", 5),
        tls_enable=request.get("tls", False),
    )
    try:
        consumer.startup()
    except Exception as exc:
        emit({"error": f"startup: {type(exc).__name__}: {exc}"})
        return
    emit({"started": True})
    kept: dict[str, Any] = {}
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "quit":
                break
            try:
                if op == "receive":
                    got = consumer.receive(command["max"], command["invisible"])
                    for message in got:
                        kept[message.message_id] = message
                    emit({"messages": [describe(m) for m in got]})
                elif op == "ack":
                    consumer.ack(kept[command["id"]])
                    emit({"acked": command["id"]})
                elif op == "ack_with":
                    message = kept[command["id"]]
                    message.receipt_handle = command["handle"]
                    consumer.ack(message)
                    emit({"acked": command["id"]})
                elif op == "change":
                    message = kept[command["id"]]
                    consumer.change_invisible_duration(message, command["invisible"])
                    emit({"changed": command["id"], "handle": message.receipt_handle})
            except Exception as exc:
                emit(error(exc))
    finally:
        consumer.shutdown()


def push(config: Any, request: dict[str, Any]) -> None:
    subscription = {request["topic"]: FilterExpression(request.get("tag", "*"))}
    listener = Listener(float(request.get("slow_seconds", 0)))
    consumer = PushConsumer(
        config, request["group"], listener, subscription, tls_enable=request.get("tls", False)
    )
    consumer.startup()
    emit({"started": True})
    try:
        sys.stdin.read()  # until the test closes it
    finally:
        consumer.shutdown()


def main() -> None:
    endpoint, request = sys.argv[1], json.loads(sys.argv[2])
    credentials = Credentials(request.get("access_key", ""), request.get("secret_key", ""))
    config = ClientConfiguration(endpoint, credentials, request_timeout=10)
    (simple if request["mode"] == "simple" else push)(config, request)


if __name__ == "__main__":
    main()
