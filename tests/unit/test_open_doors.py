"""The start-up warnings of open doors (broker/open_doors.py), without daemons."""

from __future__ import annotations

from tidemq.broker.config import RemotingConfig
from tidemq.broker.open_doors import broker_doors, is_loopback, namesrv_doors
from tidemq.broker.remoting.tls import ClientAuth, TlsMode
from tidemq.ha.config import HAConfig

ANY = RemotingConfig(bind_address="0.0.0.0")
MUTUAL_TLS = RemotingConfig(
    bind_address="0.0.0.0",
    tls_server_mode=TlsMode.enforcing,
    tls_server_need_client_auth=ClientAuth.require,
)


def test_loopback_binds_open_no_door() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert is_loopback(host)
        remoting = RemotingConfig(bind_address=host)
        assert broker_doors(remoting, 10911, False, HAConfig(), 10912) == []
        assert namesrv_doors(remoting, 9876) == []
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_a_master_without_acl_or_ha_tls_has_two_doors() -> None:
    remoting, ha = broker_doors(ANY, 10911, False, HAConfig(), 10912)
    assert "remoting port 0.0.0.0:10911" in remoting and "aclEnable=true" in remoting
    assert "HA port 0.0.0.0:10912" in ha and "the group's slaves" in ha
    # A slave listens on no HA port.
    assert len(broker_doors(ANY, 10911, False, None, 10912)) == 1


def test_acl_closes_remoting_and_ha_tls_closes_ha() -> None:
    (ha,) = broker_doors(ANY, 10911, True, HAConfig(ha_allowed_slave_addresses="0.0.0.0/0"), 1)
    assert "haAllowedSlaveAddresses=0.0.0.0/0, each proving an admin ACL account" in ha
    tls = HAConfig(
        ha_tls_enable=True, ha_tls_cert_path="c", ha_tls_key_path="k", ha_tls_trust_cert_path="t"
    )
    assert broker_doors(ANY, 10911, True, tls, 10912) == []
    assert broker_doors(MUTUAL_TLS, 10911, False, tls, 10912) == []


def test_a_name_server_is_a_door_unless_mutual_tls() -> None:
    (door,) = namesrv_doors(ANY, 9876)
    assert "name server port 0.0.0.0:9876" in door
    assert namesrv_doors(MUTUAL_TLS, 9876) == []
