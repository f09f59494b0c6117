"""One load process of the C++ client bench: `send_sync` with the RocketMQ C++ client in a loop.

    python tests/bench/cpp_sender.py '<json spec>'

Spec: `namesrv`, `group`, `topic`, `body` (a text: the binding passes the body as a C string),
`tags`, `warmup` (sends before the measured run), `seconds` and optionally `messages` (the
measured run stops after whichever comes first), optional `send_timeout_ms`.

Protocol, one JSON object per line on stdout:

1. after the producer started and `warmup` sends succeeded: `{"event": "ready"}`; then it waits
   for any line on stdin (the parent releases every sender at once, so the broker's CPU can be
   read at the start of the measured run);
2. after the measured run: `{"event": "done", "sent": n, "failed": {status: count},
   "started": t0, "ended": t1, "cpu": s, "latencies_us": [...]}`. `sent` counts SEND_OK
   results only, `failed` every other status by name; `started`/`ended` are
   `time.monotonic()` (one clock for every process of the machine) around the run; `cpu` is
   the CPU seconds this process (the Python binding and the native client's threads) spent in
   it; `latencies_us` is each `send_sync` call, SEND_OK or not, in whole microseconds, in
   send order.

A failure prints `{"event": "error", "error": ...}` and exits with status 1. The native client
logs under `$HOME/logs/rocketmq-cpp`: the parent points HOME at a temporary directory.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from rocketmq.client import Message, Producer, SendStatus


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _message(spec: dict[str, Any]) -> Message:
    message = Message(spec["topic"])
    message.set_tags(spec["tags"])
    message.set_body(spec["body"])
    return message


def run(spec: dict[str, Any]) -> None:
    producer = Producer(spec["group"], timeout=spec.get("send_timeout_ms", 5000))
    producer.set_namesrv_addr(spec["namesrv"])
    producer.start()
    try:
        for _ in range(spec["warmup"]):
            result = producer.send_sync(_message(spec))
            if result.status is not SendStatus.OK:
                raise RuntimeError(f"warm-up send: {result.status.name}")
        emit(event="ready")
        sys.stdin.readline()
        latencies: list[int] = []
        failed: dict[str, int] = {}
        sent = 0
        limit = spec.get("messages") or sys.maxsize
        clock = time.perf_counter
        started = time.monotonic()
        cpu_before = time.process_time()
        deadline = clock() + spec["seconds"]
        while len(latencies) < limit:
            message = _message(spec)
            before = clock()
            result = producer.send_sync(message)
            after = clock()
            latencies.append(int((after - before) * 1e6))
            if result.status is SendStatus.OK:
                sent += 1
            else:
                failed[result.status.name] = failed.get(result.status.name, 0) + 1
            if after >= deadline:
                break
        ended = time.monotonic()
        cpu = time.process_time() - cpu_before
        emit(
            event="done",
            sent=sent,
            failed=failed,
            started=started,
            ended=ended,
            cpu=cpu,
            latencies_us=latencies,
        )
    finally:
        producer.shutdown()


def main() -> None:
    try:
        run(json.loads(sys.argv[1]))
    except Exception as exc:
        emit(event="error", error=f"{type(exc).__name__}: {exc}")
        os._exit(1)
    # The wrappers' __del__ destroy the native objects a second time at exit, which the 2018
    # library does not always survive (see tests/integration/cpp_peer.py): leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
