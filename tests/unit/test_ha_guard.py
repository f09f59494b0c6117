"""The HA port's allow-list and TLS settings, without sockets."""

from __future__ import annotations

import pytest

from tidemq.common.errors import ConfigError
from tidemq.common.settings import from_properties
from tidemq.ha.config import HAConfig, address_allowed, parse_networks


def test_allow_list_entries_are_addresses_or_networks() -> None:
    networks = parse_networks(" 10.1.0.0/16; 192.168.0.7 ,, ::1 ")
    assert address_allowed(networks, "10.1.200.3")
    assert address_allowed(networks, "192.168.0.7")
    assert address_allowed(networks, "::ffff:192.168.0.7")  # IPv4-mapped
    assert address_allowed(networks, "::1")
    assert not address_allowed(networks, "192.168.0.8")
    assert not address_allowed(networks, "not an address")
    assert HAConfig().allowed_slave_networks == ()


@pytest.mark.parametrize(
    ("props", "reason"),
    [
        ({"haAllowedSlaveAddresses": "10.0.0.300"}, "haAllowedSlaveAddresses: '10.0.0.300'"),
        ({"haAllowedSlaveAddresses": "10.0.0.0/40"}, "haAllowedSlaveAddresses: '10.0.0.0/40'"),
        ({"haTlsEnable": "true"}, "haTlsCertPath: required"),
        (
            {"haTlsEnable": "true", "haTlsCertPath": "c", "haTlsKeyPath": "k"},
            "haTlsTrustCertPath: required",
        ),
    ],
)
def test_bad_ha_guard_settings_name_their_key(props: dict[str, str], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        from_properties(HAConfig, props)
