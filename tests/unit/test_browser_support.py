"""tests/support/browser.py: where Chromium is missing, the browser tests get one reason that
says how to install it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.browser import chromium_paths


def test_a_machine_without_chromium_gets_one_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = chromium_paths()
    assert reason == (
        "no chromium and chromedriver on this machine: `make install` as root installs Debian's "
        "chromium and chromium-driver (or: apt-get install chromium chromium-driver)"
    )


def test_both_binaries_are_found_on_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("chromium", "chromedriver"):
        binary = tmp_path / name
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium_paths() == (str(tmp_path / "chromium"), str(tmp_path / "chromedriver"))
    (tmp_path / "chromedriver").unlink()
    assert str(chromium_paths()).startswith("no chromedriver on this machine")
