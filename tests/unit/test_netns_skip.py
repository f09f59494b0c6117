"""Why the network namespace tests skip (tests/support/netns.py): one line naming the cause."""

from __future__ import annotations

import pytest

from tests.support import netns


def test_without_root_the_reason_is_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns.sys, "platform", "linux")
    assert netns._find_skip_reason() == (
        "network namespaces and nftables need root (CI runs as root)"
    )


def test_missing_commands_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.sys, "platform", "linux")
    monkeypatch.setattr(netns.shutil, "which", lambda c: None if c != "ip" else "/sbin/ip")
    reason = netns._find_skip_reason()
    assert reason == "missing commands nft, iptables (make system-packages installs them)"
