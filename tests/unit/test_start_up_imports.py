"""What a process imports to start, seen from a fresh interpreter: every broker start also
starts an index worker, and every `mqadmin` call is a start too. The `tidemq` package
resolves its re-exported client names at first use (client/_tidemq/__init__.py), and the SQL92
grammar is built by the first SQL92 subscription (broker/property_filter.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tidemq


def modules_after(statement: str) -> set[str]:
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_index_worker_imports_nothing_of_the_client() -> None:
    loaded = modules_after("import tidemq.store.index_worker")
    assert not {m for m in loaded if m.startswith("tidemq.client")}


def test_a_broker_starts_without_the_sql92_grammar_or_the_clients_producers() -> None:
    loaded = modules_after("import tidemq.broker.daemons.brokerd")
    unneeded = ("lark", "tidemq.broker.sql92", "tidemq.client.producer",
                "tidemq.client.consumer.push", "tidemq.client.consumer.pull",
                "tidemq.client.transaction")  # fmt: skip
    assert not {m for m in loaded if m.startswith(unneeded)}


def test_the_first_sql92_subscription_imports_the_compiler() -> None:
    loaded = modules_after(
        "from tidemq.broker.config import BrokerConfig\n"
        "from tidemq.broker.property_filter import property_filter\n"
        "property_filter(BrokerConfig(enable_property_filter=True), 'SQL92', 'a > 1')"
    )
    assert "tidemq.broker.sql92" in loaded


@pytest.mark.parametrize("name", tidemq.__all__)
def test_each_public_name_is_its_home_modules_object(name: str) -> None:
    value = getattr(tidemq, name)
    assert getattr(sys.modules[value.__module__], name) is value
    assert name in dir(tidemq)


def test_a_name_tidemq_does_not_have_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Producr'"):
        tidemq.Producr  # type: ignore[attr-defined]  # noqa: B018
