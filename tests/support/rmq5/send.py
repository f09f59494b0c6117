"""`python send.py ENDPOINT JSON`: send messages with the official 5.x Producer, print receipts.

JSON: {"topic": T, "messages": [{"body": text, "tag": t, "keys": [..], "properties": {..},
"message_group": g, "delivery_timestamp": ms, "transaction": "commit" | "rollback"}]}: a
transaction is begun, the message sent in it, then committed or rolled back. Prints one JSON
line per message:
{"message_id": .., "offset": ..} or {"error": "<exception class>: <text>"}. Runs in .venv-rmq5
(not tidemq's environment: imports only the official client).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rocketmq import (  # type: ignore[import-not-found]
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


class Unknown(TransactionChecker):  # type: ignore[misc]
    """The broker's check of an open transaction: left open (these tests end their own)."""

    def check(self, message: Any) -> Any:
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED


def build(topic: str, spec: dict[str, Any]) -> Any:
    message = Message()
    message.topic = topic
    message.body = spec["body"].encode()
    if "tag" in spec:
        message.tag = spec["tag"]
    for key in spec.get("keys", []):
        message.keys = key
    for key, value in spec.get("properties", {}).items():
        message.add_property(key, value)
    if "message_group" in spec:
        message.message_group = spec["message_group"]
    if "delivery_timestamp" in spec:
        message.delivery_timestamp = spec["delivery_timestamp"]
    return message


def main() -> None:
    endpoint, request = sys.argv[1], json.loads(sys.argv[2])
    topic = request["topic"]
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,), checker=Unknown())
    producer.startup()
    try:
        for spec in request["messages"]:
            try:
                end = spec.get("transaction")
                transaction = producer.begin_transaction() if end else None
                receipt = producer.send(build(topic, spec), transaction)
                if transaction is not None:
                    (transaction.commit if end == "commit" else transaction.rollback)()
                print(json.dumps({"message_id": receipt.message_id, "offset": receipt.offset}))
            except Exception as exc:
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            sys.stdout.flush()
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
