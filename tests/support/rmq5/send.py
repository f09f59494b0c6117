"""`python send.py ENDPOINT JSON`: send messages with the official 5.x Producer, print receipts.

JSON: {"topic": T, "messages": [{"body": text, "tag": t, "keys": [..], "properties": {..},
"message_group": g, "delivery_timestamp": ms, "transaction": "commit" | "rollback" | "leave"}],
"check": "commit" | "rollback" | "unknown", "wait_check_seconds": s}: with "transaction" the
message is sent in a transaction, then committed, rolled back, or left for the broker's check,
which the checker answers with "check"; the script waits up to wait_check_seconds for that
check. Prints one JSON line per message (and {"checked": id, "topic": t} when checked):
{"message_id": .., "offset": .., "recall_handle": h or null} or {"error": "<exception class>:
<text>"} (a producer that does not start: its error once per message). A message with
"recall": true is recalled right after its send (`Producer.recall_message` with the receipt's
handle): its line adds {"recalled": id} or {"recall_error": text}. "recall_handles": [h, ..]
recalls those after the sends, one line each: {"recalled": id} or {"recall_error": text}.
Optional: "access_key" / "secret_key" (the client's Credentials: it signs every call), "tls":
true (the client's TLS option; it trusts the CAs of GRPC_DEFAULT_SSL_ROOTS_FILE_PATH). Runs in
.venv-rmq5 (not tidemq's environment: imports only the official client).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (  # type: ignore[import-not-found]
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

RESOLUTIONS = {
    "commit": TransactionResolution.COMMIT,
    "rollback": TransactionResolution.ROLLBACK,
    "unknown": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
}
# After the checker answers, the client sends EndTransaction on its own; the script stays up
# this long for it (the test itself waits on what the broker stores).
END_GRACE_SECONDS = 2.0


class Checker(TransactionChecker):  # type: ignore[misc]
    """The broker's check of an open transaction (RecoverOrphanedTransactionCommand)."""

    def __init__(self, resolution: str) -> None:
        self.resolution = RESOLUTIONS[resolution]
        self.checked = threading.Event()

    def check(self, message: Any) -> Any:
        print(json.dumps({"checked": message.message_id, "topic": message.topic}), flush=True)
        self.checked.set()
        return self.resolution


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


def recall(producer: Any, topic: str, handle: str) -> dict[str, str]:
    try:
        return {"recalled": producer.recall_message(topic, handle)}
    except Exception as exc:
        return {"recall_error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    endpoint, request = sys.argv[1], json.loads(sys.argv[2])
    topic = request["topic"]
    credentials = Credentials(request.get("access_key", ""), request.get("secret_key", ""))
    config = ClientConfiguration(endpoint, credentials, request_timeout=5)
    checker = Checker(request.get("check", "unknown"))
    producer = Producer(config, (topic,), checker=checker, tls_enable=request.get("tls", False))
    try:
        producer.startup()
    except Exception as exc:
        for _spec in request["messages"]:
            print(json.dumps({"error": f"startup: {type(exc).__name__}: {exc}"}), flush=True)
        return
    try:
        for spec in request["messages"]:
            try:
                end = spec.get("transaction")
                transaction = producer.begin_transaction() if end else None
                receipt = producer.send(build(topic, spec), transaction)
                if transaction is not None and end != "leave":
                    (transaction.commit if end == "commit" else transaction.rollback)()
                line = {
                    "message_id": receipt.message_id,
                    "offset": receipt.offset,
                    "recall_handle": receipt.recall_handle,
                }
                if spec.get("recall"):
                    line.update(recall(producer, topic, receipt.recall_handle or ""))
                print(json.dumps(line))
            except Exception as exc:
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            sys.stdout.flush()
        for handle in request.get("recall_handles", []):
            print(json.dumps(recall(producer, topic, handle)), flush=True)
        wait = float(request.get("wait_check_seconds", 0))
        if wait and checker.checked.wait(wait):
            time.sleep(END_GRACE_SECONDS)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
