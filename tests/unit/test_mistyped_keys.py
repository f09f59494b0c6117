"""A configuration key that is a known one mistyped stops start-up with "did you mean"; any
other unknown key is only warned about (store/common/settings.py, brokerd, namesrvd)."""

from __future__ import annotations

import pytest

from tidemq.broker.daemons.brokerd import load_settings
from tidemq.broker.daemons.namesrvd import load_config
from tidemq.common.errors import ConfigError
from tidemq.common.settings import closest_key, edit_distance
from tidemq.store.config import BrokerRole


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("brokerRole", "brokerRole", 0),
        ("brokerRoll", "brokerRole", 1),
        ("brokerRol", "brokerRole", 1),
        ("brokerNmae", "brokerName", 2),  # a swap is two edits
        ("listenPort", "listenPortX", 1),
        ("flushDiskType", "flushType", 3),  # over the limit: reported as limit + 1
        ("a", "abcdefgh", 3),
    ],
)
def test_edit_distance(a: str, b: str, distance: int) -> None:
    assert edit_distance(a, b) == distance


@pytest.mark.parametrize(
    ("key", "near"),
    [
        ("brokerRoll", "brokerRole"),
        ("BrokerRole", "brokerRole"),
        ("BROKERROLE", "brokerRole"),  # case only: any number of letters
        ("brokerNmae", "brokerName"),
        ("flushDiskTyp", "flushDiskType"),
        ("somebodyElsesKey", None),
        ("kvConfigPath", None),
    ],
)
def test_closest_key(key: str, near: str | None) -> None:
    known = {"brokerRole", "brokerName", "flushDiskType", "listenPort"}
    assert closest_key(key, known) == near


def test_brokerd_refuses_a_mistyped_key_and_warns_about_others() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"brokerRoll": "SYNC_MASTER"})
    assert str(refused.value) == "unknown key brokerRoll: did you mean brokerRole?"
    with pytest.raises(ConfigError) as refused:
        load_settings({"FlushDiskType": "SYNC_FLUSH"})
    assert str(refused.value) == "unknown key FlushDiskType: did you mean flushDiskType?"
    settings = load_settings({"brokerRole": "SYNC_MASTER", "someoneElsesKey": "x"})
    assert settings.store.broker_role is BrokerRole.SYNC_MASTER
    assert settings.unknown == ["someoneElsesKey"]


def test_rocketmq_keys_tidemq_does_not_use_are_not_taken_for_typos() -> None:
    """putThreadPoolQueueCapacity is RocketMQ's, one edit from pullThreadPoolQueueCapacity:
    a RocketMQ properties file carrying it starts, with the usual warning."""
    assert closest_key("putThreadPoolQueueCapacity", {"pullThreadPoolQueueCapacity"})
    settings = load_settings({"putThreadPoolQueueCapacity": "10000"})
    assert settings.unknown == ["putThreadPoolQueueCapacity"]


def test_namesrvd_refuses_a_mistyped_key_and_warns_about_others() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, ["listenPrt=9999"])
    assert str(refused.value) == "unknown key listenPrt: did you mean listenPort?"
    _, _, unknown = load_config(None, ["kvConfigPath=/tmp/kv.json"])
    assert unknown == ["kvConfigPath"]
