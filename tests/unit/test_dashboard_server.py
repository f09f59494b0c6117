"""The dashboard's Host check (server.py): the names a loopback-bound dashboard answers; its
write mode decided once the brokers said whether they check ACL."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tidemq.client.admin.api import AdminClient
from tidemq.client.dashboard import views
from tidemq.client.dashboard.cli import _loopback
from tidemq.client.dashboard.server import LOOPBACK_HOSTS, WriteMode, _host_name


def test_host_names_without_their_ports() -> None:
    assert _host_name("127.0.0.1:8082") == "127.0.0.1"
    assert _host_name("localhost") == "localhost"
    assert _host_name("[::1]:8082") == "[::1]"
    assert _host_name("evil.example:80") == "evil.example"
    answered = ("localhost:1", "127.0.0.1:2", "[::1]:3", "x.example:4")
    assert [_host_name(h) in LOOPBACK_HOSTS for h in answered] == [True, True, True, False]


def test_which_bind_addresses_are_loopback() -> None:
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("192.0.2.7") and not _loopback("host")


async def test_the_write_mode_is_decided_once_a_broker_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found in review: whether the answer was final was read from its reason's words."""
    answers: list[dict[str, Any]] = [
        {"brokers": []},
        {"brokers": [{"brokerName": "b", "brokerId": 0, "acl": "off"}]},
        {"brokers": [{"brokerName": "b", "brokerId": 0, "acl": "on"}]},
    ]

    async def acl_view(admin: AdminClient) -> dict[str, Any]:
        return answers.pop(0)

    monkeypatch.setattr(views, "acl_view", acl_view)
    mode = WriteMode(None, "")
    admin = cast(AdminClient, object())
    assert (await mode.decide(admin))[0] is False  # nobody registered: asked again
    assert (await mode.decide(admin))[0] is True
    assert await mode.decide(admin) == (
        True,
        "no broker checks ACL and it listens on loopback only",
    )
    assert len(answers) == 1  # decided: the brokers are not asked again
