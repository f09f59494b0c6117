"""Drive the RocketMQ C++ client (PyPI `rocketmq==0.4.4`, librocketmq.so) for interop tests.

Run as a subprocess, one scenario step per process, so a crash of the native client never takes
the test runner down and every step starts from a fresh client:

    python tests/integration/cpp_peer.py '<json spec>'

Specs (`namesrv`, `group` and `topic` in every one; `credentials`, `[access_key, secret_key,
channel]`, in any: the client signs its requests with them, `set_session_credentials`):

- `{"op": "produce", "messages": [{"body": ..., "tags": ..., "keys": ..., "props": {...}}]}`:
  one `send_sync` per message, in order; prints `{"event": "sent", "index", "status",
  "msg_id", "offset"}` per message. With `"keep_going": true` a send that raises prints
  `{"event": "send_failed", "index", "error"}`, pauses `retry_pause` s (0.1) and goes on with
  the next message (a failover: the client keeps its route until its own refresh).
- `{"op": "batch", "messages": [...]}`: one `send_batch` of all of them; prints
  `{"event": "batch_sent", "status", "msg_id", "offset", "count"}`.
- `{"op": "consume", "expression": "*", "expect": n, "timeout": s, "linger": s}`: a clustering
  `PushConsumer`; prints `{"event": "started"}` once started, `{"event": "received", ...}` per
  message delivered, and after `expect` messages arrived (or `timeout` s passed) and `linger`
  more seconds it shuts down (which commits its offsets to the broker) and prints
  `{"event": "done", "received": n, "timed_out": bool}`.

- `{"op": "stream", "first": n, "run_file": path, "stop_file": path}`: a producer for the soak
  (tests/fault/soak.py): while `run_file` exists, sends message n, n+1, ... one at a time
  (`send_orderly` with no retry, message n to the route's queue n % its queue count, so the
  queue is known; body `m<n, 8 digits>|` and `c`s, 100-999 bytes); prints `{"event":
  "invoke", "number", "wall", "mono"}` before each send and `{"event": "sent", "number",
  "status", "offset", "queue", "wall", "mono"}` or `{"event": "send_failed", "number",
  "error", "wall", "mono"}` after it (time.time() and time.monotonic(): the history's
  clocks); `{"event": "idle"}` once `run_file` is gone and its last send answered; ends when
  `stop_file` exists.

Everything it prints is one JSON object per line on stdout. A failure prints
`{"event": "error", "error": ...}` and exits with status 1. The native client logs under
`$HOME/logs/rocketmq-cpp`: the tests point HOME at a temporary directory.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, Producer, PushConsumer, RecvMessage, hashing_queue_selector

_print_lock = threading.Lock()


def emit(**fields: Any) -> None:
    line = json.dumps(fields, sort_keys=True)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _text(value: bytes | str | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _message(topic: str, spec: dict[str, Any]) -> Message:
    msg = Message(topic)
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    for key, value in spec.get("props", {}).items():
        msg.set_property(key, value)
    msg.set_body(spec.get("body", ""))
    return msg


def _producer(spec: dict[str, Any]) -> Producer:
    producer = Producer(spec["group"], timeout=spec.get("send_timeout_ms", 5000))
    producer.set_namesrv_addr(spec["namesrv"])
    if spec.get("credentials"):
        producer.set_session_credentials(*spec["credentials"])
    producer.start()
    return producer


def produce(spec: dict[str, Any]) -> None:
    producer = _producer(spec)
    try:
        for index, message_spec in enumerate(spec["messages"]):
            try:
                result = producer.send_sync(_message(spec["topic"], message_spec))
            except Exception as exc:
                if not spec.get("keep_going"):
                    raise
                emit(event="send_failed", index=index, error=f"{type(exc).__name__}: {exc}")
                time.sleep(spec.get("retry_pause", 0.1))
                continue
            emit(
                event="sent",
                index=index,
                status=int(result.status),
                msg_id=result.msg_id,
                offset=result.offset,
            )
    finally:
        producer.shutdown()


def batch(spec: dict[str, Any]) -> None:
    producer = _producer(spec)
    try:
        messages = [_message(spec["topic"], m) for m in spec["messages"]]
        result = producer.send_batch(messages)
        emit(
            event="batch_sent",
            status=int(result.status),
            msg_id=result.msg_id,
            offset=result.offset,
            count=len(messages),
        )
    finally:
        producer.shutdown()


def consume(spec: dict[str, Any]) -> None:
    expect: int = spec["expect"]
    received = 0
    enough = threading.Event()
    count_lock = threading.Lock()

    def on_message(msg: RecvMessage) -> None:
        nonlocal received
        emit(
            event="received",
            topic=msg.topic,
            tags=_text(msg.tags),
            keys=_text(msg.keys),
            body=_text(msg.body),
            msg_id=msg.id,
            queue_id=msg.queue_id,
            queue_offset=msg.queue_offset,
            reconsume_times=msg.reconsume_times,
            uniq_key=_text(msg.get_property("UNIQ_KEY")),
            origin=_text(msg.get_property("origin")),
        )
        with count_lock:
            received += 1
            if received >= expect:
                enough.set()

    consumer = PushConsumer(spec["group"])
    consumer.set_namesrv_addr(spec["namesrv"])
    if spec.get("credentials"):
        consumer.set_session_credentials(*spec["credentials"])
    consumer.subscribe(spec["topic"], on_message, spec.get("expression", "*"))
    consumer.start()
    emit(event="started")
    timed_out = not enough.wait(spec["timeout"])
    time.sleep(spec.get("linger", 0.0))
    consumer.shutdown()
    with count_lock:
        emit(event="done", received=received, timed_out=timed_out)


def stream(spec: dict[str, Any]) -> None:
    producer = _producer(spec)
    run_file, stop_file = spec["run_file"], spec["stop_file"]
    number: int = spec["first"]
    sizes: list[int] = []

    def select(size: int, msg: RecvMessage, arg: Any) -> int:
        sizes.append(size)
        return int(hashing_queue_selector(size, msg, arg))  # the int passed to send_orderly

    running = False
    try:
        while not os.path.exists(stop_file):
            if not os.path.exists(run_file):
                if running:
                    emit(event="idle")
                    running = False
                time.sleep(0.01)
                continue
            running = True
            text = f"m{number:08d}|"
            msg = _message(spec["topic"], {"body": text + "c" * (100 + number % 900 - len(text))})
            sizes.clear()
            emit(event="invoke", number=number, wall=time.time(), mono=time.monotonic())
            try:
                result = producer.send_orderly(msg, number, retry_times=0, queue_selector=select)
            except Exception as exc:
                emit(
                    event="send_failed",
                    number=number,
                    error=f"{type(exc).__name__}: {exc}",
                    wall=time.time(),
                    mono=time.monotonic(),
                )
            else:
                emit(
                    event="sent",
                    number=number,
                    status=int(result.status),
                    offset=result.offset,
                    queue=number % sizes[-1],
                    wall=time.time(),
                    mono=time.monotonic(),
                )
            number += 1
    finally:
        producer.shutdown()


OPS = {"produce": produce, "batch": batch, "consume": consume, "stream": stream}


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        OPS[spec["op"]](spec)
    except Exception as exc:
        emit(event="error", error=f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    # The wrappers' __del__ shut down and destroy the native objects a second time at exit,
    # which the 2018 library does not always survive: everything is done, leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
