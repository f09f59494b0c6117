"""Messages for store and HA tests.

`message(i, topic=, queue_id=, size=, **props)`: message number `i`, whose body names it:
"{topic}-{queue_id}-{i}" repeated 8 times, or repeated and cut to exactly `size` bytes; the
keyword arguments are its properties (KEYS, TAGS, DELAY, WAIT, ...).
"""

from __future__ import annotations

from tidemq.store.record import MessageToStore, encode_properties


def message(
    i: int, *, topic: str = "T", queue_id: int = 0, size: int | None = None, **props: str
) -> MessageToStore:
    label = f"{topic}-{queue_id}-{i}".encode()
    body = label * 8 if size is None else (label * (size // len(label) + 1))[:size]
    return MessageToStore(topic, queue_id, body, encode_properties(props))
