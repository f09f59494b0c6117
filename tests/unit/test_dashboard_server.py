"""The dashboard's Host check (server.py): the names a loopback-bound dashboard answers."""

from __future__ import annotations

from tidemq.client.dashboard.cli import _loopback
from tidemq.client.dashboard.server import LOOPBACK_HOSTS, _host_name


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
