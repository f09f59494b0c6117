"""Helpers of the twin tests (tests/unit/test_speedups*.py) that need no compiled module."""

from __future__ import annotations

import sys
from typing import Any

# Every module that picks a twin, so that speedups.PURE_TWINS is complete once they are imported.
SELECTING_MODULES = (
    "tidemq.broker.transaction.messages",
    "tidemq.client.consumer.process_queue",
    "tidemq.client.protocol.headers",
    "tidemq.client.protocol.send_frame",
    "tidemq.client.consumer.received",
    "tidemq.client.message",
    "tidemq.client.remoting.frame",
    "tidemq.client.remoting.headers",
    "tidemq.client.remoting.signing",
    "tidemq.client.validators",
    "tidemq.client.spark.records",
    "tidemq.store.fast_scan",
    "tidemq.store.get_message",
    "tidemq.store.index",
    "tidemq.store.index_worker",
    "tidemq.store.javahash",
    "tidemq.store.property_predicate",
    "tidemq.store.record",
    "tidemq.store.tags",
)


# Every compiled module (pyproject.toml's ext-modules), one per subsystem.
COMPILED_MODULES = (
    "tidemq.store._hashing",
    "tidemq.store._fast_scan",
    "tidemq.store._record",
    "tidemq.store._index",
    "tidemq.store._get_message",
    "tidemq.client.remoting._codec",
    "tidemq.client.protocol._headers",
    "tidemq.client.consumer._received",
    "tidemq.client.spark._records",
    "tidemq.broker.transaction._records",
)


def selected(key: str) -> Any:
    """What `module.name` (or `module.Class.name`) of a twin key is bound to now."""
    module = max((m for m in SELECTING_MODULES if key.startswith(m + ".")), key=len)
    owner: Any = sys.modules[module]
    for part in key[len(module) + 1 :].split("."):
        owner = owner.__dict__[part] if isinstance(owner, type) else getattr(owner, part)
    return owner
