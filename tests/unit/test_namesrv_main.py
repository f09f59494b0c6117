"""The `namesrvd` command in-process (click's CliRunner), with `run` and logging set-up stubbed."""

from __future__ import annotations

import gc
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner

from tidemq.broker.config import NamesrvConfig, RemotingConfig
from tidemq.broker.daemons import namesrvd
from tidemq.broker.namesrv.gc_tuning import GC_THRESHOLDS
from tidemq.common.errors import ConfigError


@pytest.fixture
def run() -> Iterator[mock.MagicMock]:
    with (
        mock.patch.object(namesrvd, "run", return_value=0) as stub,
        mock.patch.object(namesrvd, "configure_logging"),
    ):
        yield stub


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=1111\nbindAddress=127.0.0.1\n# listenPort=3\nfoo=bar\n")
    namesrv, remoting, unknown = namesrvd.load_config(config, ["listenPort=2222"])
    assert (namesrv.listen_port, remoting.bind_address, unknown) == (2222, "127.0.0.1", ["foo"])
    assert namesrvd.load_config(None, []) == (NamesrvConfig(), RemotingConfig(), [])


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["brokerChannelExpiredTime=10"], "brokerChannelExpiredTime"),  # below its minimum
        (["bindAddress"], "bindAddress"),  # not key=value
        (["serverChannelMaxIdleTimeSeconds=x"], "serverChannelMaxIdleTimeSeconds"),
    ],
)
def test_bad_values_raise_naming_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        namesrvd.load_config(None, overrides)


def test_main_builds_the_configs_and_runs(run: mock.MagicMock) -> None:
    result = CliRunner().invoke(namesrvd.main, ["listenPort=1234", "orderMessageEnable=true"])
    assert result.exit_code == 0, result.output
    namesrv, remoting = run.call_args.args
    assert (namesrv.listen_port, namesrv.order_message_enable) == (1234, True)
    assert remoting == RemotingConfig()


def test_main_exits_with_runs_status(run: mock.MagicMock) -> None:
    run.return_value = 1  # e.g. the port is taken
    assert CliRunner().invoke(namesrvd.main, []).exit_code == 1


def test_print_config_does_not_run(run: mock.MagicMock) -> None:
    result = CliRunner().invoke(namesrvd.main, ["-p", "scanNotActiveBrokerInterval=200"])
    assert result.exit_code == 0
    assert "scanNotActiveBrokerInterval=200\n" in result.output
    assert result.output.splitlines()[0] == "listenPort=9876"
    run.assert_not_called()


def test_bad_value_is_one_line_and_status_1(run: mock.MagicMock) -> None:
    result = CliRunner().invoke(namesrvd.main, ["listenPort=-5"])
    assert result.exit_code == 1
    assert result.output == "namesrvd: listenPort: must be at least 0, got -5\n"
    run.assert_not_called()


def test_unknown_keys_are_warned_about(
    run: mock.MagicMock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tidemq.broker.namesrv"):
        result = CliRunner().invoke(namesrvd.main, ["kvConfigPath=/tmp/kv.json"])
    assert result.exit_code == 0
    assert "unknown configuration key kvConfigPath ignored" in caplog.text
    run.assert_called_once()


def test_the_name_server_runs_with_its_collector_thresholds() -> None:
    """`run` sets broker/namesrv/gc_tuning.py's thresholds before it serves (here it cannot
    listen: a port in use, so it returns at once)."""
    before = gc.get_threshold()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        namesrv = NamesrvConfig(listen_port=port)
        try:
            assert namesrvd.run(namesrv, RemotingConfig(bind_address="127.0.0.1")) == 1
            assert gc.get_threshold() == GC_THRESHOLDS
        finally:
            gc.set_threshold(*before)
