"""A store's files, read offline, as a read of a history (tests/support/history.py): the one
check that a slave's files hold every acknowledged message.

SYNC_MASTER's acknowledgement means the slave wrote the message to its CommitLog (it reports
what it appended, as RocketMQ's slave does; its flush follows). So between a kill of the slave
(or of the master) and anything that restarts, the slave's CommitLog files, as its page cache
holds them, must hold every message acknowledged so far at its queue and offset. The soak
(tests/fault/soak.py), the power cuts (tests/fault/powercut.py,
tests/fault/test_power_cut_sync_master.py) and the early-acknowledgement test read them here.

`stored_messages(store, topic, broker_name)` walks the CommitLog files (tests/fault/cq_check.py:
`walk_commitlog`, the store's codec; nothing written, a broker may keep running on the store)
and returns a read event's messages `[broker name, queue, offset, body id, store host, store
ms]` of `topic`'s records. `record_store_read` records them as a final read; `files_hold_acked`
records them and judges the whole history with `history.check`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.fault.cq_check import CommitLogFiles, walk_commitlog
from tests.support.ha_processes import id_of
from tests.support.history import Recorder, Report, check
from tidemq.store.record import decode_record


def stored_messages(
    store: Path, topic: str, broker_name: str, body_id: Callable[[bytes], Any] = id_of
) -> list[list[Any]]:
    found: list[list[Any]] = []
    with ExitStack() as stack:
        files = CommitLogFiles(store / "commitlog", stack)
        for record_topic, queue, offset, phy in walk_commitlog(files):
            if record_topic != topic:
                continue
            held = files.at(phy)
            assert held is not None
            base, mapped = held
            record = decode_record(mapped, phy - base)
            host = f"{record.store_host[0]}:{record.store_host[1]}"
            body = body_id(bytes(record.body))
            found.append([broker_name, queue, offset, body, host, record.store_timestamp])
    return found


def record_store_read(
    recorder: Recorder,
    store: Path,
    topic: str,
    broker_name: str,
    body_id: Callable[[bytes], Any] = id_of,
) -> int:
    """`store`'s files as a final read of `topic`; returns how many messages they hold."""
    op = recorder.invoke(
        "read", topic=topic, broker_name=broker_name, final=True, whole=True, store=str(store)
    )
    messages = stored_messages(store, topic, broker_name, body_id)
    recorder.complete(op, "ok", "read", messages=messages)
    return len(messages)


def files_hold_acked(
    recorder: Recorder,
    store: Path,
    topic: str,
    broker_name: str,
    body_id: Callable[[bytes], Any] = id_of,
    events: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = lambda e: e,
) -> Report:
    """Read a slave's files as the last final read and judge the whole history (`events` may
    leave out what the caller no longer expects): every acknowledged message must be in them at
    its queue and offset (`lost`), and nothing there unsent or at more positions than its sends'
    attempts explain (`duplicate`)."""
    record_store_read(recorder, store, topic, broker_name, body_id)
    return check(events(recorder.events))
