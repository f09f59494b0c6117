"""Controller mode's keys (ha/controller_config.py): RocketMQ 5's defaults, and a bad value stops
`brokerd` with one line naming the key."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tidemq.broker.daemons.brokerd import load_settings, main
from tidemq.common.errors import ConfigError

CONTROLLER = {
    "enableControllerMode": "true",
    "controllerAddr": "127.0.0.1:2379;127.0.0.1:22379",
    "brokerRole": "SYNC_MASTER",
    "brokerId": "2",
}


def test_defaults_are_rocketmq_5s() -> None:
    controller = load_settings({}).controller
    assert controller.enable_controller_mode is False
    assert controller.ha_max_time_slave_not_catchup == 15_000
    assert controller.min_in_sync_replicas == 1
    assert controller.all_ack_in_sync_state_set is True
    assert controller.enable_elect_unclean_master is False
    assert controller.broker_election_priority == 2**31 - 1


def test_controller_mode_keeps_the_brokers_own_id_and_reads_the_endpoints() -> None:
    settings = load_settings(dict(CONTROLLER))
    assert settings.broker.broker_id == 2  # not forced to 0 as a 4.x master's is
    assert settings.controller.endpoints == [("127.0.0.1", 2379), ("127.0.0.1", 22379)]
    assert settings.unknown == []


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"controllerAddr": ""}, "controllerAddr"),
        ({"controllerAddr": "127.0.0.1"}, "controllerAddr"),
        ({"controllerAddr": "127.0.0.1:x"}, "controllerAddr"),
        ({"brokerId": "0"}, "brokerId"),
        ({"brokerRole": "SLAVE"}, "brokerRole"),
        ({"minInSyncReplicas": "0"}, "minInSyncReplicas"),
        ({"haMaxTimeSlaveNotCatchup": "-1"}, "haMaxTimeSlaveNotCatchup"),
        ({"allAckInSyncStateSet": "maybe"}, "allAckInSyncStateSet"),
        ({"brokerElectionPriority": "-1"}, "brokerElectionPriority"),
        ({"masterLeaseTtlSeconds": "1"}, "masterLeaseTtlSeconds"),
        ({"masterLeaseSafetyMargin": "3000"}, "masterLeaseSafetyMargin"),
        ({"masterLeaseKeepAliveInterval": "1500"}, "masterLeaseKeepAliveInterval"),
    ],
)
def test_a_bad_value_names_its_key(change: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=f"^{key}"):
        load_settings({**CONTROLLER, **change})


def test_brokerd_stops_with_one_line() -> None:
    result = CliRunner().invoke(main, ["-p", "enableControllerMode=true"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "brokerd: controllerAddr: required with enableControllerMode=true"
    ]
    # a bad address is refused also when controller mode is off: a typo does not wait for it
    result = CliRunner().invoke(main, ["-p", "controllerAddr=nohost"])
    assert result.exit_code == 1 and "controllerAddr" in result.output


def test_the_effective_configuration_lists_the_keys() -> None:
    result = CliRunner().invoke(main, ["-p", *(f"{k}={v}" for k, v in CONTROLLER.items())])
    assert result.exit_code == 0, result.output
    assert "enableControllerMode=true" in result.output
    assert "masterLeaseTtlSeconds=3" in result.output
